//! `ALTER TABLE t SET (placement = 'pp')`: a table's placement over the
//! topology's memory nodes (seed 002 §4.2), and its rows copied once into
//! memory placed accordingly.
//!
//! The rows are dealt to nodes as the executor's scans deal them
//! ([`stride_exec::placement::extents`]); each extent (rows of one block on
//! one node) is copied into a mapping bound to its node — interleaved over
//! every node for `interleave`, left to first touch for `first-touch` —
//! through the engine's [`PlacedMemory`](stride_storage::placement::PlacedMemory):
//! the kernel's `mbind` where the node exists, a logical record where it
//! does not (fake and synthetic topologies, and a one-node machine asked
//! for node 1). The table snapshot that replaces the old one holds the
//! placed blocks (no copy per query), its placement, and each column's
//! page-socket mapping (`stride.placement`). `placement = default` forgets
//! the placement (scans follow the session's `stride.placement` again).
//!
//! Only the table's owner (or a superuser) may place it. Appended blocks
//! are not placed (they stay where the writer touched them) until the next
//! `ALTER TABLE … SET (placement = …)`.

use std::sync::Arc;

use datafusion_sql::sqlparser::ast::{AlterTableOperation, Expr, SqlOption, Statement, Value};
use stride_exec::placement::{extents, Placement};
use stride_storage::catalog::CatalogOp;
use stride_storage::placement::{
    Backing, MemPolicy, NodeId, NodeSet, PageSocketMapping, PlacedMemory, PlacedTable,
};
use stride_storage::Table;

use super::{command, Session, StatementOutput};
use crate::error::{Result, SqlError};

/// A parsed `ALTER TABLE … SET (placement = …)`.
#[derive(Debug, Clone)]
pub struct PlaceStatement {
    pub(super) table: datafusion_common::TableReference,
    /// `None`: `default`.
    pub(super) placement: Option<Placement>,
}

/// `Some` when `s` is an `ALTER TABLE` that sets `placement` (an error when
/// it sets anything else as well, or an unknown placement).
pub(super) fn parse(s: &Statement) -> Option<Result<PlaceStatement>> {
    let Statement::AlterTable(alter) = s else {
        return None;
    };
    let [AlterTableOperation::SetOptionsParens { options }] = alter.operations.as_slice() else {
        return None;
    };
    let option = |o: &SqlOption| match o {
        SqlOption::KeyValue { key, value } if key.value.eq_ignore_ascii_case("placement") => {
            Some(value.clone())
        }
        _ => None,
    };
    let values: Vec<Expr> = options.iter().filter_map(option).collect();
    if values.is_empty() {
        return None;
    }
    Some((|| {
        if values.len() != options.len() || values.len() != 1 {
            return Err(SqlError::Unsupported(
                "ALTER TABLE … SET (…) with options other than one placement".into(),
            ));
        }
        let name = match &values[0] {
            Expr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
                other => other.to_string(),
            },
            Expr::Identifier(i) => i.value.clone(),
            other => other.to_string(),
        };
        let placement = if name.eq_ignore_ascii_case("default") {
            None
        } else {
            Some(name.parse::<Placement>().map_err(|e| {
                SqlError::setting(crate::error::SettingKind::InvalidValue, e.to_string())
            })?)
        };
        let table = datafusion_common::TableReference::from(
            alter
                .name
                .0
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(".")
                .as_str(),
        );
        Ok(PlaceStatement { table, placement })
    })())
}

impl Session {
    /// Runs a parsed placement statement (see the module docs).
    pub(super) fn place_table(&mut self, stmt: &PlaceStatement) -> Result<StatementOutput> {
        let (schema, name) = self.table_name(&stmt.table);
        self.engine.roles.check_owner(self.role, &schema, &name)?;
        let current = self.catalog_view().table(&schema, &name)?;
        let next = match stmt.placement {
            None => current.unplaced(),
            Some(placement) => place(
                &current,
                placement,
                self.engine.runtime().nodes(),
                self.engine.runtime().placed_memory(),
            )?,
        };
        self.write_op(CatalogOp::PutTable {
            schema,
            table: Arc::new(next),
        })?;
        Ok(command("ALTER TABLE"))
    }
}

/// `table`'s rows copied into memory placed as `placement` deals them over
/// `nodes`.
fn place(
    table: &Table,
    placement: Placement,
    nodes: &[usize],
    memory: &Arc<PlacedMemory>,
) -> Result<Table> {
    let node_id = |n: usize| -> Result<NodeId> {
        NodeId::try_from(n)
            .map_err(|_| SqlError::Unsupported(format!("placing on node {n} (at most 256 nodes)")))
    };
    let all = NodeSet::of(
        nodes
            .iter()
            .map(|&n| node_id(n))
            .collect::<Result<Vec<_>>>()?,
    );
    let fallbacks_before = memory.fallbacks().count;
    let blocks = table.blocks();
    let schema = table.schema();
    let mut columns: Vec<(String, PageSocketMapping)> = Vec::new();
    let mut placed_blocks = Vec::new();
    for extent in extents(table.name(), blocks, placement, nodes) {
        let policy = match (placement, extent.node) {
            (Placement::FirstTouch, _) => MemPolicy::FirstTouch,
            (_, None) => MemPolicy::Interleave(all),
            (_, Some(n)) => MemPolicy::OnNode(node_id(n)?),
        };
        let slice = blocks[extent.block].slice(extent.rows.start, extent.len());
        let placed = memory
            .place_batch(&slice, &policy)
            .map_err(|e| SqlError::Internal(format!("placing {}: {e}", table.name())))?;
        for (i, column) in placed.columns.iter().enumerate() {
            let range = &column.range;
            let pages = placed.psm.subset(range.start, range.end - range.start);
            match columns.get_mut(i) {
                Some((_, psm)) => psm
                    .union(&pages)
                    .map_err(|e| SqlError::Internal(format!("placing {}: {e}", table.name())))?,
                None => columns.push((schema.field(i).name().clone(), pages)),
            }
        }
        placed_blocks.push(placed.batch);
    }
    let logical =
        memory.config().backing == Backing::Fake || memory.fallbacks().count > fallbacks_before;
    Ok(table.placed(
        placed_blocks,
        PlacedTable {
            placement,
            columns,
            logical,
        },
    )?)
}

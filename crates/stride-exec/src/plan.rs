//! The physical plan: a tree of operators with their properties (expressions,
//! schemas, join sides). Runtime state lives in the operators and sinks that
//! [`crate::pipeline`] creates from it.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::SortOptions;
use arrow::datatypes::SchemaRef;
use datafusion_expr::JoinType;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use datafusion_physical_expr::PhysicalExpr;
use stride_storage::Table;

pub type ExprRef = Arc<dyn PhysicalExpr>;

/// Which input of a join the hash table is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildSide {
    Left,
    Right,
}

/// An aggregate of an aggregation node.
#[derive(Debug, Clone)]
pub struct AggregateSpec {
    pub function: Arc<AggregateFunctionExpr>,
    /// `FILTER (WHERE …)` of the aggregate, evaluated on the input.
    pub filter: Option<ExprRef>,
}

/// A sort key.
#[derive(Debug, Clone)]
pub struct SortKey {
    pub expr: ExprRef,
    pub options: SortOptions,
}

/// Properties of a hash join.
#[derive(Debug)]
pub struct HashJoinPlan {
    pub left: PhysicalPlan,
    pub right: PhysicalPlan,
    /// Equi-join keys: (expression on left, expression on right).
    pub on: Vec<(ExprRef, ExprRef)>,
    /// Extra non-equi condition over the concatenation left ++ right.
    pub filter: Option<ExprRef>,
    pub join_type: JoinType,
    pub build_side: BuildSide,
    /// NULL keys compare equal (set operations) instead of never matching.
    pub null_equals_null: bool,
    /// `NOT IN` semantics for anti joins: a NULL key on the build side empties
    /// the result, a NULL probe key never qualifies.
    pub null_aware: bool,
    pub schema: SchemaRef,
}

/// A physical plan node. Every node's output batches have the columns of
/// `schema()` in order (field names and nullability relaxed, see
/// [`crate::nullable_schema`]).
#[derive(Debug)]
pub enum PhysicalPlan {
    /// Reads columns `projection` of a table snapshot.
    Scan {
        table: Arc<Table>,
        projection: Vec<usize>,
        schema: SchemaRef,
    },
    /// Literal rows (VALUES, a one-row relation, an empty relation).
    Values {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    Filter {
        input: Box<PhysicalPlan>,
        predicate: ExprRef,
    },
    Projection {
        input: Box<PhysicalPlan>,
        exprs: Vec<ExprRef>,
        schema: SchemaRef,
    },
    HashJoin(Box<HashJoinPlan>),
    /// Hash aggregation; output = group columns ++ aggregate columns.
    Aggregate {
        input: Box<PhysicalPlan>,
        group_by: Vec<ExprRef>,
        aggregates: Vec<AggregateSpec>,
        schema: SchemaRef,
    },
    /// Sort; with `fetch`, a top-k.
    Sort {
        input: Box<PhysicalPlan>,
        keys: Vec<SortKey>,
        fetch: Option<usize>,
    },
    Limit {
        input: Box<PhysicalPlan>,
        skip: usize,
        fetch: Option<usize>,
    },
    /// UNION ALL of inputs with the same column types.
    Union {
        inputs: Vec<PhysicalPlan>,
        schema: SchemaRef,
    },
}

impl PhysicalPlan {
    pub fn schema(&self) -> SchemaRef {
        match self {
            PhysicalPlan::Scan { schema, .. }
            | PhysicalPlan::Values { schema, .. }
            | PhysicalPlan::Projection { schema, .. }
            | PhysicalPlan::Aggregate { schema, .. }
            | PhysicalPlan::Union { schema, .. } => schema.clone(),
            PhysicalPlan::HashJoin(j) => j.schema.clone(),
            PhysicalPlan::Filter { input, .. }
            | PhysicalPlan::Sort { input, .. }
            | PhysicalPlan::Limit { input, .. } => input.schema(),
        }
    }

    fn fmt_indent(&self, f: &mut fmt::Formatter<'_>, depth: usize) -> fmt::Result {
        let pad = "  ".repeat(depth);
        match self {
            PhysicalPlan::Scan {
                table, projection, ..
            } => {
                let cols: Vec<&str> = projection
                    .iter()
                    .map(|&i| table.schema().field(i).name().as_str())
                    .collect();
                writeln!(
                    f,
                    "{pad}Scan {} [{}] rows={}",
                    table.name(),
                    cols.join(", "),
                    table.num_rows()
                )
            }
            PhysicalPlan::Values { batches, .. } => {
                let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                writeln!(f, "{pad}Values rows={rows}")
            }
            PhysicalPlan::Filter { input, predicate } => {
                writeln!(f, "{pad}Filter {predicate}")?;
                input.fmt_indent(f, depth + 1)
            }
            PhysicalPlan::Projection { input, exprs, .. } => {
                let e: Vec<String> = exprs.iter().map(|e| e.to_string()).collect();
                writeln!(f, "{pad}Projection {}", e.join(", "))?;
                input.fmt_indent(f, depth + 1)
            }
            PhysicalPlan::HashJoin(j) => {
                let on: Vec<String> = j.on.iter().map(|(l, r)| format!("{l} = {r}")).collect();
                write!(
                    f,
                    "{pad}HashJoin {:?} build={:?} on [{}]",
                    j.join_type,
                    j.build_side,
                    on.join(", ")
                )?;
                if let Some(filter) = &j.filter {
                    write!(f, " filter {filter}")?;
                }
                writeln!(f)?;
                j.left.fmt_indent(f, depth + 1)?;
                j.right.fmt_indent(f, depth + 1)
            }
            PhysicalPlan::Aggregate {
                input,
                group_by,
                aggregates,
                ..
            } => {
                let g: Vec<String> = group_by.iter().map(|e| e.to_string()).collect();
                let a: Vec<String> = aggregates
                    .iter()
                    .map(|a| a.function.name().to_string())
                    .collect();
                writeln!(
                    f,
                    "{pad}Aggregate group=[{}] aggr=[{}]",
                    g.join(", "),
                    a.join(", ")
                )?;
                input.fmt_indent(f, depth + 1)
            }
            PhysicalPlan::Sort { input, keys, fetch } => {
                let k: Vec<String> = keys
                    .iter()
                    .map(|k| {
                        format!(
                            "{} {}",
                            k.expr,
                            if k.options.descending { "DESC" } else { "ASC" }
                        )
                    })
                    .collect();
                match fetch {
                    Some(n) => writeln!(f, "{pad}TopK {n} [{}]", k.join(", "))?,
                    None => writeln!(f, "{pad}Sort [{}]", k.join(", "))?,
                }
                input.fmt_indent(f, depth + 1)
            }
            PhysicalPlan::Limit { input, skip, fetch } => {
                writeln!(f, "{pad}Limit skip={skip} fetch={fetch:?}")?;
                input.fmt_indent(f, depth + 1)
            }
            PhysicalPlan::Union { inputs, .. } => {
                writeln!(f, "{pad}Union")?;
                for i in inputs {
                    i.fmt_indent(f, depth + 1)?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for PhysicalPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_indent(f, 0)
    }
}

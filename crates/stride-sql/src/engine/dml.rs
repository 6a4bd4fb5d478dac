//! `UPDATE` and `DELETE`: a table is rewritten as a new snapshot.
//!
//! Tables are immutable snapshots, so a change of rows in place is a new
//! snapshot of the whole table, put into the session's transaction
//! (`CatalogOp::PutTable`; with a data directory the log holds the new
//! snapshot, or names the bulk file it was written to when it is large). Both statements run as ordinary parallel queries over the
//! table's current snapshot in the transaction's view:
//!
//! * `DELETE FROM t WHERE p` keeps `SELECT * FROM t WHERE p IS NOT TRUE`
//!   (a row whose condition is NULL stays, as in PostgreSQL); without
//!   `WHERE` nothing is kept;
//! * `UPDATE t SET c = e WHERE p` is one projection over the table:
//!   `CASE WHEN p THEN e ELSE c END` for every column (DataFusion's
//!   assignment, already cast to the column's type, or the column itself),
//!   and `p IS TRUE` to count the changed rows — `p` is evaluated once per
//!   row, so a volatile condition (`random() < 0.1`) changes the rows it
//!   picked and counts them right.
//!
//! A condition or assignment with a subquery (`WHERE id IN (SELECT …)`)
//! cannot be negated or placed inside `CASE` (that needs a mark join, which
//! Stride does not have yet): then the rows that match are computed by
//! DataFusion's own plan (`Filter(p, t)` — a semi join), and the rows kept
//! are `t EXCEPT ALL` those (an anti join on whole rows: copies of a row
//! match or fail the condition together).
//!
//! The new rows are cast to the table's column types and checked against
//! its `NOT NULL` columns when the snapshot is built. A concurrent writer of
//! the same table makes the later commit fail with 40001 (the transaction's
//! first-committer-wins rule for rewritten tables). `UPDATE … FROM` (a join
//! in the plan) is refused with 0A000.

use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch};
use datafusion_common::tree_node::TreeNode;
use datafusion_expr::logical_plan::{DmlStatement, Filter, Projection};
use datafusion_expr::{Case, Expr, LogicalPlan, LogicalPlanBuilder};
use stride_storage::Table;

use super::{command, Session, StatementOutput};
use crate::error::{Result, SqlError};

/// A DML input split into its condition and the plan it filters.
struct Target {
    /// `WHERE`, if there is one.
    predicate: Option<Expr>,
    /// The scan of the target table (under an alias, if one was given).
    scan: Arc<LogicalPlan>,
}

/// Splits `Filter(p, scan)` or a bare scan; anything else (a join from
/// `UPDATE … FROM`) is refused.
fn target(plan: &LogicalPlan, statement: &str) -> Result<Target> {
    let (predicate, scan) = match plan {
        LogicalPlan::Filter(f) => (Some(f.predicate.clone()), f.input.clone()),
        other => (None, Arc::new(other.clone())),
    };
    let mut base = scan.as_ref();
    while let LogicalPlan::SubqueryAlias(a) = base {
        base = a.input.as_ref();
    }
    if !matches!(base, LogicalPlan::TableScan(_)) {
        return Err(SqlError::Unsupported(format!(
            "{statement} with more than one table (FROM or USING)"
        )));
    }
    Ok(Target { predicate, scan })
}

impl Session {
    /// `DELETE`: keeps the rows whose condition is not true.
    pub(super) fn delete(&mut self, dml: DmlStatement) -> Result<StatementOutput> {
        let (schema, table) = self.table_name(&dml.table_name);
        let current = self.catalog_view().table(&schema, &table)?;
        let t = target(&dml.input, "DELETE")?;
        let kept = match t.predicate {
            Some(p) => self.rows_where_not_true(p, t.scan)?,
            None => Vec::new(),
        };
        let kept_rows: usize = kept.iter().map(|b| b.num_rows()).sum();
        let deleted = current.num_rows().saturating_sub(kept_rows);
        if deleted > 0 {
            let next = Table::new(current.name(), current.schema().clone(), kept)?;
            self.put_table(&schema, next, true)?;
        }
        Ok(command(&format!("DELETE {deleted}")))
    }

    /// `UPDATE`: every row through `CASE WHEN p THEN new ELSE old END`.
    pub(super) fn update(&mut self, dml: DmlStatement) -> Result<StatementOutput> {
        let (schema, table) = self.table_name(&dml.table_name);
        let current = self.catalog_view().table(&schema, &table)?;
        let LogicalPlan::Projection(projection) = dml.input.as_ref() else {
            return Err(SqlError::Unsupported("this form of UPDATE".into()));
        };
        let t = target(&projection.input, "UPDATE")?;
        let with_subquery = projection.expr.iter().any(has_subquery)
            || t.predicate.as_ref().is_some_and(has_subquery);
        let (blocks, updated) = match t.predicate {
            None => {
                let changed = self.run_query(&self.optimize(dml.input.as_ref().clone())?)?;
                let n = changed.num_rows();
                (changed.batches, n)
            }
            Some(p) if with_subquery => {
                let changed = self.run_query(&self.optimize(dml.input.as_ref().clone())?)?;
                let n = changed.num_rows();
                let mut blocks = self.rows_where_not_true(p, t.scan)?;
                blocks.extend(changed.batches);
                (blocks, n)
            }
            Some(p) => self.update_in_one_pass(&projection.expr, p, t.scan)?,
        };
        if updated == 0 {
            return Ok(command("UPDATE 0"));
        }
        let next = Table::new(current.name(), current.schema().clone(), blocks)?;
        self.put_table(&schema, next, true)?;
        Ok(command(&format!("UPDATE {updated}")))
    }

    /// The table's rows with `assignments` applied where `predicate` holds,
    /// and how many it held for.
    fn update_in_one_pass(
        &mut self,
        assignments: &[Expr],
        predicate: Expr,
        scan: Arc<LogicalPlan>,
    ) -> Result<(Vec<RecordBatch>, usize)> {
        let columns = scan.schema().columns();
        if columns.len() != assignments.len() {
            return Err(SqlError::Internal(
                "an UPDATE plan without one expression per column".into(),
            ));
        }
        let mut exprs: Vec<Expr> = assignments
            .iter()
            .zip(columns)
            .map(|(assigned, old)| {
                let (new, name) = match assigned {
                    Expr::Alias(a) => (a.expr.as_ref().clone(), a.name.clone()),
                    other => (other.clone(), old.name.clone()),
                };
                let case = Expr::Case(Case::new(
                    None,
                    vec![(Box::new(predicate.clone()), Box::new(new))],
                    Some(Box::new(Expr::Column(old))),
                ));
                case.alias(name)
            })
            .collect();
        exprs.push(Expr::IsTrue(Box::new(predicate)).alias(CHANGED));
        let plan = LogicalPlan::Projection(Projection::try_new(exprs, scan)?);
        let out = self.run_query(&self.optimize(plan)?)?;
        let mut updated = 0;
        let mut blocks = Vec::with_capacity(out.batches.len());
        for mut batch in out.batches {
            let flag = batch.remove_column(batch.num_columns() - 1);
            let flag = flag.as_boolean_opt().ok_or_else(|| {
                SqlError::Internal("an UPDATE's change flag is not boolean".into())
            })?;
            updated += flag.true_count();
            blocks.push(batch);
        }
        Ok((blocks, updated))
    }

    /// The rows of `scan` for which `predicate` is false or NULL.
    fn rows_where_not_true(
        &mut self,
        predicate: Expr,
        scan: Arc<LogicalPlan>,
    ) -> Result<Vec<RecordBatch>> {
        let plan = if has_subquery(&predicate) {
            let matched = LogicalPlan::Filter(Filter::try_new(predicate, scan.clone())?);
            LogicalPlanBuilder::except(scan.as_ref().clone(), matched, true)?
        } else {
            let keep = Expr::IsNotTrue(Box::new(predicate));
            LogicalPlan::Filter(Filter::try_new(keep, scan)?)
        };
        Ok(self.run_query(&self.optimize(plan)?)?.batches)
    }
}

/// The name of the change flag an UPDATE's projection adds.
const CHANGED: &str = "__stride_update_changed";

/// Whether `e` holds a subquery.
fn has_subquery(e: &Expr) -> bool {
    e.exists(|e| {
        Ok(matches!(
            e,
            Expr::InSubquery(_) | Expr::Exists(_) | Expr::ScalarSubquery(_)
        ))
    })
    .unwrap_or(true)
}

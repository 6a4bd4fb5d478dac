//! Correlated scalar subqueries that DataFusion leaves in the plan (it
//! decorrelates only those whose correlation is equalities under an
//! aggregate): run once per distinct combination of the outer values they
//! read, when the outer side has few of them, and replaced by a `CASE`
//! over those combinations.
//!
//! Catalog queries of clients are the typical case (`array(SELECT rolname
//! FROM pg_roles WHERE oid = ANY(pol.polroles))` over the policies of one
//! table): small outer sides, subqueries with predicates that are no
//! equalities. A large outer side is refused (0A000) rather than run as a
//! nested loop of queries.

use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{Column, ScalarValue};
use datafusion_expr::{
    BinaryExpr, Case, Expr, LogicalPlan, LogicalPlanBuilder, Operator, Subquery,
};

use super::Session;
use crate::error::{Result, SqlError};

/// The most distinct outer combinations a subquery is run for.
pub const MAX_OUTER_VALUES: usize = 1024;

impl Session {
    /// `sq`, correlated with columns of `input`, as a CASE over the values
    /// it has for each distinct combination of those columns in `input`.
    pub(super) fn apply_correlated(&self, sq: &Subquery, input: &LogicalPlan) -> Result<Expr> {
        let columns: Vec<Column> = sq
            .outer_ref_columns
            .iter()
            .filter_map(|e| match e {
                Expr::OuterReferenceColumn(_, c) => Some(c.clone()),
                _ => None,
            })
            .fold(Vec::new(), |mut acc, c| {
                if !acc.contains(&c) {
                    acc.push(c);
                }
                acc
            });
        let result_type = sq.subquery.schema().field(0).data_type().clone();
        let distinct = LogicalPlanBuilder::from(input.clone())
            .project(columns.iter().cloned().map(Expr::Column))?
            .distinct()?
            .build()?;
        let distinct = self.optimize(distinct)?;
        let outer = self.run_query(&distinct)?;
        if outer.num_rows() > MAX_OUTER_VALUES {
            return Err(SqlError::Unsupported(format!(
                "correlated scalar subquery over more than {MAX_OUTER_VALUES} distinct outer values"
            )));
        }
        let mut when_then = Vec::new();
        for batch in &outer.batches {
            for row in 0..batch.num_rows() {
                let values = (0..columns.len())
                    .map(|i| ScalarValue::try_from_array(batch.column(i), row))
                    .collect::<datafusion_common::Result<Vec<_>>>()?;
                let bound = bind_outer(&sq.subquery, &columns, &values)?;
                // Optimized once more, the subquery may type its value
                // wider than the outer plan does (`sum(int4)`, typed
                // `int8` there, in `numeric` the second time): the value
                // as the outer plan's type, refused where it does not fit.
                let value = self.scalar_value(&bound)?;
                let value = if value.data_type() == result_type {
                    value
                } else {
                    value.cast_to_with_options(
                        &result_type,
                        &arrow::compute::CastOptions {
                            safe: false,
                            format_options: Default::default(),
                        },
                    )?
                };
                let matches = columns
                    .iter()
                    .zip(&values)
                    .map(|(c, v)| {
                        Expr::BinaryExpr(BinaryExpr::new(
                            Box::new(Expr::Column(c.clone())),
                            Operator::IsNotDistinctFrom,
                            Box::new(Expr::Literal(v.clone(), None)),
                        ))
                    })
                    .reduce(Expr::and)
                    .unwrap_or_else(|| Expr::Literal(ScalarValue::Boolean(Some(true)), None));
                when_then.push((Box::new(matches), Box::new(Expr::Literal(value, None))));
            }
        }
        let null = Expr::Literal(ScalarValue::try_from(&result_type)?, None);
        if when_then.is_empty() {
            return Ok(null);
        }
        Ok(Expr::Case(Case {
            expr: None,
            when_then_expr: when_then,
            else_expr: Some(Box::new(null)),
        }))
    }
}

/// `plan` with its references to the outer `columns` replaced by `values`.
fn bind_outer(
    plan: &LogicalPlan,
    columns: &[Column],
    values: &[ScalarValue],
) -> Result<LogicalPlan> {
    let plan = plan.clone().transform_up_with_subqueries(|node| {
        node.map_expressions(|e| {
            e.transform_up(|e| match e {
                Expr::OuterReferenceColumn(field, c) => {
                    match columns.iter().position(|x| *x == c) {
                        Some(i) => Ok(Transformed::yes(Expr::Literal(values[i].clone(), None))),
                        None => Ok(Transformed::no(Expr::OuterReferenceColumn(field, c))),
                    }
                }
                other => Ok(Transformed::no(other)),
            })
        })
    })?;
    // The plan's schema is unchanged; recompute it where expressions held
    // outer references.
    Ok(plan.data.recompute_schema()?)
}

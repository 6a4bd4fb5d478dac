//! The join of the items before a lateral set-returning call with the
//! call (as `super::syntax` made it: a `Subquery` under aliases and
//! renaming projections, over the call's node) rewritten as a
//! [`LateralCall`] over those items. Runs after analysis, before the
//! optimizer.

use std::sync::Arc;

use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::ScalarValue;
use datafusion_expr::expr::{Exists, InSubquery};
use datafusion_expr::{Expr, JoinType, LogicalPlan, LogicalPlanBuilder, Subquery};

use super::LateralCall;
use crate::error::{Result, SqlError};
use crate::table_functions::SetFunctionCall;

/// `plan` with every lateral call's join made a [`LateralCall`]; plans
/// without one come back as they were.
pub fn expand_lateral_calls(plan: LogicalPlan) -> Result<LogicalPlan> {
    let rewritten = plan.transform_up_with_subqueries(|node| {
        let LogicalPlan::Join(join) = &node else {
            return Ok(Transformed::no(node));
        };
        let Some(call) = lateral_call(&join.right, false) else {
            return Ok(Transformed::no(node));
        };
        let right = join.right.schema();
        if right.fields().len() != 1 {
            return Ok(Transformed::no(node));
        }
        let (qualifier, field) = right.qualified_field(0);
        let value = (
            qualifier.cloned(),
            Arc::new(field.as_ref().clone().with_nullable(true)),
        );
        // References to the items before the call become their columns;
        // others (a correlated subquery's outer query) stay outer.
        let left = join.left.schema().clone();
        let args = call
            .args
            .iter()
            .map(|a| {
                a.clone()
                    .transform_up(|e| match e {
                        Expr::OuterReferenceColumn(_, c) if left.has_column(&c) => {
                            Ok(Transformed::yes(Expr::Column(c)))
                        }
                        other => Ok(Transformed::no(other)),
                    })
                    .map(|t| t.data)
            })
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let condition = join
            .on
            .iter()
            .map(|(l, r)| l.clone().eq(r.clone()))
            .chain(join.filter.clone())
            .reduce(Expr::and);
        let outer = match join.join_type {
            JoinType::Inner => false,
            JoinType::Left => {
                if condition.as_ref().is_some_and(|c| !is_true(c)) {
                    return Err(datafusion_common::DataFusionError::External(Box::new(
                        SqlError::Unsupported(format!(
                            "LEFT JOIN LATERAL {} with an ON condition other than true",
                            call.function.name()
                        )),
                    )));
                }
                true
            }
            other => {
                return Err(datafusion_common::DataFusionError::External(Box::new(
                    SqlError::Unsupported(format!(
                        "{other} join with LATERAL {}",
                        call.function.name()
                    )),
                )))
            }
        };
        let node = LogicalPlan::Extension(datafusion_expr::Extension {
            node: Arc::new(LateralCall::try_new(
                join.left.clone(),
                call.function,
                args,
                outer,
                value,
            )?),
        });
        let node = match condition {
            Some(c) if !outer && !is_true(&c) => {
                LogicalPlanBuilder::from(node).filter(c)?.build()?
            }
            _ => node,
        };
        Ok(Transformed::yes(node))
    });
    match rewritten {
        Ok(t) if t.transformed => refresh_outer_refs(t.data),
        Ok(t) => Ok(t.data),
        Err(datafusion_common::DataFusionError::External(e)) => match e.downcast::<SqlError>() {
            Ok(sql) => Err(*sql),
            Err(other) => Err(SqlError::Internal(other.to_string())),
        },
        Err(e) => Err(e.into()),
    }
}

/// `plan` with the outer references each subquery expression lists
/// taken anew from its plan: a lateral call's references to the items
/// before it are columns now, no longer the enclosing query's.
fn refresh_outer_refs(plan: LogicalPlan) -> Result<LogicalPlan> {
    let fresh = |sq: Subquery| Subquery {
        outer_ref_columns: sq.subquery.all_out_ref_exprs(),
        ..sq
    };
    let refreshed = plan.transform_up_with_subqueries(|node| {
        node.map_expressions(|e| {
            e.transform_up(|e| {
                Ok(match e {
                    Expr::ScalarSubquery(sq) => Transformed::yes(Expr::ScalarSubquery(fresh(sq))),
                    Expr::Exists(x) => Transformed::yes(Expr::Exists(Exists {
                        subquery: fresh(x.subquery),
                        negated: x.negated,
                    })),
                    Expr::InSubquery(x) => Transformed::yes(Expr::InSubquery(InSubquery {
                        subquery: fresh(x.subquery),
                        ..x
                    })),
                    other => Transformed::no(other),
                })
            })
        })
    })?;
    Ok(refreshed.data)
}

/// The call under a lateral derived table: aliases, projections that only
/// rename its one column, and at least one `Subquery` (what
/// `super::syntax` made; a call with no `Subquery` above reads nothing of
/// the items before it and stays a plain join).
fn lateral_call(plan: &LogicalPlan, below_subquery: bool) -> Option<&SetFunctionCall> {
    match plan {
        LogicalPlan::SubqueryAlias(a) => lateral_call(&a.input, below_subquery),
        LogicalPlan::Subquery(s) => lateral_call(&s.subquery, true),
        LogicalPlan::Projection(p)
            if p.expr.len() == 1 && matches!(p.expr[0].clone().unalias(), Expr::Column(_)) =>
        {
            lateral_call(&p.input, below_subquery)
        }
        LogicalPlan::Extension(e) if below_subquery => {
            e.node.as_any().downcast_ref::<SetFunctionCall>()
        }
        _ => None,
    }
}

fn is_true(e: &Expr) -> bool {
    matches!(e, Expr::Literal(ScalarValue::Boolean(Some(true)), _))
}

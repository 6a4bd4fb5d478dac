//! Outer references re-qualified after the optimizer moved a correlated
//! filter below a derived table's alias.
//!
//! In `SELECT … FROM (SELECT id, v FROM t) s WHERE s.v > (SELECT … WHERE
//! t2.id <> s.id)` DataFusion pushes the filter below `SubqueryAlias s` and
//! re-qualifies its columns (`s.v` becomes `t.v`), but not the outer
//! references inside its subqueries (`outer_ref(s.id)` stays). A subquery
//! DataFusion could not decorrelate is then run per outer value
//! (`crate::engine::apply`) against the filter's input, where `s.id` does
//! not exist.
//!
//! [`requalify_outer_refs`] follows each alias down the chain the optimizer
//! may have moved such a filter along: nodes that keep their input's
//! columns (filter, sort, limit) and projections. Each alias column is
//! mapped, by position, to what it is below the alias: a column, or — below
//! a projection that computes it (`v * 2 AS w`) — the projection's
//! expression, whose columns then become the subquery's outer references
//! (not where the expression is volatile: evaluated once per reference it
//! could differ). An outer reference is rewritten only where that mapping
//! is known, so one it cannot follow stays as it was (and the statement
//! fails as before, never with another column's values).

use std::sync::Arc;

use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{Column, DFSchema};
use datafusion_expr::{Expr, LogicalPlan, Subquery};

/// Alias columns and what each is at some node below the alias: an
/// expression over that node's columns.
type Mapping = [(Column, Expr)];

/// `plan` with the outer references of subqueries below each derived
/// table's alias named as the columns are where those subqueries sit.
pub(super) fn requalify_outer_refs(plan: LogicalPlan) -> datafusion_common::Result<LogicalPlan> {
    plan.transform_down(|node| {
        let LogicalPlan::SubqueryAlias(alias) = &node else {
            return Ok(Transformed::no(node));
        };
        let mapping: Vec<(Column, Expr)> = alias
            .schema
            .columns()
            .into_iter()
            .zip(alias.input.schema().columns())
            .filter(|(outer, inner)| outer != inner)
            .map(|(outer, inner)| (outer, Expr::Column(inner)))
            .collect();
        if mapping.is_empty() {
            return Ok(Transformed::no(node));
        }
        node.map_children(|input| below_alias(input, &mapping))
    })
    .map(|t| t.data)
}

/// Rewrites the outer references of `node`'s subqueries by `mapping`
/// (over `node`'s output columns) and goes on down while the columns can
/// be followed.
fn below_alias(
    node: LogicalPlan,
    mapping: &Mapping,
) -> datafusion_common::Result<Transformed<LogicalPlan>> {
    match &node {
        LogicalPlan::Filter(_) | LogicalPlan::Sort(_) | LogicalPlan::Limit(_) => {
            // Their expressions read their input's columns, which are
            // their own.
            let schema = Arc::clone(node.schema());
            let node = node.map_expressions(|e| in_subqueries(e, mapping, &schema))?;
            node.transform_parent(|n| n.map_children(|input| below_alias(input, mapping)))
        }
        LogicalPlan::Projection(projection) => {
            // The projection's expressions, and its input, see the
            // projection's input columns.
            let output = projection.schema.columns();
            let inner: Vec<(Column, Expr)> = mapping
                .iter()
                .filter_map(|(outer, at)| {
                    let through = through_projection(at, &output, &projection.expr)?;
                    (!through.is_volatile()).then(|| (outer.clone(), through))
                })
                .collect();
            if inner.is_empty() {
                return Ok(Transformed::no(node));
            }
            let schema = Arc::clone(projection.input.schema());
            let node = node.map_expressions(|e| in_subqueries(e, &inner, &schema))?;
            node.transform_parent(|n| n.map_children(|input| below_alias(input, &inner)))
        }
        _ => Ok(Transformed::no(node)),
    }
}

/// `at` (over a projection's `output` columns) in terms of the projection's
/// input: each column replaced by the expression that computes it; `None`
/// if one is not among the outputs.
fn through_projection(at: &Expr, output: &[Column], exprs: &[Expr]) -> Option<Expr> {
    let mut missing = false;
    let through = at
        .clone()
        .transform_up(|e| match e {
            Expr::Column(c) => match output.iter().position(|o| *o == c) {
                Some(j) => Ok(Transformed::yes(exprs[j].clone().unalias())),
                None => {
                    missing = true;
                    Ok(Transformed::no(Expr::Column(c)))
                }
            },
            other => Ok(Transformed::no(other)),
        })
        .ok()?
        .data;
    (!missing).then_some(through)
}

/// `expr` with the outer references of the subqueries in it mapped;
/// `schema`: the columns `expr` is evaluated over.
fn in_subqueries(
    expr: Expr,
    mapping: &Mapping,
    schema: &DFSchema,
) -> datafusion_common::Result<Transformed<Expr>> {
    expr.transform_up(|e| match e {
        Expr::ScalarSubquery(sq) => Ok(Transformed::yes(Expr::ScalarSubquery(requalify(
            sq, mapping, schema,
        )?))),
        Expr::Exists(mut exists) => {
            exists.subquery = requalify(exists.subquery, mapping, schema)?;
            Ok(Transformed::yes(Expr::Exists(exists)))
        }
        Expr::InSubquery(mut in_subquery) => {
            in_subquery.subquery = requalify(in_subquery.subquery, mapping, schema)?;
            Ok(Transformed::yes(Expr::InSubquery(in_subquery)))
        }
        other => Ok(Transformed::no(other)),
    })
}

/// The subquery with its outer references to alias columns replaced by
/// what they are over `schema`.
fn requalify(
    sq: Subquery,
    mapping: &Mapping,
    schema: &DFSchema,
) -> datafusion_common::Result<Subquery> {
    let Subquery {
        subquery,
        outer_ref_columns,
        spans,
    } = sq;
    let plan = Arc::unwrap_or_clone(subquery)
        .transform_up_with_subqueries(|node| {
            node.map_expressions(|e| e.transform_up(|e| rename(e, mapping, schema)))
        })?
        .data
        .recompute_schema()?;
    let mut columns: Vec<Expr> = Vec::new();
    for e in outer_ref_columns {
        let renamed = rename(e, mapping, schema)?.data;
        // A computed column's outer reference becomes the references to
        // the columns it is computed from.
        let mut refs = Vec::new();
        renamed.apply(|e| {
            if matches!(e, Expr::OuterReferenceColumn(..)) {
                refs.push(e.clone());
            }
            Ok(datafusion_common::tree_node::TreeNodeRecursion::Continue)
        })?;
        for r in refs {
            if !columns.contains(&r) {
                columns.push(r);
            }
        }
    }
    Ok(Subquery {
        subquery: Arc::new(plan),
        outer_ref_columns: columns,
        spans,
    })
}

/// An outer reference to an alias column replaced by what the column is,
/// its columns as outer references; anything else, and a reference whose
/// columns `schema` does not hold, as is.
fn rename(
    e: Expr,
    mapping: &Mapping,
    schema: &DFSchema,
) -> datafusion_common::Result<Transformed<Expr>> {
    let Expr::OuterReferenceColumn(field, c) = e else {
        return Ok(Transformed::no(e));
    };
    let Some((_, at)) = mapping.iter().find(|(outer, _)| *outer == c) else {
        return Ok(Transformed::no(Expr::OuterReferenceColumn(field, c)));
    };
    let mut unknown = false;
    let replaced = at
        .clone()
        .transform_up(|e| match e {
            Expr::Column(x) => match schema.qualified_field_from_column(&x) {
                Ok((_, f)) => Ok(Transformed::yes(Expr::OuterReferenceColumn(
                    Arc::clone(f),
                    x,
                ))),
                Err(_) => {
                    unknown = true;
                    Ok(Transformed::no(Expr::Column(x)))
                }
            },
            other => Ok(Transformed::no(other)),
        })?
        .data;
    if unknown {
        return Ok(Transformed::no(Expr::OuterReferenceColumn(field, c)));
    }
    Ok(Transformed::yes(replaced))
}

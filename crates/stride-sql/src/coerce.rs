//! Literal typing applied before DataFusion's type coercion.
//!
//! Stride parses numeric literals as DECIMAL (as PostgreSQL and the TPC-H
//! answers expect: `l_discount = 0.06` is exact). DataFusion's comparison
//! coercion then casts a DOUBLE operand to the literal's decimal type, which
//! fails at run time on NaN, infinities and values beyond the decimal's
//! precision. Where a decimal literal meets a floating-point expression, the
//! literal is made a DOUBLE instead, so the comparison happens in float8 as
//! in PostgreSQL.

use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{DFSchema, ScalarValue};
use datafusion_expr::expr::{Between, InList};
use datafusion_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan};

use crate::error::Result;

/// Rewrites decimal literals next to floating-point expressions into DOUBLE literals.
pub fn float_literals(plan: LogicalPlan) -> Result<LogicalPlan> {
    let rewritten = plan.transform_up(|node| {
        // The schema the node's expressions see: its input's, or both sides'
        // for a join. Nodes with several inputs otherwise (UNION) have no
        // expressions of their own.
        let schema: DFSchema = match (&node, node.inputs().as_slice()) {
            (_, [input]) => input.schema().as_ref().clone(),
            (LogicalPlan::Join(_), [left, right]) => match left.schema().join(right.schema()) {
                Ok(s) => s,
                Err(_) => return Ok(Transformed::no(node)),
            },
            _ => return Ok(Transformed::no(node)),
        };
        node.map_expressions(|e| e.transform_up(|e| Ok(rewrite(e, &schema))))
    })?;
    Ok(rewritten.data)
}

fn is_float(e: &Expr, schema: &DFSchema) -> bool {
    e.get_type(schema).is_ok_and(|t| t.is_floating())
}

/// The literal as a DOUBLE literal, if it is a decimal literal.
fn as_double(e: &Expr) -> Option<Expr> {
    match e {
        Expr::Literal(ScalarValue::Decimal128(v, _, scale), _) => {
            let value = v.map(|v| v as f64 / 10f64.powi(i32::from(*scale)));
            Some(Expr::Literal(ScalarValue::Float64(value), None))
        }
        _ => None,
    }
}

fn rewrite(e: Expr, schema: &DFSchema) -> Transformed<Expr> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            if let (true, Some(lit)) = (is_float(&left, schema), as_double(&right)) {
                return Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    left,
                    op,
                    Box::new(lit),
                )));
            }
            if let (Some(lit), true) = (as_double(&left), is_float(&right, schema)) {
                return Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(lit),
                    op,
                    right,
                )));
            }
            Transformed::no(Expr::BinaryExpr(BinaryExpr { left, op, right }))
        }
        Expr::InList(InList {
            expr,
            list,
            negated,
        }) if is_float(&expr, schema) => {
            let list = list
                .into_iter()
                .map(|item| as_double(&item).unwrap_or(item))
                .collect();
            Transformed::yes(Expr::InList(InList {
                expr,
                list,
                negated,
            }))
        }
        Expr::Between(Between {
            expr,
            negated,
            low,
            high,
        }) if is_float(&expr, schema) => {
            let low = Box::new(as_double(&low).unwrap_or(*low));
            let high = Box::new(as_double(&high).unwrap_or(*high));
            Transformed::yes(Expr::Between(Between {
                expr,
                negated,
                low,
                high,
            }))
        }
        other => Transformed::no(other),
    }
}

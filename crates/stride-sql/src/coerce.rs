//! Literal typing applied before DataFusion's type coercion.
//!
//! Stride parses numeric literals as DECIMAL (as PostgreSQL and the TPC-H
//! answers expect: `l_discount = 0.06` is exact). DataFusion's comparison
//! coercion then casts a DOUBLE operand to the literal's decimal type, which
//! fails at run time on NaN, infinities and values beyond the decimal's
//! precision. Where a decimal literal meets a floating-point expression, the
//! literal is made a DOUBLE instead, so the comparison happens in float8 as
//! in PostgreSQL.
//!
//! A literal written with an exponent (`1e6`, `2.5E3`) is parsed as a
//! decimal of *negative* scale (`1e6` is 1 × 10^6, `decimal(1, -6)`).
//! PostgreSQL's `1e6` is the numeric `1000000`, and parts of DataFusion's
//! optimizer take a decimal's scale as an exponent of ten without checking
//! its sign (its literal casts divide by `10^scale`, which is zero for a
//! negative scale, and panic). [`exponent_literals`] therefore gives every
//! such literal scale 0 — the same value, as PostgreSQL types it — or,
//! when that takes more than 38 digits, makes it a DOUBLE (as DuckDB types
//! large exponent literals).

use arrow::datatypes::DECIMAL128_MAX_PRECISION;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{DFSchema, ScalarValue};
use datafusion_expr::expr::{Between, InList};
use datafusion_expr::expr_rewriter::NamePreserver;
use datafusion_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan};

use crate::error::Result;

/// Gives every decimal literal of negative scale scale 0, or makes it a
/// DOUBLE when that needs more than 38 digits (see the module docs). Runs
/// on every node, subqueries included, before type coercion.
pub fn exponent_literals(plan: LogicalPlan) -> Result<LogicalPlan> {
    // Set at the first rewrite: from there on every node's schema is
    // recomputed (post-order: a rewritten node's ancestors come after it).
    let mut changed = false;
    let rewritten = plan.transform_up_with_subqueries(|node| {
        // A rewritten expression keeps its name (`1e6` is still the
        // column `Decimal128(Some(1),1,-6)` to the nodes above it).
        let names = NamePreserver::new(&node);
        let node = node.map_expressions(|e| {
            let name = names.save(&e);
            let e = e.transform_up(|e| Ok(exponent_literal(e)))?;
            Ok(if e.transformed {
                Transformed::yes(name.restore(e.data))
            } else {
                e
            })
        })?;
        changed |= node.transformed;
        if !changed {
            return Ok(node);
        }
        // The schemas above a rewritten literal see its new type.
        Ok(Transformed::yes(node.data.recompute_schema()?))
    })?;
    Ok(rewritten.data)
}

/// `v × 10^-scale` at scale 0, when `scale < 0`.
fn exponent_literal(e: Expr) -> Transformed<Expr> {
    match e {
        Expr::Literal(ScalarValue::Decimal128(v, precision, scale), meta) if scale < 0 => {
            let shift = u32::from(scale.unsigned_abs());
            let digits = u32::from(precision) + shift;
            let scaled = match v {
                None => Some(None),
                Some(v) => 10i128
                    .checked_pow(shift)
                    .and_then(|m| v.checked_mul(m))
                    .map(Some),
            };
            let value = match scaled {
                Some(scaled) if digits <= u32::from(DECIMAL128_MAX_PRECISION) => {
                    ScalarValue::Decimal128(scaled, digits as u8, 0)
                }
                _ => ScalarValue::Float64(v.map(|v| v as f64 * 10f64.powi(shift as i32))),
            };
            Transformed::yes(Expr::Literal(value, meta))
        }
        other => Transformed::no(other),
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(v: i128, p: u8, s: i8) -> Expr {
        Expr::Literal(ScalarValue::Decimal128(Some(v), p, s), None)
    }

    fn value(e: Transformed<Expr>) -> ScalarValue {
        match e.data {
            Expr::Literal(v, _) => v,
            other => panic!("not a literal: {other}"),
        }
    }

    #[test]
    fn exponent_literals_take_scale_zero() {
        // 1e6 and 25e2 (2.5E3).
        assert_eq!(
            value(exponent_literal(lit(1, 1, -6))),
            ScalarValue::Decimal128(Some(1_000_000), 7, 0)
        );
        assert_eq!(
            value(exponent_literal(lit(25, 2, -2))),
            ScalarValue::Decimal128(Some(2500), 4, 0)
        );
        // NULL keeps its (new) type.
        assert_eq!(
            value(exponent_literal(Expr::Literal(
                ScalarValue::Decimal128(None, 1, -3),
                None
            ))),
            ScalarValue::Decimal128(None, 4, 0)
        );
        // Scales of 0 and above are left alone.
        assert!(!exponent_literal(lit(15, 3, 1)).transformed);
    }

    #[test]
    fn exponent_literals_past_38_digits_become_doubles() {
        assert_eq!(
            value(exponent_literal(lit(12, 2, -40))),
            ScalarValue::Float64(Some(1.2e41))
        );
        // Exactly 38 digits still fits a decimal.
        assert_eq!(
            value(exponent_literal(lit(1, 1, -37))),
            ScalarValue::Decimal128(Some(10i128.pow(37)), 38, 0)
        );
    }
}

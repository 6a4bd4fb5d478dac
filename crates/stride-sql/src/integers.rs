//! Exact integer semantics, as PostgreSQL has them.
//!
//! DataFusion's integer arithmetic wraps (`9223372036854775807 + 1` is
//! `-9223372036854775808`) and `sum` over `int8` wraps too. Stride raises
//! SQLSTATE 22003 instead, in three places:
//!
//! * [`widen_integer_sums`] (before type coercion): `sum` over a 64-bit
//!   integer sums in `numeric` (`DECIMAL(38, 0)`), as PostgreSQL's
//!   `sum(int8)` does, so it cannot wrap; the aggregate keeps its name.
//! * [`fold_constants`] (after type coercion, before the optimizer folds
//!   constants with wrapping kernels): integer `+`, `-`, `*` of two literals
//!   is computed checked; an overflow fails the statement.
//! * [`checked_arithmetic`] (lowering): every physical integer `+`, `-`, `*`
//!   evaluates with overflow checks. Casts already refuse values out of
//!   range, and integer division checks `MIN / -1`.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion_common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion_common::ScalarValue;
use datafusion_expr::expr::AggregateFunction;
use datafusion_expr::expr_rewriter::NamePreserver;
use datafusion_expr::logical_plan::Aggregate;
use datafusion_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator};
use datafusion_physical_expr::expressions::BinaryExpr as PhysicalBinary;
use datafusion_physical_expr::PhysicalExpr;

use crate::error::{Result, SqlError};

/// `sum` over a 64-bit integer argument.
fn is_wide_integer_sum(e: &Expr, input: &LogicalPlan) -> bool {
    match e {
        Expr::AggregateFunction(f) => {
            f.func.name() == "sum"
                && f.params.args.len() == 1
                && matches!(
                    f.params.args[0].get_type(input.schema()),
                    Ok(DataType::Int64 | DataType::UInt64)
                )
        }
        Expr::Alias(a) => is_wide_integer_sum(&a.expr, input),
        _ => false,
    }
}

/// Makes every `sum(int8)` a `sum` in `DECIMAL(38, 0)` under its old name,
/// and recomputes the schemas above it. Plans without one come back as
/// they were.
pub fn widen_integer_sums(plan: LogicalPlan) -> Result<LogicalPlan> {
    let mut found = false;
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::Aggregate(a) = node {
            found |= a.aggr_expr.iter().any(|e| is_wide_integer_sum(e, &a.input));
        }
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    if !found {
        return Ok(plan);
    }
    let widened = plan.transform_up_with_subqueries(|node| match node {
        LogicalPlan::Aggregate(a) => {
            let aggr_expr = a
                .aggr_expr
                .iter()
                .map(|e| widen(e, &a.input))
                .collect::<Vec<_>>();
            let rebuilt = Aggregate::try_new(a.input.clone(), a.group_expr.clone(), aggr_expr)?;
            Ok(Transformed::yes(LogicalPlan::Aggregate(rebuilt)))
        }
        other => Ok(Transformed::yes(other.recompute_schema()?)),
    })?;
    Ok(widened.data)
}

/// The widened form of one aggregate expression (unchanged unless it is a
/// 64-bit integer sum).
fn widen(e: &Expr, input: &LogicalPlan) -> Expr {
    if !is_wide_integer_sum(e, input) {
        return e.clone();
    }
    match e {
        Expr::Alias(a) => Expr::Alias(datafusion_expr::expr::Alias {
            expr: Box::new(widen(&a.expr, input)),
            ..a.clone()
        }),
        Expr::AggregateFunction(f) => {
            let name = e.schema_name().to_string();
            let mut params = f.params.clone();
            params.args[0] = Expr::Cast(datafusion_expr::Cast::new(
                Box::new(params.args[0].clone()),
                DataType::Decimal128(38, 0),
            ));
            Expr::AggregateFunction(AggregateFunction {
                func: f.func.clone(),
                params,
            })
            .alias(name)
        }
        other => other.clone(),
    }
}

/// `+`, `-` and `*`: the operators whose integer results can overflow.
fn overflows(op: Operator) -> bool {
    matches!(op, Operator::Plus | Operator::Minus | Operator::Multiply)
}

/// Folds integer arithmetic on literals with overflow checks.
pub fn fold_constants(plan: LogicalPlan) -> Result<LogicalPlan> {
    let folded = plan.transform_up_with_subqueries(|node| {
        // A folded projection keeps its output names.
        let names = NamePreserver::new(&node);
        node.map_expressions(|e| {
            let saved = names.save(&e);
            let folded = e.transform_up(|e| match e {
                // An integer literal cast to an integer type: checked, so
                // that the arithmetic above sees literals.
                Expr::Cast(c)
                    if c.field.data_type().is_integer()
                        && matches!(c.expr.as_ref(), Expr::Literal(v, _) if v.data_type().is_integer()) =>
                {
                    let Expr::Literal(v, _) = c.expr.as_ref() else {
                        unreachable!("matched above")
                    };
                    match v.cast_to(c.field.data_type()) {
                        Ok(cast) => Ok(Transformed::yes(Expr::Literal(cast, None))),
                        Err(_) => Err(datafusion_common::DataFusionError::External(Box::new(
                            out_of_range(&ScalarValue::try_from(c.field.data_type())?),
                        ))),
                    }
                }
                Expr::BinaryExpr(BinaryExpr { left, op, right }) if overflows(op) => {
                    match (left.as_ref(), right.as_ref()) {
                        (Expr::Literal(l, _), Expr::Literal(r, _))
                            if l.data_type().is_integer()
                                && l.data_type() == r.data_type()
                                && !l.is_null()
                                && !r.is_null() =>
                        {
                            let value = match op {
                                Operator::Plus => l.add_checked(r),
                                Operator::Minus => l.sub_checked(r),
                                _ => l.mul_checked(r),
                            };
                            match value {
                                Ok(v) => Ok(Transformed::yes(Expr::Literal(v, None))),
                                Err(_) => Err(datafusion_common::DataFusionError::External(
                                    Box::new(out_of_range(l)),
                                )),
                            }
                        }
                        _ => Ok(Transformed::no(Expr::BinaryExpr(BinaryExpr {
                            left,
                            op,
                            right,
                        }))),
                    }
                }
                other => Ok(Transformed::no(other)),
            })?;
            Ok(if folded.transformed {
                folded.update_data(|e| saved.restore(e))
            } else {
                folded
            })
        })
    });
    match folded {
        Ok(t) => Ok(t.data),
        Err(datafusion_common::DataFusionError::External(e)) => match e.downcast::<SqlError>() {
            Ok(sql) => Err(*sql),
            Err(other) => Err(SqlError::Internal(other.to_string())),
        },
        Err(e) => Err(e.into()),
    }
}

/// The 22003 error of an integer type.
fn out_of_range(sample: &ScalarValue) -> SqlError {
    let name = match sample.data_type() {
        DataType::Int8 => "tinyint",
        DataType::Int16 => "smallint",
        DataType::Int32 => "integer",
        DataType::Int64 => "bigint",
        _ => "integer",
    };
    SqlError::NumericOutOfRange(format!("{name} out of range"))
}

/// The physical expression with overflow checks on every integer `+`, `-`
/// and `*`.
pub fn checked_arithmetic(
    expr: Arc<dyn PhysicalExpr>,
    schema: &arrow::datatypes::Schema,
) -> Result<Arc<dyn PhysicalExpr>> {
    let rewritten = expr.transform_up(|e| {
        let Some(b) = e.downcast_ref::<PhysicalBinary>() else {
            return Ok(Transformed::no(e));
        };
        if !overflows(*b.op()) || !e.data_type(schema)?.is_integer() {
            return Ok(Transformed::no(e));
        }
        let checked = PhysicalBinary::new(b.left().clone(), *b.op(), b.right().clone())
            .with_fail_on_overflow(true);
        Ok(Transformed::yes(Arc::new(checked) as Arc<dyn PhysicalExpr>))
    })?;
    Ok(rewritten.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_expr::{lit, LogicalPlanBuilder};

    fn projection(e: Expr) -> LogicalPlan {
        LogicalPlanBuilder::empty(true)
            .project(vec![e])
            .unwrap()
            .build()
            .unwrap()
    }

    #[test]
    fn constant_overflow_is_an_error() {
        let plan = projection(lit(i64::MAX - 1) + lit(1i64));
        let name = plan.schema().field(0).name().clone();
        let ok = fold_constants(plan).unwrap();
        assert!(ok.expressions()[0]
            .to_string()
            .contains(&i64::MAX.to_string()));
        // The output keeps its name.
        assert_eq!(ok.schema().field(0).name(), &name);
        let err = fold_constants(projection(lit(i64::MAX) + lit(1i64))).unwrap_err();
        assert!(matches!(err, SqlError::NumericOutOfRange(m) if m == "bigint out of range"));
        let err = fold_constants(projection(lit(i32::MIN) - lit(1i32))).unwrap_err();
        assert!(matches!(err, SqlError::NumericOutOfRange(m) if m == "integer out of range"));
        // Casts of literals are folded first, checked.
        let cast = |v: i64| {
            Expr::Cast(datafusion_expr::Cast::new(
                Box::new(lit(v)),
                DataType::Int32,
            ))
        };
        let err = fold_constants(projection(cast(2147483647) * cast(2))).unwrap_err();
        assert!(matches!(err, SqlError::NumericOutOfRange(_)));
        let err = fold_constants(projection(cast(1 << 40))).unwrap_err();
        assert!(matches!(err, SqlError::NumericOutOfRange(_)));
        assert!(fold_constants(projection(cast(7) * cast(6))).is_ok());
        // Decimals and floats are not this pass's business.
        assert!(fold_constants(projection(lit(f64::MAX) * lit(2.0f64))).is_ok());
    }
}

//! Decimal division with PostgreSQL's precision, rounded.
//!
//! DataFusion divides `numeric` by Arrow's rule: the quotient keeps the
//! dividend's scale + 4 and is truncated (`1.00 / 3` is `0.333333`;
//! `decimal(15,4) / decimal(15,4)` keeps 8 fractional digits). PostgreSQL
//! chooses the quotient's scale so that it has at least 16 significant
//! digits, and never fewer fractional digits than either operand, and rounds
//! the last digit half away from zero.
//!
//! Arrow's decimals carry their scale in the type, not per value, so the
//! scale cannot follow the quotient's magnitude as PostgreSQL's does. Stride
//! gives every decimal quotient the type `numeric(38, S)` with
//! `S = max(16, s1, s2)` ([`quotient_scale`]) — PostgreSQL's scale for
//! quotients from 1 to 10^4 (`10.5 / 2` is `5.2500000000000000` in both) and
//! at least 16 significant digits above 1 — computed exactly (the dividend
//! widened to 256 bits) and rounded half away from zero. A quotient whose
//! integer part does not fit `38 - S` digits fails with 22003 rather than
//! losing digits; a zero divisor fails with 22012, as in PostgreSQL.
//!
//! [`numeric_division`] runs before DataFusion's type coercion: it replaces
//! each `a / b` whose operands are decimals (or a decimal and an integer)
//! by the function [`NumericDivide`], which coerces an integer operand to
//! the decimal that holds it, as DataFusion's division does, and keeps the
//! expression's name (`a / b`), so the columns the plan names stay the same.

use std::sync::{Arc, LazyLock};

use arrow::array::AsArray;
use arrow::datatypes::{i256, DataType, Decimal128Type, DECIMAL128_MAX_PRECISION};
use arrow::error::ArrowError;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{exec_err, DFSchema, Result as DfResult, ScalarValue};
use datafusion_expr::expr::ScalarFunction;
use datafusion_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::error::Result;

/// The fewest fractional digits a decimal quotient keeps: PostgreSQL's
/// `NUMERIC_MIN_SIG_DIGITS`, its scale for quotients from 1 to 10^4.
pub const MIN_QUOTIENT_SCALE: i8 = 16;

/// The scale of the quotient of a decimal of scale `s1` by one of scale `s2`.
pub fn quotient_scale(s1: i8, s2: i8) -> i8 {
    MIN_QUOTIENT_SCALE
        .max(s1)
        .max(s2)
        .min(DECIMAL128_MAX_PRECISION as i8)
}

/// The decimal an operand of this type is divided as: decimals as they
/// are, integers as the narrowest decimal holding every value (DataFusion's
/// choice for decimal arithmetic), NULL as `numeric(1, 0)`. `None` for
/// types this division does not take (floats, and decimals of other widths
/// or negative scales).
fn as_decimal(t: &DataType) -> Option<DataType> {
    let digits = match t {
        DataType::Decimal128(p, s) if *s >= 0 => return Some(DataType::Decimal128(*p, *s)),
        DataType::Null => 1,
        DataType::Int8 | DataType::UInt8 => 3,
        DataType::Int16 | DataType::UInt16 => 5,
        DataType::Int32 | DataType::UInt32 => 10,
        DataType::Int64 => 19,
        DataType::UInt64 => 20,
        _ => return None,
    };
    Some(DataType::Decimal128(digits, 0))
}

/// Whether `l / r` is a decimal division: both operands decimals or
/// integers, at least one a decimal.
fn is_decimal_division(l: &DataType, r: &DataType) -> bool {
    (matches!(l, DataType::Decimal128(..)) || matches!(r, DataType::Decimal128(..)))
        && as_decimal(l).is_some()
        && as_decimal(r).is_some()
}

/// `numeric / numeric` as PostgreSQL divides: see the module's text.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericDivide {
    signature: Signature,
}

static NUMERIC_DIVIDE: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    Arc::new(ScalarUDF::new_from_impl(NumericDivide {
        signature: Signature::user_defined(Volatility::Immutable),
    }))
});

/// The function Stride divides decimals with.
pub fn numeric_divide() -> Arc<ScalarUDF> {
    NUMERIC_DIVIDE.clone()
}

/// The scales of two decimal argument types.
fn scales(args: &[DataType]) -> DfResult<(i8, i8)> {
    match args {
        [DataType::Decimal128(_, s1), DataType::Decimal128(_, s2)] if *s1 >= 0 && *s2 >= 0 => {
            Ok((*s1, *s2))
        }
        other => exec_err!("numeric division of {other:?}"),
    }
}

impl ScalarUDFImpl for NumericDivide {
    fn name(&self) -> &str {
        "numeric_divide"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [l, r] if is_decimal_division(l, r) => Ok(vec![
                as_decimal(l).expect("checked above"),
                as_decimal(r).expect("checked above"),
            ]),
            other => exec_err!("numeric division of {other:?}"),
        }
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        let (s1, s2) = scales(arg_types)?;
        Ok(DataType::Decimal128(
            DECIMAL128_MAX_PRECISION,
            quotient_scale(s1, s2),
        ))
    }

    /// `a / b`, the name the division had, so that columns keep their names.
    fn schema_name(&self, args: &[Expr]) -> DfResult<String> {
        match args {
            [l, r] => Ok(format!("{} / {}", l.schema_name(), r.schema_name())),
            _ => exec_err!("numeric division takes two arguments"),
        }
    }

    fn display_name(&self, args: &[Expr]) -> DfResult<String> {
        match args {
            [l, r] => Ok(format!("{l} / {r}")),
            _ => exec_err!("numeric division takes two arguments"),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let types: Vec<DataType> = args.args.iter().map(|a| a.data_type()).collect();
        let (s1, s2) = scales(&types)?;
        let scale = quotient_scale(s1, s2);
        // The dividend's digits are shifted by `scale - s1 + s2`: at most
        // 38 + 38, and 10^76 fits 256 bits.
        let shift = u32::try_from(i32::from(scale) - i32::from(s1) + i32::from(s2))
            .expect("the quotient's scale is at least the dividend's");
        let factor = i256::from_i128(10)
            .checked_pow(shift)
            .expect("10^76 fits 256 bits");
        let all_scalars = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (l, r) = (
            arrays[0].as_primitive::<Decimal128Type>(),
            arrays[1].as_primitive::<Decimal128Type>(),
        );
        let quotient =
            arrow::compute::kernels::arity::try_binary::<_, _, _, Decimal128Type>(l, r, |a, b| {
                divide(a, b, factor)
            })?
            .with_precision_and_scale(DECIMAL128_MAX_PRECISION, scale)?;
        if all_scalars {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &quotient, 0,
            )?));
        }
        Ok(ColumnarValue::Array(Arc::new(quotient)))
    }
}

/// `a · factor / b`, rounded half away from zero; 22012 for a zero `b`,
/// 22003 for a quotient beyond 38 digits.
fn divide(a: i128, b: i128, factor: i256) -> std::result::Result<i128, ArrowError> {
    if b == 0 {
        return Err(ArrowError::DivideByZero);
    }
    let overflow = || ArrowError::ArithmeticOverflow("numeric field overflow".into());
    // A dividend that overflows 256 bits when shifted has a quotient beyond
    // 38 digits: |a · factor| = |q| · |b| < 10^38 · 2^127 < 2^255.
    let n = i256::from_i128(a)
        .checked_mul(factor)
        .ok_or_else(overflow)?;
    let d = i256::from_i128(b);
    let q = n.checked_div(d).ok_or_else(overflow)?;
    let r = n.checked_rem(d).ok_or_else(overflow)?;
    // |r| < |d| < 2^127: doubling it cannot overflow.
    let twice = r.wrapping_abs().checked_mul(i256::from_i128(2));
    let rounded = match twice {
        Some(t) if t >= d.wrapping_abs() => {
            // Away from zero: the quotient's sign is the operands'.
            if n.is_negative() != d.is_negative() {
                q.checked_sub(i256::ONE)
            } else {
                q.checked_add(i256::ONE)
            }
        }
        _ => Some(q),
    };
    let q = rounded.and_then(i256::to_i128).ok_or_else(overflow)?;
    let bound = 10i128.pow(u32::from(DECIMAL128_MAX_PRECISION));
    if q >= bound || q <= -bound {
        return Err(overflow());
    }
    Ok(q)
}

/// Replaces every decimal `a / b` in the plan (subqueries included) by
/// [`NumericDivide`], and recomputes the schemas above it. Runs before type
/// coercion; a plan without one comes back as it was.
pub fn numeric_division(plan: LogicalPlan) -> Result<LogicalPlan> {
    // Set at the first rewrite: from there on every node is recomputed
    // (post-order: a rewritten node's ancestors all come after it).
    let mut changed = false;
    let rewritten = plan.transform_up_with_subqueries(|node| {
        // The schema the node's expressions see: its input's, or both
        // sides' for a join. Nodes with other inputs have no expressions
        // that divide.
        let schema: Option<DFSchema> = match (&node, node.inputs().as_slice()) {
            (_, [input]) => Some(input.schema().as_ref().clone()),
            (LogicalPlan::Join(_), [left, right]) => left.schema().join(right.schema()).ok(),
            _ => None,
        };
        let node = match schema {
            Some(schema) => {
                node.map_expressions(|e| e.transform_up(|e| Ok(rewrite(e, &schema))))?
            }
            None => Transformed::no(node),
        };
        changed |= node.transformed;
        if !changed {
            return Ok(node);
        }
        // A node above a rewritten one sees new column types.
        Ok(Transformed::yes(node.data.recompute_schema()?))
    })?;
    Ok(rewritten.data)
}

fn rewrite(e: Expr, schema: &DFSchema) -> Transformed<Expr> {
    match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Divide,
            right,
        }) => {
            let decimal = matches!(
                (left.get_type(schema), right.get_type(schema)),
                (Ok(l), Ok(r)) if is_decimal_division(&l, &r)
            );
            if decimal {
                Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(
                    numeric_divide(),
                    vec![*left, *right],
                )))
            } else {
                Transformed::no(Expr::BinaryExpr(BinaryExpr::new(
                    left,
                    Operator::Divide,
                    right,
                )))
            }
        }
        other => Transformed::no(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `a / b` of unscaled values with `factor = 10^shift`.
    fn div(a: i128, b: i128, shift: u32) -> std::result::Result<i128, ArrowError> {
        divide(a, b, i256::from_i128(10).checked_pow(shift).unwrap())
    }

    #[test]
    fn rounds_half_away_from_zero() {
        // 2 / 3 at scale 1: 0.7; -2 / 3: -0.7; 1 / 3: 0.3.
        assert_eq!(div(2, 3, 1).unwrap(), 7);
        assert_eq!(div(-2, 3, 1).unwrap(), -7);
        assert_eq!(div(2, -3, 1).unwrap(), -7);
        assert_eq!(div(-2, -3, 1).unwrap(), 7);
        assert_eq!(div(1, 3, 1).unwrap(), 3);
        // Exactly half: 1 / 8 at scale 2 is 0.125 -> 0.13, -0.13.
        assert_eq!(div(1, 8, 2).unwrap(), 13);
        assert_eq!(div(-1, 8, 2).unwrap(), -13);
    }

    #[test]
    fn zero_divisor_and_overflow() {
        assert!(matches!(div(1, 0, 16), Err(ArrowError::DivideByZero)));
        assert!(matches!(div(0, 0, 0), Err(ArrowError::DivideByZero)));
        // 10^37 / 10^-38 does not fit 38 digits.
        let big = 10i128.pow(37);
        assert!(matches!(
            div(big, 1, 38),
            Err(ArrowError::ArithmeticOverflow(_))
        ));
        // The widest shift with the widest operands: no panic, an error.
        assert!(div(i128::MAX, 1, 76).is_err());
        assert!(div(i128::MIN, -1, 0).is_err());
        // A large dividend by a large divisor still fits.
        assert_eq!(div(i128::MAX, i128::MAX, 16).unwrap(), 10i128.pow(16));
    }

    #[test]
    fn quotient_scales() {
        assert_eq!(quotient_scale(2, 0), 16);
        assert_eq!(quotient_scale(20, 4), 20);
        assert_eq!(quotient_scale(0, 18), 18);
        assert_eq!(quotient_scale(38, 38), 38);
    }
}

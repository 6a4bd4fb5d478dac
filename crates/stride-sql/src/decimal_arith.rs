//! Decimal `+`, `-` and `*` without a check per value where a batch cannot
//! overflow.
//!
//! Arrow computes every `Decimal128` sum, difference and product with
//! overflow checks on each value (`mul_checked`, `add_checked`, and for
//! operands of different scales both at once), through a fallible closure
//! per element: TPC-H Q1's `l_extendedprice * (1 - l_discount) * (1 +
//! l_tax)` spent about a third of the query there. Yet the operands of one
//! batch bound their result: with `|l| ≤ L`, `|r| ≤ R` and the scale
//! factors `m_l`, `m_r` that align the scales, `|l·m_l ± r·m_r| ≤ L·m_l +
//! R·m_r` and `|l·r| ≤ L·R`. [`DecimalArith`] measures `L` and `R` over
//! each batch (one pass, the slots under NULLs included) and, where that
//! bound fits `i128`, computes the batch with plain wrapping arithmetic,
//! which then cannot wrap. Otherwise it calls Arrow's checked kernel, so
//! the values, the result type (Arrow's precision and scale rules) and the
//! overflow errors are exactly those of the expression it replaces.
//!
//! [`fast_decimal_arithmetic`] rewrites a lowered expression: each
//! `Decimal128` `+`, `-`, `*` of two `Decimal128` operands becomes a
//! [`DecimalArith`] over the same children.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Datum, PrimitiveArray, RecordBatch, Scalar};
use arrow::buffer::NullBuffer;
use arrow::compute::kernels::numeric;
use arrow::datatypes::{DataType, Decimal128Type, Schema};
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{DataFusionError, Result as DfResult, ScalarValue};
use datafusion_expr::{ColumnarValue, Operator};
use datafusion_physical_expr::expressions::BinaryExpr;
use datafusion_physical_expr::PhysicalExpr;

use crate::error::Result;

/// Which arithmetic a [`DecimalArith`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Add,
    Sub,
    Mul,
}

impl Op {
    fn symbol(self) -> &'static str {
        match self {
            Op::Add => "+",
            Op::Sub => "-",
            Op::Mul => "*",
        }
    }
}

/// `left op right` over `Decimal128` operands; see the module doc.
#[derive(Debug, Eq)]
pub struct DecimalArith {
    left: Arc<dyn PhysicalExpr>,
    op: Op,
    right: Arc<dyn PhysicalExpr>,
}

impl PartialEq for DecimalArith {
    fn eq(&self, other: &Self) -> bool {
        self.op == other.op && self.left.eq(&other.left) && self.right.eq(&other.right)
    }
}

impl Hash for DecimalArith {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.left.hash(state);
        self.op.hash(state);
        self.right.hash(state);
    }
}

/// One evaluated operand: a `Decimal128` array, of one value for a scalar.
struct Operand {
    array: ArrayRef,
    scalar: bool,
}

impl Operand {
    fn new(value: ColumnarValue) -> DfResult<Operand> {
        let (array, scalar) = match value {
            ColumnarValue::Array(a) => (a, false),
            ColumnarValue::Scalar(s) => (s.to_array_of_size(1)?, true),
        };
        if array.as_primitive_opt::<Decimal128Type>().is_none() {
            return Err(DataFusionError::Internal(format!(
                "decimal arithmetic on {}",
                array.data_type()
            )));
        }
        Ok(Operand { array, scalar })
    }

    fn values(&self) -> &[i128] {
        self.array.as_primitive::<Decimal128Type>().values()
    }

    /// The largest magnitude among the values, NULL slots included.
    fn bound(&self) -> u128 {
        self.values()
            .iter()
            .map(|v| v.unsigned_abs())
            .max()
            .unwrap_or(0)
    }

    fn precision_scale(&self) -> (u8, i8) {
        match self.array.data_type() {
            DataType::Decimal128(p, s) => (*p, *s),
            _ => (0, 0),
        }
    }

    fn datum(&self) -> Box<dyn Datum + '_> {
        if self.scalar {
            Box::new(Scalar::new(&self.array))
        } else {
            Box::new(&self.array)
        }
    }

    /// A NULL scalar: every result is NULL.
    fn null_scalar(&self) -> bool {
        self.scalar && self.array.is_null(0)
    }
}

/// `f` over the operands' values pairwise (a scalar paired with every value).
fn pairwise(l: &Operand, r: &Operand, f: impl Fn(i128, i128) -> i128) -> Vec<i128> {
    match (l.scalar, r.scalar) {
        (true, _) => {
            let x = l.values()[0];
            r.values().iter().map(|&y| f(x, y)).collect()
        }
        (false, true) => {
            let y = r.values()[0];
            l.values().iter().map(|&x| f(x, y)).collect()
        }
        (false, false) => l
            .values()
            .iter()
            .zip(r.values())
            .map(|(&x, &y)| f(x, y))
            .collect(),
    }
}

/// Arrow's result type of `(p1, s1) op (p2, s2)`.
fn result_type(op: Op, (p1, s1): (u8, i8), (p2, s2): (u8, i8)) -> (u8, i8) {
    let max = arrow::datatypes::DECIMAL128_MAX_PRECISION;
    match op {
        Op::Add | Op::Sub => {
            let scale = s1.max(s2);
            let digits = (p1 as i8 - s1).max(p2 as i8 - s2);
            let precision = (scale.saturating_add(digits) as u8).saturating_add(1);
            (precision.min(max), scale)
        }
        Op::Mul => (p1.saturating_add(p2 + 1).min(max), s1.saturating_add(s2)),
    }
}

impl DecimalArith {
    /// The scale factors of the two operands for `+` and `-` (both 1 for `*`).
    fn factors(&self, l: &Operand, r: &Operand) -> Option<(i128, i128)> {
        if self.op == Op::Mul {
            return Some((1, 1));
        }
        let (s1, s2) = (l.precision_scale().1, r.precision_scale().1);
        let scale = s1.max(s2);
        let pow = |d: i8| 10i128.checked_pow(u32::try_from(d).ok()?);
        Some((pow(scale - s1)?, pow(scale - s2)?))
    }

    /// Whether every result of the batch fits `i128`, from the operands' bounds.
    fn cannot_overflow(&self, l: &Operand, r: &Operand, (ml, mr): (i128, i128)) -> bool {
        let limit = i128::MAX as u128;
        let (lb, rb) = (l.bound(), r.bound());
        let bound = match self.op {
            Op::Mul => lb.checked_mul(rb),
            Op::Add | Op::Sub => lb
                .checked_mul(ml as u128)
                .zip(rb.checked_mul(mr as u128))
                .and_then(|(a, b)| a.checked_add(b)),
        };
        bound.is_some_and(|b| b <= limit)
    }

    /// Arrow's checked kernel: the result type, the values and the errors
    /// of the expression this one replaced.
    fn checked(&self, l: &Operand, r: &Operand) -> DfResult<ArrayRef> {
        let (l, r) = (l.datum(), r.datum());
        let (l, r) = (l.as_ref(), r.as_ref());
        Ok(match self.op {
            Op::Add => numeric::add_wrapping(l, r)?,
            Op::Sub => numeric::sub_wrapping(l, r)?,
            Op::Mul => numeric::mul_wrapping(l, r)?,
        })
    }
}

impl fmt::Display for DecimalArith {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.left, self.op.symbol(), self.right)
    }
}

impl PhysicalExpr for DecimalArith {
    fn data_type(&self, input_schema: &Schema) -> DfResult<DataType> {
        match (
            self.left.data_type(input_schema)?,
            self.right.data_type(input_schema)?,
        ) {
            (DataType::Decimal128(p1, s1), DataType::Decimal128(p2, s2)) => {
                let (p, s) = result_type(self.op, (p1, s1), (p2, s2));
                Ok(DataType::Decimal128(p, s))
            }
            _ => Err(DataFusionError::Internal(
                "decimal arithmetic on non-decimal operands".into(),
            )),
        }
    }

    fn nullable(&self, input_schema: &Schema) -> DfResult<bool> {
        Ok(self.left.nullable(input_schema)? || self.right.nullable(input_schema)?)
    }

    fn evaluate(&self, batch: &RecordBatch) -> DfResult<ColumnarValue> {
        let l = Operand::new(self.left.evaluate(batch)?)?;
        let r = Operand::new(self.right.evaluate(batch)?)?;
        let both_scalar = l.scalar && r.scalar;
        let fast = self
            .factors(&l, &r)
            .filter(|&m| !both_scalar && self.cannot_overflow(&l, &r, m));
        let result = match fast {
            None => self.checked(&l, &r)?,
            Some((ml, mr)) => {
                let values = match self.op {
                    Op::Add => pairwise(&l, &r, |x, y| {
                        x.wrapping_mul(ml).wrapping_add(y.wrapping_mul(mr))
                    }),
                    Op::Sub => pairwise(&l, &r, |x, y| {
                        x.wrapping_mul(ml).wrapping_sub(y.wrapping_mul(mr))
                    }),
                    Op::Mul => pairwise(&l, &r, i128::wrapping_mul),
                };
                let rows = values.len();
                let nulls = if l.null_scalar() || r.null_scalar() {
                    Some(NullBuffer::new_null(rows))
                } else {
                    let side = |o: &Operand| {
                        if o.scalar {
                            None
                        } else {
                            o.array.logical_nulls()
                        }
                    };
                    NullBuffer::union(side(&l).as_ref(), side(&r).as_ref())
                };
                let (p, s) = result_type(self.op, l.precision_scale(), r.precision_scale());
                Arc::new(
                    PrimitiveArray::<Decimal128Type>::new(values.into(), nulls)
                        .with_precision_and_scale(p, s)?,
                )
            }
        };
        Ok(if both_scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&result, 0)?)
        } else {
            ColumnarValue::Array(result)
        })
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.left, &self.right]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> DfResult<Arc<dyn PhysicalExpr>> {
        let [left, right]: [Arc<dyn PhysicalExpr>; 2] = children.try_into().map_err(|_| {
            DataFusionError::Internal("decimal arithmetic takes two children".into())
        })?;
        Ok(Arc::new(DecimalArith {
            left,
            op: self.op,
            right,
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.left.fmt_sql(f)?;
        write!(f, " {} ", self.op.symbol())?;
        self.right.fmt_sql(f)
    }
}

/// The expression with each `Decimal128` `+`, `-`, `*` of two `Decimal128`
/// operands computed by [`DecimalArith`].
pub fn fast_decimal_arithmetic(
    expr: Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Result<Arc<dyn PhysicalExpr>> {
    let rewritten = expr.transform_up(|e| {
        let Some(b) = e.downcast_ref::<BinaryExpr>() else {
            return Ok(Transformed::no(e));
        };
        let op = match b.op() {
            Operator::Plus => Op::Add,
            Operator::Minus => Op::Sub,
            Operator::Multiply => Op::Mul,
            _ => return Ok(Transformed::no(e)),
        };
        let decimal = |c: &Arc<dyn PhysicalExpr>| {
            c.data_type(schema)
                .is_ok_and(|t| matches!(t, DataType::Decimal128(..)))
        };
        if !decimal(b.left()) || !decimal(b.right()) {
            return Ok(Transformed::no(e));
        }
        Ok(Transformed::yes(Arc::new(DecimalArith {
            left: b.left().clone(),
            op,
            right: b.right().clone(),
        }) as Arc<dyn PhysicalExpr>))
    })?;
    Ok(rewritten.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Decimal128Array;
    use arrow::datatypes::Field;
    use datafusion_physical_expr::expressions::{Column, Literal};

    /// `rows` decimals of scale `s` from a seeded generator, every 5th
    /// NULL (with `garbage`, a value under it that would overflow a product).
    fn decimals(
        rows: usize,
        p: u8,
        s: i8,
        seed: u64,
        magnitude: i128,
        garbage: bool,
    ) -> Decimal128Array {
        let mut x = seed;
        let values: Vec<Option<i128>> = (0..rows)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let v = (x >> 11) as i128 % magnitude - magnitude / 2;
                (i % 5 != 4).then_some(v)
            })
            .collect();
        let array = Decimal128Array::from(values);
        // Garbage under the NULLs: the bound sees it, the result must not.
        let (_, buffer, nulls) = array.into_parts();
        let mut raw = buffer.to_vec();
        for (i, v) in raw.iter_mut().enumerate() {
            if garbage && i % 5 == 4 {
                *v = i128::MAX / 3;
            }
        }
        Decimal128Array::new(raw.into(), nulls)
            .with_precision_and_scale(p, s)
            .unwrap()
    }

    fn arith(op: Op, left: Arc<dyn PhysicalExpr>, right: Arc<dyn PhysicalExpr>) -> DecimalArith {
        DecimalArith { left, op, right }
    }

    /// Every operator, scale mix and operand kind gives Arrow's values and
    /// type, on batches that take the fast path and on ones that do not.
    #[test]
    fn results_are_arrows_on_both_paths() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Decimal128(15, 2), true),
            Field::new("b", DataType::Decimal128(20, 4), true),
        ]));
        // Batches that took the checked path, and the fast one.
        let mut paths = [0, 0];
        for (magnitude, garbage) in [
            (1_000_000i128, false),
            (1_000_000, true),
            (10i128.pow(30), false),
        ] {
            let a = decimals(1000, 15, 2, 1, magnitude, garbage);
            let b = decimals(1000, 20, 4, 2, magnitude, garbage);
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(a.clone()), Arc::new(b.clone())],
            )
            .unwrap();
            let col = |n: &str, i| Arc::new(Column::new(n, i)) as Arc<dyn PhysicalExpr>;
            let scalar = ScalarValue::Decimal128(Some(-12345), 10, 3);
            let lit = Arc::new(Literal::new(scalar.clone())) as Arc<dyn PhysicalExpr>;
            let scalar_array = Scalar::new(scalar.to_array().unwrap());
            for op in [Op::Add, Op::Sub, Op::Mul] {
                let kernel = |l: &dyn Datum, r: &dyn Datum| match op {
                    Op::Add => numeric::add_wrapping(l, r),
                    Op::Sub => numeric::sub_wrapping(l, r),
                    Op::Mul => numeric::mul_wrapping(l, r),
                };
                let cases: Vec<(DecimalArith, arrow::error::Result<ArrayRef>)> = vec![
                    (arith(op, col("a", 0), col("b", 1)), kernel(&a, &b)),
                    (arith(op, col("b", 1), col("a", 0)), kernel(&b, &a)),
                    (
                        arith(op, lit.clone(), col("a", 0)),
                        kernel(&scalar_array, &a),
                    ),
                    (
                        arith(op, col("b", 1), lit.clone()),
                        kernel(&b, &scalar_array),
                    ),
                ];
                for (expr, want) in cases {
                    // Which path the batch takes.
                    let l = Operand::new(expr.left.evaluate(&batch).unwrap()).unwrap();
                    let r = Operand::new(expr.right.evaluate(&batch).unwrap()).unwrap();
                    let fast = expr.cannot_overflow(&l, &r, expr.factors(&l, &r).unwrap());
                    paths[fast as usize] += 1;
                    let got = expr.evaluate(&batch).map(|v| v.into_array(1000).unwrap());
                    match (got, want) {
                        (Ok(got), Ok(want)) => {
                            assert_eq!(got.data_type(), want.data_type(), "{expr}");
                            assert_eq!(expr.data_type(&schema).unwrap(), *want.data_type());
                            assert_eq!(got.logical_nulls(), want.logical_nulls(), "{expr}");
                            let (g, w) = (
                                got.as_primitive::<Decimal128Type>(),
                                want.as_primitive::<Decimal128Type>(),
                            );
                            for i in (0..1000).filter(|&i| w.is_valid(i)) {
                                assert_eq!(g.value(i), w.value(i), "{expr} row {i}");
                            }
                        }
                        (Err(_), Err(_)) => {}
                        (got, want) => panic!("{expr}: {got:?} against Arrow's {want:?}"),
                    }
                }
            }
        }
        assert!(
            paths[0] >= 10 && paths[1] >= 10,
            "checked / fast batches: {paths:?}"
        );
    }

    #[test]
    fn only_decimal_operands_are_rewritten() {
        let schema = Schema::new(vec![
            Field::new("d", DataType::Decimal128(15, 2), true),
            Field::new("i", DataType::Int64, true),
        ]);
        let d = Arc::new(Column::new("d", 0)) as Arc<dyn PhysicalExpr>;
        let i = Arc::new(Column::new("i", 1)) as Arc<dyn PhysicalExpr>;
        let both = Arc::new(BinaryExpr::new(d.clone(), Operator::Multiply, d.clone()));
        let ints = Arc::new(BinaryExpr::new(i.clone(), Operator::Plus, i.clone()));
        let cmp = Arc::new(BinaryExpr::new(d.clone(), Operator::Lt, d));
        let rewritten = fast_decimal_arithmetic(both, &schema).unwrap();
        assert!(rewritten.downcast_ref::<DecimalArith>().is_some());
        for e in [ints as Arc<dyn PhysicalExpr>, cmp] {
            let same = fast_decimal_arithmetic(e, &schema).unwrap();
            assert!(same.downcast_ref::<BinaryExpr>().is_some());
        }
    }
}

//! Filter: keeps the rows for which a predicate is true.
//!
//! A predicate `c1 AND c2 AND …` is evaluated conjunct by conjunct on a
//! batch that narrows as it goes:
//!
//! ```text
//!   batch ─► c1 ─► mask ─┬─ keeps > NARROW_BELOW of the rows: AND it into
//!                        │   the running mask, evaluate c2 on the same rows
//!                        └─ keeps fewer: filter the batch by the running
//!                            mask now, evaluate c2 on the rows left
//!   … after the last conjunct: filter by the running mask, if any
//! ```
//!
//! Before that, the conjuncts that read one column and literals only
//! (`l_shipdate >= DATE '1994-01-01'`, `l_shipmode IN ('AIR', 'MAIL')`,
//! ORs of ranges) are merged per column into the set of values they
//! accept and tested in one pass over the column each ([`column_test`],
//! [`kernel`]), on the whole batch: each pass only keeps rows the passes
//! before kept, so no batch is copied until the rest of the conjuncts
//! run. Such a conjunct cannot fail, so running it first changes no
//! answer and no error.
//!
//! A row that one conjunct rejected is never filtered back in, so no mask is
//! scattered back to the full batch (what evaluating the whole `AND` tree
//! as one expression does where its left side is selective), and later
//! conjuncts run on the rows the earlier ones kept. NULL counts as false,
//! as for the whole predicate. A conjunct that fails on rows an earlier one
//! rejected (`x <> 0 AND 100 / x > 5`) is evaluated again on the rows
//! still in, so such a guard works as it does in PostgreSQL.

use arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use arrow::compute::kernels::boolean::and;
use arrow::compute::{filter_record_batch, prep_null_mask_filter};
use arrow::datatypes::DataType;
use datafusion_physical_expr::utils::split_conjunction;

use self::column_test::CompiledConjunct;
use super::{Emit, Operator};
use crate::error::{ExecError, Result};
use crate::plan::ExprRef;

mod column_test;
#[cfg(test)]
mod compiled_tests;
mod kernel;

/// A running mask that keeps fewer than this share of the rows is applied
/// to the batch before the next conjunct is evaluated: filtering the batch
/// then costs less than evaluating the conjunct on the rows already out.
const NARROW_BELOW: f64 = 0.5;

#[derive(Debug)]
pub struct FilterOperator {
    predicate: ExprRef,
    /// The top-level conjuncts over one column and literals, merged per
    /// column.
    column_tests: Vec<CompiledConjunct>,
    /// The other top-level conjuncts, in the predicate's order.
    conjuncts: Vec<ExprRef>,
}

impl FilterOperator {
    pub fn new(predicate: ExprRef) -> Self {
        let conjuncts = split_conjunction(&predicate).into_iter().cloned().collect();
        let (column_tests, conjuncts) = column_test::partition(conjuncts);
        FilterOperator {
            predicate,
            column_tests,
            conjuncts,
        }
    }

    fn apply(&self, batch: RecordBatch) -> Result<RecordBatch> {
        let mut running: Option<BooleanArray> = None;
        for compiled in &self.column_tests {
            let alive = running.as_ref().map(BooleanArray::values);
            let column = batch.column(compiled.test.column);
            let mask = match kernel::evaluate(&compiled.test, column.as_ref(), alive) {
                Some(mask) => mask,
                None => {
                    let mut mask = running.clone();
                    for expr in &compiled.exprs {
                        let next = mask_of(expr, &batch)?;
                        mask = Some(match mask {
                            None => next,
                            Some(before) => and(&before, &next)?,
                        });
                    }
                    mask.expect("a compiled conjunct stands for at least one expression")
                }
            };
            if mask.true_count() == 0 {
                return Ok(batch.slice(0, 0));
            }
            running = Some(mask);
        }
        apply_conjuncts(&self.conjuncts, batch, running)
    }
}

/// Evaluates one boolean conjunct on `batch`; NULL becomes false.
fn mask_of(conjunct: &ExprRef, batch: &RecordBatch) -> Result<BooleanArray> {
    let mask = conjunct.evaluate(batch)?.into_array(batch.num_rows())?;
    if mask.data_type() != &DataType::Boolean {
        return Err(ExecError::Internal(format!(
            "filter predicate {conjunct} is {}, not boolean",
            mask.data_type()
        )));
    }
    let mask = mask.as_boolean();
    Ok(if mask.null_count() > 0 {
        prep_null_mask_filter(mask)
    } else {
        mask.clone()
    })
}

/// Keeps the rows of `batch` for which `running` (if any) and every
/// conjunct are true, narrowing the batch between conjuncts (see the
/// module docs).
fn apply_conjuncts(
    conjuncts: &[ExprRef],
    batch: RecordBatch,
    mut running: Option<BooleanArray>,
) -> Result<RecordBatch> {
    let mut rows = batch;
    for conjunct in conjuncts {
        if let Some(mask) = &running {
            if (mask.true_count() as f64) < NARROW_BELOW * rows.num_rows() as f64 {
                rows = filter_record_batch(&rows, mask)?;
                running = None;
            }
        }
        if rows.num_rows() == 0 {
            return Ok(rows);
        }
        let mask = match mask_of(conjunct, &rows) {
            Ok(mask) => mask,
            Err(err) => {
                // What failed may be a row an earlier conjunct rejected (a
                // guard such as `x <> 0 AND 100 / x > 5`, where the mask
                // kept too many rows to narrow the batch first): evaluate
                // again on the rows still in, as a left-to-right AND would.
                let Some(before) = running.take().filter(|m| m.true_count() < rows.num_rows())
                else {
                    return Err(err);
                };
                rows = filter_record_batch(&rows, &before)?;
                if rows.num_rows() == 0 {
                    return Ok(rows);
                }
                mask_of(conjunct, &rows)?
            }
        };
        running = Some(match running {
            None => mask,
            Some(before) => and(&before, &mask)?,
        });
    }
    match running {
        Some(mask) if mask.true_count() < rows.num_rows() => Ok(filter_record_batch(&rows, &mask)?),
        _ => Ok(rows),
    }
}

impl Operator for FilterOperator {
    fn process(&self, batch: RecordBatch, _worker: usize, emit: &mut Emit<'_>) -> Result<()> {
        emit(self.apply(batch)?).map(drop)
    }

    fn output(&self) -> super::Output {
        super::Output::One
    }

    fn name(&self) -> String {
        let mut name = format!("filter {}", self.predicate);
        if !self.column_tests.is_empty() {
            let tests: Vec<String> = self
                .column_tests
                .iter()
                .map(|c| c.test.to_string())
                .collect();
            name.push_str(&format!(" (one pass each: {})", tests.join(", ")));
        }
        name
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array};
    use arrow::datatypes::{Field, Schema};
    use datafusion_expr::Operator as Op;
    use datafusion_physical_expr::expressions::{binary, col, lit};

    use super::*;

    fn batch(values: Vec<Option<i64>>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
        let column: ArrayRef = Arc::new(Int64Array::from(values));
        RecordBatch::try_new(schema, vec![column]).unwrap()
    }

    fn cmp(b: &RecordBatch, op: Op, v: i64) -> ExprRef {
        binary(col("x", &b.schema()).unwrap(), op, lit(v), &b.schema()).unwrap()
    }

    fn and_all(b: &RecordBatch, parts: Vec<ExprRef>) -> ExprRef {
        parts
            .into_iter()
            .reduce(|l, r| binary(l, Op::And, r, &b.schema()).unwrap())
            .unwrap()
    }

    fn values(b: &RecordBatch) -> Vec<Option<i64>> {
        b.column(0)
            .as_primitive::<arrow::datatypes::Int64Type>()
            .iter()
            .collect()
    }

    /// The conjunct-by-conjunct filter keeps exactly the rows the whole
    /// predicate keeps: selective and unselective conjuncts in either
    /// order (so the batch is narrowed at different points), NULLs, a
    /// conjunct that rejects everything, and a batch without rows.
    #[test]
    fn conjunct_by_conjunct_keeps_what_the_whole_predicate_keeps() {
        let mut rows: Vec<Option<i64>> = (0..1000).map(Some).collect();
        rows[7] = None;
        rows[500] = None;
        let b = batch(rows);
        let cases = vec![
            vec![
                cmp(&b, Op::Lt, 900),
                cmp(&b, Op::Gt, 100),
                cmp(&b, Op::NotEq, 250),
            ],
            vec![
                cmp(&b, Op::Lt, 50),
                cmp(&b, Op::Gt, 3),
                cmp(&b, Op::NotEq, 20),
            ],
            vec![
                cmp(&b, Op::Gt, 3),
                cmp(&b, Op::Lt, 50),
                cmp(&b, Op::GtEq, 0),
            ],
            vec![cmp(&b, Op::GtEq, 0), cmp(&b, Op::Lt, 0), cmp(&b, Op::Gt, 5)],
            vec![cmp(&b, Op::NotEq, 1)],
        ];
        for parts in cases {
            let whole = and_all(&b, parts.clone());
            let mask = whole
                .evaluate(&b)
                .unwrap()
                .into_array(b.num_rows())
                .unwrap();
            let expected =
                filter_record_batch(&b, &prep_null_mask_filter(mask.as_boolean())).unwrap();
            let got = apply_conjuncts(&parts, b.clone(), None).unwrap();
            assert_eq!(values(&got), values(&expected), "{whole}");
            let op = FilterOperator::new(whole.clone());
            // Every conjunct here compares `x` with a literal: all merge
            // into one compiled test, which the operator runs.
            assert!(op.conjuncts.is_empty());
            assert_eq!(op.column_tests.len(), 1);
            assert_eq!(op.column_tests[0].exprs.len(), parts.len());
            let mut out = Vec::new();
            op.process(b.clone(), 0, &mut |o| {
                out.push(o);
                Ok(super::super::Demand::More)
            })
            .unwrap();
            assert_eq!(values(&out[0]), values(&expected), "{whole}");
            assert!(values(&got).iter().all(Option::is_some));
        }
        let empty = b.slice(0, 0);
        let parts = vec![cmp(&b, Op::Gt, 1), cmp(&b, Op::Lt, 5)];
        assert_eq!(apply_conjuncts(&parts, empty, None).unwrap().num_rows(), 0);
    }

    /// `x <> 0 AND 100 / x > 5` with a zero among many other values: the
    /// first mask keeps too many rows to narrow the batch, the division
    /// fails on the zero, and is evaluated again without it. Without the
    /// guard the division by zero is an error.
    #[test]
    fn a_conjunct_failing_only_on_rejected_rows_is_evaluated_on_the_rows_left() {
        let b = batch((0..100).map(Some).collect());
        let div = || {
            let hundred_by_x = binary(
                lit(100i64),
                Op::Divide,
                col("x", &b.schema()).unwrap(),
                &b.schema(),
            )
            .unwrap();
            binary(hundred_by_x, Op::Gt, lit(5i64), &b.schema()).unwrap()
        };
        let guarded = vec![cmp(&b, Op::NotEq, 0), div()];
        let got = apply_conjuncts(&guarded, b.clone(), None).unwrap();
        // Integer division: 100 / 16 = 6 > 5, 100 / 17 = 5.
        assert_eq!(values(&got), (1..17).map(Some).collect::<Vec<_>>());
        assert!(apply_conjuncts(&[div()], b.clone(), None).is_err());
        assert!(apply_conjuncts(&[cmp(&b, Op::GtEq, 0), div()], b.clone(), None).is_err());
    }

    #[test]
    fn a_predicate_that_is_not_boolean_is_an_internal_error() {
        let b = batch(vec![Some(1)]);
        let not_boolean = col("x", &b.schema()).unwrap();
        let err = apply_conjuncts(&[not_boolean], b, None).unwrap_err();
        assert!(matches!(err, ExecError::Internal(_)), "{err}");
    }
}

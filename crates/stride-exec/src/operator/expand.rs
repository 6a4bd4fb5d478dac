//! Expand: a set-returning function called once per input row (PostgreSQL's
//! `FROM t, generate_series(1, t.n)`, a `LATERAL` call), each input row
//! repeated once per value the function gives for that row's arguments,
//! the value appended as the last column.
//!
//! The operator is streaming: the rows of a morsel are expanded in order
//! and handed on in batches of about [`OUTPUT_ROWS`] rows, so one input
//! row with a long series does not make one huge batch, and it is
//! resumable: after any batch it hands on, a task may stop and a later one
//! go on from there (`crate::suspend`). The function
//! itself ([`SetFunctionRows`]) is the SQL layer's; this operator knows
//! only that it maps argument values to arrays of its column's type.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{concat, take};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::ScalarValue;

use super::{Demand, Emit, Operator, Output, Resume};
use crate::error::{ExecError, Result};
use crate::plan::ExprRef;

/// Rows gathered before a batch is handed on.
pub const OUTPUT_ROWS: usize = 8192;

/// A set-returning function as the executor calls it.
pub trait SetFunctionRows: Send + Sync + fmt::Debug {
    /// The values the function gives for one row's `args`, in order, as
    /// arrays of `data_type` (several for a long result; none or empty
    /// ones for no rows).
    fn rows(&self, args: &[ScalarValue], data_type: &DataType) -> Result<Vec<ArrayRef>>;
    /// The function's name (EXPLAIN, operator names).
    fn name(&self) -> String;
}

#[derive(Debug)]
pub struct ExpandOperator {
    args: Vec<ExprRef>,
    function: Arc<dyn SetFunctionRows>,
    outer: bool,
    /// Output schema, all fields nullable: input columns ++ the value.
    schema: SchemaRef,
}

impl ExpandOperator {
    pub fn new(
        args: Vec<ExprRef>,
        function: Arc<dyn SetFunctionRows>,
        outer: bool,
        schema: SchemaRef,
    ) -> Self {
        ExpandOperator {
            args,
            function,
            outer,
            schema: crate::nullable_schema(&schema),
        }
    }

    fn value_type(&self) -> &DataType {
        self.schema
            .fields()
            .last()
            .expect("an expansion has its value column")
            .data_type()
    }
}

/// Input row indices and the values gathered for them, not yet handed on.
#[derive(Default)]
struct Pending {
    rows: Vec<u32>,
    values: Vec<ArrayRef>,
}

impl Pending {
    fn len(&self) -> usize {
        self.rows.len()
    }

    /// The gathered rows as one output batch, and empty again.
    fn take_batch(
        &mut self,
        input: &RecordBatch,
        schema: &SchemaRef,
        value_type: &DataType,
    ) -> Result<RecordBatch> {
        let indices = UInt32Array::from(std::mem::take(&mut self.rows));
        let values = std::mem::take(&mut self.values);
        let mut columns = input
            .columns()
            .iter()
            .map(|c| take(c.as_ref(), &indices, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let refs: Vec<&dyn Array> = values.iter().map(|v| v.as_ref()).collect();
        columns.push(if refs.is_empty() {
            new_null_array(value_type, 0)
        } else {
            concat(&refs)?
        });
        Ok(RecordBatch::try_new(schema.clone(), columns)?)
    }
}

/// Where an expansion stopped inside a batch ([`Resume`]): the evaluated
/// arguments, the input row being expanded, what its call gave that is not
/// handed on yet, and how many values it gave so far. It stops only right
/// after it handed on a batch, so nothing is gathered but not handed on.
struct ExpandResume {
    args: Vec<ArrayRef>,
    row: usize,
    current: Option<RowInProgress>,
}

/// The function's values for one input row, the first possibly sliced.
struct RowInProgress {
    parts: VecDeque<ArrayRef>,
    produced: usize,
}

impl Operator for ExpandOperator {
    fn process(&self, batch: RecordBatch, worker: usize, emit: &mut Emit<'_>) -> Result<()> {
        self.process_resumable(&batch, None, worker, emit).map(drop)
    }

    fn output(&self) -> Output {
        Output::Resumable
    }

    fn process_resumable(
        &self,
        batch: &RecordBatch,
        from: Option<Resume>,
        _worker: usize,
        emit: &mut Emit<'_>,
    ) -> Result<Option<Resume>> {
        let n = batch.num_rows();
        let (args, mut row, mut current) = match from {
            Some(resume) => {
                let r: ExpandResume = resume.into_state()?;
                (r.args, r.row, r.current)
            }
            None => {
                let args = self
                    .args
                    .iter()
                    .map(|e| e.evaluate(batch).and_then(|v| v.into_array(n)))
                    .collect::<datafusion_common::Result<Vec<_>>>()?;
                (args, 0, None)
            }
        };
        let value_type = self.value_type().clone();
        let mut pending = Pending::default();
        let mut values = Vec::with_capacity(args.len());
        while row < n {
            let index = u32::try_from(row)
                .map_err(|_| ExecError::Internal("a morsel of more than 2^32 rows".into()))?;
            let in_progress = match &mut current {
                Some(c) => c,
                None => {
                    values.clear();
                    for a in &args {
                        values.push(ScalarValue::try_from_array(a, row)?);
                    }
                    let parts = self.function.rows(&values, &value_type)?;
                    if let Some(part) = parts.iter().find(|p| p.data_type() != &value_type) {
                        return Err(ExecError::Internal(format!(
                            "{} gave {} values, its column is {value_type}",
                            self.function.name(),
                            part.data_type()
                        )));
                    }
                    current.insert(RowInProgress {
                        parts: parts.into(),
                        produced: 0,
                    })
                }
            };
            // A long part is handed on in slices of the batch size.
            while let Some(part) = in_progress.parts.pop_front() {
                let room = OUTPUT_ROWS.saturating_sub(pending.len()).max(1);
                let len = room.min(part.len());
                pending.rows.extend(std::iter::repeat_n(index, len));
                pending.values.push(part.slice(0, len));
                in_progress.produced += len;
                if len < part.len() {
                    in_progress
                        .parts
                        .push_front(part.slice(len, part.len() - len));
                }
                if pending.len() >= OUTPUT_ROWS {
                    let out = pending.take_batch(batch, &self.schema, &value_type)?;
                    match emit(out)? {
                        Demand::More => {}
                        Demand::Enough => return Ok(None),
                        Demand::Suspend => {
                            return Ok(Some(Resume::new(ExpandResume { args, row, current })));
                        }
                    }
                }
            }
            if in_progress.produced == 0 && self.outer {
                pending.rows.push(index);
                pending.values.push(new_null_array(&value_type, 1));
            }
            current = None;
            row += 1;
        }
        if pending.len() > 0 {
            let out = pending.take_batch(batch, &self.schema, &value_type)?;
            emit(out)?;
        }
        Ok(None)
    }

    fn name(&self) -> String {
        let e: Vec<String> = self.args.iter().map(|e| e.to_string()).collect();
        format!(
            "expand{} {}({})",
            if self.outer { " outer" } else { "" },
            self.function.name(),
            e.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{Field, Int64Type, Schema};
    use datafusion_physical_expr::expressions::Column;

    /// `n` copies of the argument, `n` being the argument itself.
    #[derive(Debug)]
    struct Repeat;

    impl SetFunctionRows for Repeat {
        fn rows(&self, args: &[ScalarValue], _: &DataType) -> Result<Vec<ArrayRef>> {
            match &args[0] {
                ScalarValue::Int64(Some(n)) if *n < 0 => {
                    Err(ExecError::InvalidParameter("negative".into()))
                }
                ScalarValue::Int64(Some(n)) => {
                    Ok(vec![Arc::new(Int64Array::from(vec![*n; *n as usize]))])
                }
                _ => Ok(Vec::new()),
            }
        }

        fn name(&self) -> String {
            "repeat".into()
        }
    }

    /// An expansion by `Repeat` of column `n`, and a batch of `input`.
    fn operator(outer: bool, input: Vec<Option<i64>>) -> (ExpandOperator, RecordBatch) {
        let in_schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, true)]));
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
        ]));
        let op = ExpandOperator::new(
            vec![Arc::new(Column::new("n", 0))],
            Arc::new(Repeat),
            outer,
            schema,
        );
        let batch =
            RecordBatch::try_new(in_schema, vec![Arc::new(Int64Array::from(input))]).unwrap();
        (op, batch)
    }

    /// Appends an output batch's `(n, v)` rows to `out`.
    fn collect(b: &RecordBatch, out: &mut Vec<(Option<i64>, Option<i64>)>) {
        assert!(b.num_rows() <= OUTPUT_ROWS);
        let n = b.column(0).as_primitive::<Int64Type>();
        let v = b.column(1).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            out.push((
                n.is_valid(i).then(|| n.value(i)),
                v.is_valid(i).then(|| v.value(i)),
            ));
        }
    }

    fn run(outer: bool, input: Vec<Option<i64>>) -> Result<Vec<(Option<i64>, Option<i64>)>> {
        let (op, batch) = operator(outer, input);
        let mut out = Vec::new();
        op.process(batch, 0, &mut |b: RecordBatch| {
            collect(&b, &mut out);
            Ok(Demand::More)
        })?;
        Ok(out)
    }

    #[test]
    fn each_row_repeated_once_per_value() {
        let out = run(false, vec![Some(2), Some(0), None, Some(1)]).unwrap();
        assert_eq!(
            out,
            [(Some(2), Some(2)), (Some(2), Some(2)), (Some(1), Some(1))]
        );
    }

    #[test]
    fn outer_keeps_rows_without_values() {
        let out = run(true, vec![Some(0), Some(1), None]).unwrap();
        assert_eq!(out, [(Some(0), None), (Some(1), Some(1)), (None, None)]);
    }

    #[test]
    fn long_results_are_cut_into_batches() {
        let out = run(false, vec![Some(20_000), Some(3)]).unwrap();
        assert_eq!(out.len(), 20_003);
        assert!(out[..20_000]
            .iter()
            .all(|r| *r == (Some(20_000), Some(20_000))));
        assert_eq!(out[20_000..], [(Some(3), Some(3)); 3]);
    }

    #[test]
    fn a_suspended_expansion_goes_on_where_it_stopped() {
        // Stopped after every batch it hands on and resumed each time, the
        // expansion gives what one uninterrupted call gives: rows with long
        // results (a stop inside a row's values and right after them),
        // rows without values kept by `outer`, NULL arguments.
        for outer in [false, true] {
            let input = vec![Some(20_000), Some(0), Some(8192), None, Some(3), Some(9000)];
            let whole = run(outer, input.clone()).unwrap();
            let (op, batch) = operator(outer, input);
            let mut out = Vec::new();
            let mut from = None;
            let mut calls = 0;
            loop {
                calls += 1;
                from = op
                    .process_resumable(&batch, from, 0, &mut |b: RecordBatch| {
                        collect(&b, &mut out);
                        Ok(Demand::Suspend)
                    })
                    .unwrap();
                if from.is_none() {
                    break;
                }
            }
            assert_eq!(out, whole, "outer: {outer}");
            assert!(calls >= 4, "stopped after each full batch: {calls} calls");
        }
    }

    #[test]
    fn a_refused_argument_fails_the_morsel() {
        let err = run(false, vec![Some(1), Some(-1)]).unwrap_err();
        assert!(matches!(err, ExecError::InvalidParameter(_)));
    }
}

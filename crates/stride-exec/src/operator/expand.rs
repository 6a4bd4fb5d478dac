//! Expand: a set-returning function called once per input row (PostgreSQL's
//! `FROM t, generate_series(1, t.n)`, a `LATERAL` call), each input row
//! repeated once per value the function gives for that row's arguments,
//! the value appended as the last column.
//!
//! The operator is streaming: the rows of a morsel are expanded in order
//! and handed on in batches of about [`OUTPUT_ROWS`] rows, so one input
//! row with a long series does not make one huge batch. The function
//! itself ([`SetFunctionRows`]) is the SQL layer's; this operator knows
//! only that it maps argument values to arrays of its column's type.

use std::fmt;
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{concat, take};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::ScalarValue;

use super::{Demand, Emit, Operator};
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

impl Operator for ExpandOperator {
    fn process(&self, batch: RecordBatch, _worker: usize, emit: &mut Emit<'_>) -> Result<()> {
        let n = batch.num_rows();
        let args = self
            .args
            .iter()
            .map(|e| e.evaluate(&batch).and_then(|v| v.into_array(n)))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let value_type = self.value_type().clone();
        let mut pending = Pending::default();
        let mut values = Vec::with_capacity(args.len());
        for row in 0..n {
            values.clear();
            for a in &args {
                values.push(ScalarValue::try_from_array(a, row)?);
            }
            let index = u32::try_from(row)
                .map_err(|_| ExecError::Internal("a morsel of more than 2^32 rows".into()))?;
            let mut produced = 0;
            for part in self.function.rows(&values, &value_type)? {
                if part.data_type() != &value_type {
                    return Err(ExecError::Internal(format!(
                        "{} gave {} values, its column is {value_type}",
                        self.function.name(),
                        part.data_type()
                    )));
                }
                // A long part is handed on in slices of the batch size.
                let mut offset = 0;
                while offset < part.len() {
                    let room = OUTPUT_ROWS.saturating_sub(pending.len()).max(1);
                    let len = room.min(part.len() - offset);
                    pending.rows.extend(std::iter::repeat_n(index, len));
                    pending.values.push(part.slice(offset, len));
                    offset += len;
                    produced += len;
                    if pending.len() >= OUTPUT_ROWS {
                        let out = pending.take_batch(&batch, &self.schema, &value_type)?;
                        if emit(out)? == Demand::Enough {
                            return Ok(());
                        }
                    }
                }
            }
            if produced == 0 && self.outer {
                pending.rows.push(index);
                pending.values.push(new_null_array(&value_type, 1));
            }
        }
        if pending.len() > 0 {
            let out = pending.take_batch(&batch, &self.schema, &value_type)?;
            emit(out)?;
        }
        Ok(())
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

    fn run(outer: bool, input: Vec<Option<i64>>) -> Result<Vec<(Option<i64>, Option<i64>)>> {
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
        let batch = RecordBatch::try_new(in_schema, vec![Arc::new(Int64Array::from(input))])?;
        let mut out = Vec::new();
        op.process(batch, 0, &mut |b: RecordBatch| {
            assert!(b.num_rows() <= OUTPUT_ROWS);
            let n = b.column(0).as_primitive::<Int64Type>();
            let v = b.column(1).as_primitive::<Int64Type>();
            for i in 0..b.num_rows() {
                out.push((
                    n.is_valid(i).then(|| n.value(i)),
                    v.is_valid(i).then(|| v.value(i)),
                ));
            }
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
    fn a_refused_argument_fails_the_morsel() {
        let err = run(false, vec![Some(1), Some(-1)]).unwrap_err();
        assert!(matches!(err, ExecError::InvalidParameter(_)));
    }
}

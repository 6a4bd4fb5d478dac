//! Filter: keeps the rows for which a predicate is true.

use arrow::array::{AsArray, RecordBatch};
use arrow::compute::filter_record_batch;
use arrow::datatypes::DataType;

use super::{Emit, Operator};
use crate::error::{ExecError, Result};
use crate::plan::ExprRef;

#[derive(Debug)]
pub struct FilterOperator {
    predicate: ExprRef,
}

impl FilterOperator {
    pub fn new(predicate: ExprRef) -> Self {
        FilterOperator { predicate }
    }
}

/// Evaluates a boolean predicate on `batch` and keeps the rows where it is true.
pub fn apply_predicate(predicate: &ExprRef, batch: &RecordBatch) -> Result<RecordBatch> {
    let mask = predicate.evaluate(batch)?.into_array(batch.num_rows())?;
    if mask.data_type() != &DataType::Boolean {
        return Err(ExecError::Internal(format!(
            "filter predicate {predicate} is {}, not boolean",
            mask.data_type()
        )));
    }
    Ok(filter_record_batch(batch, mask.as_boolean())?)
}

impl Operator for FilterOperator {
    fn process(&self, batch: RecordBatch, _worker: usize, emit: &mut Emit<'_>) -> Result<()> {
        emit(apply_predicate(&self.predicate, &batch)?).map(drop)
    }

    fn name(&self) -> String {
        format!("filter {}", self.predicate)
    }
}

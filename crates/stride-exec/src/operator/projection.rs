//! Projection: evaluates expressions into the output columns.

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;

use super::{Emit, Operator};
use crate::error::Result;
use crate::plan::ExprRef;

#[derive(Debug)]
pub struct ProjectionOperator {
    exprs: Vec<ExprRef>,
    /// Output schema, all fields nullable.
    schema: SchemaRef,
}

impl ProjectionOperator {
    pub fn new(exprs: Vec<ExprRef>, schema: SchemaRef) -> Self {
        ProjectionOperator {
            exprs,
            schema: crate::nullable_schema(&schema),
        }
    }
}

impl Operator for ProjectionOperator {
    fn process(&self, batch: RecordBatch, _worker: usize, emit: &mut Emit<'_>) -> Result<()> {
        let n = batch.num_rows();
        let columns = self
            .exprs
            .iter()
            .map(|e| e.evaluate(&batch).and_then(|v| v.into_array(n)))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        emit(RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
        .map(drop)
    }

    fn output(&self) -> super::Output {
        super::Output::One
    }

    fn name(&self) -> String {
        let e: Vec<String> = self.exprs.iter().map(|e| e.to_string()).collect();
        format!("project [{}]", e.join(", "))
    }
}

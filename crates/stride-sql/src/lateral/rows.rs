//! The set-returning functions as the executor calls them once per row
//! (`stride_exec::operator::expand`): the same rows as a call with
//! constant arguments (`crate::table_functions`), with its errors typed
//! for the executor.

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use datafusion_common::ScalarValue;
use stride_exec::operator::expand::SetFunctionRows;
use stride_exec::ExecError;

use crate::error::{PlanKind, SqlError};
use crate::table_functions::{unnest_batches, SetFunction};

/// One set-returning function, called per row.
#[derive(Debug)]
pub struct RowCall {
    pub function: SetFunction,
}

impl SetFunctionRows for RowCall {
    fn rows(
        &self,
        args: &[ScalarValue],
        data_type: &DataType,
    ) -> stride_exec::Result<Vec<ArrayRef>> {
        let batches = match self.function {
            SetFunction::GenerateSeries => crate::series::series(args, data_type),
            SetFunction::Unnest => unnest_batches(&args[0], data_type),
        }
        .map_err(exec_error)?;
        Ok(batches.into_iter().map(|b| b.column(0).clone()).collect())
    }

    fn name(&self) -> String {
        self.function.name().to_string()
    }
}

/// A function's error as the executor's: a refused argument keeps its
/// SQLSTATE (22023).
fn exec_error(e: SqlError) -> ExecError {
    match e {
        SqlError::Exec(e) => e,
        SqlError::Plan {
            kind: PlanKind::InvalidParameter,
            message,
        } => ExecError::InvalidParameter(message),
        other => ExecError::Internal(other.to_string()),
    }
}

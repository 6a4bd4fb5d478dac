//! Lowering a set-returning function's call in `FROM`
//! (`crate::table_functions`): its arguments, constant by now, evaluated
//! once, and its rows emitted as literal batches.

use stride_exec::PhysicalPlan;

use super::{arrow_schema, unsupported, Lowerer};
use crate::error::Result;
use crate::table_functions::{
    integer_argument, series_batches, unnest_batches, SetFunction, SetFunctionCall,
};

impl Lowerer {
    /// The rows of `call`, as literal batches. Its arguments may read no
    /// column: a call whose arguments read another relation's columns is
    /// lowered only inside a correlated scalar subquery, which
    /// `engine/apply.rs` has run with the outer values bound.
    pub(super) fn set_function(&self, call: &SetFunctionCall) -> Result<PhysicalPlan> {
        let mut values = Vec::with_capacity(call.args.len());
        for arg in &call.args {
            if !arg.column_refs().is_empty() || arg.contains_outer() {
                return Err(unsupported(format!(
                    "{} whose arguments read columns of another relation in the same FROM (LATERAL)",
                    call.function.name()
                )));
            }
            values.push(self.constant(arg)?);
        }
        let batches = match call.function {
            SetFunction::GenerateSeries => {
                let step = match values.get(2) {
                    Some(v) => integer_argument(v)?,
                    None => Some(1),
                };
                series_batches(
                    integer_argument(&values[0])?,
                    integer_argument(&values[1])?,
                    step,
                    call.data_type(),
                )?
            }
            SetFunction::Unnest => unnest_batches(&values[0], call.data_type())?,
        };
        Ok(PhysicalPlan::Values {
            schema: arrow_schema(&call.schema),
            batches,
        })
    }
}

//! Lowering a set-returning function's call in `FROM`
//! (`crate::table_functions`): its arguments, constant by now, evaluated
//! once, and its rows emitted as literal batches; a lateral call
//! (`crate::lateral`) as an expansion of its input's rows.

use stride_exec::PhysicalPlan;

use super::{arrow_schema, unsupported, Lowerer};
use crate::error::Result;
use crate::table_functions::{unnest_batches, SetFunction, SetFunctionCall};

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
            SetFunction::GenerateSeries => crate::series::series(&values, call.data_type())?,
            SetFunction::Unnest => unnest_batches(&values[0], call.data_type())?,
        };
        Ok(PhysicalPlan::Values {
            schema: arrow_schema(&call.schema),
            batches,
        })
    }

    /// A lateral call: its input's rows expanded, the function called
    /// once per row with the arguments read from it.
    pub(super) fn lateral_call(&self, call: &crate::lateral::LateralCall) -> Result<PhysicalPlan> {
        let args = call
            .args
            .iter()
            .map(|a| self.expr(a, call.input.schema()))
            .collect::<Result<Vec<_>>>()?;
        Ok(PhysicalPlan::Expand(Box::new(
            stride_exec::plan::ExpandPlan {
                input: self.lower(&call.input)?,
                args,
                function: std::sync::Arc::new(crate::lateral::rows::RowCall {
                    function: call.function,
                }),
                outer: call.outer,
                schema: arrow_schema(&call.schema),
            },
        )))
    }
}

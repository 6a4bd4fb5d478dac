//! Set-returning functions that read the columns of the `FROM` items
//! before them (PostgreSQL's implicit `LATERAL`: `FROM t,
//! generate_series(1, t.n)`, `CROSS JOIN LATERAL unnest(t.a)`, `LEFT JOIN
//! LATERAL … ON true`), executed as a per-row expansion of the items
//! before them.
//!
//! Three steps (after [`select_list`] has made set-returning calls of a
//! select list such calls in `FROM`):
//! * [`syntax`]: on the parsed statement, a call after the first item
//!   becomes a lateral derived table over the call, so that the planner
//!   binds the columns it reads as typed outer references;
//! * [`plan`]: after analysis, the join of the items before with that
//!   derived table becomes a [`LateralCall`] node over the items before,
//!   its arguments reading their columns;
//! * lowering (`lower/table_functions.rs`) makes it
//!   `stride_exec::plan::PhysicalPlan::Expand`, a streaming operator in
//!   its input's pipeline that calls [`rows::RowCall`] once per row.
//!
//! `LATERAL` subqueries (`FROM t, LATERAL (SELECT … WHERE x = t.id)`) are
//! not this module's: DataFusion's `decorrelate_lateral_join` rule makes
//! them joins. What neither handles (a `LEFT JOIN LATERAL` call with an
//! `ON` condition other than true, a lateral subquery with a correlated
//! `LIMIT`) fails with 0A000, never with a wrong answer.

pub mod plan;
pub mod rows;
pub mod select_list;
pub mod syntax;

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, FieldRef};
use datafusion_common::{DFSchema, DFSchemaRef, DataFusionError, TableReference};
use datafusion_expr::{Expr, LogicalPlan, UserDefinedLogicalNodeCore};

use crate::table_functions::SetFunction;

/// A set-returning function called once per row of `input`, each row
/// repeated once per value, the value appended as the last column.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LateralCall {
    pub input: Arc<LogicalPlan>,
    pub function: SetFunction,
    /// The arguments, over `input`'s columns (and, inside a correlated
    /// subquery, outer references `engine/apply.rs` binds).
    pub args: Vec<Expr>,
    /// `LEFT JOIN LATERAL … ON true`: a row for which the function gives
    /// no values is kept once, with NULL.
    pub outer: bool,
    /// The value column's qualifier (the call's alias) and field.
    pub value: (Option<TableReference>, FieldRef),
    /// `input`'s columns ++ the value.
    pub schema: DFSchemaRef,
}

impl LateralCall {
    pub fn try_new(
        input: Arc<LogicalPlan>,
        function: SetFunction,
        args: Vec<Expr>,
        outer: bool,
        value: (Option<TableReference>, FieldRef),
    ) -> datafusion_common::Result<Self> {
        let value_schema = DFSchema::new_with_metadata(vec![value.clone()], HashMap::new())?;
        let schema = Arc::new(input.schema().join(&value_schema)?);
        Ok(LateralCall {
            input,
            function,
            args,
            outer,
            value,
            schema,
        })
    }

    /// The type of the function's values.
    pub fn data_type(&self) -> &DataType {
        self.value.1.data_type()
    }
}

impl PartialOrd for LateralCall {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        match self.function.partial_cmp(&other.function) {
            Some(std::cmp::Ordering::Equal) => {}
            order => return order,
        }
        match self.args.partial_cmp(&other.args) {
            Some(std::cmp::Ordering::Equal) => {}
            order => return order,
        }
        match self.outer.partial_cmp(&other.outer) {
            Some(std::cmp::Ordering::Equal) => self.input.partial_cmp(&other.input),
            order => order,
        }
    }
}

impl UserDefinedLogicalNodeCore for LateralCall {
    fn name(&self) -> &str {
        "LateralCall"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![self.input.as_ref()]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        self.args.clone()
    }

    /// Filters on the input's columns may go below; those on the value
    /// may not.
    fn prevent_predicate_push_down_columns(&self) -> std::collections::HashSet<String> {
        std::iter::once(self.value.1.name().clone()).collect()
    }

    fn fmt_for_explain(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let args: Vec<String> = self.args.iter().map(ToString::to_string).collect();
        write!(
            f,
            "LateralCall{}: {}({})",
            if self.outer { " outer" } else { "" },
            self.function.name(),
            args.join(", ")
        )
    }

    fn with_exprs_and_inputs(
        &self,
        exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> datafusion_common::Result<Self> {
        let (Some(input), true) = (inputs.pop(), inputs.is_empty()) else {
            return Err(DataFusionError::Internal(
                "a lateral call takes one input".into(),
            ));
        };
        LateralCall::try_new(
            Arc::new(input),
            self.function,
            exprs,
            self.outer,
            self.value.clone(),
        )
    }
}

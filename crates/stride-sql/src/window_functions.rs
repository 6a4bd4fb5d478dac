//! The window functions SQL can call: their names, argument signatures and
//! result types, for DataFusion's binder.
//!
//! DataFusion only binds a call against these definitions; Stride's window
//! operator (`stride_exec::operator::window`) evaluates them, from the
//! [`WindowKind`] the lowering derives from the name ([`window_kind`]).
//! Result types follow PostgreSQL: `bigint` for `row_number`, `rank`,
//! `dense_rank`; `integer` for `ntile`; `double precision` for
//! `percent_rank` and `cume_dist`; the value's type for the value
//! functions.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion_common::{DataFusionError, Result};
use datafusion_expr::function::{PartitionEvaluatorArgs, WindowUDFFieldArgs};
use datafusion_expr::{
    PartitionEvaluator, Signature, TypeSignature, Volatility, WindowUDF, WindowUDFImpl,
};
use stride_exec::plan::WindowKind;

/// One window function's definition.
#[derive(Debug, PartialEq, Eq, Hash)]
struct WindowFunction {
    name: &'static str,
    signature: Signature,
    /// The result type; `None`: the first argument's.
    result: Option<DataType>,
}

impl WindowUDFImpl for WindowFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// Stride evaluates window functions in its own operator, never through
    /// DataFusion's partition evaluators.
    fn partition_evaluator(
        &self,
        _args: PartitionEvaluatorArgs,
    ) -> Result<Box<dyn PartitionEvaluator>> {
        Err(DataFusionError::Internal(format!(
            "{} is evaluated by Stride's window operator",
            self.name
        )))
    }

    fn field(&self, args: WindowUDFFieldArgs) -> Result<FieldRef> {
        let data_type = match &self.result {
            Some(t) => t.clone(),
            None => args
                .get_input_field(0)
                .map(|f| f.data_type().clone())
                .ok_or_else(|| DataFusionError::Plan(format!("{} needs an argument", self.name)))?,
        };
        Ok(Arc::new(Field::new(args.name(), data_type, true)))
    }
}

/// The window functions by name.
pub fn window_functions() -> HashMap<String, Arc<WindowUDF>> {
    let v = Volatility::Immutable;
    let any = |counts: &[usize]| {
        Signature::one_of(counts.iter().map(|&n| TypeSignature::Any(n)).collect(), v)
    };
    let defs = [
        ("row_number", Signature::nullary(v), Some(DataType::Int64)),
        ("rank", Signature::nullary(v), Some(DataType::Int64)),
        ("dense_rank", Signature::nullary(v), Some(DataType::Int64)),
        (
            "percent_rank",
            Signature::nullary(v),
            Some(DataType::Float64),
        ),
        ("cume_dist", Signature::nullary(v), Some(DataType::Float64)),
        (
            "ntile",
            Signature::exact(vec![DataType::Int64], v),
            Some(DataType::Int32),
        ),
        ("lag", any(&[1, 2, 3]), None),
        ("lead", any(&[1, 2, 3]), None),
        ("first_value", any(&[1]), None),
        ("last_value", any(&[1]), None),
        ("nth_value", any(&[2]), None),
    ];
    defs.into_iter()
        .map(|(name, signature, result)| {
            let udf = WindowUDF::new_from_impl(WindowFunction {
                name,
                signature,
                result,
            });
            (name.to_string(), Arc::new(udf))
        })
        .collect()
}

/// What Stride's operator evaluates for window function `name`.
pub fn window_kind(name: &str) -> Option<WindowKind> {
    Some(match name {
        "row_number" => WindowKind::RowNumber,
        "rank" => WindowKind::Rank,
        "dense_rank" => WindowKind::DenseRank,
        "percent_rank" => WindowKind::PercentRank,
        "cume_dist" => WindowKind::CumeDist,
        "ntile" => WindowKind::Ntile,
        "lag" => WindowKind::Lag,
        "lead" => WindowKind::Lead,
        "first_value" => WindowKind::FirstValue,
        "last_value" => WindowKind::LastValue,
        "nth_value" => WindowKind::NthValue,
        _ => return None,
    })
}

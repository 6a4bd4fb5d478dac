//! Set-returning functions in `FROM`, PostgreSQL's `generate_series(start,
//! stop [, step])` over integers and `unnest(array)`, as table functions.
//!
//! The planner asks the catalog for a table function by name
//! ([`table_function`]); the source it gets back carries a logical plan,
//! which DataFusion inlines in place of the scan: a [`SetFunctionCall`]
//! node whose arguments are ordinary plan expressions. So arguments that
//! read the outer query's columns (`generate_series(0,
//! array_upper(pr.prattrs, 1))` or `unnest(tc.reloptions)` inside a
//! correlated scalar subquery, as psql's `\d` sends them) are outer
//! references the optimizer sees: DataFusion leaves such a subquery
//! correlated, and `engine/apply.rs` runs it once per distinct outer value
//! with those values bound as literals. Lowering
//! (`lower/table_functions.rs`) evaluates the then constant arguments and
//! emits the rows as literal batches ([`series_batches`],
//! [`unnest_batches`]).
//!
//! `generate_series` follows PostgreSQL: `stop` is included when the
//! steps reach it; an empty range (`stop < start` with a positive step) or
//! a NULL argument gives no rows; a step of zero is an error (22023). Its
//! column is `integer` when every argument is at most 32 bits wide, else
//! `bigint` (an integer literal is `bigint` in Stride); `numeric` and
//! `timestamp` series are `crate::series`'s. `unnest` gives an
//! array's elements in order, NULL elements included, and no rows for a
//! NULL array; it takes Arrow lists and the catalogs' arrays, which are in
//! PostgreSQL's text form (`{a,b}`, elements `text`). The rows are built at
//! lowering, at most [`MAX_SERIES_BYTES`] of a series (54000 beyond).

use std::borrow::Cow;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion_common::{DFSchema, DFSchemaRef, DataFusionError, ScalarValue};
use datafusion_expr::{
    Expr, ExprSchemable, Extension, LogicalPlan, TableProviderFilterPushDown, TableSource,
    UserDefinedLogicalNodeCore,
};

use crate::error::{PlanKind, Result, SqlError, UndefinedKind};

/// A set-returning function Stride has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd)]
pub enum SetFunction {
    /// `generate_series(start, stop [, step])` over integers.
    GenerateSeries,
    /// `unnest(array)`.
    Unnest,
}

impl SetFunction {
    /// The function of `name`, if it is a set-returning one.
    pub fn by_name(name: &str) -> Option<SetFunction> {
        match name {
            "generate_series" => Some(SetFunction::GenerateSeries),
            "unnest" => Some(SetFunction::Unnest),
            _ => None,
        }
    }

    /// The function's SQL name, also its column's name when `FROM` gives
    /// the call no alias.
    pub fn name(self) -> &'static str {
        match self {
            SetFunction::GenerateSeries => "generate_series",
            SetFunction::Unnest => "unnest",
        }
    }

    /// The type of the one column the call with arguments of `types`
    /// returns.
    fn column_type(self, types: &[DataType]) -> Result<DataType> {
        let undefined = |detail: String| {
            SqlError::undefined(
                UndefinedKind::Function,
                format!("function {}{detail} does not exist", self.name()),
            )
        };
        match self {
            SetFunction::GenerateSeries => {
                if !(2..=3).contains(&types.len()) {
                    return Err(undefined(format!(
                        " of {} arguments (it takes start, stop and an optional step)",
                        types.len()
                    )));
                }
                generate_series_type(types).map_err(undefined)
            }
            SetFunction::Unnest => match types {
                [DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _)] => {
                    Ok(f.data_type().clone())
                }
                // The catalogs' arrays, in PostgreSQL's text form.
                [DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 | DataType::Null] => {
                    Ok(DataType::Utf8)
                }
                [other] => Err(undefined(format!(" over {other} (it takes an array)"))),
                _ => Err(undefined(format!(
                    " of {} arguments (it takes one array)",
                    types.len()
                ))),
            },
        }
    }
}

/// The column type of `generate_series` over arguments of `types` (2 or
/// 3 of them), as PostgreSQL resolves its overloads: integers give
/// `integer` when every argument is at most 32 bits wide, else `bigint`;
/// a decimal among them gives `numeric` (`DECIMAL(38, s)`, `s` their
/// largest scale); timestamps or dates with an interval step give
/// `timestamp` (a date is cast to it; the step is required). The error
/// is the detail of PostgreSQL's "function does not exist".
fn generate_series_type(types: &[DataType]) -> std::result::Result<DataType, String> {
    let temporal = |t: &DataType| {
        matches!(
            t,
            DataType::Timestamp(..) | DataType::Date32 | DataType::Date64
        )
    };
    if types
        .iter()
        .any(|t| temporal(t) || matches!(t, DataType::Interval(_)))
    {
        let (Some(start), Some(stop), Some(step)) = (types.first(), types.get(1), types.get(2))
        else {
            return Err(
                " over timestamps without a step (it takes start, stop and an interval)".into(),
            );
        };
        let bound = |t: &DataType| temporal(t) || *t == DataType::Null;
        if !bound(start) || !bound(stop) || !matches!(step, DataType::Interval(_) | DataType::Null)
        {
            return Err(format!("({start}, {stop}, {step}) (over timestamps it takes start and stop timestamps and an interval step)"));
        }
        // The unit and zone of a timestamp argument; dates alone give
        // SQL's `timestamp`.
        return Ok(types
            .iter()
            .find_map(|t| match t {
                DataType::Timestamp(unit, tz) => Some(DataType::Timestamp(*unit, tz.clone())),
                _ => None,
            })
            .unwrap_or(DataType::Timestamp(
                arrow::datatypes::TimeUnit::Nanosecond,
                None,
            )));
    }
    let mut wide = false;
    let mut scale: Option<i8> = None;
    for t in types {
        match t {
            DataType::Null
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::UInt8
            | DataType::UInt16 => {}
            DataType::Int64 | DataType::UInt32 => wide = true,
            DataType::Decimal128(_, s) | DataType::Decimal256(_, s) => {
                scale = Some(scale.map_or(*s, |x| x.max(*s)).max(0));
            }
            other => {
                return Err(format!(
                    " over {other} (Stride's takes integers, numerics and timestamps)"
                ))
            }
        }
    }
    Ok(match scale {
        Some(s) => DataType::Decimal128(38, s),
        None if wide => DataType::Int64,
        None => DataType::Int32,
    })
}

/// The most bytes of values one series may hold (as one value may in
/// `crate::functions`): its rows are built at once, as a literal relation.
pub const MAX_SERIES_BYTES: usize = 1 << 30;

/// Rows per literal batch of a series.
const BATCH_ROWS: usize = 8192;

/// The table function `name` called with `args` (planned expressions,
/// possibly with outer references), as the planner's table source.
pub fn table_function(name: &str, args: Vec<Expr>) -> Result<Arc<dyn TableSource>> {
    let Some(function) = SetFunction::by_name(name) else {
        return Err(SqlError::undefined(
            UndefinedKind::Function,
            format!("function {name} does not exist (as a table function)"),
        ));
    };
    let node = SetFunctionCall::new(function, args)?;
    Ok(Arc::new(SetFunctionSource {
        schema: Arc::new(node.schema.as_arrow().clone()),
        plan: LogicalPlan::Extension(Extension {
            node: Arc::new(node),
        }),
    }))
}

/// The table source the planner scans; DataFusion inlines `plan`.
#[derive(Debug)]
struct SetFunctionSource {
    schema: SchemaRef,
    plan: LogicalPlan,
}

impl TableSource for SetFunctionSource {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion_common::Result<Vec<TableProviderFilterPushDown>> {
        Ok(vec![
            TableProviderFilterPushDown::Unsupported;
            filters.len()
        ])
    }

    fn get_logical_plan(&self) -> Option<Cow<'_, LogicalPlan>> {
        Some(Cow::Borrowed(&self.plan))
    }
}

/// The logical node of a set-returning function's call in `FROM`: a leaf
/// whose rows the function gives for its arguments.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SetFunctionCall {
    /// The function called.
    pub function: SetFunction,
    /// Its arguments, which may read the outer query's columns.
    pub args: Vec<Expr>,
    /// One column, named after the function.
    pub schema: DFSchemaRef,
}

impl SetFunctionCall {
    /// The call of `function` with `args`, which must fit its signature.
    pub fn new(function: SetFunction, args: Vec<Expr>) -> Result<Self> {
        let empty = DFSchema::empty();
        let types = args
            .iter()
            .map(|a| a.get_type(&empty))
            .collect::<datafusion_common::Result<Vec<_>>>()?;
        let field = Field::new(function.name(), function.column_type(&types)?, true);
        let schema = DFSchema::try_from(Schema::new(vec![field]))?;
        Ok(SetFunctionCall {
            function,
            args,
            schema: Arc::new(schema),
        })
    }

    /// The type of the call's values.
    pub fn data_type(&self) -> &DataType {
        self.schema.field(0).data_type()
    }
}

impl PartialOrd for SetFunctionCall {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        match self.function.partial_cmp(&other.function) {
            Some(std::cmp::Ordering::Equal) => self.args.partial_cmp(&other.args),
            order => order,
        }
    }
}

impl UserDefinedLogicalNodeCore for SetFunctionCall {
    fn name(&self) -> &str {
        "SetFunctionCall"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        Vec::new()
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        self.args.clone()
    }

    fn fmt_for_explain(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let args: Vec<String> = self.args.iter().map(ToString::to_string).collect();
        write!(f, "{}({})", self.function.name(), args.join(", "))
    }

    fn with_exprs_and_inputs(
        &self,
        exprs: Vec<Expr>,
        inputs: Vec<LogicalPlan>,
    ) -> datafusion_common::Result<Self> {
        if !inputs.is_empty() {
            return Err(DataFusionError::Internal(
                "a set-returning function's call takes no inputs".into(),
            ));
        }
        // The arguments' types may narrow (an outer reference bound to a
        // literal) but the column keeps its type: parents were planned on it.
        Ok(SetFunctionCall {
            function: self.function,
            args: exprs,
            schema: self.schema.clone(),
        })
    }
}

/// The elements of `array` (a list, or an array in PostgreSQL's text
/// form) as batches of `data_type`; none for a NULL array.
pub fn unnest_batches(array: &ScalarValue, data_type: &DataType) -> Result<Vec<RecordBatch>> {
    let values: ArrayRef = match array {
        v if v.is_null() => return Ok(Vec::new()),
        ScalarValue::List(l) => l.value(0),
        ScalarValue::LargeList(l) => l.value(0),
        ScalarValue::FixedSizeList(l) => l.value(0),
        ScalarValue::Utf8(Some(text))
        | ScalarValue::Utf8View(Some(text))
        | ScalarValue::LargeUtf8(Some(text)) => {
            let items = crate::pg_catalog::parse_array(text).ok_or_else(|| {
                SqlError::plan(
                    PlanKind::InvalidParameter,
                    format!("malformed array literal: \"{text}\""),
                )
            })?;
            Arc::new(arrow::array::StringArray::from(items))
        }
        other => {
            return Err(SqlError::Internal(format!(
                "unnest over {} is no array",
                other.data_type()
            )))
        }
    };
    let values = if values.data_type() == data_type {
        values
    } else {
        arrow::compute::cast(&values, data_type)?
    };
    let schema = Arc::new(Schema::new(vec![Field::new(
        SetFunction::Unnest.name(),
        data_type.clone(),
        true,
    )]));
    if values.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![RecordBatch::try_new(schema, vec![values])?])
}

/// The rows of `generate_series(start, stop, step)` as batches of
/// `data_type` (`Int32` or `Int64`); `None` arguments (NULL) give none.
pub fn series_batches(
    start: Option<i64>,
    stop: Option<i64>,
    step: Option<i64>,
    data_type: &DataType,
) -> Result<Vec<RecordBatch>> {
    let (Some(start), Some(stop), Some(step)) = (start, stop, step) else {
        return Ok(Vec::new());
    };
    if step == 0 {
        return Err(SqlError::plan(
            PlanKind::InvalidParameter,
            "step size cannot equal zero",
        ));
    }
    let rows = series_len(start, stop, step);
    let width = if *data_type == DataType::Int32 { 4 } else { 8 };
    crate::series::check_size(u128::from(rows), width)?;
    let rows = rows as usize;
    let schema = Arc::new(Schema::new(vec![Field::new(
        SetFunction::GenerateSeries.name(),
        data_type.clone(),
        true,
    )]));
    let value = |i: usize| -> i128 { i128::from(start) + i128::from(step) * i as i128 };
    let mut batches = Vec::with_capacity(rows.div_ceil(BATCH_ROWS));
    let mut first = 0;
    while first < rows {
        let end = (first + BATCH_ROWS).min(rows);
        // Every value lies between start and stop, so it fits their type.
        let column: ArrayRef = if *data_type == DataType::Int32 {
            Arc::new(Int32Array::from_iter_values(
                (first..end).map(|i| value(i) as i32),
            ))
        } else {
            Arc::new(Int64Array::from_iter_values(
                (first..end).map(|i| value(i) as i64),
            ))
        };
        batches.push(RecordBatch::try_new(schema.clone(), vec![column])?);
        first = end;
    }
    Ok(batches)
}

/// How many values `start`, `start + step`, … reach without passing
/// `stop` (`step` is not zero).
fn series_len(start: i64, stop: i64, step: i64) -> u64 {
    let (start, stop, step) = (i128::from(start), i128::from(stop), i128::from(step));
    if (step > 0 && stop < start) || (step < 0 && stop > start) {
        return 0;
    }
    ((stop - start) / step + 1) as u64
}

/// A constant argument's integer value; `None` for NULL.
pub fn integer_argument(v: &ScalarValue) -> Result<Option<i64>> {
    if v.is_null() {
        return Ok(None);
    }
    match v.cast_to(&DataType::Int64)? {
        ScalarValue::Int64(i) => Ok(i),
        other => Err(SqlError::Internal(format!(
            "generate_series argument {other} is no integer"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(start: i64, stop: i64, step: i64) -> Vec<i64> {
        series_batches(Some(start), Some(stop), Some(step), &DataType::Int64)
            .unwrap()
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .to_vec()
            })
            .collect()
    }

    #[test]
    fn series_include_stop_when_the_steps_reach_it() {
        assert_eq!(values(1, 3, 1), [1, 2, 3]);
        assert_eq!(values(0, 10, 4), [0, 4, 8]);
        assert_eq!(values(5, 1, -2), [5, 3, 1]);
        assert_eq!(values(3, 3, 1), [3]);
        assert!(values(3, 2, 1).is_empty());
        assert!(values(1, 3, -1).is_empty());
        assert_eq!(values(i64::MAX - 1, i64::MAX, 1), [i64::MAX - 1, i64::MAX]);
        assert_eq!(values(i64::MIN, i64::MIN + 2, 2), [i64::MIN, i64::MIN + 2]);
        assert_eq!(values(0, 20_000, 1).len(), 20_001);
    }

    #[test]
    fn nulls_give_no_rows_and_a_zero_step_is_refused() {
        assert!(series_batches(None, Some(3), Some(1), &DataType::Int32)
            .unwrap()
            .is_empty());
        let err = series_batches(Some(1), Some(3), Some(0), &DataType::Int32).unwrap_err();
        assert!(matches!(
            err,
            SqlError::Plan {
                kind: PlanKind::InvalidParameter,
                ..
            }
        ));
        let err = series_batches(Some(0), Some(i64::MAX), Some(1), &DataType::Int64).unwrap_err();
        assert!(matches!(
            err,
            SqlError::Exec(stride_exec::ExecError::ValueTooLarge { .. })
        ));
    }
}

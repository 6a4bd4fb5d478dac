//! The values of `generate_series(start, stop [, step])` by the type of
//! its column (`crate::table_functions` types the call):
//!
//! * integers (`int4`, `int8`): [`crate::table_functions::series_batches`];
//! * `numeric` (any argument a decimal): `DECIMAL(38, s)`, `s` the
//!   largest scale among the arguments (PostgreSQL keeps each value's own
//!   scale: its `generate_series(1, 2, 0.5)` prints `1`, `1.5`, `2.0`;
//!   here `1.0`, `1.5`, `2.0`); the step defaults to 1;
//! * `timestamp` (start and stop timestamps or dates, which are cast to
//!   timestamp, and an interval step, required): each value the previous
//!   plus the step, as PostgreSQL adds it (months first, the day of month
//!   clamped to the month's end, then days, then time), so `'1 month'`
//!   from January 31st gives February 29th, then March 29th.
//!
//! As PostgreSQL: `stop` is included when the steps reach it; NULL
//! arguments give no rows; a step of zero is an error (22023), an
//! interval step being zero when its months count 30 days, as PostgreSQL
//! compares intervals. At most [`MAX_SERIES_BYTES`] of values per call.

use std::sync::Arc;

use arrow::array::{ArrayRef, Decimal128Array, RecordBatch, TimestampNanosecondArray};
use arrow::datatypes::{DataType, Field, IntervalMonthDayNano, Schema, TimeUnit};
use chrono::{DateTime, Months, NaiveDateTime};
use datafusion_common::ScalarValue;

use crate::error::{PlanKind, Result, SqlError};
use crate::table_functions::{integer_argument, series_batches, SetFunction, MAX_SERIES_BYTES};

/// Rows per batch of a series.
const BATCH_ROWS: usize = 8192;

/// The rows of `generate_series(args)` as batches of `data_type`.
pub fn series(args: &[ScalarValue], data_type: &DataType) -> Result<Vec<RecordBatch>> {
    if args.iter().any(ScalarValue::is_null) {
        return Ok(Vec::new());
    }
    match data_type {
        DataType::Decimal128(_, scale) => decimal_series(args, data_type, *scale),
        DataType::Timestamp(unit, _) => timestamp_series(args, data_type, *unit),
        _ => {
            let step = match args.get(2) {
                Some(v) => integer_argument(v)?,
                None => Some(1),
            };
            series_batches(
                integer_argument(&args[0])?,
                integer_argument(&args[1])?,
                step,
                data_type,
            )
        }
    }
}

fn zero_step() -> SqlError {
    SqlError::plan(PlanKind::InvalidParameter, "step size cannot equal zero")
}

/// Refuses `rows` values of `width` bytes beyond the limit.
pub(crate) fn check_size(rows: u128, width: u128) -> Result<()> {
    let bytes = rows.saturating_mul(width);
    if bytes > MAX_SERIES_BYTES as u128 {
        return Err(stride_exec::ExecError::ValueTooLarge {
            function: SetFunction::GenerateSeries.name().into(),
            requested: usize::try_from(bytes).unwrap_or(usize::MAX),
            limit: MAX_SERIES_BYTES,
        }
        .into());
    }
    Ok(())
}

/// `values` cut into batches of the series' one column.
fn batches(
    data_type: &DataType,
    rows: usize,
    column: impl Fn(std::ops::Range<usize>) -> Result<ArrayRef>,
) -> Result<Vec<RecordBatch>> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        SetFunction::GenerateSeries.name(),
        data_type.clone(),
        true,
    )]));
    let mut out = Vec::with_capacity(rows.div_ceil(BATCH_ROWS));
    let mut first = 0;
    while first < rows {
        let end = (first + BATCH_ROWS).min(rows);
        out.push(RecordBatch::try_new(
            schema.clone(),
            vec![column(first..end)?],
        )?);
        first = end;
    }
    Ok(out)
}

/// An argument as an unscaled decimal of `scale`.
fn decimal_argument(v: &ScalarValue, scale: i8) -> Result<i128> {
    match v.cast_to(&DataType::Decimal128(38, scale))? {
        ScalarValue::Decimal128(Some(x), _, _) => Ok(x),
        other => Err(SqlError::Internal(format!(
            "generate_series argument {other} is no numeric"
        ))),
    }
}

fn decimal_series(
    args: &[ScalarValue],
    data_type: &DataType,
    scale: i8,
) -> Result<Vec<RecordBatch>> {
    let start = decimal_argument(&args[0], scale)?;
    let stop = decimal_argument(&args[1], scale)?;
    let step = match args.get(2) {
        Some(v) => decimal_argument(v, scale)?,
        None => 10i128.pow(u32::try_from(scale).unwrap_or(0)),
    };
    if step == 0 {
        return Err(zero_step());
    }
    let rows: u128 = if (step > 0 && stop < start) || (step < 0 && stop > start) {
        0
    } else {
        // |stop - start| < 2 · 10^38 fits an i128; the quotient is positive.
        (stop.abs_diff(start) / step.unsigned_abs()) + 1
    };
    check_size(rows, 16)?;
    batches(data_type, rows as usize, |range| {
        let values = range.map(|i| start + step * i as i128);
        Ok(Arc::new(
            Decimal128Array::from_iter_values(values).with_data_type(data_type.clone()),
        ))
    })
}

/// Nanoseconds per unit.
fn unit_nanos(unit: TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => 1_000_000_000,
        TimeUnit::Millisecond => 1_000_000,
        TimeUnit::Microsecond => 1_000,
        TimeUnit::Nanosecond => 1,
    }
}

/// A start or stop argument (timestamp or date) in nanoseconds since the
/// epoch.
fn timestamp_argument(v: &ScalarValue) -> Result<i64> {
    match v.cast_to(&DataType::Timestamp(TimeUnit::Nanosecond, None))? {
        ScalarValue::TimestampNanosecond(Some(x), _) => Ok(x),
        other => Err(SqlError::Internal(format!(
            "generate_series argument {other} is no timestamp"
        ))),
    }
}

fn interval_argument(v: &ScalarValue) -> Result<IntervalMonthDayNano> {
    match v.cast_to(&DataType::Interval(
        arrow::datatypes::IntervalUnit::MonthDayNano,
    ))? {
        ScalarValue::IntervalMonthDayNano(Some(x)) => Ok(x),
        other => Err(SqlError::Internal(format!(
            "generate_series step {other} is no interval"
        ))),
    }
}

const NANOS_PER_DAY: i128 = 86_400_000_000_000;

/// `t` plus `step`, as PostgreSQL adds an interval to a timestamp; `None`
/// past the representable range.
fn add_interval(t: i64, step: IntervalMonthDayNano) -> Option<i64> {
    let mut t = t;
    if step.months != 0 {
        let at: NaiveDateTime = DateTime::from_timestamp_nanos(t).naive_utc();
        let moved = if step.months > 0 {
            at.checked_add_months(Months::new(step.months.unsigned_abs()))?
        } else {
            at.checked_sub_months(Months::new(step.months.unsigned_abs()))?
        };
        t = moved.and_utc().timestamp_nanos_opt()?;
    }
    let rest = i128::from(step.days) * NANOS_PER_DAY + i128::from(step.nanoseconds);
    i64::try_from(i128::from(t) + rest).ok()
}

fn timestamp_series(
    args: &[ScalarValue],
    data_type: &DataType,
    unit: TimeUnit,
) -> Result<Vec<RecordBatch>> {
    let start = timestamp_argument(&args[0])?;
    let stop = timestamp_argument(&args[1])?;
    let step = interval_argument(&args[2])?;
    // PostgreSQL's interval comparison: a month is 30 days.
    let span = i128::from(step.months) * 30 * NANOS_PER_DAY
        + i128::from(step.days) * NANOS_PER_DAY
        + i128::from(step.nanoseconds);
    if span == 0 {
        return Err(zero_step());
    }
    let limit = MAX_SERIES_BYTES as u128 / 8;
    let mut values: Vec<i64> = Vec::new();
    let mut current = Some(start);
    while let Some(t) = current {
        if (span > 0 && t > stop) || (span < 0 && t < stop) {
            break;
        }
        if values.len() as u128 >= limit {
            check_size(values.len() as u128 + 1, 8)?;
        }
        values.push(t);
        current = add_interval(t, step);
    }
    let per_unit = unit_nanos(unit);
    batches(data_type, values.len(), |range| {
        let array = TimestampNanosecondArray::from_iter_values(values[range].iter().copied());
        let array: ArrayRef = Arc::new(array);
        let wanted = DataType::Timestamp(unit, data_type_tz(data_type));
        if per_unit == 1 && array.data_type() == &wanted {
            return Ok(array);
        }
        Ok(arrow::compute::cast(&array, &wanted)?)
    })
}

fn data_type_tz(data_type: &DataType) -> Option<Arc<str>> {
    match data_type {
        DataType::Timestamp(_, tz) => tz.clone(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Array;

    fn text(batches: &[RecordBatch]) -> Vec<String> {
        batches
            .iter()
            .flat_map(|b| {
                let c = b.column(0);
                (0..c.len())
                    .map(|i| arrow::util::display::array_value_to_string(c, i).unwrap())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn ts(s: &str) -> ScalarValue {
        let t = NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap();
        ScalarValue::TimestampNanosecond(Some(t.and_utc().timestamp_nanos_opt().unwrap()), None)
    }

    fn interval(months: i32, days: i32, nanos: i64) -> ScalarValue {
        ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(months, days, nanos)))
    }

    const TS: DataType = DataType::Timestamp(TimeUnit::Nanosecond, None);

    #[test]
    fn months_are_added_to_the_previous_value() {
        let out = series(
            &[
                ts("2024-01-31 00:00:00"),
                ts("2024-05-01 00:00:00"),
                interval(1, 0, 0),
            ],
            &TS,
        )
        .unwrap();
        assert_eq!(
            text(&out),
            [
                "2024-01-31T00:00:00",
                "2024-02-29T00:00:00",
                "2024-03-29T00:00:00",
                "2024-04-29T00:00:00"
            ]
        );
    }

    #[test]
    fn hours_backwards_and_a_zero_step() {
        let hour = 3_600_000_000_000;
        let out = series(
            &[
                ts("2024-01-01 02:00:00"),
                ts("2024-01-01 00:30:00"),
                interval(0, 0, -hour),
            ],
            &TS,
        )
        .unwrap();
        assert_eq!(text(&out), ["2024-01-01T02:00:00", "2024-01-01T01:00:00"]);
        // One month less thirty days compares as zero in PostgreSQL.
        let err = series(
            &[
                ts("2024-01-01 00:00:00"),
                ts("2024-02-01 00:00:00"),
                interval(1, -30, 0),
            ],
            &TS,
        )
        .unwrap_err();
        assert!(matches!(
            err,
            SqlError::Plan {
                kind: PlanKind::InvalidParameter,
                ..
            }
        ));
    }

    #[test]
    fn numeric_steps_reach_stop() {
        let d = |v: i128, s: i8| ScalarValue::Decimal128(Some(v), 38, s);
        let t = DataType::Decimal128(38, 2);
        let out = series(&[d(10, 1), d(20, 1), d(25, 2)], &t).unwrap();
        assert_eq!(text(&out), ["1.00", "1.25", "1.50", "1.75", "2.00"]);
        let out = series(
            &[ScalarValue::Int64(Some(3)), d(5, 1)],
            &DataType::Decimal128(38, 1),
        )
        .unwrap();
        assert!(out.is_empty());
        let err = series(&[d(1, 1), d(2, 1), d(0, 1)], &DataType::Decimal128(38, 1)).unwrap_err();
        assert!(matches!(
            err,
            SqlError::Plan {
                kind: PlanKind::InvalidParameter,
                ..
            }
        ));
    }
}

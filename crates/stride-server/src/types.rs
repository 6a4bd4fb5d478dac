//! Arrow types as PostgreSQL types: type OIDs, result values in text and
//! binary format, and parameter values decoded from either format.
//!
//! | Arrow                          | PostgreSQL            | binary format            |
//! |--------------------------------|-----------------------|--------------------------|
//! | Boolean                        | bool (16)             | 1 byte                   |
//! | Int8, Int16, UInt8             | int2 (21)             | i16                      |
//! | Int32, UInt16                  | int4 (23)             | i32                      |
//! | Int64, UInt32                  | int8 (20)             | i64                      |
//! | UInt64, Decimal128             | numeric (1700)        | base-10000 digits        |
//! | Float32 / Float64              | float4 (700) / float8 (701) | IEEE 754           |
//! | Utf8, LargeUtf8, Utf8View      | text (25)             | UTF-8 bytes              |
//! | Date32                         | date (1082)           | days since 2000-01-01    |
//! | Timestamp (no zone / zone)     | timestamp (1114) / timestamptz (1184) | µs since 2000-01-01 |
//! | Binary, LargeBinary, BinaryView, FixedSizeBinary | bytea (17) | the bytes          |
//! | Time32, Time64                 | time (1083)           | µs since midnight        |
//! | Interval (any unit)            | interval (1186)       | µs (i64), days, months (i32) |
//! | anything else                  | text (25), its Arrow display form | UTF-8 bytes  |
//!
//! Decimals are exact in both formats; `CHAR(n)`/`VARCHAR(n)` columns are
//! stored as Arrow strings and sent as `text`. In text format, bytea is
//! PostgreSQL's hex form (`\x6869`), time `HH:MM:SS[.ffffff]` and interval
//! PostgreSQL's default `IntervalStyle` (`postgres`: `1 year 2 mons -3 days
//! +04:05:06.5`).

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Float32Array, Float64Array,
};
use arrow::datatypes::{
    DataType, Date32Type, Int16Type, Int32Type, Int64Type, Int8Type, IntervalMonthDayNano,
    IntervalUnit, TimeUnit, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion_common::ScalarValue;

pub const BOOL: u32 = 16;
pub const INT8: u32 = 20;
pub const INT2: u32 = 21;
pub const INT4: u32 = 23;
pub const TEXT: u32 = 25;
pub const FLOAT4: u32 = 700;
pub const FLOAT8: u32 = 701;
pub const BPCHAR: u32 = 1042;
pub const VARCHAR: u32 = 1043;
pub const DATE: u32 = 1082;
pub const TIMESTAMP: u32 = 1114;
pub const TIMESTAMPTZ: u32 = 1184;
pub const NUMERIC: u32 = 1700;
pub const UNKNOWN: u32 = 705;
pub const NAME: u32 = 19;
pub const BYTEA: u32 = 17;
pub const TIME: u32 = 1083;
pub const INTERVAL: u32 = 1186;

/// Days from 1970-01-01 to 2000-01-01 (PostgreSQL's epoch).
const PG_EPOCH_DAYS: i32 = 10_957;
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// (type oid, type size) of an Arrow type: the mapping the catalogs
/// (`pg_attribute`, `format_type`) describe columns with.
pub fn pg_type(t: &DataType) -> (u32, i16) {
    stride_sql::pg_catalog::pg_type_of(t)
}

/// The Arrow type a parameter of type `oid` is decoded to when the statement
/// itself does not say.
fn arrow_type_of(oid: u32) -> DataType {
    match oid {
        BOOL => DataType::Boolean,
        INT2 => DataType::Int16,
        INT4 => DataType::Int32,
        INT8 => DataType::Int64,
        FLOAT4 => DataType::Float32,
        FLOAT8 => DataType::Float64,
        DATE => DataType::Date32,
        TIMESTAMP => DataType::Timestamp(TimeUnit::Microsecond, None),
        BYTEA => DataType::Binary,
        TIME => DataType::Time64(TimeUnit::Microsecond),
        INTERVAL => DataType::Interval(IntervalUnit::MonthDayNano),
        _ => DataType::Utf8,
    }
}

/// Encodes values of one result column.
pub struct ColumnEncoder<'a> {
    array: &'a ArrayRef,
    binary: bool,
    formatter: ArrayFormatter<'a>,
}

impl<'a> ColumnEncoder<'a> {
    pub fn new(
        array: &'a ArrayRef,
        binary: bool,
        options: &'a FormatOptions<'a>,
    ) -> Result<Self, String> {
        let formatter =
            ArrayFormatter::try_new(array.as_ref(), options).map_err(|e| e.to_string())?;
        Ok(ColumnEncoder {
            array,
            binary,
            formatter,
        })
    }

    /// Appends value `row` (not NULL) to `out`.
    pub fn encode(&self, row: usize, out: &mut Vec<u8>) {
        let a = self.array;
        if self.binary {
            encode_binary(a, row, out, &self.formatter);
        } else {
            encode_text(a, row, out, &self.formatter);
        }
    }
}

fn float_text(v: f64, out: &mut Vec<u8>) {
    if v.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"Infinity" } else { b"-Infinity" });
    } else {
        out.extend_from_slice(v.to_string().as_bytes());
    }
}

fn encode_text(a: &ArrayRef, row: usize, out: &mut Vec<u8>, fmt: &ArrayFormatter<'_>) {
    use std::io::Write;
    match a.data_type() {
        DataType::Boolean => {
            let v = a
                .as_any()
                .downcast_ref::<BooleanArray>()
                .map(|b| b.value(row));
            out.push(if v == Some(true) { b't' } else { b'f' });
        }
        DataType::Float32 => {
            if let Some(f) = a.as_any().downcast_ref::<Float32Array>() {
                let v = f.value(row);
                if v.is_finite() {
                    out.extend_from_slice(v.to_string().as_bytes());
                } else {
                    float_text(f64::from(v), out);
                }
            }
        }
        DataType::Float64 => {
            if let Some(f) = a.as_any().downcast_ref::<Float64Array>() {
                float_text(f.value(row), out);
            }
        }
        DataType::Timestamp(_, _) => {
            // Arrow shows `2024-01-02T03:04:05`; PostgreSQL a space.
            let start = out.len();
            let _ = write!(out, "{}", fmt.value(row));
            if let Some(t) = out[start..].iter().position(|&b| b == b'T') {
                out[start + t] = b' ';
            }
        }
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => {
            out.extend_from_slice(b"\\x");
            for byte in binary_value(a, row) {
                let _ = write!(out, "{byte:02x}");
            }
        }
        DataType::Time32(_) | DataType::Time64(_) => time_text(time_micros(a, row), out),
        DataType::Interval(_) => interval_text(interval_value(a, row), out),
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(_, _) => {
            array_text(&list_value(a, row), out)
        }
        _ => {
            let _ = write!(out, "{}", fmt.value(row));
        }
    }
}

/// The elements of list value `row` of `a` (a list type).
fn list_value(a: &ArrayRef, row: usize) -> ArrayRef {
    match a.data_type() {
        DataType::List(_) => a.as_list::<i32>().value(row),
        DataType::LargeList(_) => a.as_list::<i64>().value(row),
        DataType::FixedSizeList(_, _) => a.as_fixed_size_list().value(row),
        other => unreachable!("list_value of {other}"),
    }
}

/// PostgreSQL's array text, `{1,2,NULL}`: each element in its own text
/// form, quoted as `stride_sql::pg_catalog::format_array_of` quotes.
fn array_text(items: &ArrayRef, out: &mut Vec<u8>) {
    let options = FormatOptions::default();
    let Ok(fmt) = ArrayFormatter::try_new(items.as_ref(), &options) else {
        return;
    };
    let texts: Vec<Option<String>> = (0..items.len())
        .map(|i| {
            (!is_null(items, i)).then(|| {
                let mut item = Vec::new();
                encode_text(items, i, &mut item, &fmt);
                String::from_utf8_lossy(&item).into_owned()
            })
        })
        .collect();
    let text = stride_sql::pg_catalog::format_array_of(texts.iter().map(Option::as_deref));
    out.extend_from_slice(text.as_bytes());
}

/// PostgreSQL's binary array of one dimension: dimensions, NULL flag,
/// element type, then (length, lower bound 1) and each element as its
/// length (-1: NULL) and binary value; an empty array has no dimension.
fn array_binary(items: &ArrayRef, out: &mut Vec<u8>) {
    let (elem, _) = pg_type(items.data_type());
    let options = FormatOptions::default();
    let Ok(fmt) = ArrayFormatter::try_new(items.as_ref(), &options) else {
        return;
    };
    let n = items.len();
    let has_null = (0..n).any(|i| is_null(items, i));
    out.extend_from_slice(&i32::from(n > 0).to_be_bytes());
    out.extend_from_slice(&i32::from(has_null).to_be_bytes());
    out.extend_from_slice(&elem.to_be_bytes());
    if n == 0 {
        return;
    }
    out.extend_from_slice(&(n as i32).to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    for i in 0..n {
        if is_null(items, i) {
            out.extend_from_slice(&(-1i32).to_be_bytes());
            continue;
        }
        let at = out.len();
        out.extend_from_slice(&0i32.to_be_bytes());
        encode_binary(items, i, out, &fmt);
        let len = (out.len() - at - 4) as i32;
        out[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }
}

/// The bytes of binary value `row` of `a` (a binary type).
fn binary_value(a: &ArrayRef, row: usize) -> &[u8] {
    match a.data_type() {
        DataType::Binary => a.as_binary::<i32>().value(row),
        DataType::LargeBinary => a.as_binary::<i64>().value(row),
        DataType::BinaryView => a.as_binary_view().value(row),
        DataType::FixedSizeBinary(_) => a.as_fixed_size_binary().value(row),
        other => unreachable!("binary_value of {other}"),
    }
}

/// Time value `row` of `a` (a time type) in microseconds since midnight
/// (nanoseconds truncated, as PostgreSQL keeps microseconds).
fn time_micros(a: &ArrayRef, row: usize) -> i64 {
    use arrow::datatypes::{
        Time32MillisecondType, Time32SecondType, Time64MicrosecondType, Time64NanosecondType,
    };
    match a.data_type() {
        DataType::Time32(TimeUnit::Second) => {
            i64::from(a.as_primitive::<Time32SecondType>().value(row)) * 1_000_000
        }
        DataType::Time32(_) => {
            i64::from(a.as_primitive::<Time32MillisecondType>().value(row)) * 1_000
        }
        DataType::Time64(TimeUnit::Microsecond) => {
            a.as_primitive::<Time64MicrosecondType>().value(row)
        }
        DataType::Time64(_) => a.as_primitive::<Time64NanosecondType>().value(row) / 1_000,
        other => unreachable!("time_micros of {other}"),
    }
}

/// A PostgreSQL interval: months, days and microseconds, each with its own
/// sign (as PostgreSQL keeps them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PgInterval {
    months: i32,
    days: i32,
    micros: i64,
}

/// Interval value `row` of `a` (an interval type); nanoseconds truncated
/// to microseconds.
fn interval_value(a: &ArrayRef, row: usize) -> PgInterval {
    use arrow::datatypes::{IntervalDayTimeType, IntervalMonthDayNanoType, IntervalYearMonthType};
    match a.data_type() {
        DataType::Interval(IntervalUnit::YearMonth) => PgInterval {
            months: a.as_primitive::<IntervalYearMonthType>().value(row),
            days: 0,
            micros: 0,
        },
        DataType::Interval(IntervalUnit::DayTime) => {
            let v = a.as_primitive::<IntervalDayTimeType>().value(row);
            PgInterval {
                months: 0,
                days: v.days,
                micros: i64::from(v.milliseconds) * 1_000,
            }
        }
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let v = a.as_primitive::<IntervalMonthDayNanoType>().value(row);
            PgInterval {
                months: v.months,
                days: v.days,
                micros: v.nanoseconds / 1_000,
            }
        }
        other => unreachable!("interval_value of {other}"),
    }
}

/// `HH:MM:SS` and, when not whole, the fraction without trailing zeros.
fn clock_text(micros: u64, out: &mut Vec<u8>) {
    use std::io::Write;
    let secs = micros / 1_000_000;
    let _ = write!(
        out,
        "{:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    );
    let frac = micros % 1_000_000;
    if frac != 0 {
        let digits = format!("{frac:06}");
        let _ = write!(out, ".{}", digits.trim_end_matches('0'));
    }
}

/// PostgreSQL's text form of a time: `03:04:05`, `03:04:05.25`.
fn time_text(micros: i64, out: &mut Vec<u8>) {
    clock_text(micros.max(0) as u64, out);
}

/// PostgreSQL's text form of an interval in its default `IntervalStyle`
/// (`postgres`): the nonzero parts among years, months and days, each
/// `N unit[s]`, then the time as `[+-]HH:MM:SS[.f]` when it is nonzero or
/// nothing was written. A part after a negative one carries an explicit
/// `+` when positive (`-1 days +02:00:00`).
fn interval_text(v: PgInterval, out: &mut Vec<u8>) {
    use std::io::Write;
    let mut wrote = false;
    let mut after_negative = false;
    let parts = [
        (v.months / 12, "year"),
        (v.months % 12, "mon"),
        (v.days, "day"),
    ];
    for (value, unit) in parts {
        if value == 0 {
            continue;
        }
        let _ = write!(
            out,
            "{}{}{value} {unit}{}",
            if wrote { " " } else { "" },
            if after_negative && value > 0 { "+" } else { "" },
            if value == 1 { "" } else { "s" },
        );
        after_negative = value < 0;
        wrote = true;
    }
    if v.micros != 0 || !wrote {
        if wrote {
            out.push(b' ');
        }
        if v.micros < 0 {
            out.push(b'-');
        } else if after_negative {
            out.push(b'+');
        }
        clock_text(v.micros.unsigned_abs(), out);
    }
}

fn encode_binary(a: &ArrayRef, row: usize, out: &mut Vec<u8>, fmt: &ArrayFormatter<'_>) {
    use std::io::Write;
    match a.data_type() {
        DataType::Boolean => {
            let v = a.as_boolean().value(row);
            out.push(u8::from(v));
        }
        DataType::Int8 => {
            out.extend_from_slice(&i16::from(a.as_primitive::<Int8Type>().value(row)).to_be_bytes())
        }
        DataType::Int16 => {
            out.extend_from_slice(&a.as_primitive::<Int16Type>().value(row).to_be_bytes())
        }
        DataType::UInt8 => out
            .extend_from_slice(&i16::from(a.as_primitive::<UInt8Type>().value(row)).to_be_bytes()),
        DataType::Int32 => {
            out.extend_from_slice(&a.as_primitive::<Int32Type>().value(row).to_be_bytes())
        }
        DataType::UInt16 => out
            .extend_from_slice(&i32::from(a.as_primitive::<UInt16Type>().value(row)).to_be_bytes()),
        DataType::Int64 => {
            out.extend_from_slice(&a.as_primitive::<Int64Type>().value(row).to_be_bytes())
        }
        DataType::UInt32 => out
            .extend_from_slice(&i64::from(a.as_primitive::<UInt32Type>().value(row)).to_be_bytes()),
        DataType::UInt64 => numeric_binary(
            i128::from(a.as_primitive::<UInt64Type>().value(row)),
            0,
            out,
        ),
        DataType::Float32 => out.extend_from_slice(
            &a.as_primitive::<arrow::datatypes::Float32Type>()
                .value(row)
                .to_be_bytes(),
        ),
        DataType::Float64 => out.extend_from_slice(
            &a.as_primitive::<arrow::datatypes::Float64Type>()
                .value(row)
                .to_be_bytes(),
        ),
        DataType::Decimal128(_, scale) => {
            let v = a
                .as_any()
                .downcast_ref::<Decimal128Array>()
                .map(|d| d.value(row))
                .unwrap_or(0);
            numeric_binary(v, i32::from(*scale), out);
        }
        DataType::Date32 => {
            let days = a.as_primitive::<Date32Type>().value(row);
            out.extend_from_slice(&days.saturating_sub(PG_EPOCH_DAYS).to_be_bytes());
        }
        DataType::Timestamp(unit, _) => {
            let micros = match unit {
                TimeUnit::Second => a
                    .as_primitive::<arrow::datatypes::TimestampSecondType>()
                    .value(row)
                    .saturating_mul(1_000_000),
                TimeUnit::Millisecond => a
                    .as_primitive::<arrow::datatypes::TimestampMillisecondType>()
                    .value(row)
                    .saturating_mul(1_000),
                TimeUnit::Microsecond => a
                    .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                    .value(row),
                TimeUnit::Nanosecond => {
                    a.as_primitive::<arrow::datatypes::TimestampNanosecondType>()
                        .value(row)
                        / 1_000
                }
            };
            out.extend_from_slice(&micros.saturating_sub(PG_EPOCH_MICROS).to_be_bytes());
        }
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => out.extend_from_slice(binary_value(a, row)),
        DataType::Time32(_) | DataType::Time64(_) => {
            out.extend_from_slice(&time_micros(a, row).to_be_bytes())
        }
        DataType::Interval(_) => {
            let v = interval_value(a, row);
            out.extend_from_slice(&v.micros.to_be_bytes());
            out.extend_from_slice(&v.days.to_be_bytes());
            out.extend_from_slice(&v.months.to_be_bytes());
        }
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(_, _) => {
            array_binary(&list_value(a, row), out)
        }
        // text: the binary format is the UTF-8 bytes themselves.
        _ => {
            let _ = write!(out, "{}", fmt.value(row));
        }
    }
}

/// PostgreSQL's binary NUMERIC: `ndigits, weight, sign, dscale` (i16 each)
/// then base-10000 digits, most significant first; `weight` is the power of
/// 10000 of the first digit. `v` is the unscaled value, `scale` its decimal
/// scale (negative scales are multiplied out).
pub fn numeric_binary(v: i128, scale: i32, out: &mut Vec<u8>) {
    let (v, scale) = if scale < 0 {
        (v.saturating_mul(10i128.saturating_pow((-scale) as u32)), 0)
    } else {
        (v, scale)
    };
    let negative = v < 0;
    let mut mag: u128 = v.unsigned_abs();
    // Align the fraction to whole base-10000 digits.
    let pad = (4 - scale % 4) % 4;
    mag *= 10u128.pow(pad as u32);
    let frac_digits = (scale + pad) / 4;
    let mut digits = Vec::new();
    while mag > 0 {
        digits.push((mag % 10_000) as i16);
        mag /= 10_000;
    }
    // digits are least significant first; digit i has weight i - frac_digits.
    let mut weight = digits.len() as i32 - frac_digits - 1;
    digits.reverse();
    // Strip trailing zero digits (they carry no information; dscale keeps
    // the displayed scale) and leading zeros.
    while digits.last() == Some(&0) {
        digits.pop();
    }
    let lead = digits.iter().take_while(|&&d| d == 0).count();
    digits.drain(..lead);
    weight -= lead as i32;
    if digits.is_empty() {
        weight = 0;
    }
    let sign: u16 = if negative && !digits.is_empty() {
        0x4000
    } else {
        0
    };
    out.extend_from_slice(&(digits.len() as i16).to_be_bytes());
    out.extend_from_slice(&(weight as i16).to_be_bytes());
    out.extend_from_slice(&sign.to_be_bytes());
    out.extend_from_slice(&(scale as i16).to_be_bytes());
    for d in digits {
        out.extend_from_slice(&d.to_be_bytes());
    }
}

/// Decodes a binary NUMERIC to its decimal text.
fn numeric_from_binary(b: &[u8]) -> Result<String, String> {
    let rd = |i: usize| -> Result<i16, String> {
        b.get(i..i + 2)
            .map(|s| i16::from_be_bytes([s[0], s[1]]))
            .ok_or_else(|| "truncated numeric".to_string())
    };
    let ndigits = rd(0)?;
    let weight = i32::from(rd(2)?);
    let sign = rd(4)? as u16;
    let dscale = rd(6)?;
    if ndigits < 0 || dscale < 0 || b.len() != 8 + 2 * ndigits as usize {
        return Err("malformed numeric".into());
    }
    if sign == 0xC000 {
        return Ok("NaN".into());
    }
    let digits: Vec<i16> = (0..ndigits as usize)
        .map(|i| rd(8 + 2 * i))
        .collect::<Result<_, _>>()?;
    if digits.iter().any(|d| !(0..10_000).contains(d)) {
        return Err("malformed numeric digit".into());
    }
    let mut int = String::new();
    let mut frac = String::new();
    for (i, d) in digits.iter().enumerate() {
        let w = weight - i as i32;
        if w >= 0 {
            if int.is_empty() {
                int.push_str(&d.to_string());
            } else {
                int.push_str(&format!("{d:04}"));
            }
        } else {
            frac.push_str(&format!("{d:04}"));
        }
    }
    // Digits implied between the last stored digit and the decimal point.
    let last_w = weight - ndigits as i32 + 1;
    if last_w > 0 && !int.is_empty() {
        for _ in 0..last_w {
            int.push_str("0000");
        }
    }
    if weight < -1 {
        frac = "0000".repeat((-weight - 1) as usize) + &frac;
    }
    if int.is_empty() {
        int.push('0');
    }
    let scale = dscale as usize;
    while frac.len() < scale {
        frac.push('0');
    }
    frac.truncate(scale);
    let mut s = String::new();
    if sign == 0x4000 {
        s.push('-');
    }
    s.push_str(&int);
    if scale > 0 {
        s.push('.');
        s.push_str(&frac);
    }
    Ok(s)
}

/// Decodes parameter `value` sent with type `oid` in `format` (0 text, 1
/// binary) into the type the statement expects (`target`), or the type the
/// OID names when the statement does not say.
pub fn decode_param(
    value: Option<&[u8]>,
    oid: u32,
    format: i16,
    target: Option<&DataType>,
) -> Result<ScalarValue, String> {
    let target = target.cloned().unwrap_or_else(|| arrow_type_of(oid));
    let Some(bytes) = value else {
        return ScalarValue::try_from(&target).map_err(|e| e.to_string());
    };
    let scalar = if format == 0 {
        let text =
            std::str::from_utf8(bytes).map_err(|_| "parameter is not valid UTF-8".to_string())?;
        if is_binary_type(&target) {
            return cast_scalar(
                ScalarValue::Binary(Some(stride_sql::bytea_text::decode(text)?)),
                oid,
                &target,
            );
        }
        let text = if matches!(target, DataType::Interval(_)) {
            stride_sql::interval_text::for_arrow(text)?.into_owned()
        } else if target == DataType::Boolean {
            match text.trim().to_ascii_lowercase().as_str() {
                "t" | "true" | "yes" | "on" | "1" => "true".to_string(),
                "f" | "false" | "no" | "off" | "0" => "false".to_string(),
                other => {
                    return Err(format!(
                        "invalid input syntax for type boolean: \"{other}\""
                    ))
                }
            }
        } else {
            text.to_string()
        };
        return ScalarValue::try_from_string(text.clone(), &target)
            .map_err(|_| format!("invalid input for type {target}: \"{text}\""));
    } else {
        let fixed = |n: usize| -> Result<&[u8], String> {
            if bytes.len() == n {
                Ok(bytes)
            } else {
                Err(format!(
                    "binary parameter of type {oid} must have {n} bytes, got {}",
                    bytes.len()
                ))
            }
        };
        match oid {
            BOOL => ScalarValue::Boolean(Some(fixed(1)?[0] != 0)),
            INT2 => ScalarValue::Int16(Some(i16::from_be_bytes(
                fixed(2)?.try_into().map_err(|_| "int2")?,
            ))),
            INT4 => ScalarValue::Int32(Some(i32::from_be_bytes(
                fixed(4)?.try_into().map_err(|_| "int4")?,
            ))),
            INT8 => ScalarValue::Int64(Some(i64::from_be_bytes(
                fixed(8)?.try_into().map_err(|_| "int8")?,
            ))),
            FLOAT4 => ScalarValue::Float32(Some(f32::from_be_bytes(
                fixed(4)?.try_into().map_err(|_| "float4")?,
            ))),
            FLOAT8 => ScalarValue::Float64(Some(f64::from_be_bytes(
                fixed(8)?.try_into().map_err(|_| "float8")?,
            ))),
            DATE => {
                let d = i32::from_be_bytes(fixed(4)?.try_into().map_err(|_| "date")?);
                ScalarValue::Date32(Some(d.saturating_add(PG_EPOCH_DAYS)))
            }
            TIMESTAMP | TIMESTAMPTZ => {
                let us = i64::from_be_bytes(fixed(8)?.try_into().map_err(|_| "timestamp")?);
                ScalarValue::TimestampMicrosecond(Some(us.saturating_add(PG_EPOCH_MICROS)), None)
            }
            BYTEA => ScalarValue::Binary(Some(bytes.to_vec())),
            TIME => {
                let us = i64::from_be_bytes(fixed(8)?.try_into().map_err(|_| "time")?);
                ScalarValue::Time64Microsecond(Some(us))
            }
            INTERVAL => {
                let b = fixed(16)?;
                let micros = i64::from_be_bytes(b[0..8].try_into().map_err(|_| "interval")?);
                let days = i32::from_be_bytes(b[8..12].try_into().map_err(|_| "interval")?);
                let months = i32::from_be_bytes(b[12..16].try_into().map_err(|_| "interval")?);
                let nanos = micros
                    .checked_mul(1_000)
                    .ok_or_else(|| "interval out of range".to_string())?;
                ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(
                    months, days, nanos,
                )))
            }
            NUMERIC => {
                let text = numeric_from_binary(bytes)?;
                return ScalarValue::try_from_string(text.clone(), &target)
                    .map_err(|_| format!("invalid input for type {target}: \"{text}\""));
            }
            TEXT | VARCHAR | BPCHAR | NAME | UNKNOWN | 0 => {
                let text = std::str::from_utf8(bytes)
                    .map_err(|_| "parameter is not valid UTF-8".to_string())?;
                return ScalarValue::try_from_string(text.to_string(), &target)
                    .map_err(|_| format!("invalid input for type {target}: \"{text}\""));
            }
            other => {
                return Err(format!(
                    "binary parameters of type oid {other} are not supported"
                ))
            }
        }
    };
    cast_scalar(scalar, oid, &target)
}

fn cast_scalar(scalar: ScalarValue, oid: u32, target: &DataType) -> Result<ScalarValue, String> {
    if scalar.data_type() == *target {
        Ok(scalar)
    } else {
        scalar
            .cast_to(target)
            .map_err(|_| format!("cannot convert parameter of type oid {oid} to {target}"))
    }
}

/// Whether `t` is sent as bytea.
pub fn is_binary_type(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_)
    )
}

/// Whether `array[row]` is NULL (a NULL-typed column is all NULL).
pub fn is_null(array: &ArrayRef, row: usize) -> bool {
    array.data_type() == &DataType::Null || array.is_null(row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn numeric_roundtrip(v: i128, scale: i32) -> String {
        let mut out = Vec::new();
        numeric_binary(v, scale, &mut out);
        numeric_from_binary(&out).unwrap()
    }

    #[test]
    fn numeric_binary_roundtrips_exactly() {
        assert_eq!(numeric_roundtrip(12345, 2), "123.45");
        assert_eq!(numeric_roundtrip(-12345, 2), "-123.45");
        assert_eq!(numeric_roundtrip(0, 2), "0.00");
        assert_eq!(numeric_roundtrip(100_000_000, 0), "100000000");
        assert_eq!(numeric_roundtrip(5, 4), "0.0005");
        assert_eq!(numeric_roundtrip(1, 9), "0.000000001");
        assert_eq!(
            numeric_roundtrip(123_456_789_012_345_678, 6),
            "123456789012.345678"
        );
        assert_eq!(numeric_roundtrip(7, -3), "7000");
    }

    #[test]
    fn numeric_binary_layout_matches_postgres() {
        // 123.45 is digits [123, 4500], weight 0, dscale 2.
        let mut out = Vec::new();
        numeric_binary(12345, 2, &mut out);
        assert_eq!(out, [0, 2, 0, 0, 0, 0, 0, 2, 0, 123, 0x11, 0x94]);
    }

    #[test]
    fn params_decode_by_format_and_target() {
        let v = decode_param(Some(b"42"), 0, 0, Some(&DataType::Int64)).unwrap();
        assert_eq!(v, ScalarValue::Int64(Some(42)));
        let v = decode_param(Some(&7i32.to_be_bytes()), INT4, 1, Some(&DataType::Int64)).unwrap();
        assert_eq!(v, ScalarValue::Int64(Some(7)));
        let v = decode_param(Some(b"1998-12-01"), 0, 0, Some(&DataType::Date32)).unwrap();
        assert_eq!(v, ScalarValue::Date32(Some(10561)));
        let v = decode_param(Some(&(-1i32).to_be_bytes()), DATE, 1, None).unwrap();
        assert_eq!(v, ScalarValue::Date32(Some(PG_EPOCH_DAYS - 1)));
        let v = decode_param(None, INT4, 0, None).unwrap();
        assert_eq!(v, ScalarValue::Int32(None));
        assert!(decode_param(Some(b"abc"), 0, 0, Some(&DataType::Int32)).is_err());
        assert!(decode_param(Some(&[1, 2, 3]), INT4, 1, None).is_err());
        assert!(decode_param(Some(&[0xff]), TEXT, 1, None).is_err());
        let mut num = Vec::new();
        numeric_binary(-1050, 2, &mut num);
        let v = decode_param(Some(&num), NUMERIC, 1, Some(&DataType::Decimal128(15, 2))).unwrap();
        assert_eq!(v, ScalarValue::Decimal128(Some(-1050), 15, 2));
    }

    #[test]
    fn text_values_look_like_postgres() {
        let opts = FormatOptions::default();
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![1.5, f64::INFINITY, f64::NAN]));
        let enc = ColumnEncoder::new(&floats, false, &opts).unwrap();
        let texts: Vec<String> = (0..3)
            .map(|i| {
                let mut out = Vec::new();
                enc.encode(i, &mut out);
                String::from_utf8(out).unwrap()
            })
            .collect();
        assert_eq!(texts, ["1.5", "Infinity", "NaN"]);
        let bools: ArrayRef = Arc::new(BooleanArray::from(vec![true, false]));
        let enc = ColumnEncoder::new(&bools, false, &opts).unwrap();
        let mut out = Vec::new();
        enc.encode(0, &mut out);
        enc.encode(1, &mut out);
        assert_eq!(out, b"tf");
    }

    /// Each value of `a` encoded in text (`binary` false) or binary format.
    fn encoded(a: ArrayRef, binary: bool) -> Vec<Vec<u8>> {
        let options = FormatOptions::default();
        let enc = ColumnEncoder::new(&a, binary, &options).unwrap();
        (0..a.len())
            .map(|row| {
                let mut out = Vec::new();
                enc.encode(row, &mut out);
                out
            })
            .collect()
    }

    fn texts(a: ArrayRef) -> Vec<String> {
        encoded(a, false)
            .into_iter()
            .map(|b| String::from_utf8(b).unwrap())
            .collect()
    }

    const HOUR_NS: i64 = 3_600_000_000_000;

    fn intervals() -> (Vec<IntervalMonthDayNano>, Vec<&'static str>) {
        let iv = IntervalMonthDayNano::new;
        // PostgreSQL 16's output for each value (IntervalStyle postgres).
        [
            (
                iv(14, 3, 4 * HOUR_NS + 306 * 1_000_000_000 + 500_000_000),
                "1 year 2 mons 3 days 04:05:06.5",
            ),
            (iv(0, -1, 2 * HOUR_NS), "-1 days +02:00:00"),
            (iv(0, 0, 0), "00:00:00"),
            (iv(-14, 0, 0), "-1 years -2 mons"),
            (iv(1, 1, 0), "1 mon 1 day"),
            (iv(12, 0, 0), "1 year"),
            (iv(0, 0, -1_000), "-00:00:00.000001"),
            (iv(0, 1, -HOUR_NS), "1 day -01:00:00"),
            (iv(-1, 2, 0), "-1 mons +2 days"),
            (iv(0, 0, 100 * HOUR_NS), "100:00:00"),
        ]
        .into_iter()
        .unzip()
    }

    #[test]
    fn intervals_print_as_postgres_and_round_trip_in_binary() {
        use arrow::array::IntervalMonthDayNanoArray;
        let (values, expected) = intervals();
        let a: ArrayRef = Arc::new(IntervalMonthDayNanoArray::from(values.clone()));
        assert_eq!(texts(a.clone()), expected);
        for (value, bytes) in values.iter().zip(encoded(a, true)) {
            assert_eq!(bytes.len(), 16);
            let back = decode_param(Some(&bytes), INTERVAL, 1, None).unwrap();
            assert_eq!(back, ScalarValue::IntervalMonthDayNano(Some(*value)));
        }
        // The text form read back as a parameter is the same value.
        for (value, text) in values.iter().zip(expected) {
            let back = decode_param(Some(text.as_bytes()), INTERVAL, 0, None).unwrap();
            assert_eq!(
                back,
                ScalarValue::IntervalMonthDayNano(Some(*value)),
                "{text}"
            );
        }
    }

    #[test]
    fn times_print_as_postgres_and_round_trip_in_binary() {
        use arrow::array::{Time32SecondArray, Time64MicrosecondArray, Time64NanosecondArray};
        let micros = vec![0, 3_600_000_000 * 3 + 245_250_000, 86_399_999_999];
        let a: ArrayRef = Arc::new(Time64MicrosecondArray::from(micros.clone()));
        assert_eq!(
            texts(a.clone()),
            ["00:00:00", "03:04:05.25", "23:59:59.999999"]
        );
        for (us, bytes) in micros.iter().zip(encoded(a, true)) {
            assert_eq!(bytes, us.to_be_bytes());
            let back = decode_param(Some(&bytes), TIME, 1, None).unwrap();
            assert_eq!(back, ScalarValue::Time64Microsecond(Some(*us)));
        }
        // Other units: nanoseconds truncated to microseconds, seconds whole.
        let ns: ArrayRef = Arc::new(Time64NanosecondArray::from(vec![1_234_567_891]));
        assert_eq!(texts(ns), ["00:00:01.234567"]);
        let s: ArrayRef = Arc::new(Time32SecondArray::from(vec![61]));
        assert_eq!(texts(s), ["00:01:01"]);
    }

    #[test]
    fn bytea_is_hex_in_text_and_raw_in_binary() {
        use arrow::array::{BinaryArray, LargeBinaryArray};
        let values: Vec<&[u8]> = vec![b"", b"hi", &[0, 0x5c, 0xff]];
        let a: ArrayRef = Arc::new(BinaryArray::from(values.clone()));
        assert_eq!(texts(a.clone()), ["\\x", "\\x6869", "\\x005cff"]);
        assert_eq!(encoded(a, true), values);
        let large: ArrayRef = Arc::new(LargeBinaryArray::from(vec![&b"hi"[..]]));
        assert_eq!(texts(large), ["\\x6869"]);
        assert_eq!(pg_type(&DataType::Binary), (BYTEA, -1));
        // Parameters: binary as sent, text in either of PostgreSQL's forms.
        let bin = |v: &[u8]| ScalarValue::Binary(Some(v.to_vec()));
        assert_eq!(
            decode_param(Some(b"\x00ff"), BYTEA, 1, None).unwrap(),
            bin(b"\x00ff")
        );
        assert_eq!(
            decode_param(Some(b"\\x00ff"), BYTEA, 0, None).unwrap(),
            bin(&[0, 0xff])
        );
        assert_eq!(
            decode_param(Some(b"a\\134"), BYTEA, 0, None).unwrap(),
            bin(b"a\\")
        );
        assert!(decode_param(Some(b"\\xf"), BYTEA, 0, None).is_err());
    }
}

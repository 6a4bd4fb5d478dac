//! One pass over a column for a [`ColumnTest`].
//!
//! The result has a bit per row: the value is non-NULL, in the test's set,
//! and the row is still `alive` (kept by the conjuncts before). Ordered
//! values are tested against their intervals in the column's own native
//! type; strings by length first, then bytes, and only in 64-row words
//! where some row is still alive.

use arrow::array::{
    Array, ArrowPrimitiveType, AsArray, BooleanArray, GenericStringArray, OffsetSizeTrait,
    StringViewArray,
};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};

use super::column_test::{ColumnTest, Domain, ValueSet};

/// The rows of `array` that pass `test`, among the `alive` ones; `None`
/// where the array's type is not one the test's domain reads (the caller
/// evaluates the conjuncts themselves).
pub(super) fn evaluate(
    test: &ColumnTest,
    array: &dyn Array,
    alive: Option<&BooleanBuffer>,
) -> Option<BooleanArray> {
    let passed = match &test.set {
        ValueSet::Ordered { domain, ranges } => ordered(*domain, ranges, array)?,
        ValueSet::Strings { values, negated } => strings(values, *negated, array, alive)?,
    };
    let mut bits = passed;
    if let Some(nulls) = array.nulls().filter(|n| n.null_count() > 0) {
        bits = &bits & nulls.inner();
    }
    if let Some(alive) = alive {
        bits = &bits & alive;
    }
    Some(BooleanArray::new(bits, None::<NullBuffer>))
}

fn ordered(domain: Domain, ranges: &[(i128, i128)], array: &dyn Array) -> Option<BooleanBuffer> {
    let integer = domain == Domain::Integer;
    match (array.data_type(), domain) {
        (DataType::Int8, _) if integer => Some(in_ranges::<Int8Type>(array, ranges)),
        (DataType::Int16, _) if integer => Some(in_ranges::<Int16Type>(array, ranges)),
        (DataType::Int32, _) if integer => Some(in_ranges::<Int32Type>(array, ranges)),
        (DataType::Int64, _) if integer => Some(in_ranges::<Int64Type>(array, ranges)),
        (DataType::UInt8, _) if integer => Some(in_ranges::<UInt8Type>(array, ranges)),
        (DataType::UInt16, _) if integer => Some(in_ranges::<UInt16Type>(array, ranges)),
        (DataType::UInt32, _) if integer => Some(in_ranges::<UInt32Type>(array, ranges)),
        (DataType::UInt64, _) if integer => Some(in_ranges::<UInt64Type>(array, ranges)),
        (DataType::Date32, Domain::Date32) => Some(in_ranges::<Date32Type>(array, ranges)),
        (DataType::Decimal128(_, scale), Domain::Decimal { scale: wanted }) if *scale == wanted => {
            Some(in_ranges::<Decimal128Type>(array, ranges))
        }
        _ => None,
    }
}

/// Bits of the values of `array` (of type `T`) inside one of `ranges`,
/// NULL slots included (their bits are cleared by the caller).
fn in_ranges<T>(array: &dyn Array, ranges: &[(i128, i128)]) -> BooleanBuffer
where
    T: ArrowPrimitiveType,
    T::Native: Into<i128> + TryFrom<i128> + PartialOrd + Copy + Bounds,
{
    let values = array.as_primitive::<T>().values();
    // The intervals clipped to what `T` holds, in `T`; an interval past
    // either end of `T` is dropped or shortened to it.
    let native = |v: i128| T::Native::try_from(v).ok();
    let (min, max) = (T::Native::MIN_VALUE.into(), T::Native::MAX_VALUE.into());
    let ranges: Vec<(T::Native, T::Native)> = ranges
        .iter()
        .filter(|&&(lo, hi)| hi >= min && lo <= max)
        .filter_map(|&(lo, hi)| Some((native(lo.max(min))?, native(hi.min(max))?)))
        .collect();
    let len = values.len();
    match ranges.as_slice() {
        [] => BooleanBuffer::new_unset(len),
        &[(lo, hi)] => BooleanBuffer::collect_bool(len, |i| {
            let v = values[i];
            (v >= lo) & (v <= hi)
        }),
        &[(lo1, hi1), (lo2, hi2)] => BooleanBuffer::collect_bool(len, |i| {
            let v = values[i];
            ((v >= lo1) & (v <= hi1)) | ((v >= lo2) & (v <= hi2))
        }),
        ranges => BooleanBuffer::collect_bool(len, |i| {
            let v = values[i];
            ranges.iter().any(|&(lo, hi)| (v >= lo) & (v <= hi))
        }),
    }
}

/// The least and greatest value of a native type.
trait Bounds {
    const MIN_VALUE: Self;
    const MAX_VALUE: Self;
}

macro_rules! bounds {
    ($($t:ty),*) => {$(
        impl Bounds for $t {
            const MIN_VALUE: Self = <$t>::MIN;
            const MAX_VALUE: Self = <$t>::MAX;
        }
    )*};
}
bounds!(i8, i16, i32, i64, i128, u8, u16, u32, u64);

fn strings(
    values: &[Vec<u8>],
    negated: bool,
    array: &dyn Array,
    alive: Option<&BooleanBuffer>,
) -> Option<BooleanBuffer> {
    let len = array.len();
    let matches = |bytes: &[u8]| values.iter().any(|v| v.as_slice() == bytes) != negated;
    match array.data_type() {
        DataType::Utf8 => Some(offset_strings::<i32>(
            array.as_string::<i32>(),
            alive,
            matches,
        )),
        DataType::LargeUtf8 => Some(offset_strings::<i64>(
            array.as_string::<i64>(),
            alive,
            matches,
        )),
        DataType::Utf8View => {
            let array: &StringViewArray = array.as_string_view();
            Some(words_where_alive(len, alive, |i| {
                matches(array.value(i).as_bytes())
            }))
        }
        _ => None,
    }
}

fn offset_strings<O: OffsetSizeTrait>(
    array: &GenericStringArray<O>,
    alive: Option<&BooleanBuffer>,
    matches: impl Fn(&[u8]) -> bool,
) -> BooleanBuffer {
    let offsets = array.value_offsets();
    let bytes = array.value_data();
    words_where_alive(array.len(), alive, |i| {
        let start = offsets[i].as_usize();
        let end = offsets[i + 1].as_usize();
        matches(&bytes[start..end])
    })
}

/// Bits of `test(i)` for the rows `i < len` that are `alive` (all of them
/// without `alive`); the other bits stay zero. A string test costs more
/// than walking the set bits, so only live rows are tested.
fn words_where_alive(
    len: usize,
    alive: Option<&BooleanBuffer>,
    test: impl Fn(usize) -> bool,
) -> BooleanBuffer {
    let word = |base: usize| {
        let rows = (len - base).min(64);
        (0..rows).fold(0u64, |bits, j| bits | (u64::from(test(base + j)) << j))
    };
    let words: Vec<u64> = match alive {
        None => (0..len.div_ceil(64)).map(|w| word(w * 64)).collect(),
        Some(alive) => alive
            .bit_chunks()
            .iter_padded()
            .enumerate()
            .map(|(w, live)| {
                let base = w * 64;
                let mut rest = live;
                let mut bits = 0u64;
                while rest != 0 {
                    let j = rest.trailing_zeros();
                    bits |= u64::from(test(base + j as usize)) << j;
                    rest &= rest - 1;
                }
                bits
            })
            .collect(),
    };
    BooleanBuffer::new(Buffer::from_vec(words), 0, len)
}

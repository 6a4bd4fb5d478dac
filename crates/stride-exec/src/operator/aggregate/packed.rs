//! Group keys packed into one 128-bit word.
//!
//! Arrow's row format encodes a key of two one-character strings (TPC-H
//! Q1's `l_returnflag, l_linestatus`) as a variable-length row of block
//! encoded strings; hashing and comparing it then walks bytes through row
//! offsets. Most multi-column keys are narrower than that: small integers,
//! dates, short codes. Here such a key is one `u128`, hashed in two
//! multiplications and compared in one instruction:
//!
//! ```text
//!   bits 120..128   NULL mask (bit c: column c is NULL; its slot is zero)
//!   bytes 0..15     the columns' slots, in order:
//!                   integers, dates, decimals of precision <= 18: their bytes
//!                   (1, 2, 4 or 8), little-endian
//!                   strings: a length byte, then up to `width - 1` bytes
//! ```
//!
//! The slots are fixed per aggregate ([`PackedLayout::new`]): integer-like
//! columns take their width, and the string columns share what is left of
//! 15 bytes. A batch with a string longer than its slot cannot be packed
//! ([`PackedLayout::pack`] answers `None`); the aggregate then keeps that
//! worker's groups in Arrow's row format from there on (see the aggregate's
//! `GroupTable::move_to_rows`).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Decimal128Array, Int64Array, StringArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{
    DataType, Date32Type, Date64Type, Decimal128Type, Int16Type, Int32Type, Int64Type, Int8Type,
    UInt16Type, UInt32Type, UInt8Type,
};

use crate::error::{ExecError, Result};
use crate::hash::hash_u64;

/// Bytes of a packed key that hold values (the 16th holds the NULL mask).
const VALUE_BYTES: usize = 15;

/// Most columns a packed key holds (one NULL bit each).
const MAX_COLUMNS: usize = 8;

/// How one column is packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// An integer-like value of `width` bytes; `signed` sign-extends it
    /// when unpacked.
    Int { width: usize, signed: bool },
    /// A string of at most `width - 1` bytes after its length byte.
    Str { width: usize },
}

impl Slot {
    fn width(self) -> usize {
        match self {
            Slot::Int { width, .. } | Slot::Str { width } => width,
        }
    }
}

/// The slots of an aggregate's group columns.
#[derive(Debug, Clone)]
pub(super) struct PackedLayout {
    types: Vec<DataType>,
    slots: Vec<Slot>,
    /// Byte offset of each slot.
    offsets: Vec<usize>,
}

/// The hash of a packed key.
#[inline(always)]
pub(super) fn hash_packed(key: u128) -> u64 {
    hash_u64(key as u64 ^ hash_u64((key >> 64) as u64))
}

/// The slot of an integer-like type, `None` for anything else.
fn int_slot(t: &DataType) -> Option<Slot> {
    let (width, signed) = match t {
        DataType::Int8 => (1, true),
        DataType::UInt8 => (1, false),
        DataType::Int16 => (2, true),
        DataType::UInt16 => (2, false),
        DataType::Int32 | DataType::Date32 => (4, true),
        DataType::UInt32 => (4, false),
        DataType::Int64 | DataType::Date64 => (8, true),
        DataType::Decimal128(p, _) if *p <= 18 => (8, true),
        _ => return None,
    };
    Some(Slot::Int { width, signed })
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

impl PackedLayout {
    /// The layout of keys of `types`, or `None` where they do not fit 15
    /// bytes (with at least 2 bytes per string column) or have a type that
    /// does not pack (floats, nested types, wide decimals, …).
    pub(super) fn new(types: &[DataType]) -> Option<PackedLayout> {
        if types.is_empty() || types.len() > MAX_COLUMNS {
            return None;
        }
        let mut fixed = 0;
        let mut strings = 0;
        for t in types {
            match int_slot(t) {
                Some(s) => fixed += s.width(),
                None if is_string(t) => strings += 1,
                None => return None,
            }
        }
        let string_width = match strings {
            0 => 0,
            n => VALUE_BYTES.checked_sub(fixed)? / n,
        };
        if fixed > VALUE_BYTES || (strings > 0 && string_width < 2) {
            return None;
        }
        let slots: Vec<Slot> = types
            .iter()
            .map(|t| {
                int_slot(t).unwrap_or(Slot::Str {
                    width: string_width,
                })
            })
            .collect();
        let offsets = slots
            .iter()
            .scan(0, |at, s| {
                let o = *at;
                *at += s.width();
                Some(o)
            })
            .collect();
        Some(PackedLayout {
            types: types.to_vec(),
            slots,
            offsets,
        })
    }

    /// The packed keys of `columns`, or `None` when a string is longer
    /// than its slot.
    pub(super) fn pack(&self, columns: &[ArrayRef]) -> Result<Option<Vec<u128>>> {
        let rows = columns.first().map_or(0, |c| c.len());
        let mut keys = vec![0u128; rows];
        for (c, column) in columns.iter().enumerate() {
            let at = SlotAt {
                shift: 8 * self.offsets[c] as u32,
                width: self.slots[c].width(),
                null_bit: 1u128 << (120 + c),
            };
            if let Some(nulls) = column.logical_nulls() {
                for (key, valid) in keys.iter_mut().zip(nulls.iter()) {
                    if !valid {
                        *key |= at.null_bit;
                    }
                }
            }
            match self.slots[c] {
                Slot::Int { .. } => {
                    // A decimal of precision <= 18 fits 64 bits, unless a
                    // value breaks its precision (Arrow does not check
                    // results against it): such a batch does not pack.
                    if let Some(d) = column.as_primitive_opt::<Decimal128Type>() {
                        let fits = |v: &i128| i64::try_from(*v).is_ok();
                        let all_fit = match d.nulls() {
                            None => d.values().iter().all(fits),
                            Some(n) => d
                                .values()
                                .iter()
                                .zip(n.iter())
                                .all(|(v, ok)| !ok || fits(v)),
                        };
                        if !all_fit {
                            return Ok(None);
                        }
                    }
                    at.pack_ints(&mut keys, column)?;
                }
                Slot::Str { .. } => {
                    let packed = match column.data_type() {
                        DataType::Utf8 => at.strings(&mut keys, column.as_string::<i32>().iter()),
                        DataType::LargeUtf8 => {
                            at.strings(&mut keys, column.as_string::<i64>().iter())
                        }
                        DataType::Utf8View => at.strings(&mut keys, column.as_string_view().iter()),
                        other => {
                            return Err(ExecError::Internal(format!(
                                "packed string key of type {other}"
                            )))
                        }
                    };
                    if !packed {
                        return Ok(None);
                    }
                }
            }
        }
        Ok(Some(keys))
    }

    /// The columns of packed `keys`, of the layout's types.
    pub(super) fn unpack(&self, keys: &[u128]) -> Result<Vec<ArrayRef>> {
        let mut columns = Vec::with_capacity(self.slots.len());
        for (c, (&slot, t)) in self.slots.iter().zip(&self.types).enumerate() {
            let shift = 8 * self.offsets[c] as u32;
            let null_bit = 1u128 << (120 + c);
            let nulls = NullBuffer::from_iter(keys.iter().map(|k| k & null_bit == 0));
            let nulls = (nulls.null_count() > 0).then_some(nulls);
            let column: ArrayRef = match slot {
                Slot::Int { width, signed } => {
                    let bits = 8 * width as u32;
                    let values: Vec<i64> = keys
                        .iter()
                        .map(|k| {
                            let raw = ((k >> shift) as u64) & (u64::MAX >> (64 - bits));
                            if signed && bits < 64 {
                                ((raw << (64 - bits)) as i64) >> (64 - bits)
                            } else {
                                raw as i64
                            }
                        })
                        .collect();
                    match t {
                        DataType::Decimal128(p, s) => Arc::new(
                            Decimal128Array::new(
                                values
                                    .into_iter()
                                    .map(i128::from)
                                    .collect::<Vec<_>>()
                                    .into(),
                                nulls,
                            )
                            .with_precision_and_scale(*p, *s)?,
                        ),
                        _ => {
                            let wide: ArrayRef = Arc::new(Int64Array::new(values.into(), nulls));
                            arrow::compute::cast(&wide, t)?
                        }
                    }
                }
                Slot::Str { .. } => {
                    let strings = keys
                        .iter()
                        .zip(0..)
                        .map(|(k, i)| {
                            if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                                return Ok(None);
                            }
                            let slot = k >> shift;
                            let len = (slot & 0xff) as usize;
                            let bytes: Vec<u8> =
                                (0..len).map(|b| (slot >> (8 * (b + 1))) as u8).collect();
                            String::from_utf8(bytes).map(Some).map_err(|_| {
                                ExecError::Internal("packed string key is not UTF-8".into())
                            })
                        })
                        .collect::<Result<Vec<Option<String>>>>()?;
                    let utf8: ArrayRef = Arc::new(StringArray::from(strings));
                    if t == &DataType::Utf8 {
                        utf8
                    } else {
                        arrow::compute::cast(&utf8, t)?
                    }
                }
            };
            columns.push(column);
        }
        Ok(columns)
    }
}

/// Where one column goes in a packed key.
struct SlotAt {
    /// Bit offset of the slot.
    shift: u32,
    /// Bytes of the slot.
    width: usize,
    /// The column's NULL bit (its rows with it set stay zero).
    null_bit: u128,
}

impl SlotAt {
    /// Packs each non-NULL value's low `width` bytes.
    #[inline]
    fn ints(&self, keys: &mut [u128], values: impl Iterator<Item = i64>) {
        let mask = (1u128 << (8 * self.width)) - 1;
        for (key, v) in keys.iter_mut().zip(values) {
            if *key & self.null_bit == 0 {
                *key |= ((v as u128) & mask) << self.shift;
            }
        }
    }

    /// Packs each non-NULL string as a length byte and its bytes; false
    /// when one is longer than the slot holds.
    #[inline]
    fn strings<'a>(
        &self,
        keys: &mut [u128],
        strings: impl Iterator<Item = Option<&'a str>>,
    ) -> bool {
        for (key, s) in keys.iter_mut().zip(strings) {
            let Some(bytes) = s.map(str::as_bytes).filter(|_| *key & self.null_bit == 0) else {
                continue;
            };
            if bytes.len() >= self.width {
                return false;
            }
            let mut slot = bytes.len() as u128;
            for (b, &byte) in bytes.iter().enumerate() {
                slot |= (byte as u128) << (8 * (b + 1));
            }
            *key |= slot << self.shift;
        }
        true
    }

    /// Packs an integer-like column (decimals: their unscaled value, which
    /// fits for precision <= 18).
    fn pack_ints(&self, keys: &mut [u128], column: &ArrayRef) -> Result<()> {
        macro_rules! widen {
            ($t:ty) => {
                self.ints(
                    keys,
                    column
                        .as_primitive::<$t>()
                        .values()
                        .iter()
                        .map(|&v| v as i64),
                )
            };
        }
        match column.data_type() {
            DataType::Int8 => widen!(Int8Type),
            DataType::Int16 => widen!(Int16Type),
            DataType::Int32 => widen!(Int32Type),
            DataType::Int64 => widen!(Int64Type),
            DataType::UInt8 => widen!(UInt8Type),
            DataType::UInt16 => widen!(UInt16Type),
            DataType::UInt32 => widen!(UInt32Type),
            DataType::Date32 => widen!(Date32Type),
            DataType::Date64 => widen!(Date64Type),
            DataType::Decimal128(..) => widen!(Decimal128Type),
            other => {
                return Err(ExecError::Internal(format!(
                    "packed integer key of type {other}"
                )))
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Date32Array, Int16Array, Int8Array, StringViewArray, UInt32Array};

    #[test]
    fn layouts_fit_fifteen_bytes() {
        use DataType::*;
        assert!(PackedLayout::new(&[Utf8, Utf8]).is_some());
        assert!(PackedLayout::new(&[Int64, Date32, Int16]).is_some());
        assert!(
            PackedLayout::new(&[Int64, Date32, Int32]).is_none(),
            "16 bytes"
        );
        assert!(
            PackedLayout::new(&[Int64, Int32, Int16, Utf8]).is_none(),
            "1 byte left"
        );
        assert!(PackedLayout::new(&[Float64, Int8]).is_none());
        assert!(PackedLayout::new(&[Decimal128(38, 2)]).is_none());
        assert!(PackedLayout::new(&[Decimal128(15, 2), Utf8View]).is_some());
        assert!(
            PackedLayout::new(&vec![Int8; 9]).is_none(),
            "nine NULL bits"
        );
    }

    /// Keys survive a round trip with NULLs, negative numbers, empty and
    /// multi-byte strings; equal keys pack equal, different keys differ.
    #[test]
    fn keys_round_trip_and_compare_by_value() {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int8Array::from(vec![
                Some(-128),
                None,
                Some(127),
                Some(-128),
                Some(0),
            ])),
            Arc::new(StringArray::from(vec![
                Some("A"),
                Some(""),
                None,
                Some("A"),
                Some("é"),
            ])),
            Arc::new(Int16Array::from(vec![
                Some(-1),
                Some(0),
                Some(-32768),
                Some(-1),
                None,
            ])),
            Arc::new(UInt32Array::from(vec![
                Some(u32::MAX),
                Some(0),
                Some(7),
                Some(u32::MAX),
                Some(1),
            ])),
            Arc::new(Date32Array::from(vec![
                Some(-719162),
                Some(0),
                Some(19000),
                Some(-719162),
                None,
            ])),
        ];
        let types: Vec<DataType> = columns.iter().map(|c| c.data_type().clone()).collect();
        let layout = PackedLayout::new(&types).unwrap();
        let keys = layout.pack(&columns).unwrap().unwrap();
        assert_eq!(keys[0], keys[3]);
        let distinct: std::collections::HashSet<u128> = keys.iter().copied().collect();
        assert_eq!(distinct.len(), 4);
        let back = layout.unpack(&keys).unwrap();
        assert_eq!(back, columns);
    }

    #[test]
    fn a_decimal_beyond_64_bits_does_not_pack() {
        let layout = PackedLayout::new(&[DataType::Decimal128(18, 2), DataType::Int8]).unwrap();
        let small: ArrayRef = Arc::new(
            Decimal128Array::from(vec![Some(-123), None, Some(i64::MAX as i128)])
                .with_precision_and_scale(18, 2)
                .unwrap(),
        );
        let ints: ArrayRef = Arc::new(Int8Array::from(vec![1, 2, 3]));
        let keys = layout
            .pack(&[small.clone(), ints.clone()])
            .unwrap()
            .unwrap();
        assert_eq!(layout.unpack(&keys).unwrap(), vec![small, ints.clone()]);
        // A value past the declared precision and past 64 bits.
        let wide: ArrayRef = Arc::new(
            Decimal128Array::from(vec![Some(1), Some(i64::MAX as i128 + 1), None])
                .with_precision_and_scale(18, 2)
                .unwrap(),
        );
        assert!(layout.pack(&[wide, ints]).unwrap().is_none());
    }

    #[test]
    fn a_string_longer_than_its_slot_does_not_pack() {
        let layout = PackedLayout::new(&[DataType::Utf8View, DataType::Utf8View]).unwrap();
        // 15 bytes for two strings: 7 each, a length byte and 6 bytes.
        let fits: ArrayRef = Arc::new(StringViewArray::from(vec!["abcdef", "x"]));
        let long: ArrayRef = Arc::new(StringViewArray::from(vec!["abcdefg", "x"]));
        let keys = layout.pack(&[fits.clone(), fits.clone()]).unwrap().unwrap();
        assert_eq!(
            layout.unpack(&keys).unwrap(),
            vec![fits.clone(), fits.clone()]
        );
        assert!(layout.pack(&[fits, long]).unwrap().is_none());
    }
}

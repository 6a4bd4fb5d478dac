//! Join keys: the encoding both sides hash and compare.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::buffer::NullBuffer;
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};
use arrow::row::{RowConverter, Rows, SortField};

use crate::error::{ExecError, Result};
use crate::hash::{hash_bytes, hash_u64, is_int_like, normalize_float_key};
use crate::plan::ExprRef;

/// Encoded join keys of a batch.
#[derive(Debug)]
pub(super) enum Keys {
    /// One integer-like key column, widened to i64; `None` entries are NULL.
    Int(Vec<i64>, Option<NullBuffer>),
    /// Two integer-like key columns, widened to i64.
    Int2(Vec<i64>, Vec<i64>, Option<NullBuffer>),
    /// Multi-column or non-integer keys in Arrow's row format.
    Rows(Rows, Option<NullBuffer>),
    /// No keys: every row matches every row (cross / theta join).
    Empty,
}

impl Keys {
    /// Memory the encoded keys hold.
    pub(super) fn bytes(&self) -> usize {
        match self {
            Keys::Int(v, _) => v.capacity() * 8,
            Keys::Int2(a, b, _) => (a.capacity() + b.capacity()) * 8,
            Keys::Rows(r, _) => r.size(),
            Keys::Empty => 0,
        }
    }

    pub(super) fn is_null(&self, i: usize) -> bool {
        match self {
            Keys::Int(_, nulls) | Keys::Int2(_, _, nulls) | Keys::Rows(_, nulls) => {
                nulls.as_ref().is_some_and(|n| n.is_null(i))
            }
            Keys::Empty => false,
        }
    }

    #[inline]
    pub(super) fn hash(&self, i: usize) -> u64 {
        match self {
            Keys::Int(v, _) => hash_int(v[i]),
            Keys::Int2(a, b, _) => hash_int2(a[i], b[i]),
            Keys::Rows(r, _) => hash_bytes(r.row(i).as_ref()),
            Keys::Empty => 0,
        }
    }

    /// Whether row `i` of these keys equals row `j` of `other` (the
    /// probe's walk inlines the same comparison per encoding).
    #[cfg(test)]
    pub(super) fn eq(&self, i: usize, other: &Keys, j: usize) -> bool {
        match (self, other) {
            (Keys::Int(a, _), Keys::Int(b, _)) => a[i] == b[j],
            (Keys::Int2(a1, a2, _), Keys::Int2(b1, b2, _)) => a1[i] == b1[j] && a2[i] == b2[j],
            (Keys::Rows(a, _), Keys::Rows(b, _)) => a.row(i) == b.row(j),
            (Keys::Empty, Keys::Empty) => true,
            _ => false,
        }
    }
}

/// Hash of a one-column integer key.
#[inline(always)]
pub(super) fn hash_int(v: i64) -> u64 {
    hash_u64(v as u64)
}

/// Hash of a two-column integer key.
#[inline(always)]
pub(super) fn hash_int2(a: i64, b: i64) -> u64 {
    hash_u64(a as u64 ^ hash_u64(b as u64))
}

/// Turns key columns into [`Keys`]; shared by build and probe so both encode alike.
#[derive(Debug)]
pub struct KeyEncoder {
    types: Vec<DataType>,
    converter: Option<RowConverter>,
    /// NULL keys match each other (otherwise they never match).
    null_equals_null: bool,
}

impl KeyEncoder {
    pub fn new(types: Vec<DataType>, null_equals_null: bool) -> Result<Self> {
        let int_fast = (types.len() == 1 || types.len() == 2)
            && types.iter().all(is_int_like)
            && !null_equals_null;
        let converter = if types.is_empty() || int_fast {
            None
        } else {
            Some(RowConverter::new(
                types.iter().map(|t| SortField::new(t.clone())).collect(),
            )?)
        };
        Ok(KeyEncoder {
            types,
            converter,
            null_equals_null,
        })
    }

    pub(super) fn encode(&self, columns: Vec<ArrayRef>) -> Result<Keys> {
        if self.types.is_empty() {
            return Ok(Keys::Empty);
        }
        let columns = columns
            .into_iter()
            .zip(&self.types)
            .map(|(c, t)| {
                let c = if c.data_type() == t { c } else { cast(&c, t)? };
                normalize_float_key(c)
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let nulls = if self.null_equals_null {
            None
        } else {
            NullBuffer::union_many(
                columns
                    .iter()
                    .map(|c| c.logical_nulls())
                    .collect::<Vec<_>>()
                    .iter()
                    .map(|n| n.as_ref()),
            )
        };
        match &self.converter {
            None => {
                let widen = |c: &ArrayRef| -> Result<Vec<i64>> {
                    let w = cast(c, &DataType::Int64)?;
                    Ok(w.as_primitive::<Int64Type>().values().to_vec())
                };
                match columns.as_slice() {
                    [a] => Ok(Keys::Int(widen(a)?, nulls)),
                    [a, b] => Ok(Keys::Int2(widen(a)?, widen(b)?, nulls)),
                    _ => Err(ExecError::Internal("integer join keys of arity > 2".into())),
                }
            }
            Some(conv) => Ok(Keys::Rows(conv.convert_columns(&columns)?, nulls)),
        }
    }
}

pub(super) fn eval_keys(exprs: &[ExprRef], batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| Ok(e.evaluate(batch)?.into_array(batch.num_rows())?))
        .collect()
}

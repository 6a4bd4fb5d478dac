//! Frames: which rows of its partition a row's window function sees.
//!
//! Rows are addressed by their position in the node's sorted order; a
//! partition is a range of positions. Peer groups (rows with equal
//! partition and order keys) are found by binary search over the per-row
//! peer-group counts ([`Prepared::peer_count`]), RANGE offsets by binary
//! search over the first order key as a number, mapped to a coordinate
//! that grows along the sorted order:
//!
//! ```text
//!   c(row) = key            ASC          NULL ─► −∞ if NULLS FIRST
//!          = −key           DESC                 +∞ if NULLS LAST
//!   start  n PRECEDING: first row with c ≥ c(i) − n    n FOLLOWING: c ≥ c(i) + n
//!   end    n PRECEDING: first row with c > c(i) − n    n FOLLOWING: c > c(i) + n
//! ```
//!
//! A row whose key is NULL has its peers as the offset bounds (PostgreSQL).
//! Every frame's ends move forward (never back) as the row advances, which
//! lets aggregates slide their state (see `functions.rs`).

use std::ops::Range;

use arrow::array::Array;
use arrow::datatypes::DataType;
use datafusion_common::ScalarValue;

use super::partition::Prepared;
use crate::error::{ExecError, Result};
use crate::plan::{FrameBound, FrameUnits, SortKey, WindowFrameSpec};

/// The first position in `range` where `past` holds (`range.end` if
/// none); `past` must be false then true along the range.
pub(super) fn search(range: Range<usize>, past: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (range.start, range.end);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if past(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// First row of row `i`'s peer group, inside `part`.
pub(super) fn peer_start(p: &Prepared, i: usize, part: &Range<usize>) -> usize {
    let group = p.peer_count(i);
    search(part.start..i, |j| p.peer_count(j) == group)
}

/// The row after row `i`'s peer group, inside `part`.
pub(super) fn peer_end(p: &Prepared, i: usize, part: &Range<usize>) -> usize {
    let group = p.peer_count(i);
    search(i + 1..part.end, |j| p.peer_count(j) > group)
}

/// A frame bound with its offset decoded.
#[derive(Debug, Clone, Copy)]
enum Bound {
    UnboundedPreceding,
    Preceding(f64),
    CurrentRow,
    Following(f64),
    UnboundedFollowing,
}

/// A frame offset as a number: rows for ROWS, key units for RANGE.
fn offset(value: &ScalarValue, units: FrameUnits) -> Result<f64> {
    let number = match value.cast_to(&DataType::Float64)? {
        ScalarValue::Float64(Some(v)) if v >= 0.0 && v.is_finite() => v,
        _ => {
            return Err(ExecError::Unsupported(format!(
                "frame offset {value}: must be a non-negative number"
            )))
        }
    };
    Ok(if units == FrameUnits::Rows {
        number.trunc()
    } else {
        number
    })
}

fn bound(b: &FrameBound, units: FrameUnits) -> Result<Bound> {
    Ok(match b {
        FrameBound::UnboundedPreceding => Bound::UnboundedPreceding,
        FrameBound::Preceding(v) => Bound::Preceding(offset(v, units)?),
        FrameBound::CurrentRow => Bound::CurrentRow,
        FrameBound::Following(v) => Bound::Following(offset(v, units)?),
        FrameBound::UnboundedFollowing => Bound::UnboundedFollowing,
    })
}

/// Resolves one function's frame, row by row.
#[derive(Debug)]
pub(super) struct Frames<'a> {
    prepared: &'a Prepared,
    units: FrameUnits,
    start: Bound,
    end: Bound,
    /// Of the first order key, for RANGE offsets.
    descending: bool,
    nulls_first: bool,
}

impl<'a> Frames<'a> {
    pub(super) fn new(
        prepared: &'a Prepared,
        frame: &WindowFrameSpec,
        first_key: Option<&SortKey>,
    ) -> Result<Self> {
        let options = first_key.map(|k| k.options).unwrap_or_default();
        Ok(Frames {
            prepared,
            units: frame.units,
            start: bound(&frame.start, frame.units)?,
            end: bound(&frame.end, frame.units)?,
            descending: options.descending,
            nulls_first: options.nulls_first,
        })
    }

    /// The RANGE coordinate of row `j` (see the module docs); `None` for a
    /// NULL key.
    fn coordinate(&self, j: usize) -> Option<f64> {
        let (k, o) = self.prepared.locate(j);
        let key = self.prepared.blocks[k].range_key.as_ref()?;
        if key.is_null(o) {
            return None;
        }
        let v = key.value(o);
        Some(if self.descending { -v } else { v })
    }

    /// `coordinate`, NULL mapped to the end of the order it sorts at.
    fn ordered(&self, j: usize) -> f64 {
        self.coordinate(j).unwrap_or(if self.nulls_first {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        })
    }

    /// Where a bound puts the frame's first row (`is_start`) or the row
    /// after its last.
    fn resolve(&self, b: Bound, i: usize, part: &Range<usize>, is_start: bool) -> usize {
        let p = self.prepared;
        let rows_at = |delta: f64, forward: bool| -> usize {
            let d = if delta >= (usize::MAX / 2) as f64 {
                usize::MAX / 2
            } else {
                delta as usize
            };
            let at = if forward {
                i.saturating_add(d)
            } else {
                i.saturating_sub(d)
            };
            let at = if is_start { at } else { at.saturating_add(1) };
            at.clamp(part.start, part.end)
        };
        match (b, self.units) {
            (Bound::UnboundedPreceding, _) => part.start,
            (Bound::UnboundedFollowing, _) => part.end,
            (Bound::CurrentRow, FrameUnits::Rows) => rows_at(0.0, true),
            (Bound::Preceding(n), FrameUnits::Rows) => {
                if !is_start && n as usize > i - part.start {
                    part.start
                } else {
                    rows_at(n, false)
                }
            }
            (Bound::Following(n), FrameUnits::Rows) => rows_at(n, true),
            (Bound::CurrentRow, FrameUnits::Range) => {
                if is_start {
                    peer_start(p, i, part)
                } else {
                    peer_end(p, i, part)
                }
            }
            (Bound::Preceding(n) | Bound::Following(n), FrameUnits::Range) => {
                let Some(c) = self.coordinate(i) else {
                    return if is_start {
                        peer_start(p, i, part)
                    } else {
                        peer_end(p, i, part)
                    };
                };
                let target = if matches!(b, Bound::Preceding(_)) {
                    c - n
                } else {
                    c + n
                };
                if is_start {
                    search(part.clone(), |j| self.ordered(j) >= target)
                } else {
                    search(part.clone(), |j| self.ordered(j) > target)
                }
            }
        }
    }

    /// Row `i`'s frame inside its partition `part` (empty: `start >= end`).
    pub(super) fn frame(&self, i: usize, part: &Range<usize>) -> Range<usize> {
        let start = self.resolve(self.start, i, part, true);
        let end = self.resolve(self.end, i, part, false);
        start..end.max(start)
    }
}

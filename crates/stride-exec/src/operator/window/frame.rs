//! Frames: which rows of its partition a row's window function sees.
//!
//! Rows are addressed by their position in the node's sorted order; a
//! partition is a range of positions. Peer groups (rows with equal
//! partition and order keys) are found per piece of a morsel
//! ([`Peers`]: two binary searches over the per-row peer-group counts of
//! [`Prepared::peer_count`], one pass between), RANGE offsets by binary
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

/// The peer groups of a piece of a partition's rows: each row's group's
/// first row and the row after its last. Two binary searches find where
/// the piece's first group starts and its last ends; one pass over the
/// per-row counts finds the boundaries between.
#[derive(Debug)]
pub(super) struct Peers {
    first: usize,
    counts: Vec<u64>,
    starts: Vec<usize>,
    ends: Vec<usize>,
}

impl Peers {
    pub(super) fn new(p: &Prepared, rows: Range<usize>, part: &Range<usize>) -> Self {
        let mut counts = Vec::with_capacity(rows.len());
        for (k, lo, hi) in p.segments(rows.clone()) {
            counts.extend((lo..hi).map(|j| p.peer_count_in(k, j)));
        }
        let n = counts.len();
        let mut starts = vec![0; n];
        let mut ends = vec![0; n];
        if n > 0 {
            let group = counts[0];
            starts[0] = search(part.start..rows.start, |j| p.peer_count(j) == group);
            for j in 1..n {
                starts[j] = if counts[j] == counts[j - 1] {
                    starts[j - 1]
                } else {
                    rows.start + j
                };
            }
            let group = counts[n - 1];
            ends[n - 1] = search(rows.end..part.end, |j| p.peer_count(j) > group);
            for j in (0..n - 1).rev() {
                ends[j] = if counts[j] == counts[j + 1] {
                    ends[j + 1]
                } else {
                    rows.start + j + 1
                };
            }
        }
        Peers {
            first: rows.start,
            counts,
            starts,
            ends,
        }
    }

    /// First row of row `i`'s peer group (`i` in the piece).
    pub(super) fn start(&self, i: usize) -> usize {
        self.starts[i - self.first]
    }

    /// The row after row `i`'s peer group.
    pub(super) fn end(&self, i: usize) -> usize {
        self.ends[i - self.first]
    }

    /// Peer groups that start at or before row `i` (see
    /// [`Prepared::peer_count`]).
    pub(super) fn count(&self, i: usize) -> u64 {
        self.counts[i - self.first]
    }
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

    /// Whether every frame starts at its partition's first row.
    pub(super) fn starts_unbounded(&self) -> bool {
        matches!(self.start, Bound::UnboundedPreceding)
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
    fn resolve(
        &self,
        b: Bound,
        i: usize,
        part: &Range<usize>,
        peers: &Peers,
        is_start: bool,
    ) -> usize {
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
                    peers.start(i)
                } else {
                    peers.end(i)
                }
            }
            (Bound::Preceding(n) | Bound::Following(n), FrameUnits::Range) => {
                let Some(c) = self.coordinate(i) else {
                    return if is_start {
                        peers.start(i)
                    } else {
                        peers.end(i)
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

    /// Row `i`'s frame inside its partition `part`, whose peer groups
    /// around `i` are `peers` (empty: `start >= end`).
    pub(super) fn frame(&self, i: usize, part: &Range<usize>, peers: &Peers) -> Range<usize> {
        let start = self.resolve(self.start, i, part, peers, true);
        let end = self.resolve(self.end, i, part, peers, false);
        start..end.max(start)
    }
}

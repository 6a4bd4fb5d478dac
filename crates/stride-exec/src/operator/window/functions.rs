//! Evaluating window functions over a range of sorted rows.
//!
//! A morsel's rows `[a, b)` are cut at partition starts into pieces; each
//! function is evaluated piece by piece and the pieces concatenated:
//!
//! * ranking — from positions and peer groups: `row_number` = i − start + 1,
//!   `rank` = peer start − start + 1, `dense_rank` = peer groups since the
//!   partition's first, `percent_rank` = (rank − 1) / (rows − 1) (0 for one
//!   row), `cume_dist` = (peer end − start) / rows, `ntile` as PostgreSQL
//!   fills buckets (the first `rows mod n` hold one row more);
//! * offsets — `lag`/`lead` read the row `offset` before/after inside the
//!   partition (else the default), `first_value`/`last_value`/`nth_value`
//!   the frame's first, last and n-th row; values are gathered across
//!   blocks with one `interleave`;
//! * aggregates — DataFusion's accumulator over the frame: the first row's
//!   frame in one vectorised update, then per row the rows leaving the
//!   frame retracted (sliding accumulators; without retraction the state
//!   is rebuilt) and those entering added.

use std::ops::Range;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, Float64Array, Int64Array};
use arrow::compute::{cast, concat, interleave};
use arrow::datatypes::Int64Type;
use datafusion_common::{DataFusionError, ScalarValue};
use datafusion_expr::Accumulator;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;

use super::frame::{Frames, Peers};
use super::partition::Prepared;
use crate::error::{ExecError, Result};
use crate::plan::{SortKey, WindowFunctionSpec, WindowKind};

/// Function `f` (the `index`-th of its node) over rows `rows`, as an array
/// of the function's output type.
pub(super) fn evaluate(
    p: &Prepared,
    f: &WindowFunctionSpec,
    index: usize,
    first_key: Option<&SortKey>,
    rows: Range<usize>,
) -> Result<ArrayRef> {
    let frames = Frames::new(p, &f.frame, first_key)?;
    let mut pieces: Vec<ArrayRef> = Vec::new();
    let mut at = rows.start;
    while at < rows.end {
        let part = p.partition_of(at);
        let piece = at..rows.end.min(part.end);
        let eval = Piece {
            p,
            index,
            peers: Peers::new(p, piece.clone(), &part),
            part: part.clone(),
            rows: piece.clone(),
            frames: &frames,
        };
        pieces.push(eval.run(&f.kind)?);
        at = piece.end;
    }
    let refs: Vec<&dyn Array> = pieces.iter().map(|a| a.as_ref()).collect();
    let out = match refs.len() {
        0 => new_null_array(&f.data_type, 0),
        1 => pieces.swap_remove(0),
        _ => concat(&refs)?,
    };
    Ok(if out.data_type() == &f.data_type {
        out
    } else {
        cast(&out, &f.data_type)?
    })
}

/// A function's evaluation over rows of one partition.
struct Piece<'a> {
    p: &'a Prepared,
    /// Which function of the node (its arguments in the blocks).
    index: usize,
    part: Range<usize>,
    rows: Range<usize>,
    /// The peer groups of `rows`.
    peers: Peers,
    frames: &'a Frames<'a>,
}

/// A data exception raised by a function's argument.
fn invalid_argument(message: &str) -> ExecError {
    ExecError::DataFusion(DataFusionError::Execution(message.to_string()))
}

impl Piece<'_> {
    fn run(&self, kind: &WindowKind) -> Result<ArrayRef> {
        let n = self.part.len() as i64;
        let start = self.part.start;
        Ok(match kind {
            WindowKind::RowNumber => self.ints(|i| Some((i - start) as i64 + 1)),
            WindowKind::Rank => self.ints(|i| Some((self.peers.start(i) - start) as i64 + 1)),
            WindowKind::DenseRank => {
                let first = self.p.peer_count(start);
                self.ints(|i| Some((self.peers.count(i) - first) as i64 + 1))
            }
            WindowKind::PercentRank => self.floats(|i| {
                if n <= 1 {
                    0.0
                } else {
                    (self.peers.start(i) - start) as f64 / (n - 1) as f64
                }
            }),
            WindowKind::CumeDist => self.floats(|i| (self.peers.end(i) - start) as f64 / n as f64),
            WindowKind::Ntile => self.ntile()?,
            WindowKind::Lag => self.shifted(-1)?,
            WindowKind::Lead => self.shifted(1)?,
            WindowKind::FirstValue => self.framed(|f| (f.start < f.end).then_some(f.start))?,
            WindowKind::LastValue => self.framed(|f| (f.start < f.end).then(|| f.end - 1))?,
            WindowKind::NthValue => self.nth_value()?,
            WindowKind::Aggregate(function) => {
                self.aggregate(function, self.frames.starts_unbounded())?
            }
        })
    }

    fn ints(&self, value: impl Fn(usize) -> Option<i64>) -> ArrayRef {
        std::sync::Arc::new(self.rows.clone().map(value).collect::<Int64Array>())
    }

    fn floats(&self, value: impl Fn(usize) -> f64) -> ArrayRef {
        std::sync::Arc::new(self.rows.clone().map(value).collect::<Float64Array>())
    }

    /// Argument `arg` of row `i` as an integer (`None`: NULL or absent).
    fn int_arg(&self, arg: usize, i: usize) -> Result<Option<i64>> {
        let (k, o) = self.p.locate(i);
        let Some(a) = self.p.blocks[k].args[self.index].get(arg) else {
            return Ok(None);
        };
        let a = a
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| ExecError::Internal("window argument is not int8".into()))?;
        Ok(a.is_valid(o).then(|| a.value(o)))
    }

    fn ntile(&self) -> Result<ArrayRef> {
        let n = self.part.len() as i64;
        let mut out = Vec::with_capacity(self.rows.len());
        for i in self.rows.clone() {
            let Some(buckets) = self.int_arg(0, i)? else {
                out.push(None);
                continue;
            };
            if buckets <= 0 {
                return Err(invalid_argument(
                    "argument of ntile must be greater than zero",
                ));
            }
            let r = (i - self.part.start) as i64;
            let size = n / buckets;
            let larger = n % buckets;
            let bucket = if size == 0 {
                r + 1
            } else if r < larger * (size + 1) {
                r / (size + 1) + 1
            } else {
                (r - larger * (size + 1)) / size + larger + 1
            };
            out.push(Some(bucket));
        }
        Ok(std::sync::Arc::new(Int64Array::from(out)))
    }

    /// Gathers argument 0 at the rows `pick` chooses per row; a row with
    /// none takes argument `default` of its own row, or NULL.
    fn gather(
        &self,
        default: Option<usize>,
        pick: impl Fn(usize) -> Result<Option<usize>>,
    ) -> Result<ArrayRef> {
        let blocks = &self.p.blocks;
        let value_type = blocks
            .first()
            .and_then(|b| b.args[self.index].first())
            .map(|a| a.data_type().clone())
            .ok_or_else(|| ExecError::Internal("window value without argument".into()))?;
        let nulls = new_null_array(&value_type, 1);
        let defaults = default.filter(|&d| blocks.iter().all(|b| b.args[self.index].len() > d));
        let mut sources: Vec<&dyn Array> = blocks
            .iter()
            .map(|b| b.args[self.index][0].as_ref())
            .collect();
        if let Some(d) = defaults {
            sources.extend(blocks.iter().map(|b| b.args[self.index][d].as_ref()));
        }
        let null_source = sources.len();
        sources.push(nulls.as_ref());
        let mut indices = Vec::with_capacity(self.rows.len());
        for i in self.rows.clone() {
            indices.push(match pick(i)? {
                Some(j) => self.p.locate(j),
                None => match defaults {
                    Some(_) => {
                        let (k, o) = self.p.locate(i);
                        (blocks.len() + k, o)
                    }
                    None => (null_source, 0),
                },
            });
        }
        Ok(interleave(&sources, &indices)?)
    }

    /// `lag` (`direction` −1) and `lead` (+1): the row `offset` away inside
    /// the partition, else the default; a NULL offset gives NULL.
    fn shifted(&self, direction: i64) -> Result<ArrayRef> {
        let has_offset = self
            .p
            .blocks
            .first()
            .is_some_and(|b| b.args[self.index].len() > 1);
        let mut null_offset = Vec::with_capacity(self.rows.len());
        let mut targets = Vec::with_capacity(self.rows.len());
        for i in self.rows.clone() {
            let offset = if has_offset {
                self.int_arg(1, i)?
            } else {
                Some(1)
            };
            null_offset.push(offset.is_none());
            targets.push(offset.and_then(|o| {
                let target = i as i128 + i128::from(direction) * i128::from(o);
                (target >= self.part.start as i128 && target < self.part.end as i128)
                    .then_some(target as usize)
            }));
        }
        let out = self.gather(Some(2), |i| Ok(targets[i - self.rows.start]))?;
        if !null_offset.contains(&true) {
            return Ok(out);
        }
        Ok(arrow::compute::nullif(
            &out,
            &arrow::array::BooleanArray::from(null_offset),
        )?)
    }

    /// The row `pick` chooses in each row's frame.
    fn framed(&self, pick: impl Fn(Range<usize>) -> Option<usize>) -> Result<ArrayRef> {
        self.gather(None, |i| {
            Ok(pick(self.frames.frame(i, &self.part, &self.peers)))
        })
    }

    fn nth_value(&self) -> Result<ArrayRef> {
        self.gather(None, |i| {
            let Some(n) = self.int_arg(1, i)? else {
                return Ok(None);
            };
            if n <= 0 {
                return Err(invalid_argument(
                    "argument of nth_value must be greater than zero",
                ));
            }
            let f = self.frames.frame(i, &self.part, &self.peers);
            let at = f.start as u128 + n as u128 - 1;
            Ok((at < f.end as u128).then_some(at as usize))
        })
    }

    /// Adds (`retract`: removes) rows `range` to an accumulator.
    fn feed(&self, acc: &mut dyn Accumulator, range: Range<usize>, retract: bool) -> Result<()> {
        for (k, lo, hi) in self.p.segments(range) {
            let columns: Vec<ArrayRef> = self.p.blocks[k].args[self.index]
                .iter()
                .map(|a| a.slice(lo, hi - lo))
                .collect();
            if retract {
                acc.retract_batch(&columns)?;
            } else {
                acc.update_batch(&columns)?;
            }
        }
        Ok(())
    }

    /// Adds rows `range` (inside this piece's partition) to `acc`: rows of
    /// whole blocks from the partition's start by merging the blocks'
    /// [`Tail`] states, the rest row by row.
    ///
    /// [`Tail`]: super::partition::Tail
    fn feed_prefix(&self, acc: &mut dyn Accumulator, range: Range<usize>) -> Result<()> {
        let (first, offset) = self.p.locate(range.start);
        let (last, _) = self.p.locate(range.end - 1);
        let mut from = range.start;
        for k in first..last {
            let tail = self.p.blocks[k].tails[self.index].as_ref();
            let starts_here = if k == first { offset } else { 0 };
            match tail {
                Some(t) if t.from == starts_here => {
                    acc.merge_batch(&t.state)?;
                    from = self.p.block_start(k + 1);
                }
                _ => break,
            }
        }
        self.feed(acc, from..range.end, false)
    }

    fn aggregate(
        &self,
        function: &AggregateFunctionExpr,
        unbounded_start: bool,
    ) -> Result<ArrayRef> {
        // A frame that never leaves the partition's first row needs no
        // retraction, and its plain accumulator merges block states.
        let fresh = || -> Result<Box<dyn Accumulator>> {
            if unbounded_start {
                return Ok(function.create_accumulator()?);
            }
            Ok(match function.create_sliding_accumulator() {
                Ok(a) => a,
                Err(_) => function.create_accumulator()?,
            })
        };
        let mut acc = fresh()?;
        let retracts = acc.supports_retract_batch();
        let empty = fresh()?.evaluate()?;
        // The rows `acc` holds.
        let mut held: Option<Range<usize>> = None;
        let mut values = Vec::with_capacity(self.rows.len());
        for i in self.rows.clone() {
            let f = self.frames.frame(i, &self.part, &self.peers);
            if f.is_empty() {
                values.push(empty.clone());
                continue;
            }
            match &held {
                Some(h)
                    if f.start >= h.start
                        && f.end >= h.end
                        && f.start <= h.end
                        && (retracts || f.start == h.start) =>
                {
                    if f.start > h.start {
                        self.feed(acc.as_mut(), h.start..f.start, true)?;
                    }
                    self.feed(acc.as_mut(), h.end..f.end, false)?;
                }
                _ => {
                    acc = fresh()?;
                    if unbounded_start {
                        self.feed_prefix(acc.as_mut(), f.clone())?;
                    } else {
                        self.feed(acc.as_mut(), f.clone(), false)?;
                    }
                }
            }
            held = Some(f);
            values.push(acc.evaluate()?);
        }
        if values.is_empty() {
            return Ok(new_null_array(&empty.data_type(), 0));
        }
        Ok(ScalarValue::iter_to_array(values)?)
    }
}

//! Locality-aware table scans: one cursor per memory node (seed 002 §5.2,
//! seed 000 §3.3).
//!
//! A [`PlacedSource`] reads a table snapshot whose rows are dealt to nodes
//! as [`Extent`]s ([`crate::placement`]). Each node has a *lane*: its
//! extents in row order and an atomic cursor over their rows. A task asks
//! with its worker's node ([`TaskContext::node`]):
//!
//! ```text
//!   affinity OS (or order kept): the flat lane, every extent in row order
//!   Target / Bound:
//!     own node's lane ──dry──► interleaved rows (no node) ──dry──►
//!       a node without workers, or (stealing) the fullest other lane
//!         ──none allowed, some left──► NodeDry(Soft | Hard)
//!         ──every lane dry──────────► Exhausted
//! ```
//!
//! `NodeDry` hands the decision back to the scheduler
//! ([`stride_sched::affinity`]): soft, the worker comes back as a thief
//! (`ctx.stealing()`) once it has nothing local; hard, it leaves the rest
//! to the nodes that hold it. Every morsel is reported as local, remote or
//! stolen ([`TaskContext::morsel_place`]).
//!
//! **Order.** A morsel's slices carry their table rows as sequence numbers,
//! so sinks that sort by [`MorselSeq`] see the same order under every
//! placement. What per-node lanes give up is that the morsels handed out
//! so far form a prefix of the table; a pipeline that relies on it (a
//! LIMIT stops taking morsels once it has enough) is compiled with
//! [`ScanOrder::Prefix`], which reads the flat lane.
//!
//! **Auto.** Until it has measured a few milliseconds of its tasks' time,
//! an Auto scan behaves as Target; then it compares the bytes its morsels
//! covered per CPU second with the threshold and stays Bound
//! (memory-bound) or Target for the rest of the scan.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arrow::array::RecordBatch;
use stride_sched::{MorselPlace, NodeAffinity, TaskContext};

use crate::error::Result;
use crate::placement::{extents, Affinity, Extent, ScanPlacement};
use crate::seq::MorselSeq;
use crate::source::{Morsel, Source, Taken};

/// CPU time an Auto scan measures before it decides.
const AUTO_SAMPLE: Duration = Duration::from_millis(4);

/// Whether a scan must hand out its rows as a growing prefix of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanOrder {
    /// Any order (sequence numbers still give each slice's table row).
    Any,
    /// Morsels in row order from one cursor (below a LIMIT).
    Prefix,
}

/// Auto's decision (`AtomicU8`).
const UNDECIDED: u8 = 0;
const SOFT: u8 = 1;
const HARD: u8 = 2;

/// Extents of one node (or all of them) with a cursor over their rows.
#[derive(Debug)]
struct Lane {
    /// Indices into the layout's extents, in row order.
    extents: Vec<usize>,
    /// `starts[i]`: lane row of extent `extents[i]`; one more entry, the total.
    starts: Vec<usize>,
    /// Lane rows handed out so far (CAS; Relaxed: the rows are immutable
    /// and nothing else is published through it).
    cursor: AtomicUsize,
}

impl Lane {
    fn new(all: &[Extent], keep: impl Fn(&Extent) -> bool) -> Lane {
        let mut extents = Vec::new();
        let mut starts = vec![0];
        for (i, e) in all.iter().enumerate().filter(|(_, e)| keep(e)) {
            extents.push(i);
            starts.push(starts.last().unwrap_or(&0) + e.len());
        }
        Lane {
            extents,
            starts,
            cursor: AtomicUsize::new(0),
        }
    }

    fn total(&self) -> usize {
        *self.starts.last().unwrap_or(&0)
    }

    fn remaining(&self) -> usize {
        self.total()
            .saturating_sub(self.cursor.load(Ordering::Relaxed))
    }

    /// Claims up to `rows` rows: the lane range taken, or `None` when dry.
    fn claim(&self, rows: usize) -> Option<(usize, usize)> {
        let total = self.total();
        let mut start = self.cursor.load(Ordering::Relaxed);
        loop {
            if start >= total {
                return None;
            }
            let end = start.saturating_add(rows.max(1)).min(total);
            match self.cursor.compare_exchange_weak(
                start,
                end,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some((start, end)),
                Err(now) => start = now,
            }
        }
    }
}

#[derive(Debug)]
struct Layout {
    /// The table's blocks, projected.
    batches: Vec<RecordBatch>,
    extents: Vec<Extent>,
    /// Every extent, in row order (OS, or order kept).
    flat: Lane,
    /// Per node (position in `ScanPlacement::nodes`): its extents.
    lanes: Vec<Lane>,
    /// Extents on no node (interleaved).
    spread: Lane,
    /// Bytes per row of the projected columns (Auto's measure).
    row_bytes: f64,
}

/// A table scan with per-node cursors (see the module docs).
pub struct PlacedSource {
    name: String,
    blocks: Arc<[RecordBatch]>,
    projection: Vec<usize>,
    config: ScanPlacement,
    order: ScanOrder,
    layout: OnceLock<Layout>,
    /// Auto: bytes handed out and CPU nanoseconds of the tasks (Relaxed
    /// statistics), and the decision once made.
    bytes: AtomicU64,
    cpu_ns: AtomicU64,
    decided: AtomicU8,
}

impl fmt::Debug for PlacedSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlacedSource")
            .field("name", &self.name)
            .field("placement", &self.config.placement)
            .field("affinity", &self.config.affinity)
            .field("order", &self.order)
            .finish()
    }
}

impl PlacedSource {
    pub fn new(
        name: impl Into<String>,
        blocks: Arc<[RecordBatch]>,
        projection: Vec<usize>,
        config: ScanPlacement,
        order: ScanOrder,
    ) -> Self {
        PlacedSource {
            name: name.into(),
            blocks,
            projection,
            config,
            order,
            layout: OnceLock::new(),
            bytes: AtomicU64::new(0),
            cpu_ns: AtomicU64::new(0),
            decided: AtomicU8::new(UNDECIDED),
        }
    }

    fn layout(&self) -> Result<&Layout> {
        if let Some(l) = self.layout.get() {
            return Ok(l);
        }
        let batches = self
            .blocks
            .iter()
            .map(|b| b.project(&self.projection))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let nodes = &self.config.nodes;
        let extents = extents(&self.name, &batches, self.config.placement, nodes);
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let bytes: usize = batches.iter().map(RecordBatch::get_array_memory_size).sum();
        let layout = Layout {
            flat: Lane::new(&extents, |_| true),
            lanes: nodes
                .iter()
                .map(|&n| Lane::new(&extents, |e| e.node == Some(n)))
                .collect(),
            spread: Lane::new(&extents, |e| e.node.is_none()),
            row_bytes: bytes as f64 / rows.max(1) as f64,
            batches,
            extents,
        };
        Ok(self.layout.get_or_init(|| layout))
    }

    /// The affinity in force: OS when order is kept; Auto's decision (soft
    /// until made).
    fn affinity(&self) -> Option<NodeAffinity> {
        if self.order == ScanOrder::Prefix {
            return None;
        }
        match self.config.affinity {
            Affinity::Os => None,
            Affinity::Target => Some(NodeAffinity::Soft),
            Affinity::Bound => Some(NodeAffinity::Hard),
            Affinity::Auto => Some(match self.decided.load(Ordering::Relaxed) {
                HARD => NodeAffinity::Hard,
                _ => NodeAffinity::Soft,
            }),
        }
    }

    /// What Auto decided: `None` while undecided (or not Auto).
    pub fn auto_decision(&self) -> Option<NodeAffinity> {
        match self.decided.load(Ordering::Relaxed) {
            SOFT => Some(NodeAffinity::Soft),
            HARD => Some(NodeAffinity::Hard),
            _ => None,
        }
    }

    /// Cuts the lane range `[start, end)` of `lane` into slices; also the
    /// node of its first extent.
    fn morsel(
        &self,
        layout: &Layout,
        lane: &Lane,
        (start, end): (usize, usize),
    ) -> (Morsel, Option<usize>) {
        let mut morsel = Morsel::default();
        let mut i = lane.starts.partition_point(|&s| s <= start) - 1;
        let node = layout.extents[lane.extents[i]].node;
        let mut at = start;
        while at < end {
            let e = &layout.extents[lane.extents[i]];
            let offset = at - lane.starts[i];
            let take = (end - at).min(e.len() - offset);
            let slice = layout.batches[e.block].slice(e.rows.start + offset, take);
            morsel
                .slices
                .push((MorselSeq::at((e.first_row + offset) as u64), slice));
            at += take;
            i += 1;
        }
        // Only an Auto scan still measuring reads this: no shared write
        // per morsel otherwise.
        if self.config.affinity == Affinity::Auto
            && self.decided.load(Ordering::Relaxed) == UNDECIDED
        {
            self.bytes.fetch_add(
                ((end - start) as f64 * layout.row_bytes) as u64,
                Ordering::Relaxed,
            );
        }
        (morsel, node)
    }

    /// The lane range `range` of `lane` as a morsel taken from `place`.
    fn taken(
        &self,
        layout: &Layout,
        lane: &Lane,
        range: (usize, usize),
        place: MorselPlace,
        ctx: &mut TaskContext<'_>,
    ) -> Taken {
        ctx.morsel_place(place);
        Taken::Morsel(self.morsel(layout, lane, range).0)
    }
}

impl Source for PlacedSource {
    fn next_morsel(&self, rows: usize) -> Result<Option<Morsel>> {
        // Outside a task (tests, inline runs): the flat lane.
        let layout = self.layout()?;
        Ok(layout
            .flat
            .claim(rows)
            .map(|range| self.morsel(layout, &layout.flat, range).0))
    }

    fn take(&self, rows: usize, ctx: &mut TaskContext<'_>) -> Result<Taken> {
        let layout = self.layout()?;
        let own = ctx.node();
        let Some(affinity) = self.affinity() else {
            let Some(range) = layout.flat.claim(rows) else {
                return Ok(Taken::Dry);
            };
            let (morsel, node) = self.morsel(layout, &layout.flat, range);
            ctx.morsel_place(if node == Some(own) {
                MorselPlace::Local
            } else {
                MorselPlace::Remote
            });
            return Ok(Taken::Morsel(morsel));
        };
        let nodes = &self.config.nodes;
        let mine = nodes.iter().position(|&n| n == own);
        if let Some(lane) = mine.map(|i| &layout.lanes[i]) {
            if let Some(range) = lane.claim(rows) {
                return Ok(self.taken(layout, lane, range, MorselPlace::Local, ctx));
            }
        }
        if let Some(range) = layout.spread.claim(rows) {
            let place = MorselPlace::Remote;
            return Ok(self.taken(layout, &layout.spread, range, place, ctx));
        }
        loop {
            let may = |i: usize| ctx.stealing() || !ctx.node_has_workers(nodes[i]);
            let victim = (0..nodes.len())
                .filter(|&i| Some(i) != mine && layout.lanes[i].remaining() > 0)
                .max_by_key(|&i| (may(i), layout.lanes[i].remaining()));
            match victim {
                None => return Ok(Taken::Dry),
                Some(i) if may(i) => {
                    let lane = &layout.lanes[i];
                    if let Some(range) = lane.claim(rows) {
                        let place = if ctx.stealing() {
                            MorselPlace::Stolen
                        } else {
                            MorselPlace::Remote
                        };
                        return Ok(self.taken(layout, lane, range, place, ctx));
                    }
                }
                Some(_) => return Ok(Taken::NodeDry(affinity)),
            }
        }
    }

    fn remaining_rows(&self) -> Option<usize> {
        let layout = self.layout.get()?;
        Some(if self.affinity().is_none() {
            layout.flat.remaining()
        } else {
            layout.lanes.iter().map(Lane::remaining).sum::<usize>() + layout.spread.remaining()
        })
    }

    fn task_ran(&self, ran: Duration) {
        if self.config.affinity != Affinity::Auto
            || self.decided.load(Ordering::Relaxed) != UNDECIDED
        {
            return;
        }
        let ns = self
            .cpu_ns
            .fetch_add(ran.as_nanos() as u64, Ordering::Relaxed)
            + ran.as_nanos() as u64;
        if ns < AUTO_SAMPLE.as_nanos() as u64 {
            return;
        }
        let rate = self.bytes.load(Ordering::Relaxed) as f64 / (ns as f64 * 1e-9);
        let decision = if rate > self.config.memory_bound_bytes_per_sec {
            HARD
        } else {
            SOFT
        };
        self.decided.store(decision, Ordering::Relaxed);
    }

    fn name(&self) -> String {
        let mode = match self.order {
            ScanOrder::Prefix => "in order".to_string(),
            ScanOrder::Any => format!("{}, {}", self.config.placement, self.config.affinity),
        };
        format!("scan {} ({mode})", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::Placement;
    use arrow::array::{AsArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Int64Type, Schema};

    fn table(rows: usize, per_block: usize) -> Arc<[RecordBatch]> {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        (0..rows)
            .step_by(per_block)
            .map(|s| {
                let values: Vec<i64> = (s as i64..(s + per_block).min(rows) as i64).collect();
                RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(values))])
                    .unwrap()
            })
            .collect()
    }

    /// Every row once, each slice's sequence number its table row.
    #[test]
    fn the_flat_lane_hands_out_every_row_once_with_its_row_number() {
        for p in Placement::ALL {
            let s = PlacedSource::new(
                "t",
                table(50_000, 7_000),
                vec![0],
                ScanPlacement {
                    placement: p,
                    nodes: Arc::from([0usize, 1, 2]),
                    ..ScanPlacement::default()
                },
                ScanOrder::Prefix,
            );
            let mut seen = vec![0u8; 50_000];
            let mut last = None;
            while let Some(m) = s.next_morsel(3_001).unwrap() {
                for (seq, batch) in m.slices {
                    assert!(last < Some(seq), "a prefix, in order");
                    last = Some(seq);
                    let col = batch.column(0).as_primitive::<Int64Type>();
                    for (i, v) in col.values().iter().enumerate() {
                        assert_eq!(seq, MorselSeq::at(*v as u64 - i as u64));
                        seen[*v as usize] += 1;
                    }
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{p}");
            assert_eq!(s.remaining_rows(), Some(0));
        }
    }
}

//! Window functions: ranking, offsets and aggregates over frames.
//!
//! A window node's functions share one PARTITION BY and ORDER BY (the
//! lowering stacks one node per distinct pair). Its rows go through three
//! task sets, each parallel, none with a step that grows with the input:
//!
//! ```text
//!  input ─► SortSink by (partition keys, order keys)     parallel sort: units,
//!                 │                                      then merged key ranges
//!                 ▼  sorted blocks                       (spills like any sort)
//!  read ─► WindowSink: keeps the sorted blocks, charged  (partition.rs)
//!                 │ finish
//!                 ▼
//!  step "window: partitions and peers": one part per block evaluates the
//!       functions' arguments and finds where partitions and peer groups
//!       start (Arrow's row format compares keys), and the state of each
//!       running aggregate over the block's last partition; the step's
//!       finish joins the blocks' edges: partition starts, peer-group
//!       counts per row
//!                 │
//!                 ▼
//!  WindowSource ─► … ─► sink   one morsel = a range of sorted rows; each
//!       function is evaluated over the range's pieces of partitions
//!       (functions.rs) with frames resolved per row (frame.rs)
//! ```
//!
//! Partitions are therefore ranges of one sorted order — the range
//! partitioning of the sort's merge — rather than hash buckets: a partition
//! of any size is cut into morsels, so a window without PARTITION BY (one
//! partition of every row) is sorted in parallel and evaluated in parallel
//! too. A morsel evaluates its rows independently of the others: what a
//! row needs from earlier in its partition is found by binary search (peer
//! starts, RANGE offsets, from the per-row peer-group counts) or recomputed
//! (an aggregate's state at the morsel's first row is one vectorised update
//! over that row's frame — for frames from the partition's first row, the
//! prepare step's per-block states merged, then the rows of the last
//! block; later rows slide the frame, retracting rows where the
//! accumulator can). Without PARTITION BY and ORDER BY there is nothing to
//! sort: the blocks are kept in input order.
//!
//! Memory: the sort spills like any sort, but the sorted rows the window
//! keeps (and the arguments, counts and states prepared for them) are
//! charged without spilling: a window whose input does not fit the
//! query's share fails with 53200.
//!
//! Output rows come in sorted order; each output batch carries the
//! position of its first row in that order as its [`MorselSeq`], so a
//! buffer after the window keeps that order.
//!
//! [`MorselSeq`]: crate::seq::MorselSeq

mod frame;
mod functions;
mod partition;
mod source;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use arrow::compute::SortOptions;

use crate::buffer::Buffer;
use crate::error::Result;
use crate::operator::sort::SortSink;
use crate::pipeline::{Compiler, Open};
use crate::plan::{SortKey, WindowPlan};

pub use partition::WindowSink;
pub use source::WindowSource;

/// Wires a window node: a sort of its input by (partition keys, order
/// keys) where there are keys, the sink that keeps the sorted rows, and
/// the source that evaluates the functions over them.
pub(crate) fn wire(c: &mut Compiler, plan: &WindowPlan) -> Result<Open> {
    let input_schema = plan.input.schema();
    let keys: Vec<SortKey> = plan
        .partition_by
        .iter()
        .map(|e| SortKey {
            expr: e.clone(),
            options: SortOptions::default(),
        })
        .chain(plan.order_by.iter().cloned())
        .collect();
    let mut open = c.compile_any_order(&plan.input)?;
    if !keys.is_empty() {
        let buffer = Arc::new(Buffer::new(c.memory.clone(), "window input"));
        let sort = SortSink::new(
            keys,
            None,
            input_schema.clone(),
            c.workers,
            c.memory.clone(),
            buffer.clone(),
        )?;
        c.close(open, Arc::new(sort));
        open = Compiler::read(buffer, "window input");
    }
    let (sink, source) = partition::window(plan, &input_schema, c.workers, c.memory.clone())?;
    c.close(open, Arc::new(sink));
    Ok(Open::new(Arc::new(source)))
}

//! Hash join: build on one input, probe with the other.
//!
//! ```text
//!  build pipeline:  source ─► … ─► HashBuildSink ──finish──► JoinHashTable
//!                                   (concatenated rows, keys, empty buckets)
//!  insert pipeline: JoinTableInsertSource ─► JoinTableInsertSink
//!                   (build-row ranges)        (links rows into bucket chains)
//!  probe pipeline:  source ─► … ─► HashProbeOperator ─► … ─► sink
//!  (build-side pass, only for outer/semi/anti joins that keep build rows)
//!                   JoinBuildScanSource (reads the match bitmap) ─► … ─► same sink
//! ```
//!
//! The build side is whichever input the planner chose (the smaller one);
//! every SQL join type is mapped onto four independent behaviours:
//! * `emit_pairs` — output matching (left, right) pairs (inner and outer joins);
//! * probe-side `Outer`/`Semi`/`Anti` — decided per probe row, in the probe pipeline;
//! * build-side `Outer`/`Semi`/`Anti` — matches are recorded in an atomic bitmap
//!   over build rows and a final pass emits the wanted build rows.
//!
//! Output columns are always `left ++ right` (or one side only for semi/anti
//! joins), whichever side was built.
//!
//! ## Building the table in parallel
//!
//! A sink's `finish` runs as one finalization step that the scheduler cannot
//! split, and linking millions of rows into bucket chains is mostly cache
//! misses (SF 1 `orders`: tens of milliseconds). So the build's `finish`
//! only concatenates the rows, encodes their keys and allocates the buckets
//! — for more than [`SPLIT_BUILD_ROWS`] rows not even that: it returns a
//! split step ([`crate::step`]) whose parts, on any workers, encode the keys,
//! allocate the buckets and chains, and concatenate one column each, and
//! whose finish puts the table together — and a pipeline of its own, with
//! morsels of build rows, links them:
//!
//! ```text
//!   table state:   allocated ──insert tasks (any worker, any order)──► linked ──insert finish──► ready
//!   insert row r:  prev = heads[b].swap(r + 1)   (atomic: concurrent inserts into one bucket
//!                  next[r] = prev                 each take a distinct predecessor)
//! ```
//!
//! Every row is handed out exactly once (a cursor over row ranges), so each
//! `next[r]` has one writer. All accesses are `Relaxed`: the probe reads
//! `heads` and `next` only in a later task set, and the scheduler's task-set
//! hand-off (the last task's completion, then the finalization, then the next
//! task set's first task) orders every insert before every probe; `ready`
//! (Release in the insert finish, Acquire in the probe) turns a broken
//! ordering into an error rather than a wrong result. Rows are handed out from
//! the end and each morsel inserts its rows in descending order, so with one
//! worker every chain lists its rows in ascending order; with several the
//! chain order (and so the order of a probe row's matches) varies from run to
//! run, as the order of the morsels does anyway. Tables of at most
//! [`INLINE_INSERT_ROWS`] rows are linked inside the build's `finish`, where a
//! pipeline would cost more than it saves.
//!
//! ## Bounded output
//!
//! One probe row can match every build row (a cross join, a join on a key
//! with few values), so the output of one probe morsel is unbounded. The
//! probe walks candidate pairs with a [`ProbeCursor`] and emits a chunk
//! whenever it holds [`CHUNK_PAIRS`] pairs, resuming inside a row's chain
//! where the join type allows (inner joins and build-side modes); a join
//! that decides per probe row (probe-side outer, semi, anti) cuts between
//! rows only, and a chunk that one row makes larger than `CHUNK_PAIRS` is
//! charged to the query's memory while it lives. Semi, anti and mark joins
//! without a filter or build-side state stop at a row's first match
//! (`Walk::FirstMatch`). Probe rows are walked in groups of 32: the
//! group's buckets are prefetched, then its heads loaded and the first
//! candidates' keys and links prefetched, then the chains walked, so that
//! the cache misses of a group overlap. The build side — its
//! batches, the concatenated rows, encoded keys and buckets — is charged
//! as it is collected and built (see [`crate::memory`]).

//!
//! ## Files
//!
//! * `keys` — [`KeyEncoder`]: key columns to the encoded keys both sides hash and compare;
//! * `table` — [`JoinHashTable`] and the insert pipeline that links its chains;
//! * `build` — [`HashBuildSink`] and its split layout step;
//! * `probe` — [`HashProbeOperator`] and its bounded chunks;
//! * `scan` — [`JoinBuildScanSource`], the build-side pass;
//! * `wiring` — how a join is cut into pipelines;
//! * `grace` — the grace join: build and probe rows in partitions on disk
//!   where the build side does not fit the query's memory share.

mod build;
mod grace;
mod keys;
mod probe;
mod scan;
mod table;
mod wiring;

pub use build::{BuildConfig, HashBuildSink, SPLIT_BUILD_ROWS};
pub use grace::{FLUSH_ROWS, GRACE_PARTITIONS};
pub use keys::KeyEncoder;
pub use probe::HashProbeOperator;
pub use scan::JoinBuildScanSource;
pub use table::{
    HashTableSlot, JoinHashTable, JoinTableInsertSink, JoinTableInsertSource, CHUNK_PAIRS,
    INLINE_INSERT_ROWS,
};
pub(crate) use wiring::wire;

use datafusion_expr::JoinType;

use crate::error::Result;
use crate::plan::BuildSide;

/// What a side of the join contributes beyond matching pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideMode {
    /// Nothing beyond the pairs.
    None,
    /// Rows without a match, padded with NULLs on the other side.
    Outer,
    /// Rows with at least one match (this side's columns only).
    Semi,
    /// Rows without any match (this side's columns only).
    Anti,
    /// Every row, with a boolean column after this side's columns: whether
    /// it has at least one match (a mark join: a subquery inside a
    /// disjunction). Never NULL — see `lower.rs` for the statements this is
    /// exact for.
    Mark,
}

/// The behaviour of a join once its build side is fixed.
#[derive(Debug, Clone, Copy)]
pub struct JoinModes {
    pub emit_pairs: bool,
    pub probe: SideMode,
    pub build: SideMode,
}

impl JoinModes {
    pub fn new(join_type: JoinType, build: BuildSide) -> Result<Self> {
        use JoinType::*;
        let build_left = build == BuildSide::Left;
        // (mode of the left input, mode of the right input, emit pairs)
        let (left, right, pairs) = match join_type {
            Inner => (SideMode::None, SideMode::None, true),
            Left => (SideMode::Outer, SideMode::None, true),
            Right => (SideMode::None, SideMode::Outer, true),
            Full => (SideMode::Outer, SideMode::Outer, true),
            LeftSemi => (SideMode::Semi, SideMode::None, false),
            LeftAnti => (SideMode::Anti, SideMode::None, false),
            RightSemi => (SideMode::None, SideMode::Semi, false),
            RightAnti => (SideMode::None, SideMode::Anti, false),
            LeftMark => (SideMode::Mark, SideMode::None, false),
            RightMark => (SideMode::None, SideMode::Mark, false),
        };
        let (build_mode, probe_mode) = if build_left {
            (left, right)
        } else {
            (right, left)
        };
        Ok(JoinModes {
            emit_pairs: pairs,
            probe: probe_mode,
            build: build_mode,
        })
    }
}

#[cfg(test)]
mod tests;

//! The contract between a task set and the scheduler.
//!
//! A task set is anything that can hand out work in small pieces. The scheduler
//! calls [`TaskSetWork::run_task`] on any number of workers in parallel until
//! one call reports [`TaskOutcome::Exhausted`]; once every running task of the
//! set has returned, exactly one worker calls [`TaskSetWork::finalize`], and only
//! then does the next task set of the resource group become runnable.
//!
//! **The task-set graph.** A resource group is submitted with its planned
//! task sets (a query's pipelines, in an order in which each comes after
//! those it reads). A finalization may return [`FollowUps`]: task sets that
//! run, in order, before anything planned after the finalized one — as a
//! DuckDB event schedules the events it enables. So a breaker's merge
//! (sorting, concatenating a build side, combining partial aggregates) is
//! not one long step but task sets of morsel-sized tasks, each a point at
//! which a newly arrived query can take the worker. A follow-up belongs to
//! the *stage* (planned task set) whose finalization emitted it: its CPU
//! time is accounted, traced and estimated as that stage's.
//!
//! A task never blocks: it asks [`TaskContext::next_morsel`] for the size of
//! its next morsel (row range), processes it, reports it with
//! [`TaskContext::morsel_done`], and returns when `next_morsel` says its time
//! slice `t_max` is used up (see [`crate::morsel`]).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::affinity::{MorselPlace, NodeAffinity, PlaceCounts};
use crate::masks::UpdateMasks;
use crate::morsel::{MorselPolicy, MorselSizer, MorselState};
use crate::pause::{ResumeSource, Resumer};
use crate::scheduler::Shared;
use std::sync::Arc;

/// Error raised by a task or a finalization step. The executor puts its own
/// typed error inside; the scheduler only carries it to the query's handle.
pub struct TaskError(pub Box<dyn std::error::Error + Send + Sync>);

impl TaskError {
    pub fn new(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        TaskError(Box::new(err))
    }
}

impl fmt::Debug for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Why a resource group did not complete.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// A task or finalization step returned an error.
    #[error("{0}")]
    Failed(TaskError),
    /// A task or finalization step panicked; the panic was contained to this query.
    #[error("internal error: a task panicked: {0}")]
    Panicked(String),
    /// The query was cancelled through its [`crate::QueryHandle`].
    #[error("query cancelled")]
    Cancelled,
    /// The scheduler shut down before the query finished.
    #[error("scheduler shut down")]
    Shutdown,
}

/// What a task reports when it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskOutcome {
    /// The task's time slice ran out; the task set may have more work.
    Yielded,
    /// The task set has no more morsels to hand out.
    Exhausted,
    /// No morsel is left on the worker's memory node, but other nodes
    /// still hold some: with a [`NodeAffinity::Soft`] affinity the worker
    /// may steal them later, with [`NodeAffinity::Hard`] only their nodes'
    /// workers take them ([`crate::affinity`]). Never the last word on a
    /// task set: some task reports [`TaskOutcome::Exhausted`] once every
    /// node is dry.
    NodeDry(NodeAffinity),
    /// Nothing is left to hand out now, but work that other running tasks
    /// of the set hold may come back to it (a morsel a task may stop inside
    /// and park for a later task: `stride_exec::suspend`): the worker does
    /// not choose the set again until the slot holds another entry, as
    /// after a hard [`Self::NodeDry`], and keeps the group as its pending
    /// hand-over if it ranked it first. The tasks holding that work are on
    /// workers that did not step back; one of them finishes the last of it
    /// and reports [`Self::Exhausted`]. Never the last word on a task set.
    Held,
    /// The task set's consumer is behind (a streamed result its client has
    /// not read yet): the task kept a [`crate::Resumer`] from
    /// [`TaskContext::resumer`] where the consumer finds it, and the worker
    /// does not run the set again until the consumer calls
    /// [`crate::Resumer::resume`] ([`crate::pause`]). Return it only after
    /// every morsel the task took went through.
    Paused,
}

/// Work that the scheduler runs as a task set.
pub trait TaskSetWork: Send + Sync {
    /// Short name for traces and `EXPLAIN` (e.g. `pipeline 2: scan lineitem → build`).
    fn name(&self) -> String;

    /// Runs one task: takes morsels and processes them until
    /// [`TaskContext::next_morsel`] returns `None` or no morsel is left.
    /// May be called concurrently from several workers.
    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError>;

    /// Called exactly once, after the last task of the set has returned.
    /// Breakers merge per-worker state here, or return the task sets that
    /// merge it in parallel (see the module docs); these run next, in order.
    /// A long finalization checks `cx` and stops early once the query is
    /// cancelled.
    fn finalize(&self, cx: &FinalizeContext<'_>) -> Result<FollowUps, TaskError> {
        let _ = cx;
        Ok(FollowUps::new())
    }

    /// How many workers can usefully run tasks of this set at once, if the
    /// set knows when it becomes runnable (a step split into `k` parts, a
    /// source of a single morsel); `None` (the default): any number. It only
    /// decides how many sleeping workers the set's installation wakes
    /// ([`crate::idle`]): too small a hint costs parallelism, never work.
    fn parallelism_hint(&self) -> Option<usize> {
        None
    }
}

/// Task sets a finalization leaves to run, in order, before the group's
/// next planned task set (empty for most finalizations; an empty `Vec`
/// does not allocate).
pub type FollowUps = Vec<std::sync::Arc<dyn TaskSetWork>>;

/// Per-task state handed to [`TaskSetWork::run_task`].
#[derive(Debug)]
pub struct TaskContext<'a> {
    worker: usize,
    workers: usize,
    /// The memory node of the worker ([`crate::Topology::worker_node`]).
    node: usize,
    /// Per node of the topology: whether any worker runs there.
    staffed: &'a [bool],
    /// The task may take other nodes' morsels: the worker found its own
    /// node dry earlier and chose the task set from its steal tier.
    stealing: bool,
    /// Morsels of this task by place ([`Self::morsel_place`]).
    pub(crate) places: PlaceCounts,
    sizer: MorselSizer<'a>,
    pub(crate) morsels: u64,
    pub(crate) tuples: u64,
    /// Sizes of this task's morsels, for the query's statistics: smallest,
    /// largest, count per power-of-two bucket ([`crate::group::morsel_bucket`])
    /// and a bit per non-empty bucket (so that the task's return adds only
    /// those). Kept here so that a morsel touches no shared state.
    pub(crate) morsel_min: u64,
    pub(crate) morsel_max: u64,
    pub(crate) buckets: [u32; crate::group::MORSEL_BUCKETS],
    pub(crate) used_buckets: u64,
    /// The task ended at a preemption point (see [`Self::next_morsel`]).
    pub(crate) preempted: bool,
    /// Morsels this task left unfinished at a preemption point inside
    /// them ([`Self::suspend_requested`]).
    pub(crate) suspended: u64,
    /// The query's cancel flag ([`crate::group::ResourceGroup`]'s
    /// `cancelled`), read live (Relaxed: a hint that the task may stop early;
    /// nothing is published through it).
    cancelled: &'a AtomicBool,
    /// The running worker's update masks, checked between morsels; `None`
    /// runs every task to `t_max` (seed 001's behaviour).
    preemption: Option<&'a UpdateMasks>,
    /// The scheduler and the slot of the task's set, for
    /// [`Self::resumer`]; `None` outside a scheduler.
    resume: Option<ResumeSource<'a>>,
}

/// What a finalization can ask of the scheduler: whether its query was
/// cancelled meanwhile.
#[derive(Debug, Clone, Copy)]
pub struct FinalizeContext<'a> {
    /// The group's cancel flag, read live (Relaxed: a hint to stop early;
    /// the finalizer checks it again after the finalization returns).
    cancelled: &'a AtomicBool,
}

impl<'a> FinalizeContext<'a> {
    /// A context over a cancel flag (the scheduler's is its group's).
    pub fn new(cancelled: &'a AtomicBool) -> Self {
        FinalizeContext { cancelled }
    }

    /// A context for code that finalizes outside a scheduler (tests,
    /// inline runs): never cancelled.
    pub fn detached() -> FinalizeContext<'static> {
        static NEVER: AtomicBool = AtomicBool::new(false);
        FinalizeContext { cancelled: &NEVER }
    }

    /// Whether the query was cancelled: the finalization may stop and
    /// return [`QueryError::Cancelled`]'s task error, or anything — the
    /// query's outcome is "cancelled" either way.
    pub fn stop_requested(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
}

impl<'a> TaskContext<'a> {
    pub(crate) fn new(
        worker: usize,
        workers: usize,
        t_max: Duration,
        morsels: (&'a MorselPolicy, &'a MorselState),
        cancelled: &'a AtomicBool,
        preemption: Option<&'a UpdateMasks>,
    ) -> Self {
        TaskContext {
            worker,
            workers,
            node: 0,
            staffed: &[],
            stealing: false,
            places: PlaceCounts::default(),
            sizer: MorselSizer::new(morsels.0, morsels.1, t_max, workers),
            morsels: 0,
            tuples: 0,
            morsel_min: u64::MAX,
            morsel_max: 0,
            buckets: [0; crate::group::MORSEL_BUCKETS],
            used_buckets: 0,
            preempted: false,
            suspended: 0,
            cancelled,
            preemption,
            resume: None,
        }
    }

    /// Lets the task pause its set ([`Self::resumer`]).
    pub(crate) fn with_resume(mut self, shared: &'a Arc<Shared>, slot: usize) -> Self {
        self.resume = Some(ResumeSource::new(shared, slot));
        self
    }

    /// A handle that makes the task's set runnable again after the task
    /// returned [`TaskOutcome::Paused`] ([`crate::pause`]); `None` when the
    /// task runs outside a scheduler, where it must not pause.
    pub fn resumer(&self) -> Option<Resumer> {
        self.resume.as_ref().map(ResumeSource::resumer)
    }

    /// Caps the task's adaptive morsels at `cap` (the worker's hand-over
    /// mode, [`crate::SchedulerConfig::handover_morsel`]).
    pub(crate) fn with_morsel_cap(mut self, cap: Option<Duration>) -> Self {
        self.sizer.cap(cap);
        self
    }

    /// Index of the worker running this task, in `0..workers()`. Task sets use
    /// it to address per-worker state without contention.
    pub fn worker(&self) -> usize {
        self.worker
    }

    /// The memory node of the worker running this task: its node in the
    /// scheduler's [`crate::Topology`] (logical on synthetic and fake
    /// topologies, and when workers are not pinned).
    pub fn node(&self) -> usize {
        self.node
    }

    /// Sets [`Self::node`] and which nodes have workers.
    pub(crate) fn with_node(mut self, node: usize, staffed: &'a [bool]) -> Self {
        self.node = node;
        self.staffed = staffed;
        self
    }

    /// Lets the task take other nodes' morsels ([`Self::stealing`]).
    pub(crate) fn with_stealing(mut self, stealing: bool) -> Self {
        self.stealing = stealing;
        self
    }

    /// One more than the largest node id of the scheduler's topology (its
    /// number of nodes unless the kernel's ids have gaps; 1 when the task
    /// runs outside a scheduler).
    pub fn nodes(&self) -> usize {
        self.staffed.len().max(1)
    }

    /// Whether any worker runs on `node`. A source never leaves morsels
    /// bound to a node without workers: any worker takes them.
    pub fn node_has_workers(&self, node: usize) -> bool {
        self.staffed
            .get(node)
            .copied()
            .unwrap_or(node == 0 && self.staffed.is_empty())
    }

    /// Whether the task may take morsels of other nodes: its worker found
    /// its own node's part dry and chose the task set as a thief
    /// ([`crate::affinity`]). Without an affinity a source ignores it.
    pub fn stealing(&self) -> bool {
        self.stealing
    }

    /// Records where the morsel being processed lives, relative to the
    /// worker ([`MorselPlace`]); sources with placed blocks call it once
    /// per morsel.
    pub fn morsel_place(&mut self, place: MorselPlace) {
        self.places.add(place);
    }

    /// Number of workers of the scheduler.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Whether the query was cancelled since the task started. A task set
    /// whose single morsel can take long (a join whose probe rows each
    /// match millions of rows) checks this between the chunks it emits and
    /// returns [`TaskOutcome::Yielded`] when it is set; the rest of the
    /// morsel is dropped with the query.
    pub fn stop_requested(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// How many tuples the next morsel should hold, or `None` when the task's
    /// time slice `t_max` is used up or the query was cancelled: the task then
    /// returns [`TaskOutcome::Yielded`]. `remaining` is the number of tuples
    /// the task set's source still holds, if it knows (enables the shutdown
    /// state of adaptive morsels).
    ///
    /// **Preemption point.** Once the task has processed a morsel, it also
    /// ends early when the worker's update masks hold a bit it has not
    /// pulled ([`UpdateMasks::pending`]): a group arrived or a task set
    /// became runnable since the worker chose this task, so the policy may
    /// now prefer other work. Without this a newly arrived short query
    /// waits for the rest of every running task (up to `t_max`), and again
    /// at each of its pipeline boundaries. At least one morsel per task
    /// keeps progress guaranteed; adaptive morsels are cut to
    /// `t_max / morsels_per_task` so that the points come often
    /// ([`crate::AdaptiveMorsels::morsels_per_task`]).
    pub fn next_morsel(&mut self, remaining: Option<usize>) -> Option<usize> {
        if self.stop_requested() {
            return None;
        }
        if self.morsels > 0 && self.preempt_requested() {
            return None;
        }
        self.sizer.next(remaining)
    }

    /// A preemption point for tasks that pace themselves rather than ask
    /// [`Self::next_morsel`]: whether the scheduler has news for this worker
    /// (a new group, a next task set) that its decision did not see, so the
    /// task should return now. Always `false` with preemption off.
    pub fn preempt_requested(&mut self) -> bool {
        let pending = self
            .preemption
            .is_some_and(|masks| masks.pending(self.worker));
        self.preempted |= pending;
        pending
    }

    /// A preemption point *inside* a morsel, for a task set whose morsel
    /// can produce far more than it reads (a join whose probe rows match
    /// many rows): whether the task should stop after the output chunk it
    /// just handed on and leave the rest of the morsel for a later task —
    /// because its time slice `t_max` is used up, or because the scheduler
    /// has news for this worker ([`Self::preempt_requested`]). The task set
    /// keeps the rest (see [`Self::morsel_suspended`]); a task that asks
    /// only after it handed on a chunk always makes progress.
    pub fn suspend_requested(&mut self) -> bool {
        self.sizer.slice_used() || self.preempt_requested()
    }

    /// Records that the task left its morsel unfinished at a
    /// [`Self::suspend_requested`] point; the task then returns
    /// [`TaskOutcome::Yielded`] and some later task of the set finishes the
    /// morsel ([`Self::resumed_morsel_done`]).
    pub fn morsel_suspended(&mut self) {
        self.suspended += 1;
    }

    /// Records that the task finished a morsel an earlier task suspended:
    /// it held `tuples` source tuples and took `spent` over all the tasks
    /// that worked on it. Counted as one morsel, and its throughput
    /// updates the set's morsel sizing as a whole morsel's would — so that
    /// morsels whose rows produce much stay small.
    pub fn resumed_morsel_done(&mut self, tuples: usize, spent: Duration) {
        self.count_morsel(tuples);
        self.sizer.resumed_done(tuples, spent);
    }

    /// Records that the morsel sized by [`Self::next_morsel`] was processed
    /// and held `tuples` source tuples.
    pub fn morsel_done(&mut self, tuples: usize) {
        self.count_morsel(tuples);
        self.sizer.done(tuples);
    }

    fn count_morsel(&mut self, tuples: usize) {
        let n = tuples as u64;
        self.morsels += 1;
        self.tuples += n;
        self.morsel_min = self.morsel_min.min(n);
        self.morsel_max = self.morsel_max.max(n);
        let b = crate::group::morsel_bucket(n);
        self.buckets[b] += 1;
        self.used_buckets |= 1 << b;
    }
}

//! What the worker loop reports about the work it ran, and who listens.
//!
//! The protocol ([`crate::worker`]) tells one [`Observers`] value, once per
//! task ([`Observers::task_ended`]) and once per finalization
//! ([`Observers::finalized`]), what ran for how long. The listeners:
//!
//! * the query's accounting ([`crate::group`]'s counters: CPU time and
//!   morsels per task set, morsel sizes, the priority trace);
//! * the worker's own counters ([`WorkerCounters`]);
//! * the timeline trace ([`crate::trace`], when a tracer is configured);
//! * the self-tuning tracker ([`crate::tuning`], on worker 0 while a
//!   tracking window is open).
//!
//! Nothing here feeds back into a decision: the decision core
//! (`decision.rs`) is charged by the worker loop itself, before it reports.
//! Every listener costs Relaxed atomics or a worker-local buffer; none takes
//! a lock per task except the trace's buffer (only when tracing) and the
//! priority trace's (at most once per `t_max` per group).

use std::sync::atomic::{AtomicU64 as StdAtomicU64, Ordering, Ordering as StdOrdering};
use std::time::{Duration, Instant};

use crate::group::{ResourceGroup, TaskSetEntry};
use crate::os_thread::OsSetup;
use crate::scheduler::Shared;
use crate::task::TaskContext;
use crate::thread_cpu::ThreadUsage;
pub(crate) use crate::trace::Span;
use crate::trace::{RecordPlace, WorkerTrace};
use crate::tuning::TuningDriver;
use crate::worker::WorkerStats;

/// A worker's statistics counters. Each is written only by its worker, as
/// a Relaxed load and store (no read-modify-write on the task path), and
/// read Relaxed by [`crate::Scheduler::worker_stats`]: they publish nothing
/// and are monotone, so a reader sees some recent value of each, not a
/// consistent snapshot of all of them. Aligned so that workers' counters do not
/// share a cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct WorkerCounters {
    pub(crate) tasks: StdAtomicU64,
    pub(crate) busy_ns: StdAtomicU64,
    pub(crate) idle_sleeps: StdAtomicU64,
    pub(crate) finalizations: StdAtomicU64,
    pub(crate) preemptions: StdAtomicU64,
    pub(crate) handover_tasks: StdAtomicU64,
    /// Morsels by place: local, remote, stolen ([`crate::MorselPlace`]).
    pub(crate) places: [StdAtomicU64; 3],
    /// Tasks run as a thief ([`crate::TaskContext::stealing`]).
    pub(crate) steal_tasks: StdAtomicU64,
    /// Set once by the worker after its thread set-up.
    pub(crate) os: std::sync::OnceLock<OsSetup>,
}

impl WorkerCounters {
    pub(crate) fn add(counter: &StdAtomicU64, by: u64) {
        counter.store(
            counter.load(StdOrdering::Relaxed).wrapping_add(by),
            StdOrdering::Relaxed,
        );
    }

    pub(crate) fn snapshot(&self, worker: usize) -> WorkerStats {
        WorkerStats {
            worker,
            tasks: self.tasks.load(StdOrdering::Relaxed),
            busy: Duration::from_nanos(self.busy_ns.load(StdOrdering::Relaxed)),
            idle_sleeps: self.idle_sleeps.load(StdOrdering::Relaxed),
            finalizations: self.finalizations.load(StdOrdering::Relaxed),
            preemptions: self.preemptions.load(StdOrdering::Relaxed),
            handover_tasks: self.handover_tasks.load(StdOrdering::Relaxed),
            places: crate::PlaceCounts {
                local: self.places[0].load(StdOrdering::Relaxed),
                remote: self.places[1].load(StdOrdering::Relaxed),
                stolen: self.places[2].load(StdOrdering::Relaxed),
            },
            steal_tasks: self.steal_tasks.load(StdOrdering::Relaxed),
            os: self.os.get().copied().unwrap_or_default(),
        }
    }
}

/// One task, as the worker loop saw it end.
pub(crate) struct TaskEnd<'a, 'c> {
    pub(crate) group: &'a ResourceGroup,
    /// The planned task set the task ran (or followed up).
    pub(crate) stage: usize,
    /// The position of the task set's entry among the group's
    /// ([`crate::group::TaskSetEntry::seq`]).
    pub(crate) entry: u64,
    /// Wall time the task started.
    pub(crate) start: Instant,
    /// What the task was charged ([`crate::Clock`]).
    pub(crate) ran: Duration,
    /// CPU time and page faults of the worker's thread in the task
    /// (measured only while [`Observers::tracing`]).
    pub(crate) usage: Option<ThreadUsage>,
    /// The task's context: morsel and tuple counts, whether it stopped at a
    /// preemption point.
    pub(crate) ctx: &'a TaskContext<'c>,
    /// The group's priority in this worker's view, after the charge.
    pub(crate) priority: f64,
    /// The task ran with hand-over morsels.
    pub(crate) handover: bool,
}

/// The listeners of one worker.
pub(crate) struct Observers {
    worker: usize,
    trace: Option<WorkerTrace>,
    tuning: Option<TuningDriver>,
}

impl Observers {
    pub(crate) fn new(
        worker: usize,
        trace: Option<WorkerTrace>,
        tuning: Option<TuningDriver>,
    ) -> Self {
        Observers {
            worker,
            trace,
            tuning,
        }
    }

    /// Whether a trace listens: the worker then also measures its thread's
    /// CPU time around each step ([`crate::TaskRecord::cpu_ns`]).
    pub(crate) fn tracing(&self) -> bool {
        self.trace.is_some()
    }

    /// The self-tuning schedule, on the worker that runs it.
    pub(crate) fn tuning(&mut self) -> Option<&mut TuningDriver> {
        self.tuning.as_mut()
    }

    /// A task returned (or panicked: it is reported all the same).
    pub(crate) fn task_ended(&mut self, shared: &Shared, t: &TaskEnd<'_, '_>) {
        account(t.group, t.stage, t.ran, t.ctx);
        let end = t.start + t.ran;
        t.group.counters.sample_priority(
            end.saturating_duration_since(t.group.submitted),
            t.priority,
            shared.config.t_max,
        );
        let counters = &shared.worker_counters[self.worker];
        WorkerCounters::add(&counters.tasks, 1);
        WorkerCounters::add(&counters.busy_ns, t.ran.as_nanos() as u64);
        if t.ctx.preempted {
            WorkerCounters::add(&counters.preemptions, 1);
        }
        if t.handover {
            WorkerCounters::add(&counters.handover_tasks, 1);
        }
        if t.ctx.stealing() {
            WorkerCounters::add(&counters.steal_tasks, 1);
        }
        let p = t.ctx.places;
        if !p.is_empty() {
            for (counter, n) in counters.places.iter().zip([p.local, p.remote, p.stolen]) {
                WorkerCounters::add(counter, n);
            }
        }
        if let Some(trace) = &self.trace {
            let place = RecordPlace {
                group: t.group.id,
                task_set: t.stage,
                entry: t.entry,
            };
            let span = Span {
                start: t.start,
                end,
                usage: t.usage,
            };
            trace.task(span, place, t.ctx.morsels, t.ctx.tuples);
        }
        if let Some(driver) = &mut self.tuning {
            if driver.is_tracking() {
                let arrival = t.group.submitted.saturating_duration_since(shared.started);
                driver.record(t.group.id, arrival, t.ran);
            }
        }
    }

    /// The worker finalized `entry`, a task set of its group; `ran`: when
    /// the finalization step ran (`None`: the group had failed or was
    /// cancelled and no step ran).
    pub(crate) fn finalized(&mut self, shared: &Shared, entry: &TaskSetEntry, ran: Option<Span>) {
        let group = &entry.group;
        let counters = &shared.worker_counters[self.worker];
        WorkerCounters::add(&counters.finalizations, 1);
        let Some(span) = ran else {
            return;
        };
        let took = span.end.saturating_duration_since(span.start).as_nanos() as u64;
        group
            .counters
            .finalize_ns
            .fetch_add(took, Ordering::Relaxed);
        WorkerCounters::add(&counters.busy_ns, took);
        if let Some(trace) = &self.trace {
            let place = RecordPlace {
                group: group.id,
                task_set: entry.stage,
                entry: entry.seq,
            };
            // Named once per task set, here rather than per task.
            trace.finalization(span, place, entry.work.name());
        }
    }
}

/// Adds a task's CPU time, morsels and tuples to its group's accounting
/// (once per task; the morsel-size statistics come from the task's context).
fn account(group: &ResourceGroup, stage: usize, ran: Duration, ctx: &TaskContext<'_>) {
    let c = &group.counters;
    let ns = ran.as_nanos() as u64;
    c.cpu_ns.fetch_add(ns, Ordering::Relaxed);
    c.task_set_cpu_ns[stage].fetch_add(ns, Ordering::Relaxed);
    c.tasks.fetch_add(1, Ordering::Relaxed);
    if ctx.suspended > 0 {
        c.suspended.fetch_add(ctx.suspended, Ordering::Relaxed);
    }
    if ctx.morsels > 0 {
        c.morsels.fetch_add(ctx.morsels, Ordering::Relaxed);
        c.task_set_morsels[stage].fetch_add(ctx.morsels, Ordering::Relaxed);
        c.tuples.fetch_add(ctx.tuples, Ordering::Relaxed);
        let p = ctx.places;
        if !p.is_empty() {
            for (counter, n) in c.places.iter().zip([p.local, p.remote, p.stolen]) {
                if n > 0 {
                    counter.fetch_add(n, Ordering::Relaxed);
                }
            }
        }
        c.morsel_min.fetch_min(ctx.morsel_min, Ordering::Relaxed);
        c.morsel_max.fetch_max(ctx.morsel_max, Ordering::Relaxed);
        let mut used = ctx.used_buckets;
        while used != 0 {
            let b = used.trailing_zeros() as usize;
            used &= used - 1;
            c.morsel_buckets[b].fetch_add(u64::from(ctx.buckets[b]), Ordering::Relaxed);
        }
    }
}

//! Task traces: one record per task and per finalization step, for timeline
//! views (Perfetto / Chrome's trace format, seed 001 Figure 5).
//!
//! A [`Tracer`] is handed to the scheduler through
//! [`crate::SchedulerConfig::trace`]. Each worker registers one buffer with
//! it when it starts (the tracer's registry mutex, once per worker) and from
//! then on appends to its own buffer only: one uncontended mutex per task,
//! contended only while [`Tracer::take`] drains the buffers. No global lock
//! is taken per task. Times are nanoseconds since [`Tracer::new`], on the
//! monotonic clock the workers already read around every task.

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One task (or finalization step) as a worker ran it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRecord {
    /// Index of the worker that ran it.
    pub worker: usize,
    /// Start, in nanoseconds since [`Tracer::new`].
    pub start_ns: u64,
    /// End, in nanoseconds since [`Tracer::new`] (`>= start_ns`).
    pub end_ns: u64,
    /// The resource group ([`crate::ResourceGroupId`]).
    pub group: u64,
    /// Index of the task set within its group: the planned task set
    /// (stage) the task ran or followed up.
    pub task_set: usize,
    /// Position of the task set's entry among the group's installed task
    /// sets (0, 1, …): tells a stage's follow-ups apart.
    pub entry: u64,
    /// Morsels the task processed (0 for a finalization).
    pub morsels: u64,
    /// Source tuples the task processed (0 for a finalization).
    pub tuples: u64,
    /// A finalization step rather than a task.
    pub finalize: bool,
    /// CPU time the worker's thread used in the step (`None` where the
    /// platform cannot tell, `crate::thread_cpu`): far below
    /// `end_ns - start_ns` when the OS ran other threads meanwhile.
    pub cpu_ns: Option<u64>,
    /// Page faults the worker's thread took in the step (`None` as for
    /// `cpu_ns`): memory touched for the first time.
    pub faults: Option<u64>,
    /// A finalization's task set, by [`crate::TaskSetWork::name`] (the
    /// tasks of the same `group` and `entry` ran it); `None` for a task,
    /// so that a task's record allocates nothing.
    pub name: Option<String>,
}

/// Where a record belongs: its group, stage and entry
/// ([`TaskRecord::group`], [`TaskRecord::task_set`], [`TaskRecord::entry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordPlace {
    pub(crate) group: u64,
    pub(crate) task_set: usize,
    pub(crate) entry: u64,
}

/// When a step ran: wall start and end, and the CPU time its thread used.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    /// What the thread used in it (`crate::thread_cpu`).
    pub(crate) usage: Option<crate::thread_cpu::ThreadUsage>,
}

/// One worker's records.
pub(crate) type TraceBuffer = Arc<Mutex<Vec<TaskRecord>>>;

/// Collects [`TaskRecord`]s from the workers of one or more schedulers.
#[derive(Debug)]
pub struct Tracer {
    origin: Instant,
    /// Every registered worker buffer (locked to register and to take).
    buffers: Mutex<Vec<TraceBuffer>>,
}

impl Tracer {
    pub fn new() -> Arc<Tracer> {
        Arc::new(Tracer {
            origin: Instant::now(),
            buffers: Mutex::new(Vec::new()),
        })
    }

    /// All records so far, sorted by `start_ns` (ties: worker), and clears
    /// them.
    pub fn take(&self) -> Vec<TaskRecord> {
        let buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = Vec::new();
        for b in buffers.iter() {
            all.append(&mut b.lock().unwrap_or_else(|e| e.into_inner()));
        }
        all.sort_by_key(|r| (r.start_ns, r.worker));
        all
    }

    /// A new buffer for one worker.
    pub(crate) fn register(&self) -> TraceBuffer {
        let buffer = TraceBuffer::default();
        self.buffers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(buffer.clone());
        buffer
    }

    /// Nanoseconds from the tracer's creation to `at` (0 before it).
    pub(crate) fn since_origin(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_nanos() as u64
    }
}

/// A worker's handle on the tracer: its own buffer.
#[derive(Debug)]
pub(crate) struct WorkerTrace {
    tracer: Arc<Tracer>,
    buffer: TraceBuffer,
    worker: usize,
}

impl WorkerTrace {
    pub(crate) fn new(tracer: &Arc<Tracer>, worker: usize) -> Self {
        WorkerTrace {
            tracer: tracer.clone(),
            buffer: tracer.register(),
            worker,
        }
    }

    /// Appends the record of a task that ran from `start` to `end`.
    pub(crate) fn task(&self, span: Span, place: RecordPlace, morsels: u64, tuples: u64) {
        self.push(span, place, (morsels, tuples), None);
    }

    /// Appends the record of the finalization of task set `name`.
    pub(crate) fn finalization(&self, span: Span, place: RecordPlace, name: String) {
        self.push(span, place, (0, 0), Some(name));
    }

    fn push(
        &self,
        span: Span,
        place: RecordPlace,
        (morsels, tuples): (u64, u64),
        name: Option<String>,
    ) {
        let start_ns = self.tracer.since_origin(span.start);
        let record = TaskRecord {
            worker: self.worker,
            start_ns,
            end_ns: self.tracer.since_origin(span.end).max(start_ns),
            cpu_ns: span.usage.map(|u| u.cpu.as_nanos() as u64),
            faults: span.usage.map(|u| u.faults),
            group: place.group,
            task_set: place.task_set,
            entry: place.entry,
            morsels,
            tuples,
            finalize: name.is_some(),
            name,
        };
        self.buffer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(record);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn take_merges_the_workers_buffers_in_start_order_and_clears_them() {
        let tracer = Tracer::new();
        let (a, b) = (WorkerTrace::new(&tracer, 0), WorkerTrace::new(&tracer, 1));
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let place = |group, task_set, entry| RecordPlace {
            group,
            task_set,
            entry,
        };
        let span = |s, e| Span {
            start: t0 + ms(s),
            end: t0 + ms(e),
            usage: Some(crate::thread_cpu::ThreadUsage {
                cpu: Duration::from_micros(700),
                faults: 3,
            }),
        };
        a.task(span(5, 6), place(1, 0, 0), 3, 30);
        b.finalization(span(1, 2), place(2, 1, 3), "sort".into());
        a.task(span(3, 4), place(1, 0, 0), 1, 10);
        let all = tracer.take();
        assert_eq!(all.len(), 3);
        assert!(all.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
        assert_eq!((all[0].worker, all[0].group, all[0].finalize), (1, 2, true));
        assert_eq!((all[0].entry, all[0].name.as_deref()), (3, Some("sort")));
        assert_eq!((all[1].entry, all[1].name.as_deref()), (0, None));
        assert_eq!((all[1].cpu_ns, all[1].faults), (Some(700_000), Some(3)));
        assert_eq!(all[2].end_ns - all[2].start_ns, 1_000_000);
        assert!(tracer.take().is_empty());
    }
}

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
    /// Index of the task set within its group.
    pub task_set: usize,
    /// Morsels the task processed (0 for a finalization).
    pub morsels: u64,
    /// Source tuples the task processed (0 for a finalization).
    pub tuples: u64,
    /// A finalization step rather than a task.
    pub finalize: bool,
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

    /// Appends one record running from `start` to `end`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record(
        &self,
        start: Instant,
        end: Instant,
        group: u64,
        task_set: usize,
        morsels: u64,
        tuples: u64,
        finalize: bool,
    ) {
        let start_ns = self.tracer.since_origin(start);
        let record = TaskRecord {
            worker: self.worker,
            start_ns,
            end_ns: self.tracer.since_origin(end).max(start_ns),
            group,
            task_set,
            morsels,
            tuples,
            finalize,
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
        a.record(t0 + ms(5), t0 + ms(6), 1, 0, 3, 30, false);
        b.record(t0 + ms(1), t0 + ms(2), 2, 1, 0, 0, true);
        a.record(t0 + ms(3), t0 + ms(4), 1, 0, 1, 10, false);
        let all = tracer.take();
        assert_eq!(all.len(), 3);
        assert!(all.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
        assert_eq!((all[0].worker, all[0].group, all[0].finalize), (1, 2, true));
        assert_eq!(all[2].end_ns - all[2].start_ns, 1_000_000);
        assert!(tracer.take().is_empty());
    }
}

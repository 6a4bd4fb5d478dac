//! Measuring the cost of a scheduling decision.
//!
//! [`measure_decision_overhead`] runs the real scheduler (real workers, slots,
//! masks, pins) with `active_groups` resource groups whose single task set
//! does no work: each task returns at once (until the measurement stops).
//! Every worker then spends its time on the decision path — account and
//! charge the returned task (updating its cached rank), unpin, read the idle
//! epoch, check the policy and cancel epochs, pull the update masks, take
//! the slot of smallest rank (the root of the worker's rank tree, see
//! `local.rs`), pin, read the slot, set up the task context.
//!
//! What is measured, per worker: the time from the moment `run_task`
//! returned to the moment the next `run_task` is called, with
//! `Instant::now()` (the clock reads themselves, about 20 ns each on Linux'
//! vDSO, are included). A gap is recorded only when nothing but a decision
//! happened in it: gaps that contain a sleep, a finalization, or a task that
//! ended its task set are dropped. Samples go to a per-worker buffer, outside
//! the measured interval.
//!
//! When measurement is off (every scheduler built by [`crate::Scheduler::new`]),
//! the worker loop carries an `Option<DecisionClock>` that is `None`: one
//! predictable branch per task, no clock reads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::morsel::MorselPolicy;
use crate::policy::{DecayParams, Policy};
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::task::{TaskContext, TaskError, TaskOutcome, TaskSetWork};

/// Distribution of the time one scheduling decision took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecisionOverhead {
    /// Median time between two tasks on a worker, in nanoseconds.
    pub median_ns: u64,
    /// 99th percentile, in nanoseconds.
    pub p99_ns: u64,
    /// Number of decisions measured.
    pub samples: usize,
}

/// Per-worker sample buffers of a measuring scheduler.
#[derive(Debug)]
pub(crate) struct DecisionLog {
    workers: Vec<Mutex<Vec<u64>>>,
    per_worker: usize,
}

impl DecisionLog {
    fn new(workers: usize, per_worker: usize) -> Self {
        DecisionLog {
            workers: (0..workers)
                .map(|_| Mutex::new(Vec::with_capacity(per_worker)))
                .collect(),
            per_worker,
        }
    }

    fn record(&self, worker: usize, ns: u64) {
        let mut v = self.workers[worker]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if v.len() < self.per_worker {
            v.push(ns);
        }
    }

    fn total(&self) -> usize {
        self.workers
            .iter()
            .map(|v| v.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    fn take(&self) -> Vec<u64> {
        let mut all = Vec::new();
        for v in &self.workers {
            all.append(&mut v.lock().unwrap_or_else(|e| e.into_inner()));
        }
        all
    }
}

/// A worker's stopwatch for decisions (only when measuring).
#[derive(Debug)]
pub(crate) struct DecisionClock {
    log: Arc<DecisionLog>,
    worker: usize,
    /// When the previous task returned, if only decision work happened since.
    last_end: Option<Instant>,
    /// The gap before the running task, recorded once it returns.
    pending: Option<u64>,
}

impl DecisionClock {
    pub(crate) fn new(log: Arc<DecisionLog>, worker: usize) -> Self {
        DecisionClock {
            log,
            worker,
            last_end: None,
            pending: None,
        }
    }

    /// Called right before `run_task`.
    pub(crate) fn task_starts(&mut self) {
        if let Some(end) = self.last_end.take() {
            self.pending = Some(end.elapsed().as_nanos() as u64);
        }
    }

    /// Called right after `run_task` returned; `clean`: the task neither
    /// ended its task set nor failed.
    pub(crate) fn task_ended(&mut self, clean: bool) {
        if let Some(ns) = self.pending.take() {
            self.log.record(self.worker, ns);
        }
        self.last_end = clean.then(Instant::now);
    }

    /// Something other than a decision happened (sleep, finalization).
    pub(crate) fn interrupted(&mut self) {
        self.last_end = None;
    }
}

/// A task set whose tasks return at once until `stop`.
struct Empty {
    stop: Arc<AtomicBool>,
}

impl TaskSetWork for Empty {
    fn name(&self) -> String {
        "empty".into()
    }
    fn run_task(&self, _ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        Ok(if self.stop.load(Ordering::Relaxed) {
            TaskOutcome::Exhausted
        } else {
            TaskOutcome::Yielded
        })
    }
}

/// Measures the scheduling-decision overhead of `workers` workers serving
/// `active_groups` groups (stride scheduling with decaying priorities; at
/// least `active_groups` slots), until `samples` decisions were recorded.
/// See the module docs for what one sample covers.
pub fn measure_decision_overhead(
    workers: usize,
    active_groups: usize,
    samples: usize,
) -> DecisionOverhead {
    let workers = workers.max(1);
    let samples = samples.max(1);
    let log = Arc::new(DecisionLog::new(workers, samples));
    let config = SchedulerConfig {
        workers,
        pin_workers: false,
        t_max: Duration::from_millis(2),
        morsels: MorselPolicy::Fixed(1),
        policy: Policy::Stride(DecayParams::default()),
        slots: active_groups.max(SchedulerConfig::default().slots),
        ..SchedulerConfig::default()
    };
    let scheduler = Scheduler::start(config, Some(log.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..active_groups.max(1))
        .map(|_| scheduler.submit(vec![Arc::new(Empty { stop: stop.clone() })]))
        .collect();
    while log.total() < samples {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.wait();
    }
    drop(scheduler);
    let mut all = log.take();
    all.sort_unstable();
    let at = |q: f64| all[((all.len() - 1) as f64 * q).round() as usize];
    DecisionOverhead {
        median_ns: at(0.5),
        p99_ns: at(0.99),
        samples: all.len(),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn measures_the_requested_number_of_decisions() {
        let o = measure_decision_overhead(2, 4, 2000);
        assert!(o.samples >= 2000, "{o:?}");
        assert!(o.median_ns > 0 && o.p99_ns >= o.median_ns, "{o:?}");
    }
}

//! Targeted wake-ups ([`stride_sched::idle`]): a task set that says it can
//! use one worker ([`TaskSetWork::parallelism_hint`]) is installed without
//! waking sleeping workers when a worker installs it (it runs it itself),
//! and nothing is lost either way.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use stride_sched::{
    FinalizeContext, FollowUps, MorselPolicy, Policy, Scheduler, SchedulerConfig, TaskContext,
    TaskError, TaskOutcome, TaskSetWork,
};

use common::Items;

/// `items` items, one per morsel; `hint` is its parallelism hint.
struct Hinted {
    hint: Option<usize>,
    items: Items,
    finalized: AtomicU32,
}

impl Hinted {
    fn new(items: usize, hint: Option<usize>) -> Arc<Self> {
        Arc::new(Hinted {
            hint,
            items: Items::new(items),
            finalized: AtomicU32::new(0),
        })
    }
}

impl TaskSetWork for Hinted {
    fn name(&self) -> String {
        format!("hinted {:?}", self.hint)
    }

    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        Ok(self.items.run_task(ctx, |_| {}))
    }

    fn finalize(&self, _cx: &FinalizeContext<'_>) -> Result<FollowUps, TaskError> {
        self.finalized.fetch_add(1, Ordering::SeqCst);
        Ok(FollowUps::new())
    }

    fn parallelism_hint(&self) -> Option<usize> {
        self.hint
    }
}

/// Groups of task sets hinted to one worker (first set from a submitter,
/// next sets installed by finalizers that wake no one), among unhinted
/// ones, with every worker asleep before each group: all complete (a lost
/// wakeup would hang a group; the deadline turns that into a failure), every
/// item once, every set finalized once.
#[test]
fn task_sets_for_one_worker_wake_no_one_and_lose_nothing() {
    let (done, finished) = mpsc::channel();
    let runner = std::thread::spawn(move || {
        let scheduler = Scheduler::new(SchedulerConfig {
            workers: 3,
            pin_workers: false,
            t_max: Duration::from_micros(50),
            morsels: MorselPolicy::Fixed(1),
            policy: Policy::Fifo,
            ..SchedulerConfig::default()
        });
        for round in 0..150 {
            if round % 10 == 0 {
                // Let every worker fall asleep.
                std::thread::sleep(Duration::from_millis(2));
            }
            let hints = [Some(1), Some(1), None, Some(1), Some(2)];
            let sets: Vec<Arc<Hinted>> = hints
                .iter()
                .enumerate()
                .map(|(i, &hint)| Hinted::new(1 + (round + i) % 7, hint))
                .collect();
            let work: Vec<Arc<dyn TaskSetWork>> = sets
                .iter()
                .map(|s| s.clone() as Arc<dyn TaskSetWork>)
                .collect();
            scheduler.run(work).expect("completes");
            for s in &sets {
                assert!(s.items.each_once());
                assert_eq!(s.finalized.load(Ordering::SeqCst), 1);
            }
        }
        assert_eq!(scheduler.active_groups(), 0);
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(Duration::from_secs(60))
        .expect("every group completes (no lost wakeup)");
    runner.join().unwrap();
}

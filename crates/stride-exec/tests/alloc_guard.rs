//! The allocation guard with its allocator installed (this test binary's
//! global allocator): every allocation is counted, and a query whose task
//! grows while the process is past its limit fails alone with 53200, at
//! its next task boundary, while a query beside it completes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use stride_exec::alloc_guard::{self, Accounted, AllocAccount, TrackingAllocator, GROWTH_MIN};
use stride_exec::{ErrorKind, ExecError};
use stride_sched::{
    GroupFacts, QueryError, Scheduler, SchedulerConfig, TaskContext, TaskError, TaskOutcome,
    TaskSetWork,
};

#[global_allocator]
static GLOBAL: TrackingAllocator = TrackingAllocator(std::alloc::System);

/// The limit is the process's: the tests that move it run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Puts the limit back when a test ends, also when it fails.
struct Limit;

impl Limit {
    fn set(bytes: usize) -> Limit {
        alloc_guard::set_limit(bytes);
        Limit
    }
}

impl Drop for Limit {
    fn drop(&mut self) {
        alloc_guard::set_limit(usize::MAX);
    }
}

fn allocated() -> usize {
    alloc_guard::allocated().expect("the tracking allocator is this binary's")
}

/// A task set of `items` morsels of one item; each item allocates `bytes`,
/// touches them and, unless `keep`, frees them before the morsel ends.
struct Allocating {
    items: usize,
    bytes: usize,
    keep: bool,
    cursor: AtomicUsize,
    done: AtomicUsize,
    kept: Mutex<Vec<Vec<u8>>>,
}

impl Allocating {
    fn new(items: usize, bytes: usize, keep: bool) -> Arc<Self> {
        Arc::new(Allocating {
            items,
            bytes,
            keep,
            cursor: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            kept: Mutex::new(Vec::new()),
        })
    }
}

impl TaskSetWork for Allocating {
    fn name(&self) -> String {
        format!("{} items of {} bytes", self.items, self.bytes)
    }

    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        loop {
            let remaining = self
                .items
                .saturating_sub(self.cursor.load(Ordering::Relaxed));
            let Some(_) = ctx.next_morsel(Some(remaining.min(1))) else {
                return Ok(TaskOutcome::Yielded);
            };
            if self.cursor.fetch_add(1, Ordering::Relaxed) >= self.items {
                return Ok(TaskOutcome::Exhausted);
            }
            let mut block = vec![0u8; self.bytes];
            // Touch every page, so the allocation is real.
            for i in (0..block.len()).step_by(4096) {
                block[i] = 1;
            }
            if self.keep {
                self.kept.lock().unwrap().push(block);
            }
            self.done.fetch_add(1, Ordering::Relaxed);
            ctx.morsel_done(1);
        }
    }
}

fn scheduler() -> Scheduler {
    Scheduler::new(SchedulerConfig {
        workers: 2,
        pin_workers: false,
        ..Default::default()
    })
}

fn exec_error(e: &QueryError) -> &ExecError {
    match e {
        QueryError::Failed(task) => task.0.downcast_ref::<ExecError>().expect("an ExecError"),
        other => panic!("expected a failed task, got {other:?}"),
    }
}

#[test]
fn every_allocation_is_counted_and_freed_memory_is_taken_off() {
    let _serial = serial();
    let before = allocated();
    let block = vec![1u8; 64 << 20];
    let during = allocated();
    drop(block);
    let after = allocated();
    // Within one flush step per thread of the truth (other threads of this
    // binary may allocate meanwhile, but not tens of megabytes).
    let slack = 8 << 20;
    assert!(
        during + slack >= before + (64 << 20),
        "64 MiB allocated: {before} -> {during}"
    );
    assert!(
        after <= during - (64 << 20) + slack,
        "64 MiB freed: {during} -> {after}"
    );
}

#[test]
fn a_query_that_grows_past_the_limit_fails_alone_with_53200() {
    let _serial = serial();
    let scheduler = scheduler();
    // Up to 64 blocks of 4 MiB kept by the query (256 MiB), against a limit
    // 64 MiB above what the process holds now.
    let _limit = Limit::set(allocated() + (64 << 20));
    let hog_account = AllocAccount::new();
    let hog = Allocating::new(64, 4 << 20, true);
    let hog_handle = scheduler.submit_with(
        vec![Accounted::wrap(hog.clone(), &hog_account)],
        GroupFacts::default(),
    );
    // A query beside it that allocates and frees 64 KiB per morsel never
    // grows by GROWTH_MIN, so it is not blamed.
    let small_account = AllocAccount::new();
    let small = Allocating::new(2_000, 64 << 10, false);
    let small_handle = scheduler.submit_with(
        vec![Accounted::wrap(small.clone(), &small_account)],
        GroupFacts::default(),
    );

    let err = hog_handle.wait().expect_err("the hog passes the limit");
    let exec = exec_error(&err);
    assert!(matches!(exec, ExecError::AllocationLimit { .. }), "{exec}");
    assert_eq!(exec.kind(), Some(ErrorKind::OutOfMemory));
    assert!(hog_account.tripped());
    // It stopped at a task boundary soon after passing the limit (16 blocks
    // away): each worker's running task ends, then the set fails.
    let blocks = hog.done.load(Ordering::Relaxed);
    assert!(blocks < 32, "the hog ran {blocks} of 64 blocks");
    const { assert!(GROWTH_MIN <= 64 << 20, "the hog must grow past GROWTH_MIN") };
    assert!(
        hog_account.net() >= 64 << 20,
        "its growth: {}",
        hog_account.net()
    );
    assert!(small_account.net() < GROWTH_MIN, "{}", small_account.net());

    small_handle.wait().expect("the small query completes");
    assert_eq!(small.done.load(Ordering::Relaxed), 2_000);
    assert!(!small_account.tripped());

    // The hog's memory goes back with it; the next query runs.
    drop(hog);
    let again = Allocating::new(8, 1 << 20, true);
    scheduler
        .submit_with(
            vec![Accounted::wrap(again.clone(), &AllocAccount::new())],
            GroupFacts::default(),
        )
        .wait()
        .expect("once the hog is gone, a query that stays under the limit runs");
    assert!(alloc_guard::trips() >= 1);
}

#[test]
fn without_a_limit_nothing_trips() {
    let _serial = serial();
    let scheduler = scheduler();
    let account = AllocAccount::new();
    let set = Allocating::new(32, 4 << 20, true);
    scheduler
        .submit_with(
            vec![Accounted::wrap(set.clone(), &account)],
            GroupFacts::default(),
        )
        .wait()
        .expect("no limit, no failure");
    assert!(!account.tripped());
    assert_eq!(set.done.load(Ordering::Relaxed), 32);
}

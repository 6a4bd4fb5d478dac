//! Concurrency tests of the scheduler: many resource groups submitted from
//! several threads at once; every task item must run exactly once, every task
//! set must be finalized exactly once and only after all its tasks returned,
//! and task sets of a group must run strictly in order — follow-ups that
//! finalizations emit included, ahead of the next planned task set.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stride_sched::{
    FinalizeContext, FollowUps, MorselPolicy, Policy, QueryError, Scheduler, SchedulerConfig,
    TaskContext, TaskError, TaskOutcome, TaskSetWork,
};

/// The tests here measure scheduling on real threads; they run one at a time
/// so that they do not compete for the cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Deterministic xorshift generator (the tests are seeded).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A task set of `items` work items, taken with an atomic cursor in morsels.
struct CountingSet {
    items: usize,
    cursor: AtomicUsize,
    runs: Vec<AtomicU32>,
    active_tasks: AtomicUsize,
    finalized: AtomicU32,
    /// The previous task set of the same group; must be finalized before this one runs.
    previous: Option<Arc<CountingSet>>,
    order_violation: AtomicBool,
    /// Follow-ups this set's finalization emits.
    children: Vec<Arc<CountingSet>>,
    /// Where the set writes its id when it is finalized (the group's order).
    log: Option<(usize, Arc<Mutex<Vec<usize>>>)>,
}

impl CountingSet {
    fn new(items: usize, previous: Option<Arc<CountingSet>>) -> Arc<Self> {
        Arc::new(CountingSet {
            items,
            cursor: AtomicUsize::new(0),
            runs: (0..items).map(|_| AtomicU32::new(0)).collect(),
            active_tasks: AtomicUsize::new(0),
            finalized: AtomicU32::new(0),
            previous,
            order_violation: AtomicBool::new(false),
            children: Vec::new(),
            log: None,
        })
    }

    /// A set that logs its finalization as `id` and then emits `children`.
    fn logged(
        items: usize,
        id: usize,
        log: &Arc<Mutex<Vec<usize>>>,
        children: Vec<Arc<CountingSet>>,
    ) -> Arc<Self> {
        let mut set = Arc::into_inner(CountingSet::new(items, None)).unwrap();
        set.children = children;
        set.log = Some((id, log.clone()));
        Arc::new(set)
    }
}

impl TaskSetWork for CountingSet {
    fn name(&self) -> String {
        format!("counting set of {}", self.items)
    }

    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        if let Some(prev) = &self.previous {
            if prev.finalized.load(Ordering::SeqCst) != 1 {
                self.order_violation.store(true, Ordering::SeqCst);
            }
        }
        self.active_tasks.fetch_add(1, Ordering::SeqCst);
        let outcome = loop {
            let remaining = self
                .items
                .saturating_sub(self.cursor.load(Ordering::Relaxed));
            let Some(n) = ctx.next_morsel(Some(remaining)) else {
                break TaskOutcome::Yielded;
            };
            let start = self.cursor.fetch_add(n, Ordering::Relaxed);
            if start >= self.items {
                break TaskOutcome::Exhausted;
            }
            let end = (start + n).min(self.items);
            for i in start..end {
                self.runs[i].fetch_add(1, Ordering::Relaxed);
            }
            ctx.morsel_done(end - start);
        };
        self.active_tasks.fetch_sub(1, Ordering::SeqCst);
        Ok(outcome)
    }

    fn finalize(&self, _cx: &FinalizeContext<'_>) -> Result<FollowUps, TaskError> {
        assert_eq!(
            self.active_tasks.load(Ordering::SeqCst),
            0,
            "finalized while a task runs"
        );
        self.finalized.fetch_add(1, Ordering::SeqCst);
        if let Some((id, log)) = &self.log {
            log.lock().unwrap().push(*id);
        }
        Ok(self
            .children
            .iter()
            .map(|c| c.clone() as Arc<dyn TaskSetWork>)
            .collect())
    }
}

fn config(workers: usize, morsel_rows: usize) -> SchedulerConfig {
    SchedulerConfig {
        workers,
        pin_workers: false,
        t_max: Duration::from_micros(50),
        morsels: MorselPolicy::Fixed(morsel_rows),
        policy: Policy::Fifo,
        slots: 128,
        ..SchedulerConfig::default()
    }
}

#[test]
fn thousands_of_groups_every_task_once_every_set_finalized_once() {
    let _serial = serial();
    many_groups_from_four_submitters(config(4, 3));
}

/// Four slots for 2000 groups: most groups pass through the wait queue, and
/// slots are reused hundreds of times each.
#[test]
fn more_groups_than_slots_all_pass_through_the_wait_queue() {
    let _serial = serial();
    many_groups_from_four_submitters(SchedulerConfig {
        slots: 4,
        policy: Policy::Fair,
        ..config(3, 2)
    });
    // One slot, one worker: strictly one group at a time.
    many_groups_from_four_submitters(SchedulerConfig {
        slots: 1,
        ..config(1, 5)
    });
}

/// Slot counts that are not a multiple of 64 (several mask words, a partial
/// last word) with more workers than cores.
#[test]
fn many_slots_over_several_mask_words() {
    let _serial = serial();
    many_groups_from_four_submitters(SchedulerConfig {
        slots: 130,
        policy: Policy::parse("stride").unwrap(),
        ..config(5, 2)
    });
}

/// Random trees of follow-ups: every planned task set's finalization emits
/// 0–3 follow-ups, which emit their own, up to depth 3. Each group's sets
/// must be finalized in depth-first order (a follow-up runs after its
/// emitter, before its emitter's later follow-ups and before the next
/// planned set), every item run once, every set finalized once.
#[test]
fn follow_ups_run_depth_first_before_the_next_planned_task_set() {
    let _serial = serial();
    for config in [
        config(4, 3),
        SchedulerConfig {
            slots: 3,
            policy: Policy::parse("stride").unwrap(),
            ..config(2, 1)
        },
    ] {
        let scheduler = Scheduler::new(config);
        let mut rng = Rng(0x5EED_F011);
        let mut groups = Vec::new();
        for _ in 0..300 {
            let log: Arc<Mutex<Vec<usize>>> = Arc::default();
            let mut expected = Vec::new();
            let mut all = Vec::new();
            let planned: Vec<Arc<dyn TaskSetWork>> = (0..1 + rng.below(3))
                .map(|_| tree(&mut rng, 0, &log, &mut expected, &mut all) as Arc<dyn TaskSetWork>)
                .collect();
            let handle = scheduler.submit(planned);
            groups.push((handle, log, expected, all));
        }
        let mut follow_ups = 0;
        for (handle, log, expected, all) in groups {
            let stats = handle.wait().expect("query failed");
            follow_ups += stats.follow_ups;
            assert_eq!(stats.follow_ups as usize, expected.len() - stats.task_sets);
            assert_eq!(*log.lock().unwrap(), expected, "depth-first order");
            for set in &all {
                assert_eq!(set.finalized.load(Ordering::SeqCst), 1);
                assert!(set.runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
            }
        }
        assert!(
            follow_ups > 300,
            "the trees emitted follow-ups: {follow_ups}"
        );
    }
}

/// A random tree of sets under a planned task set; `expected` receives the
/// ids in the order their finalizations must come (pre-order).
fn tree(
    rng: &mut Rng,
    depth: usize,
    log: &Arc<Mutex<Vec<usize>>>,
    expected: &mut Vec<usize>,
    all: &mut Vec<Arc<CountingSet>>,
) -> Arc<CountingSet> {
    let id = expected.len();
    expected.push(id);
    let children = if depth < 3 {
        (0..rng.below(4))
            .map(|_| tree(rng, depth + 1, log, expected, all))
            .collect()
    } else {
        Vec::new()
    };
    let set = CountingSet::logged(rng.below(30) as usize, id, log, children);
    all.push(set.clone());
    set
}

fn many_groups_from_four_submitters(config: SchedulerConfig) {
    let scheduler = Arc::new(Scheduler::new(config));
    let all_sets: Arc<Mutex<Vec<Arc<CountingSet>>>> = Arc::default();
    let submitters: Vec<_> = (0..4u64)
        .map(|t| {
            let scheduler = scheduler.clone();
            let all_sets = all_sets.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9 + t);
                let mut handles = Vec::new();
                for _ in 0..500 {
                    let mut sets: Vec<Arc<CountingSet>> = Vec::new();
                    for _ in 0..1 + rng.below(4) {
                        let items = rng.below(40) as usize; // includes empty sets
                        sets.push(CountingSet::new(items, sets.last().cloned()));
                    }
                    all_sets.lock().unwrap().extend(sets.iter().cloned());
                    let work: Vec<Arc<dyn TaskSetWork>> = sets
                        .into_iter()
                        .map(|s| s as Arc<dyn TaskSetWork>)
                        .collect();
                    handles.push(scheduler.submit(work));
                }
                for h in handles {
                    h.wait().expect("query failed");
                }
            })
        })
        .collect();
    for s in submitters {
        s.join().unwrap();
    }
    let sets = all_sets.lock().unwrap();
    assert!(sets.len() >= 2000);
    let mut items = 0;
    for set in sets.iter() {
        assert_eq!(
            set.finalized.load(Ordering::SeqCst),
            1,
            "finalized exactly once"
        );
        assert!(
            !set.order_violation.load(Ordering::SeqCst),
            "ran before its predecessor finished"
        );
        for r in &set.runs {
            assert_eq!(r.load(Ordering::Relaxed), 1, "every item runs exactly once");
            items += 1;
        }
    }
    assert!(items > 10_000);
    assert_eq!(scheduler.active_groups(), 0);
}

struct Failing {
    panic: bool,
}

impl TaskSetWork for Failing {
    fn name(&self) -> String {
        "failing".into()
    }
    fn run_task(&self, _ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        if self.panic {
            panic!("operator bug");
        }
        Err(TaskError::new(std::io::Error::other("division by zero")))
    }
}

#[test]
fn a_failing_or_panicking_query_fails_alone() {
    let _serial = serial();
    let scheduler = Scheduler::new(config(2, 4));
    let good = CountingSet::new(1000, None);
    let after = CountingSet::new(10, None);
    let h_panic = scheduler.submit(vec![Arc::new(Failing { panic: true }), after.clone()]);
    let h_err = scheduler.submit(vec![Arc::new(Failing { panic: false })]);
    let h_good = scheduler.submit(vec![good.clone()]);
    match h_panic.wait() {
        Err(QueryError::Panicked(msg)) => assert!(msg.contains("operator bug")),
        other => panic!("expected a contained panic, got {other:?}"),
    }
    match h_err.wait() {
        Err(QueryError::Failed(e)) => assert!(e.to_string().contains("division by zero")),
        other => panic!("expected a failure, got {other:?}"),
    }
    let stats = h_good.wait().expect("the good query succeeds");
    assert_eq!(stats.tuples, 1000);
    assert!(good.runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
    // The task set after the panicking one never ran.
    assert_eq!(after.finalized.load(Ordering::SeqCst), 0);
    assert!(after.runs.iter().all(|r| r.load(Ordering::Relaxed) == 0));
}

/// A task set that never runs dry until cancelled.
struct Endless {
    tasks: AtomicUsize,
}

impl TaskSetWork for Endless {
    fn name(&self) -> String {
        "endless".into()
    }
    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        self.tasks.fetch_add(1, Ordering::Relaxed);
        while ctx.next_morsel(None).is_some() {
            ctx.morsel_done(1);
        }
        Ok(TaskOutcome::Yielded)
    }
}

#[test]
fn cancel_stops_a_query_and_frees_the_workers() {
    let _serial = serial();
    let scheduler = Scheduler::new(config(2, 1));
    let endless = Arc::new(Endless {
        tasks: AtomicUsize::new(0),
    });
    let handle = scheduler.submit(vec![endless.clone()]);
    while endless.tasks.load(Ordering::Relaxed) < 10 {
        std::thread::yield_now();
    }
    handle.cancel();
    assert!(matches!(handle.wait(), Err(QueryError::Cancelled)));
    // Workers are free again: a new query completes.
    let next = CountingSet::new(100, None);
    scheduler
        .run(vec![next.clone()])
        .expect("runs after cancellation");
    assert_eq!(next.finalized.load(Ordering::SeqCst), 1);
    assert_eq!(scheduler.active_groups(), 0);
}

/// Keeps a worker busy until opened, so that groups submitted meanwhile are
/// all queued when scheduling starts.
struct Gate(Arc<AtomicBool>);

impl TaskSetWork for Gate {
    fn name(&self) -> String {
        "gate".into()
    }
    fn run_task(&self, _ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        while !self.0.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        Ok(TaskOutcome::Exhausted)
    }
}

#[test]
fn fifo_serves_groups_in_arrival_order_on_one_worker() {
    let _serial = serial();
    let scheduler = Scheduler::new(config(1, 1));
    let log = Arc::new(Mutex::new(Vec::new()));
    // A blocker keeps the only worker busy until all groups are submitted.
    let gate = Arc::new(AtomicBool::new(false));
    let g = scheduler.submit(vec![Arc::new(Gate(gate.clone()))]);
    let handles: Vec<_> = (0..3)
        .map(|group| scheduler.submit(vec![Logged::task_set(group, 5, false, &log)]))
        .collect();
    gate.store(true, Ordering::Release);
    g.wait().unwrap();
    for h in handles {
        h.wait().unwrap();
    }
    assert_eq!(
        *log.lock().unwrap(),
        vec![0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2]
    );
}

/// A task set of `tasks` tasks, each logging its group when it starts and,
/// with `spin`, busy for a whole `t_max`.
struct Logged {
    group: usize,
    tasks: usize,
    spin: bool,
    taken: AtomicUsize,
    log: Arc<Mutex<Vec<usize>>>,
}

impl Logged {
    fn task_set(
        group: usize,
        tasks: usize,
        spin: bool,
        log: &Arc<Mutex<Vec<usize>>>,
    ) -> Arc<dyn TaskSetWork> {
        Arc::new(Logged {
            group,
            tasks,
            spin,
            taken: AtomicUsize::new(0),
            log: log.clone(),
        })
    }
}

impl TaskSetWork for Logged {
    fn name(&self) -> String {
        format!("logged {}", self.group)
    }
    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        if self.taken.fetch_add(1, Ordering::Relaxed) >= self.tasks {
            return Ok(TaskOutcome::Exhausted);
        }
        self.log.lock().unwrap().push(self.group);
        while self.spin && ctx.next_morsel(None).is_some() {
            ctx.morsel_done(1);
        }
        Ok(TaskOutcome::Yielded)
    }
}

/// A long query runs alone for 20 quanta, then a short one (10 quanta)
/// arrives; returns how many tasks of the long query ran while the short one
/// was active (from its arrival to its last task).
fn long_tasks_while_short_runs(policy: Policy) -> usize {
    let scheduler = Scheduler::new(SchedulerConfig {
        workers: 1,
        pin_workers: false,
        t_max: Duration::from_micros(300),
        morsels: MorselPolicy::Fixed(1),
        policy,
        slots: 128,
        // The policies' task-by-task order: a slice (tested in decision.rs
        // and tests/differential.rs) would let the short query's 3 ms
        // run in one turn under every sharing policy.
        slice: None,
        ..SchedulerConfig::default()
    });
    let log = Arc::new(Mutex::new(Vec::new()));
    let long = scheduler.submit(vec![Logged::task_set(0, 200, true, &log)]);
    while log.lock().unwrap().len() < 20 {
        std::thread::yield_now();
    }
    let arrival = log.lock().unwrap().len();
    let short = scheduler.submit(vec![Logged::task_set(1, 10, true, &log)]);
    short.wait().unwrap();
    long.wait().unwrap();
    let log = log.lock().unwrap();
    let last_short = log.iter().rposition(|&g| g == 1).unwrap();
    log[arrival..last_short].iter().filter(|&&g| g == 0).count()
}

#[test]
fn policies_order_a_new_short_query_against_a_long_running_one() {
    let _serial = serial();
    // Charges are measured CPU-task durations on a shared machine; a run
    // disturbed by other processes is repeated (up to three attempts).
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let fifo = long_tasks_while_short_runs(Policy::Fifo);
        let fair = long_tasks_while_short_runs(Policy::Fair);
        let stride = long_tasks_while_short_runs(Policy::parse("stride").unwrap());
        eprintln!(
            "long-query tasks while the short one ran: fifo {fifo}, fair {fair}, stride {stride}"
        );
        // FIFO: the short query waits for the long one to finish (180 tasks).
        // Fair: equal shares, the two alternate (about 10).
        // Decaying priorities: the long query's priority has decayed (20
        // quanta, onset 5: 10^4 · 0.9^15 ≈ 2000), so the newcomer gets most
        // of the worker (about 2).
        if fifo >= 150 && (3..=17).contains(&fair) && stride <= 5 && stride < fair {
            return;
        }
        outcomes.push((fifo, fair, stride));
    }
    panic!("policy ordering not observed in three attempts (fifo, fair, stride): {outcomes:?}");
}

#[test]
fn stride_finishes_the_shorter_of_two_simultaneous_queries_first() {
    let _serial = serial();
    for policy in [Policy::Fair, Policy::parse("stride").unwrap()] {
        let scheduler = Scheduler::new(SchedulerConfig {
            workers: 1,
            pin_workers: false,
            t_max: Duration::from_micros(300),
            morsels: MorselPolicy::Fixed(1),
            policy: policy.clone(),
            slots: 128,
            // The policies' own order, task by task (without slices).
            slice: None,
            ..SchedulerConfig::default()
        });
        let log = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(AtomicBool::new(false));
        let g = scheduler.submit(vec![Arc::new(Gate(gate.clone()))]);
        // The long query arrives first.
        let long = scheduler.submit(vec![Logged::task_set(0, 40, true, &log)]);
        let short = scheduler.submit(vec![Logged::task_set(1, 8, true, &log)]);
        gate.store(true, Ordering::Release);
        g.wait().unwrap();
        short.wait().unwrap();
        long.wait().unwrap();
        let log = log.lock().unwrap();
        let last_short = log.iter().rposition(|&g| g == 1).unwrap();
        let last_long = log.iter().rposition(|&g| g == 0).unwrap();
        assert!(last_short < last_long, "{}: {log:?}", policy.name());
    }
}

/// A waiting group that is cancelled completes as cancelled once it gets a
/// slot, without running; groups behind it are admitted as usual.
#[test]
fn cancelled_groups_in_the_wait_queue_complete_and_free_their_slot() {
    let _serial = serial();
    let scheduler = Scheduler::new(SchedulerConfig {
        slots: 1,
        ..config(2, 1)
    });
    let gate = Arc::new(AtomicBool::new(false));
    let g = scheduler.submit(vec![Arc::new(Gate(gate.clone()))]);
    let cancelled = CountingSet::new(10, None);
    let waiting = scheduler.submit(vec![cancelled.clone()]);
    let after = CountingSet::new(10, None);
    let h_after = scheduler.submit(vec![after.clone()]);
    assert_eq!(scheduler.active_groups(), 3);
    waiting.cancel();
    gate.store(true, Ordering::Release);
    g.wait().unwrap();
    assert!(matches!(waiting.wait(), Err(QueryError::Cancelled)));
    h_after.wait().unwrap();
    assert!(cancelled
        .runs
        .iter()
        .all(|r| r.load(Ordering::Relaxed) == 0));
    assert_eq!(cancelled.finalized.load(Ordering::SeqCst), 0);
    assert_eq!(after.finalized.load(Ordering::SeqCst), 1);
    assert_eq!(scheduler.active_groups(), 0);
}

/// Dropping the scheduler completes running and waiting groups with
/// `Shutdown`, and later submissions too.
#[test]
fn shutdown_completes_bound_and_waiting_groups() {
    let _serial = serial();
    let scheduler = Scheduler::new(SchedulerConfig {
        slots: 2,
        ..config(2, 1)
    });
    let handles: Vec<_> = (0..5)
        .map(|_| {
            scheduler.submit(vec![Arc::new(Endless {
                tasks: AtomicUsize::new(0),
            })])
        })
        .collect();
    assert_eq!(scheduler.active_groups(), 5);
    drop(scheduler);
    for h in handles {
        assert!(matches!(h.wait(), Err(QueryError::Shutdown)));
    }
}

/// Workers that went to sleep (nothing to run) wake for every new group and
/// for every next task set of a group.
#[test]
fn idle_workers_wake_for_new_groups_and_next_task_sets() {
    let _serial = serial();
    let scheduler = Scheduler::new(config(3, 1));
    for round in 0..200 {
        if round % 50 == 0 {
            // Let every worker fall asleep.
            std::thread::sleep(Duration::from_millis(5));
        }
        let first = CountingSet::new(round % 3, None);
        let second = CountingSet::new(2, Some(first.clone()));
        scheduler
            .run(vec![first.clone(), second.clone()])
            .expect("completes");
        assert_eq!(second.finalized.load(Ordering::SeqCst), 1);
        assert!(!second.order_violation.load(Ordering::SeqCst));
    }
    assert_eq!(scheduler.active_groups(), 0);
}

/// `set_policy` reaches every worker: after switching from FIFO to fair, a
/// second group is served before the first (endless) one finishes.
#[test]
fn set_policy_reaches_the_workers() {
    let _serial = serial();
    let scheduler = Scheduler::new(SchedulerConfig {
        t_max: Duration::from_micros(200),
        ..config(1, 1)
    });
    let endless = Arc::new(Endless {
        tasks: AtomicUsize::new(0),
    });
    let first = scheduler.submit(vec![endless.clone()]);
    let second = CountingSet::new(5, None);
    let h_second = scheduler.submit(vec![second.clone()]);
    std::thread::sleep(Duration::from_millis(20));
    // FIFO: the endless first group holds the only worker.
    assert_eq!(second.finalized.load(Ordering::SeqCst), 0);
    scheduler.set_policy(Policy::Fair);
    assert_eq!(scheduler.policy(), Policy::Fair);
    h_second.wait().expect("served under the fair policy");
    first.cancel();
    assert!(matches!(first.wait(), Err(QueryError::Cancelled)));
}

/// Morsels of `morsel` busy time each, counted, until `limit` morsels ran.
struct Spinning {
    morsel: Duration,
    limit: usize,
    done: Arc<AtomicUsize>,
}

impl TaskSetWork for Spinning {
    fn name(&self) -> String {
        "spinning".into()
    }
    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        loop {
            if self.done.load(Ordering::Relaxed) >= self.limit {
                return Ok(TaskOutcome::Exhausted);
            }
            if ctx.next_morsel(None).is_none() {
                return Ok(TaskOutcome::Yielded);
            }
            let start = std::time::Instant::now();
            while start.elapsed() < self.morsel {
                std::hint::spin_loop();
            }
            self.done.fetch_add(1, Ordering::Relaxed);
            ctx.morsel_done(1);
        }
    }
}

/// One worker and a `t_max` (60 s) longer than the long query: its first
/// task would take all 200 of its morsels. A short query arrives after 3;
/// returns how many morsels of the long query had run when the short one
/// completed, and the worker's count of preempted tasks.
fn long_morsels_before_short_completes(preemption: bool) -> (usize, u64) {
    let scheduler = Scheduler::new(SchedulerConfig {
        workers: 1,
        pin_workers: false,
        t_max: Duration::from_secs(60),
        morsels: MorselPolicy::Fixed(1),
        // Least attained service: the newcomer (no CPU yet) ranks first.
        policy: Policy::Srpt,
        preemption,
        ..SchedulerConfig::default()
    });
    let spinning = |limit, done: &Arc<AtomicUsize>| -> Arc<dyn TaskSetWork> {
        Arc::new(Spinning {
            morsel: Duration::from_millis(1),
            limit,
            done: done.clone(),
        })
    };
    let (long_done, short_done) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let long = scheduler.submit(vec![spinning(200, &long_done)]);
    while long_done.load(Ordering::Relaxed) < 3 {
        std::thread::yield_now();
    }
    let short = scheduler.submit(vec![spinning(5, &short_done)]);
    short.wait().unwrap();
    let seen = long_done.load(Ordering::Relaxed);
    long.wait().unwrap();
    assert_eq!(long_done.load(Ordering::Relaxed), 200);
    assert_eq!(short_done.load(Ordering::Relaxed), 5);
    (seen, scheduler.worker_stats()[0].preemptions)
}

#[test]
fn a_new_group_preempts_a_running_task_at_its_next_morsel() {
    let _serial = serial();
    // The arrival's change-mask bit ends the long task after its current
    // morsel (one or two more, whatever the machine's speed) ...
    let (seen, preemptions) = long_morsels_before_short_completes(true);
    assert!(seen < 50, "{seen} long morsels ran first");
    assert!(preemptions >= 1);
    // ... where without preemption points the short query waits for the
    // whole task: every morsel of the long query.
    assert_eq!(long_morsels_before_short_completes(false), (200, 0));
}

/// Spins 1 µs per tuple of each morsel it is handed, until `tuples` ran;
/// tuples are claimed from a cursor, so each runs once.
struct PerTuple {
    tuples: usize,
    cursor: AtomicUsize,
    done: Arc<AtomicUsize>,
}

impl TaskSetWork for PerTuple {
    fn name(&self) -> String {
        "per tuple".into()
    }
    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        loop {
            let left = self
                .tuples
                .saturating_sub(self.cursor.load(Ordering::Relaxed));
            let Some(n) = ctx.next_morsel(Some(left)) else {
                return Ok(TaskOutcome::Yielded);
            };
            let from = self.cursor.fetch_add(n, Ordering::Relaxed);
            if from >= self.tuples {
                return Ok(TaskOutcome::Exhausted);
            }
            let n = n.min(self.tuples - from);
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_micros(n as u64) {
                std::hint::spin_loop();
            }
            self.done.fetch_add(n, Ordering::Relaxed);
            ctx.morsel_done(n);
        }
    }
}

/// A short task set whose finalization takes `finish` (a hash-table build).
struct SlowFinish {
    inner: PerTuple,
    finish: Duration,
}

impl TaskSetWork for SlowFinish {
    fn name(&self) -> String {
        "slow finish".into()
    }
    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        self.inner.run_task(ctx)
    }
    fn finalize(&self, _cx: &FinalizeContext<'_>) -> Result<FollowUps, TaskError> {
        std::thread::sleep(self.finish);
        Ok(FollowUps::new())
    }
}

/// Two workers, FIFO: a short query of two task sets whose first one
/// finalizes for 30 ms, then a long query. Returns the workers' hand-over
/// tasks once both completed with all their work done exactly once.
fn handover_tasks(handover: Option<Duration>) -> u64 {
    let scheduler = Scheduler::new(SchedulerConfig {
        workers: 2,
        pin_workers: false,
        policy: Policy::Fifo,
        handover_morsel: handover,
        ..SchedulerConfig::default()
    });
    let done = || Arc::new(AtomicUsize::new(0));
    let (first, second, long_done) = (done(), done(), done());
    let short = scheduler.submit(vec![
        Arc::new(SlowFinish {
            inner: PerTuple {
                tuples: 2_000,
                cursor: AtomicUsize::new(0),
                done: first.clone(),
            },
            finish: Duration::from_millis(30),
        }),
        Arc::new(PerTuple {
            tuples: 2_000,
            cursor: AtomicUsize::new(0),
            done: second.clone(),
        }),
    ]);
    let long = scheduler.submit(vec![Arc::new(PerTuple {
        tuples: 100_000,
        cursor: AtomicUsize::new(0),
        done: long_done.clone(),
    })]);
    short.wait().unwrap();
    long.wait().unwrap();
    assert_eq!(first.load(Ordering::Relaxed), 2_000);
    assert_eq!(second.load(Ordering::Relaxed), 2_000);
    assert_eq!(long_done.load(Ordering::Relaxed), 100_000);
    scheduler
        .worker_stats()
        .iter()
        .map(|w| w.handover_tasks)
        .sum()
}

#[test]
fn a_worker_fills_a_better_groups_finalization_with_hand_over_tasks() {
    let _serial = serial();
    // While one worker finalizes the short query's first task set, the other
    // runs the long query's tasks as hand-over tasks (short morsels) ... A
    // hand-over needs the second worker to have seen the short query as its
    // best choice before the query's first task set ran dry; on a loaded
    // machine the OS may not run that worker in time, so one of a few runs
    // must show it — up to twenty, stopping at the first that does (the
    // deterministic case is in the simulator's tests).
    let runs: Vec<u64> = (0..20)
        .map(|_| handover_tasks(Some(Duration::from_micros(100))))
        .take_while(|&n| n == 0)
        .collect();
    assert!(runs.len() < 20, "no hand-over task in {} runs", runs.len());
    // ... and as ordinary tasks when hand-over morsels are off.
    assert_eq!(handover_tasks(None), 0);
}

//! What the scheduler reports about the work it ran: per-query accounting
//! (CPU and morsels per task set, morsel sizes, the priority over time),
//! per-worker statistics, the task trace, and self-tuning inside the running
//! scheduler.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stride_sched::{
    DecayParams, MorselPolicy, Policy, QueryStats, Scheduler, SchedulerConfig, TaskContext,
    TaskError, TaskOutcome, TaskSetWork, Tracer, TuningConfig,
};

/// The tests measure real threads; one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `items` work items, each spinning for `per_item`, taken in morsels with
/// an atomic cursor; counts its `run_task` calls and morsels.
struct Spin {
    items: usize,
    per_item: Duration,
    cursor: AtomicUsize,
    calls: AtomicU64,
    morsels: AtomicU64,
}

impl Spin {
    fn new(items: usize, per_item: Duration) -> Arc<Self> {
        Arc::new(Spin {
            items,
            per_item,
            cursor: AtomicUsize::new(0),
            calls: AtomicU64::new(0),
            morsels: AtomicU64::new(0),
        })
    }
}

impl TaskSetWork for Spin {
    fn name(&self) -> String {
        format!("spin {} × {:?}", self.items, self.per_item)
    }

    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        loop {
            let remaining = self
                .items
                .saturating_sub(self.cursor.load(Ordering::Relaxed));
            let Some(n) = ctx.next_morsel(Some(remaining)) else {
                return Ok(TaskOutcome::Yielded);
            };
            let start = self.cursor.fetch_add(n, Ordering::Relaxed);
            if start >= self.items {
                return Ok(TaskOutcome::Exhausted);
            }
            let take = n.min(self.items - start);
            let until = Instant::now() + self.per_item * take as u32;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            ctx.morsel_done(take);
            self.morsels.fetch_add(1, Ordering::Relaxed);
            if start + take >= self.items {
                return Ok(TaskOutcome::Exhausted);
            }
        }
    }
}

fn sets(sets: &[Arc<Spin>]) -> Vec<Arc<dyn TaskSetWork>> {
    sets.iter()
        .map(|s| s.clone() as Arc<dyn TaskSetWork>)
        .collect()
}

/// One query of three task sets of 1002 items (morsels of 4: 250 of 4
/// tuples and one of 2 per set), about `cpu` of work in all, alone on two
/// workers with `t_max` = 1 ms.
fn long_query(policy: Policy, cpu: Duration) -> QueryStats {
    let scheduler = Scheduler::new(SchedulerConfig {
        workers: 2,
        pin_workers: false,
        t_max: Duration::from_millis(1),
        morsels: MorselPolicy::Fixed(4),
        policy,
        ..SchedulerConfig::default()
    });
    let per_item = cpu / 3006;
    let spins: Vec<_> = (0..3).map(|_| Spin::new(1002, per_item)).collect();
    let stats = scheduler.run(sets(&spins)).expect("query runs");
    assert_eq!(
        stats.task_set_morsels,
        spins
            .iter()
            .map(|s| s.morsels.load(Ordering::Relaxed))
            .collect::<Vec<_>>()
    );
    stats
}

#[test]
fn per_task_set_accounting_and_morsel_sizes_add_up() {
    let _serial = serial();
    let stats = long_query(Policy::Fair, Duration::from_millis(15));
    assert_eq!(stats.task_set_cpu.len(), 3);
    assert_eq!(stats.task_set_cpu.iter().sum::<Duration>(), stats.cpu_time);
    assert!(stats.task_set_cpu.iter().all(|c| !c.is_zero()));
    assert_eq!(stats.task_set_morsels, vec![251; 3]);
    assert_eq!(stats.task_set_morsels.iter().sum::<u64>(), stats.morsels);
    assert_eq!(stats.morsel_tuples_min, 2);
    assert_eq!(stats.morsel_tuples_max, 4);
    assert_eq!(stats.morsel_size_histogram, vec![(2, 3), (4, 750)]);
    assert_eq!(stats.tuples, 3006);
}

#[test]
fn the_priority_trace_decays_under_stride_and_stays_flat_under_fair() {
    let _serial = serial();
    let cpu = Duration::from_millis(50);
    let decay = DecayParams {
        d_start: 4,
        lambda: 0.9,
        ..DecayParams::default()
    };
    let stride = long_query(Policy::Stride(decay.clone()), cpu);
    let trace = &stride.priority_trace;
    assert!(trace.len() >= 5, "{trace:?}");
    // The first charge is within the onset: p0; about 25 quanta per worker
    // later (0.9^21 ≈ 0.1) the priority has decayed well below it.
    assert_eq!(trace[0].1, decay.p0);
    let lowest = trace.iter().map(|s| s.1).fold(f64::INFINITY, f64::min);
    assert!(lowest < decay.p0 / 2.0, "{trace:?}");
    assert!(
        stride.final_priority < decay.p0 / 2.0,
        "{}",
        stride.final_priority
    );
    assert!(stride.final_priority >= decay.p_min);
    assert!(trace.iter().all(|s| s.0 <= stride.latency));
    assert_eq!(
        stride.task_set_cpu.iter().sum::<Duration>(),
        stride.cpu_time
    );

    let fair = long_query(Policy::Fair, cpu);
    assert!(fair.priority_trace.len() >= 5, "{:?}", fair.priority_trace);
    assert!(fair.priority_trace.iter().all(|s| s.1 == 1e4));
    assert_eq!(fair.final_priority, 1e4);
    assert_eq!(fair.task_set_cpu.iter().sum::<Duration>(), fair.cpu_time);
}

#[test]
fn every_task_is_traced_once_and_workers_count_their_work() {
    let _serial = serial();
    let tracer = Tracer::new();
    let scheduler = Scheduler::new(SchedulerConfig {
        workers: 2,
        pin_workers: false,
        t_max: Duration::from_micros(50),
        morsels: MorselPolicy::Fixed(3),
        policy: Policy::Fair,
        trace: Some(tracer.clone()),
        ..SchedulerConfig::default()
    });
    let mut queries = Vec::new();
    for i in 0..20 {
        let spins = vec![
            Spin::new(30 + i, Duration::from_micros(2)),
            Spin::new(10, Duration::ZERO),
        ];
        let handle = scheduler.submit(sets(&spins));
        queries.push((handle.id(), spins, handle));
    }
    let mut expected = HashMap::new();
    let mut total_calls = 0;
    for (id, spins, handle) in queries {
        let stats = handle.wait().expect("query runs");
        for (t, s) in spins.iter().enumerate() {
            let calls = s.calls.load(Ordering::Relaxed);
            total_calls += calls;
            expected.insert((id, t), (calls, s.morsels.load(Ordering::Relaxed)));
        }
        assert_eq!(
            stats.tasks,
            spins.iter().map(|s| s.calls.load(Ordering::Relaxed)).sum()
        );
    }
    let records = tracer.take();
    assert!(records.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
    let mut seen: HashMap<(u64, usize), (u64, u64, u64)> = HashMap::new();
    for r in &records {
        assert!(r.start_ns <= r.end_ns, "{r:?}");
        assert!(r.worker < 2);
        let e = seen.entry((r.group, r.task_set)).or_default();
        if r.finalize {
            assert_eq!((r.morsels, r.tuples), (0, 0));
            e.2 += 1;
        } else {
            e.0 += 1;
            e.1 += r.morsels;
        }
    }
    // Exactly the submitted groups and task sets: each task once, each
    // finalization once.
    assert_eq!(seen.len(), expected.len());
    for (key, (calls, morsels)) in &expected {
        assert_eq!(seen.get(key), Some(&(*calls, *morsels, 1)), "{key:?}");
    }
    assert!(tracer.take().is_empty());

    let stats = scheduler.worker_stats();
    assert_eq!(stats.len(), 2);
    assert_eq!(stats.iter().map(|w| w.tasks).sum::<u64>(), total_calls);
    assert_eq!(stats.iter().map(|w| w.finalizations).sum::<u64>(), 40);
    assert!(stats.iter().any(|w| !w.busy.is_zero()));
    // Nothing left to do: every worker goes to sleep.
    let deadline = Instant::now() + Duration::from_secs(5);
    while scheduler.worker_stats().iter().any(|w| w.idle_sleeps == 0) {
        assert!(Instant::now() < deadline, "{:?}", scheduler.worker_stats());
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_running_scheduler_tunes_its_decay_parameters() {
    let _serial = serial();
    let scheduler = Scheduler::new(SchedulerConfig {
        workers: 2,
        pin_workers: false,
        t_max: Duration::from_millis(1),
        morsels: MorselPolicy::Fixed(1),
        policy: Policy::Stride(DecayParams::default()),
        tuning: Some(TuningConfig {
            track: Duration::from_millis(200),
            refresh: Duration::from_millis(300),
        }),
        ..SchedulerConfig::default()
    });
    assert!(scheduler.tuning_reports().is_empty());
    // Two classes, a fixed schedule: a short query (2 ms of CPU) every
    // 5 ms and a long one (30 ms) every 50 ms, for 450 ms — about one of
    // the two cores busy.
    let began = Instant::now();
    let mut handles = Vec::new();
    for i in 0..90u32 {
        let at = began + Duration::from_millis(5) * i;
        while Instant::now() < at {
            std::thread::sleep(Duration::from_micros(200));
        }
        handles.push(scheduler.submit(sets(&[Spin::new(20, Duration::from_micros(100))])));
        if i % 10 == 0 {
            handles.push(scheduler.submit(sets(&[Spin::new(300, Duration::from_micros(100))])));
        }
    }
    for h in handles {
        h.wait().expect("query runs");
    }
    let policy = scheduler.policy();
    let reports = scheduler.tuning_reports();
    assert!(!reports.is_empty(), "no tuning run");
    for r in &reports {
        eprintln!("{r:?}");
        assert!(r.cost_after <= r.cost_before, "{r:?}");
        assert!(r.cost_before >= 1.0, "{r:?}");
        assert!(!r.elapsed.is_zero(), "{r:?}");
        assert!(r.evaluations > 0 && r.groups >= 2, "{r:?}");
        assert!(
            r.share_of_processing > 0.0 && r.share_of_processing < 1.0,
            "{r:?}"
        );
        assert!(r.at >= Duration::from_millis(200), "{r:?}");
        assert_eq!(r.params_after.p0, DecayParams::default().p0);
    }
    // The first run started from the configured parameters; the policy in
    // force is the one a run pushed (reports are kept with the push).
    assert_eq!(reports[0].params_before, DecayParams::default());
    assert!(
        reports
            .iter()
            .any(|r| policy == Policy::Stride(r.params_after.clone())),
        "{policy:?}"
    );
}

#[test]
fn tuning_leaves_other_policies_alone() {
    let _serial = serial();
    let scheduler = Scheduler::new(SchedulerConfig {
        workers: 1,
        pin_workers: false,
        t_max: Duration::from_millis(1),
        morsels: MorselPolicy::Fixed(1),
        policy: Policy::Fair,
        tuning: Some(TuningConfig {
            track: Duration::from_millis(20),
            refresh: Duration::from_millis(30),
        }),
        ..SchedulerConfig::default()
    });
    for _ in 0..4 {
        scheduler
            .run(sets(&[Spin::new(50, Duration::from_micros(500))]))
            .expect("query runs");
    }
    assert!(scheduler.tuning_reports().is_empty());
    assert_eq!(scheduler.policy(), Policy::Fair);
}

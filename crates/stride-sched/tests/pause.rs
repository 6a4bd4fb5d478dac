//! Task sets paused until their consumer catches up ([`stride_sched::pause`]):
//! a producer never runs more than its bound ahead of a slow consumer, no
//! item is lost or produced twice, other queries keep running while one is
//! paused, and cancellation reaches a paused task set.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use stride_sched::{
    MorselPolicy, Policy, QueryError, Resumer, Scheduler, SchedulerConfig, TaskContext, TaskError,
    TaskOutcome, TaskSetWork,
};

/// The queue between a producing task set and a consumer thread, with the
/// pause protocol a streamed result follows: a task pauses once the queue
/// holds `high` items, the consumer resumes it once it drained to `low`.
struct Channel {
    state: Mutex<ChannelState>,
    changed: Condvar,
    high: usize,
    low: usize,
}

#[derive(Default)]
struct ChannelState {
    queue: VecDeque<usize>,
    /// The resumer of a pause not yet resumed.
    paused: Option<Resumer>,
    finished: bool,
    /// The most items the queue ever held.
    peak: usize,
    resumes: u32,
}

impl Channel {
    fn new(high: usize, low: usize) -> Arc<Self> {
        Arc::new(Channel {
            state: Mutex::default(),
            changed: Condvar::new(),
            high,
            low,
        })
    }

    /// A producer's task, between two items: whether it pauses (then the
    /// channel keeps the task's resumer).
    /// While another group waits for a slot it runs on instead
    /// ([`Resumer::slot_wanted`]), as a streamed result does.
    fn pause(&self, ctx: &TaskContext<'_>) -> bool {
        let mut state = self.state.lock().unwrap();
        if state.paused.is_none() && state.queue.len() < self.high {
            return false;
        }
        let Some(r) = state.paused.clone().or_else(|| ctx.resumer()) else {
            return false;
        };
        if r.slot_wanted() {
            state.paused = None;
            return false;
        }
        state.paused = Some(r);
        true
    }

    fn push(&self, item: usize) {
        let mut state = self.state.lock().unwrap();
        state.queue.push_back(item);
        state.peak = state.peak.max(state.queue.len());
        self.changed.notify_all();
    }

    /// The consumer: the next item, `None` once the producer finished and
    /// the queue is empty.
    fn pop(&self) -> Option<usize> {
        let mut state = self.state.lock().unwrap();
        loop {
            if let Some(item) = state.queue.pop_front() {
                let resume = if state.queue.len() <= self.low {
                    state.paused.take()
                } else {
                    None
                };
                if resume.is_some() {
                    state.resumes += 1;
                }
                drop(state);
                if let Some(r) = resume {
                    r.resume();
                }
                return Some(item);
            }
            if state.finished {
                return None;
            }
            // An empty queue while paused cannot happen (a task pauses only
            // at `high` items, and the consumer resumes at `low` < `high`).
            assert!(state.paused.is_none(), "paused with nothing to drain");
            state = self.changed.wait(state).unwrap();
        }
    }
}

/// Produces `items` items, one per morsel, into a channel.
struct Producer {
    next: AtomicUsize,
    items: usize,
    produced: Vec<AtomicU32>,
    channel: Arc<Channel>,
}

impl Producer {
    fn new(items: usize, channel: Arc<Channel>) -> Arc<Self> {
        Arc::new(Producer {
            next: AtomicUsize::new(0),
            items,
            produced: (0..items).map(|_| AtomicU32::new(0)).collect(),
            channel,
        })
    }
}

impl TaskSetWork for Producer {
    fn name(&self) -> String {
        "producer".into()
    }

    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        loop {
            if self.channel.pause(ctx) {
                return Ok(TaskOutcome::Paused);
            }
            if ctx.next_morsel(None).is_none() {
                return Ok(TaskOutcome::Yielded);
            }
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.items {
                return Ok(TaskOutcome::Exhausted);
            }
            self.produced[i].fetch_add(1, Ordering::Relaxed);
            self.channel.push(i);
            ctx.morsel_done(1);
        }
    }

    fn finalize(
        &self,
        _: &stride_sched::FinalizeContext<'_>,
    ) -> Result<stride_sched::FollowUps, TaskError> {
        self.channel.state.lock().unwrap().finished = true;
        self.channel.changed.notify_all();
        Ok(Vec::new())
    }
}

/// Counts its morsels; never pauses.
struct Spin {
    left: AtomicUsize,
}

impl TaskSetWork for Spin {
    fn name(&self) -> String {
        "spin".into()
    }

    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        while ctx.next_morsel(None).is_some() {
            if self
                .left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_err()
            {
                return Ok(TaskOutcome::Exhausted);
            }
            ctx.morsel_done(1);
        }
        Ok(TaskOutcome::Yielded)
    }
}

fn scheduler(workers: usize, policy: Policy) -> Scheduler {
    Scheduler::new(SchedulerConfig {
        workers,
        pin_workers: false,
        t_max: Duration::from_micros(200),
        morsels: MorselPolicy::Fixed(1),
        policy,
        ..SchedulerConfig::default()
    })
}

/// A slow consumer: every item arrives exactly once and in full, the queue
/// never holds more than its bound plus one item per worker (a task pauses
/// between items), and the set paused and was resumed along the way.
#[test]
fn a_slow_consumer_bounds_the_producer_and_loses_nothing() {
    for (workers, policy) in [(1, Policy::Fifo), (2, Policy::Fair), (4, Policy::Srpt)] {
        for run in 0..10 {
            let s = scheduler(workers, policy.clone());
            let channel = Channel::new(8, 2);
            let producer = Producer::new(500, channel.clone());
            let handle = s.submit(vec![producer.clone() as Arc<dyn TaskSetWork>]);
            let mut seen = vec![0u32; 500];
            let mut n = 0usize;
            while let Some(i) = channel.pop() {
                seen[i] += 1;
                n += 1;
                if (n + run).is_multiple_of(7) {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            let stats = handle.wait().expect("completes");
            assert!(seen.iter().all(|&c| c == 1), "each item consumed once");
            assert!(producer
                .produced
                .iter()
                .all(|c| c.load(Ordering::Relaxed) == 1));
            let state = channel.state.lock().unwrap();
            assert!(
                state.peak <= 8 + workers,
                "queue peak {} over its bound with {workers} workers",
                state.peak
            );
            assert!(stats.pauses > 0, "the producer paused");
            assert!(state.resumes > 0);
        }
    }
}

/// While one query waits for its consumer, another query's tasks run on
/// every worker (a paused set holds no worker), and the paused query
/// still completes once its consumer reads on.
#[test]
fn a_paused_query_holds_no_worker() {
    let s = scheduler(2, Policy::Fifo);
    let channel = Channel::new(4, 1);
    let producer = Producer::new(50, channel.clone());
    let paused = s.submit(vec![producer.clone() as Arc<dyn TaskSetWork>]);
    // Wait until the producer paused with its queue full.
    while channel.state.lock().unwrap().paused.is_none() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let spin = Arc::new(Spin {
        left: AtomicUsize::new(20_000),
    });
    s.run(vec![spin.clone() as Arc<dyn TaskSetWork>])
        .expect("runs beside the paused query");
    assert_eq!(spin.left.load(Ordering::Relaxed), 0);
    assert!(
        channel.state.lock().unwrap().queue.len() <= 4 + 2,
        "the paused producer did not run meanwhile"
    );
    let mut count = 0;
    while channel.pop().is_some() {
        count += 1;
    }
    assert_eq!(count, 50);
    paused.wait().expect("completes");
}

/// A paused query never keeps its slot from a query waiting for one:
/// with one slot, a query submitted while the only admitted one waits for
/// a consumer that never reads is admitted all the same — the paused
/// query is resumed and runs to its end, its items all queued.
#[test]
fn a_paused_query_runs_on_while_another_waits_for_its_slot() {
    for workers in [1, 2] {
        let s = Scheduler::new(SchedulerConfig {
            workers,
            pin_workers: false,
            t_max: Duration::from_micros(200),
            morsels: MorselPolicy::Fixed(1),
            policy: Policy::Fair,
            slots: 1,
            ..SchedulerConfig::default()
        });
        let channel = Channel::new(4, 1);
        let producer = Producer::new(200, channel.clone());
        let paused = s.submit(vec![producer.clone() as Arc<dyn TaskSetWork>]);
        while channel.state.lock().unwrap().paused.is_none() {
            std::thread::sleep(Duration::from_millis(1));
        }
        let spin = Arc::new(Spin {
            left: AtomicUsize::new(100),
        });
        s.run(vec![spin.clone() as Arc<dyn TaskSetWork>])
            .expect("admitted although the admitted query's consumer never read");
        let stats = paused.wait().expect("the paused query ran to its end");
        assert!(stats.pauses > 0);
        assert_eq!(channel.state.lock().unwrap().queue.len(), 200);
        let mut count = 0;
        while channel.pop().is_some() {
            count += 1;
        }
        assert_eq!(count, 200);
    }
}

/// A query cancelled while paused ends (its consumer went away).
#[test]
fn cancel_reaches_a_paused_task_set() {
    let s = scheduler(2, Policy::Fair);
    for _ in 0..20 {
        let channel = Channel::new(2, 0);
        let producer = Producer::new(1000, channel.clone());
        let handle = s.submit(vec![producer.clone() as Arc<dyn TaskSetWork>]);
        while channel.state.lock().unwrap().paused.is_none() {
            std::thread::sleep(Duration::from_micros(100));
        }
        handle.cancel();
        assert!(matches!(handle.wait(), Err(QueryError::Cancelled)));
    }
}

//! Node affinities on synthetic and fake topologies ([`stride_sched::affinity`]):
//! no item is lost or run twice, hard affinities keep every morsel local,
//! soft ones steal only after the thief's node ran dry, a node without
//! workers strands nothing, and cancellation reaches parked task sets.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stride_sched::{
    MorselPlace, MorselPolicy, NodeAffinity, Policy, QueryError, Scheduler, SchedulerConfig,
    TaskContext, TaskError, TaskOutcome, TaskSetWork, Topology,
};

/// Items living on nodes, one cursor per node, each item counted when run.
/// Morsels follow the executor's placed sources: the worker's own node
/// first; then, when stealing (or when a node has no workers), the node
/// with the most items left; otherwise `NodeDry`.
struct NodeItems {
    /// `None`: no affinity, one cursor over every node's items in order.
    affinity: Option<NodeAffinity>,
    cursors: Vec<AtomicUsize>,
    runs: Vec<Vec<AtomicU32>>,
    /// The single cursor of `affinity: None` (over the concatenation).
    flat: AtomicUsize,
    /// (worker's node, item's node, stolen) per morsel.
    seen: Mutex<Vec<(usize, usize, bool)>>,
    /// Set when a task took a stolen morsel while its own node still had
    /// items: must stay 0.
    early_steals: AtomicU32,
    /// While set, tasks take nothing and yield (a task set that holds its
    /// node's workers).
    hold: AtomicBool,
    /// `NodeDry` reports: a worker parks or demotes the slot after its
    /// first, so at most one per worker and entry.
    dry_reports: AtomicU32,
    /// Local work of another query that a thief must have used up before it
    /// steals from this one (the steal tier comes after every local part).
    local_first: Mutex<Option<Arc<NodeItems>>>,
}

impl NodeItems {
    fn new(affinity: Option<NodeAffinity>, per_node: &[usize]) -> Arc<Self> {
        Arc::new(NodeItems {
            affinity,
            cursors: per_node.iter().map(|_| AtomicUsize::new(0)).collect(),
            runs: per_node
                .iter()
                .map(|&n| (0..n).map(|_| AtomicU32::new(0)).collect())
                .collect(),
            flat: AtomicUsize::new(0),
            seen: Mutex::new(Vec::new()),
            early_steals: AtomicU32::new(0),
            hold: AtomicBool::new(false),
            dry_reports: AtomicU32::new(0),
            local_first: Mutex::new(None),
        })
    }

    fn left(&self, node: usize) -> usize {
        self.runs[node]
            .len()
            .saturating_sub(self.cursors[node].load(Ordering::Relaxed))
    }

    fn take(&self, node: usize) -> Option<usize> {
        let i = self.cursors[node].fetch_add(1, Ordering::Relaxed);
        (i < self.runs[node].len()).then_some(i)
    }

    /// The next item for `ctx`'s worker, as (node, index, place), or the
    /// outcome that ends the task.
    fn next(&self, ctx: &TaskContext<'_>) -> Result<(usize, usize, MorselPlace), TaskOutcome> {
        let own = ctx.node();
        let Some(affinity) = self.affinity else {
            let mut i = self.flat.fetch_add(1, Ordering::Relaxed);
            for (node, items) in self.runs.iter().enumerate() {
                if i < items.len() {
                    let place = if node == own {
                        MorselPlace::Local
                    } else {
                        MorselPlace::Remote
                    };
                    return Ok((node, i, place));
                }
                i -= items.len();
            }
            return Err(TaskOutcome::Exhausted);
        };
        if own < self.runs.len() {
            if let Some(i) = self.take(own) {
                return Ok((own, i, MorselPlace::Local));
            }
        }
        loop {
            let may = |n: usize| ctx.stealing() || !ctx.node_has_workers(n);
            let victim = (0..self.runs.len())
                .filter(|&n| n != own && self.left(n) > 0)
                .max_by_key(|&n| (may(n), self.left(n)));
            match victim {
                None => return Err(TaskOutcome::Exhausted),
                Some(n) if may(n) => {
                    if let Some(i) = self.take(n) {
                        let other = self.local_first.lock().unwrap();
                        let other_left = other.as_ref().is_some_and(|o| o.left(own) > 0);
                        if other_left || (own < self.runs.len() && self.left(own) > 0) {
                            self.early_steals.fetch_add(1, Ordering::Relaxed);
                        }
                        return Ok((n, i, MorselPlace::Stolen));
                    }
                }
                Some(_) => {
                    self.dry_reports.fetch_add(1, Ordering::Relaxed);
                    return Err(TaskOutcome::NodeDry(affinity));
                }
            }
        }
    }

    fn each_once(&self) -> bool {
        self.runs
            .iter()
            .flatten()
            .all(|r| r.load(Ordering::Relaxed) == 1)
    }
}

impl TaskSetWork for NodeItems {
    fn name(&self) -> String {
        "node items".into()
    }

    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        loop {
            if ctx.next_morsel(None).is_none() || self.hold.load(Ordering::Relaxed) {
                return Ok(TaskOutcome::Yielded);
            }
            let (node, i, place) = match self.next(ctx) {
                Ok(item) => item,
                Err(outcome) => return Ok(outcome),
            };
            self.runs[node][i].fetch_add(1, Ordering::Relaxed);
            self.seen
                .lock()
                .unwrap()
                .push((ctx.node(), node, place == MorselPlace::Stolen));
            ctx.morsel_place(place);
            ctx.morsel_done(1);
        }
    }
}

fn scheduler(topology: &str, workers: usize, policy: Policy) -> Scheduler {
    Scheduler::new(SchedulerConfig {
        workers,
        pin_workers: false,
        topology: Arc::new(Topology::from_spec(topology).unwrap()),
        t_max: Duration::from_micros(200),
        morsels: MorselPolicy::Fixed(1),
        policy,
        ..SchedulerConfig::default()
    })
}

/// Bound: four nodes, one worker each, several queries at once: every item
/// runs once, every morsel on its own node, no steal.
#[test]
fn hard_affinity_runs_every_morsel_locally_and_loses_none() {
    for policy in [Policy::Fifo, Policy::Fair] {
        let s = scheduler("nodes=4,cores-per-node=1", 4, policy);
        let sets: Vec<_> = (0..8)
            .map(|q| NodeItems::new(Some(NodeAffinity::Hard), &[40 + q, 10, 0, 70]))
            .collect();
        let handles: Vec<_> = sets
            .iter()
            .map(|w| s.submit(vec![w.clone() as Arc<dyn TaskSetWork>]))
            .collect();
        for (h, w) in handles.into_iter().zip(&sets) {
            let stats = h.wait().expect("completes");
            assert!(w.each_once());
            assert!(w.seen.lock().unwrap().iter().all(|&(a, b, _)| a == b));
            assert!(
                w.dry_reports.load(Ordering::Relaxed) <= 4,
                "parked after one"
            );
            let total: usize = w.runs.iter().map(Vec::len).sum();
            assert_eq!(stats.places.local, total as u64);
            assert_eq!(stats.places.stolen + stats.places.remote, 0);
        }
        assert!(s.worker_stats().iter().all(|w| w.steal_tasks == 0));
    }
}

/// Target under a 20/80 skew: the workers of the cold node steal from the
/// hot one, and only after their own part ran dry.
#[test]
fn soft_affinity_steals_only_after_the_local_part_is_dry() {
    let s = scheduler("nodes=2,cores-per-node=1", 2, Policy::Fifo);
    let mut stolen = 0;
    for _ in 0..20 {
        let w = NodeItems::new(Some(NodeAffinity::Soft), &[40, 160]);
        let stats = s.run(vec![w.clone()]).expect("completes");
        assert!(w.each_once());
        assert_eq!(w.early_steals.load(Ordering::Relaxed), 0);
        assert!(
            w.dry_reports.load(Ordering::Relaxed) <= 2,
            "demoted after one"
        );
        assert_eq!(stats.places.local + stats.places.stolen, 200);
        for &(own, from, steal) in w.seen.lock().unwrap().iter() {
            assert_eq!(steal, own != from, "a remote morsel is always a steal");
        }
        stolen += stats.places.stolen;
    }
    assert!(
        stolen > 0,
        "the cold node's worker helped with the hot part"
    );
    assert!(s.worker_stats().iter().any(|w| w.steal_tasks > 0));
}

/// The steal tier comes after every query's local work: node 0's worker
/// runs the later query's node-0 part before it steals from the earlier
/// query (FIFO ranks the earlier first), whose items all sit on node 1.
#[test]
fn local_work_of_a_later_query_comes_before_a_steal() {
    let s = scheduler("nodes=2,cores-per-node=1", 2, Policy::Fifo);
    for _ in 0..10 {
        let remote = NodeItems::new(Some(NodeAffinity::Soft), &[0, 400]);
        let local = NodeItems::new(Some(NodeAffinity::Soft), &[100, 0]);
        *remote.local_first.lock().unwrap() = Some(local.clone());
        // Held until both are in, so that nothing is stolen before the
        // later query's local part exists.
        remote.hold.store(true, Ordering::Relaxed);
        let a = s.submit(vec![remote.clone() as Arc<dyn TaskSetWork>]);
        let b = s.submit(vec![local.clone() as Arc<dyn TaskSetWork>]);
        remote.hold.store(false, Ordering::Relaxed);
        a.wait().expect("completes");
        b.wait().expect("completes");
        assert!(remote.each_once() && local.each_once());
        assert_eq!(remote.early_steals.load(Ordering::Relaxed), 0);
    }
}

/// OS: one cursor over every node's items, about a half of them local on
/// two nodes (the share depends on timing; every morsel is counted).
#[test]
fn without_affinity_morsels_are_counted_local_or_remote() {
    let s = scheduler("nodes=2,cores-per-node=1", 2, Policy::Fifo);
    let w = NodeItems::new(None, &[100, 100]);
    let stats = s.run(vec![w.clone()]).expect("completes");
    assert!(w.each_once());
    assert_eq!(stats.places.local + stats.places.remote, 200);
    assert_eq!(stats.places.stolen, 0);
    let per_worker: u64 = s
        .worker_stats()
        .iter()
        .map(|w| w.places.local + w.places.remote)
        .sum();
    assert_eq!(per_worker, 200);
}

/// A node without workers (three nodes, two workers): its bound items are
/// taken by the others, so nothing is stranded.
#[test]
fn a_node_without_workers_strands_nothing() {
    let s = scheduler("nodes=3,cores-per-node=1", 2, Policy::Fair);
    for affinity in [NodeAffinity::Hard, NodeAffinity::Soft] {
        for _ in 0..10 {
            let w = NodeItems::new(Some(affinity), &[5, 5, 90]);
            s.run(vec![w.clone()]).expect("completes");
            assert!(w.each_once());
        }
    }
}

/// Follow-on task sets: a parked slot is chosen again once its next task
/// set arrives (the reach is per entry), across many groups.
#[test]
fn parking_is_forgotten_with_the_next_task_set() {
    let s = scheduler("nodes=2,cores-per-node=1", 2, Policy::Fair);
    let handles: Vec<_> = (0..16)
        .map(|q| {
            let sets: Vec<Arc<dyn TaskSetWork>> = (0..4)
                .map(|i| {
                    let skew = if (q + i) % 2 == 0 { [30, 0] } else { [0, 30] };
                    NodeItems::new(Some(NodeAffinity::Hard), &skew) as Arc<dyn TaskSetWork>
                })
                .collect();
            s.submit(sets)
        })
        .collect();
    for h in handles {
        let stats = h.wait().expect("completes");
        assert_eq!(stats.places.local, 4 * 30);
    }
}

/// A task set whose only items sit on node 1, held there behind an earlier
/// query's task set that keeps node 1's worker busy (FIFO) while node 0's
/// worker has parked both: cancelling it still ends it, before the earlier
/// one is let go.
#[test]
fn cancelling_a_parked_task_set_lands() {
    let s = scheduler("nodes=2,cores-per-node=1", 2, Policy::Fifo);
    let long = NodeItems::new(Some(NodeAffinity::Hard), &[0, 100]);
    long.hold.store(true, Ordering::Relaxed);
    let first = s.submit(vec![long.clone() as Arc<dyn TaskSetWork>]);
    let parked = NodeItems::new(Some(NodeAffinity::Hard), &[0, 1_000]);
    let second = s.submit(vec![parked.clone() as Arc<dyn TaskSetWork>]);
    std::thread::sleep(Duration::from_millis(5));
    assert!(
        parked.seen.lock().unwrap().is_empty(),
        "held behind the first"
    );
    second.cancel();
    assert!(matches!(second.wait(), Err(QueryError::Cancelled)));
    long.hold.store(false, Ordering::Relaxed);
    first.wait().expect("completes");
    assert!(long.each_once());
}

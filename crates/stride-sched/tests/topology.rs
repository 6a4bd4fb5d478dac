//! Workers on a topology: each worker belongs to a node and, pinned, runs on
//! its cpu; every task sees its worker's node ([`TaskContext::node`]).

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stride_sched::{
    MorselPolicy, Policy, Scheduler, SchedulerConfig, TaskContext, TaskError, TaskOutcome,
    TaskSetWork, Topology,
};

/// Items handed out one morsel at a time; every morsel records which worker
/// ran it and which node its task reported.
struct NodeProbe {
    cursor: AtomicUsize,
    runs: Vec<AtomicU32>,
    seen: Mutex<Vec<(usize, usize)>>,
}

impl NodeProbe {
    fn new(items: usize) -> Arc<Self> {
        Arc::new(NodeProbe {
            cursor: AtomicUsize::new(0),
            runs: (0..items).map(|_| AtomicU32::new(0)).collect(),
            seen: Mutex::new(Vec::new()),
        })
    }
}

impl TaskSetWork for NodeProbe {
    fn name(&self) -> String {
        "node probe".into()
    }

    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        loop {
            let Some(n) = ctx.next_morsel(None) else {
                return Ok(TaskOutcome::Yielded);
            };
            let start = self.cursor.fetch_add(n, Ordering::Relaxed);
            if start >= self.runs.len() {
                return Ok(TaskOutcome::Exhausted);
            }
            let end = (start + n).min(self.runs.len());
            for run in &self.runs[start..end] {
                run.fetch_add(1, Ordering::Relaxed);
            }
            self.seen.lock().unwrap().push((ctx.worker(), ctx.node()));
            ctx.morsel_done(end - start);
        }
    }
}

#[test]
fn every_task_reports_its_workers_node_on_a_fake_two_node_topology() {
    let topology = match Topology::fake(2, 1) {
        Ok(t) => Arc::new(t),
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    assert_eq!(topology.nodes().len(), 2);
    assert_eq!(topology.worker_node(0), 0);
    assert_eq!(topology.worker_node(1), 1);
    let scheduler = Scheduler::new(SchedulerConfig {
        workers: 2,
        pin_workers: true,
        topology: topology.clone(),
        t_max: Duration::from_micros(50),
        morsels: MorselPolicy::Fixed(1),
        policy: Policy::Fair,
        ..SchedulerConfig::default()
    });
    let probes: Vec<Arc<NodeProbe>> = (0..64).map(|i| NodeProbe::new(50 + i)).collect();
    let handles: Vec<_> = probes
        .iter()
        .map(|p| scheduler.submit(vec![p.clone() as Arc<dyn TaskSetWork>, p.clone()]))
        .collect();
    for h in handles {
        h.wait().expect("completes");
    }
    let mut morsels = 0;
    for p in &probes {
        // Both task sets share the probe's cursor: the first runs every
        // item once, the second finds it dry.
        assert!(p.runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
        for &(worker, node) in p.seen.lock().unwrap().iter() {
            assert_eq!(node, topology.worker_node(worker), "worker {worker}");
            morsels += 1;
        }
    }
    assert_eq!(morsels, probes.iter().map(|p| p.runs.len()).sum::<usize>());
    for stats in scheduler.worker_stats() {
        if cfg!(target_os = "linux") {
            assert_eq!(
                stats.os.core,
                Some(topology.cpu_of_worker(stats.worker)),
                "worker {} pinned to its fake node's cpu",
                stats.worker
            );
        }
    }
}

/// Unpinned workers still belong to their topology's nodes: a synthetic
/// topology of four nodes with one core each, three workers.
#[test]
fn unpinned_workers_report_their_synthetic_nodes() {
    let topology = Arc::new(Topology::synthetic("nodes=4,cores-per-node=1").unwrap());
    let scheduler = Scheduler::new(SchedulerConfig {
        workers: 3,
        pin_workers: false,
        topology: topology.clone(),
        morsels: MorselPolicy::Fixed(1),
        ..SchedulerConfig::default()
    });
    let probe = NodeProbe::new(300);
    scheduler.run(vec![probe.clone()]).expect("completes");
    let seen = probe.seen.lock().unwrap();
    assert_eq!(seen.len(), 300);
    for &(worker, node) in seen.iter() {
        assert!(worker < 3);
        assert_eq!(node, worker, "worker i on node i while workers < nodes");
    }
    assert!(scheduler.worker_stats().iter().all(|s| s.os.core.is_none()));
}

//! Workers on a topology: each worker belongs to a node and, pinned, runs on
//! its cpu; every task sees its worker's node ([`TaskContext::node`]).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use stride_sched::{
    MorselPolicy, Policy, Scheduler, SchedulerConfig, TaskContext, TaskError, TaskOutcome,
    TaskSetWork, Topology,
};

use common::Items;

/// Items handed out one morsel at a time; every morsel records which worker
/// ran it and which node its task reported.
struct NodeProbe {
    items: Items,
    seen: Mutex<Vec<(usize, usize)>>,
}

impl NodeProbe {
    fn new(items: usize) -> Arc<Self> {
        Arc::new(NodeProbe {
            items: Items::new(items),
            seen: Mutex::new(Vec::new()),
        })
    }
}

impl TaskSetWork for NodeProbe {
    fn name(&self) -> String {
        "node probe".into()
    }

    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        Ok(self.items.run_task(ctx, |ctx| {
            self.seen.lock().unwrap().push((ctx.worker(), ctx.node()));
        }))
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
        assert!(p.items.each_once());
        for &(worker, node) in p.seen.lock().unwrap().iter() {
            assert_eq!(node, topology.worker_node(worker), "worker {worker}");
            morsels += 1;
        }
    }
    assert_eq!(
        morsels,
        probes.iter().map(|p| p.items.runs.len()).sum::<usize>()
    );
    // A worker publishes its OS set-up when its thread has started, which
    // on a busy machine may come after the other worker ran every task.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cfg!(target_os = "linux")
        && scheduler.worker_stats().iter().any(|s| s.os.nice.is_none())
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(1));
    }
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

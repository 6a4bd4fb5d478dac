//! Placed task sets in the simulator: where a task set's work lives, which
//! node's part a simulated task reads, and how fast it goes on the
//! [`Machine`] (seed 002 §5, issue 20 item 9).
//!
//! A [`Placement`] splits a task set's work by memory node (seconds of CPU
//! work at full speed whose morsels live on each node), gives it an
//! affinity (`None` = seed 002's *OS*, `Some(Soft)` = *Target*,
//! `Some(Hard)` = *Bound*) and a memory intensity (bytes read per
//! CPU-second at full speed). With [`super::SimConfig::machine`] set, the
//! simulator runs such a task set the way an executor source over placed
//! blocks runs under the scheduler ([`crate::affinity`]):
//!
//! * each simulated worker has a node ([`Machine::worker_node`]);
//! * a task reads one node's part at a time (`Parts::take`): without an
//!   affinity, one cursor over all nodes in order; with one, its worker's
//!   node first, then nodes without workers; a task chosen from the steal
//!   tier (`DecisionCore::stealing`) then takes other nodes' parts in ring
//!   order from its own node; otherwise, when other nodes still hold work,
//!   the task returns `NodeDry` and the simulator calls the same
//!   `DecisionCore::node_dry` the worker calls;
//! * work is fluid: a task draws from its part at its current rate until
//!   its quantum (wall time) is spent or the part runs dry, when it moves on
//!   as above (Exhausted once every part is dry). Rates come from
//!   [`Machine::share`] and are recomputed at every event.
//!
//! What the real scheduler has and this model does not: morsel boundaries
//! (a task ends exactly when its part runs dry or its quantum is spent),
//! preemption points and hand-over morsels (ignored in machine mode).

use crate::affinity::{MorselPlace, NodeAffinity};

use super::machine::{Flow, Machine};

/// Where a simulated task set's work lives (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// CPU seconds of work (at full, local speed) whose data lives on each
    /// node; the task set's work is their sum.
    pub per_node: Vec<f64>,
    /// `None`: seed 002's *OS*; `Soft`: *Target*; `Hard`: *Bound*.
    pub affinity: Option<NodeAffinity>,
    /// Bytes read per CPU-second at full speed.
    pub intensity: f64,
}

impl Placement {
    /// All of `work` on `node` of a machine of `nodes` nodes (an RR-placed
    /// column, a table on one socket).
    pub fn on_node(
        nodes: usize,
        node: usize,
        work: f64,
        affinity: Option<NodeAffinity>,
        intensity: f64,
    ) -> Placement {
        let mut per_node = vec![0.0; nodes];
        per_node[node % nodes.max(1)] = work;
        Placement {
            per_node,
            affinity,
            intensity,
        }
    }
}

/// A part below this much work (ns) is dry (fluid rounding).
const DRY: f64 = 1e-3;

/// What is left of one entry's work, per node, in CPU-ns (fluid).
#[derive(Debug, Clone)]
pub(super) struct Parts {
    left: Vec<f64>,
    affinity: Option<NodeAffinity>,
    /// Bytes per CPU-ns; 0 for work that reads no placed memory.
    demand: f64,
    /// False: one part of CPU-only work (a task set without a placement).
    placed: bool,
}

/// Which part a task reads next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Take {
    From(usize),
    /// The worker's node is dry, others are not: `TaskOutcome::NodeDry`.
    NodeDry(NodeAffinity),
    /// Every part is dry: `TaskOutcome::Exhausted`.
    Dry,
}

impl Parts {
    /// The parts of a fresh entry of a task set of `work` seconds.
    pub(super) fn new(work: f64, placement: Option<&Placement>, nodes: usize) -> Parts {
        match placement {
            Some(p) => {
                let mut left = vec![0.0; nodes];
                for (d, w) in p.per_node.iter().enumerate() {
                    left[d % nodes] += w.max(0.0) * 1e9;
                }
                Parts {
                    left,
                    affinity: p.affinity,
                    demand: p.intensity.max(0.0) / 1e9,
                    placed: true,
                }
            }
            None => Parts {
                left: vec![work.max(0.0) * 1e9],
                affinity: None,
                demand: 0.0,
                placed: false,
            },
        }
    }

    pub(super) fn dry(&self) -> bool {
        self.left.iter().all(|&l| l <= DRY)
    }

    fn has(&self, d: usize) -> bool {
        self.left[d] > DRY
    }

    /// The part a task of a worker on `node` reads next.
    pub(super) fn take(&self, node: usize, stealing: bool, staffed: &[bool]) -> Take {
        let n = self.left.len();
        if !self.placed {
            return if self.has(0) {
                Take::From(0)
            } else {
                Take::Dry
            };
        }
        let Some(affinity) = self.affinity else {
            // One cursor over every node's morsels in order.
            return (0..n).find(|&d| self.has(d)).map_or(Take::Dry, Take::From);
        };
        if self.has(node) {
            return Take::From(node);
        }
        if let Some(d) = (0..n).find(|&d| !staffed.get(d).copied().unwrap_or(false) && self.has(d))
        {
            return Take::From(d);
        }
        let other = (1..n).map(|i| (node + i) % n).find(|&d| self.has(d));
        match other {
            Some(d) if stealing => Take::From(d),
            Some(_) => Take::NodeDry(affinity),
            None => Take::Dry,
        }
    }

    /// Where a morsel of part `d` read by a worker of `node` lives.
    pub(super) fn place(&self, d: usize, node: usize, stealing: bool) -> MorselPlace {
        if !self.placed || d == node {
            MorselPlace::Local
        } else if stealing && self.affinity.is_some() {
            MorselPlace::Stolen
        } else {
            MorselPlace::Remote
        }
    }

    /// Draws `work` ns from part `d`.
    pub(super) fn draw(&mut self, d: usize, work: f64) {
        self.left[d] = (self.left[d] - work).max(0.0);
    }

    pub(super) fn left(&self, d: usize) -> f64 {
        self.left[d]
    }

    /// Bytes per CPU-ns (0: no placed memory read).
    pub(super) fn demand(&self) -> f64 {
        self.demand
    }

    /// Whether part `d` is placed memory (a flow on the machine).
    pub(super) fn placed(&self) -> bool {
        self.placed
    }
}

/// One running task as the machine sees it: its worker's node, the node
/// of the part it reads, its demand (bytes per CPU-ns; 0: CPU only).
#[derive(Debug, Clone, Copy)]
pub(super) struct Reader {
    pub node: usize,
    pub from: usize,
    pub demand: f64,
}

/// Progress rates (CPU-ns of work per ns, at most 1) of `readers`.
pub(super) fn rates(machine: &Machine, readers: &[Reader]) -> Vec<f64> {
    let mut flows: Vec<Flow> = Vec::new();
    let class: Vec<Option<usize>> = readers
        .iter()
        .map(|r| {
            if r.demand <= 0.0 {
                return None;
            }
            let i = flows.iter().position(|f| {
                f.from == r.from && f.to == r.node && f.demand.to_bits() == r.demand.to_bits()
            });
            Some(i.unwrap_or_else(|| {
                flows.push(Flow {
                    from: r.from,
                    to: r.node,
                    demand: r.demand,
                    count: 0,
                });
                flows.len() - 1
            }))
        })
        .collect();
    for c in class.iter().flatten() {
        flows[*c].count += 1;
    }
    let bw = machine.share(&flows);
    readers
        .iter()
        .zip(&class)
        .map(|(r, c)| c.map_or(1.0, |c| (bw[c] / r.demand).min(1.0)))
        .collect()
}

/// What happened on the machine ([`super::SimResult::numa`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NumaStats {
    /// Per node: seconds its workers spent running tasks (summed over
    /// them).
    pub busy: Vec<f64>,
    /// Per node: bytes its memory controller served.
    pub served: Vec<f64>,
    /// CPU seconds of work done by place.
    pub local: f64,
    pub remote: f64,
    pub stolen: f64,
    /// Tasks started from a worker's steal tier.
    pub steal_tasks: u64,
    /// Tasks that returned `NodeDry`.
    pub node_dry: u64,
}

impl NumaStats {
    pub(super) fn new(nodes: usize) -> Self {
        NumaStats {
            busy: vec![0.0; nodes],
            served: vec![0.0; nodes],
            ..NumaStats::default()
        }
    }

    /// Share of the work done on local data.
    pub fn local_share(&self) -> f64 {
        let all = self.local + self.remote + self.stolen;
        if all > 0.0 {
            self.local / all
        } else {
            0.0
        }
    }

    /// Busy share of node `n`'s workers over `seconds` of simulated time.
    pub fn busy_share(&self, n: usize, workers: usize, seconds: f64) -> f64 {
        self.busy[n] / (workers.max(1) as f64 * seconds.max(1e-12))
    }

    /// Accounts `work` CPU-ns done in `ns` by a worker of `node` reading
    /// part `from` of `parts`.
    pub(super) fn add(
        &mut self,
        parts: &Parts,
        node: usize,
        from: usize,
        stealing: bool,
        ns: u64,
        work: f64,
    ) {
        self.busy[node] += ns as f64 / 1e9;
        if parts.placed() {
            self.served[from] += work * parts.demand();
        }
        let s = work / 1e9;
        match parts.place(from, node, stealing) {
            MorselPlace::Local => self.local += s,
            MorselPlace::Remote => self.remote += s,
            MorselPlace::Stolen => self.stolen += s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(per_node: &[f64], affinity: Option<NodeAffinity>) -> Parts {
        let p = Placement {
            per_node: per_node.to_vec(),
            affinity,
            intensity: 1e9,
        };
        Parts::new(0.0, Some(&p), per_node.len())
    }

    #[test]
    fn sources_follow_the_affinity() {
        let staffed = [true, true, true];
        let os = parts(&[0.0, 1.0, 1.0], None);
        assert_eq!(os.take(2, false, &staffed), Take::From(1), "one cursor");
        let soft = parts(&[0.0, 1.0, 1.0], Some(NodeAffinity::Soft));
        assert_eq!(
            soft.take(2, false, &staffed),
            Take::From(2),
            "own node first"
        );
        assert_eq!(
            soft.take(0, false, &staffed),
            Take::NodeDry(NodeAffinity::Soft)
        );
        assert_eq!(soft.take(0, true, &staffed), Take::From(1), "a thief");
        let hard = parts(&[0.0, 0.0, 1.0], Some(NodeAffinity::Hard));
        assert_eq!(
            hard.take(0, false, &staffed),
            Take::NodeDry(NodeAffinity::Hard)
        );
        assert_eq!(
            hard.take(0, false, &[true, true, false]),
            Take::From(2),
            "a node without workers is anyone's"
        );
        assert_eq!(
            parts(&[0.0, 0.0, 0.0], None).take(0, false, &staffed),
            Take::Dry
        );
    }

    #[test]
    fn cpu_only_work_runs_at_full_speed_and_reads_slow_down_when_shared() {
        let m = Machine::ivybridge_ex_4();
        let r = rates(
            &m,
            &[
                Reader {
                    node: 0,
                    from: 0,
                    demand: 0.0,
                },
                Reader {
                    node: 0,
                    from: 1,
                    demand: 8.0,
                },
            ],
        );
        assert_eq!(r[0], 1.0);
        // One remote reader alone: Little's law over 240 ns, 16 lines.
        assert!((r[1] - 16.0 * 64.0 / 240.0 / 8.0).abs() < 1e-9, "{r:?}");
    }
}

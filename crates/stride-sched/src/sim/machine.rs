//! The NUMA machine model of the simulator: memory controllers, remote
//! paths, interconnect ports and a coherence cap, shared fluidly among the
//! morsels running at one instant (seed 002 §2, Table 1).
//!
//! **Units.** Bandwidths are bytes per nanosecond (1 GiB/s = 1.0737 B/ns),
//! latencies nanoseconds, work CPU-nanoseconds at full speed.
//!
//! **Flows.** A running task that reads placed data is a *flow* from the
//! memory node `d` holding its morsels to the node `c` of its worker. At
//! full speed it would read `demand` bytes per ns (its task set's memory
//! intensity); what it gets is decided by max-min fair sharing
//! (progressive filling) over these resources:
//!
//! | resource | capacity (Table 1 row) | flows, coefficient |
//! |---|---|---|
//! | memory controller of `d` | local B/W | every flow reading `d`: 1 if local, `remote_cost` (κ) if remote |
//! | path `d → c` | 1-hop or max-hops B/W, by hop distance | the remote flows of that pair, 1 |
//! | interconnect port of `c` | max-hops B/W | every remote flow into `c`, 1 |
//! | coherence | total local B/W | every flow, 1 |
//! | the core itself | `mlp × line / latency(c, d)` (Little's law) | the flow alone |
//!
//! A flow's rate is at most its demand (a morsel's duration is
//! `max(CPU time, bytes / achieved bandwidth)`, so a task progresses at
//! `min(1, achieved / demand)` of its CPU speed).
//!
//! **What is assumed, what is fitted.** Capacities and latencies are Table
//! 1's numbers, read as follows (assumptions, not fits): the MLC's
//! per-socket local bandwidth is a controller's capacity; its 1-hop and
//! max-hops bandwidths cap one pair's remote traffic; the max-hops figure
//! is also what one socket's cores can pull through the interconnect
//! altogether (its port: a uniform all-to-all read is limited by its
//! narrowest path); the total local bandwidth caps all memory traffic (on
//! the 8-socket Westmere-EX it is below the sum of the sockets because of
//! broadcast snooping, §2). A core keeps `mlp` = 16 cache lines in flight
//! (10 line-fill buffers plus the L2 streamer's prefetches; assumed). The
//! one fitted parameter is κ, the controller capacity a remote byte costs
//! relative to a local one (a remote read also updates the home node's
//! in-memory directory and holds a controller slot for the longer round
//! trip); it is fitted on seed 002 Fig. 15 (Target ≈ 15 % below Bound under
//! a 20/80 skew) and then used unchanged for every other figure.
//!
//! **Simplifications.** Rates are recomputed only at events (a task
//! starting or ending, a node's part running dry), and held constant in
//! between; no caches (every byte a morsel reads comes from memory), no
//! writes (query outputs are small), no queueing delay beyond the sharing
//! itself, hyper-threads are not modelled (one worker per core), and the
//! paths of a multi-hop machine are not routed over shared links: a pair is
//! either 1 hop (same group of `group` nodes) or at max hops.

/// Bytes per ns in one GiB/s.
pub const GIB_PER_S: f64 = (1u64 << 30) as f64 / 1e9;

/// A NUMA machine's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    /// What the parameters describe (printed with every modelled figure).
    pub name: &'static str,
    pub nodes: usize,
    /// Cores per node; one simulated worker per core.
    pub cores_per_node: usize,
    /// Nodes per group: pairs inside a group are 1 hop apart, pairs across
    /// groups at max hops (a fully connected machine: `group == nodes`).
    pub group: usize,
    /// Idle latency, ns: local, 1 hop, max hops.
    pub latency: [f64; 3],
    /// Peak bandwidth, bytes/ns: local (one controller), 1 hop, max hops.
    pub bandwidth: [f64; 3],
    /// Total local bandwidth of the machine, bytes/ns (coherence cap).
    pub total: f64,
    /// Cache lines one core keeps in flight.
    pub mlp: f64,
    /// Bytes per cache line.
    pub line: f64,
    /// Controller capacity a remote byte costs, in local bytes (κ, fitted).
    pub remote_cost: f64,
}

/// κ fitted on seed 002 Fig. 15 (see the module docs and
/// `tests/numa_model.rs`).
pub const REMOTE_COST: f64 = 2.3;

impl Machine {
    fn table1(
        name: &'static str,
        nodes: usize,
        cores_per_node: usize,
        group: usize,
        latency: [f64; 3],
        gib: [f64; 4],
    ) -> Machine {
        Machine {
            name,
            nodes,
            cores_per_node,
            group,
            latency,
            bandwidth: [gib[0] * GIB_PER_S, gib[1] * GIB_PER_S, gib[2] * GIB_PER_S],
            total: gib[3] * GIB_PER_S,
            mlp: 16.0,
            line: 64.0,
            remote_cost: REMOTE_COST,
        }
    }

    /// Seed 002's main server: 4 × Xeon E7-4880 v2 (15 cores), fully
    /// connected: 150 / 240 / 240 ns, 65 / 8.8 / 8.8 GiB/s, 260 GiB/s total.
    pub fn ivybridge_ex_4() -> Machine {
        Machine::table1(
            "4×Ivybridge-EX",
            4,
            15,
            4,
            [150.0, 240.0, 240.0],
            [65.0, 8.8, 8.8, 260.0],
        )
    }

    /// Two IBM x3950 X5 boxes of 4 × Xeon E7-8870 (10 cores): 163 / 195 /
    /// 245 ns, 19.3 / 10.3 / 4.6 GiB/s, 96.2 GiB/s total (broadcast
    /// snooping).
    pub fn westmere_ex_8() -> Machine {
        Machine::table1(
            "8×Westmere-EX",
            8,
            10,
            4,
            [163.0, 195.0, 245.0],
            [19.3, 10.3, 4.6, 96.2],
        )
    }

    /// SGI UV 300: 32 × Xeon E7-8890 v2 (15 cores) in chassis of 4 sockets:
    /// 112 / 193 / 500 ns, 47.5 / 11.8 / 9.8 GiB/s, 1530 GiB/s total.
    pub fn ivybridge_ex_32() -> Machine {
        Machine::table1(
            "32×Ivybridge-EX",
            32,
            15,
            4,
            [112.0, 193.0, 500.0],
            [47.5, 11.8, 9.8, 1530.0],
        )
    }

    /// Simulated workers: one per core.
    pub fn workers(&self) -> usize {
        self.nodes * self.cores_per_node
    }

    /// The node of worker `w`: workers are dealt round-robin across nodes,
    /// as [`crate::Topology::worker_node`] deals them.
    pub fn worker_node(&self, w: usize) -> usize {
        w % self.nodes.max(1)
    }

    /// 0 local, 1 one hop, 2 max hops.
    pub fn hops(&self, c: usize, d: usize) -> usize {
        if c == d {
            0
        } else if c / self.group.max(1) == d / self.group.max(1) {
            1
        } else {
            2
        }
    }

    /// The most one core reading node `d` from node `c` can get, bytes/ns.
    pub fn core_cap(&self, c: usize, d: usize) -> f64 {
        self.mlp * self.line / self.latency[self.hops(c, d)]
    }

    /// A one-line statement of the parameters, for the labels of modelled
    /// figures.
    pub fn label(&self) -> String {
        let g = |b: f64| b / GIB_PER_S;
        format!(
            "{}: {} nodes × {} cores, {}/{}/{} ns, {:.1}/{:.1}/{:.1} GiB/s, total {:.1} GiB/s, mlp {}, κ {}",
            self.name,
            self.nodes,
            self.cores_per_node,
            self.latency[0],
            self.latency[1],
            self.latency[2],
            g(self.bandwidth[0]),
            g(self.bandwidth[1]),
            g(self.bandwidth[2]),
            g(self.total),
            self.mlp,
            self.remote_cost
        )
    }

    /// Max-min fair rates of `flows` (bytes/ns each; see the module docs).
    /// All flows of one [`Flow`] entry are identical and get the same rate.
    pub fn share(&self, flows: &[Flow]) -> Vec<f64> {
        let n = self.nodes;
        // Resources: controllers 0..n, ports n..2n, coherence 2n, then the
        // paths that carry a flow.
        let mut capacity: Vec<f64> = Vec::with_capacity(2 * n + 1);
        capacity.extend(std::iter::repeat_n(self.bandwidth[0], n));
        capacity.extend(std::iter::repeat_n(self.bandwidth[2], n));
        capacity.push(self.total);
        let mut paths: Vec<(usize, usize)> = Vec::new();
        // (resource, coefficient) per flow.
        let uses: Vec<Vec<(usize, f64)>> = flows
            .iter()
            .map(|f| {
                let mut u = vec![(2 * n, 1.0)];
                if f.from == f.to {
                    u.push((f.from, 1.0));
                } else {
                    u.push((f.from, self.remote_cost));
                    u.push((n + f.to, 1.0));
                    let r = match paths.iter().position(|&p| p == (f.from, f.to)) {
                        Some(i) => 2 * n + 1 + i,
                        None => {
                            paths.push((f.from, f.to));
                            capacity.push(self.bandwidth[self.hops(f.from, f.to)]);
                            capacity.len() - 1
                        }
                    };
                    u.push((r, 1.0));
                }
                u
            })
            .collect();
        let cap: Vec<f64> = flows
            .iter()
            .map(|f| f.demand.min(self.core_cap(f.to, f.from)))
            .collect();
        progressive_filling(&capacity, flows, &uses, &cap)
    }
}

/// `count` identical flows reading node `from` for workers of node `to`,
/// each wanting `demand` bytes/ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flow {
    pub from: usize,
    pub to: usize,
    pub demand: f64,
    pub count: usize,
}

/// Max-min fairness by progressive filling: every unfrozen flow's rate
/// grows at the same pace until a resource it uses is full or it reaches
/// its own cap; then it is frozen. Returns one rate per flow entry.
fn progressive_filling(
    capacity: &[f64],
    flows: &[Flow],
    uses: &[Vec<(usize, f64)>],
    cap: &[f64],
) -> Vec<f64> {
    let mut rate = vec![0.0; flows.len()];
    let mut frozen: Vec<bool> = flows.iter().map(|f| f.count == 0).collect();
    let mut used = vec![0.0; capacity.len()];
    let eps = 1e-12;
    for (i, c) in cap.iter().enumerate() {
        if *c <= eps {
            frozen[i] = true;
        }
    }
    while frozen.iter().any(|f| !f) {
        let mut slope = vec![0.0; capacity.len()];
        for (i, u) in uses.iter().enumerate() {
            if !frozen[i] {
                for &(r, coef) in u {
                    slope[r] += coef * flows[i].count as f64;
                }
            }
        }
        let mut step = f64::INFINITY;
        for (r, &s) in slope.iter().enumerate() {
            if s > 0.0 {
                step = step.min((capacity[r] - used[r]).max(0.0) / s);
            }
        }
        for i in 0..flows.len() {
            if !frozen[i] {
                step = step.min(cap[i] - rate[i]);
            }
        }
        for (i, u) in uses.iter().enumerate() {
            if !frozen[i] {
                rate[i] += step;
                for &(r, coef) in u {
                    used[r] += coef * flows[i].count as f64 * step;
                }
            }
        }
        let full: Vec<bool> = capacity
            .iter()
            .zip(&used)
            .map(|(c, u)| c - u <= eps * c.max(1.0))
            .collect();
        for (i, u) in uses.iter().enumerate() {
            if !frozen[i] && (rate[i] >= cap[i] - eps || u.iter().any(|&(r, _)| full[r])) {
                frozen[i] = true;
            }
        }
    }
    rate
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(from: usize, to: usize, demand_gib: f64, count: usize) -> Flow {
        Flow {
            from,
            to,
            demand: demand_gib * GIB_PER_S,
            count,
        }
    }

    #[test]
    fn a_controller_is_shared_equally_and_a_lone_core_is_latency_bound() {
        let m = Machine::ivybridge_ex_4();
        // One local reader that wants much: Little's law, 16 lines / 150 ns.
        let r = m.share(&[flow(0, 0, 100.0, 1)]);
        assert!((r[0] - 16.0 * 64.0 / 150.0).abs() < 1e-9);
        // 15 local readers at 6 GiB/s each want 90 > 65: 65 / 15 each.
        let r = m.share(&[flow(0, 0, 6.0, 15)]);
        assert!((r[0] * 15.0 / GIB_PER_S - 65.0).abs() < 1e-6, "{r:?}");
    }

    #[test]
    fn remote_readers_share_their_port_and_cost_the_home_controller_kappa() {
        let m = Machine::ivybridge_ex_4();
        // 15 readers of node 1 into node 0: the port (8.8 GiB/s) binds.
        let r = m.share(&[flow(1, 0, 6.0, 15)]);
        assert!((r[0] * 15.0 / GIB_PER_S - 8.8).abs() < 1e-6, "{r:?}");
        // Beside 15 local readers of node 1, who get what κ leaves them.
        let r = m.share(&[flow(1, 0, 6.0, 15), flow(1, 1, 6.0, 15)]);
        let remote = r[0] * 15.0 / GIB_PER_S;
        let local = r[1] * 15.0 / GIB_PER_S;
        assert!((remote - 8.8).abs() < 1e-6);
        assert!(
            (local + m.remote_cost * remote - 65.0).abs() < 1e-6,
            "{r:?}"
        );
    }

    #[test]
    fn the_coherence_cap_binds_on_the_westmere_machine() {
        let m = Machine::westmere_ex_8();
        let flows: Vec<Flow> = (0..8).map(|n| flow(n, n, 5.0, 10)).collect();
        let total: f64 = m.share(&flows).iter().map(|r| r * 10.0).sum();
        assert!((total / GIB_PER_S - 96.2).abs() < 1e-6, "{total}");
    }

    #[test]
    fn hops_follow_the_groups() {
        let m = Machine::ivybridge_ex_32();
        assert_eq!((m.hops(5, 5), m.hops(4, 7), m.hops(3, 4)), (0, 1, 2));
        assert_eq!(Machine::ivybridge_ex_4().hops(0, 3), 1);
    }
}

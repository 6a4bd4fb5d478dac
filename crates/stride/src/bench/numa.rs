//! `stride bench numa`: placements and affinities on the engine's topology
//! (seed 002 §6's mechanisms, measured in-process).
//!
//! Two scan tables are made from the loaded schema's `lineitem` (four
//! columns each), named so that the RR placement puts one on each of the
//! first two nodes. Clients in a closed loop each send
//! `select count(*), sum(l_extendedprice) from T where l_quantity < q`
//! (`q` drawn per submission, seeded) against one of them:
//!
//! * **affinity** — uniform choice, PP placement, every affinity: the share
//!   of local, remote and stolen morsels, steal tasks, throughput;
//! * **skew** — 80 % of the queries on node 0's table, RR placement,
//!   Target vs Bound: each node's busy share (Bound leaves node 1's
//!   workers idle, Target lets them steal; seed 002 Fig. 15's mechanism);
//! * **fairness** — uniform, Bound, RR vs PP: latency mean, CV and p99/p50
//!   (seed 002 Fig. 11: RR queues per node, PP spreads every query).
//!
//! On fake and synthetic topologies the nodes are logical: every local or
//! remote figure says where a morsel's rows *would* live, not where this
//! machine put them. Every report says which topology it ran on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use rand::{Rng, SeedableRng};
use stride_sql::{Engine, Session, StatementOutput};

use super::stats::Dist;

#[derive(Args, Debug)]
pub struct NumaArgs {
    /// Concurrent clients (closed loop) of the affinity and skew runs.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Clients of the fairness runs (seed 002 Fig. 11 uses 32–64 and more).
    #[arg(long, default_value_t = 32)]
    fairness_clients: usize,
    /// Seconds per run.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Seed of the drawn predicates and table choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl RunResult {
    fn queries_per_second(&self) -> f64 {
        self.latencies_ms.len() as f64 / self.seconds
    }

    /// Percent of the placed morsels that were local, remote, stolen.
    fn place_shares(&self) -> [f64; 3] {
        let m = (self.places[0] + self.places[1] + self.places[2]).max(1) as f64;
        [0, 1, 2].map(|i| 100.0 * self.places[i] as f64 / m)
    }
}

/// One run's measurements.
#[derive(Debug, Default)]
struct RunResult {
    latencies_ms: Vec<f64>,
    seconds: f64,
    /// Per node: busy ms; totals of local, remote, stolen morsels and steal
    /// tasks (deltas over the run).
    busy_ms: Vec<f64>,
    places: [i64; 4],
}

pub fn run(args: &NumaArgs, engine: &Arc<Engine>, mut session: Session) -> Result<()> {
    let nodes = engine.runtime().nodes().clone();
    if nodes.len() < 2 {
        bail!(
            "bench numa needs a topology of at least two nodes (e.g. --topology \
             fake:nodes=2,cores-per-node=1, or nodes=2,cores-per-node=1)"
        );
    }
    let topology = &engine.runtime().scheduler().config().topology;
    println!(
        "# bench numa: topology {topology}; {} workers; {} (nodes are {})",
        engine.runtime().scheduler().config().workers,
        if topology.oversubscribed() {
            "OVERSUBSCRIBED"
        } else {
            "not oversubscribed"
        },
        match topology.kind() {
            stride_sched::TopologyKind::Detected => "the machine's",
            _ => "logical: local/remote say where rows would live",
        }
    );
    let tables = make_tables(&mut session, &nodes)?;
    let schema = session.default_schema().to_string();
    let mut spec = RunSpec {
        engine,
        schema: &schema,
        tables: &tables,
        clients: args.clients,
        seconds: args.seconds,
        seed: args.seed,
        hot_share: 0.5,
        placement: "pp",
        affinity: "os",
    };
    println!(
        "\n## affinity (uniform, PP placement, {} clients)\n",
        args.clients
    );
    println!(
        "| affinity | queries/s | local | remote | stolen | steal tasks | busy share per node |"
    );
    println!("|---|---|---|---|---|---|---|");
    for affinity in ["os", "target", "bound", "auto"] {
        spec.affinity = affinity;
        let r = spec.run()?;
        let [local, remote, stolen] = r.place_shares();
        println!(
            "| {affinity} | {:.1} | {local:.1} % | {remote:.1} % | {stolen:.1} % | {} | {} |",
            r.queries_per_second(),
            r.places[3],
            shares(&r.busy_ms)
        );
    }
    println!(
        "\n## skew (80 % of queries on node {}'s table, RR placement, {} clients)\n",
        nodes[0], args.clients
    );
    println!("| affinity | queries/s | mean ms | stolen | busy share per node |");
    println!("|---|---|---|---|---|");
    spec.hot_share = 0.8;
    spec.placement = "rr";
    for affinity in ["target", "bound"] {
        spec.affinity = affinity;
        let r = spec.run()?;
        println!(
            "| {affinity} | {:.1} | {:.1} | {:.1} % | {} |",
            r.queries_per_second(),
            Dist::of(&r.latencies_ms).mean,
            r.place_shares()[2],
            shares(&r.busy_ms)
        );
    }
    println!(
        "\n## fairness (uniform, Bound, {} clients)\n",
        args.fairness_clients
    );
    println!("| placement | queries/s | mean ms | CV | p50 ms | p99 ms | p99/p50 |");
    println!("|---|---|---|---|---|---|---|");
    spec.hot_share = 0.5;
    spec.affinity = "bound";
    spec.clients = args.fairness_clients;
    for placement in ["rr", "pp"] {
        spec.placement = placement;
        let r = spec.run()?;
        let d = Dist::of(&r.latencies_ms);
        let sd = (r
            .latencies_ms
            .iter()
            .map(|x| (x - d.mean).powi(2))
            .sum::<f64>()
            / r.latencies_ms.len().max(1) as f64)
            .sqrt();
        println!(
            "| {placement} | {:.1} | {:.1} | {:.2} | {:.1} | {:.1} | {:.2} |",
            r.queries_per_second(),
            d.mean,
            sd / d.mean,
            d.p50,
            d.p99,
            d.p99 / d.p50
        );
    }
    for t in &tables {
        session.execute(&format!("drop table {t}"))?;
    }
    Ok(())
}

fn shares(busy: &[f64]) -> String {
    let total: f64 = busy.iter().sum::<f64>().max(1e-9);
    busy.iter()
        .map(|b| format!("{:.0} %", 100.0 * b / total))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// Creates one scan table per first two nodes, named so that RR places
/// table `i` on node `nodes[i]`.
fn make_tables(session: &mut Session, nodes: &[usize]) -> Result<Vec<String>> {
    let mut tables = Vec::new();
    for want in 0..2 {
        let name = (0..1000)
            .map(|k| format!("numa_scan_{k}"))
            .find(|n| {
                stride_exec::placement::table_node(n, nodes.len()) == want && !tables.contains(n)
            })
            .context("no table name lands on the node")?;
        session
            .execute(&format!(
                "create table {name} as select l_quantity, l_extendedprice, l_discount, \
                 l_shipdate from lineitem"
            ))
            .context("bench numa needs a loaded lineitem (e.g. --tpch 1)")?;
        tables.push(name);
    }
    Ok(tables)
}

struct RunSpec<'a> {
    engine: &'a Arc<Engine>,
    schema: &'a str,
    tables: &'a [String],
    clients: usize,
    seconds: f64,
    seed: u64,
    /// Share of queries on the first table.
    hot_share: f64,
    placement: &'a str,
    affinity: &'a str,
}

impl RunSpec<'_> {
    fn run(&self) -> Result<RunResult> {
        let mut probe = self.engine.session();
        let before = node_figures(&mut probe)?;
        let stop = Arc::new(AtomicBool::new(false));
        let latencies = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let clients: Vec<_> = (0..self.clients)
            .map(|c| {
                let mut session = self.engine.session();
                let setup = [
                    format!("set search_path = {}", self.schema),
                    format!("set stride.placement = {}", self.placement),
                    format!("set stride.affinity = {}", self.affinity),
                ];
                let tables = self.tables.to_vec();
                let (stop, latencies) = (stop.clone(), latencies.clone());
                let hot = self.hot_share;
                let mut rng = rand::rngs::SmallRng::seed_from_u64(self.seed ^ (c as u64) << 8);
                std::thread::spawn(move || -> Result<()> {
                    for sql in &setup {
                        session.execute(sql)?;
                    }
                    while !stop.load(Ordering::Relaxed) {
                        let table = &tables[usize::from(rng.random::<f64>() >= hot)];
                        let q = rng.random_range(2..=50);
                        let sql = format!(
                            "select count(*), sum(l_extendedprice) from {table} \
                             where l_quantity < {q}"
                        );
                        let t = Instant::now();
                        session.execute(&sql)?;
                        latencies
                            .lock()
                            .unwrap()
                            .push(t.elapsed().as_secs_f64() * 1e3);
                    }
                    Ok(())
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(self.seconds));
        stop.store(true, Ordering::Relaxed);
        for c in clients {
            c.join().expect("client thread")?;
        }
        let seconds = start.elapsed().as_secs_f64();
        let after = node_figures(&mut probe)?;
        let latencies_ms = std::mem::take(&mut *latencies.lock().unwrap());
        let busy_ms = after.iter().zip(&before).map(|(a, b)| a.0 - b.0).collect();
        let mut places = [0i64; 4];
        for (a, b) in after.iter().zip(&before) {
            for (p, (x, y)) in places.iter_mut().zip(a.1.iter().zip(&b.1)) {
                *p += x - y;
            }
        }
        Ok(RunResult {
            latencies_ms,
            seconds,
            busy_ms,
            places,
        })
    }
}

/// Per node: busy ms and (local, remote, stolen morsels, steal tasks).
fn node_figures(session: &mut Session) -> Result<Vec<(f64, [i64; 4])>> {
    let out = session.execute(
        "select busy_ms, local_morsels, remote_morsels, stolen_morsels, steal_tasks \
         from stride.numa order by node",
    )?;
    let Some(StatementOutput::Query(q)) = out.into_iter().last() else {
        bail!("stride.numa gave no rows");
    };
    let mut rows = Vec::new();
    for batch in &q.batches {
        use arrow::array::AsArray;
        use arrow::datatypes::{Float64Type, Int64Type};
        let busy = batch.column(0).as_primitive::<Float64Type>();
        let ints: Vec<_> = (1..5)
            .map(|i| batch.column(i).as_primitive::<Int64Type>())
            .collect();
        for r in 0..batch.num_rows() {
            rows.push((busy.value(r), [0, 1, 2, 3].map(|i| ints[i].value(r))));
        }
    }
    Ok(rows)
}

//! Query classes and the workload mix: TPC-H at two scale factors drawn
//! short:long = 3:1 (seed 001 §5.1), or SSB (seed 000 §4.1), and the isolated
//! latencies that loads and slowdowns are measured against.
//!
//! Each submitted query is an *instance* with its substitution parameters
//! drawn as the benchmark's query generator draws them ([`Params::Drawn`],
//! the default; `--fixed-params` keeps the validation parameters). An
//! instance comes from a named stream ([`ISOLATED`], [`ARRIVALS`], [`SPIN`],
//! …): the `k`-th occurrence of a query in a stream is the same instance in
//! every run with the same seed, whatever the policy, the load or the driver
//! ([`Mix::sql`], `stride bench instances`).

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use stride::workload::{self, Query, Workload};

use super::isolated::Order;
use super::phases::Phases;
use crate::GlobalArgs;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Benchmark {
    /// The 22 TPC-H queries (--tpch SF[,SF]; default 0.1,1).
    Tpch,
    /// The 13 Star Schema Benchmark queries (--ssb SF[,SF]; default 1).
    Ssb,
}

/// Flags that define the workload mix.
#[derive(Args, Debug, Clone)]
pub struct MixArgs {
    /// Query classes: tpch (short = smallest --tpch SF, long = largest) or ssb.
    #[arg(long, value_enum, default_value = "tpch")]
    pub classes: Benchmark,
    /// How much more likely a short query is than a long one (seed 001: 3).
    #[arg(long, default_value_t = 3.0)]
    pub short_weight: f64,
    /// Only these queries (e.g. q1,q6).
    #[arg(long, value_delimiter = ',')]
    pub queries: Vec<String>,
    /// Seed of the arrival process and of the query draws.
    #[arg(long = "arrival-seed", default_value_t = 1)]
    pub seed: u64,
    /// Isolated latencies from `stride bench isolated --json FILE` instead of
    /// measuring them first.
    #[arg(long, value_name = "FILE")]
    pub isolated: Option<PathBuf>,
    /// Measured runs per query when measuring isolated latencies first.
    #[arg(long, default_value_t = 3)]
    pub isolated_runs: usize,
    /// Order of those runs: round by round over the queries, or each
    /// query's runs back to back (docs/experiments.md, "The isolated
    /// baseline").
    #[arg(long, value_enum, default_value_t = Order::default())]
    pub isolated_order: Order,
}

/// The instance stream of isolated runs (warm-up runs included).
pub const ISOLATED: &str = "isolated";
/// The instance stream of Poisson arrivals.
pub const ARRIVALS: &str = "arrivals";
/// The instance stream of closed-loop (spin) submissions.
pub const SPIN: &str = "spin";
/// The instance streams of `bench mixed`'s short and long queries.
pub const MIXED_SHORT: &str = "mixed-short";
pub const MIXED_LONG: &str = "mixed-long";

/// How submitted queries get their substitution parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Params {
    /// The validation parameters of `queries/` (`--fixed-params`): every
    /// submission of a query is the same text.
    Fixed,
    /// Drawn per submission from streams seeded by `seed` (the arrival seed).
    Drawn { seed: u64 },
}

impl Params {
    /// `--fixed-params` or drawn parameters seeded by `seed`.
    pub fn new(fixed: bool, seed: u64) -> Params {
        if fixed {
            Params::Fixed
        } else {
            Params::Drawn { seed }
        }
    }

    /// "fixed" or "drawn".
    pub fn name(self) -> &'static str {
        match self {
            Params::Fixed => "fixed",
            Params::Drawn { .. } => "drawn",
        }
    }

    /// The text of the `k`-th occurrence of `query` (of `workload`, on
    /// `schema`) in instance stream `stream`. A query the workload does not
    /// know runs as given.
    pub fn sql(
        self,
        workload: Workload,
        schema: &str,
        query: &Query,
        stream: &str,
        k: u64,
    ) -> String {
        let Params::Drawn { seed } = self else {
            return query.sql.clone();
        };
        let seed = workload::instance_seed(seed, &[stream, schema, &query.name], k);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        workload
            .instance(&query.name, &mut rng)
            .map_or_else(|| query.sql.clone(), |q| q.sql)
    }

    /// `{"params": "fixed"|"drawn", "params_seed": seed|null}` entries of
    /// a result document.
    pub fn annotate(self, doc: &mut Value) {
        doc["params"] = self.name().into();
        doc["params_seed"] = match self {
            Params::Fixed => Value::Null,
            Params::Drawn { seed } => seed.into(),
        };
    }
}

/// One class of queries: one schema, drawn with `weight`.
#[derive(Debug, Clone)]
pub struct Class {
    pub name: String,
    pub schema: String,
    pub weight: f64,
    /// The queries with their validation parameters (names and order).
    pub queries: Vec<Query>,
    /// The benchmark the queries come from: what draws their instances.
    pub workload: Workload,
}

#[derive(Debug, Clone)]
pub struct Mix {
    pub classes: Vec<Class>,
    pub params: Params,
}

/// The scale factors the mix runs on (defaults filled in).
pub fn scale_factors(global: &GlobalArgs, benchmark: Benchmark) -> Vec<f64> {
    let given = match benchmark {
        Benchmark::Tpch => &global.tpch,
        Benchmark::Ssb => &global.ssb,
    };
    if !given.is_empty() {
        return given.clone();
    }
    match benchmark {
        Benchmark::Tpch => vec![0.1, 1.0],
        Benchmark::Ssb => vec![1.0],
    }
}

/// Global flags with the mix's data requested (for the in-process engine).
pub fn with_data(global: &GlobalArgs, benchmark: Benchmark) -> GlobalArgs {
    let mut g = global.clone();
    match benchmark {
        Benchmark::Tpch => g.tpch = scale_factors(global, benchmark),
        Benchmark::Ssb => g.ssb = scale_factors(global, benchmark),
    }
    g
}

impl Mix {
    pub fn new(global: &GlobalArgs, args: &MixArgs) -> Result<Mix> {
        if !(args.short_weight > 0.0 && args.short_weight.is_finite()) {
            bail!("--short-weight must be a positive number");
        }
        let mut sfs = scale_factors(global, args.classes);
        sfs.sort_by(f64::total_cmp);
        sfs.dedup();
        let (prefix, workload_of): (&str, fn(f64) -> Workload) = match args.classes {
            Benchmark::Tpch => ("", |scale| Workload::Tpch { scale }),
            Benchmark::Ssb => ("ssb_", |_| Workload::Ssb),
        };
        let filter = |qs: Vec<Query>| -> Result<Vec<Query>> {
            if args.queries.is_empty() {
                return Ok(qs);
            }
            for name in &args.queries {
                if !qs.iter().any(|q| &q.name == name) {
                    bail!("--queries: no query named {name} in this benchmark");
                }
            }
            Ok(qs
                .into_iter()
                .filter(|q| args.queries.contains(&q.name))
                .collect())
        };
        let class = |name: &str, sf: f64, weight: f64| -> Result<Class> {
            let workload = workload_of(sf);
            Ok(Class {
                name: name.to_string(),
                schema: stride_storage::scale_factor_schema(prefix, sf),
                weight,
                queries: filter(workload.queries())?,
                workload,
            })
        };
        let classes = match sfs.as_slice() {
            [sf] => vec![class("all", *sf, 1.0)?],
            [short, long] => vec![
                class("short", *short, args.short_weight)?,
                class("long", *long, 1.0)?,
            ],
            _ => bail!("name one or two scale factors for the mix (short and long)"),
        };
        Ok(Mix {
            classes,
            params: Params::new(global.fixed_params, args.seed),
        })
    }

    /// The text of the `k`-th occurrence of query `query` of class `class`
    /// in instance stream `stream` ([`Params::sql`]).
    pub fn sql(&self, class: usize, query: usize, stream: &str, k: u64) -> String {
        let c = &self.classes[class];
        self.params
            .sql(c.workload, &c.schema, &c.queries[query], stream, k)
    }

    /// Draws a class by weight, then a query uniformly.
    pub fn draw(&self, rng: &mut impl Rng) -> (usize, usize) {
        let total: f64 = self.classes.iter().map(|c| c.weight).sum();
        let mut x = rng.random::<f64>() * total;
        let mut class = self.classes.len() - 1;
        for (i, c) in self.classes.iter().enumerate() {
            if x < c.weight {
                class = i;
                break;
            }
            x -= c.weight;
        }
        let query = rng.random_range(0..self.classes[class].queries.len());
        (class, query)
    }

    /// Expected isolated duration of one drawn query, in milliseconds.
    pub fn mean_isolated_ms(&self, iso: &Isolated) -> Result<f64> {
        let total: f64 = self.classes.iter().map(|c| c.weight).sum();
        let mut mean = 0.0;
        for c in &self.classes {
            let mut sum = 0.0;
            for q in &c.queries {
                sum += iso.median_ms(&c.schema, &q.name)?;
            }
            mean += c.weight / total * sum / c.queries.len() as f64;
        }
        Ok(mean)
    }

    pub fn to_json(&self) -> Value {
        Value::Array(
            self.classes
                .iter()
                .map(|c| {
                    json!({"name": c.name, "schema": c.schema, "weight": c.weight,
                        "queries": c.queries.iter().map(|q| q.name.clone()).collect::<Vec<_>>()})
                })
                .collect(),
        )
    }
}

/// Isolated latency of one query.
#[derive(Debug, Clone, Copy)]
pub struct IsoStat {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub rows: usize,
    /// Where the time of the run of median latency went (in-process only).
    pub phases: Option<Phases>,
}

/// Isolated latencies by schema and query.
#[derive(Debug, Clone, Default)]
pub struct Isolated {
    pub by_schema: HashMap<String, HashMap<String, IsoStat>>,
    pub system: String,
    pub runs: usize,
    /// How the runs were ordered ([`Order::name`]); empty when read from a
    /// file written before it was recorded.
    pub order: String,
    /// The substitution parameters of the runs: each run of a query is
    /// another instance when drawn, so a median is over instances; `None`
    /// when read from a file written before it was recorded.
    pub params: Option<Params>,
}

impl Isolated {
    pub fn median_ms(&self, schema: &str, query: &str) -> Result<f64> {
        self.get(schema, query).map(|s| s.median_ms)
    }

    pub fn get(&self, schema: &str, query: &str) -> Result<IsoStat> {
        self.by_schema
            .get(schema)
            .and_then(|m| m.get(query))
            .copied()
            .with_context(|| format!("no isolated latency for {schema}.{query}"))
    }

    pub fn to_json(&self) -> Value {
        let mut schemas = serde_json::Map::new();
        let mut names: Vec<_> = self.by_schema.keys().cloned().collect();
        names.sort();
        for s in names {
            let mut qs = serde_json::Map::new();
            let mut entries: Vec<_> = self.by_schema[&s].iter().collect();
            entries.sort_by_key(|(n, _)| query_order(n));
            for (q, st) in entries {
                qs.insert(
                    q.clone(),
                    json!({"median_ms": st.median_ms, "min_ms": st.min_ms,
                        "max_ms": st.max_ms, "rows": st.rows,
                        "phases": st.phases.map(Phases::to_json)}),
                );
            }
            schemas.insert(s, Value::Object(qs));
        }
        let mut doc = json!({"kind": "isolated", "system": self.system, "runs": self.runs,
            "order": self.order, "schemas": Value::Object(schemas)});
        if let Some(p) = self.params {
            p.annotate(&mut doc);
        }
        doc
    }

    pub fn from_json(v: &Value) -> Result<Isolated> {
        let schemas = v
            .get("schemas")
            .and_then(Value::as_object)
            .context("isolated latencies: no \"schemas\" object")?;
        let mut by_schema = HashMap::new();
        for (schema, qs) in schemas {
            let qs = qs
                .as_object()
                .with_context(|| format!("isolated latencies: {schema} is not an object"))?;
            let mut m = HashMap::new();
            for (q, st) in qs {
                let num = |k: &str| st.get(k).and_then(Value::as_f64);
                let median_ms = num("median_ms").with_context(|| {
                    format!("isolated latencies: {schema}.{q} has no median_ms")
                })?;
                m.insert(
                    q.clone(),
                    IsoStat {
                        median_ms,
                        min_ms: num("min_ms").unwrap_or(median_ms),
                        max_ms: num("max_ms").unwrap_or(median_ms),
                        rows: num("rows").unwrap_or(0.0) as usize,
                        phases: st.get("phases").and_then(Phases::from_json),
                    },
                );
            }
            by_schema.insert(schema.clone(), m);
        }
        Ok(Isolated {
            by_schema,
            system: v.get("system").and_then(Value::as_str).unwrap_or("").into(),
            runs: v.get("runs").and_then(Value::as_u64).unwrap_or(0) as usize,
            order: v.get("order").and_then(Value::as_str).unwrap_or("").into(),
            params: match v.get("params").and_then(Value::as_str) {
                Some("fixed") => Some(Params::Fixed),
                Some("drawn") => Some(Params::Drawn {
                    seed: v.get("params_seed").and_then(Value::as_u64).unwrap_or(0),
                }),
                _ => None,
            },
        })
    }

    pub fn read(path: &std::path::Path) -> Result<Isolated> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let v: Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        Isolated::from_json(&v).with_context(|| format!("in {}", path.display()))
    }
}

/// Sort key that puts q2 before q10 and q1.2 before q2.1.
pub fn query_order(name: &str) -> Vec<u32> {
    name.trim_start_matches('q')
        .split('.')
        .map(|p| p.parse().unwrap_or(u32::MAX))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn global(tpch: Vec<f64>) -> GlobalArgs {
        GlobalArgs {
            tpch,
            ssb: vec![],
            tpcds: vec![],
            seed: 42,
            workers: None,
            morsel_rows: None,
            policy: None,
            no_pin: false,
            no_preemption: false,
            morsels_per_task: None,
            worker_os_priority: None,
            worker_os_slice_us: None,
            topology: None,
            placement: None,
            affinity: None,
            sharing: None,
            sharing_cycle_ms: None,
            sharing_max_batch: None,
            handover_morsel_us: None,
            slice_ms: None,
            self_tuning: None,
            fixed_params: false,
            estimates: None,
            memory_limit: None,
            temp_dir: None,
            plan_cache_size: None,
            temp_file_limit: None,
            query_memory_limit: None,
            allocation_limit: None,
            data_dir: None,
            in_memory: false,
            checkpoint_log_size: None,
            bulk_write_size: None,
        }
    }

    fn args() -> MixArgs {
        MixArgs {
            classes: Benchmark::Tpch,
            short_weight: 3.0,
            queries: vec![],
            seed: 1,
            isolated: None,
            isolated_runs: 1,
            isolated_order: Order::Interleaved,
        }
    }

    #[test]
    fn short_long_three_to_one() {
        let mix = Mix::new(&global(vec![1.0, 0.1]), &args()).unwrap();
        assert_eq!(mix.classes[0].schema, "sf0_1");
        assert_eq!(mix.classes[1].schema, "sf1");
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let n = 40_000;
        let short = (0..n).filter(|_| mix.draw(&mut rng).0 == 0).count();
        let share = short as f64 / n as f64;
        assert!((share - 0.75).abs() < 0.01, "short share {share}");
    }

    #[test]
    fn bad_mixes() {
        assert!(Mix::new(&global(vec![0.1, 1.0, 10.0]), &args()).is_err());
        let mut a = args();
        a.queries = vec!["q99".into()];
        assert!(Mix::new(&global(vec![0.1]), &a).is_err());
    }

    #[test]
    fn isolated_round_trip() {
        let mut iso = Isolated::default();
        iso.by_schema.entry("sf0_1".into()).or_default().insert(
            "q6".into(),
            IsoStat {
                median_ms: 2.5,
                min_ms: 2.0,
                max_ms: 3.0,
                rows: 1,
                phases: Some(Phases {
                    planning_ms: 1.0,
                    queued_ms: 0.0,
                    running_ms: 1.5,
                    waking_ms: 0.0,
                    cpu_ms: 2.5,
                }),
            },
        );
        let back = Isolated::from_json(&iso.to_json()).unwrap();
        assert_eq!(back.median_ms("sf0_1", "q6").unwrap(), 2.5);
        assert_eq!(
            back.get("sf0_1", "q6").unwrap().phases,
            iso.get("sf0_1", "q6").unwrap().phases
        );
        assert!(back.median_ms("sf1", "q6").is_err());
        assert_eq!(back.params, None, "not recorded");
        iso.params = Some(Params::Drawn { seed: 9 });
        assert_eq!(
            Isolated::from_json(&iso.to_json()).unwrap().params,
            iso.params
        );
        assert_eq!(query_order("q10"), vec![10]);
        assert!(query_order("q2") < query_order("q10"));
    }

    #[test]
    fn drawn_instances_vary_per_occurrence_and_repeat_per_seed() {
        let mix = Mix::new(&global(vec![0.1, 1.0]), &args()).unwrap();
        assert_eq!(mix.params, Params::Drawn { seed: 1 });
        let q1 = 0; // Q1: DELTA takes 61 values, so 20 draws repeat few
        let texts: Vec<String> = (0..20).map(|k| mix.sql(0, q1, ARRIVALS, k)).collect();
        let mut distinct = texts.clone();
        distinct.sort();
        distinct.dedup();
        assert!(distinct.len() > 10, "{} distinct of 20", distinct.len());
        assert_eq!(mix.sql(0, q1, ARRIVALS, 3), texts[3]);
        // Other streams, classes and seeds draw other instances.
        let other_stream: Vec<String> = (0..20).map(|k| mix.sql(0, q1, SPIN, k)).collect();
        assert_ne!(texts, other_stream);
        let other_class: Vec<String> = (0..20).map(|k| mix.sql(1, q1, ARRIVALS, k)).collect();
        assert_ne!(texts, other_class);
        let mut a = args();
        a.seed = 2;
        let reseeded = Mix::new(&global(vec![0.1, 1.0]), &a).unwrap();
        assert_ne!(
            texts,
            (0..20)
                .map(|k| reseeded.sql(0, q1, ARRIVALS, k))
                .collect::<Vec<_>>()
        );
        // --fixed-params: the validation text every time.
        let mut g = global(vec![0.1, 1.0]);
        g.fixed_params = true;
        let fixed = Mix::new(&g, &args()).unwrap();
        assert_eq!(fixed.params, Params::Fixed);
        for k in 0..5 {
            assert_eq!(
                fixed.sql(0, q1, ARRIVALS, k),
                fixed.classes[0].queries[q1].sql
            );
        }
    }
}

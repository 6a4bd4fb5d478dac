//! The feedback store: remaining-work estimates for SRPT and IF-SRPT
//! (seed 000 §3.2), learned from the queries that ran.
//!
//! After a query ran, the CPU time and morsel count of each of its task sets
//! (pipelines) are recorded under its [`PlanKey`]; the next query with the
//! same key gets them back as [`TaskSetEstimate`]s. The store sees a key as
//! an opaque fingerprint with, in `instance` mode, the query's estimated
//! rows and its pipelines' cold-start weights: the front end that planned
//! the query makes the key (the SQL front end's `history` module masks
//! literals and reads cardinality estimates). How recorded costs carry over
//! to a new query is the [`EstimateMode`]:
//!
//! * `off` — no estimates: SRPT ranks by attained service.
//! * `plan` — keyed by the physical plan as EXPLAIN prints it, literals
//!   included ([`PlanKey::exact`]): only a query whose every literal was
//!   seen before gets an estimate (a benchmark that repeats the same texts
//!   memorizes them).
//! * `shape` — keyed by the plan's *shape* ([`PlanKey::shape`]): the plan
//!   with every literal masked and each table's row count rounded to its
//!   power of two, so all instances of a query template on the same data
//!   share one record; the recorded costs are given as they are.
//! * `instance` (the default) — keyed by shape, scaled to the instance
//!   ([`PlanKey::instance`]): each pipeline's cost is recorded per
//!   *estimated row* of its query (the sum of the estimated output rows of
//!   every node of its plan, from the same cardinality estimates that
//!   choose the hash joins' build sides), and a new instance gets that
//!   cost times its own estimated rows. A shape never seen gets a cold-start
//!   estimate: its estimated rows times a cost per estimated row calibrated
//!   on every query recorded so far (the geometric mean; [`DEFAULT_COST_PER_ROW`]
//!   before the first), split over its pipelines by their weights.
//!
//! A pipeline counts as *elastic* when it produced at least two morsels per
//! worker, i.e. every worker could take part; a pipeline with fewer morsels
//! cannot use the machine, the seeds' inelastic job (cold-start estimates
//! count every pipeline as elastic).
//!
//! Costs are smoothed over runs (an exponential moving average with weight
//! [`NEW_WEIGHT`] on the newest run). The map is bounded: when it holds
//! [`CAPACITY`] plans it is cleared (plans come back on their next run).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use stride_exec::PhysicalPlan;
use stride_sched::{QueryStats, TaskSetEstimate};

/// Most plans remembered.
pub const CAPACITY: usize = 10_000;
/// Weight of the newest run in the moving average.
pub const NEW_WEIGHT: f64 = 0.5;
/// CPU seconds per estimated row of a cold-start estimate before any query
/// was recorded: the geometric mean over TPC-H's 22 queries at SF 0.1 on
/// the 2-core development machine was 87 ns (single queries: 8 to 460 ns).
pub const DEFAULT_COST_PER_ROW: f64 = 90e-9;
/// Weight of the newest run in the calibrated cost per estimated row (a
/// moving average of its logarithm; the first runs count as a plain mean).
const CALIBRATION_WEIGHT: f64 = 1.0 / 64.0;

/// How plans are keyed and how recorded costs carry over to a new query
/// (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EstimateMode {
    /// No estimates.
    Off,
    /// Keyed by the plan text with its literals: exact repeats only.
    Plan,
    /// Keyed by the plan's shape, recorded costs as they are.
    Shape,
    /// Keyed by shape, costs scaled by the instance's estimated rows, and a
    /// cold start for new shapes.
    #[default]
    Instance,
}

impl EstimateMode {
    /// Every mode, in the order of [`EstimateMode::name`]'s list.
    pub const ALL: [EstimateMode; 4] = [
        EstimateMode::Off,
        EstimateMode::Plan,
        EstimateMode::Shape,
        EstimateMode::Instance,
    ];

    /// `off`, `plan`, `shape` or `instance`.
    pub fn name(self) -> &'static str {
        match self {
            EstimateMode::Off => "off",
            EstimateMode::Plan => "plan",
            EstimateMode::Shape => "shape",
            EstimateMode::Instance => "instance",
        }
    }

    /// The mode named `name` (case-insensitive).
    pub fn parse(name: &str) -> Option<EstimateMode> {
        EstimateMode::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(name.trim()))
    }

    fn from_u8(v: u8) -> EstimateMode {
        EstimateMode::ALL
            .get(usize::from(v))
            .copied()
            .unwrap_or_default()
    }

    fn as_u8(self) -> u8 {
        match self {
            EstimateMode::Off => 0,
            EstimateMode::Plan => 1,
            EstimateMode::Shape => 2,
            EstimateMode::Instance => 3,
        }
    }
}

/// What the store needs to know of one query, computed before it runs:
/// its key under the mode in force, its estimated rows and its pipelines'
/// cold-start weights.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanKey {
    mode: EstimateMode,
    key: u64,
    /// The query's estimated rows (`instance` mode; else 0).
    rows: f64,
    /// Cold-start weight of each pipeline, in task-set order (`instance`
    /// mode; else empty).
    pipelines: Vec<f64>,
}

impl PlanKey {
    /// The key of a query in `off` mode: it gets no estimate and records
    /// nothing.
    pub fn off() -> PlanKey {
        PlanKey {
            mode: EstimateMode::Off,
            key: 0,
            rows: 0.0,
            pipelines: Vec::new(),
        }
    }

    /// The key of `plan` mode: the plan text with its literals.
    pub fn exact(plan: &PhysicalPlan) -> PlanKey {
        PlanKey {
            mode: EstimateMode::Plan,
            key: fingerprint(plan),
            rows: 0.0,
            pipelines: Vec::new(),
        }
    }

    /// The key of `shape` mode: `shape` is the plan's text with its
    /// literals masked.
    pub fn shape(shape: &str) -> PlanKey {
        PlanKey {
            mode: EstimateMode::Shape,
            key: hash(shape),
            rows: 0.0,
            pipelines: Vec::new(),
        }
    }

    /// The key of `instance` mode: the plan's `shape`, its estimated `rows`
    /// and the cold-start weight of each of its pipelines, in task-set
    /// order.
    pub fn instance(shape: &str, rows: f64, pipelines: Vec<f64>) -> PlanKey {
        PlanKey {
            mode: EstimateMode::Instance,
            key: hash(shape),
            rows,
            pipelines,
        }
    }

    /// The mode the key was made under.
    pub fn mode(&self) -> EstimateMode {
        self.mode
    }
}

/// One record: per task set, seconds of CPU (`plan`, `shape`) or seconds
/// per estimated row (`instance`), and the elastic flag.
#[derive(Debug, Clone)]
struct Record {
    work: Vec<f64>,
    elastic: Vec<bool>,
}

#[derive(Debug)]
struct Inner {
    plans: HashMap<(EstimateMode, u64), Record>,
    /// Moving average of ln(CPU seconds / estimated row) over recorded
    /// queries (`instance` mode), and how many went into it.
    log_cost_per_row: f64,
    calibrated: u64,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            plans: HashMap::new(),
            log_cost_per_row: DEFAULT_COST_PER_ROW.ln(),
            calibrated: 0,
        }
    }
}

/// Recorded costs of the queries that ran, and the mode in force.
#[derive(Debug)]
pub struct WorkHistory {
    /// [`EstimateMode::as_u8`]; Relaxed: a query reads it once, before it
    /// computes its key, and carries the mode in the key.
    mode: AtomicU8,
    inner: Mutex<Inner>,
}

impl Default for WorkHistory {
    /// An empty history in the default mode (`instance`).
    fn default() -> Self {
        WorkHistory {
            mode: AtomicU8::new(EstimateMode::default().as_u8()),
            inner: Mutex::default(),
        }
    }
}

/// The fingerprint of a physical plan as EXPLAIN prints it (literals
/// included): the key of `plan` mode.
pub fn fingerprint(plan: &PhysicalPlan) -> u64 {
    hash(&plan.to_string())
}

fn hash(text: &str) -> u64 {
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

impl WorkHistory {
    /// An empty history in `mode`.
    pub fn new(mode: EstimateMode) -> WorkHistory {
        let h = WorkHistory::default();
        h.set_mode(mode);
        h
    }

    /// The mode in force.
    pub fn mode(&self) -> EstimateMode {
        EstimateMode::from_u8(self.mode.load(Ordering::Relaxed))
    }

    /// Switches the mode; queries planned from now on use it. Records of
    /// every mode are kept (each under its own keys).
    pub fn set_mode(&self, mode: EstimateMode) {
        self.mode.store(mode.as_u8(), Ordering::Relaxed);
    }

    /// The estimated CPU work of each task set of the query `key`
    /// describes; `None` in `off` mode and for a plan (`plan`) or shape
    /// (`shape`) not recorded before.
    pub fn estimates(&self, key: &PlanKey) -> Option<Vec<TaskSetEstimate>> {
        let estimate = |work: f64, elastic: bool| TaskSetEstimate {
            work: Duration::try_from_secs_f64(work.max(0.0)).unwrap_or(Duration::MAX),
            elastic,
        };
        let inner = self.lock();
        match key.mode {
            EstimateMode::Off => None,
            EstimateMode::Plan | EstimateMode::Shape => {
                let r = inner.plans.get(&(key.mode, key.key))?;
                Some(
                    r.work
                        .iter()
                        .zip(&r.elastic)
                        .map(|(&w, &e)| estimate(w, e))
                        .collect(),
                )
            }
            EstimateMode::Instance => {
                let rows = key.rows.max(1.0);
                match inner.plans.get(&(key.mode, key.key)) {
                    Some(r) if r.work.len() == key.pipelines.len() => Some(
                        r.work
                            .iter()
                            .zip(&r.elastic)
                            .map(|(&w, &e)| estimate(w * rows, e))
                            .collect(),
                    ),
                    _ => {
                        let total = inner.log_cost_per_row.exp() * rows;
                        let weights: f64 = key.pipelines.iter().sum();
                        (weights > 0.0).then(|| {
                            key.pipelines
                                .iter()
                                .map(|w| estimate(total * w / weights, true))
                                .collect()
                        })
                    }
                }
            }
        }
    }

    /// Records a completed run of the query `key` describes, on `workers`
    /// workers.
    pub fn record(&self, key: &PlanKey, stats: &QueryStats, workers: usize) {
        if key.mode == EstimateMode::Off
            || stats.task_set_cpu.is_empty()
            || stats.task_set_cpu.len() != stats.task_set_morsels.len()
        {
            return;
        }
        // In `instance` mode costs are per estimated row.
        let per = if key.mode == EstimateMode::Instance {
            key.rows.max(1.0)
        } else {
            1.0
        };
        let run = Record {
            work: stats
                .task_set_cpu
                .iter()
                .map(|w| w.as_secs_f64() / per)
                .collect(),
            elastic: stats
                .task_set_morsels
                .iter()
                .map(|&m| m >= 2 * workers as u64)
                .collect(),
        };
        let mut inner = self.lock();
        if key.mode == EstimateMode::Instance {
            let total: f64 = run.work.iter().sum();
            if total > 0.0 {
                // A plain mean of the logarithms over the first runs, then
                // a moving average.
                inner.calibrated += 1;
                let weight = (1.0 / inner.calibrated as f64).max(CALIBRATION_WEIGHT);
                inner.log_cost_per_row += weight * (total.ln() - inner.log_cost_per_row);
            }
        }
        if inner.plans.len() >= CAPACITY && !inner.plans.contains_key(&(key.mode, key.key)) {
            inner.plans.clear();
        }
        match inner.plans.get_mut(&(key.mode, key.key)) {
            Some(old) if old.work.len() == run.work.len() => {
                for (o, n) in old.work.iter_mut().zip(&run.work) {
                    *o = *o * (1.0 - NEW_WEIGHT) + n * NEW_WEIGHT;
                }
                old.elastic = run.elastic;
            }
            _ => {
                inner.plans.insert((key.mode, key.key), run);
            }
        }
    }

    /// The calibrated CPU seconds per estimated row of cold-start estimates.
    pub fn cost_per_row(&self) -> f64 {
        self.lock().log_cost_per_row.exp()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(cpu_ms: &[u64], morsels: &[u64]) -> QueryStats {
        QueryStats {
            task_set_cpu: cpu_ms.iter().map(|&m| Duration::from_millis(m)).collect(),
            task_set_morsels: morsels.to_vec(),
            ..Default::default()
        }
    }

    fn key(mode: EstimateMode, key: u64, rows: f64, pipelines: usize) -> PlanKey {
        PlanKey {
            mode,
            key,
            rows,
            pipelines: vec![1.0; pipelines],
        }
    }

    fn ms(e: &TaskSetEstimate) -> f64 {
        e.work.as_secs_f64() * 1e3
    }

    #[test]
    fn plan_mode_records_smooths_and_classifies() {
        let h = WorkHistory::new(EstimateMode::Plan);
        let k1 = key(EstimateMode::Plan, 1, 0.0, 0);
        assert!(h.estimates(&k1).is_none());
        h.record(&k1, &stats(&[10, 2], &[40, 1]), 4);
        let e = h.estimates(&k1).unwrap();
        assert_eq!(e[0].work, Duration::from_millis(10));
        assert!(e[0].elastic);
        assert!(!e[1].elastic);
        h.record(&k1, &stats(&[20, 2], &[40, 1]), 4);
        let e = h.estimates(&k1).unwrap();
        assert_eq!(e[0].work, Duration::from_millis(15));
        // A run of a different shape replaces the record.
        h.record(&k1, &stats(&[7], &[1]), 4);
        assert_eq!(h.estimates(&k1).unwrap().len(), 1);
        // Stats without per-task-set costs are ignored.
        let k2 = key(EstimateMode::Plan, 2, 0.0, 0);
        h.record(&k2, &QueryStats::default(), 4);
        assert!(h.estimates(&k2).is_none());
        // Off records and estimates nothing.
        let off = key(EstimateMode::Off, 1, 0.0, 0);
        h.record(&off, &stats(&[10], &[10]), 4);
        assert!(h.estimates(&off).is_none());
    }

    #[test]
    fn instance_estimates_scale_with_estimated_rows() {
        let h = WorkHistory::new(EstimateMode::Instance);
        // Two pipelines: 30 ms and 10 ms at 1000 estimated rows.
        let seen = key(EstimateMode::Instance, 7, 1000.0, 2);
        h.record(&seen, &stats(&[30, 10], &[40, 40]), 2);
        // The same shape at twice the rows: twice the work, per pipeline.
        let bigger = key(EstimateMode::Instance, 7, 2000.0, 2);
        let e = h.estimates(&bigger).unwrap();
        assert!((ms(&e[0]) - 60.0).abs() < 1e-6 && (ms(&e[1]) - 20.0).abs() < 1e-6);
        let smaller = key(EstimateMode::Instance, 7, 100.0, 2);
        let e = h.estimates(&smaller).unwrap();
        assert!((ms(&e[0]) - 3.0).abs() < 1e-6, "{e:?}");
        // Shape mode gives the recorded costs unscaled, under its own keys.
        let shape = key(EstimateMode::Shape, 7, 0.0, 0);
        assert!(h.estimates(&shape).is_none());
        h.record(&shape, &stats(&[30, 10], &[40, 40]), 2);
        assert_eq!(ms(&h.estimates(&shape).unwrap()[0]), 30.0);
    }

    #[test]
    fn cold_start_from_cardinalities() {
        let h = WorkHistory::new(EstimateMode::Instance);
        // Nothing recorded: the default cost per row, split by weight.
        let new = PlanKey {
            mode: EstimateMode::Instance,
            key: 1,
            rows: 1e6,
            pipelines: vec![3.0, 1.0],
        };
        let e = h.estimates(&new).unwrap();
        let total = DEFAULT_COST_PER_ROW * 1e6 * 1e3;
        assert!((ms(&e[0]) - 0.75 * total).abs() < 1e-9 && (ms(&e[1]) - 0.25 * total).abs() < 1e-9);
        assert!(e.iter().all(|t| t.elastic));
        // Recorded queries calibrate the cost per row: two shapes at 100 and
        // 400 ns per row give their geometric mean, 200 ns.
        h.record(
            &key(EstimateMode::Instance, 2, 1e5, 1),
            &stats(&[10], &[9]),
            2,
        );
        h.record(
            &key(EstimateMode::Instance, 3, 1e5, 1),
            &stats(&[40], &[9]),
            2,
        );
        assert!(
            (h.cost_per_row() - 200e-9).abs() < 1e-12,
            "{}",
            h.cost_per_row()
        );
        let e = h.estimates(&new).unwrap();
        assert!((ms(&e[0]) + ms(&e[1]) - 200.0).abs() < 1e-6);
        // A record whose pipelines do not match the plan's falls back to
        // the cold start.
        h.record(
            &key(EstimateMode::Instance, 1, 1e6, 3),
            &stats(&[1, 1, 1], &[9, 9, 9]),
            2,
        );
        assert_eq!(h.estimates(&new).unwrap().len(), 2);
    }

    #[test]
    fn modes_by_name() {
        assert_eq!(EstimateMode::default(), EstimateMode::Instance);
        assert_eq!(EstimateMode::parse(" Shape "), Some(EstimateMode::Shape));
        assert_eq!(EstimateMode::parse("nope"), None);
        for m in EstimateMode::ALL {
            assert_eq!(EstimateMode::parse(m.name()), Some(m));
            assert_eq!(EstimateMode::from_u8(m.as_u8()), m);
            assert_eq!(WorkHistory::new(m).mode(), m);
        }
        assert_eq!(WorkHistory::default().mode(), EstimateMode::Instance);
    }
}

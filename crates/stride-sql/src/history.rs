//! Remaining-work estimates for SRPT and IF-SRPT (seed 000 §3.2), learned
//! from the queries that ran.
//!
//! After a query ran, the CPU time and morsel count of each of its task sets
//! (pipelines) are recorded under a key of its plan; the next query with the
//! same key gets them back as [`TaskSetEstimate`]s. How plans are keyed and
//! how recorded costs carry over to a new query is the [`EstimateMode`]:
//!
//! * `off` — no estimates: SRPT ranks by attained service.
//! * `plan` — keyed by the physical plan as EXPLAIN prints it, literals
//!   included: only a query whose every literal was seen before gets an
//!   estimate (a benchmark that repeats the same texts memorizes them).
//! * `shape` — keyed by the plan's *shape* ([`shape`]): the plan with every
//!   literal masked and each table's row count rounded to its power of two,
//!   so all instances of a query template on the same data share one
//!   record; the recorded costs are given as they are.
//! * `instance` (the default) — keyed by shape, scaled to the instance:
//!   each pipeline's cost is recorded per *estimated row* of its query (the
//!   sum of the estimated output rows of every node of the optimized
//!   logical plan, [`estimated_rows`], from the same cardinality estimates
//!   that choose the hash joins' build sides), and a new instance gets that
//!   cost times its own estimated rows. A shape never seen gets a cold-start
//!   estimate: its estimated rows times a cost per estimated row calibrated
//!   on every query recorded so far (the geometric mean; [`DEFAULT_COST_PER_ROW`]
//!   before the first), split over its pipelines by their sources' rows.
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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion_common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion_common::ScalarValue;
use datafusion_expr::LogicalPlan;
use datafusion_physical_expr::expressions::{Column, Literal};
use stride_exec::operator::hash_join::{JoinModes, SideMode};
use stride_exec::plan::{AggregateSpec, ExprRef, PlanTextStyle};
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
/// A cold-start pipeline that reads another pipeline's output (a hash
/// table, an aggregate, a sorted buffer) weighs this share of the largest
/// table scan of its query.
const BREAKER_OUTPUT_SHARE: f64 = 0.05;

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

/// What the history needs to know of one query, computed before it runs
/// ([`WorkHistory::key`]): its key under the mode in force, its estimated
/// rows and its pipelines' cold-start weights.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanKey {
    mode: EstimateMode,
    key: u64,
    /// [`estimated_rows`] of the query (`instance` mode; else 0).
    rows: f64,
    /// Cold-start weight of each pipeline, in task-set order (`instance`
    /// mode; else empty).
    pipelines: Vec<f64>,
}

impl PlanKey {
    /// The key of `plan` mode: the plan text with its literals.
    pub fn exact(plan: &PhysicalPlan) -> PlanKey {
        PlanKey {
            mode: EstimateMode::Plan,
            key: fingerprint(plan),
            rows: 0.0,
            pipelines: Vec::new(),
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

    /// The key of a query about to run: `physical` is its plan, `logical`
    /// the optimized logical plan it was lowered from (its cardinality
    /// estimates scale `instance` estimates).
    pub fn key(&self, physical: &PhysicalPlan, logical: &LogicalPlan) -> PlanKey {
        let mode = self.mode();
        match mode {
            EstimateMode::Off => PlanKey {
                mode,
                key: 0,
                rows: 0.0,
                pipelines: Vec::new(),
            },
            EstimateMode::Plan => PlanKey::exact(physical),
            EstimateMode::Shape => PlanKey {
                mode,
                key: hash(&shape(physical)),
                rows: 0.0,
                pipelines: Vec::new(),
            },
            EstimateMode::Instance => PlanKey {
                mode,
                key: hash(&shape(physical)),
                rows: estimated_rows(logical),
                pipelines: pipeline_weights(physical),
            },
        }
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

/// The estimated rows a query processes: the sum, over every node of its
/// optimized logical plan, of the node's estimated output rows
/// ([`crate::lower::estimate_rows`]; table scans count their tables' rows).
pub fn estimated_rows(plan: &LogicalPlan) -> f64 {
    let mut rows = 0.0;
    // The closure never fails, so neither does the walk.
    let _ = plan.apply(|node| {
        let r = crate::lower::estimate_rows(node);
        if r.is_finite() {
            rows += r.max(0.0);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    rows
}

/// The shape of a physical plan: its text as EXPLAIN prints it, with every
/// literal masked (a NULL of its type), columns by index, aggregates named
/// by function and masked arguments, and each table's row count rounded to
/// its power of two (`rows≈2^k`).
pub fn shape(plan: &PhysicalPlan) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = plan.write_tree(&mut out, &ShapeText, 0);
    out
}

/// The shape view of a plan's text (see [`shape`]).
struct ShapeText;

impl PlanTextStyle for ShapeText {
    fn expr(&self, e: &ExprRef) -> String {
        masked(e)
    }

    fn rows(&self, rows: usize) -> String {
        format!("rows≈2^{}", magnitude(rows))
    }

    fn aggregate(&self, a: &AggregateSpec) -> String {
        let args: Vec<String> = a.function.expressions().iter().map(masked).collect();
        let filter = a
            .filter
            .as_ref()
            .map_or_else(String::new, |f| format!(" filter {}", masked(f)));
        format!("{}({}){filter}", a.function.fun().name(), args.join(", "))
    }
}

/// ⌈log2 rows⌉ (0 for an empty or one-row table).
fn magnitude(rows: usize) -> u32 {
    rows.max(1).next_power_of_two().trailing_zeros()
}

/// An expression as it displays with every literal replaced by a NULL of
/// its type and every column shown by its index only (`@4`).
///
/// Columns lose their names because a column computed above an aggregate
/// is named after the aggregate's expression, literals included
/// (`sum(CASE WHEN nation = Utf8("BRAZIL") …)@1`). Should an expression
/// refuse the replacement, its text is masked token by token instead
/// ([`mask_token`]).
fn masked(expr: &ExprRef) -> String {
    let canonical = Arc::clone(expr).transform(|e| {
        if let Some(l) = e.downcast_ref::<Literal>() {
            let null = ScalarValue::try_from(l.value().data_type())?;
            return Ok(Transformed::yes(Arc::new(Literal::new(null)) as ExprRef));
        }
        if let Some(c) = e.downcast_ref::<Column>() {
            return Ok(Transformed::yes(
                Arc::new(Column::new("", c.index())) as ExprRef
            ));
        }
        Ok(Transformed::no(e))
    });
    match canonical {
        Ok(t) => t.data.to_string(),
        Err(_) => masked_text(expr),
    }
}

/// [`masked`] on the text: each literal's display (a physical literal
/// displays as its bare value: `BUILDING`, `1995-03-15`, `0.05`) replaced by
/// `$` where it stands as a token of its own, and each column's name dropped.
fn masked_text(expr: &ExprRef) -> String {
    let mut literals = Vec::new();
    let mut columns = Vec::new();
    collect_leaves(expr, &mut literals, &mut columns);
    let mut text = expr.to_string();
    // Longer names first, so that a name ending another one (x, max) does
    // not cut the longer one.
    columns.sort();
    columns.dedup();
    columns.sort_by_key(|c| std::cmp::Reverse(c.len()));
    for column in &columns {
        if let Some(at) = column.rfind('@') {
            text = text.replace(column.as_str(), &column[at..]);
        }
    }
    // Longer first, so that a literal that is part of another one (1 in 11)
    // does not break the longer one up.
    literals.sort();
    literals.dedup();
    literals.sort_by_key(|l| std::cmp::Reverse(l.len()));
    for literal in literals.iter().filter(|l| !l.is_empty()) {
        text = mask_token(&text, literal);
    }
    text
}

/// The display texts of the literals and of the columns in `expr`.
fn collect_leaves(expr: &ExprRef, literals: &mut Vec<String>, columns: &mut Vec<String>) {
    if let Some(l) = expr.downcast_ref::<Literal>() {
        literals.push(l.value().to_string());
        return;
    }
    if let Some(c) = expr.downcast_ref::<Column>() {
        columns.push(c.to_string());
        return;
    }
    for child in expr.children() {
        collect_leaves(child, literals, columns);
    }
}

/// `text` with every occurrence of `token` that is not glued to a word,
/// number or column index replaced by `$`.
fn mask_token(text: &str, token: &str) -> String {
    let glued_before = |c: char| c.is_alphanumeric() || matches!(c, '_' | '@' | '#' | '.' | '$');
    let glued_after = |c: char| c.is_alphanumeric() || matches!(c, '_' | '.');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut prev: Option<char> = None;
    while let Some(pos) = rest.find(token) {
        let before = rest[..pos].chars().next_back().or(prev);
        let after = rest[pos + token.len()..].chars().next();
        let free = !before.is_some_and(glued_before) && !after.is_some_and(glued_after);
        out.push_str(&rest[..pos]);
        if free {
            out.push('$');
            prev = Some('$');
        } else {
            out.push_str(token);
            prev = token.chars().next_back();
        }
        rest = &rest[pos + token.len()..];
    }
    out.push_str(rest);
    out
}

/// The cold-start weight of each pipeline of `plan`, in the order the
/// executor's compiler (`stride_exec::pipeline::compile`) emits them as task
/// sets: the rows of the table (or values) a pipeline scans, and for a
/// pipeline that reads another one's output [`BREAKER_OUTPUT_SHARE`] of the
/// largest scan.
pub fn pipeline_weights(plan: &PhysicalPlan) -> Vec<f64> {
    let mut pipelines = Vec::new();
    let open = walk_pipelines(plan, &mut pipelines);
    pipelines.push(open);
    let largest = pipelines.iter().flatten().copied().fold(1.0_f64, f64::max);
    pipelines
        .into_iter()
        .map(|w| w.unwrap_or(largest * BREAKER_OUTPUT_SHARE).max(1.0))
        .collect()
}

/// Walks `plan` as the compiler does: closes (pushes) every pipeline that
/// ends inside it, and returns the weight of the pipeline left open at its
/// top (`None`: it reads a breaker's output).
fn walk_pipelines(plan: &PhysicalPlan, closed: &mut Vec<Option<f64>>) -> Option<f64> {
    match plan {
        PhysicalPlan::Scan { table, .. } => Some(table.num_rows() as f64),
        PhysicalPlan::Values { batches, .. } => {
            Some(batches.iter().map(|b| b.num_rows()).sum::<usize>() as f64)
        }
        PhysicalPlan::Filter { input, .. } | PhysicalPlan::Projection { input, .. } => {
            walk_pipelines(input, closed)
        }
        PhysicalPlan::GroupingSets { input, sets, .. } => {
            walk_pipelines(input, closed).map(|w| w * sets.len() as f64)
        }
        PhysicalPlan::HashJoin(j) => {
            let (build, probe) = match j.build_side {
                stride_exec::plan::BuildSide::Left => (&j.left, &j.right),
                stride_exec::plan::BuildSide::Right => (&j.right, &j.left),
            };
            let b = walk_pipelines(build, closed);
            closed.push(b);
            // The pipeline that links the build rows into the hash table.
            closed.push(None);
            let p = walk_pipelines(probe, closed);
            let build_pass =
                JoinModes::new(j.join_type, j.build_side).is_ok_and(|m| m.build != SideMode::None);
            if build_pass {
                // The probe pipeline and the build side's pass both end in
                // a buffer that the next pipeline reads.
                closed.push(p);
                closed.push(None);
                None
            } else {
                p
            }
        }
        PhysicalPlan::Aggregate { input, .. }
        | PhysicalPlan::Sort { input, .. }
        | PhysicalPlan::Limit { input, .. } => {
            let i = walk_pipelines(input, closed);
            closed.push(i);
            None
        }
        PhysicalPlan::Union { inputs, .. } => {
            for input in inputs {
                let i = walk_pipelines(input, closed);
                closed.push(i);
            }
            None
        }
        PhysicalPlan::Window(w) => {
            let i = walk_pipelines(&w.input, closed);
            closed.push(i);
            if !w.partition_by.is_empty() || !w.order_by.is_empty() {
                // The sort ends the input's pipeline; the window's sink
                // reads the sorted rows.
                closed.push(None);
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Engine, EngineConfig};

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

    /// An engine with `t(x, y)`: x = 1 … 4000, y cycling over four words.
    fn engine() -> Arc<Engine> {
        let engine = Engine::new(EngineConfig {
            scheduler: stride_sched::SchedulerConfig {
                workers: 2,
                pin_workers: false,
                ..Default::default()
            },
            ..Default::default()
        });
        let values: Vec<String> = (1..=4000)
            .map(|x| format!("({x}, '{}')", ["a", "b", "c", "d"][x % 4]))
            .collect();
        engine
            .session()
            .execute(&format!(
                "create table t as select * from (values {}) as v(x, y)",
                values.join(", ")
            ))
            .unwrap();
        engine
    }

    fn physical(engine: &Arc<Engine>, sql: &str) -> PhysicalPlan {
        engine.session().plan_query(sql).unwrap()
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
    fn shape_ignores_literals() {
        let engine = engine();
        let shape_of = |sql: &str| shape(&physical(&engine, sql));
        let a = "select y, sum(x * 2) from t where x < 100 and y = 'a' group by y";
        let b = "select y, sum(x * 3) from t where x < 2500 and y = 'c' group by y";
        assert_eq!(shape_of(a), shape_of(b));
        assert!(!shape_of(a).contains("100") && shape_of(a).contains("< NULL"));
        assert_ne!(
            fingerprint(&physical(&engine, a)),
            fingerprint(&physical(&engine, b))
        );
        // IN lists, LIKE patterns, dates, decimals and CASE literals too.
        let c = "select sum(case when y like 'a%' then x else 0 end) from t \
                 where x in (1, 2, 3) and cast(x as decimal(10, 2)) > 1.25 \
                 and date '1995-01-01' + interval '1' day > date '1994-12-31'";
        let d = "select sum(case when y like 'zz%' then x else 7 end) from t \
                 where x in (17, 2, 30) and cast(x as decimal(10, 2)) > 3.5 \
                 and date '1997-03-01' + interval '3' day > date '1996-02-29'";
        assert_eq!(shape_of(c), shape_of(d));
        // A different structure is a different shape: another column, another
        // operator, another number of IN-list items.
        assert_ne!(
            shape_of(a),
            shape_of("select y, sum(x * 2) from t where x > 100 and y = 'a' group by y")
        );
        assert_ne!(
            shape_of("select count(*) from t where x in (1, 2)"),
            shape_of("select count(*) from t where x in (1, 2, 3)")
        );
        // Column indices and types are not literals: @0 stays whatever
        // literal 0 is.
        let e = shape_of("select count(*) from t where x = 0");
        assert!(e.contains("@0 = NULL"), "{e}");
        assert_eq!(e, shape_of("select count(*) from t where x = 4"));
        let cast = |v: &str| {
            shape_of(&format!(
                "select sum(cast(x as decimal(10, 0)) + {v}) from t"
            ))
        };
        assert_eq!(cast("0"), cast("7"));
        // Columns named after an aggregate with literals lose their names.
        let agg = |w: &str| {
            shape_of(&format!(
                "select s * 2 from (select sum(case when y = '{w}' then x else 0 end) as s from t) v"
            ))
        };
        assert_eq!(agg("a"), agg("b"));
    }

    #[test]
    fn text_masking_respects_token_boundaries() {
        assert_eq!(mask_token("x@4 < 4", "4"), "x@4 < $");
        assert_eq!(mask_token("a = 14 OR b = 4", "4"), "a = 14 OR b = $");
        assert_eq!(mask_token("p LIKE %BRASS", "%BRASS"), "p LIKE $");
        assert_eq!(mask_token("[13, 31, 13]", "13"), "[$, 31, $]");
        assert_eq!(mask_token("x > 0.05", "5"), "x > 0.05");
        assert_eq!(mask_token("x > 0.05", "0.05"), "x > $");
        assert_eq!(mask_token("s = UNITED KI1", "UNITED KI1"), "s = $");
    }

    #[test]
    fn pipeline_weights_follow_the_compiler() {
        let engine = engine();
        for sql in [
            "select count(*) from t",
            "select y, sum(x) from t where x < 10 group by y order by y limit 2",
            "select a.y, count(*) from t a join t b on a.x = b.x group by a.y",
            "select count(*) from t a left join t b on a.x = b.x + 1",
            "select count(*) from t a where exists (select 1 from t b where b.x = a.x + 5)",
            "select count(*) from t a where not exists (select 1 from t b where b.x = a.x)",
            "select x from t where x < 3 union all select x from t where x > 3998",
            "select * from (values (1), (2)) as v(z) order by z",
        ] {
            let plan = physical(&engine, sql);
            let compiled = stride_exec::executor::explain_pipelines(&plan, 2).unwrap();
            let weights = pipeline_weights(&plan);
            assert_eq!(weights.len(), compiled.len(), "{sql}\n{compiled:?}");
            assert!(weights.iter().all(|&w| w >= 1.0));
        }
        // A scan pipeline weighs its table's rows.
        assert_eq!(
            pipeline_weights(&physical(&engine, "select x from t")),
            [4000.0]
        );
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
    fn queries_get_estimates_by_mode() {
        let engine = engine();
        let run = |sql: &str| {
            let mut s = engine.session();
            s.query(sql).unwrap().stats
        };
        let wide = "select y, sum(x) from t where x < 3900 group by y";
        let narrow = "select y, sum(x) from t where x < 200 group by y";
        // Off: no estimate ever.
        engine.history().set_mode(EstimateMode::Off);
        run(wide);
        assert!(run(wide).estimated_cpu.is_none());
        // Plan: only the exact text repeats.
        engine.history().set_mode(EstimateMode::Plan);
        assert!(run(wide).estimated_cpu.is_none());
        assert!(run(wide).estimated_cpu.is_some());
        assert!(run(narrow).estimated_cpu.is_none());
        // Shape: another literal of a recorded shape has an estimate.
        engine.history().set_mode(EstimateMode::Shape);
        assert!(run(wide).estimated_cpu.is_none());
        assert!(run(narrow).estimated_cpu.is_some());
        // Instance: a cold start at once, then the recorded cost scaled by
        // the estimated rows, which the range on x narrows.
        engine.history().set_mode(EstimateMode::Instance);
        let first = run(wide);
        assert!(first.estimated_cpu.is_some(), "cold start");
        run(wide);
        let w = run(wide).estimated_cpu.unwrap();
        let n = run(narrow).estimated_cpu.unwrap();
        assert!(n < w, "narrow {n:?} < wide {w:?}");
        assert!(first.cpu_time > Duration::ZERO);
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

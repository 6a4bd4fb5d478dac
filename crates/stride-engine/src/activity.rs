//! The engine's record of active and recent queries, and the system views
//! `stride.queries`, `stride.workers` and `stride.tuning` (see [`system_table`]),
//! and `stride.memory` ([`memory_table`]).
//!
//! Every query a session runs (one statement, including a statement's
//! scalar subqueries) is registered when it starts and moved to a bounded
//! ring of recent queries when it ends, with the scheduler's accounting.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use stride_exec::QueryStats;
use stride_storage::Table;

use crate::error::Result;

/// A role's id, as the front end's role catalog numbers roles: who ran a
/// query, and who may read its text.
pub type RoleId = u32;

/// How many finished queries `stride.queries` keeps.
pub const RECENT_QUERIES: usize = 1000;

/// The name of the schema that holds the system views.
pub const SYSTEM_SCHEMA: &str = "stride";

/// One query as the system view shows it.
#[derive(Debug, Clone)]
pub struct QueryRecord {
    pub query_id: u64,
    pub session_id: u64,
    pub user: String,
    /// The role the query ran as (who may read its text).
    pub role: RoleId,
    pub sql: String,
    /// `running`, `done`, `failed` or `cancelled`.
    pub state: &'static str,
    pub error: Option<String>,
    pub started_at: SystemTime,
    started: Instant,
    pub latency: Option<Duration>,
    pub stats: QueryStats,
    pub user_priority: f64,
    pub policy: String,
}

#[derive(Debug, Default)]
struct Inner {
    active: BTreeMap<u64, QueryRecord>,
    recent: VecDeque<QueryRecord>,
}

/// Active and recent queries of an engine.
#[derive(Debug, Default)]
pub struct QueryLog {
    /// Source of query ids; Relaxed: ids only need to be unique.
    next_id: AtomicU64,
    inner: Mutex<Inner>,
}

/// Who ran a query and how it was scheduled.
#[derive(Debug, Clone)]
pub struct QueryOrigin<'a> {
    pub session_id: u64,
    pub user: &'a str,
    pub role: RoleId,
    pub user_priority: f64,
    pub policy: String,
}

impl QueryLog {
    /// Registers a starting query; returns its id.
    pub fn start(&self, origin: QueryOrigin<'_>, sql: &str) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let record = QueryRecord {
            query_id: id,
            session_id: origin.session_id,
            user: origin.user.to_string(),
            role: origin.role,
            sql: sql.chars().take(4096).collect(),
            state: "running",
            error: None,
            started_at: SystemTime::now(),
            started: Instant::now(),
            latency: None,
            stats: QueryStats::default(),
            user_priority: origin.user_priority,
            policy: origin.policy,
        };
        self.lock().active.insert(id, record);
        id
    }

    /// Moves query `id` to the recent ring with its outcome.
    pub fn finish(
        &self,
        id: u64,
        outcome: std::result::Result<&QueryStats, (&'static str, String)>,
    ) {
        let mut inner = self.lock();
        let Some(mut record) = inner.active.remove(&id) else {
            return;
        };
        record.latency = Some(record.started.elapsed());
        match outcome {
            Ok(stats) => {
                record.state = "done";
                record.stats = stats.clone();
            }
            Err((state, message)) => {
                record.state = state;
                record.error = Some(message);
            }
        }
        if inner.recent.len() == RECENT_QUERIES {
            inner.recent.pop_front();
        }
        inner.recent.push_back(record);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Running queries first (oldest first), then recent ones (newest first).
    pub fn snapshot(&self) -> Vec<QueryRecord> {
        let inner = self.lock();
        let mut out: Vec<QueryRecord> = inner.active.values().cloned().collect();
        out.extend(inner.recent.iter().rev().cloned());
        out
    }

    /// Number of running queries.
    pub fn active(&self) -> usize {
        self.lock().active.len()
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn micros(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// Who reads a system view: as in PostgreSQL's `pg_stat_activity`, the
/// text and error of another role's query are shown only to superusers
/// (others read `<insufficient privilege>`); the figures are public.
#[derive(Debug, Clone, Copy)]
pub struct Viewer {
    pub role: RoleId,
    pub superuser: bool,
}

impl Viewer {
    fn may_read(&self, record: &QueryRecord) -> bool {
        self.superuser || record.role == self.role
    }
}

/// What a viewer without the privilege reads in place of a query's text.
pub const HIDDEN_TEXT: &str = "<insufficient privilege>";

/// Builds the system view `stride.<name>` as a table snapshot for `viewer`,
/// or `None` if there is no such view.
pub fn system_table(
    name: &str,
    log: &QueryLog,
    scheduler: &stride_sched::Scheduler,
    viewer: Viewer,
) -> Result<Option<Table>> {
    match name {
        "queries" => queries_table(log, viewer).map(Some),
        "workers" => workers_table(scheduler).map(Some),
        "tuning" => tuning_table(scheduler).map(Some),
        "numa" => crate::numa_view::numa_table(scheduler).map(Some),
        _ => Ok(None),
    }
}

fn queries_table(log: &QueryLog, viewer: Viewer) -> Result<Table> {
    let rows = log.snapshot();
    let readable: Vec<bool> = rows.iter().map(|r| viewer.may_read(r)).collect();
    let now = Instant::now();
    let f = |name: &str, t: DataType| Field::new(name, t, true);
    let schema = Arc::new(Schema::new(vec![
        f("query_id", DataType::Int64),
        f("session_id", DataType::Int64),
        f("usename", DataType::Utf8),
        f("state", DataType::Utf8),
        f("query", DataType::Utf8),
        f("error", DataType::Utf8),
        f(
            "started_at",
            DataType::Timestamp(TimeUnit::Microsecond, None),
        ),
        f("latency_ms", DataType::Float64),
        f("queue_wait_ms", DataType::Float64),
        f("cpu_ms", DataType::Float64),
        f("estimated_cpu_ms", DataType::Float64),
        f("finalize_ms", DataType::Float64),
        f("memory_peak_bytes", DataType::Int64),
        f("spilled_bytes", DataType::Int64),
        f("pauses", DataType::Int64),
        f("task_sets", DataType::Int64),
        f("tasks", DataType::Int64),
        f("morsels", DataType::Int64),
        f("tuples", DataType::Int64),
        f("avg_morsel_tuples", DataType::Float64),
        f("min_morsel_tuples", DataType::Int64),
        f("max_morsel_tuples", DataType::Int64),
        f("suspended_morsels", DataType::Int64),
        f("task_set_cpu_ms", DataType::Utf8),
        f("policy", DataType::Utf8),
        f("user_priority", DataType::Float64),
        f("final_priority", DataType::Float64),
        f("priority_trace", DataType::Utf8),
    ]));
    let done = |r: &QueryRecord| r.state != "running";
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|r| r.query_id as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|r| r.session_id as i64),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.user.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.state))),
        Arc::new(StringArray::from_iter_values(
            rows.iter()
                .zip(&readable)
                .map(|(r, &ok)| if ok { r.sql.as_str() } else { HIDDEN_TEXT }),
        )),
        Arc::new(StringArray::from_iter(rows.iter().zip(&readable).map(
            |(r, &ok)| match &r.error {
                Some(e) if ok => Some(e.as_str()),
                Some(_) => Some(HIDDEN_TEXT),
                None => None,
            },
        ))),
        Arc::new(TimestampMicrosecondArray::from_iter_values(
            rows.iter().map(|r| micros(r.started_at)),
        )),
        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| {
            ms(r.latency.unwrap_or_else(|| now.duration_since(r.started)))
        }))),
        Arc::new(Float64Array::from_iter(
            rows.iter().map(|r| done(r).then(|| ms(r.stats.queue_wait))),
        )),
        Arc::new(Float64Array::from_iter(
            rows.iter().map(|r| done(r).then(|| ms(r.stats.cpu_time))),
        )),
        // What the scheduler was told the tasks' CPU time would be (SRPT's
        // estimate; NULL without one), to set beside cpu_ms.
        Arc::new(Float64Array::from_iter(
            rows.iter()
                .map(|r| r.stats.estimated_cpu.filter(|_| done(r)).map(ms)),
        )),
        Arc::new(Float64Array::from_iter(
            rows.iter()
                .map(|r| done(r).then(|| ms(r.stats.finalize_time))),
        )),
        Arc::new(Int64Array::from_iter(
            rows.iter()
                .map(|r| done(r).then_some(r.stats.memory_peak as i64)),
        )),
        Arc::new(Int64Array::from_iter(
            rows.iter()
                .map(|r| done(r).then_some(r.stats.spilled_bytes as i64)),
        )),
        // Tasks that paused the query for its client (backpressure on a
        // streamed result).
        Arc::new(Int64Array::from_iter(
            rows.iter()
                .map(|r| done(r).then_some(r.stats.pauses as i64)),
        )),
        Arc::new(Int64Array::from_iter(
            rows.iter()
                .map(|r| done(r).then_some(r.stats.task_sets as i64)),
        )),
        Arc::new(Int64Array::from_iter(
            rows.iter().map(|r| done(r).then_some(r.stats.tasks as i64)),
        )),
        Arc::new(Int64Array::from_iter(
            rows.iter()
                .map(|r| done(r).then_some(r.stats.morsels as i64)),
        )),
        Arc::new(Int64Array::from_iter(
            rows.iter()
                .map(|r| done(r).then_some(r.stats.tuples as i64)),
        )),
        Arc::new(Float64Array::from_iter(rows.iter().map(|r| {
            (done(r) && r.stats.morsels > 0).then(|| r.stats.tuples as f64 / r.stats.morsels as f64)
        }))),
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| {
            (done(r) && r.stats.morsels > 0).then_some(r.stats.morsel_tuples_min as i64)
        }))),
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| {
            (done(r) && r.stats.morsels > 0).then_some(r.stats.morsel_tuples_max as i64)
        }))),
        Arc::new(Int64Array::from_iter(
            rows.iter()
                .map(|r| done(r).then_some(r.stats.suspended_morsels as i64)),
        )),
        // CPU milliseconds per task set, in order: "1.2 0.4 …".
        Arc::new(StringArray::from_iter(rows.iter().map(|r| {
            done(r).then(|| {
                r.stats
                    .task_set_cpu
                    .iter()
                    .map(|d| format!("{:.2}", ms(*d)))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
        }))),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.policy.as_str()),
        )),
        Arc::new(Float64Array::from_iter_values(
            rows.iter().map(|r| r.user_priority),
        )),
        Arc::new(Float64Array::from_iter(
            rows.iter()
                .map(|r| done(r).then_some(r.stats.final_priority)),
        )),
        // The priority over time: "<ms since start>:<priority>" pairs.
        Arc::new(StringArray::from_iter(rows.iter().map(|r| {
            done(r).then(|| {
                r.stats
                    .priority_trace
                    .iter()
                    .map(|(t, p)| format!("{:.1}:{}", ms(*t), p.round()))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
        }))),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Table::new("queries".to_string(), schema, vec![batch])?)
}

fn workers_table(scheduler: &stride_sched::Scheduler) -> Result<Table> {
    let config = scheduler.config();
    let stats = scheduler.worker_stats();
    let n = stats.len();
    let schema = Arc::new(Schema::new(vec![
        Field::new("worker", DataType::Int64, false),
        Field::new("tasks", DataType::Int64, false),
        Field::new("busy_ms", DataType::Float64, false),
        Field::new("idle_sleeps", DataType::Int64, false),
        Field::new("finalizations", DataType::Int64, false),
        Field::new("pinned", DataType::Boolean, false),
        Field::new("policy", DataType::Utf8, false),
        Field::new("t_max_ms", DataType::Float64, false),
        Field::new("active_groups", DataType::Int64, false),
        Field::new("preemptions", DataType::Int64, false),
        Field::new("handover_tasks", DataType::Int64, false),
        Field::new("os_core", DataType::Int64, true),
        Field::new("os_nice", DataType::Int64, true),
        Field::new("os_slice_us", DataType::Float64, true),
        Field::new("node", DataType::Int64, false),
        Field::new("local_morsels", DataType::Int64, false),
        Field::new("remote_morsels", DataType::Int64, false),
        Field::new("stolen_morsels", DataType::Int64, false),
        Field::new("steal_tasks", DataType::Int64, false),
    ]));
    let policy = scheduler.policy().name().to_string();
    let active = scheduler.active_groups() as i64;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(
            stats.iter().map(|w| w.worker as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            stats.iter().map(|w| w.tasks as i64),
        )),
        Arc::new(Float64Array::from_iter_values(
            stats.iter().map(|w| ms(w.busy)),
        )),
        Arc::new(Int64Array::from_iter_values(
            stats.iter().map(|w| w.idle_sleeps as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            stats.iter().map(|w| w.finalizations as i64),
        )),
        Arc::new(arrow::array::BooleanArray::from(vec![
            config.pin_workers;
            n
        ])),
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
            policy.as_str(),
            n,
        ))),
        Arc::new(Float64Array::from_iter_values(std::iter::repeat_n(
            ms(config.t_max),
            n,
        ))),
        Arc::new(Int64Array::from_iter_values(std::iter::repeat_n(active, n))),
        Arc::new(Int64Array::from_iter_values(
            stats.iter().map(|w| w.preemptions as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            stats.iter().map(|w| w.handover_tasks as i64),
        )),
        Arc::new(Int64Array::from_iter(
            stats.iter().map(|w| w.os.core.map(|c| c as i64)),
        )),
        Arc::new(Int64Array::from_iter(
            stats.iter().map(|w| w.os.nice.map(i64::from)),
        )),
        Arc::new(Float64Array::from_iter(
            stats
                .iter()
                .map(|w| w.os.slice.map(|d| d.as_secs_f64() * 1e6)),
        )),
        Arc::new(Int64Array::from_iter_values(
            stats
                .iter()
                .map(|w| config.topology.worker_node(w.worker) as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            stats.iter().map(|w| w.places.local as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            stats.iter().map(|w| w.places.remote as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            stats.iter().map(|w| w.places.stolen as i64),
        )),
        Arc::new(Int64Array::from_iter_values(
            stats.iter().map(|w| w.steal_tasks as i64),
        )),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Table::new("workers".to_string(), schema, vec![batch])?)
}

/// One row per self-tuning run (seed 001 §4): when, from which decay
/// parameters to which, the simulated mean slowdown before and after, and
/// what the run cost.
fn tuning_table(scheduler: &stride_sched::Scheduler) -> Result<Table> {
    let reports = scheduler.tuning_reports();
    let f = |name: &str, t: DataType| Field::new(name, t, false);
    let schema = Arc::new(Schema::new(vec![
        f("at_s", DataType::Float64),
        f("groups", DataType::Int64),
        f("lambda_before", DataType::Float64),
        f("d_start_before", DataType::Int64),
        f("lambda_after", DataType::Float64),
        f("d_start_after", DataType::Int64),
        f("cost_before", DataType::Float64),
        f("cost_after", DataType::Float64),
        f("evaluations", DataType::Int64),
        f("elapsed_ms", DataType::Float64),
        f("share_of_processing", DataType::Float64),
    ]));
    let col_f = |g: &dyn Fn(&stride_sched::TuningReport) -> f64| -> ArrayRef {
        Arc::new(Float64Array::from_iter_values(reports.iter().map(g)))
    };
    let col_i = |g: &dyn Fn(&stride_sched::TuningReport) -> i64| -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(reports.iter().map(g)))
    };
    let columns: Vec<ArrayRef> = vec![
        col_f(&|r| r.at.as_secs_f64()),
        col_i(&|r| r.groups as i64),
        col_f(&|r| r.params_before.lambda),
        col_i(&|r| i64::from(r.params_before.d_start)),
        col_f(&|r| r.params_after.lambda),
        col_i(&|r| i64::from(r.params_after.d_start)),
        col_f(&|r| r.cost_before),
        col_f(&|r| r.cost_after),
        col_i(&|r| r.evaluations as i64),
        col_f(&|r| ms(r.elapsed)),
        col_f(&|r| r.share_of_processing),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Table::new("tuning".to_string(), schema, vec![batch])?)
}

/// `stride.memory`: one row with the server-wide limit, what all queries
/// hold now and at most so far, how many charges were refused (each failed
/// its query with 53200 or made an operator spill), the default share of one
/// query, the bytes queries wrote to spill files since start and the bytes
/// in spill files now; then the allocation guard's figures
/// ([`stride_exec::alloc_guard`]): what the process has allocated (NULL
/// where its allocator does not count), its allocation limit (NULL:
/// unlimited) and how many queries it stopped.
pub fn memory_table(
    pool: &stride_exec::MemoryPool,
    query_limit: usize,
    spill: &stride_exec::SpillArea,
) -> Result<Table> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("memory_limit_bytes", DataType::Int64, false),
        Field::new("used_bytes", DataType::Int64, false),
        Field::new("peak_bytes", DataType::Int64, false),
        Field::new("refused_charges", DataType::Int64, false),
        Field::new("query_memory_limit_bytes", DataType::Int64, false),
        Field::new("spilled_bytes", DataType::Int64, false),
        Field::new("temp_bytes", DataType::Int64, false),
        Field::new("allocated_bytes", DataType::Int64, true),
        Field::new("allocation_limit_bytes", DataType::Int64, true),
        Field::new("allocation_trips", DataType::Int64, false),
    ]));
    let guard = |v: Option<usize>| -> ArrayRef {
        Arc::new(Int64Array::from(vec![
            v.map(|v| v.min(i64::MAX as usize) as i64)
        ]))
    };
    let limit = stride_exec::alloc_guard::limit();
    let int = |v: usize| -> ArrayRef {
        Arc::new(Int64Array::from(vec![v.min(i64::MAX as usize) as i64]))
    };
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            int(pool.limit()),
            int(pool.used()),
            int(pool.peak()),
            int(pool.refusals()),
            int(query_limit),
            int(spill.spilled_bytes() as usize),
            int(spill.bytes_on_disk() as usize),
            guard(stride_exec::alloc_guard::allocated()),
            guard((limit != usize::MAX).then_some(limit)),
            int(stride_exec::alloc_guard::trips()),
        ],
    )?;
    Ok(Table::new("memory".to_string(), schema, vec![batch])?)
}

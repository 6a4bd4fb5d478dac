//! Running a physical plan on the scheduler.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use stride_sched::{GroupFacts, QueryError, QueryHandle, QueryStats, Scheduler, TaskSetWork};

use crate::alloc_guard::Accounted;
use crate::buffer::Buffer;
use crate::cancel::Canceller;
use crate::error::{ExecError, Result};
use crate::live::{LiveConfig, LiveNext, LiveResult};
use crate::memory::QueryMemory;
use crate::operator::materialize::MaterializeSink;
use crate::operator::Sink;
use crate::pipeline::{compile, compile_into};
use crate::plan::PhysicalPlan;
use crate::shared::{Prelude, SharedScans};
use crate::stream::{StreamConfig, StreamOrder, StreamedBatch};

/// A query's result and its scheduling statistics.
#[derive(Debug)]
pub struct ExecOutput {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
    pub stats: QueryStats,
    pub pipelines: usize,
}

impl ExecOutput {
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

/// Runs `plan` as one resource group and waits for its result (on the calling
/// thread, which must not be a worker). `schema` names the result columns.
/// Its memory is not limited.
pub fn execute(
    plan: &PhysicalPlan,
    schema: SchemaRef,
    scheduler: &Scheduler,
) -> Result<ExecOutput> {
    execute_with(
        plan,
        schema,
        scheduler,
        GroupFacts::default(),
        &QueryMemory::unbounded(),
        None,
        &mut |_| {},
    )
}

/// As [`execute`], with what is known about the query, the account its
/// memory is charged to (the result included), the engine's shared scans
/// when the query may share one ([`crate::shared`]), and a callback that
/// receives a [`Canceller`] once the query (or each phase of a sharing
/// query) is submitted and `None` when it completed (so that another thread
/// can cancel it meanwhile).
pub fn execute_with(
    plan: &PhysicalPlan,
    schema: SchemaRef,
    scheduler: &Scheduler,
    facts: GroupFacts,
    memory: &Arc<QueryMemory>,
    sharing: Option<&Arc<SharedScans>>,
    on_running: &mut dyn FnMut(Option<Canceller>),
) -> Result<ExecOutput> {
    let result = Arc::new(Buffer::in_memory(memory.clone(), "query result"));
    let sink = Arc::new(MaterializeSink::new(result.clone(), 0, "result"));
    let (handle, count, prelude) =
        submit(plan, sink, scheduler, facts, memory, sharing, on_running)?;
    on_running(Some(Canceller::group(handle.canceller())));
    let outcome = handle.wait();
    on_running(None);
    let outcome = outcome.map(|stats| match prelude {
        Some(p) => p.join(stats),
        None => stats,
    });
    let collected = outcome.map_err(unwrap_query_error).and_then(|stats| {
        // From here on the result is the caller's, outside the query's account.
        let batches = result
            .take()?
            .map(|b| relabel(&schema, b?))
            .collect::<Result<Vec<_>>>()?;
        Ok((with_memory(stats, memory), batches))
    });
    close_spill(memory);
    let (stats, batches) = collected?;
    Ok(ExecOutput {
        schema,
        batches,
        stats,
        pipelines: count,
    })
}

/// How long a streamed query's consumer waits with nothing to take before
/// a thread is started to wait for the query's completion.
pub(crate) const WAITER_AFTER: Duration = Duration::from_millis(2);

/// A streamed query's scheduling statistics: its rows went to the consumer.
#[derive(Debug)]
pub struct StreamOutput {
    pub schema: SchemaRef,
    /// Rows handed to the consumer.
    pub rows: usize,
    pub stats: QueryStats,
    pub pipelines: usize,
}

/// Who takes a streamed result, and how.
pub struct Consumer<'a> {
    pub config: StreamConfig,
    /// As `on_running` of [`execute_with`].
    pub on_running: &'a mut dyn FnMut(Option<Canceller>),
    /// Takes each batch (relabelled with the result's schema; it holds its
    /// memory charge until dropped). An error cancels the query.
    pub deliver: &'a mut dyn FnMut(StreamedBatch) -> Result<()>,
}

/// As [`execute_with`], streaming the result: each batch goes to the
/// consumer's `deliver` on the calling thread as soon as the
/// [`crate::stream::ResultStream`] releases it (in the order its config asks for), while
/// the query runs ([`LiveResult`] read to its end). A `deliver` error (the
/// client went away) cancels the query and is returned once the query
/// stopped. A query that shares a scan (`sharing`, [`crate::shared`])
/// streams from its last group, after the shared pass.
pub fn execute_streaming(
    plan: &PhysicalPlan,
    schema: SchemaRef,
    scheduler: &Scheduler,
    facts: GroupFacts,
    memory: &Arc<QueryMemory>,
    sharing: Option<&Arc<SharedScans>>,
    consumer: Consumer<'_>,
) -> Result<StreamOutput> {
    let Consumer {
        config,
        on_running,
        deliver,
    } = consumer;
    let live = LiveConfig {
        scheduler,
        facts,
        memory,
        sharing,
        stream: config,
    };
    let mut live = LiveResult::open(plan, schema, live, on_running)?;
    let outcome = loop {
        match live.next(Duration::from_millis(50)) {
            Ok(LiveNext::Batch(b)) => {
                if let Err(e) = deliver(b) {
                    // Stopped before its spill directory goes.
                    live.stop();
                    break Err(e);
                }
            }
            Ok(LiveNext::Idle) => {}
            Ok(LiveNext::Ended(out)) => break Ok(*out),
            Err(e) => {
                live.stop();
                break Err(e);
            }
        }
    };
    on_running(None);
    outcome
}

/// Compiles `plan` with `sink` at its end and submits it as one resource
/// group — or, sharing a scan, runs the phases up to the shared pass first
/// and submits the query's last group; returns its handle, how many
/// pipelines the query has, and what ran before the last group.
pub(crate) fn submit(
    plan: &PhysicalPlan,
    sink: Arc<dyn Sink>,
    scheduler: &Scheduler,
    facts: GroupFacts,
    memory: &Arc<QueryMemory>,
    sharing: Option<&Arc<SharedScans>>,
    on_running: &mut dyn FnMut(Option<Canceller>),
) -> Result<(QueryHandle, usize, Option<Prelude>)> {
    let submitted = try_submit(plan, sink, scheduler, facts, memory, sharing, on_running);
    if submitted.is_err() {
        // Nothing runs: the caller's view of the query ends here, and so
        // does its spill directory.
        on_running(None);
        close_spill(memory);
    }
    submitted
}

fn try_submit(
    plan: &PhysicalPlan,
    sink: Arc<dyn Sink>,
    scheduler: &Scheduler,
    facts: GroupFacts,
    memory: &Arc<QueryMemory>,
    sharing: Option<&Arc<SharedScans>>,
    on_running: &mut dyn FnMut(Option<Canceller>),
) -> Result<(QueryHandle, usize, Option<Prelude>)> {
    let pipelines = compile_into(plan, scheduler.config().workers, sink, memory)?;
    let count = pipelines.len();
    if let Some(hub) = sharing {
        let account = memory.alloc_account();
        let prepared =
            crate::shared::prepare(pipelines, scheduler, facts, hub, account, on_running)?;
        let handle = scheduler.submit_with(prepared.task_sets, prepared.facts);
        return Ok((handle, count, prepared.prelude));
    }
    let task_sets: Vec<Arc<dyn TaskSetWork>> = pipelines
        .into_iter()
        .map(|p| Accounted::wrap(Arc::new(p), memory.alloc_account()))
        .collect();
    Ok((scheduler.submit_with(task_sets, facts), count, None))
}

/// The statistics with the query's memory peak and spilled bytes.
pub(crate) fn with_memory(mut stats: QueryStats, memory: &QueryMemory) -> QueryStats {
    stats.memory_peak = memory.peak();
    stats.spilled_bytes = memory.spilled_bytes() as usize;
    stats
}

/// The query's spill files go, whether it succeeded or not (a task set the
/// scheduler still holds cannot make new ones).
pub(crate) fn close_spill(memory: &QueryMemory) {
    if let Some(spill) = memory.spill() {
        spill.close();
    }
}

/// Whether a plan's result has an order to keep: ORDER BY, or LIMIT/OFFSET
/// (whose rows are the first ones of their input's order) at its top,
/// under the projections and filters that keep order.
pub fn result_order(plan: &PhysicalPlan) -> StreamOrder {
    let mut node = plan;
    loop {
        match node {
            PhysicalPlan::Projection { input, .. } | PhysicalPlan::Filter { input, .. } => {
                node = input
            }
            PhysicalPlan::Sort { .. } | PhysicalPlan::Limit { .. } => return StreamOrder::Sequence,
            _ => return StreamOrder::Arrival,
        }
    }
}

/// Surfaces the executor's own error when a task failed with one.
pub(crate) fn unwrap_query_error(e: QueryError) -> ExecError {
    match e {
        QueryError::Failed(task) => match task.0.downcast::<ExecError>() {
            Ok(exec) => *exec,
            Err(other) => ExecError::Internal(other.to_string()),
        },
        other => ExecError::Query(other),
    }
}

/// Gives a result batch the plan's column names and nullability (relaxing
/// nullability where the data holds NULLs the plan did not foresee).
pub(crate) fn relabel(schema: &SchemaRef, batch: RecordBatch) -> Result<RecordBatch> {
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    match RecordBatch::try_new_with_options(schema.clone(), batch.columns().to_vec(), &options) {
        Ok(b) => Ok(b),
        Err(_) => Ok(RecordBatch::try_new_with_options(
            crate::nullable_schema(schema),
            batch.columns().to_vec(),
            &options,
        )?),
    }
}

/// Describes the pipelines of `plan` (for EXPLAIN).
pub fn explain_pipelines(plan: &PhysicalPlan, workers: usize) -> Result<Vec<String>> {
    let memory = QueryMemory::unbounded();
    let pipelines = compile(
        plan,
        workers,
        Arc::new(Buffer::new(memory.clone(), "query result")),
        &memory,
    )?;
    Ok(pipelines.iter().map(|p| p.describe()).collect())
}

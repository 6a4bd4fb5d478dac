//! Running a physical plan on the scheduler.

use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchOptions};
use arrow::datatypes::SchemaRef;
use stride_sched::{Canceller, GroupFacts, QueryError, QueryStats, Scheduler, TaskSetWork};

use crate::buffer::Buffer;
use crate::error::{ExecError, Result};
use crate::memory::QueryMemory;
use crate::pipeline::compile;
use crate::plan::PhysicalPlan;

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
        &mut |_| {},
    )
}

/// As [`execute`], with what is known about the query, the account its
/// memory is charged to (the result included), and a callback that receives
/// a [`Canceller`] once the query is submitted and `None` when it completed
/// (so that another thread can cancel it meanwhile).
pub fn execute_with(
    plan: &PhysicalPlan,
    schema: SchemaRef,
    scheduler: &Scheduler,
    facts: GroupFacts,
    memory: &Arc<QueryMemory>,
    on_running: &mut dyn FnMut(Option<Canceller>),
) -> Result<ExecOutput> {
    let result = Arc::new(Buffer::in_memory(memory.clone(), "query result"));
    let pipelines = compile(plan, scheduler.config().workers, result.clone(), memory)?;
    let count = pipelines.len();
    let task_sets: Vec<Arc<dyn TaskSetWork>> = pipelines
        .into_iter()
        .map(|p| Arc::new(p) as Arc<dyn TaskSetWork>)
        .collect();
    let handle = scheduler.submit_with(task_sets, facts);
    on_running(Some(handle.canceller()));
    let outcome = handle.wait();
    on_running(None);
    let collected = outcome.map_err(unwrap_query_error).and_then(|mut stats| {
        // From here on the result is the caller's, outside the query's account.
        let batches = result
            .take()?
            .map(|b| relabel(&schema, b?))
            .collect::<Result<Vec<_>>>()?;
        stats.memory_peak = memory.peak();
        stats.spilled_bytes = memory.spilled_bytes() as usize;
        Ok((stats, batches))
    });
    // The query's spill files go now, whether it succeeded or not (a task
    // set the scheduler still holds cannot make new ones).
    if let Some(spill) = memory.spill() {
        spill.close();
    }
    let (stats, batches) = collected?;
    Ok(ExecOutput {
        schema,
        batches,
        stats,
        pipelines: count,
    })
}

/// Surfaces the executor's own error when a task failed with one.
fn unwrap_query_error(e: QueryError) -> ExecError {
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
fn relabel(schema: &SchemaRef, batch: RecordBatch) -> Result<RecordBatch> {
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

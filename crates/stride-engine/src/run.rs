//! The execution entry point: a session's query, planned by a front end,
//! run on the engine — its resource group's facts (the session's
//! priorities, the feedback store's estimates), its memory share and spill
//! directory, shared scans where the session asks for them — and its costs
//! recorded in the feedback store once it ran.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use std::sync::Arc;

use stride_exec::{
    Canceller, Consumer, ExecError, LiveConfig, LiveResult, PhysicalPlan, QueryMemory, SharedScans,
    SharingMode, StreamConfig,
};
use stride_sched::{GroupFacts, QueryStats};

use crate::feedback::PlanKey;
use crate::Engine;

/// How a session runs one query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunConfig {
    /// Scales p0 and p_min of the query's priority (seed 001 §3.2).
    pub user_priority: f64,
    /// The query keeps its initial priority.
    pub static_priority: bool,
    /// Bytes the query may hold (its share); the engine's limit applies
    /// besides, to all queries together.
    pub memory_share: usize,
    /// Whether its scans join batches of shared scans.
    pub sharing: SharingMode,
}

/// Where a query's result goes.
pub enum Delivery<'a> {
    /// Collected and returned; `on_running` gets the running query's
    /// canceller (`None` once it ended).
    Collect {
        on_running: &'a mut dyn FnMut(Option<Canceller>),
    },
    /// Streamed to a consumer while the query runs.
    Stream(Consumer<'a>),
}

/// What a query produced.
#[derive(Debug)]
pub struct RunOutput {
    pub schema: SchemaRef,
    /// The rows, unless they were streamed.
    pub batches: Vec<RecordBatch>,
    /// `Some(n)`: the result's `n` rows went to the consumer.
    pub streamed: Option<usize>,
    pub stats: QueryStats,
}

impl Engine {
    /// Runs `plan` (its result columns named by `schema`) as one resource
    /// group and waits for it on the calling thread, which must not be a
    /// worker. `key` is the query's key in the feedback store: its
    /// estimates rank it, and its costs are recorded under it once it ran.
    pub fn run(
        &self,
        plan: &PhysicalPlan,
        schema: SchemaRef,
        key: &PlanKey,
        config: RunConfig,
        delivery: Delivery<'_>,
    ) -> Result<RunOutput, ExecError> {
        let (facts, memory, sharing) = self.prepare(key, config);
        let scheduler = self.scheduler();
        let out = match delivery {
            Delivery::Collect { on_running } => {
                let out = stride_exec::execute_with(
                    plan, schema, scheduler, facts, &memory, sharing, on_running,
                )?;
                RunOutput {
                    schema: out.schema,
                    batches: out.batches,
                    streamed: None,
                    stats: out.stats,
                }
            }
            Delivery::Stream(consumer) => {
                let out = stride_exec::execute_streaming(
                    plan, schema, scheduler, facts, &memory, sharing, consumer,
                )?;
                RunOutput {
                    schema: out.schema,
                    batches: Vec::new(),
                    streamed: Some(out.rows),
                    stats: out.stats,
                }
            }
        };
        self.record(key, &out.stats);
        Ok(out)
    }

    /// Opens `plan` as a result read over several requests (a portal's
    /// Execute with a row limit, a cursor): submitted as [`Engine::run`]
    /// submits it, its rows taken with [`LiveResult::next`] at the
    /// consumer's pace (the query pauses in between). Its costs go to the
    /// feedback store once it ended: the caller hands them to
    /// [`Engine::record`].
    pub fn open(
        &self,
        plan: &PhysicalPlan,
        schema: SchemaRef,
        key: &PlanKey,
        config: RunConfig,
        stream: StreamConfig,
        on_running: &mut dyn FnMut(Option<Canceller>),
    ) -> Result<LiveResult, ExecError> {
        let (facts, memory, sharing) = self.prepare(key, config);
        let live = LiveConfig {
            scheduler: self.scheduler(),
            facts,
            memory: &memory,
            sharing,
            stream,
        };
        LiveResult::open(plan, schema, live, on_running)
    }

    /// What a query of `key` runs with: its group's facts (the session's
    /// priorities, the store's estimates), its memory share with a spill
    /// directory, and the shared scans if the session joins them.
    fn prepare(
        &self,
        key: &PlanKey,
        config: RunConfig,
    ) -> (GroupFacts, Arc<QueryMemory>, Option<&Arc<SharedScans>>) {
        let facts = GroupFacts {
            user_priority: config.user_priority,
            static_priority: config.static_priority,
            estimates: self.history().estimates(key),
        };
        let memory = QueryMemory::with_spill(
            self.memory().clone(),
            config.memory_share,
            Some(self.spill_area().query()),
        );
        let sharing = (config.sharing == SharingMode::Scans).then(|| self.sharing());
        (facts, memory, sharing)
    }

    /// Records a query's costs under its key in the feedback store.
    pub fn record(&self, key: &PlanKey, stats: &QueryStats) {
        let workers = self.scheduler().config().workers;
        self.history().record(key, stats, workers);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use stride_sched::SchedulerConfig;

    use super::*;
    use crate::{EngineConfig, EstimateMode};

    fn engine() -> Engine {
        Engine::new(EngineConfig {
            scheduler: SchedulerConfig {
                workers: 1,
                pin_workers: false,
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn values(n: i64) -> PhysicalPlan {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(0..n))],
        )
        .unwrap();
        PhysicalPlan::Values {
            schema,
            batches: vec![batch],
        }
    }

    fn config() -> RunConfig {
        RunConfig {
            user_priority: 1.0,
            static_priority: false,
            memory_share: 64 << 20,
            sharing: SharingMode::Off,
        }
    }

    #[test]
    fn a_run_returns_its_rows_and_feeds_the_store() {
        let engine = engine();
        engine.history().set_mode(EstimateMode::Plan);
        let plan = values(1000);
        let key = PlanKey::exact(&plan);
        assert!(engine.history().estimates(&key).is_none());
        let mut published = 0;
        let on_running = &mut |_: Option<Canceller>| published += 1;
        let out = engine
            .run(
                &plan,
                plan.schema(),
                &key,
                config(),
                Delivery::Collect { on_running },
            )
            .unwrap();
        assert_eq!(out.streamed, None);
        assert_eq!(
            out.batches.iter().map(|b| b.num_rows()).sum::<usize>(),
            1000
        );
        assert!(out.stats.tasks > 0);
        // The canceller was published while it ran and withdrawn after.
        assert!(published >= 2, "{published}");
        // Its costs are recorded under its key: the next run has estimates.
        let estimates = engine.history().estimates(&key).expect("recorded");
        assert_eq!(estimates.len(), out.stats.task_set_cpu.len());
        // The query's memory went back to the pool: the workers drop the
        // finished task sets (and the result buffer's charge they hold)
        // just after the group completes, so this may take a moment.
        drop(out);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while engine.memory().used() != 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(engine.memory().used(), 0);
    }
}

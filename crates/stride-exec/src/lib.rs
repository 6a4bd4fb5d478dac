//! Stride's executor: physical plans of morsel-driven pipelines over Arrow.
//!
//! A [`PhysicalPlan`] (built by `stride-sql`) is a tree of operators. The
//! [`pipeline`] compiler cuts it at pipeline breakers (hash-join build,
//! aggregation, sort, limit, union) into an ordered list of [`Pipeline`]s, each
//! `source → operators… → sink`. Every pipeline becomes one task set on the
//! scheduler; its tasks pull morsels (row ranges) from the source and push them
//! through the operators into the sink. Breakers keep per-worker state and
//! merge it when the task set is finalized.
//!
//! Operators never touch run queues (they only see batches and a worker
//! index); the scheduler never sees Arrow (it only sees `TaskSetWork`).
//!
//! Code map:
//! * [`plan`] — the physical plan tree (properties only, no runtime state);
//! * [`source`] — morsel sources: table blocks and materialized buffers;
//! * [`placement`] — where a table's rows live (placements over memory
//!   nodes) and how its scans treat that (affinities);
//! * [`placed_source`] — locality-aware table scans: one cursor per node;
//! * [`seq`] — `MorselSeq`, the order a pipeline's output keeps;
//! * [`buffer`] — materialized intermediate results kept in source order;
//! * [`memory`] — the server-wide memory pool and each query's account;
//! * [`alloc_guard`] — every allocation counted; a query that allocates
//!   while the process is past its allocation limit fails alone;
//! * [`spill`] — the spill area: Arrow IPC files for what a query's share
//!   cannot hold, one directory per query, removed when the query ends;
//! * [`operator`] — one module per operator: filter, projection, hash join,
//!   aggregate, sort, limit, window;
//! * [`pipeline`] — pipelines as task sets, and the plan → pipelines compiler;
//! * [`step`] — split finalizations: a breaker's merge as task sets of parts;
//! * [`stream`] — a result streamed to its consumer while the query runs:
//!   a bounded, charged queue that parks surplus on disk;
//! * [`live`] — a streamed result read at its consumer's pace across
//!   calls (portals, cursors, `COPY … TO`);
//! * [`shared`] — shared scans: concurrent queries' leaf pipelines over one
//!   table snapshot run on one pass of morsels, batch by batch;
//! * [`cancel`] — the `Canceller` a running query publishes;
//! * [`executor`] — running a plan on a scheduler and collecting or
//!   streaming its result.

pub mod alloc_guard;
pub mod buffer;
pub mod cancel;
pub mod error;
pub mod executor;
pub mod hash;
pub mod live;
pub mod memory;
pub mod operator;
pub mod pipeline;
pub mod placed_source;
pub mod placement;
pub mod plan;
pub mod seq;
pub mod shared;
pub mod source;
pub mod spill;
pub mod step;
pub mod stream;
pub mod suspend;

pub use cancel::Canceller;
pub use error::{ErrorKind, ExecError, Result};
pub use executor::{
    execute, execute_streaming, execute_with, result_order, Consumer, ExecOutput, StreamOutput,
};
pub use live::{LiveConfig, LiveNext, LiveResult};
pub use memory::{MemoryPool, QueryMemory};
pub use plan::PhysicalPlan;
pub use seq::MorselSeq;
pub use shared::{SharedScans, SharingConfig, SharingMode};
pub use spill::{QuerySpill, SpillArea};
pub use stream::{StreamConfig, StreamOrder, StreamedBatch};
pub use stride_sched::QueryStats;

use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};

/// The schema batches carry inside the executor: the plan's field names and
/// types with every field nullable (outer joins and aggregates produce NULLs
/// that a declared non-nullable field would reject).
pub fn nullable_schema(schema: &Schema) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}

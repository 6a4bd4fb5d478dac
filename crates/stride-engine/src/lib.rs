//! Stride's engine-wide runtime: what every session of an engine shares,
//! apart from any query language. A front end (the SQL front end,
//! `stride-sql`) plans a query into a [`stride_exec::PhysicalPlan`] and
//! hands it to [`Engine::run`]; the engine runs it on its scheduler under
//! the session's priorities and memory share, and learns from what it cost.
//!
//! * [`engine`] — [`Engine`]: the scheduler, the catalog, memory
//!   governance (pool, spill area, placed memory), shared scans, the data
//!   directory, the query log, the feedback store, file access;
//! * [`config`] — [`EngineConfig`]: what an engine is started with;
//! * [`run`] — the execution entry point: a session's physical plan as a
//!   resource group, its costs recorded in the feedback store;
//! * [`feedback`] — the feedback store: recorded per-pipeline costs under
//!   opaque plan keys, SRPT's work estimates and the elastic rule;
//! * [`commit`] — a transaction's catalog operations validated, applied
//!   at once and, with a data directory, made durable before they are
//!   visible;
//! * [`statement`] — a statement's scheduler accounting summed over its
//!   queries;
//! * [`activity`] — the query log and the system views `stride.queries`,
//!   `stride.workers`, `stride.tuning` and `stride.memory`;
//! * [`numa_view`], [`sharing_view`], [`storage_view`] — the system views
//!   `stride.numa` / `stride.placement`, `stride.batches`, and
//!   `stride.storage` / `stride.storage_tables`;
//! * [`settings`] — engine-wide settings (`stride.policy`,
//!   `stride.memory_limit`, …) and PostgreSQL-style values (sizes, times);
//! * [`file_access`] — which server-side files statements may read;
//! * [`error`] — [`EngineError`] and its typed kinds.
//!
//! The crate depends on the scheduler, the executor, storage and Arrow,
//! never on a parser, binder or optimizer.

pub mod activity;
pub mod commit;
pub mod config;
pub mod engine;
pub mod error;
pub mod feedback;
pub mod file_access;
pub mod numa_view;
pub mod run;
pub mod settings;
pub mod sharing_view;
pub mod statement;
pub mod storage_view;

pub use config::{EngineConfig, MemoryConfig, ScanDefaults, SpillConfig};
pub use engine::Engine;
pub use error::{EngineError, SettingKind};
pub use feedback::{EstimateMode, PlanKey, WorkHistory};
pub use file_access::FileAccess;
pub use run::{Delivery, RunConfig, RunOutput};
pub use statement::StatementStats;

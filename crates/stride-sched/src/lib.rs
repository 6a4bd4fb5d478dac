//! Stride's scheduler: the database, not the operating system, decides which
//! piece of query work runs next.
//!
//! Vocabulary (see `DESIGN.md`):
//!
//! * a **resource group** is one query; it owns an ordered list of task sets and
//!   the query's accounting ([`QueryStats`]);
//! * a **task set** is one pipeline (or finalization step), described by an
//!   implementation of [`TaskSetWork`]; tasks are carved out of it at run time;
//! * a **task** is one scheduling quantum: a call of [`TaskSetWork::run_task`],
//!   which processes morsels until the target duration `t_max` is used up or the
//!   task set runs dry;
//! * a **worker** is an OS thread (optionally pinned to one core) that runs the
//!   scheduler loop in [`worker`].
//!
//! This crate knows nothing about Arrow or SQL (architecture invariant 1): it
//! runs opaque task sets. The executor, tests and benchmarks all drive the same
//! [`Scheduler`].
//!
//! Module map, one concern per file:
//!
//! * [`task`] — the contract between a task set and the scheduler;
//! * [`group`] — resource-group state, completion and accounting;
//! * [`morsel`] — adaptive morsel sizing (seed 001 §3.1);
//! * [`policy`] — FIFO, fair and decaying-priority stride scheduling;
//! * [`queue`] — the run queue the policy picks from;
//! * [`worker`] — the worker loop, pinning and idling;
//! * [`scheduler`] — the public handle: configuration, submission, shutdown.

pub mod group;
pub mod morsel;
pub mod policy;
pub mod queue;
pub mod scheduler;
pub mod task;
pub mod worker;

pub use group::{QueryHandle, QueryStats, ResourceGroupId};
pub use morsel::{AdaptiveMorsels, MorselPolicy, MorselState};
pub use policy::{DecayParams, GroupFacts, Policy, TaskSetEstimate};
pub use scheduler::{Scheduler, SchedulerConfig};
pub use task::{QueryError, TaskContext, TaskError, TaskOutcome, TaskSetWork};

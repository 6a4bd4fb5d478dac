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
//! * [`policy`] — FIFO, fair, decaying-priority stride, lottery, SRPT,
//!   IF-SRPT and THRESHOLD: per-group rank arithmetic;
//!
//! The lock-free scheduling core (seed 001 §2.3; proof sketch in the crate's
//! README):
//!
//! * [`sync`] — the atomics facade (`std`, or loom under `--cfg loom`);
//! * [`slots`] — the global slot array of tagged task-set pointers;
//! * [`masks`] — per-worker change and return masks;
//! * [`pins`] — the global state array and the finalization protocol
//!   (markers, finalization counter);
//! * [`admission`] — the wait queue in front of the slots;
//! * [`idle`] — sleeping and waking idle workers;
//! * [`pause`] — task sets paused until their consumer catches up;
//! * `local` — a worker's thread-local view: activity mask, per-slot pass and
//!   priority, virtual time;
//! * [`worker`] — the worker loop: decisions, running tasks, finalization;
//! * [`scheduler`] — the public handle: configuration, submission, shutdown;
//! * [`overhead`] — measuring the cost of one scheduling decision;
//! * [`sim`] — a simulator that runs the policy code with a virtual clock;
//! * [`tuning`] — self-tuning of the decay parameters (seed 001 §4), also
//!   inside the running scheduler ([`SchedulerConfig::tuning`]);
//! * [`trace`] — per-task records for timeline traces;
//! * [`topology`] — memory nodes, cpus and caches (detected, synthetic or
//!   fake); which worker belongs to which node and is pinned to which cpu.

pub mod admission;
pub mod affinity;
pub mod binding;
pub mod cancel;
pub mod clock;
mod decision;
pub mod group;
pub mod idle;
pub mod masks;
pub mod morsel;
mod observe;
pub mod os_thread;
pub mod overhead;
pub mod pause;
pub mod pins;
pub mod policy;
pub mod scheduler;
pub mod sim;
pub mod slots;
pub mod sync;
pub mod task;
mod thread_cpu;
pub mod topology;
pub mod trace;
pub mod tuning;
pub mod worker;

pub use affinity::{MorselPlace, NodeAffinity, PlaceCounts};
pub use cancel::Canceller;
pub use clock::{Clock, VirtualClock};
pub use group::{QueryHandle, QueryStats, ResourceGroupId};
pub use morsel::{AdaptiveMorsels, MorselPolicy, MorselState};
pub use os_thread::OsSetup;
pub use overhead::{measure_decision_overhead, DecisionOverhead};
pub use pause::Resumer;
pub use policy::{
    CustomPolicy, DecayParams, FloorOrder, GroupFacts, Policy, RankRule, TaskSetEstimate,
    ThresholdParams,
};
pub use scheduler::{Scheduler, SchedulerConfig, WorkerOsPriority, DEFAULT_SLICE};
pub use sim::{SimConfig, SimJob, SimResult, SimTaskSet};
pub use task::{
    FinalizeContext, FollowUps, QueryError, TaskContext, TaskError, TaskOutcome, TaskSetWork,
};
pub use topology::{Node, Topology, TopologyError, TopologyKind, TopologySpec};
pub use trace::{TaskRecord, Tracer};
pub use tuning::{TrackedWorkload, Tracker, TuningConfig, TuningReport, TuningResult};
pub use worker::WorkerStats;

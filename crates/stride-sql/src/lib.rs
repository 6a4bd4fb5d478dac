//! Stride's SQL front end.
//!
//! SQL text is parsed, bound and optimized by DataFusion (reused, not
//! rewritten); the optimized `LogicalPlan` is lowered by [`lower`] to Stride's
//! [`stride_exec::PhysicalPlan`], choosing hash-join build sides from
//! cardinality estimates, and run by the engine-wide runtime
//! (`stride_engine::Engine::run`, reached through [`Engine::runtime`]): the
//! SQL front end is one client of `stride-engine`, which owns the
//! scheduler, catalog, memory governance, query log and feedback store.
//!
//! * [`context`] — the catalog as DataFusion sees it (`ContextProvider`,
//!   `TableSource`), with the default function registry;
//! * [`join_order`] — reordering of inner-join clusters (dimension branches
//!   joined before the fact table probes them);
//! * [`semi_reduction`] — an aggregate joined on its group keys restricted
//!   to the keys the join can match (TPC-H Q17, Q20);
//! * [`lower`] — logical → physical plan, cardinality estimates;
//! * [`functions`] — size-checked `repeat`, `lpad`, `rpad` (54000 beyond
//!   1 GB per value);
//! * [`coerce`] — literal typing fixes applied before DataFusion's coercion;
//! * [`column_names`] — result columns named as PostgreSQL names them
//!   (`count`, `?column?`, `int4`), from the statement's syntax;
//! * [`decimal_division`] — `numeric / numeric` with PostgreSQL's 16
//!   significant digits, rounded;
//! * [`engine`] — engine and sessions, one submodule per statement kind:
//!   queries and EXPLAIN, prepared statements with parameters, DDL/DML,
//!   SET/SHOW, transactions (snapshot isolation, first committer wins,
//!   commits logged to the data directory);
//! * [`error`] — `SqlError` and the typed kinds its SQLSTATE is read from;
//! * [`interrupt`] — cancels and `statement_timeout`, also inside the
//!   optimizer;
//! * [`settings`] — `SET`/`SHOW`: the session's settings, Stride's and
//!   PostgreSQL's (engine-wide ones are `stride_engine::settings`);
//! * [`limits`] — stack-safe planning: statement stacks, token and depth bounds;
//! * [`integers`] — exact integer semantics: checked arithmetic, wide sums;
//! * [`roles`] — roles, table owners, grants and the privilege checks;
//!   [`scram`] — the SCRAM-SHA-256 verifiers roles keep of passwords;
//! * [`history`] — the keys SRPT's recorded costs are kept under in the
//!   engine's feedback store: plan fingerprints, shapes with literals
//!   masked, estimated rows;
//! * [`pg_catalog`] — `pg_catalog` and `information_schema` as views over
//!   the live catalog; [`pg_functions`] — PostgreSQL's catalog and session
//!   functions; [`pg_compat`] — PostgreSQL syntax clients send (`OPERATOR(
//!   pg_catalog.~)`, `::regclass`, `COLLATE "default"`, `= ANY(ARRAY[..])`)
//!   rewritten to what the planner binds;
//! * [`table_functions`] — `generate_series` and `unnest` in `FROM`, also
//!   with arguments that read a correlated subquery's outer columns;
//!   [`lateral`] — those calls reading the columns of the `FROM` items
//!   before them, expanded per row.

pub mod bytea_text;
pub mod coerce;
pub mod column_names;
pub mod context;
pub mod copy;
pub mod decimal_arith;
pub mod decimal_division;
pub mod engine;
pub mod error;
pub mod functions;
pub mod history;
pub mod integers;
pub mod interrupt;
pub mod interval_text;
pub mod join_order;
pub mod lateral;
pub mod limits;
pub mod lower;
pub mod pg_catalog;
pub mod pg_compat;
pub mod pg_functions;
pub mod roles;
pub mod scram;
pub mod semi_reduction;
pub mod series;
pub mod settings;
pub mod table_functions;
pub mod window;
pub mod window_functions;

pub use copy::{CopyFormat, CopyOptions};
pub use engine::{
    CopyIn, CopyOut, Engine, EngineConfig, FileAccess, MemoryConfig, Prepared, QueryOutput,
    ResultReceiver, ScanDefaults, Session, SpillConfig, StatementOutput,
};
pub use engine::{Fetched, LiveQuery, Opened};
pub use error::{PlanKind, SettingKind, SqlError, UndefinedKind};
pub use interrupt::Interrupt;

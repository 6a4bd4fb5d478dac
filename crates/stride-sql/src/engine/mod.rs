//! The SQL engine — the engine-wide runtime (`stride_engine::Engine`) plus
//! what planning keeps: functions, roles, the plan cache — and its sessions.
//!
//! A [`Session`] runs SQL text statement by statement:
//!
//! ```text
//!  text ─DFParser─► statements ─SqlToRel─► LogicalPlan ─┬─ DDL / DML / SET ─► catalog
//!                                                      └─ query ─► Analyzer ─► Optimizer
//!      ─► scalar subqueries run first, replaced by literals ─► lower
//!      ─► stride_engine::Engine::run (the runtime executes, records costs)
//! ```
//!
//! Every query (and every scalar subquery) is its own resource group on the
//! engine's scheduler; the session's thread waits for it, the workers never do.
//!
//! This module holds the engine, the session's core (parse, bind, optimize,
//! privilege checks, dispatch by statement kind, the query log); the
//! statement kinds live apart:
//!
//! * `prepared` — `Prepare`/`Bind`/`Execute`: statements bound once, run
//!   with parameter values, rebound to current table snapshots;
//! * `plan_cache` — optimized plans kept for re-binding: a prepared
//!   statement's own, and the engine's LRU of simple-protocol statement
//!   shapes (`literal_mask`: literals masked where provably safe);
//! * `query` — running queries and their scalar subqueries, summing their
//!   scheduler accounting; `EXPLAIN` and planning without running;
//! * `stream` — requests whose query results stream to a receiver (the
//!   server's connection) while the query runs;
//! * `live` — a query opened for later fetches (portals with a row limit,
//!   cursors);
//! * `ddl` — `CREATE`/`DROP SCHEMA`, `CREATE`/`DROP TABLE`,
//!   `CREATE EXTERNAL TABLE`, `INSERT`;
//! * `set` — `SET`, `SHOW`;
//! * `txn` — `BEGIN`/`COMMIT`/`ROLLBACK`: snapshot isolation on private
//!   catalog views, first committer wins, the commit of every write (to the
//!   data directory's log when there is one).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion_common::config::ConfigOptions;
use datafusion_common::DataFusionError;
use datafusion_expr::logical_plan::{DdlStatement, Statement, WriteOp};
use datafusion_expr::LogicalPlan;
use datafusion_optimizer::OptimizerContext;
use datafusion_sql::parser::Statement as DFStatement;
use datafusion_sql::planner::{ParserOptions, SqlToRel};
use datafusion_sql::sqlparser::ast::Statement as SqlStatement;
use stride_engine::activity::QueryOrigin;
use stride_engine::StatementStats;
use stride_exec::QueryStats;
use stride_storage::catalog::DEFAULT_SCHEMA;
use stride_storage::Table;

use crate::column_names::ColumnNames;
use crate::context::{FunctionRegistry, PlannerContext, SourceOrigin, StrideTableSource};
use crate::error::{PlanKind, Result, SqlError, UndefinedKind};
use crate::interrupt::Interrupt;
use crate::settings::SessionSettings;

mod apply;
mod catalog_views;
mod copy;
mod cursor;
mod ddl;
mod dml;
mod insert_defaults;
mod insert_source;
mod literal_mask;
mod live;
mod outer_refs;
mod place;
mod plan_cache;
mod prepared;
mod query;
mod set;
mod stream;
mod table_definition;
mod txn;

pub use catalog_views::PgContext;
pub use copy::{CopyIn, CopyOut};
pub use live::{Fetched, LiveQuery, Opened};
pub use plan_cache::{PlanCache, PlanCacheStats, DEFAULT_PLAN_CACHE_SIZE};
pub use prepared::Prepared;
pub use stream::ResultReceiver;
use txn::TransactionState;

pub use stride_engine::{EngineConfig, FileAccess, MemoryConfig, ScanDefaults, SpillConfig};

/// The SQL front end's engine: the engine-wide runtime
/// ([`stride_engine::Engine`]: scheduler, catalog, memory, query log,
/// feedback store) and what SQL keeps besides — the function registry,
/// DataFusion's options, roles and grants, the plan cache, the default
/// schema of new sessions.
pub struct Engine {
    runtime: stride_engine::Engine,
    functions: FunctionRegistry,
    options: ConfigOptions,
    /// Source of session ids; Relaxed: ids only need to be unique.
    next_session: AtomicU64,
    /// The schema new sessions resolve unqualified names in.
    default_schema: Mutex<String>,
    /// Roles, table owners and grants.
    roles: crate::roles::Roles,
    /// The roles' generation last written to the data directory; its mutex
    /// orders the writes, so a later write never carries an older catalog.
    security_persisted: std::sync::Mutex<u64>,
    /// Optimized plans of simple-protocol statement shapes.
    plan_cache: PlanCache,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("runtime", &self.runtime)
            .finish()
    }
}

/// A query's result.
#[derive(Debug)]
pub struct QueryOutput {
    pub schema: SchemaRef,
    /// The rows, unless they were streamed.
    pub batches: Vec<RecordBatch>,
    /// `Some(n)`: the result's `n` rows went to the session's
    /// [`ResultReceiver`] while the query ran, and `batches` is empty.
    pub streamed: Option<usize>,
    pub stats: QueryStats,
    /// Planning time: parse and bind (when the statement came as SQL text
    /// to [`Session::execute`]; a prepared statement was bound earlier),
    /// optimize, run uncorrelated subqueries, lower.
    pub planning: Duration,
    /// Wall time from submission to result.
    pub execution: Duration,
}

impl QueryOutput {
    pub fn num_rows(&self) -> usize {
        self.streamed
            .unwrap_or_else(|| self.batches.iter().map(|b| b.num_rows()).sum())
    }
}

/// What one statement produced.
#[derive(Debug)]
// One value per statement, moved a few times: boxing the query's output would
// cost an allocation per query to save a few hundred bytes of moves.
#[allow(clippy::large_enum_variant)]
pub enum StatementOutput {
    Query(QueryOutput),
    /// A command; `tag` is the PostgreSQL-style command tag (`CREATE TABLE`, `INSERT 0 3`).
    Command {
        tag: String,
    },
    /// EXPLAIN text.
    Explain(String),
    /// `DEALLOCATE` / `DISCARD ALL`: the caller, which keeps the prepared
    /// statements, drops the one named (`None`: all of them).
    Deallocate {
        name: Option<String>,
        tag: String,
    },
    /// `COPY … FROM`: the caller reads the rows (from the client or the
    /// file named) and hands them to [`Session::copy_rows`].
    CopyIn(Box<CopyIn>),
    /// `COPY … TO STDOUT`: the rows, for the caller to send.
    CopyOut(Box<CopyOut>),
}

impl Engine {
    pub fn new(config: EngineConfig) -> Arc<Engine> {
        let mut options = ConfigOptions::new();
        options.sql_parser.parse_float_as_decimal = true;
        Arc::new(Engine {
            runtime: stride_engine::Engine::new(config),
            functions: FunctionRegistry::default(),
            options,
            next_session: AtomicU64::new(1),
            default_schema: Mutex::new(DEFAULT_SCHEMA.to_string()),
            roles: crate::roles::Roles::new(),
            security_persisted: std::sync::Mutex::new(0),
            plan_cache: PlanCache::new(DEFAULT_PLAN_CACHE_SIZE),
        })
    }

    /// The engine-wide runtime this front end plans for: scheduler,
    /// catalog, memory governance, shared scans, data directory, query log,
    /// feedback store, file access.
    pub fn runtime(&self) -> &stride_engine::Engine {
        &self.runtime
    }

    /// The cache of simple-protocol statement shapes' plans
    /// (`stride.plan_cache_size`).
    pub fn plan_cache(&self) -> &PlanCache {
        &self.plan_cache
    }

    /// Opens the data directory, recovers its tables into the catalog and
    /// the roles from it, and logs every commit from now on. Call once,
    /// before any table is created or generated.
    pub fn open_data_dir(
        &self,
        config: &stride_storage::durable::DataDirConfig,
    ) -> Result<&stride_storage::durable::RecoveryReport> {
        self.runtime.open_data_dir(config, |catalog| {
            if let Some(bytes) = catalog.security() {
                self.roles.restore(&bytes)?;
            }
            *self
                .security_persisted
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = self.roles.generation();
            Ok::<(), SqlError>(())
        })
    }

    /// Makes `schema` the default schema of sessions opened from now on.
    pub fn set_default_schema(&self, schema: &str) -> Result<()> {
        if !self.runtime.catalog().schema_exists(schema) {
            return Err(SqlError::undefined(
                UndefinedKind::Schema,
                format!("schema \"{schema}\" does not exist"),
            ));
        }
        *self
            .default_schema
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = schema.to_string();
        Ok(())
    }

    /// Roles, table owners and grants.
    pub fn roles(&self) -> &crate::roles::Roles {
        &self.roles
    }

    /// The system view `stride.<name>`, built now; `None`: no such view.
    pub fn system_view(
        &self,
        name: &str,
        viewer: stride_engine::activity::Viewer,
    ) -> Result<Option<Table>> {
        match name {
            "roles" => self.roles.roles_table().map(Some),
            "table_privileges" => self
                .roles
                .table_privileges_table(self.runtime.catalog())
                .map(Some),
            "plan_cache" => self.plan_cache.entries_table(viewer).map(Some),
            "plan_cache_stats" => self.plan_cache.stats_table().map(Some),
            _ => Ok(self.runtime.system_view(name, viewer)?),
        }
    }

    /// A session of the bootstrap superuser (the command line, embedded
    /// use, tests): every privilege.
    pub fn session(self: &Arc<Self>) -> Session {
        self.session_as(
            crate::roles::BOOTSTRAP_ROLE_ID,
            crate::roles::BOOTSTRAP_ROLE,
        )
    }

    /// A session of the role named `user`; a name that is not a role gets
    /// no privileges.
    pub fn session_for(self: &Arc<Self>, user: &str) -> Session {
        let role = self
            .roles
            .by_name(user)
            .map_or(crate::roles::NO_ROLE, |r| r.id);
        self.session_as(role, user)
    }

    /// A session with the privileges of role `role`, shown in
    /// `stride.queries` as `user` (the name the client gave).
    pub fn session_as(self: &Arc<Self>, role: crate::roles::RoleId, user: &str) -> Session {
        let role_name = self
            .roles
            .get(role)
            .map_or_else(|| user.to_string(), |r| r.name);
        Session {
            role,
            role_name,
            engine: self.clone(),
            default_schema: self
                .default_schema
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            id: self.next_session.fetch_add(1, Ordering::Relaxed),
            user: user.to_string(),
            settings: SessionSettings::default(),
            transaction: TransactionState::default(),
            interrupt: Arc::new(Interrupt::default()),
            cursors: Default::default(),
            statement_stats: RefCell::new(StatementStats::default()),
            receiver: None,
            opening: Default::default(),
        }
    }

    /// Adds generated tables under `schema` (created if missing, transient:
    /// never logged nor checkpointed), replacing tables of the same names.
    /// With a data directory, a schema of persisted tables is refused.
    pub fn add_tables(&self, schema: &str, tables: Vec<Table>) -> Result<()> {
        let catalog = self.runtime.catalog();
        if self.runtime.data_dir().is_some() || !catalog.schema_exists(schema) {
            catalog.create_transient_schema(schema)?;
        }
        for t in tables {
            // The bootstrap superuser owns tables loaded outside SQL.
            self.roles.table_dropped(schema, t.name());
            catalog.put_table(schema, t, true)?;
        }
        Ok(())
    }

    /// Generates TPC-H at `scale` into schema `sf<scale>` (e.g. `sf0_1`); returns the schema name.
    pub fn load_tpch(&self, scale: f64) -> Result<String> {
        let schema = stride_storage::scale_factor_schema("", scale);
        let threads = self.runtime.scheduler().config().workers;
        self.add_tables(&schema, stride_storage::tpch::generate(scale, threads)?)?;
        Ok(schema)
    }

    /// Generates TPC-DS at `scale` into schema `tpcds_sf<scale>`; returns the schema name.
    pub fn load_tpcds(&self, scale: f64) -> Result<String> {
        let schema = stride_storage::scale_factor_schema("tpcds_", scale);
        let threads = self.runtime.scheduler().config().workers;
        self.add_tables(&schema, stride_storage::tpcds::generate(scale, threads)?)?;
        Ok(schema)
    }

    /// Generates SSB at `scale` into schema `ssb_sf<scale>`; returns the schema name.
    pub fn load_ssb(&self, scale: f64, seed: u64) -> Result<String> {
        let schema = stride_storage::scale_factor_schema("ssb_", scale);
        let threads = self.runtime.scheduler().config().workers;
        self.add_tables(
            &schema,
            stride_storage::ssb::generate(scale, seed, threads)?,
        )?;
        Ok(schema)
    }
}

/// One client's session: default schema and settings.
pub struct Session {
    engine: Arc<Engine>,
    default_schema: String,
    /// Unique per engine; shown in `stride.queries`.
    id: u64,
    /// The name the client gave (shown in `stride.queries`).
    user: String,
    /// The role whose privileges the session has (`current_user`).
    role: crate::roles::RoleId,
    /// Its name when the session began (kept should the role be dropped).
    role_name: String,
    settings: SessionSettings,
    transaction: TransactionState,
    interrupt: Arc<Interrupt>,
    /// Open cursors (`DECLARE`), by name.
    cursors: cursor::Cursors,
    /// Scheduler accounting summed over the queries of the running statement
    /// (a statement may run scalar subqueries first).
    statement_stats: RefCell<StatementStats>,
    /// Where the running request's query results stream to (set for one
    /// request by `execute_statements_streaming` / `execute_prepared_streaming`).
    receiver: Option<Arc<dyn ResultReceiver>>,
    /// Whether the running request opens its query live (`live`), and the
    /// query it opened.
    opening: RefCell<live::Opening>,
}

/// Stride's rules that read cardinality estimates — the literals' range
/// selectivities and the tables' current sizes — run after DataFusion's
/// optimizer on a plan whose values and snapshots are bound: the
/// semi-join reduction of aggregates (`semi_reduction`), then join
/// ordering (`join_order`, which also pushes the reduction's semi joins
/// onto one leaf of a join cluster). Uncached plans take them in
/// [`Session::optimize`], cached ones at each execution (`plan_cache`).
pub(crate) fn bound_rules(plan: LogicalPlan) -> Result<LogicalPlan> {
    let plan = crate::semi_reduction::reduce_aggregates(plan)?;
    crate::join_order::reorder_joins(plan)
}

fn external(e: SqlError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// An error of DataFusion's analyzer. The analyzer's work is type coercion:
/// a plan it refuses has types that do not fit together.
fn analyzer_error(e: DataFusionError) -> SqlError {
    match SqlError::from(e) {
        SqlError::Plan {
            kind: PlanKind::Other,
            message,
        } => SqlError::plan(PlanKind::DatatypeMismatch, message),
        other => other,
    }
}

impl Session {
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    pub fn default_schema(&self) -> &str {
        &self.default_schema
    }

    /// Sets the schema unqualified table names resolve in.
    pub fn set_default_schema(&mut self, schema: &str) -> Result<()> {
        if !self.catalog_view().schema_exists(schema) {
            return Err(SqlError::undefined(
                UndefinedKind::Schema,
                format!("schema \"{schema}\" does not exist"),
            ));
        }
        self.default_schema = schema.to_string();
        Ok(())
    }

    /// Runs every statement of `sql`; stops at the first error.
    pub fn execute(&mut self, sql: &str) -> Result<Vec<StatementOutput>> {
        self.execute_statements(sql).into_iter().collect()
    }

    /// Runs the statements of `sql` one by one and returns each one's result;
    /// after the first failing statement no further one runs (its error is
    /// the last element).
    pub fn execute_statements(&mut self, sql: &str) -> Vec<Result<StatementOutput>> {
        let mut out = Vec::new();
        self.execute_each(sql, &mut |result| out.push(result));
        out
    }

    /// As [`Session::execute_statements`], handing each statement's result
    /// to `each` as soon as the statement ended.
    pub(super) fn execute_each(
        &mut self,
        sql: &str,
        each: &mut dyn FnMut(Result<StatementOutput>),
    ) {
        self.begin_request();
        crate::limits::on_statement_stack(|| self.run_statements(sql, each))
    }

    /// The statement timeout of this session, if one is set.
    fn statement_timeout(&self) -> Option<Duration> {
        self.settings
            .get("statement_timeout")
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis)
    }

    fn begin_request(&self) {
        self.interrupt.begin(self.statement_timeout());
    }

    fn run_statements(&mut self, sql: &str, each: &mut dyn FnMut(Result<StatementOutput>)) {
        let parse_start = Instant::now();
        if prepared::is_checkpoint(sql) {
            let result = self
                .prepare_text(sql)
                .and_then(|p| self.run_prepared(&p, Vec::new()));
            if result.is_err() {
                self.statement_failed();
            }
            return each(result);
        }
        if crate::copy::is_copy(sql) {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.copy(sql)))
                .unwrap_or_else(|panic| Err(SqlError::Internal(panic_text(&panic))));
            if result.is_err() {
                self.statement_failed();
            }
            return each(result);
        }
        let statements = match crate::limits::parse(sql) {
            Ok(s) => s,
            Err(e) => {
                self.statement_failed();
                return each(Err(e));
            }
        };
        // Parsing the request counts as planning of its first query; binding
        // (SQL to logical plan) as planning of the statement bound.
        let mut parsing = Some(parse_start.elapsed());
        // A request of one statement is logged as the client sent it
        // (comments included, as pg_stat_activity shows it); the statements
        // of a longer request each as their own text.
        let verbatim = (statements.len() == 1)
            .then(|| sql.trim().trim_end_matches(';').trim_end().to_string());
        for stmt in statements {
            let result = reject_unsupported_syntax(&stmt).and_then(|()| {
                // Planning runs on the session's thread; a panic in a planner
                // library must fail this statement only.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.interrupt.check()?;
                    let bind_start = Instant::now();
                    let text = verbatim.clone().unwrap_or_else(|| stmt.to_string());
                    let refuse = match self.run_through_cache(&stmt, &text, bind_start) {
                        plan_cache::Through::Ran(output) => {
                            let mut output = output?;
                            if let StatementOutput::Query(q) = &mut output {
                                q.planning += parsing.take().unwrap_or_default();
                            }
                            return Ok(output);
                        }
                        plan_cache::Through::Full(refuse) => refuse,
                    };
                    let mut prepared = self.prepare_statement(stmt)?;
                    if let Some(text) = &verbatim {
                        prepared.sql.clone_from(text);
                    }
                    let binding = bind_start.elapsed();
                    let mut output = self.run_prepared(&prepared, Vec::new())?;
                    if let StatementOutput::Query(q) = &mut output {
                        q.planning += binding + parsing.take().unwrap_or_default();
                    }
                    if let Some(key) = refuse {
                        // The statement plans with its literals but not
                        // with them masked: plan its shape in full.
                        self.engine.plan_cache.refuse(key);
                    }
                    Ok(output)
                }))
                .unwrap_or_else(|panic| Err(SqlError::Internal(panic_text(&panic))))
            });
            let failed = result.is_err();
            if failed {
                self.statement_failed();
            }
            each(result);
            if failed {
                break;
            }
        }
    }

    /// Runs exactly one query and returns its rows.
    pub fn query(&mut self, sql: &str) -> Result<QueryOutput> {
        let mut outputs = self.execute(sql)?;
        if outputs.len() != 1 {
            return Err(SqlError::plan(
                PlanKind::Other,
                format!("expected one statement, got {}", outputs.len()),
            ));
        }
        match outputs.pop() {
            Some(StatementOutput::Query(q)) => Ok(q),
            _ => Err(SqlError::plan(
                PlanKind::Other,
                "the statement returned no rows",
            )),
        }
    }

    fn to_logical(&self, mut stmt: DFStatement) -> Result<LogicalPlan> {
        crate::pg_compat::rewrite(&mut stmt, &|name| self.engine.functions.is_aggregate(name))?;
        let engine = &self.engine;
        let system = |name: &str| self.view(name);
        let session_user = self.current_user();
        let ctx = PlannerContext {
            catalog: self.catalog_view(),
            functions: &engine.functions,
            default_schema: &self.default_schema,
            options: &engine.options,
            system: &system,
            session_user: &session_user,
            misses: Default::default(),
            pg: self.pg_context(),
        };
        let options = ParserOptions::default()
            .with_parse_float_as_decimal(true)
            .with_enable_ident_normalization(true);
        SqlToRel::new_with_options(&ctx, options)
            .statement_to_plan(stmt)
            .map_err(|e| {
                // The planner fails with a plain message when it finds no
                // function of a called name; which name that was, it told
                // the context while looking.
                let unknown = ctx.misses.unknown_function();
                match unknown {
                    Some(name)
                        if matches!(
                            e.find_root(),
                            DataFusionError::Plan(_) | DataFusionError::Internal(_)
                        ) =>
                    {
                        SqlError::undefined(
                            UndefinedKind::Function,
                            format!("function {name} does not exist"),
                        )
                    }
                    _ => SqlError::from(e),
                }
            })
    }

    /// Type coercion and logical optimization.
    pub fn optimize(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        bound_rules(self.optimize_unordered(plan)?)
    }

    /// [`Session::optimize`] but for Stride's rules of [`bound_rules`], which read
    /// the literals' range selectivities and the tables' current sizes: a
    /// cached plan takes them at each execution, once its values and
    /// snapshots are bound (`plan_cache`).
    fn optimize_unordered(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        crate::lower::refuse_not_in_inside_disjunctions(&plan)?;
        let options = &self.engine.options;
        let plan = crate::coerce::exponent_literals(plan)?;
        let plan = crate::coerce::float_literals(plan)?;
        let plan = crate::decimal_division::numeric_division(plan)?;
        let plan = crate::integers::widen_integer_sums(plan)?;
        let analyzed = crate::interrupt::analyzer(&self.interrupt)
            .execute_and_check(plan, options, |_, _| {})
            .map_err(analyzer_error)?;
        let analyzed = crate::integers::fold_constants(analyzed)?;
        let analyzed = crate::lateral::plan::expand_lateral_calls(analyzed)?;
        let settings = crate::context::OptimizerSettings {
            context: OptimizerContext::new(),
            functions: &self.engine.functions,
        };
        crate::interrupt::optimizer(&self.interrupt)
            .optimize(analyzed, &settings, |_, _| {})
            .map_err(SqlError::from)
    }

    /// Session id (unique per engine).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The role whose privileges the session has.
    pub fn role(&self) -> crate::roles::RoleId {
        self.role
    }

    /// The name of the session's role (`current_user`, `session_user`).
    pub fn current_user(&self) -> String {
        self.engine
            .roles
            .get(self.role)
            .map_or_else(|| self.role_name.clone(), |r| r.name)
    }

    /// Whether the session's role is a superuser (now).
    pub fn is_superuser(&self) -> bool {
        self.engine.roles.is_superuser(self.role)
    }

    /// This session as a reader of the system views.
    fn viewer(&self) -> stride_engine::activity::Viewer {
        stride_engine::activity::Viewer {
            role: self.role,
            superuser: self.is_superuser(),
        }
    }

    /// The session's settings.
    pub fn settings(&self) -> &SessionSettings {
        &self.settings
    }

    /// Whether a `BEGIN` block is open (reported to clients as the
    /// transaction status).
    pub fn in_transaction(&self) -> bool {
        self.transaction.open
    }

    /// A handle that cancels this session's running statement from another
    /// thread.
    pub fn interrupt(&self) -> Arc<Interrupt> {
        self.interrupt.clone()
    }

    /// Applies `SET name = value` (used for the settings a client sends when
    /// it connects).
    pub fn set_variable(&mut self, name: &str, value: &str) -> Result<()> {
        self.set(&name.to_lowercase(), value).map(|_| ())
    }

    /// Checks a bound statement against the session's role before it runs
    /// (once per execution, prepared statements included): `SELECT` on
    /// every table it reads (its scans, subqueries' too), `INSERT` /
    /// `UPDATE` / `DELETE` on a DML target, `CREATE` on the schema of a new
    /// table, ownership to drop or replace a table, `SUPERUSER` for schemas,
    /// server-side files (external tables, `COPY`) and engine-wide settings
    /// ([`Session::set`]). Superusers pass every check.
    fn authorize(&self, plan: &LogicalPlan) -> Result<()> {
        use crate::roles::{SchemaPrivilege, TablePrivilege};
        use datafusion_common::tree_node::TreeNodeRecursion;
        let roles = &self.engine.roles;
        if roles.is_superuser(self.role) {
            return Ok(());
        }
        let superuser = |what: &str| {
            roles.require_superuser(self.role, || {
                format!("permission denied to {what}: only superusers may")
            })
        };
        match plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) => {
                let (schema, table) = self.table_name(&c.name);
                roles.check_schema(self.role, &schema, SchemaPrivilege::Create)?;
                if c.or_replace && self.catalog_view().table(&schema, &table).is_ok() {
                    roles.check_owner(self.role, &schema, &table)?;
                }
            }
            LogicalPlan::Ddl(DdlStatement::CreateExternalTable(_)) => {
                superuser("read server files (CREATE EXTERNAL TABLE)")?
            }
            LogicalPlan::Ddl(DdlStatement::DropTable(d)) => {
                let (schema, table) = self.table_name(&d.name);
                if self.catalog_view().table(&schema, &table).is_ok() {
                    roles.check_owner(self.role, &schema, &table)?;
                }
            }
            LogicalPlan::Ddl(
                DdlStatement::CreateCatalogSchema(_) | DdlStatement::DropCatalogSchema(_),
            ) => superuser("create or drop schemas")?,
            LogicalPlan::Copy(_) => superuser("read or write server files (COPY)")?,
            _ => {}
        }
        // The table a DML statement writes needs that statement's privilege;
        // UPDATE and DELETE plans scan their target, which needs no SELECT
        // (Stride runs neither yet: they fail as unsupported after this).
        let target = match plan {
            LogicalPlan::Dml(dml) => {
                let (schema, table) = self.table_name(&dml.table_name);
                let (privilege, scans_target) = match dml.op {
                    WriteOp::Insert(_) | WriteOp::Ctas => (TablePrivilege::Insert, false),
                    WriteOp::Update => (TablePrivilege::Update, true),
                    _ => (TablePrivilege::Delete, true),
                };
                roles.check_table(self.role, &schema, &table, privilege)?;
                scans_target.then_some((schema, table))
            }
            _ => None,
        };
        let mut denied = None;
        plan.apply_with_subqueries(|node| {
            if let LogicalPlan::TableScan(scan) = node {
                if let Some(source) = scan.source.downcast_ref::<StrideTableSource>() {
                    if let SourceOrigin::Catalog { schema, table } = &source.origin {
                        let is_target = target
                            .as_ref()
                            .is_some_and(|(s, t)| s == schema && t == table);
                        if !is_target {
                            if let Err(e) =
                                roles.check_table(self.role, schema, table, TablePrivilege::Select)
                            {
                                denied = Some(e);
                                return Ok(TreeNodeRecursion::Stop);
                            }
                        }
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(SqlError::from)?;
        denied.map_or(Ok(()), Err)
    }

    /// Runs a bound statement; a query's result streams to the request's
    /// receiver where `stream` (a statement's own result: not a cursor's),
    /// its columns named `names` (`crate::column_names`).
    fn dispatch(
        &mut self,
        plan: LogicalPlan,
        sql: &str,
        stream: bool,
        names: Option<&ColumnNames>,
    ) -> Result<StatementOutput> {
        let start = Instant::now();
        match plan {
            LogicalPlan::Ddl(ddl) => {
                let what = statement_words(sql);
                self.logged(sql, |s| s.writing(&what, |s| s.ddl(ddl)))
            }
            LogicalPlan::Dml(dml) => {
                let what = statement_words(sql);
                self.logged(sql, |s| s.writing(&what, |s| s.dml(dml)))
            }
            LogicalPlan::Statement(Statement::SetVariable(set)) => {
                self.set(&set.variable.to_lowercase(), &set.value)
            }
            LogicalPlan::Statement(other) => {
                Err(SqlError::Unsupported(format!("statement {}", other.name())))
            }
            LogicalPlan::Explain(explain) => {
                let optimized = self.optimize(explain.plan.as_ref().clone())?;
                Ok(StatementOutput::Explain(self.explain(&optimized)?))
            }
            LogicalPlan::Analyze(_) => Err(SqlError::Unsupported("EXPLAIN ANALYZE".into())),
            LogicalPlan::Copy(_) => Err(SqlError::Unsupported("COPY".into())),
            LogicalPlan::DescribeTable(_) => Err(SqlError::Unsupported("DESCRIBE".into())),
            query => self.logged(sql, |s| {
                let optimized = s.optimize(query)?;
                s.run_planned(&optimized, stream, start, names)
            }),
        }
    }

    /// Runs `f` as one entry of the query log, with the scheduler accounting
    /// of every query it ran.
    fn logged(
        &mut self,
        sql: &str,
        f: impl FnOnce(&mut Self) -> Result<StatementOutput>,
    ) -> Result<StatementOutput> {
        let origin = QueryOrigin {
            session_id: self.id,
            user: &self.user,
            role: self.role,
            user_priority: self.settings.user_priority,
            policy: self.engine.runtime.scheduler().policy().name().to_string(),
        };
        let id = self.engine.runtime.query_log().start(origin, sql);
        self.statement_stats.borrow_mut().clear();
        let result = f(self);
        if result.is_ok() && self.adopt_log_entry(id) {
            // The query's rows are still to be fetched: it ends the entry.
            return result;
        }
        let stats = self.statement_stats.borrow_mut().take();
        let outcome = match &result {
            Ok(_) => Ok(&stats),
            Err(e @ (SqlError::Cancelled | SqlError::Timeout)) => Err(("cancelled", e.to_string())),
            Err(e) => Err(("failed", e.to_string())),
        };
        self.engine.runtime.query_log().finish(id, outcome);
        result
    }

    fn table_name(&self, name: &datafusion_common::TableReference) -> (String, String) {
        match name {
            datafusion_common::TableReference::Bare { table } => {
                (self.default_schema.clone(), table.to_string())
            }
            datafusion_common::TableReference::Partial { schema, table }
            | datafusion_common::TableReference::Full { schema, table, .. } => {
                (schema.to_string(), table.to_string())
            }
        }
    }
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("planning panicked: {msg}")
}

/// Rejects SQL whose DataFusion plan would not mean what the SQL says.
fn reject_unsupported_syntax(stmt: &DFStatement) -> Result<()> {
    table_definition::declared(stmt)?;
    use datafusion_sql::sqlparser::ast::{SetExpr, SetOperator, SetQuantifier};
    fn check(body: &SetExpr) -> Result<()> {
        match body {
            SetExpr::SetOperation {
                op,
                set_quantifier,
                left,
                right,
            } => {
                if matches!(
                    op,
                    SetOperator::Intersect | SetOperator::Except | SetOperator::Minus
                ) && matches!(set_quantifier, SetQuantifier::All)
                {
                    return Err(SqlError::Unsupported(format!("{op} ALL")));
                }
                check(left)?;
                check(right)
            }
            SetExpr::Query(q) => check(&q.body),
            SetExpr::Select(select) => {
                if let Some(datafusion_sql::sqlparser::ast::Distinct::On(_)) = &select.distinct {
                    return Err(SqlError::Unsupported("SELECT DISTINCT ON".into()));
                }
                for table in &select.from {
                    let factors = std::iter::once(&table.relation)
                        .chain(table.joins.iter().map(|j| &j.relation));
                    for factor in factors {
                        if let datafusion_sql::sqlparser::ast::TableFactor::Derived {
                            subquery,
                            ..
                        } = factor
                        {
                            check(&subquery.body)?;
                        }
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    match stmt {
        DFStatement::Statement(s) => match s.as_ref() {
            SqlStatement::Query(q) => check(&q.body),
            SqlStatement::Insert(i) => i.source.as_ref().map_or(Ok(()), |q| check(&q.body)),
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

/// A statement's kind for messages: its first two words (`CREATE TABLE`,
/// `INSERT INTO`).
fn statement_words(sql: &str) -> String {
    sql.split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
        .to_uppercase()
}

fn command(tag: &str) -> StatementOutput {
    StatementOutput::Command {
        tag: tag.to_string(),
    }
}

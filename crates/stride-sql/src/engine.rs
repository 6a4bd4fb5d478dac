//! The engine (catalog + scheduler + function registry) and its sessions.
//!
//! A [`Session`] runs SQL text statement by statement:
//!
//! ```text
//!  text ─DFParser─► statements ─SqlToRel─► LogicalPlan ─┬─ DDL / DML / SET ─► catalog
//!                                                      └─ query ─► Analyzer ─► Optimizer
//!      ─► scalar subqueries run first, replaced by literals ─► lower ─► execute
//! ```
//!
//! Every query (and every scalar subquery) is its own resource group on the
//! engine's scheduler; the session's thread waits for it, the workers never do.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion_common::config::ConfigOptions;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{DataFusionError, ScalarValue, SchemaReference};
use datafusion_expr::logical_plan::{DdlStatement, DmlStatement, Statement, WriteOp};
use datafusion_expr::{Expr, LogicalPlan};
use datafusion_optimizer::OptimizerContext;
use datafusion_sql::parser::Statement as DFStatement;
use datafusion_sql::planner::{ParserOptions, SqlToRel};
use datafusion_sql::sqlparser::ast::Statement as SqlStatement;
use stride_exec::QueryStats;
use stride_sched::{Scheduler, SchedulerConfig};
use stride_storage::catalog::DEFAULT_SCHEMA;
use stride_storage::{Catalog, Table};

use crate::activity::{QueryLog, QueryOrigin};
use crate::context::{FunctionRegistry, PlannerContext, SourceOrigin, StrideTableSource};
use crate::error::{PlanKind, Result, SettingKind, SqlError, UndefinedKind};
use crate::interrupt::Interrupt;
use crate::lower::Lowerer;
use crate::settings::SessionSettings;

/// Engine settings.
#[derive(Debug, Clone, Default)]
pub struct EngineConfig {
    pub scheduler: SchedulerConfig,
    pub memory: MemoryConfig,
    pub spill: SpillConfig,
}

/// Where queries spill what their memory share cannot hold (see
/// `stride_exec::spill`).
#[derive(Debug, Clone, Default)]
pub struct SpillConfig {
    /// The directory in which the engine makes its spill area
    /// (`stride-<pid>`); the system's temporary directory when `None`.
    pub temp_dir: Option<std::path::PathBuf>,
    /// `temp_file_limit`: bytes one query may hold in spill files; `None`:
    /// no limit.
    pub file_limit: Option<u64>,
    /// For tests: spillable operators spill every batch
    /// (`stride_exec::SpillArea::set_force`).
    pub force: bool,
}

/// Memory governance (see `stride_exec::memory`).
#[derive(Debug, Clone, Copy)]
pub struct MemoryConfig {
    /// Bytes all queries together may hold (`stride.memory_limit`).
    pub limit: usize,
    /// Bytes one query may hold unless its session sets
    /// `stride.query_memory_limit`; never more than `limit`.
    pub query_limit: usize,
}

impl Default for MemoryConfig {
    /// [`stride_exec::memory::default_limit`] (80% of the machine's or the
    /// cgroup's memory), and half of it for one query, so that one runaway
    /// query leaves room for the others.
    fn default() -> Self {
        let limit = stride_exec::memory::default_limit();
        MemoryConfig {
            limit,
            query_limit: limit / 2,
        }
    }
}

/// Which server-side files statements may read (`CREATE EXTERNAL TABLE`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum FileAccess {
    /// None: file statements fail with SQLSTATE 42501 (a new engine's
    /// setting, and the server's unless it is given an import directory).
    #[default]
    Denied,
    /// Regular files under this directory only: relative locations resolve
    /// in it; `..`, absolute paths elsewhere and symbolic links that lead
    /// out are refused before the file system is asked anything.
    Under(std::path::PathBuf),
    /// Any regular file the process can read (the local command line, whose
    /// user owns the process anyway).
    Any,
}

impl FileAccess {
    /// The file a statement may read at `location`, or why not.
    pub fn resolve(&self, location: &str) -> Result<std::path::PathBuf> {
        use std::path::{Component, Path};
        let denied = |why: &str| {
            SqlError::InsufficientPrivilege(format!(
                "permission denied to read \"{location}\": {why}"
            ))
        };
        let path = Path::new(location);
        let resolved = match self {
            FileAccess::Denied => {
                return Err(denied(
                    "server-side files can be read only under an import directory \
                     (stride serve --import-dir DIR)",
                ))
            }
            FileAccess::Any => path.to_path_buf(),
            FileAccess::Under(dir) => {
                if path.components().any(|c| matches!(c, Component::ParentDir)) {
                    return Err(denied("the location may not contain \"..\""));
                }
                let relative = if path.is_absolute() {
                    path.strip_prefix(dir)
                        .map_err(|_| denied("the file is outside the import directory"))?
                } else {
                    path
                };
                let root = dir.canonicalize().map_err(|e| {
                    SqlError::Internal(format!("import directory {}: {e}", dir.display()))
                })?;
                let full = root.join(relative).canonicalize().map_err(|_| {
                    SqlError::undefined(
                        UndefinedKind::File,
                        format!("could not open file \"{location}\" in the import directory"),
                    )
                })?;
                if !full.starts_with(&root) {
                    return Err(denied("the file is outside the import directory"));
                }
                full
            }
        };
        match std::fs::metadata(&resolved) {
            Ok(m) if !m.is_file() => Err(SqlError::plan(
                PlanKind::WrongObjectType,
                format!("\"{location}\" is not a regular file"),
            )),
            // The reader reports a missing file with its path.
            _ => Ok(resolved),
        }
    }
}

/// Catalog, scheduler and function registry shared by all sessions.
pub struct Engine {
    catalog: Arc<Catalog>,
    scheduler: Scheduler,
    functions: FunctionRegistry,
    options: ConfigOptions,
    log: QueryLog,
    /// Recorded per-pipeline costs: SRPT's remaining-work estimates.
    history: crate::history::WorkHistory,
    /// Source of session ids; Relaxed: ids only need to be unique.
    next_session: AtomicU64,
    /// The schema new sessions resolve unqualified names in.
    default_schema: Mutex<String>,
    /// Which server-side files statements may read.
    file_access: Mutex<FileAccess>,
    /// Roles, table owners and grants.
    roles: crate::roles::Roles,
    /// The memory all queries are charged to.
    memory: Arc<stride_exec::MemoryPool>,
    /// The default share of one query (bytes; Relaxed: a plain setting).
    query_memory_limit: std::sync::atomic::AtomicUsize,
    /// Where queries spill; replaced by `SET stride.temp_directory` (a
    /// running query keeps the area it started with).
    spill: Mutex<Arc<stride_exec::SpillArea>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("workers", &self.scheduler.config().workers)
            .finish()
    }
}

/// A query's result.
#[derive(Debug)]
pub struct QueryOutput {
    pub schema: SchemaRef,
    pub batches: Vec<RecordBatch>,
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
        self.batches.iter().map(|b| b.num_rows()).sum()
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
}

impl Engine {
    pub fn new(config: EngineConfig) -> Arc<Engine> {
        let mut options = ConfigOptions::new();
        options.sql_parser.parse_float_as_decimal = true;
        Arc::new(Engine {
            catalog: Arc::new(Catalog::new()),
            scheduler: Scheduler::new(config.scheduler),
            functions: FunctionRegistry::default(),
            options,
            log: QueryLog::default(),
            history: Default::default(),
            next_session: AtomicU64::new(1),
            default_schema: Mutex::new(DEFAULT_SCHEMA.to_string()),
            file_access: Mutex::new(FileAccess::Denied),
            roles: crate::roles::Roles::new(),
            memory: stride_exec::MemoryPool::new(config.memory.limit),
            query_memory_limit: std::sync::atomic::AtomicUsize::new(config.memory.query_limit),
            spill: Mutex::new({
                let area = stride_exec::SpillArea::new(config.spill.temp_dir.as_deref());
                area.set_file_limit(config.spill.file_limit);
                area.set_force(config.spill.force);
                area
            }),
        })
    }

    /// The spill area new queries spill to.
    pub fn spill_area(&self) -> Arc<stride_exec::SpillArea> {
        self.spill.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `stride.temp_directory`: the directory the spill area is made in.
    pub fn temp_directory(&self) -> String {
        let spill = self.spill_area();
        let dir = spill.dir();
        dir.parent().unwrap_or(dir).display().to_string()
    }

    /// Moves the spill area of queries started from now on into `parent`
    /// (`stride.temp_directory`), which must be an existing directory.
    pub fn set_temp_directory(&self, parent: &std::path::Path) -> Result<()> {
        if !parent.is_absolute() || !parent.is_dir() {
            return Err(SqlError::setting(
                SettingKind::InvalidValue,
                format!(
                    "invalid value for parameter \"stride.temp_directory\": \"{}\" (an existing directory, as an absolute path)",
                    parent.display()
                ),
            ));
        }
        let mut spill = self.spill.lock().unwrap_or_else(|e| e.into_inner());
        let area = stride_exec::SpillArea::new(Some(parent));
        area.set_file_limit(spill.file_limit());
        area.set_force(spill.forced());
        *spill = area;
        Ok(())
    }

    /// The memory pool every query is charged to.
    pub fn memory(&self) -> &Arc<stride_exec::MemoryPool> {
        &self.memory
    }

    /// Sets the server-wide memory limit (`stride.memory_limit`).
    pub fn set_memory_limit(&self, bytes: usize) {
        self.memory.set_limit(bytes);
    }

    /// The share of one query whose session did not set its own.
    pub fn query_memory_limit(&self) -> usize {
        self.query_memory_limit.load(Ordering::Relaxed)
    }

    /// Sets the default share of one query.
    pub fn set_query_memory_limit(&self, bytes: usize) {
        self.query_memory_limit.store(bytes, Ordering::Relaxed);
    }

    /// Sets which server-side files statements may read.
    pub fn set_file_access(&self, access: FileAccess) {
        *self.file_access.lock().unwrap_or_else(|e| e.into_inner()) = access;
    }

    /// Which server-side files statements may read.
    pub fn file_access(&self) -> FileAccess {
        self.file_access
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Recorded per-pipeline costs (SRPT's estimates).
    pub fn history(&self) -> &crate::history::WorkHistory {
        &self.history
    }

    /// Active and recent queries (the `stride.queries` system view).
    pub fn query_log(&self) -> &QueryLog {
        &self.log
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Makes `schema` the default schema of sessions opened from now on.
    pub fn set_default_schema(&self, schema: &str) -> Result<()> {
        if !self.catalog.schema_exists(schema) {
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
        viewer: crate::activity::Viewer,
    ) -> Result<Option<Table>> {
        match name {
            "roles" => self.roles.roles_table().map(Some),
            "table_privileges" => self.roles.table_privileges_table(&self.catalog).map(Some),
            "memory" => crate::activity::memory_table(
                &self.memory,
                self.query_memory_limit(),
                &self.spill_area(),
            )
            .map(Some),
            _ => crate::activity::system_table(name, &self.log, &self.scheduler, viewer),
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
            statement_stats: RefCell::new(None),
        }
    }

    /// Adds generated tables under `schema` (created if missing), replacing
    /// tables of the same names.
    pub fn add_tables(&self, schema: &str, tables: Vec<Table>) -> Result<()> {
        self.catalog.create_schema(schema, true)?;
        for t in tables {
            // The bootstrap superuser owns tables loaded outside SQL.
            self.roles.table_dropped(schema, t.name());
            self.catalog.put_table(schema, t, true)?;
        }
        Ok(())
    }

    /// Generates TPC-H at `scale` into schema `sf<scale>` (e.g. `sf0_1`); returns the schema name.
    pub fn load_tpch(&self, scale: f64) -> Result<String> {
        let schema = stride_storage::scale_factor_schema("", scale);
        let threads = self.scheduler.config().workers;
        self.add_tables(&schema, stride_storage::tpch::generate(scale, threads)?)?;
        Ok(schema)
    }

    /// Generates SSB at `scale` into schema `ssb_sf<scale>`; returns the schema name.
    pub fn load_ssb(&self, scale: f64, seed: u64) -> Result<String> {
        let schema = stride_storage::scale_factor_schema("ssb_", scale);
        let threads = self.scheduler.config().workers;
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
    /// Scheduler accounting summed over the queries of the running statement
    /// (a statement may run scalar subqueries first).
    statement_stats: RefCell<Option<QueryStats>>,
}

/// `BEGIN` … `COMMIT` bookkeeping. Stride runs every statement atomically on
/// its own (each query reads one immutable snapshot, each write replaces a
/// table snapshot), so a transaction block groups nothing; it is accepted so
/// that drivers which open one work, and a `ROLLBACK` that would have to undo
/// a write is refused rather than pretending.
#[derive(Debug, Default, Clone, Copy)]
struct TransactionState {
    open: bool,
    wrote: bool,
}

/// A statement parsed and bound once, to be executed with parameter values
/// (the extended query protocol's prepared statements). Each execution binds
/// the plan's table scans to the tables' current snapshots, so a prepared
/// statement sees every committed write; a table dropped since fails with
/// 42P01, a table whose columns changed with
/// [`SqlError::PlanInvalidated`].
#[derive(Debug, Clone)]
pub struct Prepared {
    kind: PreparedKind,
    /// Types of `$1..$n`; `None` where the statement does not determine one.
    pub param_types: Vec<Option<DataType>>,
    /// Columns of the rows the statement returns; `None` for commands.
    pub schema: Option<SchemaRef>,
    /// The statement's text (for the query log).
    pub sql: String,
}

#[derive(Debug, Clone)]
enum PreparedKind {
    /// No statement at all (an empty query string).
    Empty,
    Show(String),
    /// BEGIN (`Some(true)`), COMMIT (`Some(false)`) or ROLLBACK (`None`).
    Transaction(Option<bool>),
    Plan(LogicalPlan),
    /// `DEALLOCATE name` (`Some`) or `DEALLOCATE ALL`.
    Deallocate(Option<String>),
    /// `DISCARD ALL`: settings back to their defaults, every prepared
    /// statement deallocated.
    DiscardAll,
    /// `CREATE` / `ALTER` / `DROP ROLE`, `GRANT`, `REVOKE`.
    Role(crate::roles::RoleStatement),
}

impl Prepared {
    /// The query string held no statement.
    pub fn is_empty(&self) -> bool {
        matches!(self.kind, PreparedKind::Empty)
    }
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
        if !self.engine.catalog.schema_exists(schema) {
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
        self.begin_request();
        crate::limits::on_statement_stack(|| self.run_statements(sql))
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

    fn run_statements(&mut self, sql: &str) -> Vec<Result<StatementOutput>> {
        let parse_start = Instant::now();
        let statements = match crate::limits::parse(sql) {
            Ok(s) => s,
            Err(e) => return vec![Err(e)],
        };
        // Parsing the request counts as planning of its first query; binding
        // (SQL to logical plan) as planning of the statement bound.
        let mut parsing = Some(parse_start.elapsed());
        let mut out = Vec::with_capacity(statements.len());
        for stmt in statements {
            let result = reject_unsupported_syntax(&stmt).and_then(|()| {
                // Planning runs on the session's thread; a panic in a planner
                // library must fail this statement only.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.interrupt.check()?;
                    let bind_start = Instant::now();
                    let prepared = self.prepare_statement(stmt)?;
                    let binding = bind_start.elapsed();
                    let mut output = self.run_prepared(&prepared, Vec::new())?;
                    if let StatementOutput::Query(q) = &mut output {
                        q.planning += binding + parsing.take().unwrap_or_default();
                    }
                    Ok(output)
                }))
                .unwrap_or_else(|panic| Err(SqlError::Internal(panic_text(&panic))))
            });
            let failed = result.is_err();
            out.push(result);
            if failed {
                break;
            }
        }
        out
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

    fn to_logical(&self, stmt: DFStatement) -> Result<LogicalPlan> {
        let engine = &self.engine;
        let viewer = self.viewer();
        let system = |name: &str| engine.system_view(name, viewer);
        let session_user = self.current_user();
        let ctx = PlannerContext {
            catalog: &engine.catalog,
            functions: &engine.functions,
            default_schema: &self.default_schema,
            options: &engine.options,
            system: &system,
            session_user: &session_user,
            misses: Default::default(),
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
        let options = &self.engine.options;
        let plan = crate::coerce::float_literals(plan)?;
        let plan = crate::integers::widen_integer_sums(plan)?;
        let analyzed = crate::interrupt::analyzer(&self.interrupt)
            .execute_and_check(plan, options, |_, _| {})
            .map_err(analyzer_error)?;
        let analyzed = crate::integers::fold_constants(analyzed)?;
        let settings = crate::context::OptimizerSettings {
            context: OptimizerContext::new(),
            functions: &self.engine.functions,
        };
        let optimized = crate::interrupt::optimizer(&self.interrupt)
            .optimize(analyzed, &settings, |_, _| {})
            .map_err(SqlError::from)?;
        crate::join_order::reorder_joins(optimized)
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
    fn viewer(&self) -> crate::activity::Viewer {
        crate::activity::Viewer {
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

    /// Parses and binds one statement without running it (the extended
    /// protocol's Parse). `sql` holding more than one statement is an error.
    pub fn prepare(&mut self, sql: &str) -> Result<Prepared> {
        self.begin_request();
        crate::limits::on_statement_stack(|| self.prepare_text(sql))
    }

    fn prepare_text(&mut self, sql: &str) -> Result<Prepared> {
        let mut statements = crate::limits::parse(sql)?;
        match statements.len() {
            0 => Ok(Prepared {
                kind: PreparedKind::Empty,
                param_types: Vec::new(),
                schema: None,
                sql: String::new(),
            }),
            1 => {
                let stmt = statements
                    .pop_front()
                    .ok_or_else(|| SqlError::Internal("no statement".into()))?;
                reject_unsupported_syntax(&stmt)?;
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.prepare_statement(stmt)
                }))
                .unwrap_or_else(|panic| Err(SqlError::Internal(panic_text(&panic))))
            }
            _ => Err(SqlError::Syntax(
                "cannot insert multiple commands into a prepared statement".into(),
            )),
        }
    }

    fn prepare_statement(&mut self, stmt: DFStatement) -> Result<Prepared> {
        let sql = stmt.to_string();
        if let DFStatement::Statement(s) = &stmt {
            if let SqlStatement::ShowVariable { variable } = s.as_ref() {
                let name = variable
                    .iter()
                    .map(|i| i.value.to_lowercase())
                    .collect::<Vec<_>>()
                    .join(".");
                let schema = show_schema(&name);
                return Ok(Prepared {
                    kind: PreparedKind::Show(name),
                    param_types: Vec::new(),
                    schema: Some(schema),
                    sql,
                });
            }
        }
        if let DFStatement::Statement(s) = &stmt {
            let op = match s.as_ref() {
                SqlStatement::StartTransaction { .. } => Some(Some(true)),
                SqlStatement::Commit { .. } => Some(Some(false)),
                SqlStatement::Rollback {
                    savepoint: None, ..
                } => Some(None),
                _ => None,
            };
            if let Some(op) = op {
                return Ok(Prepared {
                    kind: PreparedKind::Transaction(op),
                    param_types: Vec::new(),
                    schema: None,
                    sql,
                });
            }
            let deallocate = match s.as_ref() {
                SqlStatement::Deallocate { name, .. } => Some(PreparedKind::Deallocate(
                    (name.quote_style.is_some() || !name.value.eq_ignore_ascii_case("all"))
                        .then(|| name.value.clone()),
                )),
                SqlStatement::Discard { object_type } => match object_type {
                    datafusion_sql::sqlparser::ast::DiscardObject::ALL => {
                        Some(PreparedKind::DiscardAll)
                    }
                    other => {
                        return Err(SqlError::Unsupported(format!("DISCARD {other}")));
                    }
                },
                _ => None,
            };
            if let Some(kind) = deallocate {
                return Ok(Prepared {
                    kind,
                    param_types: Vec::new(),
                    schema: None,
                    sql,
                });
            }
            if let Some(role_statement) =
                crate::roles::RoleStatement::from_sql(s, &self.default_schema)
            {
                let role_statement = role_statement?;
                // The text may hold a password: only the command is kept.
                let sql = role_statement.tag().to_string();
                return Ok(Prepared {
                    kind: PreparedKind::Role(role_statement),
                    param_types: Vec::new(),
                    schema: None,
                    sql,
                });
            }
        }
        let plan = crate::limits::rebalance_boolean_chains(self.to_logical(stmt)?)?;
        crate::limits::check_depth(&plan)?;
        // Before the result columns are described: `sum(int8)` is numeric.
        let plan = crate::integers::widen_integer_sums(plan)?;
        self.interrupt.check()?;
        let mut types = plan.get_parameter_types()?;
        let count = types
            .keys()
            .filter_map(|k| k.strip_prefix('$')?.parse::<usize>().ok())
            .max()
            .unwrap_or(0);
        if types.len() > count {
            return Err(SqlError::Unsupported(
                "named parameters (only $1, $2, ... are supported)".into(),
            ));
        }
        let param_types = (1..=count)
            .map(|i| types.remove(&format!("${i}")).flatten())
            .collect();
        let schema = match &plan {
            LogicalPlan::Ddl(_) | LogicalPlan::Dml(_) | LogicalPlan::Statement(_) => None,
            LogicalPlan::Explain(_) => Some(Arc::new(Schema::new(vec![Field::new(
                "QUERY PLAN",
                DataType::Utf8,
                false,
            )]))),
            query => Some(Arc::new(query.schema().as_arrow().clone())),
        };
        Ok(Prepared {
            kind: PreparedKind::Plan(plan),
            param_types,
            schema,
            sql,
        })
    }

    /// Runs a prepared statement with values for its parameters.
    pub fn execute_prepared(
        &mut self,
        prepared: &Prepared,
        params: Vec<ScalarValue>,
    ) -> Result<StatementOutput> {
        self.begin_request();
        crate::limits::on_statement_stack(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.run_prepared(prepared, params)
            }))
            .unwrap_or_else(|panic| Err(SqlError::Internal(panic_text(&panic))))
        })
    }

    fn run_prepared(
        &mut self,
        prepared: &Prepared,
        params: Vec<ScalarValue>,
    ) -> Result<StatementOutput> {
        self.interrupt.check()?;
        if params.len() != prepared.param_types.len() {
            return Err(SqlError::plan(
                PlanKind::Other,
                format!(
                    "the statement has {} parameters, {} values were given",
                    prepared.param_types.len(),
                    params.len()
                ),
            ));
        }
        match &prepared.kind {
            PreparedKind::Empty => Ok(command("")),
            PreparedKind::Show(name) => self.show(name),
            PreparedKind::Transaction(op) => self.transaction(*op),
            PreparedKind::Deallocate(name) => Ok(StatementOutput::Deallocate {
                name: name.clone(),
                tag: "DEALLOCATE".into(),
            }),
            PreparedKind::DiscardAll => {
                if self.transaction.open {
                    return Err(SqlError::plan(
                        PlanKind::InTransactionBlock,
                        "DISCARD ALL cannot run inside a transaction block",
                    ));
                }
                self.settings = SessionSettings::default();
                Ok(StatementOutput::Deallocate {
                    name: None,
                    tag: "DISCARD ALL".into(),
                })
            }
            PreparedKind::Role(statement) => {
                self.transaction.wrote |= self.transaction.open;
                // Logged by its command tag alone: the text may hold a password.
                self.logged(&prepared.sql, |s| {
                    let tag = s
                        .engine
                        .roles
                        .execute(s.role, statement, &s.engine.catalog)?;
                    Ok(command(tag))
                })
            }
            PreparedKind::Plan(plan) => {
                let plan = self.rebind(plan.clone())?;
                let plan = if params.is_empty() {
                    plan
                } else {
                    plan.with_param_values(params)?
                };
                self.authorize(&plan)?;
                self.dispatch(plan, &prepared.sql)
            }
        }
    }

    /// Binds a prepared plan's table scans (subqueries' included) to the
    /// current snapshots of the tables they name, and system views to fresh
    /// ones.
    fn rebind(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        let engine = &self.engine;
        let viewer = self.viewer();
        let current = |origin: &SourceOrigin| -> Result<Arc<Table>> {
            match origin {
                SourceOrigin::Catalog { schema, table } => {
                    engine.catalog.table(schema, table).map_err(|_| {
                        SqlError::undefined(
                            UndefinedKind::Table,
                            format!("relation \"{schema}.{table}\" does not exist"),
                        )
                    })
                }
                SourceOrigin::System { view } => engine
                    .system_view(view, viewer)?
                    .map(Arc::new)
                    .ok_or_else(|| {
                        SqlError::undefined(
                            UndefinedKind::Table,
                            format!("relation \"stride.{view}\" does not exist"),
                        )
                    }),
            }
        };
        plan.transform_up_with_subqueries(|node| {
            let LogicalPlan::TableScan(mut scan) = node else {
                return Ok(Transformed::no(node));
            };
            let Some(source) = scan.source.downcast_ref::<StrideTableSource>() else {
                return Ok(Transformed::no(LogicalPlan::TableScan(scan)));
            };
            let now = current(&source.origin).map_err(external)?;
            if Arc::ptr_eq(&now, &source.table) {
                return Ok(Transformed::no(LogicalPlan::TableScan(scan)));
            }
            if now.schema() != source.table.schema() {
                return Err(external(SqlError::PlanInvalidated(format!(
                    "cached plan must not change result type: the columns of \"{}\" changed \
                     since the statement was prepared",
                    scan.table_name
                ))));
            }
            let origin = source.origin.clone();
            scan.source = Arc::new(StrideTableSource { table: now, origin });
            Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
        })
        .map(|t| t.data)
        .map_err(SqlError::from)
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
                if c.or_replace && self.engine.catalog.table(&schema, &table).is_ok() {
                    roles.check_owner(self.role, &schema, &table)?;
                }
            }
            LogicalPlan::Ddl(DdlStatement::CreateExternalTable(_)) => {
                superuser("read server files (CREATE EXTERNAL TABLE)")?
            }
            LogicalPlan::Ddl(DdlStatement::DropTable(d)) => {
                let (schema, table) = self.table_name(&d.name);
                if self.engine.catalog.table(&schema, &table).is_ok() {
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

    fn dispatch(&mut self, plan: LogicalPlan, sql: &str) -> Result<StatementOutput> {
        let start = Instant::now();
        match plan {
            LogicalPlan::Ddl(ddl) => {
                self.transaction.wrote |= self.transaction.open;
                self.logged(sql, |s| s.ddl(ddl))
            }
            LogicalPlan::Dml(dml) => {
                self.transaction.wrote |= self.transaction.open;
                self.logged(sql, |s| s.dml(dml))
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
                s.interrupt.check()?;
                let planning = start.elapsed();
                let mut out = s.run_query(&optimized)?;
                out.planning += planning;
                Ok(StatementOutput::Query(out))
            }),
        }
    }

    fn transaction(&mut self, op: Option<bool>) -> Result<StatementOutput> {
        match op {
            Some(true) => {
                self.transaction = TransactionState {
                    open: true,
                    wrote: false,
                };
                Ok(command("BEGIN"))
            }
            Some(false) => {
                self.transaction = TransactionState::default();
                Ok(command("COMMIT"))
            }
            None => {
                let state = std::mem::take(&mut self.transaction);
                if state.wrote {
                    Err(SqlError::Unsupported(
                        "ROLLBACK after a write: Stride commits every statement on its own, \
                         the writes of this block are kept"
                            .into(),
                    ))
                } else {
                    Ok(command("ROLLBACK"))
                }
            }
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
            policy: self.engine.scheduler.policy().name().to_string(),
        };
        let id = self.engine.log.start(origin, sql);
        *self.statement_stats.borrow_mut() = None;
        let result = f(self);
        let stats = self.statement_stats.borrow_mut().take().unwrap_or_default();
        let outcome = match &result {
            Ok(_) => Ok(&stats),
            Err(e @ (SqlError::Cancelled | SqlError::Timeout)) => Err(("cancelled", e.to_string())),
            Err(e) => Err(("failed", e.to_string())),
        };
        self.engine.log.finish(id, outcome);
        result
    }

    /// The share of memory one query of this session may hold: its own
    /// setting or the engine's default. The server's limit applies besides,
    /// to all queries together.
    pub fn query_memory_limit(&self) -> usize {
        self.settings
            .query_memory_limit
            .unwrap_or_else(|| self.engine.query_memory_limit())
    }

    /// Runs an optimized query plan: scalar subqueries first, then the plan.
    pub fn run_query(&self, plan: &LogicalPlan) -> Result<QueryOutput> {
        let start = Instant::now();
        let plan = self.substitute_subqueries(plan.clone())?;
        self.interrupt.check()?;
        let physical = Lowerer::default().lower(&plan)?;
        let planning = start.elapsed();
        let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
        let exec_start = Instant::now();
        let history_key = self.engine.history.key(&physical, &plan);
        let facts = stride_sched::GroupFacts {
            user_priority: self.settings.user_priority,
            static_priority: self.settings.static_priority,
            estimates: self.engine.history.estimates(&history_key),
        };
        self.interrupt.check()?;
        let interrupt = &self.interrupt;
        let memory = stride_exec::QueryMemory::with_spill(
            self.engine.memory.clone(),
            self.query_memory_limit(),
            Some(self.engine.spill_area().query()),
        );
        let output = stride_exec::execute_with(
            &physical,
            schema,
            &self.engine.scheduler,
            facts,
            &memory,
            &mut |canceller| interrupt.publish(canceller),
        )
        .map_err(|e| match e {
            stride_exec::ExecError::Query(stride_sched::QueryError::Cancelled) => {
                self.interrupt.stopped()
            }
            e if e.kind() == Some(stride_exec::ErrorKind::Overflow) => {
                SqlError::NumericOutOfRange(format!("integer out of range ({e})"))
            }
            other => SqlError::Exec(other),
        })?;
        let workers = self.engine.scheduler.config().workers;
        self.engine
            .history
            .record(&history_key, &output.stats, workers);
        {
            let mut acc = self.statement_stats.borrow_mut();
            match acc.as_mut() {
                None => *acc = Some(output.stats.clone()),
                Some(a) => {
                    a.cpu_time += output.stats.cpu_time;
                    a.finalize_time += output.stats.finalize_time;
                    a.tasks += output.stats.tasks;
                    a.memory_peak = a.memory_peak.max(output.stats.memory_peak);
                    a.spilled_bytes += output.stats.spilled_bytes;
                    a.morsels += output.stats.morsels;
                    a.tuples += output.stats.tuples;
                    a.task_sets += output.stats.task_sets;
                    a.latency += output.stats.latency;
                    a.estimated_cpu = a
                        .estimated_cpu
                        .zip(output.stats.estimated_cpu)
                        .map(|(x, y)| x + y);
                    let o = &output.stats;
                    a.task_set_cpu.extend_from_slice(&o.task_set_cpu);
                    a.task_set_morsels.extend_from_slice(&o.task_set_morsels);
                    if o.morsels > 0 {
                        // `a.morsels` already includes `o`'s: equal means
                        // the earlier queries ran no morsel.
                        a.morsel_tuples_min = if a.morsels == o.morsels {
                            o.morsel_tuples_min
                        } else {
                            a.morsel_tuples_min.min(o.morsel_tuples_min)
                        };
                        a.morsel_tuples_max = a.morsel_tuples_max.max(o.morsel_tuples_max);
                    }
                    for &(bound, count) in &o.morsel_size_histogram {
                        match a
                            .morsel_size_histogram
                            .iter_mut()
                            .find(|(b, _)| *b == bound)
                        {
                            Some(slot) => slot.1 += count,
                            None => a.morsel_size_histogram.push((bound, count)),
                        }
                    }
                    a.morsel_size_histogram.sort_unstable();
                    // The statement's own query runs last (subqueries first):
                    // its priority is the statement's.
                    a.priority_trace = o.priority_trace.clone();
                    a.final_priority = o.final_priority;
                }
            }
        }
        Ok(QueryOutput {
            schema: output.schema,
            batches: output.batches,
            stats: output.stats,
            planning,
            execution: exec_start.elapsed(),
        })
    }

    /// Replaces every uncorrelated scalar subquery by its value.
    fn substitute_subqueries(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        let result = plan.transform_up(|node| {
            node.map_expressions(|e| {
                e.transform_up(|e| match e {
                    Expr::ScalarSubquery(sq) => {
                        if !sq.outer_ref_columns.is_empty() {
                            return Err(external(SqlError::Unsupported(
                                "correlated scalar subquery".into(),
                            )));
                        }
                        let value = self.scalar_value(&sq.subquery).map_err(external)?;
                        Ok(Transformed::yes(Expr::Literal(value, None)))
                    }
                    Expr::Exists(_) => Err(external(SqlError::Unsupported(
                        "EXISTS subquery in this position".into(),
                    ))),
                    Expr::InSubquery(_) => Err(external(SqlError::Unsupported(
                        "IN subquery in this position".into(),
                    ))),
                    other => Ok(Transformed::no(other)),
                })
            })
        });
        result.map(|t| t.data).map_err(SqlError::from)
    }

    fn scalar_value(&self, subquery: &LogicalPlan) -> Result<ScalarValue> {
        let plan = self.optimize(subquery.clone())?;
        let out = self.run_query(&plan)?;
        let field =
            out.schema.fields().first().cloned().ok_or_else(|| {
                SqlError::plan(PlanKind::Other, "scalar subquery returns no column")
            })?;
        match out.num_rows() {
            0 => Ok(ScalarValue::try_from(field.data_type())?),
            1 => {
                let batch = out
                    .batches
                    .iter()
                    .find(|b| b.num_rows() > 0)
                    .ok_or_else(|| {
                        SqlError::Internal("one-row result without a non-empty batch".into())
                    })?;
                Ok(ScalarValue::try_from_array(batch.column(0), 0)?)
            }
            n => Err(SqlError::Exec(
                stride_exec::ExecError::CardinalityViolation(format!(
                    "more than one row returned by a subquery used as an expression ({n} rows)"
                )),
            )),
        }
    }

    /// Stride's physical plan for an optimized logical plan, without running
    /// anything: scalar subqueries stand as NULL literals of their type.
    pub fn physical_plan(&self, plan: &LogicalPlan) -> Result<stride_exec::PhysicalPlan> {
        let placeholder = plan
            .clone()
            .transform_up(|node| {
                node.map_expressions(|e| {
                    e.transform_up(|e| match e {
                        Expr::ScalarSubquery(sq) => {
                            let t = sq.subquery.schema().field(0).data_type().clone();
                            Ok(Transformed::yes(Expr::Literal(
                                ScalarValue::try_from(&t)?,
                                None,
                            )))
                        }
                        other => Ok(Transformed::no(other)),
                    })
                })
            })
            .map_err(SqlError::from)?
            .data;
        Lowerer::default().lower(&placeholder)
    }

    /// Plans one SQL query (parse, bind, optimize, lower) without running it.
    pub fn plan_query(&self, sql: &str) -> Result<stride_exec::PhysicalPlan> {
        let mut statements = crate::limits::parse(sql)?;
        if statements.len() != 1 {
            return Err(SqlError::plan(
                PlanKind::Other,
                format!("expected one statement, got {}", statements.len()),
            ));
        }
        let stmt = statements
            .pop_front()
            .ok_or_else(|| SqlError::Internal("no statement".into()))?;
        let plan = self.optimize(self.to_logical(stmt)?)?;
        self.physical_plan(&plan)
    }

    /// The optimized logical plan, Stride's physical plan and its pipelines.
    pub fn explain(&self, plan: &LogicalPlan) -> Result<String> {
        let physical = self.physical_plan(plan)?;
        let workers = self.engine.scheduler.config().workers;
        let pipelines = stride_exec::executor::explain_pipelines(&physical, workers)?;
        Ok(format!(
            "logical plan:\n{}\n\nphysical plan:\n{}\npipelines (task sets, in order):\n{}\n",
            plan.display_indent(),
            physical,
            pipelines.join("\n")
        ))
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

    fn ddl(&mut self, ddl: DdlStatement) -> Result<StatementOutput> {
        let catalog = self.engine.catalog.clone();
        match ddl {
            DdlStatement::CreateCatalogSchema(c) => {
                let name = c.schema_name.rsplit('.').next().unwrap_or(&c.schema_name);
                catalog.create_schema(name, c.if_not_exists)?;
                Ok(command("CREATE SCHEMA"))
            }
            DdlStatement::DropCatalogSchema(d) => {
                let name = match &d.name {
                    SchemaReference::Bare { schema } => schema.to_string(),
                    SchemaReference::Full { schema, .. } => schema.to_string(),
                };
                let existed = catalog.schema_exists(&name);
                catalog.drop_schema(&name, d.if_exists, d.cascade)?;
                if existed {
                    self.engine.roles.schema_dropped(&name);
                }
                if self.default_schema == name {
                    self.default_schema = DEFAULT_SCHEMA.to_string();
                }
                Ok(command("DROP SCHEMA"))
            }
            DdlStatement::DropTable(d) => {
                let (schema, table) = self.table_name(&d.name);
                let existed = catalog.table(&schema, &table).is_ok();
                catalog.drop_table(&schema, &table, d.if_exists)?;
                if existed {
                    self.engine.roles.table_dropped(&schema, &table);
                }
                Ok(command("DROP TABLE"))
            }
            DdlStatement::CreateMemoryTable(c) => {
                let (schema, table) = self.table_name(&c.name);
                if catalog.table(&schema, &table).is_ok() {
                    if c.if_not_exists {
                        return Ok(command("CREATE TABLE"));
                    }
                    if !c.or_replace {
                        return Err(stride_storage::StorageError::AlreadyExists {
                            kind: stride_storage::ObjectKind::Table,
                            name: format!("{schema}.{table}"),
                        }
                        .into());
                    }
                }
                let arrow_schema: SchemaRef = Arc::new(c.input.schema().as_arrow().clone());
                let is_plain_create =
                    matches!(c.input.as_ref(), LogicalPlan::EmptyRelation(e) if !e.produce_one_row);
                let (batches, tag) = if is_plain_create {
                    (Vec::new(), "CREATE TABLE".to_string())
                } else {
                    let plan = self.optimize(c.input.as_ref().clone())?;
                    let out = self.run_query(&plan)?;
                    let n = out.num_rows();
                    (out.batches, format!("SELECT {n}"))
                };
                let existed = catalog.table(&schema, &table).is_ok();
                let t = Table::new(table.clone(), arrow_schema, batches)?;
                catalog.put_table(&schema, t, c.or_replace)?;
                if !existed {
                    self.engine.roles.table_created(&schema, &table, self.role);
                }
                Ok(command(&tag))
            }
            DdlStatement::CreateExternalTable(c) => {
                let (schema, table) = self.table_name(&c.name);
                let location = c.locations.first().cloned().ok_or_else(|| {
                    SqlError::plan(PlanKind::Other, "CREATE EXTERNAL TABLE needs a LOCATION")
                })?;
                let path = self.engine.file_access().resolve(&location)?;
                let path = path.as_path();
                let (file_schema, batches) = match c.file_type.to_uppercase().as_str() {
                    "PARQUET" => stride_storage::files::read_parquet(path)?,
                    "CSV" => {
                        let has_header = c
                            .options
                            .get("format.has_header")
                            .map(|v| v == "true")
                            .unwrap_or(true);
                        let delimiter = c
                            .options
                            .get("format.delimiter")
                            .and_then(|d| d.bytes().next())
                            .unwrap_or(b',');
                        let declared = c.schema.as_arrow();
                        let opts = stride_storage::files::CsvOptions {
                            has_header,
                            delimiter,
                            schema: (!declared.fields().is_empty())
                                .then(|| Arc::new(declared.clone())),
                        };
                        stride_storage::files::read_csv(path, &opts)?
                    }
                    other => {
                        return Err(SqlError::Unsupported(format!(
                            "external tables stored as {other} (PARQUET and CSV are supported)"
                        )))
                    }
                };
                let existed = catalog.table(&schema, &table).is_ok();
                if existed && c.if_not_exists {
                    return Ok(command("CREATE TABLE"));
                }
                let t = Table::new(table.clone(), file_schema, batches)?;
                catalog.put_table(&schema, t, c.or_replace)?;
                if !existed {
                    self.engine.roles.table_created(&schema, &table, self.role);
                }
                Ok(command("CREATE TABLE"))
            }
            other => Err(SqlError::Unsupported(other.name().to_string())),
        }
    }

    fn dml(&mut self, dml: DmlStatement) -> Result<StatementOutput> {
        match dml.op {
            WriteOp::Insert(_) => {
                let (schema, table) = self.table_name(&dml.table_name);
                let plan = self.optimize(dml.input.as_ref().clone())?;
                let out = self.run_query(&plan)?;
                let n = out.num_rows();
                self.engine
                    .catalog
                    .update_table(&schema, &table, |t| t.append(out.batches))?;
                Ok(command(&format!("INSERT 0 {n}")))
            }
            other => Err(SqlError::Unsupported(format!("{other}"))),
        }
    }

    fn set(&mut self, variable: &str, value: &str) -> Result<StatementOutput> {
        let value = value.trim().trim_matches('\'').trim_matches('"');
        // Engine-wide settings change every session: superusers only. Fail
        // closed: whatever is not known to be session-scoped counts as
        // engine-wide.
        if !crate::settings::is_session_scoped(&self.settings, variable) {
            self.engine.roles.require_superuser(self.role, || {
                format!("permission denied to set parameter \"{variable}\"")
            })?;
        }
        match variable {
            "search_path" | "schema" => {
                let first = value.split(',').next().unwrap_or("").trim();
                self.set_default_schema(&first.to_lowercase())?;
            }
            "stride.policy" => {
                let policy = crate::settings::parse_policy(value)?;
                self.engine.scheduler.set_policy(policy);
            }
            "stride.memory_limit" => {
                let bytes = crate::settings::memory_size(variable, value)?;
                self.engine.set_memory_limit(bytes);
            }
            "stride.temp_directory" => {
                self.engine
                    .set_temp_directory(std::path::Path::new(value))?;
            }
            "temp_file_limit" => {
                let limit = crate::settings::temp_file_limit(value)?;
                self.engine.spill_area().set_file_limit(limit);
            }
            "stride.query_memory_limit" => {
                // A session may lower its share; only a superuser may take
                // more than the engine's default.
                let default = self.engine.query_memory_limit();
                if !value.eq_ignore_ascii_case("default")
                    && crate::settings::memory_size(variable, value)? > default
                {
                    self.engine.roles.require_superuser(self.role, || {
                        format!(
                            "permission denied to set parameter \"{variable}\" above {}",
                            crate::settings::show_size(default)
                        )
                    })?;
                }
                self.settings.set(variable, value)?;
            }
            other => self.settings.set(other, value)?,
        }
        Ok(command("SET"))
    }

    fn show(&self, variable: &str) -> Result<StatementOutput> {
        let rows: Vec<(String, String)> = match variable {
            "all" => {
                let mut all = self.settings.all();
                all.retain(|(name, _)| name != "is_superuser");
                all.push((
                    "is_superuser".into(),
                    if self.is_superuser() { "on" } else { "off" }.into(),
                ));
                all.push(("search_path".into(), self.default_schema.clone()));
                all.push((
                    "stride.policy".into(),
                    self.engine.scheduler.policy().name().into(),
                ));
                all.push((
                    "stride.workers".into(),
                    self.engine.scheduler.config().workers.to_string(),
                ));
                all.push((
                    "stride.memory_limit".into(),
                    crate::settings::show_size(self.engine.memory.limit()),
                ));
                all.push((
                    "stride.query_memory_limit".into(),
                    crate::settings::show_size(self.query_memory_limit()),
                ));
                all.push(("stride.temp_directory".into(), self.engine.temp_directory()));
                all.push((
                    "temp_file_limit".into(),
                    crate::settings::show_temp_file_limit(self.engine.spill_area().file_limit()),
                ));
                all.sort();
                all
            }
            "stride.memory_limit" => vec![(
                variable.into(),
                crate::settings::show_size(self.engine.memory.limit()),
            )],
            "stride.query_memory_limit" => vec![(
                variable.into(),
                crate::settings::show_size(self.query_memory_limit()),
            )],
            "stride.temp_directory" => vec![(variable.into(), self.engine.temp_directory())],
            "temp_file_limit" => vec![(
                variable.into(),
                crate::settings::show_temp_file_limit(self.engine.spill_area().file_limit()),
            )],
            "search_path" | "schema" => vec![(variable.into(), self.default_schema.clone())],
            "is_superuser" => vec![(
                variable.into(),
                if self.is_superuser() { "on" } else { "off" }.into(),
            )],
            "session_authorization" => vec![(variable.into(), self.current_user())],
            "stride.workers" => vec![(
                variable.into(),
                self.engine.scheduler.config().workers.to_string(),
            )],
            "stride.policy" => vec![(
                variable.into(),
                self.engine.scheduler.policy().name().to_string(),
            )],
            other => match self.settings.get(other) {
                Some(v) => vec![(variable.into(), v)],
                None => {
                    return Err(SqlError::setting(
                        SettingKind::Unrecognized,
                        format!("unrecognized configuration parameter \"{other}\""),
                    ))
                }
            },
        };
        let schema = show_schema(variable);
        let columns: Vec<arrow::array::ArrayRef> = if variable == "all" {
            vec![
                Arc::new(arrow::array::StringArray::from_iter_values(
                    rows.iter().map(|r| r.0.as_str()),
                )),
                Arc::new(arrow::array::StringArray::from_iter_values(
                    rows.iter().map(|r| r.1.as_str()),
                )),
            ]
        } else {
            vec![Arc::new(arrow::array::StringArray::from_iter_values(
                rows.iter().map(|r| r.1.as_str()),
            ))]
        };
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        Ok(StatementOutput::Query(QueryOutput {
            schema,
            batches: vec![batch],
            stats: QueryStats::default(),
            planning: Duration::ZERO,
            execution: Duration::ZERO,
        }))
    }
}

/// Columns of `SHOW <variable>`.
fn show_schema(variable: &str) -> SchemaRef {
    if variable == "all" {
        Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("setting", DataType::Utf8, false),
        ]))
    } else {
        Arc::new(Schema::new(vec![Field::new(
            variable,
            DataType::Utf8,
            false,
        )]))
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
    if let DFStatement::Statement(s) = stmt {
        use datafusion_sql::sqlparser::ast::{visit_expressions, Expr as SqlExpr};
        let window = visit_expressions(s.as_ref(), |e| match e {
            SqlExpr::Function(f) if f.over.is_some() => {
                std::ops::ControlFlow::Break(f.name.to_string())
            }
            _ => std::ops::ControlFlow::Continue(()),
        });
        if let std::ops::ControlFlow::Break(name) = window {
            return Err(SqlError::Unsupported(format!(
                "window functions ({name} ... OVER)"
            )));
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

fn command(tag: &str) -> StatementOutput {
    StatementOutput::Command {
        tag: tag.to_string(),
    }
}

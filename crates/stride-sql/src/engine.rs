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

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion_common::config::ConfigOptions;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{DataFusionError, ScalarValue, SchemaReference};
use datafusion_expr::logical_plan::{DdlStatement, DmlStatement, Statement, WriteOp};
use datafusion_expr::{Expr, LogicalPlan};
use datafusion_optimizer::{Analyzer, Optimizer, OptimizerContext};
use datafusion_sql::parser::{DFParser, Statement as DFStatement};
use datafusion_sql::planner::{ParserOptions, SqlToRel};
use datafusion_sql::sqlparser::ast::Statement as SqlStatement;
use stride_exec::QueryStats;
use stride_sched::{Scheduler, SchedulerConfig};
use stride_storage::catalog::DEFAULT_SCHEMA;
use stride_storage::{Catalog, Table};

use crate::context::{FunctionRegistry, PlannerContext};
use crate::error::{Result, SqlError};
use crate::lower::Lowerer;

/// Engine settings.
#[derive(Debug, Clone, Default)]
pub struct EngineConfig {
    pub scheduler: SchedulerConfig,
}

/// Catalog, scheduler and function registry shared by all sessions.
pub struct Engine {
    catalog: Arc<Catalog>,
    scheduler: Scheduler,
    functions: FunctionRegistry,
    options: ConfigOptions,
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
    /// Planning (parse, bind, optimize, lower) time.
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
pub enum StatementOutput {
    Query(QueryOutput),
    /// A command; `tag` is the PostgreSQL-style command tag (`CREATE TABLE`, `INSERT 0 3`).
    Command {
        tag: String,
    },
    /// EXPLAIN text.
    Explain(String),
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
        })
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    pub fn session(self: &Arc<Self>) -> Session {
        Session {
            engine: self.clone(),
            default_schema: DEFAULT_SCHEMA.to_string(),
        }
    }

    /// Adds generated tables under `schema` (created if missing), replacing
    /// tables of the same names.
    pub fn add_tables(&self, schema: &str, tables: Vec<Table>) -> Result<()> {
        self.catalog.create_schema(schema, true)?;
        for t in tables {
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
}

fn external(e: SqlError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

fn internal_of(e: DataFusionError) -> SqlError {
    match e {
        DataFusionError::External(inner) => match inner.downcast::<SqlError>() {
            Ok(sql) => *sql,
            Err(other) => SqlError::from(DataFusionError::External(other)),
        },
        other => SqlError::from(other),
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
            return Err(SqlError::Undefined(format!(
                "schema \"{schema}\" does not exist"
            )));
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
        let statements = match DFParser::parse_sql(sql) {
            Ok(s) => s,
            Err(DataFusionError::SQL(p, _)) => return vec![Err(SqlError::Syntax(p.to_string()))],
            Err(other) => return vec![Err(SqlError::Syntax(other.to_string()))],
        };
        let mut out = Vec::with_capacity(statements.len());
        for stmt in statements {
            let result = reject_unsupported_syntax(&stmt).and_then(|()| {
                // Planning runs on the session's thread; a panic in a planner
                // library must fail this statement only.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.execute_statement(stmt)
                }))
                .unwrap_or_else(|panic| {
                    let msg = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    Err(SqlError::Internal(format!("planning panicked: {msg}")))
                })
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
            return Err(SqlError::Plan(format!(
                "expected one statement, got {}",
                outputs.len()
            )));
        }
        match outputs.pop() {
            Some(StatementOutput::Query(q)) => Ok(q),
            _ => Err(SqlError::Plan("the statement returned no rows".into())),
        }
    }

    fn planner_context(&self) -> PlannerContext<'_> {
        PlannerContext {
            catalog: &self.engine.catalog,
            functions: &self.engine.functions,
            default_schema: &self.default_schema,
            options: &self.engine.options,
        }
    }

    fn to_logical(&self, stmt: DFStatement) -> Result<LogicalPlan> {
        let ctx = self.planner_context();
        let options = ParserOptions::default()
            .with_parse_float_as_decimal(true)
            .with_enable_ident_normalization(true);
        Ok(SqlToRel::new_with_options(&ctx, options).statement_to_plan(stmt)?)
    }

    /// Type coercion and logical optimization.
    pub fn optimize(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        let options = &self.engine.options;
        let plan = crate::coerce::float_literals(plan)?;
        let analyzed = Analyzer::new().execute_and_check(plan, options, |_, _| {})?;
        let settings = crate::context::OptimizerSettings {
            context: OptimizerContext::new(),
            functions: &self.engine.functions,
        };
        let optimized = Optimizer::new().optimize(analyzed, &settings, |_, _| {})?;
        crate::join_order::reorder_joins(optimized)
    }

    fn execute_statement(&mut self, stmt: DFStatement) -> Result<StatementOutput> {
        if let DFStatement::Statement(s) = &stmt {
            if let SqlStatement::ShowVariable { variable } = s.as_ref() {
                let name = variable
                    .iter()
                    .map(|i| i.value.to_lowercase())
                    .collect::<Vec<_>>()
                    .join(".");
                return self.show(&name);
            }
        }
        let start = Instant::now();
        let plan = self.to_logical(stmt)?;
        match plan {
            LogicalPlan::Ddl(ddl) => self.ddl(ddl),
            LogicalPlan::Dml(dml) => self.dml(dml),
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
            query => {
                let optimized = self.optimize(query)?;
                let planning = start.elapsed();
                let mut out = self.run_query(&optimized)?;
                out.planning += planning;
                Ok(StatementOutput::Query(out))
            }
        }
    }

    /// Runs an optimized query plan: scalar subqueries first, then the plan.
    pub fn run_query(&self, plan: &LogicalPlan) -> Result<QueryOutput> {
        let start = Instant::now();
        let plan = self.substitute_subqueries(plan.clone())?;
        let physical = Lowerer::default().lower(&plan)?;
        let planning = start.elapsed();
        let schema: SchemaRef = Arc::new(plan.schema().as_arrow().clone());
        let exec_start = Instant::now();
        let output = stride_exec::execute(&physical, schema, &self.engine.scheduler)?;
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
        result.map(|t| t.data).map_err(internal_of)
    }

    fn scalar_value(&self, subquery: &LogicalPlan) -> Result<ScalarValue> {
        let plan = self.optimize(subquery.clone())?;
        let out = self.run_query(&plan)?;
        let field = out
            .schema
            .fields()
            .first()
            .cloned()
            .ok_or_else(|| SqlError::Plan("scalar subquery returns no column".into()))?;
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
            n => Err(SqlError::Exec(stride_exec::ExecError::Data(format!(
                "more than one row returned by a subquery used as an expression ({n} rows)"
            )))),
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
            .map_err(internal_of)?
            .data;
        Lowerer::default().lower(&placeholder)
    }

    /// Plans one SQL query (parse, bind, optimize, lower) without running it.
    pub fn plan_query(&self, sql: &str) -> Result<stride_exec::PhysicalPlan> {
        let mut statements =
            DFParser::parse_sql(sql).map_err(|e| SqlError::Syntax(e.to_string()))?;
        if statements.len() != 1 {
            return Err(SqlError::Plan(format!(
                "expected one statement, got {}",
                statements.len()
            )));
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
        self.planner_context().resolve(name)
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
                catalog.drop_schema(&name, d.if_exists, d.cascade)?;
                if self.default_schema == name {
                    self.default_schema = DEFAULT_SCHEMA.to_string();
                }
                Ok(command("DROP SCHEMA"))
            }
            DdlStatement::DropTable(d) => {
                let (schema, table) = self.table_name(&d.name);
                catalog.drop_table(&schema, &table, d.if_exists)?;
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
                            kind: "table",
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
                let t = Table::new(table, arrow_schema, batches)?;
                catalog.put_table(&schema, t, c.or_replace)?;
                Ok(command(&tag))
            }
            DdlStatement::CreateExternalTable(c) => {
                let (schema, table) = self.table_name(&c.name);
                let location = c.locations.first().cloned().ok_or_else(|| {
                    SqlError::Plan("CREATE EXTERNAL TABLE needs a LOCATION".into())
                })?;
                let path = std::path::Path::new(&location);
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
                if catalog.table(&schema, &table).is_ok() && c.if_not_exists {
                    return Ok(command("CREATE TABLE"));
                }
                let t = Table::new(table, file_schema, batches)?;
                catalog.put_table(&schema, t, c.or_replace)?;
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
        let value = value.trim_matches('\'').trim_matches('"');
        match variable {
            "search_path" | "schema" => {
                let first = value.split(',').next().unwrap_or("").trim();
                self.set_default_schema(&first.to_lowercase())?;
                Ok(command("SET"))
            }
            "stride.policy" => Err(SqlError::Unsupported(
                "SET stride.policy per session (the policy is set per server: --policy)".into(),
            )),
            other => Err(SqlError::Setting(format!("unknown setting \"{other}\""))),
        }
    }

    fn show(&self, variable: &str) -> Result<StatementOutput> {
        let value = match variable {
            "search_path" | "schema" => self.default_schema.clone(),
            "stride.workers" => self.engine.scheduler.config().workers.to_string(),
            "stride.policy" => self.engine.scheduler.config().policy.name().to_string(),
            other => return Err(SqlError::Setting(format!("unknown setting \"{other}\""))),
        };
        let schema = Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new(variable, arrow::datatypes::DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(arrow::array::StringArray::from(vec![value]))],
        )?;
        Ok(StatementOutput::Query(QueryOutput {
            schema,
            batches: vec![batch],
            stats: QueryStats::default(),
            planning: Duration::ZERO,
            execution: Duration::ZERO,
        }))
    }
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

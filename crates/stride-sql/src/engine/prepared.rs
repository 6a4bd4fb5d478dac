//! Prepared statements: parsing and binding once ([`Session::prepare`], the
//! extended protocol's Parse), running with parameter values
//! ([`Session::execute_prepared`], Bind/Execute), and binding a prepared
//! plan's scans to the tables' current snapshots before each run.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion_common::tree_node::Transformed;
use datafusion_common::ScalarValue;
use datafusion_expr::LogicalPlan;
use datafusion_sql::parser::Statement as DFStatement;
use datafusion_sql::sqlparser::ast::Statement as SqlStatement;
use stride_storage::Table;

use super::plan_cache::CachedPlan;
use super::set::show_schema;
use super::txn::TxnOp;
use super::{command, external, panic_text, reject_unsupported_syntax, Session, StatementOutput};
use crate::column_names::ColumnNames;
use crate::context::{SourceOrigin, StrideTableSource};
use crate::error::{PlanKind, Result, SqlError, UndefinedKind};
use crate::settings::SessionSettings;

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
    /// BEGIN, COMMIT, ROLLBACK, SET TRANSACTION.
    Transaction(TxnOp),
    /// `CHECKPOINT`.
    Checkpoint,
    /// A bound statement and, where it may be kept (`plan_cache`), its
    /// optimized plan: executions re-bind and lower that one; a query's
    /// result columns' names (`crate::column_names`).
    Plan(LogicalPlan, Option<Arc<CachedPlan>>, Option<ColumnNames>),
    /// `DEALLOCATE name` (`Some`) or `DEALLOCATE ALL`.
    Deallocate(Option<String>),
    /// `DISCARD ALL`: settings back to their defaults, every prepared
    /// statement deallocated.
    DiscardAll,
    /// `CREATE` / `ALTER` / `DROP ROLE`, `GRANT`, `REVOKE`.
    Role(crate::roles::RoleStatement),
    /// `DECLARE` (with its query's plan and result columns' names),
    /// `FETCH`, `CLOSE`.
    Cursor(
        super::cursor::CursorStatement,
        Option<(LogicalPlan, ColumnNames)>,
    ),
    /// `ALTER TABLE … SET (placement = …)`.
    Place(super::place::PlaceStatement),
    /// `COPY`, its text in [`Prepared::sql`]: run as a simple query runs it,
    /// its output the caller's copy sub-protocol.
    Copy,
}

impl Prepared {
    /// The query string held no statement.
    pub fn is_empty(&self) -> bool {
        matches!(self.kind, PreparedKind::Empty)
    }
}

impl Session {
    /// Parses and binds one statement without running it (the extended
    /// protocol's Parse). `sql` holding more than one statement is an error.
    pub fn prepare(&mut self, sql: &str) -> Result<Prepared> {
        self.begin_request();
        let prepared = crate::limits::on_statement_stack(|| self.prepare_text(sql));
        if prepared.is_err() {
            self.statement_failed();
        }
        prepared
    }

    pub(super) fn prepare_text(&mut self, sql: &str) -> Result<Prepared> {
        if crate::copy::is_copy(sql) {
            // Checked for syntax and options now; the table, columns and
            // privileges when it runs, as PostgreSQL's COPY.
            crate::copy::parse(sql)?;
            self.check_not_aborted()?;
            return Ok(Prepared {
                kind: PreparedKind::Copy,
                param_types: Vec::new(),
                schema: None,
                sql: sql.to_string(),
            });
        }
        if is_checkpoint(sql) {
            self.check_not_aborted()?;
            return Ok(Prepared {
                kind: PreparedKind::Checkpoint,
                param_types: Vec::new(),
                schema: None,
                sql: "CHECKPOINT".into(),
            });
        }
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

    pub(super) fn prepare_statement(&mut self, stmt: DFStatement) -> Result<Prepared> {
        let sql = stmt.to_string();
        // Named as written, before any rewriting.
        let names = ColumnNames::of_statement(&stmt);
        let mut stmt = super::insert_source::rewrite(stmt)?;
        super::insert_defaults::rewrite(&mut stmt, &|parts| {
            let (schema, table) = match parts {
                [table] => (self.default_schema.clone(), table.clone()),
                [.., schema, table] => (schema.clone(), table.clone()),
                [] => return None,
            };
            let t = self.catalog_view().table(&schema, &table).ok()?;
            Some(
                t.schema()
                    .fields()
                    .iter()
                    .map(|f| {
                        let default = stride_storage::constraints::default_text(f);
                        (f.name().clone(), default.map(str::to_string))
                    })
                    .collect(),
            )
        })?;
        if let DFStatement::Statement(s) = &stmt {
            if let SqlStatement::ShowVariable { variable } = s.as_ref() {
                let name = variable
                    .iter()
                    .map(|i| i.value.to_lowercase())
                    .collect::<Vec<_>>()
                    .join(".");
                // `SHOW TRANSACTION ISOLATION LEVEL` is PostgreSQL's
                // spelling of `SHOW transaction_isolation`.
                let name = if name == "transaction.isolation.level" {
                    "transaction_isolation".to_string()
                } else {
                    name
                };
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
                SqlStatement::StartTransaction { modes, .. } => Some(TxnOp::Begin {
                    read_only: TxnOp::access_mode(modes)?,
                }),
                SqlStatement::Set(datafusion_sql::sqlparser::ast::Set::SetTransaction {
                    modes,
                    snapshot: None,
                    session: false,
                }) => Some(TxnOp::SetTransaction {
                    read_only: TxnOp::access_mode(modes)?,
                }),
                SqlStatement::Commit { .. } => Some(TxnOp::Commit),
                SqlStatement::Rollback {
                    savepoint: None, ..
                } => Some(TxnOp::Rollback),
                SqlStatement::Rollback {
                    savepoint: Some(name),
                    ..
                } => Some(TxnOp::RollbackTo(crate::pg_compat::folded(name))),
                SqlStatement::Savepoint { name } => {
                    Some(TxnOp::Savepoint(crate::pg_compat::folded(name)))
                }
                SqlStatement::ReleaseSavepoint { name } => {
                    Some(TxnOp::Release(crate::pg_compat::folded(name)))
                }
                _ => None,
            };
            if let Some(op) = op {
                if matches!(op, TxnOp::Begin { .. } | TxnOp::SetTransaction { .. }) {
                    self.check_not_aborted()?;
                }
                return Ok(Prepared {
                    kind: PreparedKind::Transaction(op),
                    param_types: Vec::new(),
                    schema: None,
                    sql,
                });
            }
            self.check_not_aborted()?;
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
            if let Some(cursor) = super::cursor::parse(s) {
                let (statement, query) = cursor?;
                let (plan, param_types, schema) = match (&statement, query) {
                    (_, Some(query)) => {
                        let query = DFStatement::Statement(Box::new(query));
                        let names = ColumnNames::of_statement(&query).ok_or_else(|| {
                            SqlError::Internal("DECLARE without its query".into())
                        })?;
                        let plan = self.to_logical(query)?;
                        let plan = crate::integers::widen_integer_sums(plan)?;
                        let param_types = parameter_types(&plan)?;
                        (Some((plan, names)), param_types, None)
                    }
                    (super::cursor::CursorStatement::Fetch { name, .. }, None) => {
                        (None, Vec::new(), self.cursor_schema(name))
                    }
                    _ => (None, Vec::new(), None),
                };
                return Ok(Prepared {
                    kind: PreparedKind::Cursor(statement, plan),
                    param_types,
                    schema,
                    sql,
                });
            }
            if let Some(place) = super::place::parse(s) {
                return Ok(Prepared {
                    kind: PreparedKind::Place(place?),
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
        // A query whose text the engine's cache holds is neither bound nor
        // optimized again (the extended protocol's Parse of an unnamed
        // statement, a simple-protocol statement whose shape is not cached).
        let text_key =
            (self.engine.plan_cache.capacity() > 0 && is_query(&stmt)).then(|| self.text_key(&sql));
        if let Some(key) = &text_key {
            if let Some(cached) = self.cached_text(key) {
                return Ok(Prepared {
                    param_types: cached.param_types.iter().cloned().map(Some).collect(),
                    schema: Some(described(&cached.bound, names.as_ref())),
                    kind: PreparedKind::Plan(cached.bound.clone(), Some(cached), names),
                    sql,
                });
            }
        }
        let start = std::time::Instant::now();
        let declared = super::table_definition::declared(&stmt)?;
        let (plan, param_types) = self.bind_statement(stmt)?;
        let plan = match declared {
            Some(d) => d.apply(plan)?,
            None => plan,
        };
        let schema = match &plan {
            LogicalPlan::Ddl(_) | LogicalPlan::Dml(_) | LogicalPlan::Statement(_) => None,
            LogicalPlan::Explain(_) => Some(Arc::new(Schema::new(vec![Field::new(
                "QUERY PLAN",
                DataType::Utf8,
                false,
            )]))),
            query => Some(described(query, names.as_ref())),
        };
        // Optimized now, once, unless the plan may not be kept; an
        // optimizer error is reported by the execution that plans in full.
        let cached = match param_types.iter().cloned().collect::<Option<Vec<_>>>() {
            Some(types) if self.engine.plan_cache.capacity() > 0 => {
                self.cacheable_plan(plan.clone(), types).ok().flatten()
            }
            _ => None,
        };
        if let (Some(key), Some(cached)) = (text_key, &cached) {
            self.remember_text(key, cached, start.elapsed());
        }
        Ok(Prepared {
            kind: PreparedKind::Plan(plan, cached.map(Arc::new), names),
            param_types,
            schema,
            sql,
        })
    }

    /// Binds a statement (SQL to a logical plan, checked for depth,
    /// `sum(int8)` widened): the plan and its parameters' types, `None`
    /// where the statement does not determine one.
    pub(super) fn bind_statement(
        &mut self,
        stmt: DFStatement,
    ) -> Result<(LogicalPlan, Vec<Option<DataType>>)> {
        self.check_not_aborted()?;
        // A block reads the catalog as of its first statement.
        self.take_snapshot();
        let plan = crate::limits::rebalance_boolean_chains(self.to_logical(stmt)?)?;
        crate::limits::check_depth(&plan)?;
        // Before the result columns are described: `sum(int8)` is numeric.
        let plan = crate::integers::widen_integer_sums(plan)?;
        self.interrupt.check()?;
        let param_types = parameter_types(&plan)?;
        Ok((plan, param_types))
    }

    /// Runs a prepared statement with values for its parameters.
    pub fn execute_prepared(
        &mut self,
        prepared: &Prepared,
        params: Vec<ScalarValue>,
    ) -> Result<StatementOutput> {
        self.begin_request();
        let out = crate::limits::on_statement_stack(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.run_prepared(prepared, params)
            }))
            .unwrap_or_else(|panic| Err(SqlError::Internal(panic_text(&panic))))
        });
        if out.is_err() {
            self.statement_failed();
        }
        out
    }

    pub(super) fn run_prepared(
        &mut self,
        prepared: &Prepared,
        params: Vec<ScalarValue>,
    ) -> Result<StatementOutput> {
        if !matches!(
            prepared.kind,
            PreparedKind::Transaction(TxnOp::Commit | TxnOp::Rollback | TxnOp::RollbackTo(_))
        ) {
            self.check_not_aborted()?;
        }
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
            PreparedKind::Transaction(op) => {
                // A savepoint leaves the block's cursors open.
                let savepoint = matches!(
                    op,
                    TxnOp::Savepoint(_) | TxnOp::RollbackTo(_) | TxnOp::Release(_)
                );
                let out = self.transaction_control(op.clone());
                if !savepoint {
                    self.end_transaction_cursors();
                }
                out
            }
            PreparedKind::Checkpoint => {
                self.engine.roles.require_superuser(self.role, || {
                    "permission denied to run CHECKPOINT: only superusers may".into()
                })?;
                self.logged(&prepared.sql, |s| {
                    s.engine.runtime().checkpoint()?;
                    Ok(command("CHECKPOINT"))
                })
            }
            PreparedKind::Cursor(statement, plan) => {
                use super::cursor::CursorStatement;
                match (statement, plan) {
                    (CursorStatement::Declare { name, hold }, Some((plan, names))) => {
                        self.check_declare(*hold)?;
                        let plan = self.bind_for_execution(plan, params)?;
                        self.declare_cursor(name, *hold, plan, &prepared.sql, Some(names))
                    }
                    (CursorStatement::Fetch { name, count }, _) => self.fetch(name, *count),
                    (CursorStatement::Close(name), _) => self.close_cursor(name.as_deref()),
                    (CursorStatement::Declare { .. }, None) => {
                        Err(SqlError::Internal("DECLARE without its query".into()))
                    }
                }
            }
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
                self.cursors.clear();
                Ok(StatementOutput::Deallocate {
                    name: None,
                    tag: "DISCARD ALL".into(),
                })
            }
            PreparedKind::Copy => self.copy(&prepared.sql),
            PreparedKind::Place(statement) => self.logged(&prepared.sql, |s| {
                s.writing("ALTER TABLE", |s| s.place_table(statement))
            }),
            PreparedKind::Role(statement) => {
                // Roles and grants are not part of a transaction's view:
                // a ROLLBACK could not undo them.
                if self.transaction.open {
                    return Err(SqlError::plan(
                        PlanKind::InTransactionBlock,
                        format!("{} cannot run inside a transaction block", statement.tag()),
                    ));
                }
                // Logged by its command tag alone: the text may hold a password.
                self.logged(&prepared.sql, |s| {
                    let tag =
                        s.engine
                            .roles
                            .execute(s.role, statement, s.engine.runtime().catalog())?;
                    s.engine.persist_security()?;
                    Ok(command(tag))
                })
            }
            PreparedKind::Plan(plan, cached, names) => {
                // A block reads the catalog as of its first statement.
                self.take_snapshot();
                if let Some(cached) = cached {
                    let typed = params.len() == cached.param_types.len()
                        && params
                            .iter()
                            .zip(&cached.param_types)
                            .all(|(v, t)| &v.data_type() == t);
                    if typed {
                        let start = std::time::Instant::now();
                        let bound = self.bind_cached(cached, params)?;
                        self.authorize(&cached.bound)?;
                        return self.run_bound(bound, &prepared.sql, true, start, names.as_ref());
                    }
                }
                let plan = self.bind_for_execution(plan, params)?;
                self.dispatch(plan, &prepared.sql, true, names.as_ref())
            }
        }
    }

    /// A prepared plan ready to run: bound to the current snapshots, its
    /// parameters filled in, the session's privileges checked.
    fn bind_for_execution(
        &self,
        plan: &LogicalPlan,
        params: Vec<ScalarValue>,
    ) -> Result<LogicalPlan> {
        let plan = self.rebind(plan.clone())?;
        let plan = if params.is_empty() {
            plan
        } else {
            plan.with_param_values(params)?
        };
        self.authorize(&plan)?;
        Ok(plan)
    }

    /// Binds a prepared plan's table scans (subqueries' included) to the
    /// current snapshots of the tables they name, and system views to fresh
    /// ones.
    pub(super) fn rebind(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        let current = |origin: &SourceOrigin| -> Result<Arc<Table>> {
            match origin {
                SourceOrigin::Catalog { schema, table } => {
                    self.catalog_view().table(schema, table).map_err(|_| {
                        SqlError::undefined(
                            UndefinedKind::Table,
                            format!("relation \"{schema}.{table}\" does not exist"),
                        )
                    })
                }
                SourceOrigin::System { view } => self.view(view)?.map(Arc::new).ok_or_else(|| {
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
            scan.source = Arc::new(StrideTableSource::scanned(now, origin));
            Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
        })
        .map(|t| t.data)
        .map_err(SqlError::from)
    }
}

/// The columns a bound query describes: its plan's, named `names`.
fn described(plan: &LogicalPlan, names: Option<&ColumnNames>) -> SchemaRef {
    match names {
        Some(names) => names.rename(plan.schema().as_arrow()),
        None => Arc::new(plan.schema().as_arrow().clone()),
    }
}

/// Whether `stmt` is a query (`SELECT`, `WITH`, `VALUES`, …).
fn is_query(stmt: &DFStatement) -> bool {
    matches!(stmt, DFStatement::Statement(s) if matches!(s.as_ref(), SqlStatement::Query(_)))
}

/// Whether `sql` is the statement `CHECKPOINT` (which the SQL parser does
/// not know).
pub(super) fn is_checkpoint(sql: &str) -> bool {
    sql.trim()
        .trim_end_matches(';')
        .trim_end()
        .eq_ignore_ascii_case("checkpoint")
}

/// The types of `plan`'s parameters `$1..$n`, `None` where the statement
/// does not determine one. DataFusion types a parameter from what it is
/// compared with or inserted into; a parameter it leaves untyped whose
/// every use is a cast (`$1::int`) takes the cast's type, as PostgreSQL
/// infers it — drivers that send binary values (asyncpg) encode by the
/// type the server describes.
fn parameter_types(plan: &LogicalPlan) -> Result<Vec<Option<DataType>>> {
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
    if types.values().any(Option::is_none) {
        for (id, cast) in cast_parameters(plan)? {
            if let (Some(slot @ None), Some(t)) = (types.get_mut(&id), cast) {
                *slot = Some(t);
            }
        }
    }
    Ok((1..=count)
        .map(|i| types.remove(&format!("${i}")).flatten())
        .collect())
}

/// For each parameter that appears directly under a cast, the cast's type
/// when every such cast agrees and the parameter appears nowhere else
/// (`None` otherwise).
fn cast_parameters(
    plan: &LogicalPlan,
) -> Result<std::collections::HashMap<String, Option<DataType>>> {
    use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion_expr::expr::{Cast, Placeholder, TryCast};
    use datafusion_expr::Expr;
    use std::collections::HashMap;
    let mut casts: HashMap<String, Option<DataType>> = HashMap::new();
    let mut bare: Vec<String> = Vec::new();
    plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                match e {
                    Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) => {
                        if let Expr::Placeholder(Placeholder { id, .. }) = expr.as_ref() {
                            let data_type = field.data_type();
                            let slot = casts.entry(id.clone()).or_insert(Some(data_type.clone()));
                            if slot.as_ref() != Some(data_type) {
                                *slot = None;
                            }
                            // The placeholder under it is this use.
                            return Ok(TreeNodeRecursion::Jump);
                        }
                    }
                    Expr::Placeholder(Placeholder { id, .. }) => bare.push(id.clone()),
                    _ => {}
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;
    for id in bare {
        casts.insert(id, None);
    }
    Ok(casts)
}

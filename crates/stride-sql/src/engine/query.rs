//! Running queries: uncorrelated scalar subqueries first (each its own
//! query on the scheduler, replaced by its value), then the lowered plan;
//! the scheduler accounting of a statement's queries summed; planning
//! without running (`EXPLAIN`, [`Session::plan_query`]).

use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::ScalarValue;
use datafusion_expr::{Expr, LogicalPlan};

use super::live::LiveQuery;
use super::stream::Destination;
use super::{external, QueryOutput, Session, StatementOutput};
use crate::column_names::ColumnNames;
use crate::error::{PlanKind, Result, SqlError};
use crate::lower::Lowerer;

impl Session {
    /// The share of memory one query of this session may hold: its own
    /// setting or the engine's default. The server's limit applies besides,
    /// to all queries together.
    pub fn query_memory_limit(&self) -> usize {
        self.settings
            .query_memory_limit
            .unwrap_or_else(|| self.engine.runtime().query_memory_limit())
    }

    /// How this session's scans are placed and scheduled: its
    /// `stride.placement` / `stride.affinity`, else the engine's defaults,
    /// over the topology's nodes.
    pub fn scan_placement(&self) -> stride_exec::placement::ScanPlacement {
        let runtime = self.engine.runtime();
        let defaults = runtime.scan_defaults();
        stride_exec::placement::ScanPlacement {
            placement: self.settings.placement.unwrap_or(defaults.placement),
            affinity: self.settings.affinity.unwrap_or(defaults.affinity),
            nodes: runtime.nodes().clone(),
            memory_bound_bytes_per_sec: defaults.memory_bound_bytes_per_sec,
        }
    }

    /// Runs a statement's optimized plan, its result streamed to the
    /// request's receiver where `stream`; its planning counted from `start`;
    /// its result columns named `names` (the statement's syntax's).
    pub(super) fn run_planned(
        &self,
        plan: &LogicalPlan,
        stream: bool,
        start: Instant,
        names: Option<&ColumnNames>,
    ) -> Result<StatementOutput> {
        self.interrupt.check()?;
        let planning = start.elapsed();
        let receiver = if stream { self.receiver.clone() } else { None };
        let to = match receiver.as_deref() {
            _ if stream && self.opening_wanted() => Destination::Open,
            Some(receiver) => Destination::Stream(receiver),
            None => Destination::Collect,
        };
        let mut out = self.run_query_to(plan, to, names)?;
        out.planning += planning;
        Ok(StatementOutput::Query(out))
    }

    /// Runs an optimized query plan: scalar subqueries first, then the plan.
    pub fn run_query(&self, plan: &LogicalPlan) -> Result<QueryOutput> {
        self.run_query_to(plan, Destination::Collect, None)
    }

    /// As [`Session::run_query`]; with a receiver, the result is streamed
    /// to it while the query runs (`crate::engine::stream`) and the output
    /// holds no batches, only how many rows were streamed; opened, the
    /// query is kept running for later fetches (`crate::engine::live`) and
    /// the output holds neither. `names`: the result columns' names as
    /// PostgreSQL gives them (a statement's own query), else the plan's.
    pub(super) fn run_query_to(
        &self,
        plan: &LogicalPlan,
        to: Destination<'_>,
        names: Option<&ColumnNames>,
    ) -> Result<QueryOutput> {
        let start = Instant::now();
        let plan = self.substitute_subqueries(plan.clone())?;
        self.interrupt.check()?;
        let physical = Lowerer::with_scan(self.scan_placement()).lower(&plan)?;
        let planning = start.elapsed();
        let schema: SchemaRef = match names {
            Some(names) => names.rename(plan.schema().as_arrow()),
            None => Arc::new(plan.schema().as_arrow().clone()),
        };
        let exec_start = Instant::now();
        let runtime = self.engine.runtime();
        let key = crate::history::key(runtime.history(), &physical, &plan);
        let config = stride_engine::RunConfig {
            user_priority: self.settings.user_priority,
            static_priority: self.settings.static_priority,
            memory_share: self.query_memory_limit(),
            sharing: self.sharing_mode(),
        };
        self.interrupt.check()?;
        let interrupt = &self.interrupt;
        // `statement_timeout` lands while the query runs, in-process too.
        let _deadline = interrupt.watch_deadline();
        let on_running =
            &mut |canceller: Option<stride_exec::Canceller>| interrupt.publish(canceller);
        let out = match to {
            Destination::Open => {
                let stream = stride_exec::StreamConfig::new(stride_exec::result_order(&physical));
                let live = runtime
                    .open(&physical, schema.clone(), &key, config, stream, on_running)
                    .map_err(|e| self.exec_error(e))?;
                // Fetches publish it while they run.
                interrupt.publish(None);
                self.opened(LiveQuery::new(live, self.engine.clone(), key));
                return Ok(QueryOutput {
                    schema,
                    batches: Vec::new(),
                    streamed: Some(0),
                    stats: Default::default(),
                    planning,
                    execution: exec_start.elapsed(),
                });
            }
            Destination::Collect => runtime
                .run(
                    &physical,
                    schema,
                    &key,
                    config,
                    stride_engine::Delivery::Collect { on_running },
                )
                .map_err(|e| self.exec_error(e))?,
            Destination::Stream(receiver) => {
                receiver.columns(&schema)?;
                let stream = stride_exec::StreamConfig::new(stride_exec::result_order(&physical));
                let mut refused = None;
                let consumer = stride_exec::Consumer {
                    config: stream,
                    on_running,
                    deliver: &mut |batch| {
                        // A cancel or timeout lands between batches too,
                        // also once the query itself has finished.
                        let sent = interrupt.check().and_then(|()| receiver.batch(batch));
                        sent.map_err(|e| {
                            let message = e.to_string();
                            refused = Some(e);
                            stride_exec::ExecError::Internal(message)
                        })
                    },
                };
                let out = runtime.run(
                    &physical,
                    schema,
                    &key,
                    config,
                    stride_engine::Delivery::Stream(consumer),
                );
                // The receiver's own error (the client went away) is the
                // statement's, not the executor's.
                match (out, refused) {
                    (Err(_), Some(e)) => return Err(e),
                    (out, _) => out.map_err(|e| self.exec_error(e))?,
                }
            }
        };
        self.statement_stats.borrow_mut().add(&out.stats);
        Ok(QueryOutput {
            schema: out.schema,
            batches: out.batches,
            streamed: out.streamed,
            stats: out.stats,
            planning,
            execution: exec_start.elapsed(),
        })
    }

    /// The statement's error for an executor's error.
    pub(super) fn exec_error(&self, e: stride_exec::ExecError) -> SqlError {
        match e {
            stride_exec::ExecError::Query(stride_sched::QueryError::Cancelled) => {
                self.interrupt.stopped()
            }
            e if e.kind() == Some(stride_exec::ErrorKind::Overflow) => {
                SqlError::NumericOutOfRange(format!("integer out of range ({e})"))
            }
            other => SqlError::Exec(other),
        }
    }

    /// Replaces every uncorrelated scalar subquery by its value, and every
    /// correlated one DataFusion could not decorrelate by its values for
    /// the distinct outer values (`crate::engine::apply`), where those are
    /// few.
    fn substitute_subqueries(&self, plan: LogicalPlan) -> Result<LogicalPlan> {
        let plan = super::outer_refs::requalify_outer_refs(plan)?;
        let result = plan.transform_up(|node| {
            let input = match &node {
                LogicalPlan::Projection(_) | LogicalPlan::Filter(_) => {
                    node.inputs().first().map(|i| (*i).clone())
                }
                _ => None,
            };
            node.map_expressions(|e| {
                e.transform_up(|e| match e {
                    Expr::ScalarSubquery(sq) => {
                        if !sq.outer_ref_columns.is_empty() {
                            let Some(input) = &input else {
                                return Err(external(SqlError::Unsupported(
                                    "correlated scalar subquery".into(),
                                )));
                            };
                            return self
                                .apply_correlated(&sq, input)
                                .map(Transformed::yes)
                                .map_err(external);
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

    pub(super) fn scalar_value(&self, subquery: &LogicalPlan) -> Result<ScalarValue> {
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
        Lowerer::with_scan(self.scan_placement()).lower(&placeholder)
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
        let workers = self.engine.runtime().scheduler().config().workers;
        let pipelines = stride_exec::executor::explain_pipelines(&physical, workers)?;
        Ok(format!(
            "logical plan:\n{}\n\nphysical plan:\n{}\npipelines (task sets, in order):\n{}\n",
            plan.display_indent(),
            physical,
            pipelines.join("\n")
        ))
    }
}

//! The plan cache: a statement run again skips binding, DataFusion's
//! analyzer and its optimizer, and pays only for what must be redone per
//! execution — binding the tables' current snapshots and the values,
//! Stride's join ordering (which reads the values' range selectivities and
//! the tables' current sizes), running scalar subqueries, lowering.
//!
//! A [`CachedPlan`] is the bound plan optimized with its parameters still
//! in place (`$n`, typed), joins not yet ordered. Two users:
//!
//! * a prepared statement keeps its own (`prepared`), built at Parse, so
//!   Bind/Execute re-binds and lowers only;
//! * simple-protocol queries share the engine's [`PlanCache`], an LRU of
//!   statement *shapes* (`literal_mask`: the text with the literals that
//!   are provably safe to turn into parameters masked) per default schema,
//!   role and the settings the binder reads. Engine-wide rather than per
//!   session: dashboards and pooled clients send the same shapes over many
//!   short-lived connections, and a session's first statement should find
//!   the plan another session made; the lock is held only to look up or
//!   insert an entry.
//!
//! What keeps answers unchanged:
//!
//! * every execution binds the current committed snapshots — or the
//!   transaction's own view — of the tables the plan scans; a table whose
//!   columns changed fails a prepared statement with
//!   [`SqlError::PlanInvalidated`] (0A000) and makes a cached shape plan
//!   in full again; a dropped table fails as a full plan would;
//! * privileges are checked at every execution, against the tables the
//!   statement as written reads (not only those the optimizer kept);
//! * only plans whose meaning cannot depend on when they were planned are
//!   kept: queries (no DDL, DML, EXPLAIN), over Stride's tables and
//!   system views only, calling immutable functions only (`now()`,
//!   `current_user`, the catalog functions are stable: their statements are
//!   planned every time), with every parameter's type known;
//! * a masked literal runs the cached plan only when its value converts
//!   exactly into the parameter's type (the compared column's), else the
//!   statement is planned in full; a masked constant expression's value
//!   (`date '…' - interval '90' day`) is computed at each execution by
//!   planning the expression as the session plans any statement
//!   ([`Session::compute_constants`]), so it is what a full plan would fold
//!   it to; a shape whose masked form does not plan where its literal form
//!   does is remembered as not cacheable;
//! * cached plans hold the tables' schemas, never their rows
//!   ([`detach`]): an entry keeps no dropped or replaced table in memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion_common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion_common::ScalarValue;
use datafusion_expr::{Expr, LogicalPlan, Volatility};
use datafusion_sql::parser::Statement as DFStatement;
use stride_storage::Table;

use super::literal_mask::{self, Literal, Masked};
use super::{Session, StatementOutput};
use crate::column_names::ColumnNames;
use crate::context::StrideTableSource;
use crate::error::{PlanKind, Result, SqlError};
use crate::roles::RoleId;

/// Entries the engine's cache keeps unless `stride.plan_cache_size` says
/// otherwise.
pub const DEFAULT_PLAN_CACHE_SIZE: usize = 512;

/// Ends the key of a query's text as written ([`Session::text_key`]);
/// a masked shape's key ends with its literals' kinds (`n`, `t`) instead.
const TEXT_SUFFIX: &str = "\u{0}text";

/// A plan to be re-bound and run again.
#[derive(Debug)]
pub(super) struct CachedPlan {
    /// The statement as bound, before optimization: the tables it reads,
    /// which privileges are checked against at each execution.
    pub bound: LogicalPlan,
    /// Analyzed and optimized, parameters in place, joins not yet ordered.
    pub optimized: LogicalPlan,
    /// Types of `$1..$n`.
    pub param_types: Vec<DataType>,
}

/// What a shape is cached under: the statement's shape and what else
/// decides its binding.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ShapeKey {
    /// [`Masked::shape`].
    shape: String,
    /// Where unqualified names resolve (`search_path`).
    schema: String,
    /// The session's role.
    role: RoleId,
    /// The settings the binder reads (time zone, date and interval style).
    settings: String,
}

/// One shape in the cache.
#[derive(Debug)]
struct Entry {
    /// `None`: the shape is planned in full every time.
    plan: Option<Arc<CachedPlan>>,
    /// Executions that ran the cached plan (Relaxed: a statistic).
    hits: AtomicU64,
    /// Parse, bind and optimize of the miss that made the entry.
    planning: Duration,
}

#[derive(Debug, Default)]
struct Lru {
    entries: HashMap<ShapeKey, (Arc<Entry>, u64)>,
    /// Entries by last use.
    by_use: BTreeMap<u64, ShapeKey>,
    clock: u64,
}

impl Lru {
    fn touch(&mut self, key: &ShapeKey) -> Option<Arc<Entry>> {
        self.clock += 1;
        let clock = self.clock;
        let (entry, used) = self.entries.get_mut(key)?;
        self.by_use.remove(used);
        *used = clock;
        self.by_use.insert(clock, key.clone());
        Some(entry.clone())
    }

    fn remove(&mut self, key: &ShapeKey) -> bool {
        match self.entries.remove(key) {
            Some((_, used)) => {
                self.by_use.remove(&used);
                true
            }
            None => false,
        }
    }

    /// Drops the least recently used entries beyond `capacity`; how many.
    fn shrink(&mut self, capacity: usize) -> u64 {
        let mut evicted = 0;
        while self.entries.len() > capacity {
            let Some((_, key)) = self.by_use.pop_first() else {
                break;
            };
            self.entries.remove(&key);
            evicted += 1;
        }
        evicted
    }
}

/// The engine's cache of simple-protocol statement shapes.
#[derive(Debug)]
pub struct PlanCache {
    /// Most entries kept; 0: off (Relaxed: a plain setting).
    capacity: AtomicUsize,
    lru: Mutex<Lru>,
    /// Executions that ran a cached plan (Relaxed: statistics, as the
    /// other counters).
    hits: AtomicU64,
    /// Shapes planned because the cache did not hold them.
    misses: AtomicU64,
    /// Entries dropped to stay within the capacity.
    evictions: AtomicU64,
}

/// The cache's counters (`stride.plan_cache_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanCacheStats {
    pub capacity: usize,
    pub entries: usize,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
}

impl PlanCache {
    pub fn new(capacity: usize) -> PlanCache {
        PlanCache {
            capacity: AtomicUsize::new(capacity),
            lru: Mutex::new(Lru::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// Most entries kept (`stride.plan_cache_size`); 0: off.
    pub fn capacity(&self) -> usize {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Sets the capacity, dropping the least recently used entries beyond
    /// it (all of them for 0).
    pub fn set_capacity(&self, capacity: usize) {
        self.capacity.store(capacity, Ordering::Relaxed);
        let evicted = self.lock().shrink(capacity);
        self.evictions.fetch_add(evicted, Ordering::Relaxed);
    }

    pub fn stats(&self) -> PlanCacheStats {
        PlanCacheStats {
            capacity: self.capacity(),
            entries: self.lock().entries.len(),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.lru.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, key: &ShapeKey) -> Option<Arc<Entry>> {
        self.lock().touch(key)
    }

    fn insert(&self, key: ShapeKey, entry: Entry) -> Arc<Entry> {
        let entry = Arc::new(entry);
        let capacity = self.capacity();
        if capacity == 0 {
            return entry;
        }
        let mut lru = self.lock();
        lru.remove(&key);
        lru.clock += 1;
        let clock = lru.clock;
        lru.by_use.insert(clock, key.clone());
        lru.entries.insert(key, (entry.clone(), clock));
        let evicted = lru.shrink(capacity);
        drop(lru);
        self.evictions.fetch_add(evicted, Ordering::Relaxed);
        entry
    }

    fn remove(&self, key: &ShapeKey) {
        self.lock().remove(key);
    }

    /// Remembers that `key`'s shape plans in full only.
    pub(super) fn refuse(&self, key: ShapeKey) {
        self.insert(
            key,
            Entry {
                plan: None,
                hits: AtomicU64::new(0),
                planning: Duration::ZERO,
            },
        );
    }

    /// `stride.plan_cache`: one row per entry, most recently used first;
    /// a shape's text only for its own role or a superuser.
    pub fn entries_table(&self, viewer: stride_engine::activity::Viewer) -> Result<Table> {
        let mut rows: Vec<(ShapeKey, Arc<Entry>, u64)> = self
            .lock()
            .entries
            .iter()
            .map(|(k, (e, used))| (k.clone(), e.clone(), *used))
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.2));
        let f = |name: &str, t: DataType| Field::new(name, t, true);
        let schema = Arc::new(Schema::new(vec![
            f("shape", DataType::Utf8),
            f("kind", DataType::Utf8),
            f("default_schema", DataType::Utf8),
            f("role_id", DataType::Int64),
            f("parameters", DataType::Int64),
            f("cached", DataType::Boolean),
            f("hits", DataType::Int64),
            f("planning_ms", DataType::Float64),
        ]));
        let shape = |k: &ShapeKey| {
            if viewer.superuser || viewer.role == k.role {
                k.shape.split('\u{0}').next().unwrap_or("").to_string()
            } else {
                stride_engine::activity::HIDDEN_TEXT.to_string()
            }
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| shape(&r.0)),
            )),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| {
                if r.0.shape.ends_with(TEXT_SUFFIX) {
                    "text"
                } else {
                    "masked"
                }
            }))),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.0.schema.as_str()),
            )),
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|r| i64::from(r.0.role)),
            )),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| {
                r.1.plan
                    .as_ref()
                    .map(|p| i64::try_from(p.param_types.len()).unwrap_or(i64::MAX))
            }))),
            Arc::new(BooleanArray::from_iter(
                rows.iter().map(|r| Some(r.1.plan.is_some())),
            )),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| {
                i64::try_from(r.1.hits.load(Ordering::Relaxed)).unwrap_or(i64::MAX)
            }))),
            Arc::new(Float64Array::from_iter(rows.iter().map(|r| {
                r.1.plan.as_ref().map(|_| r.1.planning.as_secs_f64() * 1e3)
            }))),
        ];
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        Ok(Table::new("plan_cache", schema, vec![batch])?)
    }

    /// `stride.plan_cache_stats`: the cache's counters in one row.
    pub fn stats_table(&self) -> Result<Table> {
        let s = self.stats();
        let f = |name: &str| Field::new(name, DataType::Int64, false);
        let schema = Arc::new(Schema::new(vec![
            f("capacity"),
            f("entries"),
            f("hits"),
            f("misses"),
            f("evictions"),
        ]));
        let int = |v: u64| -> ArrayRef {
            Arc::new(Int64Array::from_iter_values([
                i64::try_from(v).unwrap_or(i64::MAX)
            ]))
        };
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                int(s.capacity as u64),
                int(s.entries as u64),
                int(s.hits),
                int(s.misses),
                int(s.evictions),
            ],
        )?;
        Ok(Table::new("plan_cache_stats", schema, vec![batch])?)
    }
}

/// What became of a simple-protocol statement offered to the cache.
// One value per statement, matched at once: boxing the output would cost
// an allocation per query (as `StatementOutput` itself argues).
#[allow(clippy::large_enum_variant)]
pub(super) enum Through {
    /// It ran from a cached plan (or failed there as a full plan would).
    Ran(Result<StatementOutput>),
    /// Plan it in full. `Some(key)`: its masked shape failed to plan; if
    /// the full plan succeeds, the shape is to be refused
    /// ([`PlanCache::refuse`]).
    Full(Option<ShapeKey>),
}

impl Session {
    /// Runs a simple-protocol statement from the engine's plan cache —
    /// planning its shape on a miss — where it can; `sql` is the text for
    /// the query log, `start` when its planning began.
    pub(super) fn run_through_cache(
        &mut self,
        stmt: &DFStatement,
        sql: &str,
        start: Instant,
    ) -> Through {
        let engine = self.engine.clone();
        let cache = &engine.plan_cache;
        if cache.capacity() == 0 || self.in_failed_transaction() {
            return Through::Full(None);
        }
        let Some(mut masked) = literal_mask::mask(stmt) else {
            return Through::Full(None);
        };
        let key = self.shape_key(masked.shape.clone());
        let found = cache.get(&key);
        if found.as_ref().is_some_and(|entry| entry.plan.is_none()) {
            return Through::Full(None);
        }
        if self.compute_constants(&mut masked.literals).is_err() {
            // The full plan folds the expression itself, or reports why
            // it cannot.
            return Through::Full(None);
        }
        let (entry, hit) = match found {
            Some(entry) => (entry, true),
            None => {
                cache.misses.fetch_add(1, Ordering::Relaxed);
                match self.plan_shape(&masked) {
                    Ok(plan) => {
                        let entry = Entry {
                            plan: plan.map(Arc::new),
                            hits: AtomicU64::new(0),
                            planning: start.elapsed(),
                        };
                        (cache.insert(key.clone(), entry), false)
                    }
                    Err(_) => return Through::Full(Some(key)),
                }
            }
        };
        let Some(plan) = &entry.plan else {
            return Through::Full(None);
        };
        let values = masked
            .literals
            .iter()
            .zip(&plan.param_types)
            .map(|(literal, t)| literal.exact_value(t))
            .collect::<Option<Vec<_>>>();
        let Some(values) = values else {
            return Through::Full(None);
        };
        let bound = match self.bind_cached(plan, values) {
            Ok(bound) => bound,
            Err(_) => {
                // A table dropped or changed since: the full plan re-plans
                // the shape or reports the statement's error.
                cache.remove(&key);
                return Through::Full(None);
            }
        };
        if let Err(e) = self.authorize(&plan.bound) {
            return Through::Ran(Err(e));
        }
        if hit {
            cache.hits.fetch_add(1, Ordering::Relaxed);
            entry.hits.fetch_add(1, Ordering::Relaxed);
        }
        // Named from the statement as written: the names hold no literal,
        // so they are the same for every statement of the shape.
        let names = ColumnNames::of_statement(stmt);
        Through::Ran(self.run_bound(bound, sql, true, start, names.as_ref()))
    }

    /// The key of a query's text as written (parameters `$n` its own, no
    /// literal masked).
    pub(super) fn text_key(&self, text: &str) -> ShapeKey {
        self.shape_key(format!("{text}{TEXT_SUFFIX}"))
    }

    /// A cached plan of a query's text ([`Session::text_key`]), checked
    /// against the tables' current columns; counted as a hit.
    pub(super) fn cached_text(&mut self, key: &ShapeKey) -> Option<Arc<CachedPlan>> {
        let engine = self.engine.clone();
        let cache = &engine.plan_cache;
        let entry = cache.get(key)?;
        let plan = entry.plan.clone()?;
        if self.in_failed_transaction() {
            return None;
        }
        self.take_snapshot();
        if self.rebind(plan.bound.clone()).is_err() {
            cache.remove(key);
            return None;
        }
        cache.hits.fetch_add(1, Ordering::Relaxed);
        entry.hits.fetch_add(1, Ordering::Relaxed);
        Some(plan)
    }

    /// Keeps a query text's plan (its tables detached) in the engine's
    /// cache; `planning`: what binding and optimizing it took.
    pub(super) fn remember_text(&self, key: ShapeKey, plan: &CachedPlan, planning: Duration) {
        let cache = &self.engine.plan_cache;
        let detached = (|| {
            Ok::<_, SqlError>(CachedPlan {
                bound: detach(plan.bound.clone())?,
                optimized: detach(plan.optimized.clone())?,
                param_types: plan.param_types.clone(),
            })
        })();
        // Detaching cannot fail (it makes empty tables of known schemas);
        // should it, the text is simply not kept.
        if let Ok(detached) = detached {
            cache.misses.fetch_add(1, Ordering::Relaxed);
            cache.insert(
                key,
                Entry {
                    plan: Some(Arc::new(detached)),
                    hits: AtomicU64::new(0),
                    planning,
                },
            );
        }
    }

    fn shape_key(&self, shape: String) -> ShapeKey {
        let setting = |name: &str| self.settings.get(name).unwrap_or_default();
        ShapeKey {
            shape,
            schema: self.default_schema.clone(),
            role: self.role,
            settings: format!(
                "{}\u{0}{}\u{0}{}",
                setting("timezone"),
                setting("datestyle"),
                setting("intervalstyle")
            ),
        }
    }

    /// Plans a masked statement for the cache: `None` where its plan may
    /// not be kept (see [`Session::cacheable_plan`]) or a parameter's type
    /// takes no literal of its kind; an error where the masked statement
    /// does not plan.
    fn plan_shape(&mut self, masked: &Masked) -> Result<Option<CachedPlan>> {
        let (bound, types) = self.bind_statement(masked.statement.clone())?;
        if types.len() != masked.literals.len() {
            return Ok(None);
        }
        let Some(types) = types.into_iter().collect::<Option<Vec<_>>>() else {
            return Ok(None);
        };
        if masked.literals.iter().zip(&types).any(|(l, t)| !l.fits(t)) {
            return Ok(None);
        }
        // Result columns are named from the syntax (`crate::column_names`),
        // which names no literal; but a wildcard's columns keep the plan's
        // names, and one over a derived table's expression that holds a
        // masked literal would be named `… $1`: the client sees the name,
        // so such shapes plan in full.
        let names = ColumnNames::of_statement(&masked.statement);
        let described = match &names {
            Some(names) => names.rename(bound.schema().as_arrow()),
            None => Arc::new(bound.schema().as_arrow().clone()),
        };
        if described
            .fields()
            .iter()
            .any(|f| names_a_parameter(f.name()))
        {
            return Ok(None);
        }
        match self.cacheable_plan(bound, types)? {
            Some(plan) => Ok(Some(CachedPlan {
                bound: detach(plan.bound)?,
                optimized: detach(plan.optimized)?,
                param_types: plan.param_types,
            })),
            None => Ok(None),
        }
    }

    /// The cacheable form of a bound statement: `None` unless it is a query
    /// over Stride's tables and system views calling only immutable
    /// functions; an error where the optimizer fails.
    pub(super) fn cacheable_plan(
        &self,
        bound: LogicalPlan,
        param_types: Vec<DataType>,
    ) -> Result<Option<CachedPlan>> {
        if !is_query(&bound) || !replannable(&bound)? {
            return Ok(None);
        }
        let optimized = self.optimize_unordered(bound.clone())?;
        Ok(Some(CachedPlan {
            bound,
            optimized,
            param_types,
        }))
    }

    /// Computes the masked constant expressions' values
    /// ([`Literal::Constant`]) as a full plan of the statement would:
    /// `SELECT e1 AS c0, e2 AS c1, …` bound and optimized as the session
    /// binds and optimizes any statement, which folds each expression into
    /// a literal. An error where one does not plan, compute or fold.
    fn compute_constants(&self, literals: &mut [Literal]) -> Result<()> {
        // Named apart: one expression may be written twice.
        let exprs: Vec<String> = literals
            .iter()
            .filter_map(|l| match l {
                Literal::Constant { expr, .. } => Some(expr),
                _ => None,
            })
            .enumerate()
            .map(|(i, expr)| format!("{expr} AS c{i}"))
            .collect();
        if exprs.is_empty() {
            return Ok(());
        }
        let select = crate::limits::parse(&format!("SELECT {}", exprs.join(", ")))?
            .pop_front()
            .ok_or_else(not_folded)?;
        let plan = self.optimize_unordered(self.to_logical(select)?)?;
        let values = folded_values(&plan)?;
        if values.len() != exprs.len() {
            return Err(not_folded());
        }
        let constants = literals.iter_mut().filter_map(|l| match l {
            Literal::Constant { value, .. } => Some(value),
            _ => None,
        });
        for (slot, value) in constants.zip(values) {
            *slot = Some(value);
        }
        Ok(())
    }

    /// A cached plan bound to the current snapshots (the transaction's
    /// view in a block) with its parameters' values, which must be of the
    /// parameters' types.
    pub(super) fn bind_cached(
        &mut self,
        plan: &CachedPlan,
        values: Vec<ScalarValue>,
    ) -> Result<LogicalPlan> {
        self.take_snapshot();
        let rebound = self.rebind(plan.optimized.clone())?;
        if values.is_empty() {
            Ok(rebound)
        } else {
            Ok(rebound.with_param_values(values)?)
        }
    }

    /// Runs a bound, optimized plan whose joins are still to be ordered,
    /// its result columns named `names`.
    pub(super) fn run_bound(
        &mut self,
        plan: LogicalPlan,
        sql: &str,
        stream: bool,
        start: Instant,
        names: Option<&ColumnNames>,
    ) -> Result<StatementOutput> {
        self.logged(sql, |s| {
            let plan = super::bound_rules(plan)?;
            s.run_planned(&plan, stream, start, names)
        })
    }
}

/// The values of an optimized `SELECT` of constants: its projection's
/// expressions, each folded into a literal.
fn folded_values(plan: &LogicalPlan) -> Result<Vec<ScalarValue>> {
    let LogicalPlan::Projection(projection) = plan else {
        return Err(not_folded());
    };
    projection
        .expr
        .iter()
        .map(|e| {
            let mut e = e;
            while let Expr::Alias(alias) = e {
                e = alias.expr.as_ref();
            }
            match e {
                Expr::Literal(value, _) => Ok(value.clone()),
                _ => Err(not_folded()),
            }
        })
        .collect()
}

/// A constant expression the optimizer left unfolded.
fn not_folded() -> SqlError {
    SqlError::plan(
        PlanKind::Other,
        "a constant expression did not fold into a value",
    )
}

/// Whether a column name shows a parameter (`$` and a digit).
fn names_a_parameter(name: &str) -> bool {
    name.as_bytes()
        .windows(2)
        .any(|w| w[0] == b'$' && w[1].is_ascii_digit())
}

/// Whether `plan` is a query (what `dispatch` optimizes and runs).
fn is_query(plan: &LogicalPlan) -> bool {
    !matches!(
        plan,
        LogicalPlan::Ddl(_)
            | LogicalPlan::Dml(_)
            | LogicalPlan::Statement(_)
            | LogicalPlan::Explain(_)
            | LogicalPlan::Analyze(_)
            | LogicalPlan::Copy(_)
            | LogicalPlan::DescribeTable(_)
    )
}

/// Whether optimizing `plan` now and running it later means what planning
/// it later would: it scans Stride's tables and system views only (which
/// re-binding replaces by current ones) and calls no function whose value
/// may change between statements (the optimizer folds stable functions
/// such as `now()` into constants).
fn replannable(plan: &LogicalPlan) -> Result<bool> {
    let mut ok = true;
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            if scan.source.downcast_ref::<StrideTableSource>().is_none() {
                ok = false;
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::ScalarFunction(f) = e {
                    if f.func.signature().volatility != Volatility::Immutable {
                        ok = false;
                        return Ok(TreeNodeRecursion::Stop);
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    })
    .map_err(SqlError::from)?;
    Ok(ok)
}

/// `plan` with every scanned table replaced by an empty table of the same
/// schema: what an entry keeps holds no rows (re-binding puts the current
/// snapshots in).
fn detach(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|node| {
        let LogicalPlan::TableScan(mut scan) = node else {
            return Ok(Transformed::no(node));
        };
        let Some(source) = scan.source.downcast_ref::<StrideTableSource>() else {
            return Ok(Transformed::no(LogicalPlan::TableScan(scan)));
        };
        let table = &source.table;
        let empty = Table::new(table.name(), table.schema().clone(), Vec::new())
            .map_err(|e| datafusion_common::DataFusionError::External(Box::new(e)))?;
        scan.source = Arc::new(StrideTableSource::scanned(
            Arc::new(empty),
            source.origin.clone(),
        ));
        Ok(Transformed::yes(LogicalPlan::TableScan(scan)))
    })
    .map(|t| t.data)
    .map_err(SqlError::from)
}

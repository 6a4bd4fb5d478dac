//! Lowering an optimized DataFusion `LogicalPlan` to Stride's physical plan.
//!
//! Every node's output keeps the logical node's columns in order, so
//! expressions compile against the logical input schema unchanged. Scalar
//! subqueries must already be replaced by literals (see `engine`).
//!
//! Join build sides: DataFusion's logical optimizer keeps the FROM order and
//! chooses no build side, so each hash join builds on the input with the
//! smaller estimated cardinality ([`estimate_rows`]).

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::compute::SortOptions;
use arrow::datatypes::{Schema, SchemaRef};
use datafusion_common::NullEquality;
use datafusion_common::{DFSchema, ScalarValue};
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::logical_plan::{
    Aggregate, Distinct, EmptyRelation, FetchType, Join, Limit, SkipType, Sort, TableScan, Values,
};
use datafusion_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion_expr::{BinaryExpr, Expr, JoinType, LogicalPlan, Operator};
use datafusion_physical_expr::aggregate::LoweredAggregateBuilder;
use datafusion_physical_expr::create_physical_expr;
use stride_exec::plan::{AggregateSpec, BuildSide, ExprRef, HashJoinPlan, SortKey};
use stride_exec::PhysicalPlan;

mod grouping_sets;
mod table_functions;

use crate::context::StrideTableSource;
use crate::error::{Result, SqlError};

/// Lowers logical plans; holds what expression compilation needs.
pub struct Lowerer {
    props: ExecutionProps,
    planning: PhysicalPlanningContext,
    /// How table scans are placed and scheduled (the session's
    /// `stride.placement` and `stride.affinity` over the topology's nodes).
    scan: stride_exec::placement::ScanPlacement,
}

impl Default for Lowerer {
    fn default() -> Self {
        Lowerer {
            props: ExecutionProps::new(),
            planning: PhysicalPlanningContext::default(),
            scan: stride_exec::placement::ScanPlacement::default(),
        }
    }
}

impl Lowerer {
    /// A lowerer whose scans use `scan`.
    pub fn with_scan(scan: stride_exec::placement::ScanPlacement) -> Self {
        Lowerer {
            scan,
            ..Lowerer::default()
        }
    }
}

/// DataFusion plans a subquery inside a disjunction (`a IN (…) OR p`,
/// `EXISTS (…) OR p`) as a mark join whose mark is true or false, never
/// NULL. That is exact wherever the mark is not negated (a NULL and a false
/// reject a row alike under AND and OR) and for `NOT EXISTS`, but not for
/// `NOT IN`: `x NOT IN (…)` is NULL when `x` is NULL or the subquery yields
/// a NULL, and a two-valued `NOT mark` would accept the row. So a `NOT IN`
/// subquery anywhere but as a conjunct of its own (where it becomes a
/// null-aware anti join) is refused, before the optimizer rewrites it.
pub(crate) fn refuse_not_in_inside_disjunctions(plan: &LogicalPlan) -> Result<()> {
    use datafusion_common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion_expr::utils::split_conjunction;
    let negated_in = |e: &Expr| match e {
        Expr::InSubquery(s) => s.negated,
        Expr::Not(inner) => matches!(inner.as_ref(), Expr::InSubquery(s) if !s.negated),
        _ => false,
    };
    let mut found = false;
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::Filter(f) = node {
            for conjunct in split_conjunction(&f.predicate) {
                if negated_in(conjunct) {
                    continue;
                }
                found |= conjunct.exists(|e| Ok(negated_in(e)))?;
            }
        }
        Ok(if found {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    if found {
        return Err(unsupported(
            "NOT IN (subquery) inside a disjunction (write NOT EXISTS, or a NOT IN of its own)",
        ));
    }
    Ok(())
}

pub(crate) fn unsupported(what: impl Into<String>) -> SqlError {
    SqlError::Unsupported(what.into())
}

pub(crate) fn arrow_schema(schema: &DFSchema) -> SchemaRef {
    Arc::new(schema.as_arrow().clone())
}

impl Lowerer {
    /// Compiles an expression, integer arithmetic checked (see
    /// [`crate::integers`]), decimal arithmetic checked per batch (see
    /// [`crate::decimal_arith`]).
    pub(crate) fn expr(&self, e: &Expr, schema: &DFSchema) -> Result<ExprRef> {
        let physical = create_physical_expr(e, schema, &self.props, &self.planning)?;
        Self::arithmetic(physical, schema.as_arrow())
    }

    /// Stride's arithmetic in a physical expression DataFusion made.
    fn arithmetic(physical: ExprRef, schema: &arrow::datatypes::Schema) -> Result<ExprRef> {
        let physical = crate::integers::checked_arithmetic(physical, schema)?;
        crate::decimal_arith::fast_decimal_arithmetic(physical, schema)
    }

    pub fn lower(&self, plan: &LogicalPlan) -> Result<PhysicalPlan> {
        match plan {
            LogicalPlan::Projection(p) => Ok(PhysicalPlan::Projection {
                exprs: p
                    .expr
                    .iter()
                    .map(|e| self.expr(e, p.input.schema()))
                    .collect::<Result<_>>()?,
                input: Box::new(self.lower(&p.input)?),
                schema: arrow_schema(&p.schema),
            }),
            LogicalPlan::Filter(f) => Ok(PhysicalPlan::Filter {
                predicate: self.expr(&f.predicate, f.input.schema())?,
                input: Box::new(self.lower(&f.input)?),
            }),
            LogicalPlan::TableScan(scan) => self.scan(scan),
            LogicalPlan::Join(join) => self.join(join),
            LogicalPlan::Aggregate(agg) => self.aggregate(agg),
            LogicalPlan::Sort(sort) => self.sort(sort),
            LogicalPlan::Limit(limit) => self.limit(limit),
            LogicalPlan::Union(u) => Ok(PhysicalPlan::Union {
                inputs: u
                    .inputs
                    .iter()
                    .map(|i| self.lower(i))
                    .collect::<Result<_>>()?,
                schema: arrow_schema(&u.schema),
            }),
            LogicalPlan::Distinct(Distinct::All(input)) => {
                let schema = input.schema();
                let group_by = (0..schema.fields().len())
                    .map(|i| {
                        let (q, f) = schema.qualified_field(i);
                        self.expr(
                            &Expr::Column(datafusion_common::Column::new(q.cloned(), f.name())),
                            schema,
                        )
                    })
                    .collect::<Result<_>>()?;
                Ok(PhysicalPlan::Aggregate {
                    input: Box::new(self.lower(input)?),
                    group_by,
                    aggregates: Vec::new(),
                    schema: arrow_schema(schema),
                })
            }
            LogicalPlan::Distinct(Distinct::On(_)) => Err(unsupported("DISTINCT ON")),
            LogicalPlan::SubqueryAlias(a) => self.lower(&a.input),
            LogicalPlan::Values(v) => self.values(v),
            LogicalPlan::EmptyRelation(e) => Ok(empty_relation(e)),
            LogicalPlan::Subquery(_) => Err(unsupported("correlated subquery")),
            LogicalPlan::Window(w) => self.window(w),
            LogicalPlan::Unnest(_) => Err(unsupported("UNNEST")),
            LogicalPlan::Extension(e) => {
                let node = e.node.as_any();
                if let Some(call) = node.downcast_ref::<crate::table_functions::SetFunctionCall>() {
                    self.set_function(call)
                } else if let Some(call) = node.downcast_ref::<crate::lateral::LateralCall>() {
                    self.lateral_call(call)
                } else {
                    Err(unsupported(format!("plan node {}", e.node.name())))
                }
            }
            LogicalPlan::RecursiveQuery(_) => Err(unsupported("recursive CTE")),
            LogicalPlan::Repartition(_) => Err(unsupported("repartition")),
            other => Err(unsupported(format!(
                "{} in a query",
                other
                    .display()
                    .to_string()
                    .split(':')
                    .next()
                    .unwrap_or("plan node")
            ))),
        }
    }

    fn scan(&self, scan: &TableScan) -> Result<PhysicalPlan> {
        let source = scan
            .source
            .downcast_ref::<StrideTableSource>()
            .ok_or_else(|| SqlError::Internal("table scan over a foreign table source".into()))?;
        if !scan.filters.is_empty() {
            return Err(SqlError::Internal(
                "filters were pushed into a table scan that does not accept them".into(),
            ));
        }
        let table = source.table.clone();
        let projection = scan
            .projection
            .clone()
            .unwrap_or_else(|| (0..table.schema().fields().len()).collect());
        let placement = table.placement().unwrap_or(self.scan.placement);
        let plan = PhysicalPlan::Scan {
            table,
            projection,
            schema: arrow_schema(&scan.projected_schema),
            placement: stride_exec::placement::ScanPlacement {
                placement,
                ..self.scan.clone()
            },
        };
        Ok(match scan.fetch {
            Some(n) => PhysicalPlan::Limit {
                input: Box::new(plan),
                skip: 0,
                fetch: Some(n),
            },
            None => plan,
        })
    }

    fn join(&self, join: &Join) -> Result<PhysicalPlan> {
        let on = join
            .on
            .iter()
            .map(|(l, r)| {
                Ok((
                    self.expr(l, join.left.schema())?,
                    self.expr(r, join.right.schema())?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let joined = join.left.schema().join(join.right.schema())?;
        let filter = join
            .filter
            .as_ref()
            .map(|f| self.expr(f, &joined))
            .transpose()?;
        let left_rows = estimate_rows(&join.left);
        let right_rows = estimate_rows(&join.right);
        let build_side = if join.null_aware {
            // NOT IN: the anti side must be probed.
            match join.join_type {
                JoinType::RightAnti => BuildSide::Left,
                _ => BuildSide::Right,
            }
        } else if left_rows < right_rows {
            BuildSide::Left
        } else {
            BuildSide::Right
        };
        Ok(PhysicalPlan::HashJoin(Box::new(HashJoinPlan {
            left: self.lower(&join.left)?,
            right: self.lower(&join.right)?,
            on,
            filter,
            join_type: join.join_type,
            build_side,
            null_equals_null: join.null_equality == NullEquality::NullEqualsNull,
            null_aware: join.null_aware,
            schema: arrow_schema(&join.schema),
        })))
    }

    fn aggregate(&self, agg: &Aggregate) -> Result<PhysicalPlan> {
        if let [Expr::GroupingSet(set)] = agg.group_expr.as_slice() {
            return self.grouping_sets(agg, set);
        }
        let input_schema = agg.input.schema();
        let mut group_by = Vec::new();
        for g in &agg.group_expr {
            if let Expr::GroupingSet(_) = g {
                return Err(SqlError::Internal(
                    "a grouping set beside other group expressions".into(),
                ));
            }
            group_by.push(self.expr(g, input_schema)?);
        }
        Ok(PhysicalPlan::Aggregate {
            input: Box::new(self.lower(&agg.input)?),
            group_by,
            aggregates: self.aggregate_specs(agg)?,
            schema: arrow_schema(&agg.schema),
        })
    }

    /// The aggregate functions of `agg`, compiled against its input.
    fn aggregate_specs(&self, agg: &Aggregate) -> Result<Vec<AggregateSpec>> {
        let input_schema = agg.input.schema();
        let physical_input = input_schema.as_arrow();
        let groups = agg.group_expr_len()?;
        let mut aggregates = Vec::new();
        for (i, a) in agg.aggr_expr.iter().enumerate() {
            let name = agg.schema.field(groups + i).name().clone();
            let lowered = LoweredAggregateBuilder::new(
                a,
                input_schema,
                physical_input,
                &self.props,
                &self.planning,
            )
            .with_name(name)
            .build()?;
            // The arguments, the ordering (`array_agg(x ORDER BY k)`) and
            // the filter get Stride's arithmetic too.
            let args = lowered
                .aggregate
                .expressions()
                .into_iter()
                .map(|e| Self::arithmetic(e, physical_input))
                .collect::<Result<Vec<_>>>()?;
            let order = lowered
                .aggregate
                .order_bys()
                .iter()
                .map(|o| Self::arithmetic(o.expr.clone(), physical_input))
                .collect::<Result<Vec<_>>>()?;
            let function = match lowered.aggregate.with_new_expressions(args, order) {
                Some(f) => Arc::new(f),
                None => lowered.aggregate,
            };
            let filter = lowered
                .filter
                .map(|f| Self::arithmetic(f, physical_input))
                .transpose()?;
            aggregates.push(AggregateSpec { function, filter });
        }
        Ok(aggregates)
    }

    fn sort(&self, sort: &Sort) -> Result<PhysicalPlan> {
        let keys = sort
            .expr
            .iter()
            .map(|s| {
                Ok(SortKey {
                    expr: self.expr(&s.expr, sort.input.schema())?,
                    options: SortOptions {
                        descending: !s.asc,
                        nulls_first: s.nulls_first,
                    },
                })
            })
            .collect::<Result<_>>()?;
        Ok(PhysicalPlan::Sort {
            input: Box::new(self.lower(&sort.input)?),
            keys,
            fetch: sort.fetch,
        })
    }

    fn limit(&self, limit: &Limit) -> Result<PhysicalPlan> {
        let skip = match limit.get_skip_type()? {
            SkipType::Literal(n) => n,
            SkipType::UnsupportedExpr => {
                return Err(unsupported("OFFSET with a non-constant value"))
            }
        };
        let fetch = match limit.get_fetch_type()? {
            FetchType::Literal(n) => n,
            FetchType::UnsupportedExpr => {
                return Err(unsupported("LIMIT with a non-constant value"))
            }
        };
        Ok(PhysicalPlan::Limit {
            input: Box::new(self.lower(&limit.input)?),
            skip,
            fetch,
        })
    }

    /// The value of an expression that reads no column.
    pub(crate) fn constant(&self, e: &Expr) -> Result<ScalarValue> {
        let one_row = RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        Ok(
            match self.expr(e, &DFSchema::empty())?.evaluate(&one_row)? {
                datafusion_expr::ColumnarValue::Scalar(s) => s,
                datafusion_expr::ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0)?,
            },
        )
    }

    fn values(&self, v: &Values) -> Result<PhysicalPlan> {
        let schema = arrow_schema(&v.schema);
        let mut columns: Vec<Vec<ScalarValue>> = vec![Vec::new(); schema.fields().len()];
        for row in &v.values {
            for (c, e) in row.iter().enumerate() {
                columns[c].push(self.constant(e)?);
            }
        }
        let arrays = columns
            .into_iter()
            .zip(schema.fields())
            .map(|(vals, f)| {
                let a = ScalarValue::iter_to_array(vals)?;
                Ok(if a.data_type() == f.data_type() {
                    a
                } else {
                    arrow::compute::cast(&a, f.data_type())?
                })
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let batch = RecordBatch::try_new_with_options(
            stride_exec::nullable_schema(&schema),
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(v.values.len())),
        )?;
        Ok(PhysicalPlan::Values {
            schema,
            batches: vec![batch],
        })
    }
}

fn empty_relation(e: &EmptyRelation) -> PhysicalPlan {
    let schema = arrow_schema(&e.schema);
    let batches = if e.produce_one_row {
        let columns = schema
            .fields()
            .iter()
            .map(|f| arrow::array::new_null_array(f.data_type(), 1))
            .collect();
        RecordBatch::try_new_with_options(
            stride_exec::nullable_schema(&schema),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(1)),
        )
        .map(|b| vec![b])
        .unwrap_or_default()
    } else {
        Vec::new()
    };
    PhysicalPlan::Values { schema, batches }
}

impl From<arrow::error::ArrowError> for SqlError {
    fn from(e: arrow::error::ArrowError) -> Self {
        SqlError::Exec(stride_exec::ExecError::Arrow(e))
    }
}

/// Fraction of rows a predicate keeps, by a fixed heuristic per conjunct
/// (equality 0.1, range 0.33, two bounds on one column 0.25, LIKE 0.05,
/// IN-list 0.1 per element up to 0.5, anything else 0.5).
fn selectivity(e: &Expr) -> f64 {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => {
                let mut conjuncts = Vec::new();
                split_and(e, &mut conjuncts);
                conjunction_selectivity(&conjuncts)
            }
            Operator::Or => (selectivity(left) + selectivity(right)).min(1.0),
            Operator::Eq => 0.1,
            Operator::NotEq => 0.9,
            Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq => 0.33,
            _ => 0.5,
        },
        Expr::Between(_) => 0.25,
        Expr::Like(l) if l.negated => 0.95,
        Expr::Like(_) => 0.05,
        Expr::InList(l) => (0.1 * l.list.len() as f64).min(0.5),
        Expr::Not(inner) => 1.0 - selectivity(inner),
        _ => 0.5,
    }
}

fn split_and<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And,
            right,
        }) => {
            split_and(left, out);
            split_and(right, out);
        }
        other => out.push(other),
    }
}

/// The column a range comparison `col <op> literal` bounds, if it is one.
fn range_column(e: &Expr) -> Option<&datafusion_common::Column> {
    match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq,
            right,
        }) => match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), Expr::Literal(..)) | (Expr::Literal(..), Expr::Column(c)) => Some(c),
            _ => None,
        },
        _ => None,
    }
}

/// Product of the conjuncts' selectivities, where two range bounds on the
/// same column count as one BETWEEN (0.25) rather than two independent ranges.
fn conjunction_selectivity(conjuncts: &[&Expr]) -> f64 {
    let mut bounded: Vec<&datafusion_common::Column> = Vec::new();
    let mut sel = 1.0;
    for c in conjuncts {
        match range_column(c) {
            Some(col) if bounded.contains(&col) => sel *= 0.25 / 0.33,
            Some(col) => {
                bounded.push(col);
                sel *= 0.33;
            }
            None => sel *= selectivity(c),
        }
    }
    sel
}

/// A literal as f64 on the scale of [`stride_storage::Table::column_range`].
fn literal_value(e: &Expr) -> Option<f64> {
    let Expr::Literal(v, _) = e else { return None };
    match v {
        ScalarValue::Date32(Some(d)) => Some(f64::from(*d)),
        ScalarValue::Decimal128(Some(x), _, s) => Some(*x as f64 / 10f64.powi(i32::from(*s))),
        other => match other.cast_to(&arrow::datatypes::DataType::Float64).ok()? {
            ScalarValue::Float64(Some(f)) => Some(f),
            _ => None,
        },
    }
}

/// Lower and upper bounds a conjunct puts on a column (`col < v`, `v <= col`,
/// `col BETWEEN a AND b`).
fn bounds(e: &Expr) -> Option<(&datafusion_common::Column, Option<f64>, Option<f64>)> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (col, v, op) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), lit) => (c, literal_value(lit)?, *op),
                (lit, Expr::Column(c)) => (c, literal_value(lit)?, op.swap()?),
                _ => return None,
            };
            match op {
                Operator::Lt | Operator::LtEq => Some((col, None, Some(v))),
                Operator::Gt | Operator::GtEq => Some((col, Some(v), None)),
                _ => None,
            }
        }
        Expr::Between(b) if !b.negated => match b.expr.as_ref() {
            Expr::Column(c) => Some((
                c,
                Some(literal_value(&b.low)?),
                Some(literal_value(&b.high)?),
            )),
            _ => None,
        },
        _ => None,
    }
}

/// Selectivity of a filter directly over a table scan: range conjuncts on
/// numeric and date columns use the column's (min, max), the rest the fixed
/// heuristics of [`selectivity`].
fn scan_selectivity(predicate: &Expr, scan: &TableScan) -> f64 {
    let Some(source) = scan.source.downcast_ref::<StrideTableSource>() else {
        return selectivity(predicate);
    };
    let table = &source.table;
    let mut conjuncts = Vec::new();
    split_and(predicate, &mut conjuncts);
    let mut ranges: Vec<(&datafusion_common::Column, f64, f64, f64, f64)> = Vec::new();
    let mut others = Vec::new();
    for c in conjuncts {
        let bounded = bounds(c).and_then(|(col, lo, hi)| {
            let idx = table.schema().index_of(col.name()).ok()?;
            let (min, max) = table.column_range(idx)?;
            Some((col, lo, hi, min, max))
        });
        match bounded {
            Some((col, lo, hi, min, max)) => match ranges.iter_mut().find(|r| r.0 == col) {
                Some(r) => {
                    r.1 = r.1.max(lo.unwrap_or(min));
                    r.2 = r.2.min(hi.unwrap_or(max));
                }
                None => ranges.push((col, lo.unwrap_or(min), hi.unwrap_or(max), min, max)),
            },
            None => others.push(c),
        }
    }
    let mut sel = conjunction_selectivity(&others);
    for (_, lo, hi, min, max) in ranges {
        let width = max - min;
        let s = if width > 0.0 { (hi - lo) / width } else { 1.0 };
        sel *= s.clamp(0.001, 1.0);
    }
    sel
}

/// A cardinality estimate: `rows` output rows drawn from a key domain of
/// `domain` values (the unfiltered cardinality of the table the rows come
/// from, which bounds the distinct values of its key columns).
#[derive(Debug, Clone, Copy)]
struct Estimate {
    rows: f64,
    domain: f64,
}

impl Estimate {
    fn same(rows: f64) -> Self {
        Estimate {
            rows,
            domain: rows.max(1.0),
        }
    }

    /// Fraction of its domain that survives.
    fn fraction(&self) -> f64 {
        (self.rows / self.domain.max(1.0)).clamp(0.0, 1.0)
    }
}

/// Estimated output rows of a logical plan, from table cardinalities and
/// fixed selectivities; used to pick hash-join build sides.
pub fn estimate_rows(plan: &LogicalPlan) -> f64 {
    estimate(plan).rows
}

/// Estimated (rows, key domain) of a logical plan; see [`estimate_rows`].
pub fn estimate_parts(plan: &LogicalPlan) -> (f64, f64) {
    let e = estimate(plan);
    (e.rows, e.domain)
}

/// Joins are assumed to be key / foreign-key joins: the key side's domain is
/// the smaller one, so `|L ⋈ R| = |L|·|R| / min(domain L, domain R)`.
fn estimate(plan: &LogicalPlan) -> Estimate {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let rows = scan
                .source
                .downcast_ref::<StrideTableSource>()
                .map_or(1000.0, |s| s.table.num_rows() as f64);
            let out = scan.fetch.map_or(rows, |f| rows.min(f as f64));
            Estimate {
                rows: out,
                domain: rows.max(1.0),
            }
        }
        LogicalPlan::Filter(f) => {
            let input = estimate(&f.input);
            let sel = match f.input.as_ref() {
                LogicalPlan::TableScan(scan) => scan_selectivity(&f.predicate, scan),
                _ => selectivity(&f.predicate),
            };
            Estimate {
                rows: (input.rows * sel).max(1.0),
                domain: input.domain,
            }
        }
        LogicalPlan::Join(j) => {
            let (l, r) = (estimate(&j.left), estimate(&j.right));
            let sel = j.filter.as_ref().map_or(1.0, selectivity);
            let domain = l.domain.max(r.domain);
            let key_join = l.rows * r.rows / l.domain.min(r.domain).max(1.0);
            let rows = match j.join_type {
                JoinType::Inner if j.on.is_empty() => l.rows * r.rows * sel,
                JoinType::Inner => key_join * sel,
                JoinType::Left => key_join.max(l.rows),
                JoinType::Right => key_join.max(r.rows),
                JoinType::Full => key_join.max(l.rows + r.rows),
                JoinType::LeftSemi | JoinType::LeftMark => l.rows * r.fraction().max(0.05),
                JoinType::RightSemi | JoinType::RightMark => r.rows * l.fraction().max(0.05),
                JoinType::LeftAnti => l.rows * (1.0 - r.fraction()).max(0.05),
                JoinType::RightAnti => r.rows * (1.0 - l.fraction()).max(0.05),
            };
            let domain = match j.join_type {
                JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => l.domain,
                JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => r.domain,
                _ => domain,
            };
            Estimate {
                rows: rows.max(1.0),
                domain,
            }
        }
        LogicalPlan::Aggregate(a) => {
            if a.group_expr.is_empty() {
                Estimate::same(1.0)
            } else {
                Estimate::same((estimate(&a.input).rows * 0.1).max(1.0))
            }
        }
        LogicalPlan::Limit(l) => {
            let input = estimate(&l.input);
            match l.get_fetch_type() {
                Ok(FetchType::Literal(Some(n))) => Estimate::same(input.rows.min(n as f64)),
                _ => input,
            }
        }
        LogicalPlan::Sort(s) => {
            let input = estimate(&s.input);
            s.fetch
                .map_or(input, |n| Estimate::same(input.rows.min(n as f64)))
        }
        LogicalPlan::Union(u) => Estimate::same(u.inputs.iter().map(|i| estimate(i).rows).sum()),
        LogicalPlan::Values(v) => Estimate::same(v.values.len() as f64),
        LogicalPlan::EmptyRelation(e) => Estimate::same(f64::from(u8::from(e.produce_one_row))),
        LogicalPlan::Distinct(_) => Estimate::same(
            plan.inputs()
                .first()
                .map_or(1.0, |i| estimate(i).rows * 0.5),
        ),
        other => other
            .inputs()
            .first()
            .map_or(Estimate::same(1.0), |i| estimate(i)),
    }
}

//! The physical plan: a tree of operators with their properties (expressions,
//! schemas, join sides). Runtime state lives in the operators and sinks that
//! [`crate::pipeline`] creates from it.

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::ScalarValue;
use datafusion_expr::JoinType;
use datafusion_physical_expr::aggregate::AggregateFunctionExpr;
use datafusion_physical_expr::PhysicalExpr;
use stride_storage::Table;

pub type ExprRef = Arc<dyn PhysicalExpr>;

/// Which input of a join the hash table is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildSide {
    Left,
    Right,
}

/// An aggregate of an aggregation node.
#[derive(Debug, Clone)]
pub struct AggregateSpec {
    pub function: Arc<AggregateFunctionExpr>,
    /// `FILTER (WHERE …)` of the aggregate, evaluated on the input.
    pub filter: Option<ExprRef>,
}

/// One grouping set of a [`PhysicalPlan::GroupingSets`] node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupingSet {
    /// The keys the set leaves out: bit `n-1-i` for key `i` of `n` (the
    /// grouping id, in PostgreSQL's `GROUPING()` order).
    pub mask: u64,
    /// How many earlier sets of the node have the same mask: repeated sets
    /// form groups of their own.
    pub ordinal: u32,
}

impl fmt::Display for GroupingSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#b}", self.mask)?;
        if self.ordinal > 0 {
            write!(f, "#{}", self.ordinal)?;
        }
        Ok(())
    }
}

/// A sort key.
#[derive(Debug, Clone)]
pub struct SortKey {
    pub expr: ExprRef,
    pub options: SortOptions,
}

/// Properties of a hash join.
#[derive(Debug)]
pub struct HashJoinPlan {
    pub left: PhysicalPlan,
    pub right: PhysicalPlan,
    /// Equi-join keys: (expression on left, expression on right).
    pub on: Vec<(ExprRef, ExprRef)>,
    /// Extra non-equi condition over the concatenation left ++ right.
    pub filter: Option<ExprRef>,
    pub join_type: JoinType,
    pub build_side: BuildSide,
    /// NULL keys compare equal (set operations) instead of never matching.
    pub null_equals_null: bool,
    /// `NOT IN` semantics for anti joins: a NULL key on the build side empties
    /// the result, a NULL probe key never qualifies.
    pub null_aware: bool,
    pub schema: SchemaRef,
}

/// A window function: what it computes (ranking, offset, aggregate),
/// over which frame of its partition.
#[derive(Debug, Clone)]
pub struct WindowFunctionSpec {
    pub kind: WindowKind,
    /// Arguments, over the window node's input (an aggregate's are its
    /// function's own expressions).
    pub args: Vec<ExprRef>,
    pub frame: WindowFrameSpec,
    /// The output column's type.
    pub data_type: DataType,
    /// For EXPLAIN (`rank`, `sum`).
    pub name: String,
}

/// Window functions Stride evaluates.
#[derive(Debug, Clone)]
pub enum WindowKind {
    RowNumber,
    Rank,
    DenseRank,
    PercentRank,
    CumeDist,
    /// `ntile(buckets)`.
    Ntile,
    /// `lag(value [, offset [, default]])`.
    Lag,
    /// `lead(value [, offset [, default]])`.
    Lead,
    FirstValue,
    LastValue,
    /// `nth_value(value, n)`.
    NthValue,
    /// An aggregate over the frame.
    Aggregate(Arc<AggregateFunctionExpr>),
}

/// Whether frame offsets count rows or order-key values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameUnits {
    Rows,
    Range,
}

/// One end of a window frame. Offsets count rows (`ROWS`, a non-negative
/// integer) or order-key units (`RANGE`, a non-negative number).
#[derive(Debug, Clone, PartialEq)]
pub enum FrameBound {
    UnboundedPreceding,
    Preceding(ScalarValue),
    CurrentRow,
    Following(ScalarValue),
    UnboundedFollowing,
}

/// A window frame, `units BETWEEN start AND end`.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowFrameSpec {
    pub units: FrameUnits,
    pub start: FrameBound,
    pub end: FrameBound,
}

/// Properties of a window node: functions sharing one PARTITION BY and
/// ORDER BY; output = input columns ++ one column per function.
#[derive(Debug)]
pub struct WindowPlan {
    pub input: PhysicalPlan,
    pub partition_by: Vec<ExprRef>,
    pub order_by: Vec<SortKey>,
    pub functions: Vec<WindowFunctionSpec>,
    pub schema: SchemaRef,
}

/// A physical plan node. Every node's output batches have the columns of
/// `schema()` in order (field names and nullability relaxed, see
/// [`crate::nullable_schema`]).
#[derive(Debug)]
pub enum PhysicalPlan {
    /// Reads columns `projection` of a table snapshot, its rows placed on
    /// memory nodes and its tasks given an affinity as `placement` says.
    Scan {
        table: Arc<Table>,
        projection: Vec<usize>,
        schema: SchemaRef,
        placement: crate::placement::ScanPlacement,
    },
    /// Literal rows (VALUES, a one-row relation, an empty relation).
    Values {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    },
    Filter {
        input: Box<PhysicalPlan>,
        predicate: ExprRef,
    },
    Projection {
        input: Box<PhysicalPlan>,
        exprs: Vec<ExprRef>,
        schema: SchemaRef,
    },
    HashJoin(Box<HashJoinPlan>),
    /// Hash aggregation; output = group columns ++ aggregate columns.
    Aggregate {
        input: Box<PhysicalPlan>,
        group_by: Vec<ExprRef>,
        aggregates: Vec<AggregateSpec>,
        schema: SchemaRef,
    },
    /// Each input row once per grouping set (see
    /// `operator::grouping_sets`); output = input columns ++ `keys` (NULL
    /// where the set leaves them out) ++ grouping id (`id_type`) ++ ordinal
    /// (`UInt32`) ++ real (`Boolean`, false on the grand-total rows added
    /// for sets without keys).
    GroupingSets {
        input: Box<PhysicalPlan>,
        keys: Vec<ExprRef>,
        sets: Vec<GroupingSet>,
        schema: SchemaRef,
    },
    /// Sort; with `fetch`, a top-k.
    Sort {
        input: Box<PhysicalPlan>,
        keys: Vec<SortKey>,
        fetch: Option<usize>,
    },
    Limit {
        input: Box<PhysicalPlan>,
        skip: usize,
        fetch: Option<usize>,
    },
    /// UNION ALL of inputs with the same column types.
    Union {
        inputs: Vec<PhysicalPlan>,
        schema: SchemaRef,
    },
    /// Window functions (see [`crate::operator::window`]).
    Window(Box<WindowPlan>),
    /// Each input row joined with the rows a set-returning function gives
    /// for arguments read from it (a `LATERAL` call in `FROM`, see
    /// [`crate::operator::expand`]); output = input columns ++ the
    /// function's column.
    Expand(Box<ExpandPlan>),
}

/// A set-returning function evaluated once per input row.
#[derive(Debug)]
pub struct ExpandPlan {
    pub input: PhysicalPlan,
    /// The function's arguments, evaluated over the input row.
    pub args: Vec<ExprRef>,
    /// The rows the function gives for one row's argument values.
    pub function: Arc<dyn crate::operator::expand::SetFunctionRows>,
    /// Whether a row for which the function gives no rows is kept once,
    /// with NULL as the function's value (`LEFT JOIN LATERAL … ON true`).
    pub outer: bool,
    pub schema: SchemaRef,
}

impl PhysicalPlan {
    pub fn schema(&self) -> SchemaRef {
        match self {
            PhysicalPlan::Scan { schema, .. }
            | PhysicalPlan::Values { schema, .. }
            | PhysicalPlan::Projection { schema, .. }
            | PhysicalPlan::Aggregate { schema, .. }
            | PhysicalPlan::GroupingSets { schema, .. }
            | PhysicalPlan::Union { schema, .. } => schema.clone(),
            PhysicalPlan::HashJoin(j) => j.schema.clone(),
            PhysicalPlan::Window(w) => w.schema.clone(),
            PhysicalPlan::Expand(e) => e.schema.clone(),
            PhysicalPlan::Filter { input, .. }
            | PhysicalPlan::Sort { input, .. }
            | PhysicalPlan::Limit { input, .. } => input.schema(),
        }
    }

    /// Writes the plan as an indented tree, one operator a line, with the
    /// parts that differ between views (expressions, row counts, aggregates)
    /// rendered by `style`. `Display` is the EXPLAIN view ([`ExplainText`]).
    pub fn write_tree(
        &self,
        w: &mut dyn fmt::Write,
        style: &dyn PlanTextStyle,
        depth: usize,
    ) -> fmt::Result {
        let pad = "  ".repeat(depth);
        let exprs = |list: &[ExprRef]| -> String {
            list.iter()
                .map(|e| style.expr(e))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let sort_keys = |keys: &[SortKey]| -> String {
            keys.iter()
                .map(|k| {
                    let order = if k.options.descending { "DESC" } else { "ASC" };
                    format!("{} {order}", style.expr(&k.expr))
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            PhysicalPlan::Scan {
                table, projection, ..
            } => {
                let cols: Vec<&str> = projection
                    .iter()
                    .map(|&i| table.schema().field(i).name().as_str())
                    .collect();
                writeln!(
                    w,
                    "{pad}Scan {} [{}] {}",
                    table.name(),
                    cols.join(", "),
                    style.rows(table.num_rows())
                )
            }
            PhysicalPlan::Values { batches, .. } => {
                let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                writeln!(w, "{pad}Values {}", style.rows(rows))
            }
            PhysicalPlan::Filter { input, predicate } => {
                writeln!(w, "{pad}Filter {}", style.expr(predicate))?;
                input.write_tree(w, style, depth + 1)
            }
            PhysicalPlan::Projection {
                input, exprs: e, ..
            } => {
                writeln!(w, "{pad}Projection {}", exprs(e))?;
                input.write_tree(w, style, depth + 1)
            }
            PhysicalPlan::HashJoin(j) => {
                let on: Vec<String> =
                    j.on.iter()
                        .map(|(l, r)| format!("{} = {}", style.expr(l), style.expr(r)))
                        .collect();
                write!(
                    w,
                    "{pad}HashJoin {:?} build={:?} on [{}]",
                    j.join_type,
                    j.build_side,
                    on.join(", ")
                )?;
                if let Some(filter) = &j.filter {
                    write!(w, " filter {}", style.expr(filter))?;
                }
                writeln!(w)?;
                j.left.write_tree(w, style, depth + 1)?;
                j.right.write_tree(w, style, depth + 1)
            }
            PhysicalPlan::Aggregate {
                input,
                group_by,
                aggregates,
                ..
            } => {
                let a: Vec<String> = aggregates.iter().map(|a| style.aggregate(a)).collect();
                writeln!(
                    w,
                    "{pad}Aggregate group=[{}] aggr=[{}]",
                    exprs(group_by),
                    a.join(", ")
                )?;
                input.write_tree(w, style, depth + 1)
            }
            PhysicalPlan::GroupingSets {
                input, keys, sets, ..
            } => {
                let s: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
                writeln!(
                    w,
                    "{pad}GroupingSets keys=[{}] sets=[{}]",
                    exprs(keys),
                    s.join(", ")
                )?;
                input.write_tree(w, style, depth + 1)
            }
            PhysicalPlan::Sort { input, keys, fetch } => {
                match fetch {
                    Some(n) => writeln!(w, "{pad}TopK {n} [{}]", sort_keys(keys))?,
                    None => writeln!(w, "{pad}Sort [{}]", sort_keys(keys))?,
                }
                input.write_tree(w, style, depth + 1)
            }
            PhysicalPlan::Limit { input, skip, fetch } => {
                writeln!(w, "{pad}Limit skip={skip} fetch={fetch:?}")?;
                input.write_tree(w, style, depth + 1)
            }
            PhysicalPlan::Window(win) => {
                let f: Vec<&str> = win.functions.iter().map(|f| f.name.as_str()).collect();
                writeln!(
                    w,
                    "{pad}Window [{}] partition by [{}] order by [{}]",
                    f.join(", "),
                    exprs(&win.partition_by),
                    sort_keys(&win.order_by)
                )?;
                win.input.write_tree(w, style, depth + 1)
            }
            PhysicalPlan::Expand(e) => {
                writeln!(
                    w,
                    "{pad}Expand{} {}({})",
                    if e.outer { " outer" } else { "" },
                    e.function.name(),
                    exprs(&e.args)
                )?;
                e.input.write_tree(w, style, depth + 1)
            }
            PhysicalPlan::Union { inputs, .. } => {
                writeln!(w, "{pad}Union")?;
                for i in inputs {
                    i.write_tree(w, style, depth + 1)?;
                }
                Ok(())
            }
        }
    }
}

/// How [`PhysicalPlan::write_tree`] renders the parts of a plan that differ
/// between views of it.
pub trait PlanTextStyle {
    fn expr(&self, e: &ExprRef) -> String;
    /// A row count (of a table, of VALUES).
    fn rows(&self, rows: usize) -> String;
    fn aggregate(&self, a: &AggregateSpec) -> String;
}

/// The EXPLAIN view: expressions as DataFusion displays them, exact row
/// counts, aggregates by name.
pub struct ExplainText;

impl PlanTextStyle for ExplainText {
    fn expr(&self, e: &ExprRef) -> String {
        e.to_string()
    }

    fn rows(&self, rows: usize) -> String {
        format!("rows={rows}")
    }

    fn aggregate(&self, a: &AggregateSpec) -> String {
        a.function.name().to_string()
    }
}

impl fmt::Display for PhysicalPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_tree(f, &ExplainText, 0)
    }
}

//! The SQL front end's side of the feedback store
//! (`stride_engine::feedback`): the key a query's recorded costs are kept
//! under — its physical plan's text, or its *shape* ([`shape`]: the plan
//! with every literal masked and each table's row count rounded to its
//! power of two), the optimized logical plan's estimated rows
//! ([`estimated_rows`]) and each pipeline's cold-start weight
//! ([`pipeline_weights`]) — by the mode in force ([`key`]).

use std::sync::Arc;

use datafusion_common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion_common::ScalarValue;
use datafusion_expr::LogicalPlan;
use datafusion_physical_expr::expressions::{Column, Literal};
use stride_exec::operator::hash_join::{JoinModes, SideMode};
use stride_exec::plan::{AggregateSpec, ExprRef, PlanTextStyle};
use stride_exec::PhysicalPlan;

pub use stride_engine::feedback::{EstimateMode, PlanKey, WorkHistory};

/// A cold-start pipeline that reads another pipeline's output (a hash
/// table, an aggregate, a sorted buffer) weighs this share of the largest
/// table scan of its query.
const BREAKER_OUTPUT_SHARE: f64 = 0.05;

/// The key of a query about to run under `history`'s mode: `physical` is
/// its plan, `logical` the optimized logical plan it was lowered from (its
/// cardinality estimates scale `instance` estimates).
pub fn key(history: &WorkHistory, physical: &PhysicalPlan, logical: &LogicalPlan) -> PlanKey {
    match history.mode() {
        EstimateMode::Off => PlanKey::off(),
        EstimateMode::Plan => PlanKey::exact(physical),
        EstimateMode::Shape => PlanKey::shape(&shape(physical)),
        EstimateMode::Instance => PlanKey::instance(
            &shape(physical),
            estimated_rows(logical),
            pipeline_weights(physical),
        ),
    }
}

/// The estimated rows a query processes: the sum, over every node of its
/// optimized logical plan, of the node's estimated output rows
/// ([`crate::lower::estimate_rows`]; table scans count their tables' rows).
pub fn estimated_rows(plan: &LogicalPlan) -> f64 {
    let mut rows = 0.0;
    // The closure never fails, so neither does the walk.
    let _ = plan.apply(|node| {
        let r = crate::lower::estimate_rows(node);
        if r.is_finite() {
            rows += r.max(0.0);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    rows
}

/// The shape of a physical plan: its text as EXPLAIN prints it, with every
/// literal masked (a NULL of its type), columns by index, aggregates named
/// by function and masked arguments, and each table's row count rounded to
/// its power of two (`rows≈2^k`).
pub fn shape(plan: &PhysicalPlan) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = plan.write_tree(&mut out, &ShapeText, 0);
    out
}

/// The shape view of a plan's text (see [`shape`]).
struct ShapeText;

impl PlanTextStyle for ShapeText {
    fn expr(&self, e: &ExprRef) -> String {
        masked(e)
    }

    fn rows(&self, rows: usize) -> String {
        format!("rows≈2^{}", magnitude(rows))
    }

    fn aggregate(&self, a: &AggregateSpec) -> String {
        let args: Vec<String> = a.function.expressions().iter().map(masked).collect();
        let filter = a
            .filter
            .as_ref()
            .map_or_else(String::new, |f| format!(" filter {}", masked(f)));
        format!("{}({}){filter}", a.function.fun().name(), args.join(", "))
    }
}

/// ⌈log2 rows⌉ (0 for an empty or one-row table).
fn magnitude(rows: usize) -> u32 {
    rows.max(1).next_power_of_two().trailing_zeros()
}

/// An expression as it displays with every literal replaced by a NULL of
/// its type and every column shown by its index only (`@4`).
///
/// Columns lose their names because a column computed above an aggregate
/// is named after the aggregate's expression, literals included
/// (`sum(CASE WHEN nation = Utf8("BRAZIL") …)@1`). Should an expression
/// refuse the replacement, its text is masked token by token instead
/// ([`mask_token`]).
fn masked(expr: &ExprRef) -> String {
    let canonical = Arc::clone(expr).transform(|e| {
        if let Some(l) = e.downcast_ref::<Literal>() {
            let null = ScalarValue::try_from(l.value().data_type())?;
            return Ok(Transformed::yes(Arc::new(Literal::new(null)) as ExprRef));
        }
        if let Some(c) = e.downcast_ref::<Column>() {
            return Ok(Transformed::yes(
                Arc::new(Column::new("", c.index())) as ExprRef
            ));
        }
        Ok(Transformed::no(e))
    });
    match canonical {
        Ok(t) => t.data.to_string(),
        Err(_) => masked_text(expr),
    }
}

/// [`masked`] on the text: each literal's display (a physical literal
/// displays as its bare value: `BUILDING`, `1995-03-15`, `0.05`) replaced by
/// `$` where it stands as a token of its own, and each column's name dropped.
fn masked_text(expr: &ExprRef) -> String {
    let mut literals = Vec::new();
    let mut columns = Vec::new();
    collect_leaves(expr, &mut literals, &mut columns);
    let mut text = expr.to_string();
    // Longer names first, so that a name ending another one (x, max) does
    // not cut the longer one.
    columns.sort();
    columns.dedup();
    columns.sort_by_key(|c| std::cmp::Reverse(c.len()));
    for column in &columns {
        if let Some(at) = column.rfind('@') {
            text = text.replace(column.as_str(), &column[at..]);
        }
    }
    // Longer first, so that a literal that is part of another one (1 in 11)
    // does not break the longer one up.
    literals.sort();
    literals.dedup();
    literals.sort_by_key(|l| std::cmp::Reverse(l.len()));
    for literal in literals.iter().filter(|l| !l.is_empty()) {
        text = mask_token(&text, literal);
    }
    text
}

/// The display texts of the literals and of the columns in `expr`.
fn collect_leaves(expr: &ExprRef, literals: &mut Vec<String>, columns: &mut Vec<String>) {
    if let Some(l) = expr.downcast_ref::<Literal>() {
        literals.push(l.value().to_string());
        return;
    }
    if let Some(c) = expr.downcast_ref::<Column>() {
        columns.push(c.to_string());
        return;
    }
    for child in expr.children() {
        collect_leaves(child, literals, columns);
    }
}

/// `text` with every occurrence of `token` that is not glued to a word,
/// number or column index replaced by `$`.
fn mask_token(text: &str, token: &str) -> String {
    let glued_before = |c: char| c.is_alphanumeric() || matches!(c, '_' | '@' | '#' | '.' | '$');
    let glued_after = |c: char| c.is_alphanumeric() || matches!(c, '_' | '.');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut prev: Option<char> = None;
    while let Some(pos) = rest.find(token) {
        let before = rest[..pos].chars().next_back().or(prev);
        let after = rest[pos + token.len()..].chars().next();
        let free = !before.is_some_and(glued_before) && !after.is_some_and(glued_after);
        out.push_str(&rest[..pos]);
        if free {
            out.push('$');
            prev = Some('$');
        } else {
            out.push_str(token);
            prev = token.chars().next_back();
        }
        rest = &rest[pos + token.len()..];
    }
    out.push_str(rest);
    out
}

/// The cold-start weight of each pipeline of `plan`, in the order the
/// executor's compiler (`stride_exec::pipeline::compile`) emits them as task
/// sets: the rows of the table (or values) a pipeline scans, and for a
/// pipeline that reads another one's output [`BREAKER_OUTPUT_SHARE`] of the
/// largest scan.
pub fn pipeline_weights(plan: &PhysicalPlan) -> Vec<f64> {
    let mut pipelines = Vec::new();
    let open = walk_pipelines(plan, false, &mut pipelines);
    pipelines.extend(open);
    let largest = pipelines.iter().flatten().copied().fold(1.0_f64, f64::max);
    pipelines
        .into_iter()
        .map(|w| w.unwrap_or(largest * BREAKER_OUTPUT_SHARE).max(1.0))
        .collect()
}

/// Walks `plan` as the compiler does: closes (pushes) every pipeline that
/// ends inside it, and returns the weights of the pipelines left open at
/// its top — one, or one per branch of a UNION ALL whose rows go on
/// uncollected (`None`: it reads a breaker's output). `prefix`: below a
/// LIMIT, where the compiler collects a union's branches in input order.
fn walk_pipelines(
    plan: &PhysicalPlan,
    prefix: bool,
    closed: &mut Vec<Option<f64>>,
) -> Vec<Option<f64>> {
    match plan {
        PhysicalPlan::Scan { table, .. } => vec![Some(table.num_rows() as f64)],
        PhysicalPlan::Values { batches, .. } => {
            vec![Some(
                batches.iter().map(|b| b.num_rows()).sum::<usize>() as f64
            )]
        }
        PhysicalPlan::Filter { input, .. } | PhysicalPlan::Projection { input, .. } => {
            walk_pipelines(input, prefix, closed)
        }
        // The expansion runs in its input's pipeline.
        PhysicalPlan::Expand(e) => walk_pipelines(&e.input, prefix, closed),
        PhysicalPlan::GroupingSets { input, sets, .. } => walk_pipelines(input, prefix, closed)
            .into_iter()
            .map(|w| w.map(|w| w * sets.len() as f64))
            .collect(),
        PhysicalPlan::HashJoin(j) => {
            let (build, probe) = match j.build_side {
                stride_exec::plan::BuildSide::Left => (&j.left, &j.right),
                stride_exec::plan::BuildSide::Right => (&j.right, &j.left),
            };
            let b = walk_pipelines(build, false, closed);
            closed.extend(b);
            // The pipeline that links the build rows into the hash table.
            closed.push(None);
            let p = walk_pipelines(probe, prefix, closed);
            let build_pass =
                JoinModes::new(j.join_type, j.build_side).is_ok_and(|m| m.build != SideMode::None);
            if build_pass {
                // The probe pipeline and the build side's pass both end in
                // a buffer that the next pipeline reads.
                closed.extend(p);
                closed.push(None);
                vec![None]
            } else {
                p
            }
        }
        PhysicalPlan::Aggregate { input, .. } | PhysicalPlan::Sort { input, .. } => {
            let i = walk_pipelines(input, false, closed);
            closed.extend(i);
            vec![None]
        }
        PhysicalPlan::Limit { input, .. } => {
            let i = walk_pipelines(input, true, closed);
            closed.extend(i);
            vec![None]
        }
        PhysicalPlan::Union { inputs, .. } if prefix || inputs.len() < 2 => {
            for input in inputs {
                let i = walk_pipelines(input, false, closed);
                closed.extend(i);
            }
            vec![None]
        }
        PhysicalPlan::Union { inputs, .. } => inputs
            .iter()
            .flat_map(|input| walk_pipelines(input, prefix, closed))
            .collect(),
        PhysicalPlan::Window(w) => {
            let i = walk_pipelines(&w.input, prefix, closed);
            closed.extend(i);
            if !w.partition_by.is_empty() || !w.order_by.is_empty() {
                // The sort ends the input's pipeline; the window's sink
                // reads the sorted rows.
                closed.push(None);
            }
            vec![None]
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Engine, EngineConfig};

    /// An engine with `t(x, y)`: x = 1 … 4000, y cycling over four words.
    fn engine() -> Arc<Engine> {
        let engine = Engine::new(EngineConfig {
            scheduler: stride_sched::SchedulerConfig {
                workers: 2,
                pin_workers: false,
                ..Default::default()
            },
            ..Default::default()
        });
        let values: Vec<String> = (1..=4000)
            .map(|x| format!("({x}, '{}')", ["a", "b", "c", "d"][x % 4]))
            .collect();
        engine
            .session()
            .execute(&format!(
                "create table t as select * from (values {}) as v(x, y)",
                values.join(", ")
            ))
            .unwrap();
        engine
    }

    fn physical(engine: &Arc<Engine>, sql: &str) -> PhysicalPlan {
        engine.session().plan_query(sql).unwrap()
    }

    #[test]
    fn shape_ignores_literals() {
        let engine = engine();
        let shape_of = |sql: &str| shape(&physical(&engine, sql));
        let a = "select y, sum(x * 2) from t where x < 100 and y = 'a' group by y";
        let b = "select y, sum(x * 3) from t where x < 2500 and y = 'c' group by y";
        assert_eq!(shape_of(a), shape_of(b));
        assert!(!shape_of(a).contains("100") && shape_of(a).contains("< NULL"));
        assert_ne!(
            PlanKey::exact(&physical(&engine, a)),
            PlanKey::exact(&physical(&engine, b))
        );
        // IN lists, LIKE patterns, dates, decimals and CASE literals too.
        let c = "select sum(case when y like 'a%' then x else 0 end) from t \
                 where x in (1, 2, 3) and cast(x as decimal(10, 2)) > 1.25 \
                 and date '1995-01-01' + interval '1' day > date '1994-12-31'";
        let d = "select sum(case when y like 'zz%' then x else 7 end) from t \
                 where x in (17, 2, 30) and cast(x as decimal(10, 2)) > 3.5 \
                 and date '1997-03-01' + interval '3' day > date '1996-02-29'";
        assert_eq!(shape_of(c), shape_of(d));
        // A different structure is a different shape: another column, another
        // operator, another number of IN-list items.
        assert_ne!(
            shape_of(a),
            shape_of("select y, sum(x * 2) from t where x > 100 and y = 'a' group by y")
        );
        assert_ne!(
            shape_of("select count(*) from t where x in (1, 2)"),
            shape_of("select count(*) from t where x in (1, 2, 3)")
        );
        // Column indices and types are not literals: @0 stays whatever
        // literal 0 is.
        let e = shape_of("select count(*) from t where x = 0");
        assert!(e.contains("@0 = NULL"), "{e}");
        assert_eq!(e, shape_of("select count(*) from t where x = 4"));
        let cast = |v: &str| {
            shape_of(&format!(
                "select sum(cast(x as decimal(10, 0)) + {v}) from t"
            ))
        };
        assert_eq!(cast("0"), cast("7"));
        // Columns named after an aggregate with literals lose their names.
        let agg = |w: &str| {
            shape_of(&format!(
                "select s * 2 from (select sum(case when y = '{w}' then x else 0 end) as s from t) v"
            ))
        };
        assert_eq!(agg("a"), agg("b"));
    }

    #[test]
    fn text_masking_respects_token_boundaries() {
        assert_eq!(mask_token("x@4 < 4", "4"), "x@4 < $");
        assert_eq!(mask_token("a = 14 OR b = 4", "4"), "a = 14 OR b = $");
        assert_eq!(mask_token("p LIKE %BRASS", "%BRASS"), "p LIKE $");
        assert_eq!(mask_token("[13, 31, 13]", "13"), "[$, 31, $]");
        assert_eq!(mask_token("x > 0.05", "5"), "x > 0.05");
        assert_eq!(mask_token("x > 0.05", "0.05"), "x > $");
        assert_eq!(mask_token("s = UNITED KI1", "UNITED KI1"), "s = $");
    }

    #[test]
    fn pipeline_weights_follow_the_compiler() {
        let engine = engine();
        for sql in [
            "select count(*) from t",
            "select y, sum(x) from t where x < 10 group by y order by y limit 2",
            "select a.y, count(*) from t a join t b on a.x = b.x group by a.y",
            "select count(*) from t a left join t b on a.x = b.x + 1",
            "select count(*) from t a where exists (select 1 from t b where b.x = a.x + 5)",
            "select count(*) from t a where not exists (select 1 from t b where b.x = a.x)",
            "select x from t where x < 3 union all select x from t where x > 3998",
            "select * from (values (1), (2)) as v(z) order by z",
        ] {
            let plan = physical(&engine, sql);
            let compiled = stride_exec::executor::explain_pipelines(&plan, 2).unwrap();
            let weights = pipeline_weights(&plan);
            assert_eq!(weights.len(), compiled.len(), "{sql}\n{compiled:?}");
            assert!(weights.iter().all(|&w| w >= 1.0));
        }
        // A scan pipeline weighs its table's rows.
        assert_eq!(
            pipeline_weights(&physical(&engine, "select x from t")),
            [4000.0]
        );
    }

    #[test]
    fn queries_get_estimates_by_mode() {
        let engine = engine();
        let run = |sql: &str| {
            let mut s = engine.session();
            s.query(sql).unwrap().stats
        };
        let wide = "select y, sum(x) from t where x < 3900 group by y";
        let narrow = "select y, sum(x) from t where x < 200 group by y";
        // Off: no estimate ever.
        engine.runtime().history().set_mode(EstimateMode::Off);
        run(wide);
        assert!(run(wide).estimated_cpu.is_none());
        // Plan: only the exact text repeats.
        engine.runtime().history().set_mode(EstimateMode::Plan);
        assert!(run(wide).estimated_cpu.is_none());
        assert!(run(wide).estimated_cpu.is_some());
        assert!(run(narrow).estimated_cpu.is_none());
        // Shape: another literal of a recorded shape has an estimate.
        engine.runtime().history().set_mode(EstimateMode::Shape);
        assert!(run(wide).estimated_cpu.is_none());
        assert!(run(narrow).estimated_cpu.is_some());
        // Instance: a cold start at once, then the recorded cost scaled by
        // the estimated rows, which the range on x narrows.
        engine.runtime().history().set_mode(EstimateMode::Instance);
        let first = run(wide);
        assert!(first.estimated_cpu.is_some(), "cold start");
        run(wide);
        let w = run(wide).estimated_cpu.unwrap();
        let n = run(narrow).estimated_cpu.unwrap();
        assert!(n < w, "narrow {n:?} < wide {w:?}");
        assert!(first.cpu_time > Duration::ZERO);
    }
}

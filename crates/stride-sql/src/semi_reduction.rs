//! Semi-join reduction of aggregates joined on their group keys (a
//! magic-set style rewrite).
//!
//! DataFusion decorrelates TPC-H Q17's `l_quantity < (select 0.2 *
//! avg(l_quantity) from lineitem where l_partkey = p_partkey)` into a join
//! with an aggregate of *all* of lineitem grouped by `l_partkey` (200 000
//! groups at SF 1), though only the ~2 000 parts that pass the outer filter
//! can match. Q20 likewise aggregates ~900 000 lineitem rows into
//! (partkey, suppkey) groups of which only the 'forest%' parts' matter.
//!
//! Where a join has equality keys `outer.k_i = agg.g_i`, one input is an
//! `Aggregate` whose `GROUP BY` holds every `g_i` as a plain column (seen
//! through projections, aliases and filters on the aggregate's output),
//! and the join keeps only aggregate rows that match — an inner join, a
//! left (right) join whose preserved side is the outer side, a semi join
//! whose kept side is the outer side — the aggregate's input is restricted
//! to the rows whose keys appear on the outer side: a semi join
//! `input ⋉ keys` below the aggregate. A filter on group keys commutes
//! with the aggregation, and a group whose keys appear on no outer row
//! matches nothing; NULL keys never match an equality (joins that match
//! NULL to NULL, null-aware joins, full, anti and mark joins are never
//! touched, nor is an aggregate on a preserved side).
//!
//! The key set is taken from the smallest subtree of the outer side that
//! produces the keys: each key column is traced down through projections,
//! aliases, filters and inner joins (where an inner join's equality lets a
//! key be read on the other side, the smaller side by estimate is taken).
//! Every subtree on that path produces a superset of the outer side's key
//! values, so the restriction never drops a group that matches. For Q17
//! that is the filtered `part` scan (not `lineitem ⋈ part`); for Q20,
//! `partsupp` restricted to the selected parts. The subtree runs twice
//! (the engine has no shared subplans), so it must be deterministic — only
//! scans without a row limit, filters, projections, aliases, joins,
//! aggregates, plain `DISTINCT`, unions and literal rows, no volatile
//! function, no subquery or outer reference — and the rewrite applies
//! only when, by the cardinality estimates of [`crate::lower`]:
//!
//! 1. the key subtree's rows are at most a quarter of the aggregate
//!    input's rows ([`KEY_ROWS_FRACTION`]): the semi join's hash table is
//!    small beside what it filters;
//! 2. the key subtree keeps at most a quarter of its key domain
//!    ([`KEY_DOMAIN_FRACTION`]): the restriction removes most groups (an
//!    unfiltered dimension would keep them all, for nothing);
//! 3. the rows its table scans read are at most twice the aggregate
//!    input's rows ([`SCANNED_ROWS_FACTOR`]): running it again costs a
//!    scan and a probe of a tiny hash table per row, where each removed
//!    aggregate input row saves a probe of a hash table with a group per
//!    distinct key.
//!
//! The rule runs once per execution on the bound plan (values and
//! snapshots in place), before join ordering, in the path both cached and
//! uncached plans take (`engine::bound_rules`).

use std::sync::Arc;

use datafusion_common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion_common::{Column, NullEquality};
use datafusion_expr::logical_plan::{Distinct, Join, SubqueryAlias};
use datafusion_expr::{Expr, JoinType, LogicalPlan, LogicalPlanBuilder};

use crate::error::Result;
use crate::lower::{estimate_parts, estimate_rows};

/// Rule 1: the key subtree's estimated rows over the aggregate input's.
pub const KEY_ROWS_FRACTION: f64 = 0.25;
/// Rule 2: the key subtree's estimated rows over its key domain.
pub const KEY_DOMAIN_FRACTION: f64 = 0.25;
/// Rule 3: the rows the key subtree's scans read over the aggregate
/// input's estimated rows.
pub const SCANNED_ROWS_FACTOR: f64 = 2.0;

/// The alias prefix of the key sets the rewrite adds.
const KEYS_ALIAS: &str = "__reduce_keys";

/// Restricts every eligible aggregate's input to the group keys its join
/// can match (see the module documentation).
pub fn reduce_aggregates(plan: LogicalPlan) -> Result<LogicalPlan> {
    let mut next_alias = 0usize;
    let reduced = plan.transform_up(|node| {
        Ok(match reduce_join(&node, &mut next_alias) {
            Some(reduced) => Transformed::yes(reduced),
            None => Transformed::no(node),
        })
    })?;
    Ok(reduced.data)
}

/// Which inputs of a join may hold an aggregate to reduce: those whose
/// unmatched rows the join drops.
fn reducible_sides(join: &Join) -> (bool, bool) {
    if join.null_equality != NullEquality::NullEqualsNothing || join.null_aware {
        return (false, false);
    }
    match join.join_type {
        JoinType::Inner => (true, true),
        JoinType::Left | JoinType::LeftSemi => (false, true),
        JoinType::Right | JoinType::RightSemi => (true, false),
        JoinType::Full
        | JoinType::LeftAnti
        | JoinType::RightAnti
        | JoinType::LeftMark
        | JoinType::RightMark => (false, false),
    }
}

/// The join with one aggregate input reduced, or `None`.
fn reduce_join(node: &LogicalPlan, next_alias: &mut usize) -> Option<LogicalPlan> {
    let LogicalPlan::Join(join) = node else {
        return None;
    };
    let (left_ok, right_ok) = reducible_sides(join);
    let columns = |pick: fn(&(Expr, Expr)) -> (&Expr, &Expr)| -> Vec<(Column, Column)> {
        join.on
            .iter()
            .filter_map(|pair| match pick(pair) {
                (Expr::Column(outer), Expr::Column(agg)) => Some((outer.clone(), agg.clone())),
                _ => None,
            })
            .collect()
    };
    if right_ok {
        let pairs = columns(|(l, r)| (l, r));
        if let Some(right) = reduce_side(&join.right, &join.left, &pairs, next_alias) {
            return rebuild_join(join, join.left.as_ref().clone(), right);
        }
    }
    if left_ok {
        let pairs = columns(|(l, r)| (r, l));
        if let Some(left) = reduce_side(&join.left, &join.right, &pairs, next_alias) {
            return rebuild_join(join, left, join.right.as_ref().clone());
        }
    }
    None
}

fn rebuild_join(join: &Join, left: LogicalPlan, right: LogicalPlan) -> Option<LogicalPlan> {
    Join::try_new(
        Arc::new(left),
        Arc::new(right),
        join.on.clone(),
        join.filter.clone(),
        join.join_type,
        join.join_constraint,
        join.null_equality,
        join.null_aware,
    )
    .ok()
    .map(LogicalPlan::Join)
}

/// `agg_side` with its aggregate's input restricted to the keys of
/// `outer`; `pairs` are (outer column, aggregate-side column).
fn reduce_side(
    agg_side: &LogicalPlan,
    outer: &LogicalPlan,
    pairs: &[(Column, Column)],
    next_alias: &mut usize,
) -> Option<LogicalPlan> {
    // The group columns (of the aggregate's input) the join keys read.
    let mut outer_keys = Vec::new();
    let mut group_keys = Vec::new();
    for (o, a) in pairs {
        if let Some(g) = group_column(agg_side, a) {
            outer_keys.push(o.clone());
            group_keys.push(g);
        }
    }
    if outer_keys.is_empty() {
        return None;
    }
    let aggregate_input = aggregate_of(agg_side)?.input.as_ref();
    let (keys_plan, key_columns) = key_source(outer, outer_keys);
    if !deterministic(&keys_plan) || !pays(&keys_plan, aggregate_input) {
        return None;
    }
    let alias = format!("{KEYS_ALIAS}_{}", *next_alias);
    *next_alias += 1;
    let names: Vec<String> = (0..key_columns.len()).map(|i| format!("k{i}")).collect();
    let projected: Vec<Expr> = key_columns
        .into_iter()
        .zip(&names)
        .map(|(c, name)| Expr::Column(c).alias(name))
        .collect();
    let keys = LogicalPlanBuilder::from(keys_plan)
        .project(projected)
        .ok()?
        .build()
        .ok()?;
    let keys = LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(Arc::new(keys), &alias).ok()?);
    let right_keys: Vec<Expr> = names
        .iter()
        .map(|n| Expr::Column(Column::new(Some(alias.as_str()), n)))
        .collect();
    let left_keys: Vec<Expr> = group_keys.into_iter().map(Expr::Column).collect();
    let restricted = LogicalPlanBuilder::from(aggregate_input.clone())
        .join_with_expr_keys(keys, JoinType::LeftSemi, (left_keys, right_keys), None)
        .ok()?
        .build()
        .ok()?;
    replace_aggregate_input(agg_side, restricted)
}

/// The first aggregate below a chain of projections, aliases and filters.
fn aggregate_of(plan: &LogicalPlan) -> Option<&datafusion_expr::logical_plan::Aggregate> {
    match plan {
        LogicalPlan::Aggregate(a) => Some(a),
        LogicalPlan::Projection(p) => aggregate_of(&p.input),
        LogicalPlan::SubqueryAlias(s) => aggregate_of(&s.input),
        LogicalPlan::Filter(f) => aggregate_of(&f.input),
        _ => None,
    }
}

/// The aggregate input's column that `column` of `plan` is, when `column`
/// is (through projections, aliases and filters) a plain-column group key
/// of the aggregate below.
fn group_column(plan: &LogicalPlan, column: &Column) -> Option<Column> {
    match plan {
        LogicalPlan::Aggregate(a) => {
            if a.group_expr
                .iter()
                .any(|e| matches!(e, Expr::GroupingSet(_)))
            {
                return None;
            }
            let i = a.schema.index_of_column(column).ok()?;
            match a.group_expr.get(i)? {
                Expr::Column(c) => Some(c.clone()),
                _ => None,
            }
        }
        LogicalPlan::Projection(p) => group_column(&p.input, &projected_column(p, column)?),
        LogicalPlan::SubqueryAlias(s) => group_column(&s.input, &aliased_column(s, column)?),
        LogicalPlan::Filter(f) => group_column(&f.input, column),
        _ => None,
    }
}

/// The input column a projection's output `column` is a plain copy of.
fn projected_column(
    p: &datafusion_expr::logical_plan::Projection,
    column: &Column,
) -> Option<Column> {
    let i = p.schema.index_of_column(column).ok()?;
    let mut e = p.expr.get(i)?;
    while let Expr::Alias(alias) = e {
        e = alias.expr.as_ref();
    }
    match e {
        Expr::Column(c) => Some(c.clone()),
        _ => None,
    }
}

/// The input column behind an alias's output `column`.
fn aliased_column(s: &SubqueryAlias, column: &Column) -> Option<Column> {
    let i = s.schema.index_of_column(column).ok()?;
    s.input.schema().columns().get(i).cloned()
}

/// `plan` (a chain of projections, aliases and filters over an aggregate)
/// with the aggregate's input replaced.
fn replace_aggregate_input(plan: &LogicalPlan, input: LogicalPlan) -> Option<LogicalPlan> {
    let child = match plan {
        LogicalPlan::Aggregate(_) => input,
        LogicalPlan::Projection(p) => replace_aggregate_input(&p.input, input)?,
        LogicalPlan::SubqueryAlias(s) => replace_aggregate_input(&s.input, input)?,
        LogicalPlan::Filter(f) => replace_aggregate_input(&f.input, input)?,
        _ => return None,
    };
    plan.with_new_exprs(plan.expressions(), vec![child]).ok()
}

/// The smallest subtree of `outer` that produces `keys`, and the keys'
/// columns in it.
fn key_source(outer: &LogicalPlan, keys: Vec<Column>) -> (LogicalPlan, Vec<Column>) {
    match descend(outer, &keys) {
        Some(found) => found,
        None => (outer.clone(), keys),
    }
}

/// The keys' source strictly below an inner join under `plan`, or `None`
/// when no inner join on the way lets the trace go deeper.
fn descend(plan: &LogicalPlan, keys: &[Column]) -> Option<(LogicalPlan, Vec<Column>)> {
    match plan {
        LogicalPlan::Projection(p) => {
            let inner = keys
                .iter()
                .map(|k| projected_column(p, k))
                .collect::<Option<Vec<_>>>()?;
            descend(&p.input, &inner)
        }
        LogicalPlan::SubqueryAlias(s) => {
            let inner = keys
                .iter()
                .map(|k| aliased_column(s, k))
                .collect::<Option<Vec<_>>>()?;
            descend(&s.input, &inner)
        }
        LogicalPlan::Filter(f) => descend(&f.input, keys),
        LogicalPlan::Join(j) if j.join_type == JoinType::Inner => {
            let left = side_keys(j, keys, true);
            let right = side_keys(j, keys, false);
            let (side, side_keys) = match (left, right) {
                (Some(l), Some(r)) => {
                    if estimate_rows(&j.left) <= estimate_rows(&j.right) {
                        (j.left.as_ref(), l)
                    } else {
                        (j.right.as_ref(), r)
                    }
                }
                (Some(l), None) => (j.left.as_ref(), l),
                (None, Some(r)) => (j.right.as_ref(), r),
                (None, None) => return None,
            };
            Some(key_source(side, side_keys))
        }
        _ => None,
    }
}

/// The keys as columns of one input of an inner join: each key is a column
/// of that input, or equal (by one of the join's equalities) to one.
fn side_keys(j: &Join, keys: &[Column], left: bool) -> Option<Vec<Column>> {
    let schema = if left {
        j.left.schema()
    } else {
        j.right.schema()
    };
    keys.iter()
        .map(|k| {
            if schema.has_column(k) {
                return Some(k.clone());
            }
            j.on.iter().find_map(|(l, r)| match (l, r) {
                (Expr::Column(lc), Expr::Column(rc)) if left && rc == k => Some(lc.clone()),
                (Expr::Column(lc), Expr::Column(rc)) if !left && lc == k => Some(rc.clone()),
                _ => None,
            })
        })
        .collect::<Option<Vec<_>>>()
        .filter(|cols| cols.iter().all(|c| schema.has_column(c)))
}

/// Whether running `plan` twice gives the same rows: only node kinds whose
/// result does not depend on the run, and no volatile function, subquery
/// or outer reference.
fn deterministic(plan: &LogicalPlan) -> bool {
    let mut ok = true;
    let _ = plan.apply(|node| {
        let kind_ok = match node {
            LogicalPlan::TableScan(scan) => scan.fetch.is_none(),
            LogicalPlan::Distinct(d) => matches!(d, Distinct::All(_)),
            LogicalPlan::Filter(_)
            | LogicalPlan::Projection(_)
            | LogicalPlan::SubqueryAlias(_)
            | LogicalPlan::Join(_)
            | LogicalPlan::Aggregate(_)
            | LogicalPlan::Union(_)
            | LogicalPlan::Values(_)
            | LogicalPlan::EmptyRelation(_) => true,
            _ => false,
        };
        let exprs_ok = node.expressions().iter().all(|e| {
            !e.is_volatile()
                && !e.contains_outer()
                && !e
                    .exists(|x| {
                        Ok(matches!(
                            x,
                            Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
                        ))
                    })
                    .unwrap_or(true)
        });
        ok = kind_ok && exprs_ok;
        Ok(if ok {
            TreeNodeRecursion::Continue
        } else {
            TreeNodeRecursion::Stop
        })
    });
    ok
}

/// The cost rule (module documentation, rules 1–3).
fn pays(keys: &LogicalPlan, aggregate_input: &LogicalPlan) -> bool {
    let input_rows = estimate_rows(aggregate_input);
    let (key_rows, key_domain) = estimate_parts(keys);
    key_rows <= KEY_ROWS_FRACTION * input_rows
        && key_rows <= KEY_DOMAIN_FRACTION * key_domain.max(1.0)
        && scanned_rows(keys) <= SCANNED_ROWS_FACTOR * input_rows
}

/// The rows the table scans of `plan` read.
fn scanned_rows(plan: &LogicalPlan) -> f64 {
    let mut rows = 0.0;
    let _ = plan.apply(|node| {
        if let LogicalPlan::TableScan(_) = node {
            rows += estimate_rows(node);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    rows
}

//! Join ordering for clusters of inner equi-joins.
//!
//! DataFusion's logical optimizer keeps the FROM order, so a dimension's
//! filter (TPC-H Q7's `n_name = 'FRANCE'`) is applied only after the fact
//! table was joined with everything in between. Stride reorders each maximal
//! cluster of inner equi-joins (seeing through column-only projections):
//!
//! 1. the leaf with the most estimated rows is the root (the fact table);
//! 2. the join graph (leaves connected by equality predicates) is walked
//!    breadth-first from the root, giving every other leaf a parent;
//! 3. each subtree is joined bottom-up: a leaf joins its children's subtrees,
//!    most selective first (smallest estimated fraction of the child's key
//!    domain), so dimension filters reduce a branch before the fact table
//!    probes it.
//!
//! Before that, a semi or anti join on top of a cluster whose keys read only
//! one leaf is pushed onto that leaf ([`push_semi_join`]).
//!
//! Predicates that close cycles become extra join keys, and join filters are
//! attached to the first join that covers their columns. After every join only
//! the columns needed later are kept; a final projection restores the
//! cluster's original column order, so the plan above is unchanged. Any case
//! the rewrite does not handle (a leaf not connected by equalities, ambiguous
//! columns, more than 64 leaves) keeps the original cluster.

use std::collections::{HashSet, VecDeque};

use datafusion_common::tree_node::{Transformed, TreeNode};
use datafusion_common::{Column, DFSchema, NullEquality};
use datafusion_expr::utils::{conjunction, split_conjunction_owned};
use datafusion_expr::{Expr, JoinType, LogicalPlan, LogicalPlanBuilder};

use crate::error::Result;
use crate::lower::estimate_parts;

/// Reorders every inner-join cluster of `plan` with at least three leaves.
pub fn reorder_joins(plan: LogicalPlan) -> Result<LogicalPlan> {
    Ok(reorder(plan)?)
}

fn reorder(plan: LogicalPlan) -> datafusion_common::Result<LogicalPlan> {
    let plan = match push_semi_join(&plan) {
        Some(pushed) => pushed,
        None => plan,
    };
    if is_inner_equi_join(&plan) {
        let mut cluster = Cluster::default();
        flatten(&plan, &mut cluster);
        if cluster.leaves.len() >= 3 && cluster.leaves.len() <= 64 {
            let leaves = cluster
                .leaves
                .iter()
                .map(|l| reorder(l.clone()))
                .collect::<datafusion_common::Result<Vec<_>>>()?;
            if let Some(reordered) =
                Reorder::new(leaves, cluster.preds, cluster.filters, plan.schema())
                    .and_then(|r| r.build())
            {
                return Ok(reordered);
            }
        }
    }
    Ok(plan
        .map_children(|c| reorder(c).map(Transformed::yes))?
        .data)
}

/// `X ⋉ S`, where `X` is an inner-join cluster and the semi join's keys and
/// filter (on the `X` side) only read columns of one leaf `L` of `X`, equals
/// `X` with `L` replaced by `L ⋉ S`: the semi join only removes rows of `L`.
/// Pushing it down pays when `L` is smaller than `X` (fewer rows probe `S`)
/// and when `S` is selective (TPC-H Q18: the large-order filter shrinks
/// orders before lineitem is joined). Returns `None` when the rule does not
/// apply.
fn push_semi_join(plan: &LogicalPlan) -> Option<LogicalPlan> {
    let LogicalPlan::Join(semi) = plan else {
        return None;
    };
    if !matches!(semi.join_type, JoinType::LeftSemi | JoinType::LeftAnti) || semi.null_aware {
        return None;
    }
    let cluster_top = match semi.left.as_ref() {
        LogicalPlan::Projection(p) if is_inner_equi_join(&p.input) => p.input.as_ref(),
        other if is_inner_equi_join(other) => other,
        _ => return None,
    };
    let mut cluster = Cluster::default();
    flatten(cluster_top, &mut cluster);
    // Columns of the X side the semi join reads.
    let left_schema = semi.left.schema();
    let mut cols: Vec<&Column> = semi.on.iter().flat_map(|(l, _)| l.column_refs()).collect();
    if let Some(f) = &semi.filter {
        cols.extend(
            f.column_refs()
                .into_iter()
                .filter(|c| left_schema.has_column(c)),
        );
    }
    let leaf = cluster
        .leaves
        .iter()
        .find(|l| cols.iter().all(|c| l.schema().has_column(c)))?;
    let (leaf_rows, _) = estimate_parts(leaf);
    let (cluster_rows, _) = estimate_parts(&semi.left);
    if leaf_rows > cluster_rows {
        return None;
    }
    let pushed = LogicalPlan::Join(
        datafusion_expr::logical_plan::Join::try_new(
            std::sync::Arc::new(leaf.clone()),
            semi.right.clone(),
            semi.on.clone(),
            semi.filter.clone(),
            semi.join_type,
            semi.join_constraint,
            semi.null_equality,
            false,
        )
        .ok()?,
    );
    let mut replaced = false;
    let rewritten = semi
        .left
        .as_ref()
        .clone()
        .transform_down(|node| {
            if !replaced && &node == leaf {
                replaced = true;
                Ok(Transformed::new(
                    pushed.clone(),
                    true,
                    datafusion_common::tree_node::TreeNodeRecursion::Jump,
                ))
            } else {
                Ok(Transformed::no(node))
            }
        })
        .ok()?
        .data;
    replaced.then_some(rewritten)
}

fn is_inner_equi_join(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Join(j)
        if j.join_type == JoinType::Inner
            && !j.on.is_empty()
            && j.null_equality == NullEquality::NullEqualsNothing)
}

#[derive(Default)]
struct Cluster {
    leaves: Vec<LogicalPlan>,
    preds: Vec<(Expr, Expr)>,
    filters: Vec<Expr>,
}

fn flatten(plan: &LogicalPlan, cluster: &mut Cluster) {
    match plan {
        LogicalPlan::Join(j) if is_inner_equi_join(plan) => {
            flatten(&j.left, cluster);
            flatten(&j.right, cluster);
            cluster.preds.extend(j.on.iter().cloned());
            if let Some(f) = &j.filter {
                cluster.filters.extend(split_conjunction_owned(f.clone()));
            }
        }
        // A projection that only selects columns between two joins prunes
        // columns; the rewrite prunes by itself.
        LogicalPlan::Projection(p)
            if is_inner_equi_join(&p.input)
                && p.expr.iter().all(|e| matches!(e, Expr::Column(_))) =>
        {
            flatten(&p.input, cluster)
        }
        other => cluster.leaves.push(other.clone()),
    }
}

/// The leaves (bitmask) an expression's columns come from; `None` when a
/// column is found in no leaf or in several.
fn leaf_mask(expr: &Expr, schemas: &[&DFSchema]) -> Option<u64> {
    let mut mask = 0u64;
    for col in expr.column_refs() {
        let owners: Vec<usize> = (0..schemas.len())
            .filter(|&i| schemas[i].has_column(col))
            .collect();
        match owners.as_slice() {
            [one] => mask |= 1 << one,
            _ => return None,
        }
    }
    Some(mask)
}

struct Reorder {
    leaves: Vec<Option<LogicalPlan>>,
    /// Equality predicates with the leaf masks of their two sides.
    preds: Vec<(Expr, Expr, u64, u64)>,
    filters: Vec<(Expr, u64)>,
    consumed_preds: Vec<bool>,
    consumed_filters: Vec<bool>,
    /// Columns of the cluster's output, in order.
    output: Vec<Column>,
    /// Estimated (rows, key domain) of each leaf.
    estimates: Vec<(f64, f64)>,
}

impl Reorder {
    fn new(
        leaves: Vec<LogicalPlan>,
        preds: Vec<(Expr, Expr)>,
        filters: Vec<Expr>,
        schema: &DFSchema,
    ) -> Option<Self> {
        let schemas: Vec<&DFSchema> = leaves.iter().map(|l| l.schema().as_ref()).collect();
        let mut masked_preds = Vec::new();
        let mut masked_filters = Vec::new();
        for (a, b) in preds {
            let (ma, mb) = (leaf_mask(&a, &schemas)?, leaf_mask(&b, &schemas)?);
            if ma.count_ones() == 1 && mb.count_ones() == 1 && ma != mb {
                masked_preds.push((a, b, ma, mb));
            } else {
                let m = ma | mb;
                masked_filters.push((a.eq(b), m));
            }
        }
        for f in filters {
            let m = leaf_mask(&f, &schemas)?;
            masked_filters.push((f, m));
        }
        let estimates = leaves.iter().map(estimate_parts).collect();
        Some(Reorder {
            consumed_preds: vec![false; masked_preds.len()],
            consumed_filters: vec![false; masked_filters.len()],
            leaves: leaves.into_iter().map(Some).collect(),
            preds: masked_preds,
            filters: masked_filters,
            output: schema.columns(),
            estimates,
        })
    }

    fn build(mut self) -> Option<LogicalPlan> {
        let n = self.leaves.len();
        let root = (0..n).max_by(|&a, &b| self.estimates[a].0.total_cmp(&self.estimates[b].0))?;
        // Breadth-first spanning tree of the join graph.
        let mut parent = vec![usize::MAX; n];
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut seen = 1u64 << root;
        let mut queue = VecDeque::from([root]);
        while let Some(v) = queue.pop_front() {
            for (_, _, ma, mb) in &self.preds {
                let other = if *ma == 1 << v {
                    *mb
                } else if *mb == 1 << v {
                    *ma
                } else {
                    continue;
                };
                if seen & other == 0 {
                    let w = other.trailing_zeros() as usize;
                    seen |= other;
                    parent[w] = v;
                    children[v].push(w);
                    queue.push_back(w);
                }
            }
        }
        if seen.count_ones() as usize != n {
            return None; // some leaf is not connected by an equality
        }
        let (plan, _) = self.subtree(root, &children)?;
        let exprs: Vec<Expr> = self.output.iter().cloned().map(Expr::Column).collect();
        LogicalPlanBuilder::from(plan)
            .project(exprs)
            .ok()?
            .build()
            .ok()
    }

    /// Joins leaf `v` with its children's subtrees; returns the plan and its leaf mask.
    fn subtree(&mut self, v: usize, children: &[Vec<usize>]) -> Option<(LogicalPlan, u64)> {
        let mut branches = Vec::new();
        for &c in &children[v] {
            let (plan, mask) = self.subtree(c, children)?;
            let (rows, _) = estimate_parts(&plan);
            let fraction = rows / self.estimates[c].1.max(1.0);
            branches.push((fraction, plan, mask));
        }
        branches.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut acc = self.leaves[v].take()?;
        let mut mask = 1u64 << v;
        for (_, plan, m) in branches {
            acc = self.join(acc, mask, plan, m)?;
            mask |= m;
            acc = self.prune(acc)?;
        }
        Some((acc, mask))
    }

    fn join(
        &mut self,
        left: LogicalPlan,
        lm: u64,
        right: LogicalPlan,
        rm: u64,
    ) -> Option<LogicalPlan> {
        let (mut lk, mut rk) = (Vec::new(), Vec::new());
        for (i, (a, b, ma, mb)) in self.preds.iter().enumerate() {
            if self.consumed_preds[i] {
                continue;
            }
            if ma & lm != 0 && mb & rm != 0 {
                lk.push(a.clone());
                rk.push(b.clone());
            } else if ma & rm != 0 && mb & lm != 0 {
                lk.push(b.clone());
                rk.push(a.clone());
            } else {
                continue;
            }
            self.consumed_preds[i] = true;
        }
        if lk.is_empty() {
            return None;
        }
        let both = lm | rm;
        let mut filters = Vec::new();
        for (i, (f, m)) in self.filters.iter().enumerate() {
            if !self.consumed_filters[i] && m & !both == 0 {
                filters.push(f.clone());
                self.consumed_filters[i] = true;
            }
        }
        LogicalPlanBuilder::from(left)
            .join_with_expr_keys(right, JoinType::Inner, (lk, rk), conjunction(filters))
            .ok()?
            .build()
            .ok()
    }

    /// Keeps only the columns the cluster's output or a pending predicate needs.
    fn prune(&self, plan: LogicalPlan) -> Option<LogicalPlan> {
        let mut needed: HashSet<&Column> = self.output.iter().collect();
        for (i, (a, b, _, _)) in self.preds.iter().enumerate() {
            if !self.consumed_preds[i] {
                needed.extend(a.column_refs());
                needed.extend(b.column_refs());
            }
        }
        for (i, (f, _)) in self.filters.iter().enumerate() {
            if !self.consumed_filters[i] {
                needed.extend(f.column_refs());
            }
        }
        let keep: Vec<Expr> = plan
            .schema()
            .columns()
            .into_iter()
            .filter(|c| needed.contains(c))
            .map(Expr::Column)
            .collect();
        if keep.len() == plan.schema().fields().len() {
            return Some(plan);
        }
        LogicalPlanBuilder::from(plan)
            .project(keep)
            .ok()?
            .build()
            .ok()
    }
}

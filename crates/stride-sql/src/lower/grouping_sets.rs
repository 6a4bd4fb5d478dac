//! Lowering `GROUP BY GROUPING SETS / ROLLUP / CUBE`.
//!
//! DataFusion plans them as an `Aggregate` whose only group expression is
//! an `Expr::GroupingSet`; its output is the distinct grouping expressions
//! (nullable) ++ `__grouping_id` ++ the aggregates, and its analyzer has
//! rewritten `GROUPING(..)` into bit arithmetic on `__grouping_id` above
//! the aggregate. Stride lowers it to
//!
//! ```text
//!   Aggregate  group = keys ++ grouping id [++ ordinal]   (the parallel hash aggregate)
//!     GroupingSets  input ++ keys ++ grouping id ++ ordinal ++ real, each row once per set
//!       input
//! ```
//!
//! and, when some set repeats another's mask, a projection that drops the
//! ordinal. Aggregates ignore the rows whose `real` is false (the one row
//! per set without keys that makes a grand total exist for empty input).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};
use datafusion_expr::logical_plan::Aggregate;
use datafusion_expr::{Expr, GroupingSet as LogicalGroupingSet, Operator};
use datafusion_physical_expr::expressions::{BinaryExpr, Column};
use stride_exec::plan::{ExprRef, GroupingSet};
use stride_exec::PhysicalPlan;

use super::{arrow_schema, unsupported, Lowerer};
use crate::error::Result;

/// PostgreSQL's limit on the grouping sets of one query level.
const MAX_GROUPING_SETS: usize = 4096;

/// The grouping sets of `set`, as the positions of their keys in `keys`
/// (the set's distinct expressions).
fn member_lists(set: &LogicalGroupingSet, keys: &[&Expr]) -> Result<Vec<Vec<usize>>> {
    let position = |e: &Expr| keys.iter().position(|k| *k == e);
    Ok(match set {
        LogicalGroupingSet::Rollup(exprs) => {
            let positions: Vec<usize> = exprs.iter().filter_map(position).collect();
            (0..=positions.len())
                .map(|i| positions[..i].to_vec())
                .collect()
        }
        LogicalGroupingSet::Cube(exprs) => {
            let positions: Vec<usize> = exprs.iter().filter_map(position).collect();
            if positions.len() > MAX_GROUPING_SETS.trailing_zeros() as usize {
                return Err(unsupported(format!(
                    "CUBE of {} expressions (more than {MAX_GROUPING_SETS} grouping sets)",
                    positions.len()
                )));
            }
            (0..1usize << positions.len())
                .map(|bits| {
                    positions
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| bits & (1 << j) != 0)
                        .map(|(_, &p)| p)
                        .collect()
                })
                .collect()
        }
        LogicalGroupingSet::GroupingSets(sets) => sets
            .iter()
            .map(|s| s.iter().filter_map(position).collect())
            .collect(),
    })
}

/// Each set's mask of absent keys (bit `n-1-i` for key `i`) and its
/// ordinal among the sets with the same mask.
fn masks(members: &[Vec<usize>], keys: usize) -> Vec<GroupingSet> {
    let mut sets: Vec<GroupingSet> = Vec::with_capacity(members.len());
    for m in members {
        let present = m.iter().fold(0u64, |acc, &i| acc | 1 << (keys - 1 - i));
        let mask = ((1u64 << keys) - 1) & !present;
        let ordinal = sets.iter().filter(|s| s.mask == mask).count() as u32;
        sets.push(GroupingSet { mask, ordinal });
    }
    sets
}

fn column(schema: &Schema, index: usize) -> ExprRef {
    Arc::new(Column::new(schema.field(index).name(), index))
}

impl Lowerer {
    /// Lowers an aggregate over grouping sets (see the module docs).
    pub(super) fn grouping_sets(
        &self,
        agg: &Aggregate,
        set: &LogicalGroupingSet,
    ) -> Result<PhysicalPlan> {
        let input_schema = agg.input.schema();
        let distinct = set.distinct_expr();
        let n = distinct.len();
        if n >= 64 {
            return Err(unsupported(format!(
                "{n} grouping expressions (at most 63)"
            )));
        }
        let members = member_lists(set, &distinct)?;
        if members.len() > MAX_GROUPING_SETS {
            return Err(unsupported(format!(
                "more than {MAX_GROUPING_SETS} grouping sets"
            )));
        }
        let sets = masks(&members, n);
        let keys = distinct
            .iter()
            .map(|e| self.expr(e, input_schema))
            .collect::<Result<Vec<_>>>()?;

        // input ++ keys ++ grouping id ++ ordinal ++ real
        let out = agg.schema.as_arrow();
        let width = input_schema.fields().len();
        let mut fields: Vec<Field> = input_schema
            .as_arrow()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.extend((0..=n).map(|i| out.field(i).clone().with_nullable(true)));
        fields.push(Field::new("__grouping_ordinal", DataType::UInt32, false));
        fields.push(Field::new("__grouping_real", DataType::Boolean, false));
        let expanded = Arc::new(Schema::new(fields));

        let repeated = sets.iter().any(|s| s.ordinal > 0);
        let grand_total = sets.iter().any(|s| s.mask == (1u64 << n) - 1);
        let mut group_by: Vec<ExprRef> =
            (width..=width + n).map(|i| column(&expanded, i)).collect();
        if repeated {
            group_by.push(column(&expanded, width + n + 1));
        }
        let mut aggregates = self.aggregate_specs(agg)?;
        if grand_total {
            let real = column(&expanded, width + n + 2);
            for a in &mut aggregates {
                a.filter = Some(match a.filter.take() {
                    Some(f) => Arc::new(BinaryExpr::new(real.clone(), Operator::And, f)),
                    None => real.clone(),
                });
            }
        }

        // The aggregate's output: keys ++ grouping id [++ ordinal] ++ aggregates.
        let mut agg_fields: Vec<Field> = out.fields().iter().map(|f| f.as_ref().clone()).collect();
        if repeated {
            agg_fields.insert(
                n + 1,
                Field::new("__grouping_ordinal", DataType::UInt32, false),
            );
        }
        let agg_schema = Arc::new(Schema::new(agg_fields));
        let aggregate = PhysicalPlan::Aggregate {
            input: Box::new(PhysicalPlan::GroupingSets {
                input: Box::new(self.lower(&agg.input)?),
                keys,
                sets,
                schema: expanded,
            }),
            group_by,
            aggregates,
            schema: agg_schema.clone(),
        };
        if !repeated {
            return Ok(aggregate);
        }
        let exprs = (0..agg_schema.fields().len())
            .filter(|&i| i != n + 1)
            .map(|i| column(&agg_schema, i))
            .collect();
        Ok(PhysicalPlan::Projection {
            input: Box::new(aggregate),
            exprs,
            schema: arrow_schema(&agg.schema),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_follow_postgres_bit_order_and_number_repeats() {
        // GROUPING SETS ((a, b), (a), (), (a), (b, a)) over keys a, b.
        let sets = masks(&[vec![0, 1], vec![0], vec![], vec![0], vec![1, 0]], 2);
        let got: Vec<(u64, u32)> = sets.iter().map(|s| (s.mask, s.ordinal)).collect();
        assert_eq!(
            got,
            vec![(0b00, 0), (0b01, 0), (0b11, 0), (0b01, 1), (0b00, 1)]
        );
    }
}

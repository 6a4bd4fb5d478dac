//! Lowering DataFusion's `Window` nodes to Stride's window operator.
//!
//! A logical `Window` node may hold functions over different windows
//! (DataFusion groups them by their sort keys, so `PARTITION BY a ORDER BY
//! b` and `ORDER BY a, b` can share a node). Stride's window node needs one
//! PARTITION BY and ORDER BY for all its functions, so the functions are
//! grouped by (PARTITION BY, ORDER BY), one physical node per group,
//! stacked: each node appends its functions' columns after its input's. A
//! projection restores the logical column order where the stacking
//! changed it.
//!
//! Refused, by name: `GROUPS` frames, `IGNORE NULLS`, `DISTINCT` and
//! `FILTER` on window aggregates, RANGE offsets over a non-numeric ORDER
//! BY key.

use std::sync::Arc;

use arrow::compute::SortOptions;
use arrow::datatypes::{Field, Schema};
use datafusion_common::DFSchema;
use datafusion_expr::expr::{WindowFunction, WindowFunctionParams};
use datafusion_expr::logical_plan::Window;
use datafusion_expr::{
    Expr, SortExpr, WindowFrame, WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition,
};
use datafusion_physical_expr::aggregate::AggregateExprBuilder;
use datafusion_physical_expr::expressions::Column;
use stride_exec::plan::{
    ExprRef, FrameBound, FrameUnits, SortKey, WindowFrameSpec, WindowFunctionSpec, WindowKind,
    WindowPlan,
};
use stride_exec::PhysicalPlan;

use crate::error::{Result, SqlError};
use crate::lower::{arrow_schema, unsupported, Lowerer};

/// The window of a group of functions.
struct Group<'a> {
    partition_by: &'a [Expr],
    order_by: &'a [SortExpr],
    /// (index in the logical node, the function).
    functions: Vec<(usize, &'a WindowFunction)>,
}

fn window_function(e: &Expr) -> Result<&WindowFunction> {
    match e {
        Expr::WindowFunction(f) => Ok(f),
        Expr::Alias(a) => window_function(&a.expr),
        other => Err(SqlError::Internal(format!(
            "window node holds a non-window expression: {other}"
        ))),
    }
}

fn bound(b: &WindowFrameBound) -> FrameBound {
    match b {
        WindowFrameBound::Preceding(v) if v.is_null() => FrameBound::UnboundedPreceding,
        WindowFrameBound::Preceding(v) => FrameBound::Preceding(v.clone()),
        WindowFrameBound::CurrentRow => FrameBound::CurrentRow,
        WindowFrameBound::Following(v) if v.is_null() => FrameBound::UnboundedFollowing,
        WindowFrameBound::Following(v) => FrameBound::Following(v.clone()),
    }
}

fn frame(f: &WindowFrame) -> Result<WindowFrameSpec> {
    let units = match f.units {
        WindowFrameUnits::Rows => FrameUnits::Rows,
        WindowFrameUnits::Range => FrameUnits::Range,
        WindowFrameUnits::Groups => return Err(unsupported("window frames in GROUPS mode")),
    };
    Ok(WindowFrameSpec {
        units,
        start: bound(&f.start_bound),
        end: bound(&f.end_bound),
    })
}

fn has_offset(f: &WindowFrameSpec) -> bool {
    [&f.start, &f.end]
        .iter()
        .any(|b| matches!(b, FrameBound::Preceding(_) | FrameBound::Following(_)))
}

impl Lowerer {
    pub(crate) fn window(&self, w: &Window) -> Result<PhysicalPlan> {
        let input_schema = w.input.schema();
        let input_len = input_schema.fields().len();
        let mut groups: Vec<Group<'_>> = Vec::new();
        for (i, e) in w.window_expr.iter().enumerate() {
            let f = window_function(e)?;
            let WindowFunctionParams {
                partition_by,
                order_by,
                ..
            } = &f.params;
            let same = |g: &&mut Group<'_>| {
                g.partition_by == partition_by.as_slice() && g.order_by == order_by.as_slice()
            };
            match groups.iter_mut().find(same) {
                Some(g) => g.functions.push((i, f)),
                None => groups.push(Group {
                    partition_by,
                    order_by,
                    functions: vec![(i, f)],
                }),
            }
        }
        let mut plan = self.lower(&w.input)?;
        // Where each logical window column ends up in the stacked output.
        let mut placed = vec![0; w.window_expr.len()];
        let mut fields: Vec<Field> = input_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        for g in &groups {
            let partition_by = g
                .partition_by
                .iter()
                .map(|e| self.expr(e, input_schema))
                .collect::<Result<Vec<_>>>()?;
            let order_by = g
                .order_by
                .iter()
                .map(|s| {
                    Ok(SortKey {
                        expr: self.expr(&s.expr, input_schema)?,
                        options: SortOptions {
                            descending: !s.asc,
                            nulls_first: s.nulls_first,
                        },
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let mut functions = Vec::with_capacity(g.functions.len());
            for &(i, f) in &g.functions {
                let field = w.schema.field(input_len + i).as_ref().clone();
                functions.push(self.window_spec(f, input_schema, &field, &order_by)?);
                placed[i] = fields.len();
                fields.push(field);
            }
            plan = PhysicalPlan::Window(Box::new(WindowPlan {
                input: plan,
                partition_by,
                order_by,
                functions,
                schema: Arc::new(Schema::new(fields.clone())),
            }));
        }
        let in_order = placed.iter().enumerate().all(|(i, &p)| p == input_len + i);
        if in_order {
            return Ok(plan);
        }
        let exprs: Vec<ExprRef> = (0..input_len)
            .chain(placed.iter().copied())
            .map(|i| Arc::new(Column::new(fields[i].name(), i)) as ExprRef)
            .collect();
        Ok(PhysicalPlan::Projection {
            input: Box::new(plan),
            exprs,
            schema: arrow_schema(&w.schema),
        })
    }

    /// One window function of a node whose ORDER BY is `order_by`.
    fn window_spec(
        &self,
        f: &WindowFunction,
        input_schema: &DFSchema,
        field: &Field,
        order_by: &[SortKey],
    ) -> Result<WindowFunctionSpec> {
        let p = &f.params;
        if p.null_treatment
            .is_some_and(|t| t == datafusion_expr::expr::NullTreatment::IgnoreNulls)
        {
            return Err(unsupported("IGNORE NULLS in window functions"));
        }
        if p.distinct {
            return Err(unsupported("DISTINCT in window functions"));
        }
        if p.filter.is_some() {
            return Err(unsupported("FILTER in window functions"));
        }
        let frame = frame(&p.window_frame)?;
        if frame.units == FrameUnits::Range && has_offset(&frame) {
            let numeric = order_by.first().is_some_and(|k| {
                k.expr
                    .data_type(input_schema.as_arrow())
                    .is_ok_and(|t| t.is_numeric())
            });
            if order_by.len() != 1 || !numeric {
                return Err(unsupported(
                    "RANGE frame offsets need exactly one numeric ORDER BY key",
                ));
            }
        }
        // `count(*) OVER (…)` reaches the plan with its wildcard.
        #[allow(deprecated)]
        let args = p
            .args
            .iter()
            .map(|a| match a {
                Expr::Wildcard { .. } => self.expr(&datafusion_expr::lit(1i64), input_schema),
                a => self.expr(a, input_schema),
            })
            .collect::<Result<Vec<_>>>()?;
        let (kind, args) = match &f.fun {
            WindowFunctionDefinition::WindowUDF(udf) => {
                let kind = crate::window_functions::window_kind(udf.name())
                    .ok_or_else(|| unsupported(format!("window function {}", udf.name())))?;
                (kind, args)
            }
            WindowFunctionDefinition::AggregateUDF(udf) => {
                let aggregate = AggregateExprBuilder::new(udf.clone(), args)
                    .schema(Arc::new(input_schema.as_arrow().clone()))
                    .alias(field.name())
                    .build()?;
                let args = aggregate.expressions();
                (WindowKind::Aggregate(Arc::new(aggregate)), args)
            }
        };
        Ok(WindowFunctionSpec {
            kind,
            args,
            frame,
            data_type: field.data_type().clone(),
            name: f.fun.name().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{DataType, Int64Type};

    use crate::{Engine, EngineConfig};

    #[test]
    fn functions_over_two_windows_are_stacked_then_put_back_in_order() {
        let engine = Engine::new(EngineConfig {
            scheduler: stride_sched::SchedulerConfig {
                workers: 2,
                pin_workers: false,
                ..Default::default()
            },
            ..Default::default()
        });
        let mut s = engine.session();
        s.execute("CREATE TABLE t (a INT, b INT)").unwrap();
        s.execute("INSERT INTO t VALUES (1, 20), (1, 10), (2, 30), (NULL, 5)")
            .unwrap();
        // DataFusion puts both windows in one node (same sort keys a, b).
        let sql = "SELECT a, b, rank() OVER (PARTITION BY a ORDER BY b), \
                   row_number() OVER (ORDER BY a, b), \
                   sum(b) OVER (PARTITION BY a ORDER BY b) FROM t";
        let plan = s.plan_query(sql).unwrap().to_string();
        assert_eq!(plan.matches("Window [").count(), 2, "{plan}");
        let out = s
            .query(&format!("{sql} ORDER BY a NULLS FIRST, b"))
            .unwrap();
        let mut rows = Vec::new();
        for batch in &out.batches {
            let columns: Vec<_> = batch
                .columns()
                .iter()
                .map(|c| arrow::compute::cast(c, &DataType::Int64).unwrap())
                .collect();
            for r in 0..batch.num_rows() {
                rows.push(
                    columns
                        .iter()
                        .map(|c| {
                            let c = c.as_primitive::<Int64Type>();
                            (!c.is_null(r)).then(|| c.value(r))
                        })
                        .collect::<Vec<_>>(),
                );
            }
        }
        let row = |v: [i64; 5]| v.map(Some).to_vec();
        let mut first = row([0, 5, 1, 4, 5]);
        first[0] = None;
        assert_eq!(
            rows,
            vec![
                first,
                row([1, 10, 1, 1, 10]),
                row([1, 20, 2, 2, 30]),
                row([2, 30, 1, 3, 30])
            ]
        );
    }
}

//! Build-side choice: no TPC-H query may build a hash table on lineitem where
//! a smaller side exists (issue 2). Both inputs of every join that reads
//! lineitem on its build side are executed and their actual rows compared.

use stride_exec::plan::{BuildSide, PhysicalPlan};
use stride_sched::SchedulerConfig;
use stride_sql::{Engine, EngineConfig};

fn reads_lineitem(plan: &PhysicalPlan) -> bool {
    match plan {
        PhysicalPlan::Scan { table, .. } => table.name() == "lineitem",
        PhysicalPlan::Values { .. } => false,
        PhysicalPlan::Filter { input, .. }
        | PhysicalPlan::Projection { input, .. }
        | PhysicalPlan::Aggregate { input, .. }
        | PhysicalPlan::GroupingSets { input, .. }
        | PhysicalPlan::Sort { input, .. }
        | PhysicalPlan::Limit { input, .. } => reads_lineitem(input),
        PhysicalPlan::HashJoin(j) => reads_lineitem(&j.left) || reads_lineitem(&j.right),
        PhysicalPlan::Union { inputs, .. } => inputs.iter().any(reads_lineitem),
        PhysicalPlan::Window(w) => reads_lineitem(&w.input),
        PhysicalPlan::Expand(e) => reads_lineitem(&e.input),
    }
}

fn rows(plan: &PhysicalPlan, engine: &Engine) -> usize {
    stride_exec::execute(plan, plan.schema(), engine.runtime().scheduler())
        .expect("subtree runs")
        .num_rows()
}

fn violations(plan: &PhysicalPlan, engine: &Engine, out: &mut Vec<String>) {
    match plan {
        PhysicalPlan::HashJoin(j) => {
            let (build, probe) = match j.build_side {
                BuildSide::Left => (&j.left, &j.right),
                BuildSide::Right => (&j.right, &j.left),
            };
            if reads_lineitem(build) {
                let (b, p) = (rows(build, engine), rows(probe, engine));
                if b > p {
                    out.push(format!(
                        "builds on lineitem ({b} rows), probes {p} rows:\n{plan}"
                    ));
                }
            }
            violations(&j.left, engine, out);
            violations(&j.right, engine, out);
        }
        PhysicalPlan::Filter { input, .. }
        | PhysicalPlan::Projection { input, .. }
        | PhysicalPlan::Aggregate { input, .. }
        | PhysicalPlan::GroupingSets { input, .. }
        | PhysicalPlan::Sort { input, .. }
        | PhysicalPlan::Limit { input, .. } => violations(input, engine, out),
        PhysicalPlan::Window(w) => violations(&w.input, engine, out),
        PhysicalPlan::Expand(e) => violations(&e.input, engine, out),
        PhysicalPlan::Union { inputs, .. } => {
            inputs.iter().for_each(|i| violations(i, engine, out))
        }
        PhysicalPlan::Scan { .. } | PhysicalPlan::Values { .. } => {}
    }
}

#[test]
fn no_tpch_query_builds_on_lineitem_when_a_smaller_side_exists() {
    let engine = Engine::new(EngineConfig {
        scheduler: SchedulerConfig {
            workers: 2,
            pin_workers: false,
            ..Default::default()
        },
        ..Default::default()
    });
    let schema = engine.load_tpch(0.1).unwrap();
    let mut session = engine.session();
    session.set_default_schema(&schema).unwrap();
    let mut all = Vec::new();
    let mut joins = 0;
    for q in stride::workload::tpch(0.1) {
        let plan = session
            .plan_query(&q.sql)
            .unwrap_or_else(|e| panic!("{}: {e}", q.name));
        joins += plan.to_string().matches("HashJoin").count();
        let mut v = Vec::new();
        violations(&plan, &engine, &mut v);
        all.extend(v.into_iter().map(|v| format!("{}: {v}", q.name)));
    }
    assert!(
        joins > 50,
        "expected the TPC-H joins to be planned, saw {joins}"
    );
    assert!(all.is_empty(), "{}", all.join("\n\n"));
}

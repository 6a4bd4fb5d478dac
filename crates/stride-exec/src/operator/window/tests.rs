//! Window plans run on a scheduler against brute-force answers: every row's
//! value computed from its definition over all rows, for several worker
//! counts and morsel sizes (so partitions and frames cross morsels).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array, RecordBatch};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use datafusion_common::ScalarValue;
use datafusion_physical_expr::aggregate::AggregateExprBuilder;
use datafusion_physical_expr::expressions::col;
use stride_sched::{MorselPolicy, Scheduler, SchedulerConfig};

use crate::plan::{
    ExprRef, FrameBound, FrameUnits, SortKey, WindowFrameSpec, WindowFunctionSpec, WindowKind,
    WindowPlan,
};
use crate::PhysicalPlan;

/// One input row: partition key, order key, a unique value.
type Row = (Option<i64>, Option<i64>, i64);

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("p", DataType::Int64, true),
        Field::new("o", DataType::Int64, true),
        Field::new("x", DataType::Int64, false),
    ]))
}

/// `n` rows from a seeded generator: few partitions (one NULL), order keys
/// with ties and NULLs, `x` = the row's index.
fn rows(n: usize, seed: u64) -> Vec<Row> {
    let mut s = seed;
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) as i64
    };
    (0..n as i64)
        .map(|x| {
            let p = next() % 5;
            let o = next() % 12;
            ((p != 4).then_some(p), (o != 11).then_some(o), x)
        })
        .collect()
}

/// The rows as VALUES batches of at most 37 rows.
fn values(rows: &[Row]) -> PhysicalPlan {
    let schema = input_schema();
    let batches = rows
        .chunks(37)
        .map(|c| {
            let column = |f: &dyn Fn(&Row) -> Option<i64>| -> ArrayRef {
                Arc::new(c.iter().map(f).collect::<Int64Array>())
            };
            RecordBatch::try_new(
                schema.clone(),
                vec![column(&|r| r.0), column(&|r| r.1), column(&|r| Some(r.2))],
            )
            .unwrap()
        })
        .collect();
    PhysicalPlan::Values { schema, batches }
}

fn c(name: &str) -> ExprRef {
    col(name, &input_schema()).unwrap()
}

fn frame_of(units: FrameUnits, start: FrameBound, end: FrameBound) -> WindowFrameSpec {
    WindowFrameSpec { units, start, end }
}

/// The default frame with ORDER BY.
fn running() -> WindowFrameSpec {
    frame_of(
        FrameUnits::Range,
        FrameBound::UnboundedPreceding,
        FrameBound::CurrentRow,
    )
}

fn function(kind: WindowKind, args: Vec<ExprRef>, frame: WindowFrameSpec) -> WindowFunctionSpec {
    WindowFunctionSpec {
        name: format!("{kind:?}"),
        kind,
        args,
        frame,
        data_type: DataType::Int64,
    }
}

fn sum(frame: WindowFrameSpec) -> WindowFunctionSpec {
    let f = AggregateExprBuilder::new(
        datafusion_functions_aggregate::sum::sum_udaf(),
        vec![c("x")],
    )
    .schema(input_schema())
    .alias("sum")
    .build()
    .unwrap();
    function(WindowKind::Aggregate(Arc::new(f)), vec![c("x")], frame)
}

/// Runs a window node over `rows`; returns per input row (by `x`) the
/// functions' values.
fn run(
    rows: &[Row],
    partition: bool,
    order_by: Vec<SortKey>,
    functions: Vec<WindowFunctionSpec>,
    workers: usize,
    morsel: usize,
) -> Vec<Vec<Option<i64>>> {
    let mut fields: Vec<Field> = input_schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    for (i, _) in functions.iter().enumerate() {
        fields.push(Field::new(format!("w{i}"), DataType::Int64, true));
    }
    let schema = Arc::new(Schema::new(fields));
    let plan = PhysicalPlan::Window(Box::new(WindowPlan {
        input: values(rows),
        partition_by: if partition { vec![c("p")] } else { Vec::new() },
        order_by,
        functions,
        schema: schema.clone(),
    }));
    let scheduler = Scheduler::new(SchedulerConfig {
        workers,
        pin_workers: false,
        morsels: MorselPolicy::Fixed(morsel),
        ..SchedulerConfig::default()
    });
    let out = crate::execute(&plan, schema, &scheduler).unwrap();
    let mut by_x = vec![Vec::new(); rows.len()];
    let mut seen = 0;
    for b in &out.batches {
        let x = b.column(2).as_primitive::<Int64Type>();
        for r in 0..b.num_rows() {
            let values = (3..b.num_columns())
                .map(|k| {
                    let a = b.column(k).as_primitive::<Int64Type>();
                    a.is_valid(r).then(|| a.value(r))
                })
                .collect();
            by_x[x.value(r) as usize] = values;
            seen += 1;
        }
    }
    assert_eq!(seen, rows.len(), "every row once");
    by_x
}

/// ORDER BY o ASC NULLS LAST, as a comparable key.
fn key(r: &Row) -> (bool, i64) {
    (r.1.is_none(), r.1.unwrap_or(0))
}

fn asc(name: &str) -> SortKey {
    SortKey {
        expr: c(name),
        options: SortOptions {
            descending: false,
            nulls_first: false,
        },
    }
}

const CONFIGS: [(usize, usize); 3] = [(1, 3), (2, 5), (2, 64)];

#[test]
fn ranking_matches_its_definition() {
    let input = rows(600, 7);
    for (workers, morsel) in CONFIGS {
        let got = run(
            &input,
            true,
            vec![asc("o"), asc("x")],
            vec![function(WindowKind::RowNumber, vec![], running())],
            workers,
            morsel,
        );
        let ranks = run(
            &input,
            true,
            vec![asc("o")],
            vec![
                function(WindowKind::Rank, vec![], running()),
                function(WindowKind::DenseRank, vec![], running()),
            ],
            workers,
            morsel,
        );
        for r in &input {
            let part: Vec<&Row> = input.iter().filter(|q| q.0 == r.0).collect();
            let row_number = 1 + part
                .iter()
                .filter(|q| (key(q), q.2) < (key(r), r.2))
                .count() as i64;
            let rank = 1 + part.iter().filter(|q| key(q) < key(r)).count() as i64;
            let mut below: Vec<(bool, i64)> = part
                .iter()
                .map(|q| key(q))
                .filter(|k| *k < key(r))
                .collect();
            below.sort();
            below.dedup();
            let dense = 1 + below.len() as i64;
            let x = r.2 as usize;
            assert_eq!(got[x], vec![Some(row_number)], "row_number of {r:?}");
            assert_eq!(ranks[x], vec![Some(rank), Some(dense)], "ranks of {r:?}");
        }
    }
}

#[test]
fn frame_sums_match_their_definition() {
    let input = rows(500, 11);
    let n = |v: i64| FrameBound::Preceding(ScalarValue::Int64(Some(v)));
    let f = |v: i64| FrameBound::Following(ScalarValue::Int64(Some(v)));
    for (workers, morsel) in CONFIGS {
        // Without PARTITION BY: one partition of every row, cut into morsels.
        for partition in [true, false] {
            let same = |q: &Row, r: &Row| !partition || q.0 == r.0;
            let rows_sum = run(
                &input,
                partition,
                vec![asc("o"), asc("x")],
                vec![sum(frame_of(FrameUnits::Rows, n(2), f(1)))],
                workers,
                morsel,
            );
            let range_sum = run(
                &input,
                partition,
                vec![asc("o")],
                vec![sum(frame_of(FrameUnits::Range, n(2), f(1))), sum(running())],
                workers,
                morsel,
            );
            for r in &input {
                let mut part: Vec<&Row> = input.iter().filter(|q| same(q, r)).collect();
                part.sort_by_key(|q| (key(q), q.2));
                let at = part.iter().position(|q| q.2 == r.2).unwrap();
                let window = &part[at.saturating_sub(2)..(at + 2).min(part.len())];
                let want_rows: i64 = window.iter().map(|q| q.2).sum();
                let in_range = |q: &&&Row| match (q.1, r.1) {
                    (Some(a), Some(b)) => a >= b - 2 && a <= b + 1,
                    (None, None) => true,
                    _ => false,
                };
                let range: Vec<i64> = part.iter().filter(in_range).map(|q| q.2).collect();
                let want_range = (!range.is_empty()).then(|| range.iter().sum::<i64>());
                let want_running: i64 = part.iter().filter(|q| key(q) <= key(r)).map(|q| q.2).sum();
                let x = r.2 as usize;
                assert_eq!(rows_sum[x], vec![Some(want_rows)], "ROWS sum of {r:?}");
                assert_eq!(
                    range_sum[x],
                    vec![want_range, Some(want_running)],
                    "RANGE sums of {r:?} (partition: {partition})"
                );
            }
        }
    }
}

#[test]
fn offsets_and_values_match_their_definition() {
    let input = rows(300, 3);
    let whole = frame_of(
        FrameUnits::Rows,
        FrameBound::UnboundedPreceding,
        FrameBound::UnboundedFollowing,
    );
    for (workers, morsel) in CONFIGS {
        let got = run(
            &input,
            true,
            vec![asc("o"), asc("x")],
            vec![
                function(WindowKind::Lag, vec![c("x")], running()),
                function(
                    WindowKind::Lead,
                    vec![
                        c("x"),
                        datafusion_physical_expr::expressions::lit(3i64),
                        datafusion_physical_expr::expressions::lit(-1i64),
                    ],
                    running(),
                ),
                function(WindowKind::FirstValue, vec![c("x")], whole.clone()),
                function(WindowKind::LastValue, vec![c("x")], whole.clone()),
                function(
                    WindowKind::NthValue,
                    vec![c("x"), datafusion_physical_expr::expressions::lit(2i64)],
                    running(),
                ),
                function(
                    WindowKind::Ntile,
                    vec![datafusion_physical_expr::expressions::lit(4i64)],
                    running(),
                ),
            ],
            workers,
            morsel,
        );
        for r in &input {
            let mut part: Vec<&Row> = input.iter().filter(|q| q.0 == r.0).collect();
            part.sort_by_key(|q| (key(q), q.2));
            let at = part.iter().position(|q| q.2 == r.2).unwrap();
            let len = part.len() as i64;
            let (size, larger) = (len / 4, len % 4);
            let i = at as i64;
            let ntile = if size == 0 {
                i + 1
            } else if i < larger * (size + 1) {
                i / (size + 1) + 1
            } else {
                (i - larger * (size + 1)) / size + larger + 1
            };
            // nth_value(x, 2) over the running frame: ORDER BY (o, x) has
            // no ties, so the frame ends at the row.
            let frame_end = at + 1;
            let want = vec![
                at.checked_sub(1).map(|j| part[j].2),
                Some(part.get(at + 3).map_or(-1, |q| q.2)),
                Some(part[0].2),
                Some(part[part.len() - 1].2),
                (frame_end >= 2).then(|| part[1].2),
                Some(ntile),
            ];
            assert_eq!(got[r.2 as usize], want, "offsets of {r:?}");
        }
    }
}

#[test]
fn empty_input_and_no_keys() {
    for (workers, morsel) in CONFIGS {
        let none = run(
            &[],
            true,
            vec![asc("o")],
            vec![function(WindowKind::Rank, vec![], running())],
            workers,
            morsel,
        );
        assert!(none.is_empty());
        let input = rows(100, 5);
        let whole = frame_of(
            FrameUnits::Rows,
            FrameBound::UnboundedPreceding,
            FrameBound::UnboundedFollowing,
        );
        let got = run(&input, false, Vec::new(), vec![sum(whole)], workers, morsel);
        let total: i64 = input.iter().map(|r| r.2).sum();
        assert!(got.iter().all(|v| v == &vec![Some(total)]));
    }
}

#[test]
fn running_sums_across_blocks_merge_block_states() {
    // Without keys the blocks are the input's morsels, in input order: a
    // running sum over them starts most morsels deep inside the partition.
    let input = rows(400, 9);
    let running_rows = frame_of(
        FrameUnits::Rows,
        FrameBound::UnboundedPreceding,
        FrameBound::CurrentRow,
    );
    let following = frame_of(
        FrameUnits::Rows,
        FrameBound::UnboundedPreceding,
        FrameBound::Following(ScalarValue::Int64(Some(3))),
    );
    for (workers, morsel) in CONFIGS {
        let got = run(
            &input,
            false,
            Vec::new(),
            vec![
                sum(running_rows.clone()),
                sum(following.clone()),
                sum(running()),
            ],
            workers,
            morsel,
        );
        let total: i64 = input.iter().map(|r| r.2).sum();
        for r in &input {
            let x = r.2;
            let upto = |last: i64| (0..=last.min(input.len() as i64 - 1)).sum::<i64>();
            assert_eq!(
                got[x as usize],
                vec![Some(upto(x)), Some(upto(x + 3)), Some(total)],
                "running sums of row {x}"
            );
        }
    }
}

//! Joins whose probe rows each match thousands of rows (and a set-returning
//! function whose rows each give thousands of values, and grouping sets
//! that hand each batch on once per set), so that one morsel becomes many
//! output chunks: with a tiny time slice every task stops
//! inside such a morsel after a chunk, parks the rest, and a later task
//! (on any worker) goes on from there (`stride_exec::suspend`). Under 1 and
//! 2 workers, single-row, small and adaptive morsels, every answer must be
//! exact — no chunk lost, none produced twice — and the statistics must
//! show that morsels really were suspended.

use std::time::Duration;

use arrow::array::{Array, AsArray};
use arrow::datatypes::Int64Type;
use stride_sched::{MorselPolicy, SchedulerConfig};
use stride_sql::{Engine, EngineConfig};

/// Rows of each side; every row has key 0, so a join gives N × N pairs.
const N: i64 = 1500;

fn engine(workers: usize, morsels: MorselPolicy, t_max: Duration) -> std::sync::Arc<Engine> {
    let engine = Engine::new(EngineConfig {
        scheduler: SchedulerConfig {
            workers,
            pin_workers: false,
            morsels,
            t_max,
            ..SchedulerConfig::default()
        },
        ..EngineConfig::default()
    });
    let mut s = engine.session();
    s.execute("CREATE TABLE d AS VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)")
        .unwrap();
    // Rows 1..=N with key 0 (and v = row); `b` has its own values so that
    // a swapped side would show in the sums.
    for (name, scale) in [("a", 1), ("b", 1000)] {
        s.execute(&format!(
            "CREATE TABLE {name} AS SELECT CAST(0 AS BIGINT) AS k, \
             CAST(({scale}) * (1 + x.column1 + 10 * y.column1 + 100 * z.column1 \
             + 1000 * w.column1) AS BIGINT) AS v \
             FROM d x, d y, d z, d w \
             WHERE x.column1 + 10 * y.column1 + 100 * z.column1 + 1000 * w.column1 < {N}"
        ))
        .unwrap();
    }
    s.execute("CREATE TABLE s AS SELECT * FROM a WHERE v <= 300")
        .unwrap();
    engine
}

fn ints(out: &stride_sql::QueryOutput) -> Vec<Option<i64>> {
    let b = &out.batches[0];
    (0..b.num_columns())
        .map(|c| {
            // sum(bigint) is numeric, as in PostgreSQL.
            let a = arrow::compute::cast(b.column(c), &arrow::datatypes::DataType::Int64).unwrap();
            let a = a.as_primitive::<Int64Type>();
            (!a.is_null(0)).then(|| a.value(0))
        })
        .collect()
}

/// Worker counts and morsel sizes. A fixed morsel of 100 rows gives
/// 150 000 pairs (3 chunks of the probe's 64 Ki pairs), one of 300 rows 7
/// chunks. Adaptive morsels learn that each row is slow and shrink to a
/// row or two (one chunk each), so they need no suspension — but must
/// still answer exactly.
fn configs() -> [(usize, MorselPolicy); 4] {
    [
        (1, MorselPolicy::Fixed(100)),
        (2, MorselPolicy::Fixed(100)),
        (2, MorselPolicy::Fixed(300)),
        (2, MorselPolicy::Adaptive(Default::default())),
    ]
}

#[test]
fn a_morsel_of_many_chunks_is_suspended_and_finished_exactly_once() {
    let n = N;
    let sum_1_to_n = n * (n + 1) / 2;
    // Each pair once: count N², each a.v N times, each b.v N times.
    let expected = vec![
        Some(n * n),
        Some(n * sum_1_to_n),
        Some(1000 * n * sum_1_to_n),
    ];
    for (workers, morsels) in configs() {
        let engine = engine(workers, morsels.clone(), Duration::from_micros(50));
        let mut s = engine.session();
        for sql in [
            // Keyed: one chain of N build rows per probe row.
            "SELECT count(*), sum(a.v), sum(b.v) FROM a JOIN b ON a.k = b.k",
            // Without keys (a cross join).
            "SELECT count(*), sum(a.v), sum(b.v) FROM a CROSS JOIN b",
            // Per-row decisions (whole rows per chunk) with a filter that
            // keeps every pair, and build-side match marks.
            "SELECT count(*), sum(a.v), sum(b.v) FROM a LEFT JOIN b ON a.k = b.k AND a.v + b.v > 0",
            "SELECT count(*), sum(a.v), sum(b.v) FROM a RIGHT JOIN b ON a.k = b.k AND a.v + b.v > 0",
        ] {
            let out = s.query(sql).unwrap();
            assert_eq!(
                ints(&out),
                expected,
                "{workers} workers, {morsels:?}: {sql}"
            );
            let fixed = matches!(morsels, MorselPolicy::Fixed(_));
            assert!(
                !fixed || out.stats.suspended_morsels > 0,
                "{workers} workers, {morsels:?}: no morsel was suspended in {sql}: {:?}",
                out.stats
            );
        }
        // A set-returning function whose rows each give 10 000 values
        // (the expansion operator is resumable too): Σ over v in 1..=300
        // of v + (v + 1) + … + (v + 9999).
        let sql = "SELECT count(*), sum(g) FROM s, generate_series(s.v, s.v + 9999) g";
        let out = s.query(sql).unwrap();
        let sum: i64 = (1..=300)
            .map(|v: i64| 10_000 * v + 9_999 * 10_000 / 2)
            .sum();
        assert_eq!(
            ints(&out),
            vec![Some(3_000_000), Some(sum)],
            "{workers} workers, {morsels:?}: {sql}"
        );
        if matches!(morsels, MorselPolicy::Fixed(_)) {
            assert!(
                out.stats.suspended_morsels > 0,
                "{workers} workers, {morsels:?}: {sql}: {:?}",
                out.stats
            );
        }
        // The count reaches the query log.
        if matches!(morsels, MorselPolicy::Fixed(_)) {
            let out = s
                .query(
                    "SELECT CAST(min(suspended_morsels) AS BIGINT) FROM stride.queries \
                     WHERE query LIKE '%JOIN b%' AND state = 'done'",
                )
                .unwrap();
            assert!(
                ints(&out)[0].is_some_and(|n| n > 0),
                "{workers} workers, {morsels:?}: stride.queries.suspended_morsels"
            );
        }
        // Two joins in one pipeline: the outer probe's chunks feed the
        // inner one, and either may stop. (a × b) × a on key 0 with a
        // filter that leaves N rows of the first product: N · N pairs.
        let out = s
            .query(
                "SELECT count(*), sum(c.v) FROM a JOIN b ON a.k = b.k AND b.v = 1000 * a.v \
                 JOIN a c ON c.k = a.k",
            )
            .unwrap();
        assert_eq!(
            ints(&out),
            vec![Some(n * n), Some(n * sum_1_to_n)],
            "{workers} workers, {morsels:?}: two joins"
        );
    }
}

/// Every row of a query's result, each column as BIGINT.
fn rows(out: &stride_sql::QueryOutput) -> Vec<Vec<i64>> {
    let mut v = Vec::new();
    for b in &out.batches {
        let cols: Vec<_> = b
            .columns()
            .iter()
            .map(|c| c.as_primitive::<Int64Type>().clone())
            .collect();
        for i in 0..b.num_rows() {
            v.push(cols.iter().map(|c| c.value(i)).collect());
        }
    }
    v
}

#[test]
fn a_resumed_morsel_produces_its_rows_in_the_order_of_an_uninterrupted_run() {
    // Below a LIMIT the result is the first rows in the order the scans
    // and operators produce them (morsel by morsel, chunk by chunk), so a
    // resumed operator must go on exactly where it stopped, and a frame
    // inside another be finished first. Two probes in one pipeline, each
    // row of `b` meeting 300 rows of `s` in each: a morsel of 300 rows is
    // two chunks of the first probe, and each of those is hundreds of
    // chunks of the second. One worker, so that the hash tables' chains
    // are laid out alike in every run (with two, inserts interleave and
    // the order differs even without suspensions).
    let sql = "SELECT b.v, s.v, t.v FROM b JOIN s ON s.k = b.k JOIN s t ON t.k = b.k \
               LIMIT 400000";
    let reference = rows(
        &engine(1, MorselPolicy::Fixed(100), Duration::from_secs(30))
            .session()
            .query(sql)
            .unwrap(),
    );
    assert_eq!(reference.len(), 400000);
    for rows_per_morsel in [300, 1000] {
        let out = engine(
            1,
            MorselPolicy::Fixed(rows_per_morsel),
            Duration::from_micros(50),
        )
        .session()
        .query(sql)
        .unwrap();
        assert!(out.stats.suspended_morsels > 0, "{:?}", out.stats);
        assert!(
            reference == rows(&out),
            "morsels of {rows_per_morsel}: rows differ from an uninterrupted run"
        );
    }
}

#[test]
fn grouping_sets_stopped_between_sets_aggregate_every_row_once() {
    // CUBE of three keys: each input batch is handed on eight times, and a
    // task may stop between any two. The answer must equal a run without
    // stops (one worker, a 30 s slice).
    let sql = "SELECT v % 2 AS x, v % 3 AS y, v % 5 AS z, count(*) AS n, sum(v) AS s FROM a \
               GROUP BY CUBE (v % 2, v % 3, v % 5)";
    // Rolled-up keys are NULL: compared as -1.
    let outer = format!(
        "SELECT coalesce(x, -1), coalesce(y, -1), coalesce(z, -1), n, \
         CAST(s AS BIGINT) FROM ({sql}) t ORDER BY 1, 2, 3"
    );
    let reference = rows(
        &engine(1, MorselPolicy::Fixed(300), Duration::from_secs(30))
            .session()
            .query(&outer)
            .unwrap(),
    );
    // 2·3·5 + 2·3 + 2·5 + 3·5 + 2 + 3 + 5 + 1 groups.
    assert_eq!(reference.len(), 72, "{reference:?}");
    for (workers, morsels) in configs() {
        let engine = engine(workers, morsels.clone(), Duration::from_micros(50));
        let out = engine.session().query(&outer).unwrap();
        assert!(
            rows(&out) == reference,
            "{workers} workers, {morsels:?}: the groups differ"
        );
        if matches!(morsels, MorselPolicy::Fixed(_)) {
            assert!(
                out.stats.suspended_morsels > 0,
                "{workers} workers, {morsels:?}: no stop between sets: {:?}",
                out.stats
            );
        }
    }
}

#[test]
fn a_limit_or_a_cancel_ends_a_suspended_join_cleanly() {
    for (workers, morsels) in configs() {
        let engine = engine(workers, morsels.clone(), Duration::from_micros(50));
        let mut s = engine.session();
        // The sink fills while continuations are parked: they are dropped,
        // and the query answers rather than report a lost morsel.
        let out = s
            .query("SELECT a.v, b.v FROM a JOIN b ON a.k = b.k LIMIT 7")
            .unwrap();
        assert_eq!(out.num_rows(), 7, "{workers} workers, {morsels:?}");
        // A statement timeout cancels the join between chunks.
        s.execute("SET statement_timeout = 30").unwrap();
        let err = s
            .query("SELECT count(*) FROM a CROSS JOIN b CROSS JOIN a c")
            .expect_err("N³ pairs cannot finish in 30 ms");
        assert_eq!(
            stride_server::sqlstate::of(&err),
            "57014",
            "{workers} workers, {morsels:?}: {err}"
        );
        s.execute("SET statement_timeout = 0").unwrap();
        // The engine is fine afterwards.
        let out = s.query("SELECT count(*) FROM a CROSS JOIN b").unwrap();
        assert_eq!(ints(&out), vec![Some(N * N)]);
    }
}

#[test]
fn without_a_reason_to_stop_no_morsel_is_suspended() {
    // A time slice far longer than the query, one worker and nothing else
    // running: no task has a reason to stop inside a morsel.
    let engine = engine(1, MorselPolicy::Fixed(1), Duration::from_secs(30));
    let out = engine
        .session()
        .query("SELECT count(*) FROM a JOIN b ON a.k = b.k")
        .unwrap();
    assert_eq!(ints(&out), vec![Some(N * N)]);
    assert_eq!(out.stats.suspended_morsels, 0, "{:?}", out.stats);
}

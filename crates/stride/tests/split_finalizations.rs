//! Breakers whose merge is split into task sets of parts (the task-set
//! graph: a finalization emits follow-up task sets), under 1 and 2
//! workers, tiny and adaptive morsels. A sort of 100 000 rows runs as
//! "sort units" and "merge key ranges" steps and must give every row once,
//! keys in order; a hash join building on 100 000 rows lays its table out
//! in a step and must join as before. Smaller breakers split too (a sort of
//! 20 000 rows on several keys, a build of 20 000 rows), and an aggregate
//! of 200 000 groups prepares its merge in chunks of every partial.

use stride_sched::{MorselPolicy, SchedulerConfig};
use stride_sql::{Engine, EngineConfig};

use arrow::array::{Array, AsArray};
use arrow::datatypes::Int64Type;

fn engine(workers: usize, morsels: MorselPolicy) -> std::sync::Arc<Engine> {
    let engine = Engine::new(EngineConfig {
        scheduler: SchedulerConfig {
            workers,
            pin_workers: false,
            morsels,
            ..SchedulerConfig::default()
        },
        ..EngineConfig::default()
    });
    let mut s = engine.session();
    s.execute("CREATE TABLE d AS VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)")
        .unwrap();
    // 100 000 rows: every id in 0..100000 once.
    s.execute(
        "CREATE TABLE big AS SELECT CAST(a.column1 + 10 * b.column1 + 100 * c.column1 \
         + 1000 * e.column1 + 10000 * f.column1 AS BIGINT) AS id \
         FROM d a, d b, d c, d e, d f",
    )
    .unwrap();
    engine
}

/// The output of `sql` on a fresh engine of `workers` and `morsels`.
fn query(workers: usize, morsels: &MorselPolicy, sql: &str) -> stride_sql::QueryOutput {
    engine(workers, morsels.clone())
        .session()
        .query(sql)
        .unwrap()
}

/// `(k, id)` pairs of a query's two BIGINT columns, in result order.
fn pairs(out: &stride_sql::QueryOutput) -> Vec<(Option<i64>, i64)> {
    let mut v = Vec::new();
    for b in &out.batches {
        let k = b.column(0).as_primitive::<Int64Type>();
        let id = b.column(1).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            v.push(((!k.is_null(i)).then(|| k.value(i)), id.value(i)));
        }
    }
    v
}

#[test]
fn a_large_sort_is_split_into_steps_and_sorts() {
    for (workers, morsels) in [
        (1, MorselPolicy::Fixed(7)),
        (2, MorselPolicy::Fixed(1000)),
        (2, MorselPolicy::Adaptive(Default::default())),
    ] {
        // A key with few values (long runs of ties) and NULLs, descending
        // with NULLs first, then the id ascending.
        let out = query(
            workers,
            &morsels,
            "SELECT CASE WHEN id % 11 = 0 THEN NULL ELSE id % 7 END AS k, id \
                 FROM big ORDER BY k DESC NULLS FIRST, id",
        );
        assert!(
            out.stats.follow_ups >= 2,
            "{workers} workers, {morsels:?}: the sort ran as steps: {:?}",
            out.stats.follow_ups
        );
        let got = pairs(&out);
        assert_eq!(got.len(), 100_000);
        let key = |(k, id): &(Option<i64>, i64)| (k.map_or(i64::MIN, |k| -k), *id);
        assert!(
            got.windows(2).all(|w| key(&w[0]) < key(&w[1])),
            "{workers} workers, {morsels:?}: out of order"
        );
        let mut ids: Vec<i64> = got.iter().map(|p| p.1).collect();
        ids.sort_unstable();
        assert!(ids.iter().copied().eq(0..100_000), "every row once");
    }
}

#[test]
fn a_small_sort_stays_one_step() {
    let engine = engine(2, MorselPolicy::Adaptive(Default::default()));
    let mut s = engine.session();
    let out = s
        .query("SELECT id % 7 AS k, id FROM big WHERE id < 1000 ORDER BY k, id")
        .unwrap();
    assert_eq!(out.stats.follow_ups, 0);
    assert_eq!(pairs(&out).len(), 1000);
}

#[test]
fn a_large_hash_build_is_laid_out_by_a_step_and_joins() {
    for (workers, morsels) in [
        (1, MorselPolicy::Fixed(5)),
        (2, MorselPolicy::Adaptive(Default::default())),
    ] {
        // 100 000 build rows (more than one step's threshold), a key with
        // NULLs on both sides.
        let out = query(
            workers,
            &morsels,
            "SELECT CAST(count(*) AS BIGINT), CAST(sum(a.id) AS BIGINT) \
                 FROM big a JOIN big b \
                 ON CASE WHEN a.id % 5 = 0 THEN NULL ELSE a.id END = b.id",
        );
        assert!(out.stats.follow_ups >= 1, "{workers}, {morsels:?}");
        let got = pairs(&out);
        // Ids not divisible by 5: 80 000 rows, summing to
        // 4 999 950 000 - 5 * (0 + 1 + … + 19 999) = 4 000 000 000.
        assert_eq!(got, vec![(Some(80_000), 4_000_000_000)]);
    }
}

#[test]
fn a_large_aggregate_prepares_its_merge_in_a_step() {
    for (workers, morsels) in [
        (1, MorselPolicy::Fixed(9)),
        (2, MorselPolicy::Adaptive(Default::default())),
    ] {
        // 50 000 groups of two rows each.
        let out = query(
            workers,
            &morsels,
            "SELECT CAST(count(*) AS BIGINT), CAST(sum(n) AS BIGINT) FROM \
                 (SELECT id % 50000 AS g, count(*) AS n FROM big GROUP BY g) t \
                 WHERE n = 2",
        );
        assert!(out.stats.follow_ups >= 1, "{workers}, {morsels:?}");
        assert_eq!(pairs(&out), vec![(Some(50_000), 100_000)]);
    }
}

#[test]
fn a_medium_sort_on_several_keys_is_split_and_sorts() {
    for (workers, morsels) in [
        (1, MorselPolicy::Fixed(7)),
        (2, MorselPolicy::Fixed(333)),
        (2, MorselPolicy::Adaptive(Default::default())),
    ] {
        // 20 000 rows (past the one-step limit, below 32 Ki), sorted on a
        // string, a number with ties and NULLs, and the id.
        let out = query(
            workers,
            &morsels,
            "SELECT CASE WHEN id % 13 = 0 THEN NULL ELSE id % 5 END AS k, id FROM big \
                 WHERE id < 20000 ORDER BY CAST(id % 3 AS VARCHAR) DESC, k NULLS LAST, id",
        );
        assert!(
            out.stats.follow_ups >= 2,
            "{workers} workers, {morsels:?}: the sort ran as steps"
        );
        let got = pairs(&out);
        assert_eq!(got.len(), 20_000);
        let key = |(k, id): &(Option<i64>, i64)| (-(id % 3), k.unwrap_or(i64::MAX), *id);
        assert!(
            got.windows(2).all(|w| key(&w[0]) < key(&w[1])),
            "{workers} workers, {morsels:?}: out of order"
        );
    }
}

#[test]
fn a_medium_hash_build_is_laid_out_by_a_step_and_joins() {
    for (workers, morsels) in [
        (1, MorselPolicy::Fixed(5)),
        (2, MorselPolicy::Fixed(777)),
        (2, MorselPolicy::Adaptive(Default::default())),
    ] {
        // 18 000 build rows (those of the 24 000 whose key is not NULL):
        // more than the inline limit (16 Ki).
        let out = query(
            workers,
            &morsels,
            "SELECT CAST(count(*) AS BIGINT), CAST(sum(a.id) AS BIGINT) \
                 FROM (SELECT id FROM big WHERE id < 24000) a JOIN big b \
                 ON CASE WHEN a.id % 4 = 0 THEN NULL ELSE a.id END = b.id",
        );
        assert!(out.stats.follow_ups >= 1, "{workers}, {morsels:?}");
        // Ids below 24 000 not divisible by 4: 18 000 rows, summing to
        // 287 988 000 - 4 * (0 + 1 + … + 5 999) = 216 000 000.
        assert_eq!(pairs(&out), vec![(Some(18_000), 216_000_000)]);
    }
}

#[test]
fn a_large_aggregate_prepares_its_merge_in_chunks() {
    for (workers, morsels) in [
        (1, MorselPolicy::Fixed(997)),
        (2, MorselPolicy::Fixed(4093)),
        (2, MorselPolicy::Adaptive(Default::default())),
    ] {
        // 400 000 rows, 200 000 groups of two rows: more than one chunk
        // (64 Ki groups) of a worker's partial.
        let out = query(
            workers,
            &morsels,
            "SELECT CAST(count(*) AS BIGINT), CAST(sum(n * g) AS BIGINT) FROM \
                 (SELECT g, count(*) AS n FROM \
                   (SELECT (a.id * 4 + d.column1) % 200000 AS g \
                    FROM big a, (SELECT column1 FROM d WHERE column1 < 4) d) x \
                  GROUP BY g) t WHERE n = 2",
        );
        assert!(out.stats.follow_ups >= 1, "{workers}, {morsels:?}");
        // Every g in 0..200000 twice: 200 000 groups, sum(2·g) = 2 · 19 999 900 000.
        assert_eq!(
            pairs(&out),
            vec![(Some(200_000), 39_999_800_000)],
            "{workers}, {morsels:?}"
        );
    }
}

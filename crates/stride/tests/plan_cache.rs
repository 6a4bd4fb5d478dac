//! The plan cache (`stride-sql/src/engine/plan_cache.rs`): simple-protocol
//! statement shapes and prepared statements run from cached plans give the
//! answers a full plan gives, see every write made after they were cached,
//! re-plan or fail as PostgreSQL does after DDL, and check privileges at
//! every execution; `stride.plan_cache_size` bounds (and 0 disables) the
//! cache. Drawn TPC-H instances answer as full plans do and reuse their
//! query's shape where their parameters are masked (constant expressions
//! such as `date '…' + interval '3' month` included).

mod common;

use std::sync::Arc;

use datafusion_common::ScalarValue;
use stride_sql::{Engine, Session, SqlError};

fn engine() -> Arc<Engine> {
    let engine = common::test_engine(2);
    let mut s = engine.session();
    s.execute(
        "create table pc (id int, qty decimal(10,2), name text, d date, big bigint);
         insert into pc values
           (1, 1.50, 'apple', date '1995-01-10', 10),
           (2, 2.00, 'banana', date '1995-03-15', 20),
           (3, 10.25, 'cherry', date '1996-07-01', 30),
           (4, null, 'apricot', null, null),
           (5, 0.05, 'date''s', date '1995-03-16', 3000000000)",
    )
    .unwrap();
    engine
}

/// A statement's rows as sorted text, or its error's SQLSTATE and text.
fn answer(s: &mut Session, sql: &str) -> Result<Vec<Vec<String>>, (String, String)> {
    match s.query(sql) {
        Ok(out) => {
            let mut rows = common::rows_as_text(&out.batches);
            rows.sort();
            Ok(rows)
        }
        Err(e) => Err((stride_server::sqlstate::of(&e).to_string(), e.to_string())),
    }
}

/// [`answer`] with the result's column names first.
fn named_answer(s: &mut Session, sql: &str) -> Result<Vec<Vec<String>>, (String, String)> {
    let names = match s.query(sql) {
        Ok(out) => out
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect(),
        Err(_) => Vec::new(),
    };
    answer(s, sql).map(|mut rows| {
        rows.insert(0, names);
        rows
    })
}

fn rows(s: &mut Session, sql: &str) -> Vec<Vec<String>> {
    answer(s, sql).unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

fn stats(s: &mut Session) -> (i64, i64, i64, i64) {
    let r = rows(
        s,
        "select entries, hits, misses, evictions from stride.plan_cache_stats",
    );
    let n = |i: usize| r[0][i].parse::<i64>().unwrap();
    (n(0), n(1), n(2), n(3))
}

/// Statements whose literals are masked (or deliberately not: other types,
/// inexact values, literals that must stay), each with several literals.
const QUERIES: &[&str] = &[
    "select name from pc where id = 1",
    "select name from pc where id = 3",
    "select name from pc where id = 2.0",
    "select name from pc where id = 2.5",
    "select name from pc where id = 3000000000",
    "select name from pc where id < 3000000000",
    "select name from pc where id = '2'",
    "select name from pc where 2 < id",
    "select name from pc where qty < 2",
    "select name from pc where qty < 2.5",
    "select name from pc where qty < 10.255",
    "select name from pc where qty <= 10.250",
    "select name from pc where qty = 0.05",
    "select name from pc where qty > 123456789012",
    "select name from pc where name = 'apple'",
    "select name from pc where name = 'date''s'",
    "select name from pc where name <> 'apple'",
    "select name from pc where name like 'ap%'",
    "select name from pc where name like 'b%'",
    "select name from pc where name not like '%e%'",
    "select name from pc where name ilike 'AP%'",
    "select name from pc where name in ('apple', 'cherry')",
    "select name from pc where name in ('banana')",
    "select name from pc where id not in (1, 2)",
    "select name from pc where id between 2 and 4",
    "select name from pc where id between 4 and 2",
    "select name from pc where d < '1995-03-15'",
    "select name from pc where d <= '1995-03-15'",
    "select name from pc where d = '1995-3-15'",
    "select name from pc where d >= date '1995-03-15'",
    "select name from pc where big > 2999999999",
    "select name from pc where big > 20",
    "select name, id = 1 from pc",
    "select name from pc where id > 1 order by 1 limit 2",
    "select name from pc where id > 1 order by 1 limit 1",
    "select id % 2, count(*) from pc where id > 1 group by 1",
    "select id % 2, count(*) from pc where id > 0 group by 1",
    "select count(*) from pc where id in (select id from pc where qty > 1)",
    "select count(*) from pc where id in (select id from pc where qty > 5)",
    "select (select max(id) from pc where id < 3), name from pc where id = 1",
    "select (select max(id) from pc where id < 4), name from pc where id = 1",
    "select a.name, b.name from pc a join pc b on a.id = b.id where a.id = 1",
    "select a.name, b.name from pc a join pc b on a.id = b.id where a.id = 2",
    "select name from pc where id = 1 and name = 'apple'",
    "select name from pc where id = 1 and name = 'banana'",
    "select name from pc where id = 1 or name = 'banana'",
    // Equal literals share one parameter: compared with columns of one
    // type, or of two (then the shape does not bind and plans in full).
    "select name from pc where (id = 2 and name in ('banana', 'apple')) or (id = 1 and name in ('banana', 'apple'))",
    "select name from pc where (id = 3 and name in ('cherry', 'apple')) or (id = 1 and name in ('cherry', 'apple'))",
    "select name from pc where id = 2 and qty = 2",
    "select name from pc where id = 2 or big = 2",
    "select name from pc where d < '1995-03-15' or name = '1995-03-15'",
    "select name from pc where id = 2 or qty = 2.0",
    // Constant expressions: masked whole, computed by DataFusion at each
    // execution, converted only where exact.
    "select name from pc where d < date '1995-01-31' + interval '1' month",
    "select name from pc where d < date '1996-01-31' + interval '1' month",
    "select name from pc where d <= date '1995-03-31' - interval '1' month",
    "select name from pc where d > date '1996-05-31' + interval '1' month",
    "select name from pc where d >= date '1996-07-01' - interval '1' day",
    "select name from pc where d between date '1995-01-01' and date '1995-01-01' + interval '1' year",
    "select name from pc where d = '1995-03-15'::date",
    "select name from pc where d = cast('1995-03-16' as date)",
    "select name from pc where d < timestamp '1995-03-15 00:00:00'",
    "select name from pc where d < timestamp '1995-03-15 12:00:00'",
    "select name from pc where d = timestamp '1995-03-15 12:00:00'",
    "select name from pc where d > timestamp '1995-03-15 00:00:01'",
    "select name from pc where d in (date '1995-01-10', timestamp '1995-03-15 00:00:00')",
    "select name from pc where name < date '1995-01-01'",
    "select name from pc where qty between 0.06 - 0.01 and 2.5 - 0.5",
    "select name from pc where qty between 0.03 - 0.01 and 0.03 + 0.01",
    "select name from pc where qty = 0.1 / 2",
    "select name from pc where qty = 1 / 3",
    "select name from pc where qty < 0.055 + 0",
    "select name from pc where qty > -(1.5)",
    "select name from pc where id = 1 + 1",
    "select name from pc where id = -(-3)",
    "select name from pc where id <= 7 / 2",
    "select name from pc where id < 2147483647 + 1",
    "select name from pc where id = 9223372036854775807 + 1",
    "select name from pc where id = 1 / 0",
    "select name from pc where name = cast(5 as text)",
    "select name from pc where big > 2999999999 + 0.5",
];

/// Two engines as `make` makes them: a session of the first with the
/// cache off (the full plans' answers), a session of the second with it
/// on, and the second engine (for its counters).
fn off_and_on(make: impl Fn() -> Arc<Engine>) -> (Session, Session, Arc<Engine>) {
    let mut plain = make().session();
    plain.execute("set stride.plan_cache_size = 0").unwrap();
    let cached = make();
    (plain, cached.session(), cached)
}

#[test]
fn cached_shapes_answer_as_full_plans_do() {
    let (mut plain, mut s, _) = off_and_on(engine);
    for sql in QUERIES {
        let expected = named_answer(&mut plain, sql);
        // A miss, then hits of the same shape with the same values.
        assert_eq!(named_answer(&mut s, sql), expected, "{sql}");
    }
    // And every query once more, now that every shape is cached with the
    // other statements' literals.
    for sql in QUERIES.iter().rev() {
        assert_eq!(
            named_answer(&mut s, sql),
            named_answer(&mut plain, sql),
            "{sql}"
        );
    }
    let (entries, hits, misses, _) = stats(&mut s);
    assert!(
        entries > 0 && hits > 0 && misses > 0,
        "{entries} {hits} {misses}"
    );
    assert_eq!(stats(&mut plain).0, 0, "size 0: no entries");
}

/// The engine's hit count (read from the engine: a query of
/// `stride.plan_cache_stats` would count itself).
fn hits(engine: &Engine) -> u64 {
    engine.plan_cache().stats().hits
}

#[test]
fn month_end_arithmetic_in_one_shape_is_datafusions() {
    let (mut plain, mut s, cached) = off_and_on(engine);
    // One shape; each day's month arithmetic clamps at the month's end
    // (1995-01-31 + 1 month is 1995-02-28, 1996-01-31's is 1996-02-29).
    let days = [
        "1995-01-31",
        "1996-01-31",
        "1995-02-28",
        "1995-02-14",
        "1995-02-15",
        "1996-05-31",
        "1996-06-01",
    ];
    let before = hits(&cached);
    for (i, day) in days.iter().enumerate() {
        let sql = format!(
            "select name, d from pc where d < date '{day}' + interval '1' month \
             and d >= date '{day}' - interval '1' year"
        );
        let expected = answer(&mut plain, &sql);
        assert!(expected.is_ok(), "{sql}: {expected:?}");
        assert_eq!(answer(&mut s, &sql), expected, "{sql}");
        assert_eq!(
            hits(&cached) - before,
            i as u64,
            "{sql}: a hit after the first"
        );
    }
}

/// TPC-H at SF 0.01 (the smallest these tests load) in an engine, its
/// schema the sessions' default.
fn tpch_engine() -> Arc<Engine> {
    let engine = common::test_engine(2);
    let schema = engine.load_tpch(0.01).expect("generate TPC-H SF 0.01");
    engine.set_default_schema(&schema).unwrap();
    engine
}

/// A drawn instance of TPC-H query `q` (1..=22) at SF 0.01: the `k`-th of
/// the stream the seed names, drawn as the benchmarks draw theirs.
fn tpch_instance(q: usize, seed: u64, k: u64) -> String {
    use rand::SeedableRng;
    let name = format!("q{q}");
    let seed = stride::workload::instance_seed(seed, &["plan_cache", &name], k);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    stride::workload::tpch_instance(&name, 0.01, &mut rng)
        .expect("a TPC-H query")
        .sql
}

/// Which of a statement's plain string literals are equal: for each, in
/// order, the position of the first equal one (typed literals — `date
/// '…'`, `interval '…'` — left out: they are never shared).
fn string_pattern(sql: &str) -> Vec<usize> {
    let mut strings: Vec<String> = Vec::new();
    let mut pattern = Vec::new();
    let mut rest = sql;
    while let Some(open) = rest.find('\'') {
        let before = rest[..open].trim_end().to_ascii_lowercase();
        let after = &rest[open + 1..];
        let close = after.find('\'').expect("closed string");
        let value = after[..close].to_string();
        rest = &after[close + 1..];
        if ["date", "interval", "timestamp"]
            .iter()
            .any(|k| before.ends_with(k))
        {
            continue;
        }
        let first = strings.iter().position(|v| *v == value).unwrap_or_else(|| {
            strings.push(value);
            strings.len() - 1
        });
        pattern.push(first);
    }
    pattern
}

#[test]
fn drawn_tpch_instances_answer_as_full_plans_and_reuse_their_shapes() {
    let (mut plain, mut s, cached) = off_and_on(tpch_engine);
    // Which query numbers' later instances (other drawn parameters than
    // the first's) ran from the shape the first planned.
    let mut reused = std::collections::BTreeSet::new();
    for q in 1..=22 {
        let mut earlier: Vec<String> = Vec::new();
        for (seed, k) in [(7, 0), (7, 1), (11, 0), (11, 1)] {
            let sql = tpch_instance(q, seed, k);
            let expected = answer(&mut plain, &sql);
            assert!(expected.is_ok(), "q{q}: {expected:?}");
            let before = hits(&cached);
            assert_eq!(answer(&mut s, &sql), expected, "q{q}: {sql}");
            let hit = hits(&cached) > before;
            let repeated = earlier.contains(&sql);
            // Equal strings share a parameter: an instance whose drawn
            // strings meet where no earlier instance's did (Q19's brands)
            // is a shape of its own.
            let new_pattern = !earlier
                .iter()
                .any(|e| string_pattern(e) == string_pattern(&sql));
            if earlier.is_empty() {
                assert!(!hit, "q{q}: the first instance plans its shape");
            } else if new_pattern && q != 22 {
                assert!(!hit, "q{q}: equal strings elsewhere, another shape: {sql}");
            } else if q == 18 || q == 22 {
                // Q18 compares `sum(l_quantity)` (an aggregate, not a
                // column) with its drawn QUANTITY, and Q22 compares
                // `substring(c_phone from 1 for 2)` (a function) with its
                // drawn country codes: those literals stay in the shape's
                // text, so only an instance with an earlier one's very
                // values runs from the cache.
                assert_eq!(hit, repeated, "q{q}: {sql}");
            } else {
                // Every other query's drawn parameters — dates,
                // `date '…' ± interval`, the discount band, numbers and
                // strings compared with a column — are masked: each later
                // instance runs from the first's shape.
                assert!(hit, "q{q}: {sql}");
                if !repeated {
                    reused.insert(q);
                }
            }
            earlier.push(sql);
        }
    }
    // Each of those had instances with other values than the first's.
    let expected: std::collections::BTreeSet<usize> =
        (1..=22).filter(|q| *q != 18 && *q != 22).collect();
    assert_eq!(reused, expected);
}

#[test]
fn differing_literals_reuse_one_shape_with_their_own_values() {
    let engine = engine();
    let mut s = engine.session();
    let before = stats(&mut s);
    assert_eq!(
        rows(&mut s, "select name from pc where id = 1"),
        [["apple"]]
    );
    assert_eq!(
        rows(&mut s, "select name from pc where id = 2"),
        [["banana"]]
    );
    assert_eq!(
        rows(&mut s, "SELECT name FROM pc WHERE id = 3 -- again"),
        [["cherry"]]
    );
    assert!(rows(&mut s, "select name from pc where id = 9").is_empty());
    let after = stats(&mut s);
    // One miss (the first), three hits; the view is read before the stats
    // query's own hit counts.
    assert_eq!(after.2 - before.2, 1, "misses");
    assert_eq!(after.1 - before.1, 3, "hits");
    let shape = rows(
        &mut s,
        "select hits, parameters, cached from stride.plan_cache \
         where shape = 'SELECT name FROM pc WHERE id = $1'",
    );
    assert_eq!(shape, [["3", "1", "true"]]);
}

#[test]
fn cached_shapes_see_later_writes_and_ddl() {
    let engine = engine();
    let mut s = engine.session();
    let mut other = engine.session();
    let q = |id: i32| format!("select name, qty from pc where id = {id}");
    assert_eq!(rows(&mut s, &q(1)), [["apple", "1.50"]]);
    other
        .execute("insert into pc values (6, 6.00, 'fig', null, null)")
        .unwrap();
    assert_eq!(rows(&mut s, &q(6)), [["fig", "6.00"]], "an insert");
    other
        .execute("update pc set name = 'kiwi' where id = 6")
        .unwrap();
    assert_eq!(rows(&mut s, &q(6)), [["kiwi", "6.00"]], "an update");
    other.execute("delete from pc where id = 6").unwrap();
    assert!(rows(&mut s, &q(6)).is_empty(), "a delete");
    // A transaction's own view: its writes, not others' later commits.
    s.execute("begin").unwrap();
    s.execute("insert into pc values (7, 7.00, 'grape', null, null)")
        .unwrap();
    other
        .execute("insert into pc values (8, 8.00, 'lime', null, null)")
        .unwrap();
    assert_eq!(rows(&mut s, &q(7)), [["grape", "7.00"]]);
    assert!(
        rows(&mut s, &q(8)).is_empty(),
        "committed after the block began"
    );
    assert!(rows(&mut other, &q(7)).is_empty(), "not committed");
    s.execute("rollback").unwrap();
    assert_eq!(rows(&mut s, &q(8)), [["lime", "8.00"]]);
    // Dropped: the statement's own error; created again with other
    // columns: planned anew.
    other.execute("drop table pc").unwrap();
    assert_eq!(
        answer(&mut s, &q(1)).unwrap_err().0,
        "42P01",
        "a dropped table"
    );
    other
        .execute("create table pc (id bigint, qty text, name text); insert into pc values (1, 'many', 'plum')")
        .unwrap();
    assert_eq!(rows(&mut s, &q(1)), [["plum", "many"]], "re-planned");
    assert_eq!(rows(&mut s, &q(1)), [["plum", "many"]], "and cached again");
}

#[test]
fn prepared_statements_run_their_cached_plan_with_each_executions_values() {
    let engine = engine();
    let mut s = engine.session();
    let mut other = engine.session();
    let p = s
        .prepare("select count(*), sum(qty) from pc where id <= $1 and name like $2")
        .unwrap();
    // The values as the server decodes them: of the statement's types.
    let typed = |id: i32, pattern: &str| -> Vec<ScalarValue> {
        let types: Vec<_> = p.param_types.iter().map(|t| t.clone().unwrap()).collect();
        vec![
            ScalarValue::Int32(Some(id)).cast_to(&types[0]).unwrap(),
            ScalarValue::Utf8(Some(pattern.to_string()))
                .cast_to(&types[1])
                .unwrap(),
        ]
    };
    let run = |s: &mut Session, id: i32, pattern: &str| -> Result<Vec<Vec<String>>, String> {
        let params = typed(id, pattern);
        match s.execute_prepared(&p, params) {
            Ok(stride_sql::StatementOutput::Query(q)) => Ok(common::rows_as_text(&q.batches)),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(stride_server::sqlstate::of(&e).to_string()),
        }
    };
    assert_eq!(run(&mut s, 2, "%").unwrap(), [["2", "3.50"]]);
    assert_eq!(run(&mut s, 5, "a%").unwrap(), [["2", "1.50"]]);
    assert_eq!(run(&mut s, 0, "%").unwrap(), [["0", "NULL"]]);
    other
        .execute("insert into pc values (0, 100.00, 'avocado', null, null)")
        .unwrap();
    assert_eq!(run(&mut s, 0, "%").unwrap(), [["1", "100.00"]], "an insert");
    other
        .execute("update pc set qty = 1.00 where id = 0")
        .unwrap();
    assert_eq!(run(&mut s, 0, "%").unwrap(), [["1", "1.00"]], "an update");
    // Parameters of another type than the statement's plan in full.
    let mut wide = typed(2, "%");
    wide[0] = ScalarValue::Int64(Some(2));
    match s.execute_prepared(&p, wide).unwrap() {
        stride_sql::StatementOutput::Query(q) => {
            assert_eq!(common::rows_as_text(&q.batches), [["3", "4.50"]])
        }
        other => panic!("{other:?}"),
    }
    other.execute("drop table pc").unwrap();
    assert_eq!(run(&mut s, 1, "%").unwrap_err(), "42P01");
    other
        .execute("create table pc (id int, qty decimal(10,2), name text, d date, big bigint)")
        .unwrap();
    assert_eq!(
        run(&mut s, 1, "%").unwrap(),
        [["0", "NULL"]],
        "same columns"
    );
    other.execute("drop table pc").unwrap();
    other
        .execute("create table pc (id int, qty text, name text, d date, big bigint)")
        .unwrap();
    // PostgreSQL: "cached plan must not change result type".
    let err = s.execute_prepared(&p, typed(1, "%")).unwrap_err();
    assert!(matches!(err, SqlError::PlanInvalidated(_)), "{err:?}");
    assert_eq!(stride_server::sqlstate::of(&err), "0A000");
}

#[test]
fn privileges_are_checked_at_every_execution() {
    let engine = engine();
    let mut admin = engine.session();
    admin
        .execute("create role viewer login; grant usage on schema public to viewer; grant select on pc to viewer")
        .unwrap();
    let mut viewer = engine.session_for("viewer");
    let p = viewer.prepare("select name from pc where id = $1").unwrap();
    assert_eq!(
        rows(&mut viewer, "select name from pc where id = 1"),
        [["apple"]]
    );
    assert_eq!(
        rows(&mut viewer, "select name from pc where id = 2"),
        [["banana"]]
    );
    assert!(viewer
        .execute_prepared(&p, vec![ScalarValue::Int32(Some(1))])
        .is_ok());
    admin.execute("revoke select on pc from viewer").unwrap();
    assert_eq!(
        answer(&mut viewer, "select name from pc where id = 3")
            .unwrap_err()
            .0,
        "42501"
    );
    // Even where the optimizer removes the scan.
    assert_eq!(
        answer(&mut viewer, "select name from pc where 1 = 0")
            .unwrap_err()
            .0,
        "42501"
    );
    let err = viewer
        .execute_prepared(&p, vec![ScalarValue::Int32(Some(1))])
        .unwrap_err();
    assert_eq!(stride_server::sqlstate::of(&err), "42501");
}

#[test]
fn statements_reading_the_clock_or_the_session_are_not_cached() {
    let engine = engine();
    let mut s = engine.session();
    for _ in 0..2 {
        rows(
            &mut s,
            "select now() > timestamp '2000-01-01' from pc where id = 1",
        );
        rows(&mut s, "select current_user from pc where id = 1");
    }
    let r = rows(
        &mut s,
        "select cached, hits from stride.plan_cache \
         where shape ilike '%now()%' or shape ilike '%current_user%'",
    );
    assert_eq!(r, [["false", "0"], ["false", "0"]]);
}

#[test]
fn size_bounds_the_cache_and_zero_disables_it() {
    let engine = engine();
    let mut s = engine.session();
    s.execute("set stride.plan_cache_size = 3").unwrap();
    assert_eq!(rows(&mut s, "show stride.plan_cache_size"), [["3"]]);
    for sql in [
        "select id from pc where id = 1",
        "select name from pc where id = 1",
        "select qty from pc where id = 1",
        "select d from pc where id = 1",
    ] {
        rows(&mut s, sql);
    }
    let (entries, _, _, evictions) = stats(&mut s);
    assert_eq!(entries, 3);
    assert!(evictions >= 2, "{evictions}");
    // The least recently used shape was evicted: a miss again.
    let misses = stats(&mut s).2;
    rows(&mut s, "select id from pc where id = 2");
    assert_eq!(stats(&mut s).2, misses + 1);
    s.execute("set stride.plan_cache_size = 0").unwrap();
    let (entries, hits, misses, _) = stats(&mut s);
    assert_eq!(entries, 0);
    for _ in 0..3 {
        assert_eq!(
            rows(&mut s, "select name from pc where id = 1"),
            [["apple"]]
        );
    }
    let (entries, hits_now, misses_now, _) = stats(&mut s);
    assert_eq!((entries, hits_now, misses_now), (0, hits, misses));
    // Only superusers change the engine's setting.
    s.execute("create role plain login").unwrap();
    let mut plain = engine.session_for("plain");
    let err = plain
        .execute("set stride.plan_cache_size = 10")
        .unwrap_err();
    assert_eq!(stride_server::sqlstate::of(&err), "42501");
    let err = s.execute("set stride.plan_cache_size = lots").unwrap_err();
    assert_eq!(stride_server::sqlstate::of(&err), "22023");
}

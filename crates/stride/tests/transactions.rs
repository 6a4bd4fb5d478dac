//! Transaction semantics against sessions of one engine (no data
//! directory; the same commit path logs when there is one): rollback of each
//! statement kind, abort on error (25P02), snapshot reads while another
//! session commits, write–write conflicts (40001), READ ONLY (25006).

use std::sync::Arc;

use stride_server::sqlstate;
use stride_sql::{Engine, EngineConfig, Session, SqlError};

fn engine() -> Arc<Engine> {
    let mut config = EngineConfig::default();
    config.scheduler.workers = 1;
    Engine::new(config)
}

fn run(s: &mut Session, sql: &str) {
    if let Err(e) = s.execute(sql) {
        panic!("{sql}: {e}");
    }
}

fn fails(s: &mut Session, sql: &str) -> SqlError {
    match s.execute(sql) {
        Ok(_) => panic!("{sql} succeeded"),
        Err(e) => e,
    }
}

fn tag(s: &mut Session, sql: &str) -> String {
    match s.execute(sql).unwrap().pop() {
        Some(stride_sql::StatementOutput::Command { tag }) => tag,
        other => panic!("{sql}: {other:?}"),
    }
}

fn count(s: &mut Session, table: &str) -> i64 {
    let out = s.query(&format!("select count(*) from {table}")).unwrap();
    let col = out.batches[0].column(0);
    arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(col).value(0)
}

/// An empty data directory for test `name`, with default sizes.
fn fresh_data_dir(name: &str) -> (std::path::PathBuf, stride_storage::durable::DataDirConfig) {
    let dir = std::env::temp_dir().join(format!("stride-txn-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = stride_storage::durable::DataDirConfig {
        path: dir.clone(),
        checkpoint_log_bytes: stride_storage::durable::DEFAULT_CHECKPOINT_LOG_BYTES,
        bulk_write_bytes: stride_storage::durable::DEFAULT_BULK_WRITE_BYTES,
    };
    (dir, config)
}

fn exists(s: &mut Session, table: &str) -> bool {
    s.execute(&format!("select * from {table}")).is_ok()
}

#[test]
fn single_row_inserts_each_add_their_row_in_and_out_of_blocks() {
    // Small appends are merged into the table's last block: every insert
    // must still reach the catalog (and the log) whole.
    let engine = engine();
    let mut s = engine.session();
    run(&mut s, "create table rows1 (id int, v text)");
    for i in 0..50 {
        run(&mut s, &format!("insert into rows1 values ({i}, 'r{i}')"));
    }
    run(&mut s, "begin");
    for i in 50..60 {
        run(&mut s, &format!("insert into rows1 values ({i}, 'r{i}')"));
    }
    assert_eq!(count(&mut s, "rows1"), 60, "the block sees its own rows");
    run(&mut s, "commit");
    let mut other = engine.session();
    assert_eq!(count(&mut other, "rows1"), 60);
    let blocks = engine
        .runtime()
        .catalog()
        .table("public", "rows1")
        .unwrap()
        .blocks()
        .len();
    assert_eq!(blocks, 1, "merged into one block");
}

#[test]
fn rollback_undoes_every_statement_kind() {
    let e = engine();
    let mut s = e.session();
    run(&mut s, "create table t (id bigint)");
    run(&mut s, "insert into t values (1), (2)");
    run(&mut s, "create table gone (x int)");
    run(&mut s, "begin");
    run(&mut s, "insert into t values (3)");
    assert_eq!(count(&mut s, "t"), 3, "the block sees its own insert");
    run(&mut s, "create table n (a int)");
    run(&mut s, "insert into n values (1)");
    run(&mut s, "create table c as select * from t");
    run(&mut s, "drop table gone");
    run(&mut s, "create schema sx");
    run(&mut s, "create table sx.q (a int)");
    assert!(exists(&mut s, "c") && exists(&mut s, "sx.q") && !exists(&mut s, "gone"));
    {
        // Nothing of the block is visible to another session.
        let mut other = e.session();
        assert_eq!(count(&mut other, "t"), 2);
        assert!(!exists(&mut other, "n") && exists(&mut other, "gone"));
    }
    assert_eq!(tag(&mut s, "rollback"), "ROLLBACK");
    assert!(!s.in_transaction());
    assert_eq!(count(&mut s, "t"), 2);
    for t in ["n", "c", "sx.q"] {
        assert!(!exists(&mut s, t), "{t} survived the rollback");
    }
    assert!(exists(&mut s, "gone"));
    assert!(!e.runtime().catalog().schema_exists("sx"));
    // DROP SCHEMA … CASCADE rolls back too.
    run(&mut s, "create schema keep");
    run(&mut s, "create table keep.k as select 1 as a");
    run(&mut s, "begin; drop schema keep cascade; rollback");
    assert_eq!(count(&mut s, "keep.k"), 1);
}

#[test]
fn commit_applies_the_block_at_once() {
    let e = engine();
    let mut s = e.session();
    run(&mut s, "create table t (id bigint)");
    run(&mut s, "begin");
    run(&mut s, "insert into t values (1)");
    run(&mut s, "create table u as select id * 10 as v from t");
    run(&mut s, "drop table t");
    assert_eq!(tag(&mut s, "commit"), "COMMIT");
    let mut other = e.session();
    assert!(!exists(&mut other, "t"));
    assert_eq!(count(&mut other, "u"), 1);
}

#[test]
fn an_error_aborts_the_block_until_its_end() {
    let e = engine();
    let mut s = e.session();
    run(&mut s, "create table t (id bigint)");
    run(&mut s, "begin");
    run(&mut s, "insert into t values (1)");
    fails(&mut s, "select * from no_such_table");
    assert!(s.in_failed_transaction());
    for sql in ["select 1", "insert into t values (2)", "begin"] {
        let err = fails(&mut s, sql);
        assert_eq!(sqlstate::of(&err), "25P02", "{sql}: {err}");
    }
    // Prepared statements (the extended protocol) are refused as well.
    let err = s.prepare("select 1").unwrap_err();
    assert_eq!(sqlstate::of(&err), "25P02");
    // COMMIT of a failed block rolls back.
    assert_eq!(tag(&mut s, "commit"), "ROLLBACK");
    assert!(!s.in_transaction() && !s.in_failed_transaction());
    assert_eq!(count(&mut s, "t"), 0);
    // A failing statement outside a block leaves no trace and no block.
    fails(&mut s, "insert into t select 1 / 0");
    assert!(!s.in_failed_transaction());
    run(&mut s, "begin; insert into t values (5)");
    fails(&mut s, "select nope from t");
    assert_eq!(tag(&mut s, "commit"), "ROLLBACK");
    assert_eq!(count(&mut s, "t"), 0);
}

#[test]
fn a_block_reads_its_snapshot_while_another_session_commits() {
    let e = engine();
    let mut a = e.session();
    let mut b = e.session();
    run(&mut a, "create table t (id bigint)");
    run(&mut a, "insert into t values (1)");
    run(&mut a, "begin");
    assert_eq!(count(&mut a, "t"), 1);
    run(&mut b, "insert into t values (2)");
    run(&mut b, "create table later (x int)");
    assert_eq!(count(&mut a, "t"), 1, "the block keeps its snapshot");
    // Its own insert commutes with the concurrent one (PostgreSQL: inserts
    // never conflict): both rows are there after COMMIT.
    run(&mut a, "insert into t values (3)");
    assert_eq!(count(&mut a, "t"), 2);
    run(&mut a, "commit");
    assert_eq!(count(&mut a, "t"), 3);
    assert!(exists(&mut a, "later"));
    // A table created after the block's snapshot does not exist for it.
    run(&mut a, "begin; select 1");
    run(&mut b, "create table newer (x int)");
    let err = fails(&mut a, "select * from newer");
    assert_eq!(sqlstate::of(&err), "42P01", "{err}");
    run(&mut a, "rollback");
    assert!(exists(&mut a, "newer"));
}

#[test]
fn the_second_committer_of_conflicting_writes_fails() {
    let e = engine();
    let mut a = e.session();
    let mut b = e.session();
    run(&mut a, "create table t (id bigint)");
    // A dropped what B inserted into.
    run(&mut b, "begin; insert into t values (1)");
    run(&mut a, "drop table t");
    let err = fails(&mut b, "commit");
    assert_eq!(sqlstate::of(&err), "40001", "{err}");
    assert!(!b.in_transaction());
    assert!(!exists(&mut b, "t"));
    // Both create the same table: the first wins, nothing of the second
    // block is applied.
    run(
        &mut a,
        "begin; create table x (a int); create table y_a (a int)",
    );
    run(
        &mut b,
        "begin; create table x (b text); create table y_b (a int)",
    );
    run(&mut a, "commit");
    let err = fails(&mut b, "commit");
    assert_eq!(sqlstate::of(&err), "40001", "{err}");
    assert!(exists(&mut b, "y_a") && !exists(&mut b, "y_b"));
    // A replaced a table B appended to since B's snapshot.
    run(&mut a, "create table r as select 1 as v");
    run(&mut a, "begin; create or replace table r as select 2 as v");
    run(&mut b, "insert into r values (3)");
    let err = fails(&mut a, "commit");
    assert_eq!(sqlstate::of(&err), "40001", "{err}");
    assert_eq!(count(&mut a, "r"), 2);
    // A write outside a block is its own transaction and conflicts too.
    run(&mut a, "begin; drop table r");
    run(&mut b, "drop table r");
    assert_eq!(sqlstate::of(&fails(&mut a, "commit")), "40001");
}

#[test]
fn read_only_transactions_refuse_writes() {
    let e = engine();
    let mut s = e.session();
    run(&mut s, "create table t (id bigint)");
    run(&mut s, "begin read only");
    assert_eq!(count(&mut s, "t"), 0);
    for sql in [
        "insert into t values (1)",
        "create table u (a int)",
        "drop table t",
    ] {
        let err = fails(&mut s, sql);
        assert_eq!(sqlstate::of(&err), "25006", "{sql}: {err}");
        run(&mut s, "rollback; begin read only");
    }
    run(&mut s, "rollback");
    run(&mut s, "start transaction; set transaction read only");
    assert_eq!(
        sqlstate::of(&fails(&mut s, "insert into t values (1)")),
        "25006"
    );
    run(&mut s, "rollback");
    run(&mut s, "set default_transaction_read_only = on");
    assert_eq!(
        sqlstate::of(&fails(&mut s, "insert into t values (1)")),
        "25006"
    );
    run(&mut s, "begin read write; insert into t values (1); commit");
    run(&mut s, "set default_transaction_read_only = off");
    assert_eq!(count(&mut s, "t"), 1);
    // SERIALIZABLE is not given, so it is refused rather than weakened.
    assert_eq!(
        sqlstate::of(&fails(&mut s, "begin isolation level serializable")),
        "0A000"
    );
    run(&mut s, "begin isolation level repeatable read; rollback");
}

#[test]
fn rollback_restores_session_settings() {
    let e = engine();
    let mut s = e.session();
    run(&mut s, "create schema other");
    run(&mut s, "begin; set search_path = other; rollback");
    assert_eq!(s.default_schema(), "public");
    run(&mut s, "begin; set search_path = other; commit");
    assert_eq!(s.default_schema(), "other");
}

#[test]
fn only_committed_writes_outside_generated_schemas_reach_the_data_directory() {
    let (dir, config) = fresh_data_dir("dir");
    {
        let e = engine();
        e.open_data_dir(&config).unwrap();
        let b = arrow::array::RecordBatch::try_from_iter([(
            "g",
            Arc::new(arrow::array::Int64Array::from(vec![1, 2])) as arrow::array::ArrayRef,
        )])
        .unwrap();
        let generated = stride_storage::Table::new("gen", b.schema(), vec![b]).unwrap();
        e.add_tables("generated", vec![generated]).unwrap();
        let mut s = e.session();
        run(&mut s, "create table t (id bigint)");
        run(&mut s, "begin; insert into t values (1), (2); commit");
        run(
            &mut s,
            "begin; insert into t values (3); create table u (a int); rollback",
        );
        run(&mut s, "insert into generated.gen values (3)");
        run(&mut s, "create table generated.also (a int)");
        run(&mut s, "begin; insert into t values (4)");
        // The session ends with its block open: nothing of it is committed.
        // Generating into a schema of persisted tables is refused.
        assert!(e.add_tables("public", vec![]).is_err());
    }
    let e = engine();
    let report = e.open_data_dir(&config).unwrap();
    assert_eq!(report.records_replayed, 2);
    let mut s = e.session();
    assert_eq!(count(&mut s, "t"), 2);
    assert!(!exists(&mut s, "u"));
    assert!(!e.runtime().catalog().schema_exists("generated"));
    drop(s);
    drop(e);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn keys_lengths_and_not_null_are_enforced_with_their_sqlstates() {
    let e = engine();
    let mut s = e.session();
    run(&mut s, "create table nn (a int not null, b varchar)");
    let err = fails(&mut s, "insert into nn values (null, 'x')");
    assert_eq!(sqlstate::of(&err), "23502", "{err}");
    assert_eq!(count(&mut s, "nn"), 0);
    run(
        &mut s,
        "create table k (id int primary key, code varchar(3) unique, n int, unique (n, code))",
    );
    run(
        &mut s,
        "insert into k values (1, 'a', 1), (2, 'b', null), (3, null, 1), (4, null, 1)",
    );
    for (sql, state) in [
        ("insert into k values (1, 'z', 9)", "23505"),
        ("insert into k values (5, 'a', 9)", "23505"),
        // Twice within one statement.
        ("insert into k values (5, 'q', 8), (6, 'q', 7)", "23505"),
        ("insert into k values (5, 'b', null)", "23505"),
        ("insert into k values (null, 'r', 7)", "23502"),
        ("insert into k values (7, 'long', 7)", "22001"),
        ("insert into k select id + 10, code, n from k", "23505"),
        ("update k set id = 1 where id = 2", "23505"),
        ("update k set code = 'abcd' where id = 2", "22001"),
    ] {
        let err = fails(&mut s, sql);
        assert_eq!(sqlstate::of(&err), state, "{sql}: {err}");
    }
    assert_eq!(count(&mut s, "k"), 4);
    // A NULL in a key never conflicts; multibyte characters count as one.
    run(
        &mut s,
        "insert into k values (5, null, null), (6, null, null), (7, 'äöü', 2)",
    );
    // A value a DELETE freed, or an UPDATE moved away from, is free again.
    run(&mut s, "delete from k where id = 1");
    run(&mut s, "update k set id = 20 where id = 2");
    run(&mut s, "insert into k values (1, 'a', 1), (2, 'c', 3)");
    assert_eq!(count(&mut s, "k"), 8);
    // A failed statement inside a block leaves its rows out after ROLLBACK.
    run(&mut s, "begin");
    run(&mut s, "insert into k values (30, 'x', 30)");
    assert_eq!(
        sqlstate::of(&fails(&mut s, "insert into k values (30, 'y', 31)")),
        "23505"
    );
    run(&mut s, "rollback");
    assert_eq!(count(&mut s, "k"), 8);
    for (sql, state) in [
        ("create table c (a char(2))", "0A000"),
        ("create table ck (a int check (a > 0))", "0A000"),
        ("create table fk (a int references k (id))", "0A000"),
        (
            "create table pk2 (a int primary key, b int, primary key (b))",
            "42P16",
        ),
        ("create table nk (a int, unique (b))", "42703"),
        (
            "create table nd (a int, unique nulls not distinct (a))",
            "0A000",
        ),
    ] {
        let err = fails(&mut s, sql);
        assert_eq!(sqlstate::of(&err), state, "{sql}: {err}");
    }
}

#[test]
fn a_key_value_committed_first_fails_the_second_transaction() {
    let e = engine();
    let mut a = e.session();
    let mut b = e.session();
    run(&mut a, "create table kk (id int primary key)");
    run(&mut a, "begin");
    run(&mut b, "begin");
    run(&mut a, "insert into kk values (1)");
    // b does not see a's row: its own insert passes its statement check.
    run(&mut b, "insert into kk values (1), (2)");
    run(&mut a, "commit");
    let err = fails(&mut b, "commit");
    assert_eq!(sqlstate::of(&err), "23505", "{err}");
    assert_eq!(count(&mut a, "kk"), 1);
}

#[test]
fn keys_lengths_and_defaults_survive_a_restart() {
    let (dir, config) = fresh_data_dir("keys");
    {
        let e = engine();
        e.open_data_dir(&config).unwrap();
        let mut s = e.session();
        run(
            &mut s,
            "create table kd (id int, v varchar(2), d int default 7, \
             constraint kd_id primary key (id))",
        );
        run(&mut s, "insert into kd values (1, 'a', 0)");
    }
    let e = engine();
    e.open_data_dir(&config).unwrap();
    let mut s = e.session();
    let dup = fails(&mut s, "insert into kd (id, v) values (1, 'b')");
    assert_eq!(sqlstate::of(&dup), "23505", "{dup}");
    assert!(dup.to_string().contains("kd_id"), "{dup}");
    let long = fails(&mut s, "insert into kd (id, v) values (2, 'abc')");
    assert_eq!(sqlstate::of(&long), "22001", "{long}");
    run(&mut s, "insert into kd (id, v) values (2, 'ab')");
    assert_eq!(count(&mut s, "kd"), 2);
    // The default came back with the table.
    let out = s.query("select d from kd where id = 2").unwrap();
    let d = arrow::array::AsArray::as_primitive::<arrow::datatypes::Int32Type>(
        out.batches[0].column(0),
    )
    .value(0);
    assert_eq!(d, 7);
    drop(s);
    drop(e);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bulk_writes_commit_with_their_block_and_a_lost_commit_leaves_no_file() {
    let (dir, config) = fresh_data_dir("bulk");
    let files = || std::fs::read_dir(dir.join("bulk")).unwrap().count();
    let storage = |s: &mut Session| -> (i64, i64) {
        let out = s
            .query("select bulk_files, bulk_write_size from stride.storage")
            .unwrap();
        let int = |i: usize| {
            arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(
                out.batches[0].column(i),
            )
            .value(0)
        };
        (int(0), int(1))
    };
    {
        let e = engine();
        e.open_data_dir(&config).unwrap();
        let mut a = e.session();
        let mut b = e.session();
        assert_eq!(storage(&mut a), (0, 8 << 20));
        run(&mut a, "set stride.bulk_write_size = '16kB'");
        assert_eq!(storage(&mut a).1, 16 << 10);
        let many = "select g as id from generate_series(1, 100000) g";
        // Small writes stay in the log.
        run(&mut a, "create table small as select 1 as id");
        assert_eq!(files(), 0);
        // A rolled back block writes nothing; a committed one its file.
        run(
            &mut a,
            &format!("begin; create table big as {many}; rollback"),
        );
        assert_eq!(files(), 0);
        run(
            &mut a,
            &format!("begin; create table big as {many}; commit"),
        );
        assert_eq!((files(), storage(&mut a).0), (1, 1));
        // Both append to and replace the same table: the loser's file goes.
        run(&mut a, &format!("begin; insert into big {many}"));
        run(
            &mut b,
            &format!("begin; create or replace table big as {many}"),
        );
        run(&mut b, "commit");
        let err = fails(&mut a, "commit");
        assert_eq!(sqlstate::of(&err), "40001", "{err}");
        assert_eq!((files(), storage(&mut a).0), (2, 2));
        // An append as a bulk write.
        run(&mut a, &format!("insert into big {many}"));
        assert_eq!(files(), 3);
    }
    let e = engine();
    let report = e.open_data_dir(&config).unwrap();
    assert_eq!(report.bulk_files_loaded, 3);
    let mut s = e.session();
    assert_eq!(count(&mut s, "big"), 200_000);
    assert_eq!(count(&mut s, "small"), 1);
    drop(s);
    drop(e);
    std::fs::remove_dir_all(&dir).unwrap();
}

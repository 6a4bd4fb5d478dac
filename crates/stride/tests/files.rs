//! Loading Parquet and CSV files through SQL, and the errors bad files give.

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use stride_sched::SchedulerConfig;
use stride_sql::{Engine, EngineConfig, FileAccess, SqlError};

fn engine() -> Arc<Engine> {
    let engine = Engine::new(EngineConfig {
        scheduler: SchedulerConfig {
            workers: 2,
            pin_workers: false,
            morsels: stride_sched::MorselPolicy::Fixed(7),
            ..Default::default()
        },
        ..Default::default()
    });
    engine.runtime().set_file_access(FileAccess::Any);
    engine
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("stride-files-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn single_i64(session: &mut stride_sql::Session, sql: &str) -> i64 {
    let out = session.query(sql).unwrap();
    let batch = out.batches.iter().find(|b| b.num_rows() > 0).unwrap();
    batch
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .value(0)
}

#[test]
fn parquet_round_trip_through_create_external_table() {
    let dir = temp_dir("parquet");
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..1000)),
            Arc::new(StringArray::from_iter(
                (0..1000).map(|i| (i % 3 != 0).then(|| format!("n{i}"))),
            )),
        ],
    )
    .unwrap();
    let path = dir.join("t.parquet");
    stride_storage::files::write_parquet(&path, &schema, &[batch]).unwrap();

    let engine = engine();
    let mut session = engine.session();
    session
        .execute(&format!(
            "CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION '{}'",
            path.display()
        ))
        .unwrap();
    assert_eq!(single_i64(&mut session, "SELECT count(*) FROM t"), 1000);
    assert_eq!(single_i64(&mut session, "SELECT count(name) FROM t"), 666);
    assert_eq!(
        single_i64(
            &mut session,
            "SELECT CAST(sum(id) AS BIGINT) FROM t WHERE name IS NULL"
        ),
        (0..1000).filter(|i| i % 3 == 0).sum::<i64>()
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn csv_with_header_is_loaded_and_typed() {
    let dir = temp_dir("csv");
    let path = dir.join("t.csv");
    std::fs::write(&path, "a,b\n1,x\n2,y\n3,\n").unwrap();
    let engine = engine();
    let mut session = engine.session();
    session
        .execute(&format!(
            "CREATE EXTERNAL TABLE c STORED AS CSV LOCATION '{}' OPTIONS ('format.has_header' 'true')",
            path.display()
        ))
        .unwrap();
    assert_eq!(
        single_i64(&mut session, "SELECT CAST(sum(a) AS BIGINT) FROM c"),
        6
    );
    assert_eq!(
        single_i64(&mut session, "SELECT count(*) FROM c WHERE b = 'y'"),
        1
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_file_larger_than_the_share_fails_to_load_with_53200_and_holds_nothing() {
    let dir = temp_dir("big");
    let path = dir.join("big.csv");
    let mut text = String::from("id,comment\n");
    for i in 0..200_000 {
        text.push_str(&format!("{i},a comment of some forty characters {i}\n"));
    }
    std::fs::write(&path, text).unwrap();
    let engine = engine();
    let mut session = engine.session();
    session
        .execute("SET stride.query_memory_limit = '1MB'")
        .unwrap();
    let create = format!(
        "CREATE EXTERNAL TABLE big STORED AS CSV LOCATION '{}'",
        path.display()
    );
    let err = session.execute(&create).unwrap_err();
    assert_eq!(stride_server::sqlstate::of(&err), "53200", "{err}");
    assert!(err.to_string().contains("file load"), "{err}");
    assert_eq!(
        engine.runtime().memory().used(),
        0,
        "the load's charge is returned"
    );
    assert!(session.execute("SELECT count(*) FROM big").is_err());
    // Within the default share it loads.
    session
        .execute("SET stride.query_memory_limit = default")
        .unwrap();
    session.execute(&create).unwrap();
    assert_eq!(
        engine.runtime().memory().used(),
        0,
        "a loaded table is not query memory"
    );
    assert_eq!(
        single_i64(&mut session, "SELECT count(*) FROM big"),
        200_000
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn missing_and_corrupt_files_give_clear_errors() {
    let dir = temp_dir("bad");
    let engine = engine();
    let mut session = engine.session();
    let err = session
        .execute(
            "CREATE EXTERNAL TABLE m STORED AS PARQUET LOCATION '/nonexistent/stride/x.parquet'",
        )
        .unwrap_err();
    assert!(matches!(err, SqlError::Storage(_)), "{err:?}");
    assert!(
        err.to_string().contains("/nonexistent/stride/x.parquet"),
        "{err}"
    );

    let corrupt = dir.join("corrupt.parquet");
    std::fs::write(&corrupt, b"this is not parquet").unwrap();
    let err = session
        .execute(&format!(
            "CREATE EXTERNAL TABLE m STORED AS PARQUET LOCATION '{}'",
            corrupt.display()
        ))
        .unwrap_err();
    assert!(err.to_string().to_lowercase().contains("parquet"), "{err}");

    let err = session
        .execute("CREATE EXTERNAL TABLE j STORED AS JSON LOCATION '/tmp/x.json'")
        .unwrap_err();
    assert!(matches!(err, SqlError::Unsupported(_)), "{err:?}");
    // The session is still usable.
    assert_eq!(
        single_i64(&mut session, "SELECT count(*) FROM (VALUES (1), (2)) v(x)"),
        2
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn file_access_is_confined() {
    let dir = temp_dir("confined");
    let inside = dir.join("t.csv");
    std::fs::write(&inside, "a,b\n1,x\n2,y\n").unwrap();
    let engine = engine();
    let mut session = engine.session();
    let create = |loc: &str| {
        format!("create external table t stored as csv location '{loc}' options ('format.has_header' 'true')")
    };
    // A new engine reads no server files at all.
    engine.runtime().set_file_access(FileAccess::Denied);
    let err = session
        .execute(&create(inside.to_str().unwrap()))
        .unwrap_err();
    assert!(matches!(err, SqlError::InsufficientPrivilege(_)), "{err}");
    // Under an import directory: relative and absolute paths inside it.
    engine
        .runtime()
        .set_file_access(FileAccess::Under(dir.canonicalize().unwrap()));
    session.execute(&create("t.csv")).unwrap();
    assert_eq!(single_i64(&mut session, "select count(*) from t"), 2);
    session.execute("drop table t").unwrap();
    session
        .execute(&create(inside.canonicalize().unwrap().to_str().unwrap()))
        .unwrap();
    session.execute("drop table t").unwrap();
    // Outside it: refused without telling whether the file exists.
    for outside in [
        "/etc/shadow",
        "/etc/no-such-file",
        "../../etc/passwd",
        "/dev/zero",
    ] {
        let err = session.execute(&create(outside)).unwrap_err();
        assert!(
            matches!(err, SqlError::InsufficientPrivilege(_)),
            "{outside}: {err}"
        );
    }
    // A symbolic link inside that leads out is refused too.
    let link = dir.join("escape.csv");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    let err = session.execute(&create("escape.csv")).unwrap_err();
    assert!(matches!(err, SqlError::InsufficientPrivilege(_)), "{err}");
    // Only regular files, even where any file may be read.
    engine.runtime().set_file_access(FileAccess::Any);
    let err = session.execute(&create("/dev/zero")).unwrap_err();
    assert!(
        matches!(
            err,
            SqlError::Plan {
                kind: stride_sql::PlanKind::WrongObjectType,
                ..
            }
        ),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

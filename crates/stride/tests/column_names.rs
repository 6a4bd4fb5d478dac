//! Result column names over the wire, as PostgreSQL names them
//! (`stride_sql::column_names`): what psql prints as headers, JDBC's
//! `getColumnLabel` and psycopg's `description` report. Checked in every
//! place a client learns them: a simple query's RowDescription (planned in
//! full and from the plan cache), a prepared statement's Describe and its
//! rows, a cursor's FETCH, COPY … TO's CSV header, and in-process results.

mod common;

use std::net::SocketAddr;
use std::sync::OnceLock;

use tokio_postgres::{Client, SimpleQueryMessage};

fn server() -> SocketAddr {
    static SERVER: OnceLock<SocketAddr> = OnceLock::new();
    *SERVER.get_or_init(|| {
        let engine = common::test_engine(2);
        let mut s = engine.session();
        s.execute(
            "CREATE TABLE cn (a INT, b INT, s VARCHAR, d DATE, x DOUBLE PRECISION);
             INSERT INTO cn VALUES (1, 2, 'p', DATE '2024-03-01', 1.5),
                                   (3, 4, 'q', DATE '2025-07-09', 2.5)",
        )
        .unwrap();
        let config = stride_server::ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Default::default()
        };
        common::client::serve(engine, config, 2)
    })
}

async fn connect() -> Client {
    common::client::connect(server(), "stride").await
}

/// The column names of the (last) result of a simple query.
async fn simple_names(client: &Client, sql: &str) -> Vec<String> {
    let messages = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    let mut names = None;
    for m in messages {
        if let SimpleQueryMessage::RowDescription(columns) = m {
            names = Some(columns.iter().map(|c| c.name().to_string()).collect());
        }
    }
    names.unwrap_or_else(|| panic!("{sql}: no RowDescription"))
}

/// Statements and the names PostgreSQL gives their result columns.
const CASES: &[(&str, &[&str])] = &[
    ("SELECT 1 + 1", &["?column?"]),
    ("SELECT 'x'", &["?column?"]),
    ("SELECT count(*) FROM cn", &["count"]),
    ("SELECT sum(a), max(b) FROM cn", &["sum", "max"]),
    // Duplicates, as PostgreSQL allows them.
    ("SELECT count(*), count(a) FROM cn", &["count", "count"]),
    ("SELECT NULL, NULL", &["?column?", "?column?"]),
    ("SELECT a, a, cn.a FROM cn", &["a", "a", "a"]),
    ("SELECT a, b AS a FROM cn", &["a", "a"]),
    (
        "SELECT count(a) FILTER (WHERE a > 1), min(b) FILTER (WHERE b > 0) FROM cn",
        &["count", "min"],
    ),
    (
        "SELECT row_number() OVER (ORDER BY a), rank() OVER (PARTITION BY b ORDER BY a) FROM cn",
        &["row_number", "rank"],
    ),
    (
        "SELECT s::text, d::date, x::int, x::text FROM cn",
        &["s", "d", "x", "x"],
    ),
    (
        "SELECT CAST(1 AS int), 1::bigint, '1.5'::double precision, 'x'::varchar",
        &["int4", "int8", "float8", "varchar"],
    ),
    ("SELECT TRUE, DATE '2024-01-01'", &["bool", "date"]),
    (
        "SELECT CASE WHEN a > 1 THEN 'x' ELSE 'y' END FROM cn",
        &["case"],
    ),
    (
        "SELECT coalesce(a, b), NULLIF(a, b), greatest(a, b) FROM cn",
        &["coalesce", "nullif", "greatest"],
    ),
    ("SELECT (SELECT max(a) FROM cn)", &["max"]),
    ("SELECT cn.a, cn.b AS \"Bee\" FROM cn", &["a", "Bee"]),
    (
        "SELECT a + 1, -a, a IS NULL, a = 1 FROM cn",
        &["?column?", "?column?", "?column?", "?column?"],
    ),
    (
        "SELECT upper(s), pg_catalog.lower(s) FROM cn",
        &["upper", "lower"],
    ),
    ("SELECT EXTRACT(year FROM d) FROM cn", &["extract"]),
    ("SELECT current_date", &["current_date"]),
    (
        "SELECT a FROM cn UNION ALL SELECT b AS other FROM cn",
        &["a"],
    ),
    (
        "SELECT count(*) FROM cn UNION SELECT 7 ORDER BY 1",
        &["count"],
    ),
    ("VALUES (1, 'x'), (2, 'y')", &["column1", "column2"]),
    ("SELECT * FROM cn", &["a", "b", "s", "d", "x"]),
    (
        "SELECT cn.*, 1 FROM cn",
        &["a", "b", "s", "d", "x", "?column?"],
    ),
    (
        "SELECT * FROM (SELECT count(*), sum(a) FROM cn) t",
        &["count", "sum"],
    ),
    (
        "WITH w AS (SELECT max(a), 2 * 3 FROM cn) SELECT * FROM w",
        &["max", "?column?"],
    ),
    (
        "SELECT t.a, u.a FROM cn t JOIN cn u ON t.a = u.a",
        &["a", "a"],
    ),
];

#[test]
fn simple_queries_name_columns_as_postgresql() {
    common::client::runtime().block_on(async {
        let client = connect().await;
        for (sql, want) in CASES {
            assert_eq!(simple_names(&client, sql).await, *want, "{sql}");
        }
    });
}

#[test]
fn prepared_statements_describe_and_return_the_same_names() {
    common::client::runtime().block_on(async {
        let client = connect().await;
        for (sql, want) in CASES {
            // Describe of the prepared statement.
            let statement = client
                .prepare(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
            let described: Vec<&str> = statement.columns().iter().map(|c| c.name()).collect();
            assert_eq!(described, *want, "{sql} (Describe)");
            // tokio-postgres names the rows by the Describe; the rows of
            // a prepared execution must match it column for column.
            let rows = client
                .query(&statement, &[])
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
            if let Some(row) = rows.first() {
                assert_eq!(row.columns().len(), want.len(), "{sql}");
            }
        }
        // With a parameter, and executed twice (the statement's own cached
        // plan).
        let statement = client
            .prepare("SELECT count(*), max(b), a + $1 FROM cn WHERE a >= $1 GROUP BY a ORDER BY a")
            .await
            .unwrap();
        let described: Vec<&str> = statement.columns().iter().map(|c| c.name()).collect();
        assert_eq!(described, ["count", "max", "?column?"]);
        for v in [0_i32, 2] {
            let rows = client.query(&statement, &[&v]).await.unwrap();
            assert!(!rows.is_empty());
        }
    });
}

#[test]
fn plan_cache_hits_keep_the_names() {
    common::client::runtime().block_on(async {
        let client = connect().await;
        let hits = |rows: Vec<SimpleQueryMessage>| -> i64 {
            rows.into_iter()
                .find_map(|m| match m {
                    SimpleQueryMessage::Row(r) => r.get(0).map(|v| v.parse().unwrap()),
                    _ => None,
                })
                .unwrap()
        };
        let before = hits(
            client
                .simple_query("SELECT hits FROM stride.plan_cache_stats")
                .await
                .unwrap(),
        );
        // One shape, its literal masked: planned once, then run from the
        // cache with each text's value — named as written every time.
        for v in 1..=3 {
            let sql = format!(
                "SELECT count(*), sum(b), b = {v}, a AS k FROM cn WHERE a > {v} GROUP BY a, b"
            );
            assert_eq!(
                simple_names(&client, &sql).await,
                ["count", "sum", "?column?", "k"],
                "{sql}"
            );
        }
        let after = hits(
            client
                .simple_query("SELECT hits FROM stride.plan_cache_stats")
                .await
                .unwrap(),
        );
        assert!(after >= before + 2, "cache hits {before} → {after}");
    });
}

#[test]
fn cursors_fetch_with_the_names() {
    common::client::runtime().block_on(async {
        let client = connect().await;
        client.simple_query("BEGIN").await.unwrap();
        client
            .simple_query("DECLARE c CURSOR FOR SELECT count(*), max(a), a + 1 FROM cn GROUP BY a")
            .await
            .unwrap();
        assert_eq!(
            simple_names(&client, "FETCH 1 FROM c").await,
            ["count", "max", "?column?"]
        );
        // FETCH prepared: its Describe reports the cursor's columns.
        let fetch = client.prepare("FETCH 1 FROM c").await.unwrap();
        let described: Vec<&str> = fetch.columns().iter().map(|c| c.name()).collect();
        assert_eq!(described, ["count", "max", "?column?"]);
        client.simple_query("COMMIT").await.unwrap();
    });
}

#[test]
fn copy_to_stdout_writes_the_names_as_its_header() {
    use futures_util::StreamExt;
    common::client::runtime().block_on(async {
        let client = connect().await;
        let stream = client
            .copy_out("COPY (SELECT count(*), 1 + 1, max(a) AS top FROM cn) TO STDOUT (FORMAT csv, HEADER)")
            .await
            .unwrap();
        let chunks: Vec<_> = stream.collect().await;
        let text: String = chunks
            .into_iter()
            .map(|c| String::from_utf8(c.unwrap().to_vec()).unwrap())
            .collect();
        assert_eq!(text.lines().next(), Some("count,?column?,top"), "{text}");
    });
}

#[test]
fn in_process_results_carry_the_names() {
    let engine = common::test_engine(1);
    let mut s = engine.session();
    let out = s
        .query("SELECT count(*), 1 + 1, upper('x') FROM (VALUES (1)) v")
        .unwrap();
    let names: Vec<&str> = out
        .schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(names, ["count", "?column?", "upper"]);
    for batch in &out.batches {
        assert_eq!(batch.schema().fields().len(), 3);
        assert_eq!(batch.schema().field(0).name(), "count");
    }
}

//! The catalogs real clients read (`pg_catalog`, `information_schema`),
//! checked through the clients themselves: psql's meta-commands, SQLAlchemy's
//! reflection and pgjdbc's `DatabaseMetaData`; and psycopg's server-side
//! cursors (DECLARE / FETCH / CLOSE).
//!
//! `scripts/setup.sh` installs the clients (psql and pgjdbc from Debian,
//! SQLAlchemy and psycopg from PyPI, `scripts/requirements-test.txt`).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

/// Schemas the psql, SQLAlchemy and pandas tests create on the shared
/// server while the others run.
const OTHER_TESTS_SCHEMAS: [&str; 4] = ["psql_meta", "psql_desc", "sa_reflect", "pd_read"];

fn server() -> SocketAddr {
    static SERVER: OnceLock<SocketAddr> = OnceLock::new();
    *SERVER.get_or_init(|| {
        let engine = common::test_engine(2);
        let config = stride_server::ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Default::default()
        };
        common::client::serve(engine, config, 2)
    })
}

use common::client::run_program as output;

/// A psql command line for `commands` (`-c` each, unaligned output, stop
/// at the first error).
fn psql_command(commands: &[&str]) -> Command {
    let addr = server();
    let mut cmd = Command::new("psql");
    cmd.args(["-X", "--no-psqlrc", "-A", "-v", "ON_ERROR_STOP=1"])
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(["-U", "stride", "-d", "stride"]);
    for c in commands {
        cmd.args(["-c", c]);
    }
    cmd
}

/// Runs psql commands; their output, which must be a success.
fn psql(commands: &[&str]) -> String {
    output(psql_command(commands), "psql")
}

/// What psql wrote to stderr for `command`.
fn psql_stderr(command: &str) -> String {
    let out = psql_command(&[command]).output().expect("psql runs");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn program(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn psql_meta_commands_list_the_live_catalog() {
    psql(&[
        "create schema psql_meta",
        "create table psql_meta.animals (id int not null, name varchar)",
        "create table public.psql_plants (id int)",
    ]);
    let dt = psql(&["\\dt"]);
    assert!(
        dt.contains("public|psql_plants|table|stride"),
        "\\dt lists the search path's tables: {dt}"
    );
    assert!(
        !dt.contains("animals"),
        "\\dt shows visible tables only: {dt}"
    );
    let dt = psql(&["\\dt psql_meta.*"]);
    assert!(dt.contains("psql_meta|animals|table|stride"), "{dt}");
    let dn = psql(&["\\dn"]);
    assert!(
        dn.contains("psql_meta|stride") && dn.contains("public|stride"),
        "{dn}"
    );
    assert!(
        !dn.contains("pg_catalog"),
        "\\dn hides system schemas: {dn}"
    );
    let l = psql(&["\\l"]);
    assert!(l.contains("stride|stride|UTF8|C|C|"), "{l}");
    let du = psql(&["\\du"]);
    assert!(
        du.contains("stride|Superuser"),
        "\\du lists the roles: {du}"
    );
    // Stride has no user-defined functions: an empty list, not an error.
    let df = psql(&["\\df"]);
    assert!(df.contains("(0 rows)"), "{df}");
    psql(&["drop table psql_meta.animals", "drop schema psql_meta"]);
    let dt = psql(&["\\dt psql_meta.*"]);
    assert!(
        !dt.contains("animals"),
        "dropped tables leave the catalog: {dt}"
    );
    psql(&["drop table public.psql_plants"]);
}

/// The lines of a psql output that hold `|`-separated cells (the table's
/// rows and header, not its title or footers).
fn cells(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.contains('|')).collect()
}

/// Checks that psql's `\d pattern` titles the table `title` and lists
/// `columns` (name|type|collation|nullable|default).
fn describes(pattern: &str, title: &str, columns: &[&str]) {
    let command = format!("\\d {pattern}");
    let d = psql(&[command.as_str()]);
    assert!(d.contains(&format!("Table \"{title}\"")), "{d}");
    let mut expected = vec!["Column|Type|Collation|Nullable|Default"];
    expected.extend_from_slice(columns);
    assert_eq!(cells(&d), expected, "{d}");
}

#[test]
fn psql_describes_tables_columns_and_types() {
    psql(&[
        "create schema psql_desc",
        "create table psql_desc.birds (id bigint not null, name varchar, weight double precision, seen date)",
        "create table public.psql_trees (id int not null, height numeric(6, 2), planted timestamp, tall boolean not null)",
    ]);
    describes(
        "psql_trees",
        "public.psql_trees",
        &[
            "id|integer||not null|",
            "height|numeric(6,2)|||",
            "planted|timestamp without time zone|||",
            "tall|boolean||not null|",
        ],
    );
    describes(
        "psql_desc.birds",
        "psql_desc.birds",
        &[
            "id|bigint||not null|",
            "name|text|||",
            "weight|double precision|||",
            "seen|date|||",
        ],
    );
    // \d+ adds storage, compression, statistics target and description.
    let d = psql(&["\\d+ psql_desc.birds"]);
    let rows = cells(&d);
    assert_eq!(
        rows[0],
        "Column|Type|Collation|Nullable|Default|Storage|Compression|Stats target|Description",
        "{d}"
    );
    assert!(rows[1].starts_with("id|bigint||not null||plain|"), "{d}");
    assert!(rows[2].starts_with("name|text||||extended|"), "{d}");
    assert!(
        !d.contains("Replica Identity"),
        "a table has the default replica identity: {d}"
    );
    // A table psql cannot find is an error, as in PostgreSQL.
    let missing = psql_stderr("\\d psql_no_such_table");
    assert!(
        missing.contains("Did not find any relation named \"psql_no_such_table\""),
        "{missing}"
    );
    // \d without a pattern lists the visible relations; \dv, \di and \ds
    // find no views, indexes or sequences (Stride has none of its own).
    let d = psql(&["\\d"]);
    assert!(d.contains("public|psql_trees|table|stride"), "{d}");
    assert!(!d.contains("birds"), "{d}");
    for command in ["\\dv", "\\di", "\\ds"] {
        let err = psql_stderr(command);
        assert!(
            err.contains("Did not find any relations"),
            "{command}: {err}"
        );
    }
    psql(&[
        "drop table psql_desc.birds",
        "drop schema psql_desc",
        "drop table public.psql_trees",
    ]);
}

/// Runs the Python program at `path` against the shared server; its
/// standard output.
fn python(path: &str, what: &str) -> String {
    let addr = server();
    let mut cmd = Command::new("python3");
    cmd.arg(path)
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string());
    output(cmd, what)
}

#[test]
fn sqlalchemy_connects_reflects_and_queries() {
    let out = python(&program("sqlalchemy_reflect.py"), "SQLAlchemy");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "version 16.0",
            "isolation REPEATABLE READ",
            "tables orders",
            "column id INTEGER not null",
            "column note TEXT null",
            "column total NUMERIC(10, 2) null",
            "query 6.50",
            "duplicate 23505 customers_email_key",
            "too long 22001",
            "pk {'constrained_columns': ['id'], 'name': 'customers_pkey', 'comment': None, \
             'dialect_options': {'postgresql_include': []}}",
            "unique [('customers_email_key', ['email'])]",
            "indexes [('customers_email_key', True, ['email'])]",
            "autoload [('id', 'INTEGER', True), ('email', 'VARCHAR(20)', False), \
             ('name', 'VARCHAR(40)', False)]",
            "read_sql_table {'id': [1, 2], 'email': ['a@x.org', 'b@x.org'], 'name': ['Ann', nan]}",
        ],
        "{out}"
    );
}

/// pandas through a SQLAlchemy engine with its defaults (psycopg's hstore
/// lookup inside a SAVEPOINT): read_sql with bound parameters and parsed
/// dates, to_sql and back, and read_sql_query over a plain psycopg
/// connection.
#[test]
fn pandas_reads_and_writes_through_sqlalchemy_and_psycopg() {
    let out = python(&program("pandas_read_sql.py"), "pandas");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "grouped {'region': ['north', 'south'], 'total': [15.75, 20.0], 'n': [2, 1]}",
            "dtypes str,float64,int64",
            "table 3 id,region,amount,day,ratio datetime64[s] 1",
            "to_sql {'k': [1, 2, 3], 'label': ['a', 'b', nan], 'v': [0.25, 0.5, 0.75]}",
            "psycopg [1, 2, 3] [0.5]",
        ],
        "{out}"
    );
}

#[test]
fn jdbc_metadata_browses_schemas_and_tables() {
    let addr = server();
    let mut cmd = Command::new("java");
    cmd.args([
        "-cp",
        "/usr/share/java/postgresql.jar",
        &program("JdbcMetadata.java"),
    ])
    .arg(addr.ip().to_string())
    .arg(addr.port().to_string());
    let out = output(cmd, "pgjdbc");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "product PostgreSQL 16", "{out}");
    // The psql tests share this server and create their own schemas at
    // any moment: leave those out, keep the order of the rest.
    let schemas: Vec<&str> = lines[1]
        .strip_prefix("schemas ")
        .unwrap_or_else(|| panic!("{out}"))
        .split(',')
        .filter(|s| !OTHER_TESTS_SCHEMAS.contains(s))
        .collect();
    assert_eq!(
        schemas,
        ["information_schema", "jdbc_meta", "pg_catalog", "public"],
        "{out}"
    );
    assert_eq!(lines[2], "tables jdbc_meta.items:TABLE", "{out}");
    // pgjdbc numbers the columns with row_number() OVER (...).
    assert_eq!(
        lines[3], "columns id:int4:0,name:text:1,price:numeric:1",
        "{out}"
    );
    assert_eq!(lines[4], "query ink", "{out}");
}

#[test]
fn psycopg_named_cursors_fetch_in_batches() {
    let out = python(&program("psycopg_named_cursor.py"), "psycopg named cursor");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "columns id,v",
            "first [(2, 'b'), (3, 'c')]",
            "next [(4, 'd'), (5, 'e')]",
            "rest []",
            "iterated [1, 2, 3, 4, 5]",
            "held 5",
        ],
        "{out}"
    );
}

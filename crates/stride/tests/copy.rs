//! `COPY` over the wire: psql's `\copy` both ways, psycopg's
//! `cursor.copy()` (text and binary), tokio-postgres' `copy_in` /
//! `copy_out` (the extended query protocol), raw protocol messages no
//! driver sends (CopyData outside a copy, CopyFail, a foreign message
//! mid-copy, Sync mid-copy, bad lines, a huge line), privileges and
//! server-side files.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use common::wire::{
    extended_messages, message, query_message, read_until, sqlstate_of, startup_packet,
    sync_message,
};

fn server() -> SocketAddr {
    static SERVER: OnceLock<SocketAddr> = OnceLock::new();
    *SERVER.get_or_init(|| {
        let engine = common::test_engine(2);
        engine
            .runtime()
            .set_file_access(stride_sql::FileAccess::Any);
        let config = stride_server::ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            ..Default::default()
        };
        common::client::serve(engine, config, 2)
    })
}

/// A directory of this test run's files.
fn scratch() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| common::scratch_dir("copy-test")).clone()
}

/// Runs psql as `user` with `args`; its standard output (panics if psql
/// fails).
fn psql(user: &str, args: &[&str]) -> String {
    let addr = server();
    let mut cmd = Command::new("psql");
    cmd.args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(["-U", user, "-d", "stride", "-X", "--no-psqlrc", "-q"])
        .args(["-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose"])
        .args(args);
    common::client::run_program(cmd, "psql")
}

/// Runs psql expecting it to fail; its standard error.
fn psql_fails(user: &str, args: &[&str]) -> String {
    let addr = server();
    let out = Command::new("psql")
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(["-U", user, "-d", "stride", "-X", "--no-psqlrc", "-q"])
        .args(["-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose"])
        .args(args)
        .output()
        .expect("psql must be installed");
    assert!(!out.status.success(), "psql succeeded: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn psql_copy_both_ways_in_csv_and_text() {
    let dir = scratch();
    let input = dir.join("people.csv");
    std::fs::write(
        &input,
        "id,name,score\n1,\"Smith, Ann\",1.5\n2,,\n3,\"say \"\"hi\"\"\nagain\",-2\n",
    )
    .unwrap();
    let output = dir.join("people_out.csv");
    let text = dir.join("people_out.txt");
    psql(
        "stride",
        &[
            "-c",
            "CREATE TABLE people (id INT, name VARCHAR, score DOUBLE)",
            "-c",
            &format!("\\copy people from '{}' csv header", input.display()),
            "-c",
            &format!(
                "\\copy (select * from people order by id) to '{}' with (format csv, header)",
                output.display()
            ),
            "-c",
            &format!("\\copy people (id, name) to '{}'", text.display()),
        ],
    );
    assert_eq!(
        std::fs::read_to_string(&output).unwrap(),
        "id,name,score\n1,\"Smith, Ann\",1.5\n2,,\n3,\"say \"\"hi\"\"\nagain\",-2\n"
    );
    let mut lines: Vec<String> = std::fs::read_to_string(&text)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        ["1\tSmith, Ann", "2\t\\N", "3\tsay \"hi\"\\nagain"],
        "text format escapes the newline and writes NULL as \\N"
    );
    // Text format back in: the escapes and NULLs survive.
    psql(
        "stride",
        &[
            "-c",
            "CREATE TABLE people_text (id INT, name VARCHAR)",
            "-c",
            &format!("\\copy people_text from '{}'", text.display()),
        ],
    );
    let back = psql(
        "stride",
        &[
            "-A",
            "-t",
            "-c",
            "select count(*), count(name), max(length(name)) from people_text",
        ],
    );
    assert_eq!(back.trim(), "3|2|14");
}

#[test]
fn psycopg_copy_text_binary_and_failures() {
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/psycopg_copy.py");
    let addr = server();
    let mut cmd = Command::new("python3");
    cmd.arg(program)
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string());
    let out = common::client::run_program(cmd, "psycopg copy");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "copied 3",
            "roundtrip True",
            "text out [('1', 'tab\\there'), ('2', None), ('3', 'line\\nbreak \\\\ back')]",
            "binary out [(1, Decimal('1.50')), (2, None), (3, Decimal('-3.25'))]",
            "binary in binary",
            "csv lines 6",
            "after copyfail 4",
            "wrong width 22P04",
            "after bad data 4",
        ],
        "{out}"
    );
}

/// A raw connection, logged in as `user` and ready for a query.
fn raw(user: &str) -> TcpStream {
    let mut s = TcpStream::connect(server()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(&startup_packet(user)).unwrap();
    read_until(&mut s, b'Z');
    s
}

/// Sends `sql` as a simple query and returns the messages up to
/// ReadyForQuery.
fn query(s: &mut TcpStream, sql: &str) -> Vec<(u8, Vec<u8>)> {
    s.write_all(&query_message(sql)).unwrap();
    read_until(s, b'Z')
}

/// The SQLSTATE of the first ErrorResponse among `msgs` (empty: none).
fn error_code(msgs: &[(u8, Vec<u8>)]) -> String {
    msgs.iter()
        .find(|m| m.0 == b'E')
        .map(|m| sqlstate_of(&m.1))
        .unwrap_or_default()
}

/// One value of a one-row, one-column result.
fn scalar(s: &mut TcpStream, sql: &str) -> String {
    let msgs = query(s, sql);
    let row = msgs
        .iter()
        .find(|m| m.0 == b'D')
        .unwrap_or_else(|| panic!("no row for {sql}: {msgs:?}"));
    let len = i32::from_be_bytes(row.1[2..6].try_into().unwrap());
    String::from_utf8_lossy(&row.1[6..6 + len as usize]).into_owned()
}

/// Starts `COPY … FROM STDIN` and expects CopyInResponse.
fn start_copy_in(s: &mut TcpStream, sql: &str) {
    s.write_all(&query_message(sql)).unwrap();
    let msgs = read_until(s, b'G');
    assert_eq!(msgs.last().map(|m| m.0), Some(b'G'), "{sql}: {msgs:?}");
}

/// Sends `data` as CopyData then CopyDone; the reply up to ReadyForQuery.
fn copy_rows(s: &mut TcpStream, data: &[u8]) -> Vec<(u8, Vec<u8>)> {
    s.write_all(&message(b'd', data)).unwrap();
    s.write_all(&message(b'c', b"")).unwrap();
    read_until(s, b'Z')
}

#[test]
fn bad_copy_data_fails_with_its_sqlstate_and_commits_nothing() {
    let mut s = raw("stride");
    query(&mut s, "CREATE TABLE hostile (a INT, b VARCHAR)");
    let cases: [(&str, &[u8], &str); 6] = [
        ("COPY hostile FROM STDIN", b"1\tx\n2\tyy\tz\n", "22P04"),
        ("COPY hostile FROM STDIN", b"1\tx\n2\n", "22P04"),
        (
            "COPY hostile FROM STDIN",
            b"1\tx\nnot a number\ty\n",
            "22P02",
        ),
        (
            "COPY hostile FROM STDIN CSV",
            b"1,x\n2,\"unterminated\n",
            "22P04",
        ),
        ("COPY hostile FROM STDIN CSV", b"1,\"a\"\r2,b\n", "22P04"),
        (
            "COPY hostile FROM STDIN (FORMAT binary)",
            b"PGCOPY\n\xff\r\n\0trunc",
            "22P04",
        ),
    ];
    for (sql, data, code) in cases {
        start_copy_in(&mut s, sql);
        let reply = copy_rows(&mut s, data);
        assert_eq!(error_code(&reply), code, "{sql} {data:?}: {reply:?}");
        assert_eq!(scalar(&mut s, "SELECT count(*) FROM hostile"), "0");
    }
    // Invalid UTF-8 in a text value.
    start_copy_in(&mut s, "COPY hostile FROM STDIN");
    let reply = copy_rows(&mut s, b"1\t\xff\xfe\n");
    assert_eq!(error_code(&reply), "22021");

    // CopyFail carries the client's reason; nothing is committed.
    start_copy_in(&mut s, "COPY hostile FROM STDIN");
    s.write_all(&message(b'd', b"1\tx\n")).unwrap();
    s.write_all(&message(b'f', b"changed my mind\0")).unwrap();
    let reply = read_until(&mut s, b'Z');
    assert_eq!(error_code(&reply), "57014");
    let text = String::from_utf8_lossy(&reply.iter().find(|m| m.0 == b'E').unwrap().1).into_owned();
    assert!(text.contains("changed my mind"), "{text}");
    assert_eq!(scalar(&mut s, "SELECT count(*) FROM hostile"), "0");

    // A foreign message in the middle of a copy is a protocol violation of
    // the copy, not of the connection; the rest of the data is ignored.
    start_copy_in(&mut s, "COPY hostile FROM STDIN");
    s.write_all(&message(b'd', b"1\tx\n")).unwrap();
    s.write_all(&query_message("SELECT 1")).unwrap();
    let reply = read_until(&mut s, b'Z');
    assert_eq!(error_code(&reply), "08P01");
    s.write_all(&message(b'd', b"2\ty\n")).unwrap();
    s.write_all(&message(b'c', b"")).unwrap();
    assert_eq!(scalar(&mut s, "SELECT count(*) FROM hostile"), "0");

    // Flush and Sync inside a copy are ignored; good rows arrive.
    start_copy_in(&mut s, "COPY hostile FROM STDIN");
    s.write_all(&message(b'd', b"1\tx\n2\t")).unwrap();
    s.write_all(&message(b'H', b"")).unwrap();
    s.write_all(&message(b'S', b"")).unwrap();
    let reply = copy_rows(&mut s, b"\\N\n\\.\n");
    assert_eq!(error_code(&reply), "", "{reply:?}");
    let tag = reply.iter().find(|m| m.0 == b'C').unwrap();
    assert_eq!(&tag.1[..], b"COPY 2\0");
    assert_eq!(scalar(&mut s, "SELECT count(b) FROM hostile"), "1");
}

#[test]
fn stray_copy_messages_are_ignored_a_huge_line_is_one_value_and_too_much_data_fails() {
    let mut s = raw("stride");
    s.write_all(&message(b'd', b"1\tx\n")).unwrap();
    s.write_all(&message(b'c', b"")).unwrap();
    s.write_all(&message(b'f', b"nothing to fail\0")).unwrap();
    assert_eq!(scalar(&mut s, "SELECT 41 + 1"), "42");

    query(&mut s, "CREATE TABLE huge (a INT, b VARCHAR)");
    start_copy_in(&mut s, "COPY huge FROM STDIN");
    let long = "x".repeat(8 << 20);
    // One line sent in many CopyData messages.
    s.write_all(&message(b'd', b"1\t")).unwrap();
    for chunk in long.as_bytes().chunks(1 << 20) {
        s.write_all(&message(b'd', chunk)).unwrap();
    }
    let reply = copy_rows(&mut s, b"\n");
    assert_eq!(error_code(&reply), "", "{reply:?}");
    assert_eq!(
        scalar(&mut s, "SELECT length(b) FROM huge"),
        (8 << 20).to_string()
    );

    // Past 256 MiB the copy fails (54000); the rest is ignored, nothing
    // is appended, and the connection goes on.
    start_copy_in(&mut s, "COPY huge FROM STDIN");
    let line = format!("2\t{}\n", "y".repeat((1 << 20) - 3));
    for _ in 0..257 {
        s.write_all(&message(b'd', line.as_bytes())).unwrap();
    }
    let reply = copy_rows(&mut s, b"");
    assert_eq!(error_code(&reply), "54000", "{reply:?}");
    assert_eq!(scalar(&mut s, "SELECT count(*) FROM huge"), "1");
}

#[test]
fn copy_in_a_transaction_block_commits_with_it_and_a_failure_aborts_it() {
    let mut s = raw("stride");
    query(&mut s, "CREATE TABLE in_block (a INT)");
    query(&mut s, "BEGIN");
    start_copy_in(&mut s, "COPY in_block FROM STDIN");
    copy_rows(&mut s, b"1\n2\n");
    let mut other = raw("stride");
    assert_eq!(scalar(&mut other, "SELECT count(*) FROM in_block"), "0");
    query(&mut s, "COMMIT");
    assert_eq!(scalar(&mut other, "SELECT count(*) FROM in_block"), "2");

    query(&mut s, "BEGIN");
    start_copy_in(&mut s, "COPY in_block FROM STDIN");
    let reply = copy_rows(&mut s, b"3\nfour\n");
    assert_eq!(error_code(&reply), "22P02");
    assert_eq!(reply.last().map(|m| m.1.clone()), Some(b"E".to_vec()));
    assert_eq!(error_code(&query(&mut s, "SELECT 1")), "25P02");
    query(&mut s, "ROLLBACK");
    assert_eq!(scalar(&mut s, "SELECT count(*) FROM in_block"), "2");
}

#[test]
fn copy_checks_privileges_and_refuses_what_it_does_not_support() {
    let mut admin = raw("stride");
    for sql in [
        "CREATE TABLE guarded (a INT)",
        "CREATE TABLE readable (a INT)",
        "INSERT INTO readable VALUES (1)",
        "CREATE ROLE copier LOGIN",
        "GRANT SELECT ON readable TO copier",
    ] {
        assert_eq!(error_code(&query(&mut admin, sql)), "", "{sql}");
    }
    let mut user = raw("copier");
    for (sql, code) in [
        ("COPY guarded FROM STDIN", "42501"),
        ("COPY guarded TO STDOUT", "42501"),
        ("COPY (SELECT * FROM guarded) TO STDOUT", "42501"),
        ("COPY readable FROM STDIN", "42501"),
        ("COPY readable FROM '/etc/hostname'", "42501"),
        ("COPY readable TO '/tmp/out'", "42501"),
        ("COPY readable (nope) FROM STDIN", "42501"),
        ("COPY missing FROM STDIN", "42P01"),
    ] {
        assert_eq!(error_code(&query(&mut user, sql)), code, "{sql}");
    }
    // SELECT is enough to copy out.
    let reply = query(&mut user, "COPY readable TO STDOUT");
    assert!(reply.iter().any(|m| m.0 == b'H'), "{reply:?}");
    assert!(
        reply.iter().any(|m| m.0 == b'd' && m.1 == b"1\n"),
        "{reply:?}"
    );

    for (sql, code) in [
        ("COPY readable (nope) FROM STDIN", "42703"),
        (
            "COPY readable FROM STDIN (FORMAT csv, FORCE_NULL (a))",
            "0A000",
        ),
        ("COPY readable FROM STDIN (FREEZE)", "0A000"),
        ("COPY readable FROM STDIN (ENCODING 'LATIN1')", "0A000"),
        ("COPY readable FROM STDIN (QUOTE '|')", "22023"),
        ("COPY readable FROM STDIN (FORMAT csv, NULL 'a,b')", "22023"),
        ("COPY readable FROM PROGRAM 'true'", "0A000"),
        ("COPY readable TO '/tmp/stride-copy-out'", "0A000"),
    ] {
        assert_eq!(error_code(&query(&mut admin, sql)), code, "{sql}");
    }
    // A superuser reads a server file.
    let file = scratch().join("server_side.txt");
    std::fs::write(&file, "7\n8\n").unwrap();
    let reply = query(
        &mut admin,
        &format!("COPY readable FROM '{}'", file.display()),
    );
    assert_eq!(error_code(&reply), "", "{reply:?}");
    assert_eq!(scalar(&mut admin, "SELECT sum(a) FROM readable"), "16");
}

#[test]
fn psql_reports_copy_errors_with_their_sqlstate() {
    psql("stride", &["-c", "CREATE TABLE psql_bad (a INT)"]);
    let file = scratch().join("bad.txt");
    std::fs::write(&file, "1\nnope\n").unwrap();
    let err = psql_fails(
        "stride",
        &["-c", &format!("\\copy psql_bad from '{}'", file.display())],
    );
    assert!(err.contains("22P02"), "{err}");
    let count = psql(
        "stride",
        &["-A", "-t", "-c", "select count(*) from psql_bad"],
    );
    assert_eq!(count.trim(), "0");
}

/// `rows` as one CopyData payload for tokio-postgres' copy sink.
fn payload(rows: &str) -> std::collections::VecDeque<u8> {
    rows.as_bytes().iter().copied().collect()
}

/// The SQLSTATE of a driver error (empty: none).
fn driver_code(e: &tokio_postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_default()
}

/// Copies `chunks` (one CopyData each) in through tokio-postgres'
/// `copy_in`; the rows copied, or the error at CopyDone.
async fn copy_in_chunks<T>(
    client: &tokio_postgres::Client,
    statement: &T,
    chunks: &[&str],
) -> Result<u64, tokio_postgres::Error>
where
    T: ?Sized + tokio_postgres::ToStatement,
{
    use futures_util::SinkExt;
    let sink = client.copy_in(statement).await.unwrap();
    futures_util::pin_mut!(sink);
    for chunk in chunks {
        sink.send(payload(chunk)).await.unwrap();
    }
    sink.finish().await
}

/// The CopyData payloads of a `copy_out`.
async fn copy_out_chunks(client: &tokio_postgres::Client, sql: &str) -> Vec<Vec<u8>> {
    use futures_util::StreamExt;
    let stream = client.copy_out(sql).await.unwrap();
    let chunks: Vec<_> = stream.collect().await;
    chunks.into_iter().map(|c| c.unwrap().to_vec()).collect()
}

async fn count_rows(client: &tokio_postgres::Client, table: &str) -> i64 {
    let sql = format!("SELECT count(*) FROM {table}");
    client.query_one(&sql, &[]).await.unwrap().get(0)
}

#[test]
fn tokio_postgres_copies_in_and_out_through_the_extended_protocol() {
    common::client::runtime().block_on(async {
        let client = common::client::connect(server(), "stride").await;
        client
            .batch_execute("CREATE TABLE ext_copy (a INT, b VARCHAR)")
            .await
            .unwrap();
        // copy_in: Parse, Describe (NoData), then Bind, Execute and Sync at
        // once — the Sync arrives during copy-in and is ignored.
        let statement = client.prepare("COPY ext_copy FROM STDIN").await.unwrap();
        assert!(statement.columns().is_empty());
        let copied = copy_in_chunks(&client, &statement, &["1\tone\n2\t\\N\n", "3\tthree\n"]);
        assert_eq!(copied.await.unwrap(), 3);
        // The same prepared statement again, and CSV with a header.
        let copied = copy_in_chunks(&client, &statement, &["4\tfour\n"]);
        assert_eq!(copied.await.unwrap(), 1);
        let csv = "COPY ext_copy (b, a) FROM STDIN (FORMAT csv, HEADER)";
        let copied = copy_in_chunks(&client, csv, &["b,a\n\"five, 5\",5\n"]);
        assert_eq!(copied.await.unwrap(), 1);

        // copy_out: every row, in order.
        let sql = "COPY (SELECT a, b FROM ext_copy ORDER BY a) TO STDOUT";
        let text = copy_out_chunks(&client, sql).await.concat();
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "1\tone\n2\t\\N\n3\tthree\n4\tfour\n5\tfive, 5\n"
        );
        let sql = "COPY ext_copy (a) TO STDOUT (FORMAT csv, HEADER)";
        let chunks = copy_out_chunks(&client, sql).await;
        assert_eq!(chunks.len(), 6, "a header and a CopyData per row");

        // Bad data: its SQLSTATE, nothing appended, the connection goes on.
        let copied = copy_in_chunks(&client, "COPY ext_copy FROM STDIN", &["6\tsix\nseven\t7\n"]);
        let e = copied.await.unwrap_err();
        assert_eq!(driver_code(&e), "22P02", "{e:?}");
        assert_eq!(count_rows(&client, "ext_copy").await, 5);
        // A missing table fails at Execute.
        let e = client
            .copy_out("COPY ext_missing TO STDOUT")
            .await
            .err()
            .expect("no such table");
        assert_eq!(driver_code(&e), "42P01", "{e:?}");

        // Inside a transaction block: rolled back with it.
        client.batch_execute("BEGIN").await.unwrap();
        let copied = copy_in_chunks(&client, "COPY ext_copy FROM STDIN", &["9\tnine\n"]);
        assert_eq!(copied.await.unwrap(), 1);
        assert_eq!(
            count_rows(&client, "ext_copy").await,
            6,
            "the block sees its copy"
        );
        client.batch_execute("ROLLBACK").await.unwrap();

        // A sink dropped unfinished sends CopyFail: nothing appended.
        {
            use futures_util::SinkExt;
            let sink = client.copy_in("COPY ext_copy FROM STDIN").await.unwrap();
            futures_util::pin_mut!(sink);
            sink.send(payload("10\tten\n")).await.unwrap();
        }
        assert_eq!(count_rows(&client, "ext_copy").await, 5);

        // copy_in of a missing table fails at Execute too. (tokio-postgres
        // then sends CopyFail and a second Sync, whose ReadyForQuery — sent
        // by PostgreSQL as well — it hands to its next request: this
        // client is done.)
        let e = client
            .copy_in::<_, std::collections::VecDeque<u8>>("COPY ext_missing FROM STDIN")
            .await
            .err()
            .expect("no such table");
        assert_eq!(driver_code(&e), "42P01", "{e:?}");
        let other = common::client::connect(server(), "stride").await;
        assert_eq!(count_rows(&other, "ext_copy").await, 5);
    });
}

/// Sends the extended messages of `sql` and Sync; the reply up to the
/// first CopyInResponse.
fn start_extended_copy_in(s: &mut TcpStream, sql: &str) -> Vec<(u8, Vec<u8>)> {
    let mut out = extended_messages(sql);
    out.extend(sync_message());
    s.write_all(&out).unwrap();
    let msgs = read_until(s, b'G');
    let tags: Vec<u8> = msgs.iter().map(|m| m.0).collect();
    assert_eq!(tags, b"12nG", "{sql}: {msgs:?}");
    msgs
}

/// Writes `messages`, then Sync; the reply up to ReadyForQuery.
fn then_sync(s: &mut TcpStream, messages: &[Vec<u8>]) -> Vec<(u8, Vec<u8>)> {
    for m in messages {
        s.write_all(m).unwrap();
    }
    s.write_all(&sync_message()).unwrap();
    read_until(s, b'Z')
}

/// The message tags of a reply.
fn tags(reply: &[(u8, Vec<u8>)]) -> Vec<u8> {
    reply.iter().map(|m| m.0).collect()
}

/// Asserts that `reply` is one error with `code`, then ReadyForQuery.
fn assert_one_error(reply: &[(u8, Vec<u8>)], code: &str) {
    assert_eq!(tags(reply), b"EZ", "{reply:?}");
    assert_eq!(error_code(reply), code);
}

#[test]
fn extended_copy_ignores_sync_mid_copy_and_skips_to_sync_after_an_error() {
    let mut s = raw("stride");
    query(&mut s, "CREATE TABLE ext_raw (a INT)");
    let data = |rows: &[u8]| message(b'd', rows);
    let done = || message(b'c', b"");
    let insert = || extended_messages("INSERT INTO ext_raw VALUES (100)");
    // Sync after Execute and between CopyData messages (Flush too):
    // ignored; the command completes at CopyDone, ReadyForQuery answers the
    // Sync after it, once.
    start_extended_copy_in(&mut s, "COPY ext_raw FROM STDIN");
    let reply = then_sync(
        &mut s,
        &[
            data(b"1\n"),
            sync_message(),
            message(b'H', b""),
            data(b"2\n"),
            done(),
        ],
    );
    assert_eq!(tags(&reply), b"CZ", "{reply:?}");
    assert_eq!(reply[0].1, b"COPY 2\0");
    assert_eq!(scalar(&mut s, "SELECT sum(a) FROM ext_raw"), "3");

    // A foreign message mid-copy: 08P01, then everything up to Sync (the
    // rest of the copy, another statement) skipped; nothing appended.
    start_extended_copy_in(&mut s, "COPY ext_raw FROM STDIN");
    let reply = then_sync(
        &mut s,
        &[
            data(b"4\n"),
            extended_messages("SELECT 1"),
            data(b"5\n"),
            done(),
            insert(),
        ],
    );
    assert_one_error(&reply, "08P01");
    assert_eq!(scalar(&mut s, "SELECT sum(a) FROM ext_raw"), "3");

    // CopyFail: 57014, skipped to Sync.
    start_extended_copy_in(&mut s, "COPY ext_raw FROM STDIN");
    let reply = then_sync(
        &mut s,
        &[
            data(b"6\n"),
            message(b'f', b"changed my mind\0"),
            data(b"7\n"),
        ],
    );
    assert_one_error(&reply, "57014");

    // A bad line, reported at CopyDone: 22P02, skipped to Sync.
    start_extended_copy_in(&mut s, "COPY ext_raw FROM STDIN");
    let reply = then_sync(&mut s, &[data(b"8\neight\n"), done(), insert()]);
    assert_one_error(&reply, "22P02");
    assert_eq!(scalar(&mut s, "SELECT sum(a) FROM ext_raw"), "3");

    // Inside a transaction block, a failed copy aborts the block.
    query(&mut s, "BEGIN");
    start_extended_copy_in(&mut s, "COPY ext_raw FROM STDIN");
    let reply = then_sync(&mut s, &[data(b"nine\n"), done()]);
    assert_one_error(&reply, "22P02");
    assert_eq!(reply[1].1, b"E", "the block is aborted");
    assert_eq!(error_code(&query(&mut s, "SELECT 1")), "25P02");
    query(&mut s, "ROLLBACK");

    // COPY TO STDOUT: CopyOutResponse, a CopyData a row, CopyDone, then
    // the command; a row limit on Execute does not cut a copy.
    let mut out = extended_messages("COPY (SELECT a FROM ext_raw ORDER BY a) TO STDOUT");
    let limited = out.len() - 4;
    out[limited..].copy_from_slice(&1i32.to_be_bytes());
    let reply = then_sync(&mut s, &[out]);
    assert_eq!(tags(&reply), b"12nHddcCZ", "{reply:?}");
    assert_eq!(reply[4].1, b"1\n");
    assert_eq!(reply[5].1, b"2\n");
    assert_eq!(reply[7].1, b"COPY 2\0");

    // A COPY with a bad option fails at Parse; Bind and Execute are skipped.
    let reply = then_sync(
        &mut s,
        &[extended_messages("COPY ext_raw FROM STDIN (FORMAT nope)")],
    );
    assert_eq!(tags(&reply), b"EZ", "{reply:?}");

    // Terminate mid-copy ends the connection; the server goes on.
    start_extended_copy_in(&mut s, "COPY ext_raw FROM STDIN");
    s.write_all(&data(b"10\n")).unwrap();
    s.write_all(&message(b'X', b"")).unwrap();
    assert!(
        read_until(&mut s, b'Z').is_empty(),
        "closed without a reply"
    );
    let mut again = raw("stride");
    assert_eq!(scalar(&mut again, "SELECT sum(a) FROM ext_raw"), "3");
}

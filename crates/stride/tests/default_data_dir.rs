//! The default data directory of `stride serve` / `sql` (issue 18): without
//! `--data-dir`, tables go to `$STRIDE_DATA_DIR` (here a temporary
//! directory, never the user's), survive a restart, and a second server on
//! the same default directory is refused with a message naming it and the
//! flags to use instead; `--in-memory` runs beside it.

mod common;

use std::path::Path;

use common::binary::{command, output, temp_dir, Server};

/// `stride … serve --port 0` on the default directory, `STRIDE_DATA_DIR`
/// pointing at `dir` (HOME too, so that nothing could reach the user's).
fn default_dir_command(dir: &Path, extra: &[&str]) -> std::process::Command {
    let mut c = command();
    c.env("STRIDE_DATA_DIR", dir)
        .env("HOME", dir.join("home"))
        .args(["--workers", "1"])
        .args(extra);
    c
}

fn serve(dir: &Path, extra: &[&str]) -> std::process::Command {
    let mut c = default_dir_command(dir, extra);
    c.args(["serve", "--port", "0"]);
    c
}

#[test]
fn tables_survive_a_restart_in_the_default_directory() {
    let root = temp_dir("default-dir");
    let dir = root.join("nested").join("stride");
    let rt = common::client::runtime();
    let s = Server::spawn(serve(&dir, &[])).unwrap();
    // Created on first use, locked by the server.
    assert!(dir.join("LOCK").exists() && dir.join("wal").is_dir());
    rt.block_on(async {
        let c = common::client::connect(s.addr, "stride").await;
        c.batch_execute("create table kept as select 1 as id, 'first' as note")
            .await
            .unwrap();
    });
    s.kill();
    let s = Server::spawn(serve(&dir, &[])).unwrap();
    let rows = rt.block_on(async {
        let c = common::client::connect(s.addr, "stride").await;
        c.query("select id, note from kept", &[]).await.unwrap()
    });
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, i64>(0), 1);
    assert_eq!(rows[0].get::<_, &str>(1), "first");

    // A second server on the same default directory: refused, with the
    // directory and the flags that run beside it in the message.
    let second = output(serve(&dir, &[]));
    assert!(!second.status.success());
    let message = String::from_utf8_lossy(&second.stderr);
    assert!(
        message.contains(&dir.display().to_string())
            && message.contains("default data directory")
            && message.contains("in use by another process")
            && message.contains("--data-dir")
            && message.contains("--in-memory"),
        "{message}"
    );
    // One-shot SQL on it is refused the same way.
    let mut sql = default_dir_command(&dir, &[]);
    sql.args(["sql", "select 1"]);
    let refused = output(sql);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--in-memory"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // --in-memory runs beside it and sees none of its tables.
    let beside = Server::spawn(serve(&dir, &["--in-memory"])).unwrap();
    let missing = rt.block_on(async {
        let c = common::client::connect(beside.addr, "stride").await;
        c.query("select * from kept", &[]).await.unwrap_err()
    });
    assert_eq!(
        missing.code(),
        Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE)
    );
    beside.kill();
    s.kill();

    // Without the server, one-shot SQL reads the default directory too.
    let mut sql = default_dir_command(&dir, &[]);
    sql.args(["sql", "select note from kept"]);
    let read = output(sql);
    assert!(
        read.status.success() && String::from_utf8_lossy(&read.stdout).contains("first"),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn in_memory_and_generated_data_leave_no_directory() {
    let dir = temp_dir("default-dir-none");
    // --in-memory: nothing is created or kept.
    let mut sql = default_dir_command(&dir, &["--in-memory"]);
    sql.args(["sql", "create table gone as select 1 as id"]);
    assert!(output(sql).status.success());
    assert!(!dir.exists());
    // bench and export never use the default directory.
    let mut export = default_dir_command(&dir, &["--tpch", "0.001"]);
    export
        .args(["export", "--dir"])
        .arg(dir.with_extension("pq"));
    let out = output(export);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.exists());
    let _ = std::fs::remove_dir_all(dir.with_extension("pq"));
}

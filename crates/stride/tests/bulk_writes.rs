//! Crash tests of bulk writes (issue 18) against the real `stride serve
//! --data-dir` binary: a large CREATE TABLE AS or INSERT … SELECT writes its
//! rows to a file of its own in `bulk/`, fsynced before the small log record
//! that names it. Acknowledged bulk writes survive SIGKILL; a server killed
//! while one runs — before its record, while its file is being written, or
//! just after — comes back with the table whole or absent, and with no bulk
//! file that no record names.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use common::binary::{temp_dir, Server};

/// Any write of more than 16 kB of rows is a bulk write; checkpoints only
/// when asked for (bulk files count towards the automatic one).
fn start(dir: &Path) -> Server {
    Server::on_dir(
        dir,
        None,
        &["--bulk-write-size", "16", "--checkpoint-log-size", "4GB"],
    )
}

fn bulk_files_on_disk(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("bulk"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// (rows, sum of ids) of `table`, or `None` when it does not exist.
async fn table_rows(c: &tokio_postgres::Client, table: &str) -> Option<(i64, i64)> {
    let row = c
        .query_one(
            &format!("select count(*), sum(id)::bigint from {table}"),
            &[],
        )
        .await
        .ok()?;
    Some((row.get(0), row.get::<_, Option<i64>>(1).unwrap_or(0)))
}

/// (bulk_files, log_bytes) of `stride.storage`.
async fn storage(c: &tokio_postgres::Client) -> (i64, i64) {
    let row = c
        .query_one("select bulk_files, log_bytes from stride.storage", &[])
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[test]
fn acknowledged_bulk_writes_survive_sigkill() {
    let dir = temp_dir("bulk-ack");
    let rt = common::client::runtime();
    let s = start(&dir);
    rt.block_on(async {
        let c = common::client::connect(s.addr, "stride").await;
        c.batch_execute(
            "create table big as select g as id, g * 2 as v from generate_series(1, 200000) g",
        )
        .await
        .unwrap();
        c.batch_execute("insert into big select g, g * 2 from generate_series(200001, 300000) g")
            .await
            .unwrap();
        // A small write stays in the log.
        c.batch_execute("insert into big values (0, 0)")
            .await
            .unwrap();
        let (files, log_bytes) = storage(&c).await;
        assert_eq!(files, 2);
        // 4.8 MB of rows, a few hundred bytes of log.
        assert!(log_bytes < 4096, "{log_bytes}");
    });
    assert_eq!(bulk_files_on_disk(&dir), 2);
    s.kill();
    let s = start(&dir);
    rt.block_on(async {
        let c = common::client::connect(s.addr, "stride").await;
        assert_eq!(
            table_rows(&c, "big").await,
            Some((300_001, 300_000 * 300_001 / 2))
        );
        assert_eq!(storage(&c).await.0, 2);
        // A checkpoint holds the rows; the bulk files go.
        c.batch_execute("checkpoint").await.unwrap();
        assert_eq!(storage(&c).await.0, 0);
    });
    assert_eq!(bulk_files_on_disk(&dir), 0);
    s.kill();
    let s = start(&dir);
    rt.block_on(async {
        let c = common::client::connect(s.addr, "stride").await;
        assert_eq!(table_rows(&c, "big").await.map(|r| r.0), Some(300_001));
    });
    s.kill();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_server_killed_during_a_bulk_write_keeps_it_whole_or_not_at_all() {
    let dir = temp_dir("bulk-kill");
    let rt = common::client::runtime();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1818);
    const ROWS: i64 = 2_000_000;
    let mut outcomes = (0, 0); // (absent, whole)
    for round in 0..6 {
        let s = start(&dir);
        let table = format!("r{round}");
        let files_before = bulk_files_on_disk(&dir);
        let addr = s.addr;
        let sql =
            format!("create table {table} as select g as id from generate_series(1, {ROWS}) g");
        let acked = rt.spawn(async move {
            let c = common::client::connect(addr, "stride").await;
            c.batch_execute(&sql).await.is_ok()
        });
        if round % 2 == 0 {
            // As soon as its file appears: while it is written, or before
            // its record.
            let deadline = Instant::now() + Duration::from_secs(60);
            while bulk_files_on_disk(&dir) == files_before && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(200));
            }
        } else {
            std::thread::sleep(Duration::from_millis(rng.random_range(0..1500)));
        }
        s.kill();
        let acked = rt.block_on(acked).unwrap_or(false);
        let s = start(&dir);
        rt.block_on(async {
            let c = common::client::connect(s.addr, "stride").await;
            match table_rows(&c, &table).await {
                None => {
                    assert!(!acked, "round {round}: an acknowledged table is gone");
                    outcomes.0 += 1;
                }
                Some(rows) => {
                    assert_eq!(rows, (ROWS, ROWS * (ROWS + 1) / 2), "round {round}");
                    outcomes.1 += 1;
                }
            }
            // No file that no record names is left behind.
            let (files, _) = storage(&c).await;
            assert_eq!(files as usize, bulk_files_on_disk(&dir), "round {round}");
            // Every earlier round's table is as it was.
            for earlier in 0..round {
                if let Some(rows) = table_rows(&c, &format!("r{earlier}")).await {
                    assert_eq!(rows.0, ROWS, "round {round}: r{earlier}");
                }
            }
        });
        s.kill();
    }
    eprintln!(
        "killed bulk writes: {} absent, {} whole",
        outcomes.0, outcomes.1
    );
    // The kills as soon as the file appears land before the commit.
    assert!(outcomes.0 >= 1, "{outcomes:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

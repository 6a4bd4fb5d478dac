//! Crash tests of the data directory against the real `stride serve
//! --data-dir` binary: clients insert and commit concurrently while the
//! server is killed with SIGKILL at seeded random moments; after each
//! restart every acknowledged commit is present and nothing else is (no
//! unacknowledged row that was never sent, no half of a two-row
//! transaction). Also: a torn last log record, and the leftovers of a crash
//! during a checkpoint. Roles, passwords, owners and grants survive too.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};

mod common;

use common::binary::{command, temp_dir, Server};

/// Checkpoints after 64 kB of log, so that kills land in checkpoints too.
const SMALL_CHECKPOINTS: [&str; 2] = ["--checkpoint-log-size", "64"];

/// Starts `stride serve` on `dir` and waits until it accepts connections.
fn start(dir: &Path) -> Server {
    Server::on_dir(dir, None, &SMALL_CHECKPOINTS)
}

/// [`start`], with `password` as the bootstrap superuser's (every client
/// then authenticates by SCRAM).
fn start_with(dir: &Path, password: Option<&str>) -> Server {
    Server::on_dir(dir, password, &SMALL_CHECKPOINTS)
}

async fn ids(addr: SocketAddr) -> Vec<i64> {
    let client = common::client::connect(addr, "stride").await;
    let rows = client
        .query("select id from t order by id", &[])
        .await
        .unwrap();
    rows.iter().map(|r| r.get::<_, i64>(0)).collect()
}

#[test]
fn acknowledged_commits_survive_sigkill() {
    let dir = temp_dir("kill");
    let rt = common::client::runtime();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(18);
    let server = start(&dir);
    rt.block_on(async {
        let c = common::client::connect(server.addr, "stride").await;
        c.batch_execute("create table t (id bigint not null, client int)")
            .await
            .unwrap();
    });
    // Ids whose commit was acknowledged; ids that were ever sent (a
    // transaction of two rows sends id and -id).
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let sent = Arc::new(Mutex::new(BTreeSet::new()));
    let next = Arc::new(AtomicI64::new(1));
    let mut server = Some(server);
    for round in 0..5 {
        let s = server.take().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..4)
            .map(|k| {
                let (acked, sent, next, stop) =
                    (acked.clone(), sent.clone(), next.clone(), stop.clone());
                let addr = s.addr;
                let handle = rt.handle().clone();
                std::thread::spawn(move || {
                    handle.block_on(async move {
                        let c = common::client::connect(addr, "stride").await;
                        while !stop.load(Ordering::Relaxed) {
                            let id = next.fetch_add(1, Ordering::Relaxed);
                            let pair = id % 3 == 0;
                            let sql = if pair {
                                format!(
                                    "begin; insert into t values ({id}, {k}); \
                                     insert into t values ({}, {k}); commit",
                                    -id
                                )
                            } else {
                                format!("insert into t values ({id}, {k})")
                            };
                            {
                                let mut sent = sent.lock().unwrap();
                                sent.insert(id);
                                if pair {
                                    sent.insert(-id);
                                }
                            }
                            if c.batch_execute(&sql).await.is_err() {
                                return;
                            }
                            let mut acked = acked.lock().unwrap();
                            acked.insert(id);
                            if pair {
                                acked.insert(-id);
                            }
                        }
                    })
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.random_range(100..600)));
        s.kill();
        stop.store(true, Ordering::Relaxed);
        for c in clients {
            c.join().unwrap();
        }
        if round == 2 {
            // What a crash in the middle of writing a checkpoint leaves.
            std::fs::write(dir.join("manifest.tmp"), b"half a manifest").unwrap();
            let partial = dir.join("checkpoints").join("99999999999999999999");
            std::fs::create_dir_all(&partial).unwrap();
            std::fs::write(partial.join("0.arrow"), b"half a table").unwrap();
        }
        let restarted = start(&dir);
        let present: BTreeSet<i64> = rt.block_on(ids(restarted.addr)).into_iter().collect();
        let acked = acked.lock().unwrap();
        let sent = sent.lock().unwrap();
        let lost: Vec<_> = acked.difference(&present).collect();
        assert!(
            lost.is_empty(),
            "round {round}: acknowledged commits lost: {lost:?}"
        );
        let unsent: Vec<_> = present.difference(&sent).collect();
        assert!(
            unsent.is_empty(),
            "round {round}: rows never sent: {unsent:?}"
        );
        for id in &present {
            // Rows id and -id of a two-row transaction come together or not at all.
            if *id < 0 || id % 3 == 0 {
                assert!(
                    present.contains(&-id),
                    "round {round}: half of transaction {id}"
                );
            }
        }
        assert!(
            acked.len() > 10 * (round + 1),
            "round {round}: too few commits to test"
        );
        server = Some(restarted);
    }
    // The log passed the checkpoint size several times: the kills fell
    // among automatic checkpoints too.
    let s = server.unwrap();
    let checkpointed = rt.block_on(async {
        let c = common::client::connect(s.addr, "stride").await;
        c.query_one("select checkpoint_lsn from stride.storage", &[])
            .await
            .unwrap()
            .get::<_, Option<i64>>(0)
    });
    assert!(checkpointed.is_some_and(|lsn| lsn > 64 * 1024));
    s.kill();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Roles with their passwords, table owners and grants survive a SIGKILL
/// (from the log) and a checkpoint (from its copy): after each restart the
/// roles log in with their passwords and hold exactly the privileges they
/// were given.
#[test]
fn roles_owners_and_grants_survive_restarts() {
    use common::client::connect_with_password as login;
    let dir = temp_dir("roles");
    let rt = common::client::runtime();
    let boot = Some("boot-pw");
    let s = start_with(&dir, boot);
    rt.block_on(async {
        let root = login(s.addr, "stride", "boot-pw").await.unwrap();
        root.batch_execute(
            "create role alice login password 'alice-pw'; \
             create role bob login password 'bob-pw'; \
             create role carol login password 'carol-pw'; drop role carol",
        )
        .await
        .unwrap();
        let alice = login(s.addr, "alice", "alice-pw").await.unwrap();
        alice
            .batch_execute(
                "create table notes (id bigint); insert into notes values (1); \
                 grant select on notes to bob",
            )
            .await
            .unwrap();
    });
    s.kill();
    // Bob sees `rows` rows; alice, the owner, adds one more.
    let check = |addr: SocketAddr, rows: i64| {
        rt.block_on(async move {
            assert!(
                login(addr, "carol", "carol-pw").await.is_err(),
                "a dropped role stays dropped"
            );
            assert!(login(addr, "bob", "wrong").await.is_err());
            let bob = login(addr, "bob", "bob-pw").await.unwrap();
            let n: i64 = bob
                .query_one("select count(*) from notes", &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(n, rows, "bob's grant is back");
            let denied = bob.batch_execute("insert into notes values (2)").await;
            assert_eq!(
                denied.unwrap_err().code(),
                Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
                "bob was given SELECT only"
            );
            let alice = login(addr, "alice", "alice-pw").await.unwrap();
            alice
                .batch_execute(&format!("insert into notes values ({})", rows + 1))
                .await
                .expect("alice still owns her table");
        })
    };
    let s = start_with(&dir, boot);
    check(s.addr, 1);
    rt.block_on(async {
        let root = login(s.addr, "stride", "boot-pw").await.unwrap();
        root.batch_execute("checkpoint").await.unwrap();
    });
    s.kill();
    let s = start_with(&dir, boot);
    check(s.addr, 2);
    s.kill();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_torn_last_record_recovers_to_the_one_before() {
    let dir = temp_dir("torn");
    let rt = common::client::runtime();
    let s = start(&dir);
    rt.block_on(async {
        let c = common::client::connect(s.addr, "stride").await;
        c.batch_execute("create table t (id bigint)").await.unwrap();
        c.batch_execute("insert into t values (1)").await.unwrap();
        c.batch_execute("insert into t values (2)").await.unwrap();
    });
    s.kill();
    let segment = std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .max()
        .unwrap();
    let len = std::fs::metadata(&segment).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let s = start(&dir);
    assert_eq!(rt.block_on(ids(s.addr)), vec![1]);
    rt.block_on(async {
        let c = common::client::connect(s.addr, "stride").await;
        c.batch_execute("insert into t values (3)").await.unwrap();
        let row = c
            .query_one(
                "select end_lsn = flushed_lsn, log_bytes > 0 from stride.storage",
                &[],
            )
            .await
            .unwrap();
        assert!(row.get::<_, bool>(0) && row.get::<_, bool>(1));
        c.batch_execute("checkpoint").await.unwrap();
        let row = c
            .query_one("select checkpoint_tables from stride.storage", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), 1);
    });
    s.kill();
    let s = start(&dir);
    assert_eq!(rt.block_on(ids(s.addr)), vec![1, 3]);
    // One process per directory.
    let second = command()
        .arg("--data-dir")
        .arg(&dir)
        .args(["sql", "select 1"])
        .output()
        .unwrap();
    assert!(!second.status.success());
    let message = String::from_utf8_lossy(&second.stderr);
    assert!(message.contains("in use by another process"), "{message}");
    s.kill();
    // A directory it cannot read is refused, not started empty.
    std::fs::write(dir.join("manifest"), b"not a manifest").unwrap();
    let refused = command()
        .arg("--data-dir")
        .arg(&dir)
        .args(["sql", "select 1"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(message.contains("cannot recover"), "{message}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ready_for_query_reports_the_block_state() {
    use common::wire::{query_message, read_until, sqlstate_of, startup_packet};
    use std::io::Write;
    let dir = temp_dir("status");
    let s = start(&dir);
    let mut stream = std::net::TcpStream::connect(s.addr).unwrap();
    stream.write_all(&startup_packet("stride")).unwrap();
    let status = |messages: Vec<(u8, Vec<u8>)>| {
        let (tag, body) = messages.last().unwrap().clone();
        assert_eq!(tag, b'Z');
        let error = messages
            .iter()
            .find(|(t, _)| *t == b'E')
            .map(|(_, b)| sqlstate_of(b));
        (body[0], error)
    };
    assert_eq!(status(read_until(&mut stream, b'Z')).0, b'I');
    let mut send = |sql: &str| {
        stream.write_all(&query_message(sql)).unwrap();
        status(read_until(&mut stream, b'Z'))
    };
    assert_eq!(send("create table t (a int)"), (b'I', None));
    assert_eq!(send("begin"), (b'T', None));
    assert_eq!(send("insert into t values (1)"), (b'T', None));
    assert_eq!(send("select nope from t"), (b'E', Some("42703".into())));
    assert_eq!(send("select 1"), (b'E', Some("25P02".into())));
    assert_eq!(send("commit"), (b'I', None));
    assert_eq!(send("begin read only"), (b'T', None));
    assert_eq!(
        send("insert into t values (2)"),
        (b'E', Some("25006".into()))
    );
    assert_eq!(send("rollback"), (b'I', None));
    drop(stream);
    s.kill();
    std::fs::remove_dir_all(&dir).unwrap();
}

//! A tokio-postgres client of a test server.

use std::net::SocketAddr;

use tokio_postgres::{Client, NoTls};

/// A runtime for the client side of a test.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A connection as `user` authenticating with `password` (SCRAM when the
/// server asks for it), its driver task spawned; the error when refused.
pub async fn connect_with_password(
    addr: SocketAddr,
    user: &str,
    password: &str,
) -> Result<Client, tokio_postgres::Error> {
    let conninfo = format!(
        "host={} port={} user={user} dbname=stride password='{password}'",
        addr.ip(),
        addr.port()
    );
    let (client, connection) = tokio_postgres::connect(&conninfo, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// A connection as `user` (trust authentication), its driver task spawned.
pub async fn connect(addr: SocketAddr, user: &str) -> Client {
    let conninfo = format!(
        "host={} port={} user={user} dbname=stride",
        addr.ip(),
        addr.port()
    );
    let (client, connection) = tokio_postgres::connect(&conninfo, NoTls)
        .await
        .expect("connect");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Serves `engine` with `config` on a runtime of `threads` threads of its
/// own (a thread that lives as long as the test process); returns the
/// address it listens on.
pub fn serve(
    engine: std::sync::Arc<stride_sql::Engine>,
    config: stride_server::ServerConfig,
    threads: usize,
) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = stride_server::runtime_builder()
            .worker_threads(threads)
            .build()
            .unwrap();
        runtime.block_on(async move {
            let server = stride_server::Server::bind(engine, config).await.unwrap();
            tx.send(server.local_addr().unwrap()).unwrap();
            server.serve().await.unwrap();
        });
    });
    rx.recv().unwrap()
}

/// Runs a client program (psql, a driver's test program) to completion and
/// returns its standard output; panics, with its output, if it fails or
/// cannot be started.
#[allow(dead_code)] // not every test file drives client programs
pub fn run_program(mut cmd: std::process::Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run it ({e}); run scripts/setup.sh"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A test server and its engine.
pub struct TestServer {
    pub addr: SocketAddr,
    pub engine: std::sync::Arc<stride_sql::Engine>,
}

/// A server of TPC-H SF 0.01 (the default schema) on two workers under the
/// given server-wide and per-query memory limits, spilling below
/// `temp_dir`.
pub fn tpch_server(limit: usize, query_limit: usize, temp_dir: std::path::PathBuf) -> TestServer {
    tpch_server_with(limit, query_limit, temp_dir, test_config())
}

/// As [`tpch_server`], with the server's `config`.
pub fn tpch_server_with(
    limit: usize,
    query_limit: usize,
    temp_dir: std::path::PathBuf,
    config: stride_server::ServerConfig,
) -> TestServer {
    tpch_server_morsels(
        stride_sched::SchedulerConfig::default().morsels,
        limit,
        query_limit,
        temp_dir,
        config,
    )
}

/// As [`tpch_server_with`], its two workers running `morsels`.
pub fn tpch_server_morsels(
    morsels: stride_sched::MorselPolicy,
    limit: usize,
    query_limit: usize,
    temp_dir: std::path::PathBuf,
    config: stride_server::ServerConfig,
) -> TestServer {
    let engine = stride_sql::Engine::new(stride_sql::EngineConfig {
        scheduler: stride_sched::SchedulerConfig {
            workers: 2,
            pin_workers: false,
            morsels,
            ..Default::default()
        },
        memory: stride_sql::MemoryConfig { limit, query_limit },
        spill: stride_sql::SpillConfig {
            temp_dir: Some(temp_dir),
            file_limit: None,
            force: false,
        },
        ..Default::default()
    });
    engine.load_tpch(0.01).expect("generate TPC-H SF 0.01");
    engine.set_default_schema("sf0_01").unwrap();
    TestServer {
        addr: serve(engine.clone(), config, 2),
        engine,
    }
}

/// A server (`config`) of TPC-H SF 0.01 for one test binary's tests (256
/// MiB in all, 32 MiB a query), spilling below a temporary directory named
/// after `tag` and the process.
pub fn shared_tpch_server(tag: &str, config: stride_server::ServerConfig) -> TestServer {
    let dir = super::scratch_dir(&format!("{tag}-test"));
    tpch_server_with(256 << 20, 32 << 20, dir, config)
}

/// The configuration of a test server: listening on a free loopback port.
pub fn test_config() -> stride_server::ServerConfig {
    stride_server::ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Default::default()
    }
}

/// Waits (at most 10 s) until every query's memory went back to the
/// engine's pool and no spill file is left; panics if not.
pub fn back_to_baseline(engine: &stride_sql::Engine) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while (engine.runtime().memory().used() != 0
        || engine.runtime().spill_area().bytes_on_disk() != 0)
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(engine.runtime().memory().used(), 0, "bytes still charged");
    assert_eq!(
        engine.runtime().spill_area().bytes_on_disk(),
        0,
        "spill files left"
    );
}

/// A raw protocol client of the server at `addr`: connected as `stride`,
/// authenticated, ready for a query.
#[allow(dead_code)] // not every test file speaks the raw protocol
pub fn raw_client(addr: SocketAddr) -> std::net::TcpStream {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(&super::wire::startup_packet("stride"))
        .unwrap();
    super::wire::read_until(&mut stream, b'Z');
    stream
}

/// The `stride.queries` state of the latest query whose text contains
/// `marker`.
#[allow(dead_code)]
pub async fn state_of(client: &Client, marker: &str) -> String {
    client
        .query_one(
            "select state from stride.queries where query like $1 \
             order by query_id desc limit 1",
            &[&format!("%{marker}%")],
        )
        .await
        .unwrap()
        .get(0)
}

//! Authentication and encryption: SCRAM-SHA-256 with a driver
//! (tokio-postgres) and with psql, TLS through rustls with psql
//! (`sslmode=require`) and pgjdbc (`JdbcTls.java`), plain-text clients
//! refused when TLS is required, and
//! the byte bound on messages before authentication.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use stride_server::{Auth, ServerConfig};

/// The bootstrap superuser `stride`'s password (roles of their own are
/// tested in `roles.rs`).
const PASSWORD: &str = "correct horse battery staple";

struct Fixture {
    /// SCRAM, TLS offered, plain text allowed.
    open: SocketAddr,
    /// SCRAM, TLS required.
    strict: SocketAddr,
}

fn start(config: ServerConfig) -> SocketAddr {
    let engine = common::test_engine(1);
    common::client::serve(engine, config, 1)
}

fn servers() -> &'static Fixture {
    static SERVERS: OnceLock<Fixture> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let key = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let dir = common::scratch_dir("auth");
        let (cert_path, key_path) = (dir.join("server.crt"), dir.join("server.key"));
        std::fs::write(&cert_path, key.cert.pem()).unwrap();
        std::fs::write(&key_path, key.signing_key.serialize_pem()).unwrap();
        let tls = stride_server::tls::TlsAcceptor::from_pem_files(&cert_path, &key_path).unwrap();
        let base = ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            auth: Auth::password(PASSWORD),
            tls: Some(tls),
            ..Default::default()
        };
        let open = start(base.clone());
        let strict = start(ServerConfig {
            require_tls: true,
            ..base
        });
        Fixture { open, strict }
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(
    addr: SocketAddr,
    password: &str,
) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    common::client::connect_with_password(addr, "stride", password).await
}

#[test]
fn scram_with_a_driver() {
    runtime().block_on(async {
        let client = connect(servers().open, PASSWORD)
            .await
            .expect("right password");
        let row = client.query_one("select 1 + 1", &[]).await.unwrap();
        assert_eq!(row.get::<_, i64>(0), 2);
        let err = connect(servers().open, "wrong")
            .await
            .expect_err("wrong password");
        assert_eq!(err.code().map(|c| c.code()), Some("28P01"), "{err}");
    });
}

fn psql(addr: SocketAddr, sslmode: &str, password: &str, sql: &str) -> std::process::Output {
    Command::new("psql")
        .args([
            "-X",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            &addr.ip().to_string(),
            "-p",
            &addr.port().to_string(),
            "-U",
            "stride",
            "-d",
            "stride",
            "-c",
            sql,
        ])
        .env("PGPASSWORD", password)
        .env("PGSSLMODE", sslmode)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("psql is installed (scripts/setup.sh)")
}

#[test]
fn psql_over_tls_with_scram() {
    let out = psql(servers().strict, "require", PASSWORD, "select 40 + 2");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
    // The same server refuses plain text.
    let out = psql(servers().strict, "disable", PASSWORD, "select 1");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("only TLS"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A wrong password over TLS.
    let out = psql(servers().strict, "require", "nope", "select 1");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("password authentication failed"));
    // Where TLS is optional, psql without it still authenticates by SCRAM.
    let out = psql(servers().open, "disable", PASSWORD, "select 7");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "7");
}

#[test]
fn messages_before_authentication_are_small() {
    let mut s = TcpStream::connect(servers().open).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut body = 196_608i32.to_be_bytes().to_vec();
    body.extend_from_slice(b"user\0mallory\0\0");
    let mut packet = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    packet.extend_from_slice(&body);
    s.write_all(&packet).unwrap();
    // AuthenticationSASL comes back.
    let mut header = [0u8; 5];
    s.read_exact(&mut header).unwrap();
    assert_eq!(header[0], b'R');
    let len = i32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
    let mut rest = vec![0u8; len - 4];
    s.read_exact(&mut rest).unwrap();
    // A 64 MiB "response" is refused from its length alone.
    s.write_all(&[b'p', 0x04, 0, 0, 0]).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    assert_eq!(answer.first(), Some(&b'E'));
    assert!(String::from_utf8_lossy(&answer).contains("08P01"));
}

/// pgjdbc (Debian's, as the client tests use it) over TLS with SCRAM: the
/// server refuses plain text, so an answer means the session was encrypted.
#[test]
fn jdbc_over_tls_with_scram() {
    let addr = servers().strict;
    let mut cmd = Command::new("java");
    cmd.args([
        "-cp",
        "/usr/share/java/postgresql.jar",
        &format!("{}/tests/clients/JdbcTls.java", env!("CARGO_MANIFEST_DIR")),
        &addr.ip().to_string(),
        &addr.port().to_string(),
        PASSWORD,
    ]);
    let out = common::client::run_program(cmd, "pgjdbc over TLS");
    assert_eq!(out.trim(), "tls 42", "{out}");
}

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

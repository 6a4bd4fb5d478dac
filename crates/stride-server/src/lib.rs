//! Stride's PostgreSQL wire-protocol server (protocol version 3.0).
//!
//! psql, pgbench and PostgreSQL drivers reach the engine through this crate.
//! One tokio task serves each connection; statements run on tokio's blocking
//! threads, which plan the query and wait for its resource group while the
//! scheduler's workers execute it, so a worker never waits on a socket.
//! Results are encoded and written to the client while the query runs
//! (`connection::stream`); a portal's or cursor's query waits, paused,
//! between fetches (`stride_sql::LiveQuery`).
//!
//! * [`protocol`] — framing, frontend message parsing, backend messages;
//! * [`types`] — Arrow ↔ PostgreSQL types, text and binary formats;
//! * [`sqlstate`] — engine errors as SQLSTATE codes;
//! * [`scram`] — SCRAM-SHA-256 authentication;
//! * [`tls`] — TLS through rustls (certificate and key from PEM files);
//! * [`connection`] — one connection's state machine (startup,
//!   authentication, simple and extended query protocol, cancellation).
//!
//! Invariants: a malformed message closes only its connection (after an
//! ErrorResponse where the stream is still in sync); a failing statement
//! fails alone and the connection stays usable; a client that disconnects or
//! sends a CancelRequest gets its running query cancelled on the scheduler.

pub mod connection;
pub mod copy_format;
pub mod protocol;
pub mod scram;
pub mod sqlstate;
pub mod tls;
pub mod types;

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use stride_sql::{Engine, Interrupt};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How clients authenticate.
#[derive(Debug, Clone, Default)]
pub enum Auth {
    /// No password (the default; the server listens on loopback unless told
    /// otherwise). A client naming a role connects as that role (which
    /// needs `LOGIN`, else 28000); any other name connects with the
    /// bootstrap superuser's privileges — no more than naming the bootstrap
    /// superuser would give it, since nothing is verified. (PostgreSQL
    /// refuses unknown names even under `trust`; Stride keeps `psql -U me`
    /// working on a password-less development server. Privilege separation
    /// needs [`Auth::Scram`].)
    #[default]
    Trust,
    /// Every client proves its role's password by SCRAM-SHA-256 against the
    /// verifier in the engine's role catalog. The verifier given here is
    /// the bootstrap superuser's password: [`Server::bind`] stores it in the
    /// catalog. An unknown role, a role without a password and a wrong
    /// password fail alike (28P01, one message); a role without `LOGIN`
    /// that proved its password gets 28000.
    Scram(scram::Verifier),
}

impl Auth {
    /// SCRAM-SHA-256, `password` being the bootstrap superuser's (a fresh
    /// salt per call).
    pub fn password(password: &str) -> Auth {
        Auth::Scram(scram::Verifier::new(password))
    }
}

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on (`127.0.0.1:5433` by default).
    pub listen: SocketAddr,
    pub auth: Auth,
    /// Connections beyond this are refused with SQLSTATE 53300.
    pub max_connections: usize,
    /// A client must complete startup and authentication within this time
    /// (PostgreSQL's `authentication_timeout`); until then it may send only
    /// small messages.
    pub authentication_timeout: std::time::Duration,
    /// TLS for clients that ask for it (SSLRequest); `None`: plain text only.
    pub tls: Option<tls::TlsAcceptor>,
    /// Refuse clients that start up without TLS.
    pub require_tls: bool,
    /// A client whose statement was stopped (timeout, CancelRequest) while
    /// its socket was full, and that then reads nothing for this long, is
    /// disconnected (`connection::stall`). The statement itself ends at
    /// once, whatever this is.
    pub stalled_client_timeout: std::time::Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 5433)),
            auth: Auth::Trust,
            max_connections: 1000,
            authentication_timeout: std::time::Duration::from_secs(10),
            tls: None,
            require_tls: false,
            stalled_client_timeout: std::time::Duration::from_secs(10),
        }
    }
}

/// Errors of the server boundary.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// State shared by all connections of a server.
pub struct Shared {
    pub engine: Arc<Engine>,
    pub config: ServerConfig,
    /// Open connections (after the startup packet was accepted).
    /// Relaxed: a statistic and an admission bound, orders nothing.
    connections: AtomicUsize,
    /// Next backend process id handed to a client; Relaxed (uniqueness only).
    next_pid: AtomicI32,
    /// Backend key data → the connection's interrupt, for CancelRequests.
    cancel_keys: Mutex<HashMap<(i32, i32), CancelTarget>>,
    /// Randomly keyed (per process) hasher that makes secret keys.
    keys: RandomState,
    /// Random per server: derives the stand-in verifiers of names that are
    /// no role (or have no password), the same for every attempt at a name.
    mock_key: Vec<u8>,
}

impl Shared {
    /// Number of open connections.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    /// Registers a connection's interrupt under new backend key data;
    /// returns the key and the count of cancel requests it will get.
    fn register(&self, interrupt: Arc<Interrupt>) -> ((i32, i32), watch::Receiver<u64>) {
        let pid = self.next_pid.fetch_add(1, Ordering::Relaxed);
        // The secret only has to be unguessable by other clients: a hash of
        // the pid under this process's random keys.
        let secret = self.keys.hash_one(pid) as i32;
        let (cancels, seen) = watch::channel(0);
        self.lock_keys()
            .insert((pid, secret), CancelTarget { interrupt, cancels });
        ((pid, secret), seen)
    }

    fn unregister(&self, key: (i32, i32)) {
        self.lock_keys().remove(&key);
    }

    fn cancel(&self, key: (i32, i32)) -> bool {
        let keys = self.lock_keys();
        match keys.get(&key) {
            Some(target) => {
                target.interrupt.cancel();
                // A connection blocked writing to a full socket is told too.
                target.cancels.send_modify(|n| *n += 1);
                true
            }
            None => false,
        }
    }

    fn lock_keys(&self) -> std::sync::MutexGuard<'_, HashMap<(i32, i32), CancelTarget>> {
        self.cancel_keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the SCRAM exchange of `user` runs against when `user` has no
    /// verifier (no such role, or no password): a salt and keys that look
    /// like a real verifier's, stable per name (as PostgreSQL's mock
    /// authentication), so that neither the exchange nor its timing tells
    /// whether the role exists. No password proves it.
    fn mock_verifier(&self, user: &str) -> scram::Verifier {
        use stride_sql::scram::hmac;
        let derive = |what: &str| hmac(&self.mock_key, format!("{what}\0{user}").as_bytes());
        stride_sql::scram::Verifier::from_keys(
            &derive("salt")[..stride_sql::scram::SALT_BYTES],
            scram::ITERATIONS,
            derive("stored"),
            derive("server"),
        )
    }
}

/// What a CancelRequest with a connection's key reaches: its session's
/// interrupt, and a count the connection watches while a write to its
/// client is blocked (`connection::stall`).
struct CancelTarget {
    interrupt: Arc<Interrupt>,
    cancels: watch::Sender<u64>,
}

/// The tokio runtime a server runs on: its threads (connection tasks and the
/// blocking threads that run statements) have stacks of
/// [`stride_sql::limits::STATEMENT_THREAD_STACK`], so planning a statement
/// never switches stacks.
pub fn runtime_builder() -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .enable_all()
        .thread_name("stride-net")
        .thread_stack_size(stride_sql::limits::STATEMENT_THREAD_STACK);
    builder
}

/// A bound server; [`Server::serve`] accepts connections until the future is
/// dropped.
pub struct Server {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl Server {
    /// Listens on `config.listen`. With [`Auth::Scram`], its verifier
    /// becomes the bootstrap superuser's password in the engine's role
    /// catalog.
    pub async fn bind(engine: Arc<Engine>, config: ServerConfig) -> Result<Server, ServerError> {
        if let Auth::Scram(verifier) = &config.auth {
            engine
                .roles()
                .set_password(stride_sql::roles::BOOTSTRAP_ROLE_ID, Some(verifier.clone()))
                .and_then(|()| engine.persist_security())
                .map_err(|e| ServerError::Io(std::io::Error::other(e.to_string())))?;
        }
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: config.listen,
                    source,
                })?;
        Ok(Server {
            listener,
            shared: Arc::new(Shared {
                engine,
                config,
                connections: AtomicUsize::new(0),
                next_pid: AtomicI32::new(1),
                cancel_keys: Mutex::new(HashMap::new()),
                keys: RandomState::new(),
                mock_key: scram::random_bytes(32),
            }),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// State shared with the connections (connection count, engine).
    pub fn shared(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Accepts connections forever, one task each.
    pub async fn serve(self) -> Result<(), ServerError> {
        loop {
            let (stream, _) = match self.listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    // Out of file descriptors and the like: wait and go on.
                    eprintln!("stride: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let shared = self.shared.clone();
            tokio::spawn(async move {
                connection::serve(stream, shared).await;
            });
        }
    }
}

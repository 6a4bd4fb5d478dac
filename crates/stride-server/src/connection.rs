//! One client connection.
//!
//! ```text
//!  startup packet ──SSLRequest/GSSENCRequest──► 'N', read the next packet
//!       │ ─────────CancelRequest──────────────► cancel that backend's query, close
//!       ▼ protocol 3.x
//!  authentication (trust, or SCRAM-SHA-256) ─► ParameterStatus…,
//!       │                                           BackendKeyData, ReadyForQuery
//!       ▼
//!  ┌► ready ──Query──────────► run every statement ─► rows/tags/errors ─► ReadyForQuery ─┐
//!  │    │ ──Parse/Bind/Describe/Execute/Close──► replies (no ReadyForQuery);            │
//!  │    │      after an error: send it at once, skip messages until Sync                │
//!  │    │ ──Sync──► ReadyForQuery                                                       │
//!  └────┴──────────────────────────────────────────────────────────────────────────────┘
//!       Terminate / EOF / malformed message ─► close (cancelling a running query)
//! ```
//!
//! Statements run on a blocking thread ([`Connection::with_session`]); while
//! one runs, the task watches the socket, and if the client goes away the
//! statement's query is cancelled on the scheduler. The [`Session`] moves
//! into the blocking closure and back, so it is never shared between threads.
//!
//! Portals: an Execute without a row limit streams every row (`stream`);
//! the first Execute with one opens the query live ([`LiveQuery`]) and
//! each Execute pulls up to its limit, then PortalSuspended, the query
//! paused in between, until CommandComplete. A portal is dropped — its
//! live query cancelled — by Close, a Bind of its name, Sync outside a
//! transaction block (the implicit transaction ends), the end of its
//! block, `DISCARD ALL` and disconnect, as PostgreSQL destroys portals.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::util::display::FormatOptions;
use datafusion_common::ScalarValue;
use stride_sql::{Interrupt, LiveQuery, Opened, Prepared, Session, SqlError, StatementOutput};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::copy_format::RowWriter;
use crate::protocol::{
    self, Frontend, Out, ProtocolError, Startup, MAX_AUTH_MESSAGE, MAX_MESSAGE, MAX_STARTUP,
};
use crate::sqlstate;
use crate::tls::Stream;
use crate::types::{self, ColumnEncoder};
use crate::{scram, Auth, Shared};

mod copy;
mod stall;
mod stream;

use stall::Stop;
use stream::{Event, Streaming};

/// Output is written to the socket whenever this much is buffered.
const FLUSH_BYTES: usize = 256 << 10;

/// Why a connection ends early.
enum Close {
    /// The client went away, the socket failed, or the client stopped
    /// reading while its statement was being stopped (`stall`).
    Gone,
    /// A protocol error was answered; the connection closes.
    Fatal,
}

/// A prepared statement of the extended protocol.
struct Statement {
    prepared: Arc<Prepared>,
    /// Type OID of each parameter as described to the client.
    param_oids: Vec<u32>,
}

/// A bound portal and, once executed, its result and how much was sent:
/// the rows of a statement that ran to its end, or a query opened live
/// by an Execute with a row limit, paused until the next Execute (its
/// drop — Close, a new Bind of the name, the end of the transaction,
/// disconnect — cancels the query).
struct Portal {
    statement: Arc<Statement>,
    params: Vec<ScalarValue>,
    result_formats: Vec<i16>,
    result: Option<Rows>,
    live: Option<LiveQuery>,
}

/// A statement's output as rows still to be sent (or a command tag).
struct Rows {
    schema: Option<SchemaRef>,
    batches: Vec<RecordBatch>,
    /// Rows already sent (Execute with a row limit continues from here).
    sent: usize,
    tag: String,
}

/// Keeps the connection count and the cancel-key registry true however the
/// connection task ends.
struct Registration {
    shared: Arc<Shared>,
    key: Option<(i32, i32)>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            self.shared.unregister(key);
        }
        self.shared
            .connections
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

pub(crate) async fn serve(stream: TcpStream, shared: Arc<Shared>) {
    let mut conn = Connection {
        stream: BufReader::with_capacity(64 << 10, Stream::Plain(stream)),
        out: Out::default(),
        shared,
        session: None,
        interrupt: None,
        statements: HashMap::new(),
        portals: HashMap::new(),
        skip_until_sync: false,
        client_gone: false,
        cancels: None,
        stop: None,
        halt: tokio::sync::watch::channel(None).0,
    };
    let timeout = conn.shared.config.authentication_timeout;
    let Ok(Ok(Some(registration))) = tokio::time::timeout(timeout, conn.startup()).await else {
        let _ = conn.flush().await;
        return;
    };
    let _registration = registration;
    let _ = conn.run().await;
    // A fatal error's message may still be buffered.
    let _ = conn.flush().await;
    if let Some(i) = &conn.interrupt {
        i.cancel();
    }
}

struct Connection {
    /// The client's stream (plain or TLS), buffered for reading; writes pass
    /// through.
    stream: BufReader<Stream>,
    out: Out,
    shared: Arc<Shared>,
    /// `None` only while a statement runs on a blocking thread, or after the
    /// blocking thread panicked (then the connection closes).
    session: Option<Session>,
    interrupt: Option<Arc<Interrupt>>,
    statements: HashMap<String, Arc<Statement>>,
    portals: HashMap<String, Portal>,
    /// An extended-protocol message failed: ignore messages up to Sync.
    skip_until_sync: bool,
    client_gone: bool,
    /// CancelRequests for this connection (`stall`).
    cancels: Option<tokio::sync::watch::Receiver<u64>>,
    /// What a blocked write races while a request runs (`stall`).
    stop: Option<Stop>,
    /// Tells the request's streamer that the request was stopped while
    /// the client reads nothing (`stall`); cleared at each request.
    halt: tokio::sync::watch::Sender<Option<bool>>,
}

impl Connection {
    async fn flush(&mut self) -> Result<(), Close> {
        if self.out.buf.is_empty() {
            return Ok(());
        }
        let r = match self.stop.take() {
            Some(mut stop) => {
                let r = self.write_watched(&mut stop).await;
                self.stop = Some(stop);
                r
            }
            None => match self.stream.write_all(&self.out.buf).await {
                // TLS records may wait in rustls until flushed.
                Ok(()) => self.stream.flush().await.map_err(|_| Close::Gone),
                Err(_) => Err(Close::Gone),
            },
        };
        self.out.buf.clear();
        r
    }

    async fn flush_if_full(&mut self) -> Result<(), Close> {
        if self.out.buf.len() >= FLUSH_BYTES {
            self.flush().await?;
        }
        Ok(())
    }

    fn fatal(&mut self, code: &str, message: &str) -> Close {
        self.out.error("FATAL", code, message);
        Close::Fatal
    }

    /// Startup packets until a 3.x one, then authentication. `None`: the
    /// connection is done (a cancel request, a refused client).
    async fn startup(&mut self) -> Result<Option<Registration>, Close> {
        let params = loop {
            let len = self.stream.read_i32().await.map_err(|_| Close::Gone)?;
            if !(8..=MAX_STARTUP as i32).contains(&len) {
                return Err(self.fatal(
                    sqlstate::PROTOCOL_VIOLATION,
                    &format!("invalid length of startup packet: {len}"),
                ));
            }
            let mut body = vec![0u8; len as usize - 4];
            self.stream
                .read_exact(&mut body)
                .await
                .map_err(|_| Close::Gone)?;
            match protocol::parse_startup(&body) {
                Ok(Startup::Ssl)
                    if self.shared.config.tls.is_some() && !self.stream.get_ref().is_tls() =>
                {
                    self.upgrade_to_tls().await?;
                }
                Ok(Startup::Ssl) | Ok(Startup::Gss) => {
                    // No TLS here (or already encrypted) and no GSS: the
                    // client may go on as it is.
                    self.stream.write_all(b"N").await.map_err(|_| Close::Gone)?;
                }
                Ok(Startup::Cancel {
                    process_id,
                    secret_key,
                }) => {
                    self.shared.cancel((process_id, secret_key));
                    return Ok(None);
                }
                Ok(Startup::Start { params }) => {
                    if self.shared.config.require_tls && !self.stream.get_ref().is_tls() {
                        return Err(self.fatal(
                            sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                            "the server accepts only TLS connections (sslmode=require)",
                        ));
                    }
                    break params;
                }
                Err(e) => return Err(self.fatal(sqlstate::PROTOCOL_VIOLATION, &e.to_string())),
            }
        };
        let previous = self
            .shared
            .connections
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut registration = Registration {
            shared: self.shared.clone(),
            key: None,
        };
        if previous >= self.shared.config.max_connections {
            return Err(self.fatal(
                sqlstate::TOO_MANY_CONNECTIONS,
                "sorry, too many clients already",
            ));
        }
        let user = params
            .iter()
            .find(|(k, _)| k == "user")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        if user.is_empty() {
            return Err(self.fatal(
                "28000",
                "no PostgreSQL user name specified in startup packet",
            ));
        }
        let role = self.shared.engine.roles().by_name(&user);
        let password_auth = matches!(self.shared.config.auth, Auth::Scram(_));
        if password_auth {
            // A name without a verifier runs the same exchange against a
            // stand-in and fails as a wrong password does.
            let stored = role.as_ref().and_then(|r| r.password.clone());
            let authentic = stored.is_some();
            let verifier = stored.unwrap_or_else(|| self.shared.mock_verifier(&user));
            self.scram(&verifier, authentic, &user).await?;
        }
        let role_id = match &role {
            // As PostgreSQL: checked only once the password was proved.
            Some(r) if !r.login => {
                return Err(self.fatal(
                    sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                    &format!("role \"{user}\" is not permitted to log in"),
                ))
            }
            Some(r) => r.id,
            None if password_auth => {
                return Err(self.fatal(
                    sqlstate::INVALID_PASSWORD,
                    &format!("password authentication failed for user \"{user}\""),
                ))
            }
            // Trust: a name that is no role gets the bootstrap superuser's
            // privileges (see `Auth::Trust`).
            None => stride_sql::roles::BOOTSTRAP_ROLE_ID,
        };
        let mut session = self.shared.engine.session_as(role_id, &user);
        let mut unknown_options = Vec::new();
        for (key, value) in &params {
            let key = key.to_ascii_lowercase();
            match key.as_str() {
                "user" | "database" | "replication" => {}
                // libpq sends the locale's encoding (SQL_ASCII under C);
                // results are UTF-8 whatever it asks for, as reported below.
                "client_encoding" => {}
                "options" => {
                    for (name, v) in command_line_options(value) {
                        if let Err(e) = session.set_variable(&name, &v) {
                            return Err(self.fatal(sqlstate::of(&e), &e.to_string()));
                        }
                    }
                }
                k if k.starts_with("_pq_.") => unknown_options.push(key.clone()),
                _ => {
                    if let Err(e) = session.set_variable(&key, value) {
                        return Err(self.fatal(sqlstate::of(&e), &e.to_string()));
                    }
                }
            }
        }
        if !unknown_options.is_empty() {
            self.out.negotiate_version(0, &unknown_options);
        }
        self.out.auth_ok();
        for name in [
            "server_version",
            "server_encoding",
            "client_encoding",
            "datestyle",
            "timezone",
            "intervalstyle",
            "integer_datetimes",
            "standard_conforming_strings",
            "application_name",
            "is_superuser",
        ] {
            let value = match name {
                "is_superuser" => if session.is_superuser() { "on" } else { "off" }.to_string(),
                _ => session.settings().get(name).unwrap_or_default(),
            };
            self.out.parameter_status(&display_name(name), &value);
        }
        self.out
            .parameter_status("session_authorization", &session.current_user());
        let interrupt = session.interrupt();
        let ((pid, secret), cancels) = self.shared.register(interrupt.clone());
        registration.key = Some((pid, secret));
        self.cancels = Some(cancels);
        self.out.backend_key(pid, secret);
        self.out.ready(b'I');
        self.flush().await?;
        self.session = Some(session);
        self.interrupt = Some(interrupt);
        Ok(Some(registration))
    }

    /// Answers an SSLRequest with `S` and runs the TLS handshake. Bytes the
    /// client sent after its SSLRequest, before the handshake, are refused
    /// (they would be taken as if they had come encrypted).
    async fn upgrade_to_tls(&mut self) -> Result<(), Close> {
        if !self.stream.buffer().is_empty() {
            return Err(self.fatal(
                sqlstate::PROTOCOL_VIOLATION,
                "received unencrypted data after SSL request",
            ));
        }
        let acceptor = self.shared.config.tls.clone().ok_or(Close::Fatal)?;
        self.stream.write_all(b"S").await.map_err(|_| Close::Gone)?;
        let plain = std::mem::replace(self.stream.get_mut(), Stream::Upgrading);
        let Stream::Plain(tcp) = plain else {
            return Err(Close::Fatal);
        };
        let tls = acceptor.accept(tcp).await.map_err(|_| Close::Gone)?;
        self.stream = BufReader::with_capacity(64 << 10, tls);
        Ok(())
    }

    /// The SCRAM-SHA-256 exchange (see [`crate::scram`]); every failure is
    /// FATAL and closes the connection. Unless `authentic` (the verifier is
    /// a stand-in for a name without one), it fails like a wrong password.
    async fn scram(
        &mut self,
        verifier: &scram::Verifier,
        authentic: bool,
        user: &str,
    ) -> Result<(), Close> {
        let failed = format!("password authentication failed for user \"{user}\"");
        self.out.auth_sasl(scram::MECHANISM);
        self.flush().await?;
        let initial = self.auth_response().await?;
        let (mechanism, client_first) = match protocol::parse_sasl_initial(&initial) {
            Ok(m) => m,
            Err(e) => return Err(self.fatal(sqlstate::PROTOCOL_VIOLATION, &e.to_string())),
        };
        if mechanism != scram::MECHANISM {
            return Err(self.fatal(
                sqlstate::PROTOCOL_VIOLATION,
                "client selected an invalid SASL authentication mechanism",
            ));
        }
        let (exchange, server_first) = match scram::Exchange::start(verifier, client_first) {
            Ok(x) => x,
            Err(e) => return Err(self.fatal(sqlstate::PROTOCOL_VIOLATION, &e.to_string())),
        };
        self.out.auth_sasl_continue(server_first.as_bytes());
        self.flush().await?;
        let client_final = self.auth_response().await?;
        match exchange.finish(verifier, &client_final) {
            Ok(_) if !authentic => Err(self.fatal(sqlstate::INVALID_PASSWORD, &failed)),
            Ok(server_final) => {
                self.out.auth_sasl_final(server_final.as_bytes());
                Ok(())
            }
            Err(scram::ScramError::Malformed(m)) => Err(self.fatal(
                sqlstate::PROTOCOL_VIOLATION,
                &format!("malformed SCRAM message: {m}"),
            )),
            Err(_) => Err(self.fatal(sqlstate::INVALID_PASSWORD, &failed)),
        }
    }

    /// The body of the client's next authentication message ('p').
    async fn auth_response(&mut self) -> Result<Vec<u8>, Close> {
        let (tag, body) = self
            .read_message_within(MAX_AUTH_MESSAGE)
            .await?
            .ok_or(Close::Gone)?;
        if tag != b'p' {
            return Err(self.fatal(
                sqlstate::PROTOCOL_VIOLATION,
                &format!("expected SASL response, got message type {:?}", tag as char),
            ));
        }
        Ok(body)
    }

    /// Reads one message; `None` at a clean end of stream.
    async fn read_message(&mut self) -> Result<Option<(u8, Vec<u8>)>, Close> {
        self.read_message_within(MAX_MESSAGE).await
    }

    /// Reads one message of at most `max` body bytes.
    async fn read_message_within(&mut self, max: usize) -> Result<Option<(u8, Vec<u8>)>, Close> {
        let tag = match self.stream.read_u8().await {
            Ok(t) => t,
            Err(_) => return Ok(None),
        };
        let len = self.stream.read_i32().await.map_err(|_| Close::Gone)?;
        if len < 4 {
            return Err(self.fatal(
                sqlstate::PROTOCOL_VIOLATION,
                &ProtocolError::Length(len.into()).to_string(),
            ));
        }
        let body_len = len as usize - 4;
        if body_len > max {
            return Err(self.fatal(
                sqlstate::PROTOCOL_VIOLATION,
                &ProtocolError::TooLarge(body_len, max).to_string(),
            ));
        }
        let mut body = vec![0u8; body_len];
        self.stream
            .read_exact(&mut body)
            .await
            .map_err(|_| Close::Gone)?;
        Ok(Some((tag, body)))
    }

    async fn run(&mut self) -> Result<(), Close> {
        loop {
            if self.client_gone {
                return Err(Close::Gone);
            }
            let Some((tag, body)) = self.read_message().await? else {
                return Ok(());
            };
            let message = match protocol::parse_frontend(tag, &body) {
                Ok(m) => m,
                // The framing is intact, only a string is not UTF-8: the
                // statement fails, the connection stays (as PostgreSQL's).
                Err(e @ ProtocolError::NotUtf8(_)) => {
                    let message = e.to_string();
                    if tag == b'Q' {
                        self.out
                            .error("ERROR", sqlstate::CHARACTER_NOT_IN_REPERTOIRE, &message);
                        self.ready();
                        self.flush().await?;
                    } else if !self.skip_until_sync {
                        self.extended_error(sqlstate::CHARACTER_NOT_IN_REPERTOIRE, &message);
                        self.flush().await?;
                    }
                    continue;
                }
                Err(e) => {
                    self.out
                        .error("FATAL", sqlstate::PROTOCOL_VIOLATION, &e.to_string());
                    self.flush().await?;
                    return Err(Close::Fatal);
                }
            };
            drop(body);
            if self.skip_until_sync && !matches!(message, Frontend::Sync | Frontend::Terminate) {
                continue;
            }
            match message {
                Frontend::Query(sql) => {
                    let in_block = self.in_block();
                    self.simple_query(sql).await?;
                    self.transaction_ended(in_block);
                    self.ready();
                    self.flush().await?;
                    self.stop = None;
                }
                Frontend::Parse {
                    name,
                    query,
                    param_types,
                } => self.parse(name, query, param_types).await?,
                Frontend::Bind {
                    portal,
                    statement,
                    param_formats,
                    params,
                    result_formats,
                } => self.bind(portal, statement, param_formats, params, result_formats),
                Frontend::Describe { kind, name } => self.describe(kind, &name),
                Frontend::Execute { portal, max_rows } => self.execute(&portal, max_rows).await?,
                Frontend::Close { kind, name } => {
                    if kind == b'S' {
                        self.statements.remove(&name);
                    } else {
                        // A live portal's query is cancelled with it.
                        self.portals.remove(&name);
                    }
                    self.out.close_complete();
                }
                Frontend::Sync => {
                    self.skip_until_sync = false;
                    // Outside a transaction block Sync ends the implicit
                    // transaction, and every portal with it (PostgreSQL's
                    // rule); in a block they live until its end.
                    if !self.in_block() {
                        self.portals.clear();
                    }
                    self.ready();
                    self.flush().await?;
                    self.stop = None;
                }
                Frontend::Flush => self.flush().await?,
                Frontend::Terminate => return Ok(()),
                Frontend::Password(_) => {
                    self.extended_error(
                        sqlstate::PROTOCOL_VIOLATION,
                        "unexpected password message",
                    );
                }
                // A client still sending the data of a COPY that failed.
                Frontend::StrayCopy => {}
                Frontend::Unsupported(what) => {
                    self.extended_error(
                        sqlstate::FEATURE_NOT_SUPPORTED,
                        &format!("{what} is not supported"),
                    );
                }
            }
            if self.skip_until_sync {
                // This message failed (a skipped one never gets here, and
                // Sync clears the flag). PostgreSQL sends an error at once,
                // without waiting for Sync or Flush: a client that sent
                // Parse, Describe and Flush (asyncpg's prepare) waits for
                // the answer before it sends Sync.
                self.flush().await?;
            } else {
                self.flush_if_full().await?;
            }
        }
    }

    /// Whether the session is in a transaction block (failed or not).
    fn in_block(&self) -> bool {
        self.session.as_ref().is_some_and(|s| s.in_transaction())
    }

    /// After a statement: if it ended the transaction block the
    /// connection was in, the block's portals go (their queries are
    /// cancelled), as PostgreSQL drops portals at transaction end.
    fn transaction_ended(&mut self, was_in_block: bool) {
        if was_in_block && !self.in_block() {
            self.portals.clear();
        }
    }

    fn ready(&mut self) {
        let status = match &self.session {
            Some(s) if s.in_failed_transaction() => b'E',
            Some(s) if s.in_transaction() => b'T',
            _ => b'I',
        };
        self.out.ready(status);
    }

    /// An error inside an extended-protocol exchange: reported once, then the
    /// messages up to Sync are skipped.
    fn extended_error(&mut self, code: &str, message: &str) {
        // As in PostgreSQL, any error inside a transaction block aborts it,
        // also one the protocol layer raises (a bad Bind).
        if let Some(session) = self.session.as_mut() {
            session.fail_statement();
        }
        self.out.error("ERROR", code, message);
        self.skip_until_sync = true;
    }

    fn sql_error(&mut self, e: &SqlError) {
        self.out.error_with(
            "ERROR",
            sqlstate::of(e),
            &e.to_string(),
            &sqlstate::fields(e),
        );
    }

    /// Runs `f` on the session on a blocking thread. While it runs, watches
    /// the socket: if the client disconnects, the statement is cancelled.
    async fn with_session<R: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut Session) -> R + Send + 'static,
    ) -> Result<R, Close> {
        self.on_session(f, None).await
    }

    /// As [`Connection::with_session`], answering the events the statement
    /// streams meanwhile (`connection::stream`); those still in the channel
    /// when it returns are the caller's to drain.
    async fn on_session<R: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut Session) -> R + Send + 'static,
        mut streaming: Option<&mut Streaming>,
    ) -> Result<R, Close> {
        let mut session = self.session.take().ok_or(Close::Fatal)?;
        // statement_timeout (milliseconds; 0 = none) counts from now: time
        // spent waiting for a blocking thread counts against it.
        let timeout = session
            .settings()
            .get("statement_timeout")
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis);
        let now = std::time::Instant::now();
        // Cancels from here on stop this request, even before it reaches
        // its thread.
        if let Some(i) = &self.interrupt {
            i.arm(timeout.map(|t| now + t));
        }
        // Writes to the client race the timeout and cancels meanwhile.
        self.halt.send_replace(None);
        if let Some(cancels) = &self.cancels {
            self.stop = Some(Stop::new(timeout.map(|t| now + t), cancels.clone()));
        }
        let deadline = tokio::time::sleep(timeout.unwrap_or(Duration::MAX / 4));
        tokio::pin!(deadline);
        let mut timing = timeout.is_some();
        let mut task = tokio::task::spawn_blocking(move || {
            let r = f(&mut session);
            (session, r)
        });
        // Bytes already buffered mean the client is pipelining: it is there.
        let mut watch = self.stream.buffer().is_empty();
        let mut receiving = streaming.is_some();
        loop {
            tokio::select! {
                event = next_event(&mut streaming), if receiving => {
                    match (event, streaming.as_deref_mut()) {
                        // Boxed: an event's answer may run a statement
                        // (a copy) through this function again.
                        (Some(event), Some(streaming)) => {
                            Box::pin(self.on_event(streaming, event)).await?
                        }
                        _ => receiving = false,
                    }
                }
                joined = &mut task => {
                    // Unless it was stopped during a write, the reply is
                    // written as any other (see `stall`).
                    if !self.stop.as_ref().is_some_and(|s| s.stopped) {
                        self.stop = None;
                    }
                    return match joined {
                        Ok((session, r)) => {
                            self.session = Some(session);
                            Ok(r)
                        }
                        Err(_) => {
                            self.out.error("FATAL", sqlstate::INTERNAL_ERROR, "internal error: the statement's thread panicked");
                            Err(Close::Fatal)
                        }
                    };
                }
                () = &mut deadline, if timing => {
                    timing = false;
                    if let Some(i) = &self.interrupt {
                        i.time_out();
                    }
                }
                gone = client_gone(self.stream.get_ref()), if watch => {
                    watch = false;
                    if gone {
                        self.client_gone = true;
                        if let Some(i) = &self.interrupt {
                            i.cancel();
                        }
                    }
                }
            }
        }
    }

    /// Applies a `DEALLOCATE` / `DISCARD ALL` to this connection's prepared
    /// statements; other outputs pass through.
    fn deallocate(&mut self, output: StatementOutput) -> Result<StatementOutput, SqlError> {
        if let StatementOutput::Deallocate { name, tag } = &output {
            match name {
                None => {
                    self.statements.clear();
                    if tag == "DISCARD ALL" {
                        self.portals.clear();
                    }
                }
                Some(n) => {
                    if self.statements.remove(n).is_none() {
                        return Err(SqlError::UndefinedPreparedStatement(format!(
                            "prepared statement \"{n}\" does not exist"
                        )));
                    }
                }
            }
        }
        Ok(output)
    }

    async fn simple_query(&mut self, sql: String) -> Result<(), Close> {
        let (streamer, mut streaming) = Streaming::new(None, self.halt.subscribe());
        let statements = self
            .on_session(
                move |s| {
                    let mut statements = 0;
                    let sender = streamer.clone();
                    s.execute_statements_streaming(&sql, streamer, &mut |result| {
                        statements += 1;
                        // A client gone is noticed by the connection.
                        let _ = sender.send(Event::Statement(Box::new(result)));
                    });
                    statements
                },
                Some(&mut streaming),
            )
            .await?;
        self.drain(&mut streaming).await?;
        if statements == 0 {
            self.out.empty_query();
        }
        Ok(())
    }

    /// Replies to one statement of a simple query: its rows (unless they
    /// were streamed) and command tag, the copy sub-protocol, or its error.
    /// `copying`: the copy data of a `COPY … TO` that streamed while it
    /// ran (see `copy`).
    async fn answer(
        &mut self,
        result: Result<StatementOutput, SqlError>,
        copying: Option<RowWriter>,
    ) -> Result<(), Close> {
        match result.and_then(|output| self.deallocate(output)) {
            // A failed copy sent its error; the simple query goes on.
            Ok(StatementOutput::CopyIn(copy)) => {
                self.copy_in(copy).await?;
            }
            Ok(StatementOutput::CopyOut(copy)) => {
                self.copy_out(copy, copying).await?;
            }
            Err(e) if copying.is_some() => {
                // The client is in copy-out mode: end it, then report.
                self.out.copy_done();
                self.sql_error(&e);
            }
            Ok(output) => {
                let mut rows = match rows_of(output) {
                    Ok(rows) => rows,
                    Err(e) => {
                        self.sql_error(&e);
                        return Ok(());
                    }
                };
                if let Some(schema) = &rows.schema {
                    let description = describe_schema(schema, &[]);
                    self.out.row_description(&description);
                }
                self.send_rows(&mut rows, &[], 0).await?;
                if rows.tag.is_empty() {
                    self.out.empty_query();
                } else {
                    self.out.command_complete(&rows.tag);
                }
            }
            Err(e) => self.sql_error(&e),
        }
        Ok(())
    }

    async fn parse(
        &mut self,
        name: String,
        query: String,
        declared: Vec<u32>,
    ) -> Result<(), Close> {
        let prepared = self.with_session(move |s| s.prepare(&query)).await?;
        match prepared {
            Ok(prepared) => {
                let param_oids = prepared
                    .param_types
                    .iter()
                    .enumerate()
                    .map(|(i, t)| match declared.get(i) {
                        Some(&oid) if oid != 0 => oid,
                        _ => t.as_ref().map_or(types::TEXT, |t| types::pg_type(t).0),
                    })
                    .collect();
                self.statements.insert(
                    name,
                    Arc::new(Statement {
                        prepared: Arc::new(prepared),
                        param_oids,
                    }),
                );
                self.out.parse_complete();
            }
            Err(e) => {
                self.sql_error(&e);
                self.skip_until_sync = true;
            }
        }
        Ok(())
    }

    fn bind(
        &mut self,
        portal: String,
        statement: String,
        param_formats: Vec<i16>,
        params: Vec<Option<Vec<u8>>>,
        result_formats: Vec<i16>,
    ) {
        let Some(stmt) = self.statements.get(&statement).cloned() else {
            return self.extended_error(
                sqlstate::INVALID_SQL_STATEMENT_NAME,
                &format!("prepared statement \"{statement}\" does not exist"),
            );
        };
        let expected = stmt.param_oids.len();
        if params.len() != expected {
            return self.extended_error(
                sqlstate::PROTOCOL_VIOLATION,
                &format!(
                    "bind message supplies {} parameters, but prepared statement \"{statement}\" requires {expected}",
                    params.len()
                ),
            );
        }
        if param_formats.len() > 1 && param_formats.len() != params.len() {
            return self.extended_error(
                sqlstate::PROTOCOL_VIOLATION,
                &format!(
                    "bind message has {} parameter formats but {} parameters",
                    param_formats.len(),
                    params.len()
                ),
            );
        }
        let columns = stmt
            .prepared
            .schema
            .as_ref()
            .map_or(0, |s| s.fields().len());
        if result_formats.len() > 1 && result_formats.len() != columns {
            return self.extended_error(
                sqlstate::PROTOCOL_VIOLATION,
                &format!(
                    "bind message has {} result formats but query has {columns} columns",
                    result_formats.len()
                ),
            );
        }
        let mut values = Vec::with_capacity(params.len());
        for (i, value) in params.iter().enumerate() {
            let format = format_of(&param_formats, i);
            let target = stmt.prepared.param_types[i].as_ref();
            match types::decode_param(value.as_deref(), stmt.param_oids[i], format, target) {
                Ok(v) => values.push(v),
                Err(message) => {
                    return self.extended_error(
                        sqlstate::INVALID_TEXT_REPRESENTATION,
                        &format!("parameter ${}: {message}", i + 1),
                    )
                }
            }
        }
        self.portals.insert(
            portal,
            Portal {
                statement: stmt,
                params: values,
                result_formats,
                result: None,
                live: None,
            },
        );
        self.out.bind_complete();
    }

    fn describe(&mut self, kind: u8, name: &str) {
        if kind == b'S' {
            let Some(stmt) = self.statements.get(name).cloned() else {
                return self.extended_error(
                    sqlstate::INVALID_SQL_STATEMENT_NAME,
                    &format!("prepared statement \"{name}\" does not exist"),
                );
            };
            self.out.parameter_description(&stmt.param_oids);
            match &stmt.prepared.schema {
                Some(schema) => self.out.row_description(&describe_schema(schema, &[])),
                None => self.out.no_data(),
            }
        } else {
            let Some(portal) = self.portals.get(name) else {
                // A cursor (DECLARE) is a portal too.
                if let Some(schema) = self.session.as_ref().and_then(|s| s.cursor_schema(name)) {
                    return self.out.row_description(&describe_schema(&schema, &[]));
                }
                return self.extended_error(
                    sqlstate::INVALID_CURSOR_NAME,
                    &format!("portal \"{name}\" does not exist"),
                );
            };
            match &portal.statement.prepared.schema {
                Some(schema) => {
                    let d = describe_schema(schema, &portal.result_formats);
                    self.out.row_description(&d);
                }
                None => self.out.no_data(),
            }
        }
    }

    async fn execute(&mut self, name: &str, max_rows: i32) -> Result<(), Close> {
        let Some(mut portal) = self.portals.remove(name) else {
            self.extended_error(
                sqlstate::INVALID_CURSOR_NAME,
                &format!("portal \"{name}\" does not exist"),
            );
            return Ok(());
        };
        let limit = usize::try_from(max_rows).ok().filter(|&n| n > 0);
        if let Some(live) = portal.live.take() {
            return self.fetch_portal(name, portal, live, limit).await;
        }
        if portal.result.is_none() {
            let prepared = portal.statement.prepared.clone();
            let params = portal.params.clone();
            let in_block = self.in_block();
            // Without a row limit the rows stream as the query makes them;
            // with one the query is opened live, its rows fetched by this
            // Execute and the portal's next ones.
            let (streamer, mut streaming) =
                Streaming::new(Some(portal.result_formats.clone()), self.halt.subscribe());
            let outcome = match limit {
                None => {
                    self.on_session(
                        move |s| s.execute_prepared_streaming(&prepared, params, streamer),
                        Some(&mut streaming),
                    )
                    .await?
                }
                Some(_) => {
                    let opened = self
                        .on_session(
                            move |s| s.open_prepared(&prepared, params, streamer),
                            Some(&mut streaming),
                        )
                        .await?;
                    match opened {
                        Ok(Opened::Live(live)) => {
                            self.drain(&mut streaming).await?;
                            return self.fetch_portal(name, portal, live, limit).await;
                        }
                        Ok(Opened::Done(output)) => Ok(output),
                        Err(e) => Err(e),
                    }
                }
            };
            self.drain(&mut streaming).await?;
            self.transaction_ended(in_block);
            if streaming.failed {
                // A row could not be encoded; its error was the reply.
                self.skip_until_sync = true;
                return Ok(());
            }
            let copying = streaming.copy.take();
            // A COPY's exchange follows its Execute; after an error, the
            // messages up to Sync are skipped.
            let outcome = match outcome.and_then(|output| self.deallocate(output)) {
                Ok(StatementOutput::CopyIn(copy)) => {
                    self.skip_until_sync |= self.copy_in(copy).await?;
                    return Ok(());
                }
                Ok(StatementOutput::CopyOut(copy)) => {
                    self.skip_until_sync |= self.copy_out(copy, copying).await?;
                    return Ok(());
                }
                Err(e) if copying.is_some() => {
                    // The client is in copy-out mode: end it, then report.
                    self.out.copy_done();
                    Err(e)
                }
                other => other,
            };
            match outcome.and_then(rows_of) {
                Ok(rows) => portal.result = Some(rows),
                Err(e) => {
                    self.sql_error(&e);
                    self.skip_until_sync = true;
                    return Ok(());
                }
            }
        }
        let formats = portal.result_formats.clone();
        let Some(mut rows) = portal.result.take() else {
            return Ok(());
        };
        let limit = if max_rows > 0 {
            max_rows as usize
        } else {
            usize::MAX
        };
        let done = self.send_rows(&mut rows, &formats, limit).await?;
        if done {
            if rows.tag.is_empty() {
                self.out.empty_query();
            } else {
                self.out.command_complete(&rows.tag);
            }
        } else {
            self.out.portal_suspended();
            portal.result = Some(rows);
            self.portals.insert(name.to_string(), portal);
        }
        Ok(())
    }

    /// The next Execute of a portal whose query is live: up to `limit` rows
    /// (all that remain for `None`) stream to the client, then
    /// PortalSuspended — the portal kept, its query paused until the next
    /// Execute — or, after the last row, CommandComplete. An error ends the
    /// query and the portal.
    async fn fetch_portal(
        &mut self,
        name: &str,
        mut portal: Portal,
        mut live: LiveQuery,
        limit: Option<usize>,
    ) -> Result<(), Close> {
        let (streamer, mut streaming) =
            Streaming::new(Some(portal.result_formats.clone()), self.halt.subscribe());
        let (live, fetched) = self
            .on_session(
                move |s| {
                    let fetched = s.fetch_live(&mut live, limit, &*streamer);
                    (live, fetched)
                },
                Some(&mut streaming),
            )
            .await?;
        self.drain(&mut streaming).await?;
        if streaming.failed {
            // A row could not be encoded; its error was the reply. The
            // query is cancelled with `live`.
            self.skip_until_sync = true;
            return Ok(());
        }
        match fetched {
            Ok(f) if f.done => self
                .out
                .command_complete(&format!("SELECT {}", live.rows())),
            Ok(_) => {
                self.out.portal_suspended();
                portal.live = Some(live);
                self.portals.insert(name.to_string(), portal);
            }
            Err(e) => {
                self.sql_error(&e);
                self.skip_until_sync = true;
            }
        }
        Ok(())
    }

    /// Sends up to `limit` (0: all) further rows; returns whether all rows
    /// have now been sent.
    async fn send_rows(
        &mut self,
        rows: &mut Rows,
        formats: &[i16],
        limit: usize,
    ) -> Result<bool, Close> {
        let mut budget = if limit == 0 { usize::MAX } else { limit };
        let batches = std::mem::take(&mut rows.batches);
        let mut outcome = Ok(true);
        // Position of the next row to send: (batch, row within it).
        let mut skip = rows.sent;
        let mut batch_index = 0;
        while batch_index < batches.len() && skip >= batches[batch_index].num_rows() {
            skip -= batches[batch_index].num_rows();
            batch_index += 1;
        }
        let mut row = skip;
        while batch_index < batches.len() {
            if budget == 0 {
                outcome = Ok(false);
                break;
            }
            let batch = &batches[batch_index];
            match encode_rows(&mut self.out, batch, formats, row, budget) {
                Ok(n) => {
                    rows.sent += n;
                    budget -= n;
                    row += n;
                }
                Err(message) => {
                    self.out.error("ERROR", sqlstate::INTERNAL_ERROR, &message);
                    break;
                }
            }
            if row >= batch.num_rows() {
                batch_index += 1;
                row = 0;
            }
            if let Err(e) = self.flush_if_full().await {
                outcome = Err(e);
                break;
            }
        }
        if outcome.as_ref().is_ok_and(|done| *done) && batch_index < batches.len() {
            outcome = Ok(false);
        }
        rows.batches = batches;
        outcome
    }
}

/// Encodes rows `start..` of `batch` as DataRows, at most `budget` of them,
/// stopping early once [`FLUSH_BYTES`] are buffered; returns how many.
fn encode_rows(
    out: &mut Out,
    batch: &RecordBatch,
    formats: &[i16],
    start: usize,
    budget: usize,
) -> Result<usize, String> {
    let options = FormatOptions::default().with_null("");
    let columns = batch.columns();
    let encoders = columns
        .iter()
        .enumerate()
        .map(|(i, c)| ColumnEncoder::new(c, format_of(formats, i) == 1, &options))
        .collect::<Result<Vec<_>, _>>()?;
    let end = batch.num_rows().min(start.saturating_add(budget));
    let mut row = start;
    while row < end {
        let at = out.begin_row(columns.len());
        for (c, enc) in columns.iter().zip(&encoders) {
            if types::is_null(c, row) {
                out.null();
            } else {
                let v = out.begin_value();
                enc.encode(row, &mut out.buf);
                out.end_value(v);
            }
        }
        out.end_row(at);
        row += 1;
        if out.buf.len() >= FLUSH_BYTES {
            break;
        }
    }
    Ok(row - start)
}

/// The next event of a stream, where there is one (a select branch).
async fn next_event(streaming: &mut Option<&mut Streaming>) -> Option<Event> {
    match streaming {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// Waits until the client closes its end (`true`) or sends something
/// (`false`: it is still there; the bytes stay unread).
async fn client_gone(stream: &Stream) -> bool {
    let Some(tcp) = stream.tcp() else {
        return true;
    };
    let mut byte = [0u8; 1];
    match tcp.peek(&mut byte).await {
        Ok(0) => true,
        Ok(_) => false,
        Err(_) => true,
    }
}

fn format_of(formats: &[i16], i: usize) -> i16 {
    match formats.len() {
        0 => 0,
        1 => formats[0],
        _ => formats.get(i).copied().unwrap_or(0),
    }
}

fn describe_schema(schema: &SchemaRef, formats: &[i16]) -> Vec<(String, u32, i16, i16)> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (oid, size) = types::pg_type(f.data_type());
            (f.name().clone(), oid, size, format_of(formats, i))
        })
        .collect()
}

/// A statement's output as rows to send and the command tag; `COPY`'s
/// output is the copy sub-protocol's, answered before this.
fn rows_of(output: StatementOutput) -> Result<Rows, SqlError> {
    Ok(match output {
        StatementOutput::CopyIn(_) | StatementOutput::CopyOut(_) => {
            return Err(SqlError::Internal(
                "a COPY's output reached the rows of a result".into(),
            ))
        }
        StatementOutput::Query(q) => {
            let n = q.num_rows();
            Rows {
                // A streamed result's rows (and, in a simple query, its
                // description) were sent while it ran.
                schema: q.streamed.is_none().then_some(q.schema),
                batches: q.batches,
                sent: 0,
                tag: format!("SELECT {n}"),
            }
        }
        StatementOutput::Command { tag } | StatementOutput::Deallocate { tag, .. } => Rows {
            schema: None,
            batches: Vec::new(),
            sent: 0,
            tag,
        },
        StatementOutput::Explain(text) => {
            let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new(
                "QUERY PLAN",
                DataType::Utf8,
                false,
            )]));
            let lines: Vec<&str> = text.lines().collect();
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(StringArray::from(lines)) as ArrayRef],
            );
            Rows {
                schema: Some(schema),
                batches: batch.into_iter().collect(),
                sent: 0,
                tag: "EXPLAIN".into(),
            }
        }
    })
}

/// PostgreSQL's spelling of a reported parameter.
fn display_name(name: &str) -> String {
    match name {
        "datestyle" => "DateStyle".into(),
        "timezone" => "TimeZone".into(),
        "intervalstyle" => "IntervalStyle".into(),
        other => other.into(),
    }
}

/// `-c name=value` (or `--name=value`) switches of the startup `options`.
fn command_line_options(options: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut words = options.split_whitespace();
    while let Some(w) = words.next() {
        let setting = if w == "-c" {
            words.next()
        } else if let Some(rest) = w.strip_prefix("-c") {
            Some(rest)
        } else {
            w.strip_prefix("--")
        };
        if let Some((name, value)) = setting.and_then(|s| s.split_once('=')) {
            out.push((
                name.to_ascii_lowercase().replace('-', "_"),
                value.to_string(),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_switches() {
        assert_eq!(
            command_line_options("-c search_path=sf1 --stride.user_priority=2 -cDateStyle=ISO"),
            vec![
                ("search_path".to_string(), "sf1".to_string()),
                ("stride.user_priority".to_string(), "2".to_string()),
                ("datestyle".to_string(), "ISO".to_string()),
            ]
        );
    }
}

//! Where benchmark queries go: the in-process engine (one `Session` per
//! query) or any PostgreSQL-protocol server (one connection per in-flight
//! query, from a pool), behind one blocking interface so that Stride and
//! PostgreSQL are driven the same way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use stride_sql::{Engine, Session};

use super::phases::Phases;

/// `--pg host:port[/dbname]` and its credentials.
#[derive(Args, Debug, Clone, Default)]
pub struct TargetArgs {
    /// Drive a PostgreSQL-protocol server at host:port[/dbname] (stride serve,
    /// PostgreSQL) instead of the in-process engine. The scale-factor flags
    /// then only name the schemas to query (sf0_1, sf1, ssb_sf1, …).
    #[arg(long, value_name = "HOST:PORT[/DB]")]
    pub pg: Option<String>,
    /// User name for --pg.
    #[arg(long, env = "PGUSER", default_value = "stride")]
    pub pg_user: String,
    /// Password for --pg (default: none).
    #[arg(long, env = "PGPASSWORD")]
    pub pg_password: Option<String>,
}

/// One open connection: a session of the engine, or a client of a server.
pub enum Conn {
    Session(Box<Session>),
    Pg(tokio_postgres::Client),
}

/// The system under test.
pub enum Target {
    Engine(Arc<Engine>),
    Pg(Box<PgTarget>),
}

pub struct PgTarget {
    runtime: tokio::runtime::Runtime,
    config: tokio_postgres::Config,
    /// Idle connections by schema (their `search_path`).
    pool: Mutex<HashMap<String, Vec<tokio_postgres::Client>>>,
    /// What the server says it is (`SELECT version()`).
    pub version: String,
    /// The server keeps per-query statistics (a Stride server's
    /// `stride.queries`): requests are tagged so that their CPU time and
    /// CPU-time estimate can be read back after a run ([`Target::server_stats`]).
    tags: bool,
    /// The next request's tag (Relaxed: a unique number only).
    next_tag: std::sync::atomic::AtomicU64,
}

/// What a Stride server recorded for one tagged request.
#[derive(Debug, Clone, Copy)]
pub struct ServerStats {
    pub cpu_ms: f64,
    pub estimated_cpu_ms: Option<f64>,
    /// Morsels the request's queries ran and the tuples in them.
    pub morsels: u64,
    pub tuples: u64,
}

/// Over the wire to a Stride server, gives each sample the CPU time its
/// tasks took and SRPT's estimate for it, from what
/// [`Target::server_stats`] read (`stride.queries` keeps the last 1000
/// queries: earlier requests stay without). In process the samples carry
/// them already; other servers record none.
pub fn attach_server_stats(
    samples: &mut [super::stats::Sample],
    server: &HashMap<u64, ServerStats>,
) {
    for s in samples {
        if let Some(stats) = s.server_tag.and_then(|t| server.get(&t)) {
            s.task_cpu_ms = Some(stats.cpu_ms);
            s.estimated_cpu_ms = stats.estimated_cpu_ms;
        }
    }
}

/// The comment that tags a request: `/* stride-bench <n> */`.
const TAG_PREFIX: &str = "/* stride-bench ";

/// Parses `host:port[/dbname]`.
pub fn parse_address(addr: &str) -> Result<(String, u16, String)> {
    let (hostport, db) = match addr.split_once('/') {
        Some((hp, db)) if !db.is_empty() => (hp, db.to_string()),
        Some((hp, _)) => (hp, "postgres".to_string()),
        None => (addr, "postgres".to_string()),
    };
    let (host, port) = hostport
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("--pg {addr}: expected host:port[/dbname]"))?;
    if host.is_empty() {
        bail!("--pg {addr}: the host is missing");
    }
    let port: u16 = port
        .parse()
        .map_err(|_| anyhow!("--pg {addr}: \"{port}\" is not a port number"))?;
    Ok((host.to_string(), port, db))
}

impl Target {
    /// Connects to the server named by `--pg`.
    pub fn connect_pg(args: &TargetArgs) -> Result<Target> {
        let addr = args.pg.as_deref().context("no --pg address")?;
        let (host, port, db) = parse_address(addr)?;
        let mut config = tokio_postgres::Config::new();
        config
            .host(&host)
            .port(port)
            .dbname(&db)
            .user(&args.pg_user)
            .application_name("stride-bench");
        if let Some(p) = &args.pg_password {
            config.password(p);
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("bench-pg")
            .build()
            .context("starting the client runtime")?;
        let mut target = PgTarget {
            runtime,
            config,
            pool: Mutex::new(HashMap::new()),
            version: String::new(),
            tags: false,
            next_tag: std::sync::atomic::AtomicU64::new(0),
        };
        let client = target
            .open(None)
            .with_context(|| format!("connecting to {addr}"))?;
        let rows = target
            .runtime
            .block_on(client.simple_query("select version()"))
            .context("select version()")?;
        target.version = rows
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            })
            .unwrap_or_default();
        target.tags = target
            .runtime
            .block_on(client.simple_query("select query_id from stride.queries limit 0"))
            .is_ok();
        Ok(Target::Pg(Box::new(target)))
    }

    /// What a Stride server recorded for the tagged requests it still lists
    /// in `stride.queries` (its last 1000 queries), by tag; empty for other
    /// servers and in-process targets (whose requests report it directly).
    pub fn server_stats(&self) -> Result<HashMap<u64, ServerStats>> {
        let Target::Pg(pg) = self else {
            return Ok(HashMap::new());
        };
        if !pg.tags {
            return Ok(HashMap::new());
        }
        let client = pg.open(None)?;
        let rows = pg.runtime.block_on(client.simple_query(
            "select query, cpu_ms, estimated_cpu_ms, morsels, tuples from stride.queries \
             where state = 'done' and query like '/* stride-bench %'",
        ))?;
        let mut stats = HashMap::new();
        for row in rows {
            let tokio_postgres::SimpleQueryMessage::Row(r) = row else {
                continue;
            };
            let tag = r
                .get(0)
                .and_then(|q| q.strip_prefix(TAG_PREFIX))
                .and_then(|rest| rest.split_once(" */"))
                .and_then(|(n, _)| n.parse::<u64>().ok());
            let cpu_ms = r.get(1).and_then(|v| v.parse::<f64>().ok());
            if let (Some(tag), Some(cpu_ms)) = (tag, cpu_ms) {
                let estimated_cpu_ms = r.get(2).and_then(|v| v.parse::<f64>().ok());
                // A request of several statements sums its queries.
                let s = stats.entry(tag).or_insert(ServerStats {
                    cpu_ms: 0.0,
                    estimated_cpu_ms: Some(0.0),
                    morsels: 0,
                    tuples: 0,
                });
                let count = |i: usize| r.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                s.morsels += count(3);
                s.tuples += count(4);
                s.cpu_ms += cpu_ms;
                s.estimated_cpu_ms = s.estimated_cpu_ms.zip(estimated_cpu_ms).map(|(a, b)| a + b);
            }
        }
        Ok(stats)
    }

    /// A short name of the system: "stride", "postgres" or what the server says.
    pub fn system(&self) -> String {
        match self {
            Target::Engine(_) => "stride".into(),
            Target::Pg(pg) => {
                let v = pg.version.to_ascii_lowercase();
                if v.contains("stride") {
                    "stride (wire)".into()
                } else if v.contains("postgresql") {
                    "postgres".into()
                } else {
                    pg.version.clone()
                }
            }
        }
    }

    /// Sets the scheduling policy: in-process directly, over the wire with
    /// `SET stride.policy` (only Stride understands it).
    pub fn set_policy(&self, policy: &str) -> Result<()> {
        match self {
            Target::Engine(engine) => {
                let p = stride_sched::Policy::parse(policy)
                    .ok_or_else(|| anyhow!("unknown policy \"{policy}\""))?;
                engine.runtime().scheduler().set_policy(p);
                Ok(())
            }
            Target::Pg(_) => {
                let mut conn = self.acquire("")?;
                conn.run(self, &format!("SET stride.policy = '{policy}'"))
                    .with_context(|| {
                        format!("SET stride.policy = '{policy}' (is the server Stride?)")
                    })?;
                self.release("", conn);
                Ok(())
            }
        }
    }

    /// The current policy's name as the target reports it.
    pub fn policy_name(&self) -> Result<String> {
        match self {
            Target::Engine(engine) => Ok(engine.runtime().scheduler().policy().name().to_string()),
            Target::Pg(pg) => {
                if !pg.version.to_ascii_lowercase().contains("stride") {
                    return Ok("os".into());
                }
                let mut conn = self.acquire("")?;
                let value = match &mut conn {
                    Conn::Pg(client) => pg
                        .runtime
                        .block_on(client.simple_query("SHOW stride.policy"))?
                        .iter()
                        .find_map(|m| match m {
                            tokio_postgres::SimpleQueryMessage::Row(r) => {
                                r.get(0).map(str::to_string)
                            }
                            _ => None,
                        })
                        .unwrap_or_default(),
                    Conn::Session(_) => unreachable!("a PostgreSQL target hands out clients"),
                };
                self.release("", conn);
                Ok(value)
            }
        }
    }

    /// A connection whose unqualified table names resolve in `schema` (the
    /// empty string: the target's default).
    pub fn acquire(&self, schema: &str) -> Result<Conn> {
        match self {
            Target::Engine(engine) => {
                let mut session = engine.session();
                if !schema.is_empty() {
                    session.set_default_schema(schema)?;
                }
                Ok(Conn::Session(Box::new(session)))
            }
            Target::Pg(pg) => {
                let idle = pg
                    .pool
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_mut(schema)
                    .and_then(Vec::pop);
                match idle {
                    Some(c) if !c.is_closed() => Ok(Conn::Pg(c)),
                    _ => Ok(Conn::Pg(pg.open(Some(schema))?)),
                }
            }
        }
    }

    /// Returns a connection to the pool (sessions are simply dropped).
    pub fn release(&self, schema: &str, conn: Conn) {
        if let (Target::Pg(pg), Conn::Pg(client)) = (self, conn) {
            if !client.is_closed() {
                pg.pool
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(schema.to_string())
                    .or_default()
                    .push(client);
            }
        }
    }

    /// A Stride server over the wire (one that lists `stride.queries`).
    pub fn is_stride_server(&self) -> bool {
        matches!(self, Target::Pg(pg) if pg.tags)
    }

    /// The rows of a query sent over the wire as text (`None` for NULL), on
    /// a pooled connection; an in-process target answers an error.
    pub fn query_text(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>> {
        let Target::Pg(pg) = self else {
            bail!("query_text needs a server target");
        };
        let conn = self.acquire("")?;
        let Conn::Pg(client) = &conn else {
            unreachable!("a PostgreSQL target hands out clients")
        };
        let messages = pg.runtime.block_on(client.simple_query(sql));
        self.release("", conn);
        Ok(messages?
            .iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
                }
                _ => None,
            })
            .collect())
    }

    /// The engine, when the target is in-process.
    pub fn engine(&self) -> Option<&Arc<Engine>> {
        match self {
            Target::Engine(e) => Some(e),
            Target::Pg(_) => None,
        }
    }

    /// Worker threads, where known.
    pub fn workers(&self) -> Option<usize> {
        self.engine()
            .map(|e| e.runtime().scheduler().config().workers)
    }

    /// How this process's allocator purges freed memory ("reset" or
    /// "decommit", [`crate::allocator`]); `None` for a server over the wire.
    pub fn allocator_purge(&self) -> Option<&'static str> {
        self.engine().map(|_| {
            if crate::allocator::purge_decommits() {
                "decommit"
            } else {
                "reset"
            }
        })
    }

    /// Whether this process runs with transparent huge pages ("on" or
    /// "off", [`crate::allocator`]); `None` for a server over the wire.
    pub fn huge_pages(&self) -> Option<&'static str> {
        self.engine().map(|_| {
            if crate::allocator::huge_pages_disabled() {
                "off"
            } else {
                "on"
            }
        })
    }
}

impl PgTarget {
    fn open(&self, schema: Option<&str>) -> Result<tokio_postgres::Client> {
        let (client, connection) = self
            .runtime
            .block_on(self.config.connect(tokio_postgres::NoTls))?;
        self.runtime.spawn(async move {
            // Ends when the client is dropped or the server goes away; the
            // next query on the client reports the error.
            let _ = connection.await;
        });
        if let Some(schema) = schema.filter(|s| !s.is_empty()) {
            self.runtime
                .block_on(client.simple_query(&format!("SET search_path = {schema}")))
                .with_context(|| format!("SET search_path = {schema}"))?;
        }
        Ok(client)
    }
}

/// What one request produced.
#[derive(Debug, Clone, Default)]
pub struct RunInfo {
    pub rows: usize,
    /// Where the time went (in-process only).
    pub phases: Option<Phases>,
    /// The resource groups that ran the request's queries, in order
    /// (in-process only; uncorrelated subqueries run during planning are
    /// groups of their own and not listed).
    pub groups: Vec<u64>,
    /// The CPU time of those queries' tasks the scheduler was given as
    /// their estimate (in-process only; `None` when a query had none).
    pub estimated_cpu_ms: Option<f64>,
    /// The CPU time those queries' tasks took (in-process only).
    pub task_cpu_ms: Option<f64>,
    /// Morsels those queries ran and the tuples in them (in-process only).
    pub morsels: u64,
    pub tuples: u64,
    /// The request's tag on a Stride server ([`Target::server_stats`]).
    pub tag: Option<u64>,
}

impl Conn {
    /// Runs one request (usually one statement): its rows and, in-process,
    /// its phases.
    pub fn run(&mut self, target: &Target, sql: &str) -> Result<RunInfo> {
        match (self, target) {
            (Conn::Session(session), _) => {
                let mut info = RunInfo::default();
                let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
                let mut estimated = Some(0.0);
                for out in session.execute(sql)? {
                    if let stride_sql::StatementOutput::Query(q) = out {
                        info.rows += q.num_rows();
                        info.groups.push(q.stats.group);
                        info.phases
                            .get_or_insert_with(Phases::default)
                            .add(&Phases::of(&q));
                        *info.task_cpu_ms.get_or_insert(0.0) += ms(q.stats.cpu_time);
                        info.morsels += q.stats.morsels;
                        info.tuples += q.stats.tuples;
                        estimated = estimated.zip(q.stats.estimated_cpu).map(|(e, d)| e + ms(d));
                    }
                }
                info.estimated_cpu_ms = estimated.filter(|_| info.task_cpu_ms.is_some());
                Ok(info)
            }
            (Conn::Pg(client), Target::Pg(pg)) => {
                let tag = pg.tags.then(|| {
                    pg.next_tag
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                });
                let messages = match tag {
                    Some(t) => pg
                        .runtime
                        .block_on(client.simple_query(&format!("{TAG_PREFIX}{t} */ {sql}")))?,
                    None => pg.runtime.block_on(client.simple_query(sql))?,
                };
                Ok(RunInfo {
                    rows: messages
                        .iter()
                        .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
                        .count(),
                    phases: None,
                    groups: Vec::new(),
                    estimated_cpu_ms: None,
                    task_cpu_ms: None,
                    morsels: 0,
                    tuples: 0,
                    tag,
                })
            }
            (Conn::Pg(_), Target::Engine(_)) => {
                bail!("a server connection used with the in-process target")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_address;

    #[test]
    fn addresses() {
        assert_eq!(
            parse_address("127.0.0.1:5433").unwrap(),
            ("127.0.0.1".into(), 5433, "postgres".into())
        );
        assert_eq!(
            parse_address("localhost:5432/tpch").unwrap(),
            ("localhost".into(), 5432, "tpch".into())
        );
        assert!(parse_address("localhost").is_err());
        assert!(parse_address("localhost:x").is_err());
        assert!(parse_address(":5432").is_err());
    }
}

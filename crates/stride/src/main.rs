//! The `stride` command: one-shot SQL, an interactive shell, data export and
//! benchmarks, all in-process.

mod allocator;
mod bench;
mod shell;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use stride_sched::SchedulerConfig;
use stride_sql::{Engine, EngineConfig, Session};

/// mimalloc keeps freed memory for reuse; with glibc's allocator every
/// morsel-sized column (≥128 KiB) is a fresh mmap that the kernel zeroes.
/// How it hands memory back is set in [`allocator::configure`]. Every
/// allocation is counted by the allocation guard
/// (`stride_exec::alloc_guard`, `--allocation-limit`).
#[global_allocator]
static GLOBAL: stride_exec::alloc_guard::TrackingAllocator<mimalloc::MiMalloc> =
    stride_exec::alloc_guard::TrackingAllocator(mimalloc::MiMalloc);

#[derive(Parser, Debug)]
#[command(
    name = "stride",
    version,
    about = "Stride: a main-memory analytical SQL engine with its own query scheduler"
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug, Clone)]
struct GlobalArgs {
    /// Generate TPC-H at these scale factors (schema `sf<SF>`, e.g. sf0_1), comma-separated.
    #[arg(long, global = true, value_delimiter = ',')]
    tpch: Vec<f64>,
    /// Generate the Star Schema Benchmark at these scale factors (schema `ssb_sf<SF>`).
    #[arg(long, global = true, value_delimiter = ',')]
    ssb: Vec<f64>,
    /// Generate TPC-DS at these scale factors (schema `tpcds_sf<SF>`).
    #[arg(long, global = true, value_delimiter = ',')]
    tpcds: Vec<f64>,
    /// Seed of the SSB generator.
    #[arg(long, global = true, default_value_t = 42)]
    seed: u64,
    /// Worker threads (default: one per core).
    #[arg(long, global = true)]
    workers: Option<usize>,
    /// Fixed tuples per morsel (default: adaptive morsels sized to t_max, seed 001 §3.1).
    #[arg(long, global = true)]
    morsel_rows: Option<usize>,
    /// Scheduling policy: fifo, fair, stride (seed 001's decaying
    /// priorities), stride-queue (the same, decayed queries run in arrival
    /// order), lottery, srpt, if-srpt or threshold (default srpt, the best measured: see
    /// README). With `bench … --pg`, sent to the server as `SET
    /// stride.policy` only when given.
    #[arg(long, global = true)]
    policy: Option<String>,
    /// Do not pin workers to cores.
    #[arg(long, global = true)]
    no_pin: bool,
    /// Run every task to t_max: no preemption points between morsels.
    #[arg(long, global = true)]
    no_preemption: bool,
    /// Adaptive morsels per task in the default state (default 4; seed 001: 1).
    #[arg(long, global = true)]
    morsels_per_task: Option<u32>,
    /// OS scheduling of the worker threads: nice:N, idle (SCHED_IDLE) or
    /// normal; so that sessions' planning and the wire protocol preempt
    /// workers when they wake (default nice:10).
    #[arg(long, global = true)]
    worker_os_priority: Option<String>,
    /// The OS time slice workers ask for, in µs (Linux ≥ 6.12 custom
    /// slices, 100..=100000): a thread that wakes preempts a worker within
    /// it. 0 keeps the kernel's default (about 1.5 ms on 2 cores). Default 100.
    #[arg(long, global = true, value_name = "US")]
    worker_os_slice_us: Option<u64>,
    /// The workers' topology: detect (the machine's, from sysfs; the
    /// default), nodes=N,cores-per-node=M (synthetic: virtual cores on the
    /// machine's cpus round-robin, flagged oversubscribed when larger than
    /// the machine) or fake:nodes=N,cores-per-node=M (disjoint groups of real
    /// cpus as nodes, really pinned). Without --workers, a synthetic or fake
    /// topology runs one worker per core.
    #[arg(long, global = true, value_name = "SPEC", value_parser = parse_topology)]
    topology: Option<stride_sched::TopologySpec>,
    /// How tables' rows are dealt to the topology's memory nodes (seed 002
    /// §4.2): first-touch (the default: where the loader wrote them),
    /// interleave, rr (whole tables round-robin), pp (one range partition
    /// per node) or pax (16 Ki-row stripes round-robin). A session may set
    /// `stride.placement`.
    #[arg(long, global = true, value_name = "PLACEMENT")]
    placement: Option<stride_exec::placement::Placement>,
    /// How scans treat the placement (seed 002 §5): os (no affinity),
    /// target (own node first, then steal), bound (own node only) or auto
    /// (the default: bound when measured memory-bound, target otherwise).
    /// A session may set `stride.affinity`.
    #[arg(long, global = true, value_name = "AFFINITY")]
    affinity: Option<stride_exec::placement::Affinity>,
    /// Whether queries share scans of the same table snapshot with the
    /// concurrent queries that read it (issue 21, seed 003 §2.2): off (the
    /// default) or scans. A session may set `stride.sharing`.
    #[arg(long, global = true, value_name = "MODE")]
    sharing: Option<stride_exec::SharingMode>,
    /// How long a batch of shared scans forms at least, from its first
    /// query's arrival, in ms (default 0: the queries that arrive while a
    /// pass runs form the next one). `SET stride.sharing_cycle` changes it.
    #[arg(long, global = true, value_name = "MS")]
    sharing_cycle_ms: Option<u64>,
    /// Most queries in one batch of shared scans (default 64).
    /// `SET stride.sharing_max_batch` changes it.
    #[arg(long, global = true, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    sharing_max_batch: Option<u64>,
    /// Hand-over morsels in µs: a worker's morsels while a group it ranks
    /// first is between two task sets (default 100; 0: off).
    #[arg(long, global = true, value_name = "US")]
    handover_morsel_us: Option<u64>,
    /// Time slices of the fair, stride and lottery policies, in ms: a
    /// worker keeps running the query it ran last for up to this long unless
    /// work that became runnable meanwhile outranks it or the policy's
    /// choice is owed more than a slice (default 50; 0: off, every task is
    /// the policy's).
    #[arg(long, global = true, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=1000))]
    slice_ms: Option<u64>,
    /// Self-tuning of the decaying priorities (seed 001 §4), active while the
    /// policy is stride: `TRACK,REFRESH` in seconds (`20 60` works too), or
    /// `off`. Default: on with the seed's 20,60. Runs are listed in the
    /// system view `stride.tuning`.
    #[arg(long, global = true, value_name = "TRACK,REFRESH|off", value_parser = parse_self_tuning)]
    self_tuning: Option<SelfTuning>,
    /// Benchmarks submit every query with the specification's validation
    /// parameters instead of parameters drawn per submission.
    #[arg(long, global = true)]
    fixed_params: bool,
    /// SRPT's remaining-work estimates: off, plan (recorded per plan text,
    /// literals included), shape (per plan shape, literals masked) or
    /// instance (per shape, scaled by the query's estimated rows, with a
    /// cold start for new shapes; the default).
    #[arg(long, global = true, value_name = "MODE")]
    estimates: Option<String>,
    /// Memory all queries together may hold (e.g. 4GB; default 80% of the
    /// machine's or the cgroup's memory). A query whose charge would pass it
    /// fails with SQLSTATE 53200. `SET stride.memory_limit` changes it.
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_memory_size)]
    memory_limit: Option<usize>,
    /// Memory one query may hold unless its session sets
    /// `stride.query_memory_limit` (default half of --memory-limit).
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_memory_size)]
    query_memory_limit: Option<usize>,
    /// Bytes the whole process may have allocated — tables, queries,
    /// sessions, everything — before a query that allocates more fails
    /// with SQLSTATE 53200 at its next task boundary, so that no query can
    /// make an allocation fail and abort the server (default 90% of the
    /// machine's or the cgroup's memory, or 60% of `ulimit -v`; `unlimited`
    /// turns it off). `SET stride.allocation_limit` changes it.
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_allocation_limit)]
    allocation_limit: Option<usize>,
    /// Where queries spill what their memory share cannot hold: the server
    /// makes its directory `stride-<pid>` in this one (default the system's
    /// temporary directory), removes each query's files when it ends and
    /// the whole directory at start and exit. `SET stride.temp_directory`
    /// changes it.
    #[arg(long, global = true, value_name = "DIR")]
    temp_dir: Option<PathBuf>,
    /// Entries of the engine's plan cache of statement shapes (default
    /// 512); 0 turns plan caching off, also prepared statements'. `SET
    /// stride.plan_cache_size` changes it.
    #[arg(long, global = true, value_name = "ENTRIES")]
    plan_cache_size: Option<usize>,
    /// Bytes of spill files one query may hold (e.g. 10GB; no unit:
    /// kilobytes; default none); past it the query fails with SQLSTATE
    /// 53400. `SET temp_file_limit` changes it.
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_memory_size)]
    temp_file_limit: Option<usize>,
    /// Keep the catalog and every table created or loaded by SQL in this
    /// directory (created if missing): a write-ahead log fsynced at each
    /// commit, checkpoints as Arrow IPC files, recovery at start. One
    /// process per directory. Generated schemas (--tpch, --ssb, --tpcds) stay in
    /// memory only. Without it, `serve`, `sql` and `shell` use the default
    /// data directory: $STRIDE_DATA_DIR, else $XDG_DATA_HOME/stride, else
    /// ~/.local/share/stride (`bench` and `export` use none).
    #[arg(long, global = true, value_name = "DIR", conflicts_with = "in_memory")]
    data_dir: Option<PathBuf>,
    /// Use no data directory, not even the default one: every table lives
    /// only in the process and is lost at exit (what tests and benchmarks
    /// want, and a second server beside one on the default directory).
    #[arg(long, global = true)]
    in_memory: bool,
    /// Log bytes after which a commit triggers a checkpoint (default
    /// 256MB). `SET stride.checkpoint_log_size` changes it.
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_memory_size, conflicts_with = "in_memory")]
    checkpoint_log_size: Option<usize>,
    /// Rows (bytes in memory) from which one write — CREATE TABLE AS, COPY
    /// FROM, INSERT … SELECT, an external table's rows — goes to a file of
    /// its own, fsynced and named by a small log record, instead of into
    /// the log (default 8MB). `SET stride.bulk_write_size` changes it.
    #[arg(long, global = true, value_name = "SIZE", value_parser = parse_memory_size, conflicts_with = "in_memory")]
    bulk_write_size: Option<usize>,
}

/// Where a command's data directory came from.
#[derive(Debug, Clone, PartialEq)]
enum DataDirChoice {
    /// None: tables live in the process only.
    InMemory,
    /// `--data-dir DIR`.
    Explicit(PathBuf),
    /// The default directory (and which variable named it).
    Default { path: PathBuf, from: &'static str },
}

impl DataDirChoice {
    fn path(&self) -> Option<&std::path::Path> {
        match self {
            DataDirChoice::InMemory => None,
            DataDirChoice::Explicit(p) | DataDirChoice::Default { path: p, .. } => {
                Some(p.as_path())
            }
        }
    }
}

/// The data directory a command uses: `--data-dir`, none with
/// `--in-memory`, else the default one where `uses_default` (serve, sql,
/// shell), else none. `env` reads an environment variable.
fn choose_data_dir(
    global: &GlobalArgs,
    uses_default: bool,
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<DataDirChoice> {
    if let Some(dir) = &global.data_dir {
        return Ok(DataDirChoice::Explicit(dir.clone()));
    }
    if global.in_memory || !uses_default {
        return Ok(DataDirChoice::InMemory);
    }
    let set = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(path) = set("STRIDE_DATA_DIR") {
        return Ok(DataDirChoice::Default {
            path,
            from: "$STRIDE_DATA_DIR",
        });
    }
    // The XDG base directory specification ignores a relative value.
    if let Some(base) = set("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
        return Ok(DataDirChoice::Default {
            path: base.join("stride"),
            from: "$XDG_DATA_HOME/stride",
        });
    }
    match set("HOME") {
        Some(home) => Ok(DataDirChoice::Default {
            path: home.join(".local").join("share").join("stride"),
            from: "~/.local/share/stride",
        }),
        None => bail!(
            "no default data directory: neither STRIDE_DATA_DIR, XDG_DATA_HOME nor HOME is set; \
             pass --data-dir DIR, or --in-memory to keep tables in the process only"
        ),
    }
}

/// Parses a memory size (`4GB`, `512MB`; no unit: kilobytes).
fn parse_memory_size(value: &str) -> std::result::Result<usize, String> {
    match stride_exec::memory::parse_size(value) {
        Some(bytes) if bytes > 0 => Ok(bytes),
        _ => Err(format!(
            "expected a size such as 512MB or 4GB, got \"{value}\""
        )),
    }
}

/// Parses `--allocation-limit`: a size, or `unlimited` (`usize::MAX`).
fn parse_allocation_limit(value: &str) -> std::result::Result<usize, String> {
    if value.trim().eq_ignore_ascii_case("unlimited") {
        return Ok(usize::MAX);
    }
    parse_memory_size(value)
}

/// Parses `--topology SPEC`.
fn parse_topology(value: &str) -> std::result::Result<stride_sched::TopologySpec, String> {
    value
        .parse()
        .map_err(|e: stride_sched::TopologyError| e.to_string())
}

/// `--self-tuning`: the tracking and refresh intervals, or off.
#[derive(Debug, Clone, Copy, PartialEq)]
enum SelfTuning {
    Off,
    /// Track for this many seconds every that many seconds.
    On {
        track: f64,
        refresh: f64,
    },
}

/// Seed 001 §4's intervals: track 20 s every 60 s.
const SELF_TUNING_DEFAULT: SelfTuning = SelfTuning::On {
    track: 20.0,
    refresh: 60.0,
};

/// Parses `--self-tuning TRACK,REFRESH` (seconds) or `off`.
fn parse_self_tuning(value: &str) -> std::result::Result<SelfTuning, String> {
    if value.trim().eq_ignore_ascii_case("off") {
        return Ok(SelfTuning::Off);
    }
    let parts: Vec<&str> = value.split(',').map(str::trim).collect();
    match parts.as_slice() {
        [track, refresh] => {
            let num = |s: &str| {
                s.parse::<f64>()
                    .map_err(|_| format!("\"{s}\" is not a number of seconds"))
            };
            Ok(SelfTuning::On {
                track: num(track)?,
                refresh: num(refresh)?,
            })
        }
        _ => Err(format!(
            "expected TRACK,REFRESH in seconds or off, got \"{value}\""
        )),
    }
}

/// The command line with `--self-tuning TRACK REFRESH` (two words, the
/// older form) joined into `--self-tuning TRACK,REFRESH`.
fn join_self_tuning_words(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let is_number = |a: &std::ffi::OsString| a.to_str().is_some_and(|s| s.parse::<f64>().is_ok());
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        if args[i] == "--self-tuning"
            && i + 2 < args.len()
            && is_number(&args[i + 1])
            && is_number(&args[i + 2])
        {
            let mut joined = args[i + 1].clone();
            joined.push(",");
            joined.push(&args[i + 2]);
            out.extend([args[i].clone(), joined]);
            i += 3;
        } else {
            out.push(args[i].clone());
            i += 1;
        }
    }
    out
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run SQL statements and print their results.
    Sql {
        /// The SQL text (several statements separated by `;`).
        sql: String,
    },
    /// Interactive SQL shell (statements end with `;`).
    Shell,
    /// Write every table of the generated schemas to Parquet files DIR/<schema>/<table>.parquet.
    Export {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Serve SQL over the PostgreSQL wire protocol (psql, pgbench, drivers).
    Serve(ServeArgs),
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on.
    #[arg(long, default_value_t = 5433)]
    port: u16,
    /// The bootstrap superuser `stride`'s password: the first line of this
    /// file. With a password every client authenticates by SCRAM-SHA-256 as
    /// a role (`stride`, or one made by CREATE ROLE … LOGIN PASSWORD). The
    /// environment variable STRIDE_PASSWORD may give it instead; a password
    /// is never taken from the command line, where `ps` shows it. Without
    /// either, clients are trusted: a role's name connects as that role,
    /// any other name with the bootstrap superuser's privileges.
    #[arg(long)]
    password_file: Option<PathBuf>,
    /// Refuse connections beyond this many.
    #[arg(long, default_value_t = 1000)]
    max_connections: usize,
    /// Superusers may read server-side files (CREATE EXTERNAL TABLE) under
    /// this directory only; without it, not at all.
    #[arg(long)]
    import_dir: Option<PathBuf>,
    /// TLS certificate chain (PEM); with --tls-key, clients may connect with
    /// sslmode=require.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Refuse clients that do not use TLS.
    #[arg(long, requires = "tls_cert")]
    require_tls: bool,
    /// Seconds a client has to complete startup and authentication.
    #[arg(long, default_value_t = 10.0)]
    authentication_timeout: f64,
    /// Seconds a client whose statement was stopped (statement_timeout,
    /// CancelRequest) while its socket was full may read nothing before it
    /// is disconnected.
    #[arg(long, default_value_t = 10.0)]
    stalled_client_timeout: f64,
}

/// Builds the engine (with the data directory `--data-dir` names, none
/// with `--in-memory`, else the default one) and generates the requested
/// data: what `serve`, `sql` and `shell` run on.
fn start(global: &GlobalArgs) -> Result<(Arc<Engine>, Session)> {
    let dir = choose_data_dir(global, true, |name| std::env::var_os(name))?;
    start_traced(global, &dir, None)
}

/// The data directory of a command that uses none unless `--data-dir`
/// names one (`bench`, `export`: generated data, never the user's default
/// directory).
fn explicit_data_dir(global: &GlobalArgs) -> Result<DataDirChoice> {
    choose_data_dir(global, false, |name| std::env::var_os(name))
}

/// As [`start`], on the data directory `dir` chose, with every task
/// recorded by `tracer` (`bench … --trace`).
fn start_traced(
    global: &GlobalArgs,
    dir: &DataDirChoice,
    tracer: Option<Arc<stride_sched::Tracer>>,
) -> Result<(Arc<Engine>, Session)> {
    let mut scheduler = SchedulerConfig {
        trace: tracer,
        ..SchedulerConfig::default()
    };
    if let Some(w) = global.workers {
        if w == 0 {
            bail!("--workers must be at least 1");
        }
        scheduler.workers = w;
    }
    if let Some(rows) = global.morsel_rows {
        if rows == 0 {
            bail!("--morsel-rows must be at least 1");
        }
        scheduler.morsels = stride_sched::MorselPolicy::Fixed(rows);
    }
    scheduler.pin_workers = !global.no_pin;
    let topology = match global.topology {
        None | Some(stride_sched::TopologySpec::Detect) => stride_sched::Topology::machine(),
        Some(spec) => {
            let topology = Arc::new(spec.build().context("--topology")?);
            if global.workers.is_none() {
                scheduler.workers = topology.cores();
            }
            topology
        }
    };
    eprintln!(
        "topology: {topology}; {} workers{}",
        scheduler.workers,
        if scheduler.pin_workers {
            ", pinned"
        } else {
            ""
        }
    );
    scheduler.topology = topology;
    scheduler.preemption = !global.no_preemption;
    if let Some(p) = &global.worker_os_priority {
        scheduler.worker_os_priority =
            stride_sched::WorkerOsPriority::parse(p).with_context(|| {
                format!(
                    "--worker-os-priority {p}: expected normal, idle or nice:N with N in -20..=19"
                )
            })?;
    }
    if let Some(us) = global.worker_os_slice_us {
        if us != 0 && !(100..=100_000).contains(&us) {
            bail!("--worker-os-slice-us {us}: expected 0 (the kernel's default) or 100..=100000");
        }
        scheduler.worker_os_slice = (us > 0).then(|| std::time::Duration::from_micros(us));
    }
    if let Some(us) = global.handover_morsel_us {
        scheduler.handover_morsel = (us > 0).then(|| std::time::Duration::from_micros(us));
    }
    if let Some(ms) = global.slice_ms {
        scheduler.slice = (ms > 0).then(|| std::time::Duration::from_millis(ms));
    }
    if let Some(n) = global.morsels_per_task {
        if n == 0 {
            bail!("--morsels-per-task must be at least 1");
        }
        if let stride_sched::MorselPolicy::Adaptive(a) = &mut scheduler.morsels {
            a.morsels_per_task = n;
        }
    }
    // On by default: the tuner tracks and tunes only while the policy is
    // stride (a session may switch to it), and costs worker 0 a clock read
    // per decision otherwise.
    scheduler.tuning = match global.self_tuning.unwrap_or(SELF_TUNING_DEFAULT) {
        SelfTuning::Off => None,
        SelfTuning::On { track, refresh } => {
            if !(track > 0.0 && refresh >= track && refresh.is_finite()) {
                bail!("--self-tuning TRACK,REFRESH needs 0 < TRACK <= REFRESH (seconds), got {track},{refresh}");
            }
            Some(stride_sched::TuningConfig {
                track: std::time::Duration::from_secs_f64(track),
                refresh: std::time::Duration::from_secs_f64(refresh),
            })
        }
    };
    let policy = global.policy.as_deref().unwrap_or("srpt");
    scheduler.policy = stride_sched::Policy::parse(policy).with_context(|| {
        format!("unknown policy \"{policy}\" (expected fifo, fair, stride, stride-queue, lottery, srpt, if-srpt or threshold)")
    })?;
    let estimates = match &global.estimates {
        Some(m) => Some(
            stride_sql::history::EstimateMode::parse(m).with_context(|| {
                format!("--estimates {m}: expected off, plan, shape or instance")
            })?,
        ),
        None => None,
    };
    stride_exec::alloc_guard::set_limit(
        global
            .allocation_limit
            .unwrap_or_else(stride_exec::alloc_guard::default_limit),
    );
    let mut memory = stride_sql::MemoryConfig::default();
    if let Some(limit) = global.memory_limit {
        memory.limit = limit;
        memory.query_limit = limit / 2;
    }
    if let Some(limit) = global.query_memory_limit {
        memory.query_limit = limit;
    }
    let spill = stride_sql::SpillConfig {
        temp_dir: global.temp_dir.clone(),
        file_limit: global.temp_file_limit.map(|b| b as u64),
        force: false,
    };
    let mut scans = stride_sql::ScanDefaults::default();
    if let Some(p) = global.placement {
        scans.placement = p;
    }
    if let Some(a) = global.affinity {
        scans.affinity = a;
    }
    let mut sharing = stride_exec::SharingConfig::default();
    if let Some(mode) = global.sharing {
        sharing.mode = mode;
    }
    if let Some(ms) = global.sharing_cycle_ms {
        sharing.cycle = std::time::Duration::from_millis(ms);
    }
    if let Some(n) = global.sharing_max_batch {
        sharing.max_batch = n as usize;
    }
    let engine = Engine::new(EngineConfig {
        scheduler,
        memory,
        spill,
        scans,
        sharing,
    });
    if let Some(mode) = estimates {
        engine.runtime().history().set_mode(mode);
    }
    if let Some(entries) = global.plan_cache_size {
        engine.plan_cache().set_capacity(entries);
    }
    if let Some(path) = dir.path() {
        let config = stride_storage::durable::DataDirConfig {
            path: path.to_path_buf(),
            checkpoint_log_bytes: global
                .checkpoint_log_size
                .map_or(stride_storage::durable::DEFAULT_CHECKPOINT_LOG_BYTES, |b| {
                    b as u64
                }),
            bulk_write_bytes: global
                .bulk_write_size
                .map_or(stride_storage::durable::DEFAULT_BULK_WRITE_BYTES, |b| {
                    b as u64
                }),
        };
        let report = engine
            .open_data_dir(&config)
            .map_err(|e| data_dir_error(e, dir))?;
        eprintln!(
            "stride: data directory {}{}: {} tables from checkpoint {}, {} log records replayed{} in {:.1?}",
            path.display(),
            match dir {
                DataDirChoice::Default { from, .. } => {
                    format!(" (the default, {from}; --data-dir DIR for another, --in-memory for none)")
                }
                _ => String::new(),
            },
            report.tables_loaded,
            report
                .checkpoint_lsn
                .map_or_else(|| "none".to_string(), |l| format!("at LSN {l}")),
            report.records_replayed,
            if report.torn_bytes_cut > 0 {
                format!(
                    " ({} bytes of a torn last record cut off)",
                    report.torn_bytes_cut
                )
            } else {
                String::new()
            },
            report.elapsed
        );
    }
    // The command line's user owns the process; `serve` narrows this.
    engine
        .runtime()
        .set_file_access(stride_sql::FileAccess::Any);
    let mut session = engine.session();
    for &sf in &global.tpch {
        let t = Instant::now();
        let schema = engine
            .load_tpch(sf)
            .with_context(|| format!("generating TPC-H SF {sf}"))?;
        eprintln!(
            "generated TPC-H SF {sf} into schema {schema} in {:.1?}",
            t.elapsed()
        );
        if sf == global.tpch[0] {
            // The first generated schema is where unqualified names resolve.
            session.set_default_schema(&schema)?;
            engine.set_default_schema(&schema)?;
        }
    }
    for &sf in &global.ssb {
        let t = Instant::now();
        let schema = engine
            .load_ssb(sf, global.seed)
            .with_context(|| format!("generating SSB SF {sf}"))?;
        eprintln!(
            "generated SSB SF {sf} into schema {schema} in {:.1?}",
            t.elapsed()
        );
        if global.tpch.is_empty() {
            session.set_default_schema(&schema)?;
            engine.set_default_schema(&schema)?;
        }
    }
    for &sf in &global.tpcds {
        let t = Instant::now();
        let schema = engine
            .load_tpcds(sf)
            .with_context(|| format!("generating TPC-DS SF {sf}"))?;
        eprintln!(
            "generated TPC-DS SF {sf} into schema {schema} in {:.1?}",
            t.elapsed()
        );
        if global.tpch.is_empty() && global.ssb.is_empty() && sf == global.tpcds[0] {
            session.set_default_schema(&schema)?;
            engine.set_default_schema(&schema)?;
        }
    }
    Ok((engine, session))
}

/// The error of opening data directory `dir`: one in use by another
/// process names the directory and the flags that run beside it.
fn data_dir_error(e: stride_sql::SqlError, dir: &DataDirChoice) -> anyhow::Error {
    let path = dir
        .path()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    match (&e, dir) {
        (
            stride_sql::SqlError::Storage(stride_storage::StorageError::DataDirInUse {
                holder,
                ..
            }),
            DataDirChoice::Default { from, .. },
        ) => anyhow::anyhow!(
            "the default data directory {path} ({from}) is in use by another process ({holder}): \
             one process per directory. Pass --data-dir DIR to use another directory, or \
             --in-memory to keep this process's tables in memory only"
        ),
        (stride_sql::SqlError::Storage(stride_storage::StorageError::DataDirInUse { .. }), _) => {
            anyhow::anyhow!(
                "{e}: one process per directory. Pass --data-dir with another directory, or \
                 --in-memory to keep this process's tables in memory only"
            )
        }
        _ => anyhow::Error::new(e).context(format!("opening data directory {path}")),
    }
}

fn main() -> Result<()> {
    allocator::configure();
    let cli = Cli::parse_from(join_self_tuning_words(std::env::args_os().collect()));
    match &cli.command {
        Command::Sql { sql } => {
            let (_engine, mut session) = start(&cli.global)?;
            if !shell::run_text(&mut session, sql, &mut std::io::stdout())? {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Shell => {
            let (_engine, mut session) = start(&cli.global)?;
            shell::interactive(&mut session)
        }
        Command::Export { dir } => {
            let (engine, _) = start_traced(&cli.global, &explicit_data_dir(&cli.global)?, None)?;
            export(&engine, dir)
        }
        Command::Bench(cmd) => bench::run(cmd, &cli.global),
        Command::Serve(args) => serve(args, &cli.global),
    }
}

fn serve(args: &ServeArgs, global: &GlobalArgs) -> Result<()> {
    let ip: std::net::IpAddr = args
        .host
        .parse()
        .with_context(|| format!("--host {}: not an IP address", args.host))?;
    let started = Instant::now();
    let (engine, _) = start(global)?;
    engine.runtime().set_file_access(match &args.import_dir {
        Some(dir) => stride_sql::FileAccess::Under(
            dir.canonicalize()
                .with_context(|| format!("--import-dir {}", dir.display()))?,
        ),
        None => stride_sql::FileAccess::Denied,
    });
    let config = stride_server::ServerConfig {
        listen: std::net::SocketAddr::new(ip, args.port),
        auth: match server_password(args)? {
            Some(p) => stride_server::Auth::password(&p),
            None => stride_server::Auth::Trust,
        },
        max_connections: args.max_connections,
        authentication_timeout: Duration::from_secs_f64(args.authentication_timeout),
        tls: match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => {
                Some(stride_server::tls::TlsAcceptor::from_pem_files(cert, key)?)
            }
            _ => None,
        },
        require_tls: args.require_tls,
        stalled_client_timeout: Duration::from_secs_f64(args.stalled_client_timeout),
    };
    let runtime = stride_server::runtime_builder()
        .build()
        .context("starting the network runtime")?;
    runtime.block_on(async move {
        let server = stride_server::Server::bind(engine.clone(), config).await?;
        let schemas = engine.runtime().catalog().schema_names().join(", ");
        eprintln!(
            "stride: ready to accept connections on {} (schemas: {schemas}; policy {}, {} workers; started in {:.1?})",
            server.local_addr()?,
            engine.runtime().scheduler().policy().name(),
            engine.runtime().scheduler().config().workers,
            started.elapsed()
        );
        server.serve().await?;
        Ok(())
    })
}

/// The server's password: from `--password-file`, else `STRIDE_PASSWORD`.
fn server_password(args: &ServeArgs) -> Result<Option<String>> {
    if let Some(path) = &args.password_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--password-file {}", path.display()))?;
        let password = text.lines().next().unwrap_or_default().to_string();
        if password.is_empty() {
            bail!(
                "--password-file {}: the first line is empty",
                path.display()
            );
        }
        return Ok(Some(password));
    }
    Ok(std::env::var("STRIDE_PASSWORD")
        .ok()
        .filter(|p| !p.is_empty()))
}

fn export(engine: &Engine, dir: &std::path::Path) -> Result<()> {
    let catalog = engine.runtime().catalog();
    for schema in catalog.schema_names() {
        for name in catalog.table_names(&schema)? {
            let table = catalog.table(&schema, &name)?;
            let folder = dir.join(&schema);
            std::fs::create_dir_all(&folder)
                .with_context(|| format!("creating {}", folder.display()))?;
            let path = folder.join(format!("{name}.parquet"));
            let rows = stride_storage::files::write_parquet(&path, table.schema(), table.blocks())?;
            eprintln!("wrote {rows} rows to {}", path.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod cli_tests {
    use super::*;

    fn parse(line: &str) -> std::result::Result<Cli, clap::Error> {
        let args = line
            .split_whitespace()
            .map(std::ffi::OsString::from)
            .collect();
        Cli::try_parse_from(join_self_tuning_words(args))
    }

    #[test]
    fn self_tuning_takes_both_forms() {
        for line in [
            "stride --self-tuning 20,60 serve",
            "stride --self-tuning 20 60 serve",
            "stride serve --self-tuning 20,60",
            "stride serve --self-tuning 20 60",
            "stride --self-tuning=20,60 sql x",
        ] {
            let cli = parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(cli.global.self_tuning, Some(SELF_TUNING_DEFAULT), "{line}");
        }
        let cli = parse("stride --self-tuning off serve").unwrap();
        assert_eq!(cli.global.self_tuning, Some(SelfTuning::Off));
        let cli = parse("stride --self-tuning 5,30 serve").unwrap();
        assert_eq!(
            cli.global.self_tuning,
            Some(SelfTuning::On {
                track: 5.0,
                refresh: 30.0
            })
        );
        for bad in [
            "stride --self-tuning 20 serve",
            "stride --self-tuning 20,x serve",
            "stride --self-tuning 1,2,3 serve",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        // A number after the pair is left alone.
        let cli = parse("stride --self-tuning 20 60 sql 5").unwrap();
        assert!(matches!(cli.command, Command::Sql { ref sql } if sql == "5"));
    }

    /// The directory `line` runs on, with `vars` as the environment.
    fn data_dir(line: &str, uses_default: bool, vars: &[(&str, &str)]) -> Result<DataDirChoice> {
        let cli = parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        choose_data_dir(&cli.global, uses_default, |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| std::ffi::OsString::from(v))
        })
    }

    #[test]
    fn the_default_data_directory_follows_the_environment() {
        let all = [
            ("STRIDE_DATA_DIR", "/srv/stride"),
            ("XDG_DATA_HOME", "/home/u/.data"),
            ("HOME", "/home/u"),
        ];
        let default = |path: &str, from| DataDirChoice::Default {
            path: PathBuf::from(path),
            from,
        };
        assert_eq!(
            data_dir("stride serve", true, &all).unwrap(),
            default("/srv/stride", "$STRIDE_DATA_DIR")
        );
        assert_eq!(
            data_dir("stride sql x", true, &all[1..]).unwrap(),
            default("/home/u/.data/stride", "$XDG_DATA_HOME/stride")
        );
        assert_eq!(
            data_dir("stride shell", true, &all[2..]).unwrap(),
            default("/home/u/.local/share/stride", "~/.local/share/stride")
        );
        // Empty and relative values are not directories to use.
        let unset = [
            ("STRIDE_DATA_DIR", ""),
            ("XDG_DATA_HOME", "rel"),
            ("HOME", "/h"),
        ];
        assert_eq!(
            data_dir("stride serve", true, &unset).unwrap(),
            default("/h/.local/share/stride", "~/.local/share/stride")
        );
        let err = data_dir("stride serve", true, &[]).unwrap_err().to_string();
        assert!(
            err.contains("--data-dir") && err.contains("--in-memory"),
            "{err}"
        );
    }

    #[test]
    fn explicit_choices_win_over_the_default() {
        let env = [("STRIDE_DATA_DIR", "/srv/stride")];
        assert_eq!(
            data_dir("stride --data-dir /d serve", true, &env).unwrap(),
            DataDirChoice::Explicit(PathBuf::from("/d"))
        );
        assert_eq!(
            data_dir("stride serve --in-memory", true, &env).unwrap(),
            DataDirChoice::InMemory
        );
        // bench and export use a directory only when one is named.
        assert_eq!(
            data_dir("stride --tpch 1 export --dir x", false, &env).unwrap(),
            DataDirChoice::InMemory
        );
        assert_eq!(
            data_dir("stride --data-dir /d export --dir x", false, &env).unwrap(),
            DataDirChoice::Explicit(PathBuf::from("/d"))
        );
        for bad in [
            "stride --in-memory --data-dir /d serve",
            "stride --in-memory --checkpoint-log-size 1MB serve",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse("stride --checkpoint-log-size 1MB serve").is_ok());
    }

    #[test]
    fn defaults_and_flags() {
        let cli = parse("stride --fixed-params --estimates shape sql x").unwrap();
        assert!(cli.global.fixed_params);
        assert_eq!(cli.global.estimates.as_deref(), Some("shape"));
        let cli = parse("stride sql x").unwrap();
        assert!(!cli.global.fixed_params && cli.global.policy.is_none());
    }
}

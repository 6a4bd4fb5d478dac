//! The `stride` command: one-shot SQL, an interactive shell, data export and
//! benchmarks, all in-process.

mod allocator;
mod bench;
mod shell;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use stride_sched::SchedulerConfig;
use stride_sql::{Engine, EngineConfig, Session};

/// mimalloc keeps freed memory for reuse; with glibc's allocator every
/// morsel-sized column (≥128 KiB) is a fresh mmap that the kernel zeroes.
/// How it hands memory back is set in [`allocator::configure`].
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Seed of the SSB generator.
    #[arg(long, global = true, default_value_t = 42)]
    seed: u64,
    /// Worker threads (default: one per core).
    #[arg(long, global = true)]
    workers: Option<usize>,
    /// Fixed tuples per morsel (default: adaptive morsels sized to t_max, seed 001 §3.1).
    #[arg(long, global = true)]
    morsel_rows: Option<usize>,
    /// Scheduling policy: fifo, fair, stride (decaying priorities), lottery,
    /// srpt, if-srpt or threshold (default fifo). With `bench … --pg`, sent
    /// to the server as `SET stride.policy` only when given.
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
    /// Hand-over morsels in µs: a worker's morsels while a group it ranks
    /// first is between two task sets (default 100; 0: off).
    #[arg(long, global = true, value_name = "US")]
    handover_morsel_us: Option<u64>,
    /// Self-tuning of the decaying priorities (seed 001 §4, stride policy):
    /// `TRACK,REFRESH` in seconds (e.g. 20,60, the seed's values); off when
    /// absent. Runs are listed in the system view `stride.tuning`.
    #[arg(long, global = true, value_delimiter = ',', num_args = 2, value_names = ["TRACK", "REFRESH"])]
    self_tuning: Option<Vec<f64>>,
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
    /// Require this password from every client (default: trust any user).
    #[arg(long, env = "STRIDE_PASSWORD")]
    password: Option<String>,
    /// Refuse connections beyond this many.
    #[arg(long, default_value_t = 1000)]
    max_connections: usize,
}

/// Builds the engine and generates the requested data.
fn start(global: &GlobalArgs) -> Result<(Arc<Engine>, Session)> {
    start_traced(global, None)
}

/// As [`start`], with every task recorded by `tracer` (`bench … --trace`).
fn start_traced(
    global: &GlobalArgs,
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
    if let Some(n) = global.morsels_per_task {
        if n == 0 {
            bail!("--morsels-per-task must be at least 1");
        }
        if let stride_sched::MorselPolicy::Adaptive(a) = &mut scheduler.morsels {
            a.morsels_per_task = n;
        }
    }
    if let Some(t) = &global.self_tuning {
        let (track, refresh) = (t[0], t[1]);
        if !(track > 0.0 && refresh >= track && refresh.is_finite()) {
            bail!("--self-tuning TRACK,REFRESH needs 0 < TRACK <= REFRESH (seconds), got {track},{refresh}");
        }
        scheduler.tuning = Some(stride_sched::TuningConfig {
            track: std::time::Duration::from_secs_f64(track),
            refresh: std::time::Duration::from_secs_f64(refresh),
        });
    }
    let policy = global.policy.as_deref().unwrap_or("fifo");
    scheduler.policy = stride_sched::Policy::parse(policy).with_context(|| {
        format!("unknown policy \"{policy}\" (expected fifo, fair, stride, lottery, srpt, if-srpt or threshold)")
    })?;
    let engine = Engine::new(EngineConfig { scheduler });
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
    Ok((engine, session))
}

fn main() -> Result<()> {
    allocator::configure();
    let cli = Cli::parse();
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
            let (engine, _) = start(&cli.global)?;
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
    let config = stride_server::ServerConfig {
        listen: std::net::SocketAddr::new(ip, args.port),
        auth: match &args.password {
            Some(p) => stride_server::Auth::Password(p.clone()),
            None => stride_server::Auth::Trust,
        },
        max_connections: args.max_connections,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("stride-net")
        .build()
        .context("starting the network runtime")?;
    runtime.block_on(async move {
        let server = stride_server::Server::bind(engine.clone(), config).await?;
        let schemas = engine.catalog().schema_names().join(", ");
        eprintln!(
            "stride: ready to accept connections on {} (schemas: {schemas}; policy {}, {} workers; started in {:.1?})",
            server.local_addr()?,
            engine.scheduler().policy().name(),
            engine.scheduler().config().workers,
            started.elapsed()
        );
        server.serve().await?;
        Ok(())
    })
}

fn export(engine: &Engine, dir: &std::path::Path) -> Result<()> {
    let catalog = engine.catalog();
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

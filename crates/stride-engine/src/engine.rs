//! `Engine`: the engine-wide runtime every session shares — the scheduler,
//! the catalog, memory governance (pool, spill area, placed memory), shared
//! scans, the data directory, the query log, the feedback store and which
//! server files statements may read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use stride_exec::{MemoryPool, SharedScans, SpillArea};
use stride_sched::{Scheduler, TopologyKind};
use stride_storage::durable::{CheckpointInfo, DataDir, DataDirConfig, RecoveryReport};
use stride_storage::placement::{Backing, PlacedMemory, PlacedMemoryConfig};
use stride_storage::{Catalog, Table};

use crate::activity::{QueryLog, Viewer};
use crate::config::{EngineConfig, ScanDefaults};
use crate::error::{EngineError, Result, SettingKind};
use crate::feedback::WorkHistory;
use crate::file_access::FileAccess;

/// The engine-wide runtime: what every session of an engine shares.
pub struct Engine {
    catalog: Arc<Catalog>,
    scheduler: Scheduler,
    /// Active and recent queries.
    log: QueryLog,
    /// Recorded per-pipeline costs: SRPT's remaining-work estimates.
    history: WorkHistory,
    /// Which server-side files statements may read.
    file_access: Mutex<FileAccess>,
    /// The memory all queries are charged to.
    memory: Arc<MemoryPool>,
    /// The default share of one query (bytes; Relaxed: a plain setting).
    query_memory_limit: AtomicUsize,
    /// Where queries spill; replaced by `SET stride.temp_directory` (a
    /// running query keeps the area it started with).
    spill: Mutex<Arc<SpillArea>>,
    /// The data directory commits are logged to (`--data-dir`); set once.
    data_dir: OnceLock<Arc<DataDir>>,
    /// Scan placement and affinity unless a session sets its own.
    scans: ScanDefaults,
    /// Where `ALTER TABLE … SET (placement = …)` copies a table's rows: the
    /// kernel on the machine's own topology, logical records on fake and
    /// synthetic ones.
    placed_memory: Arc<PlacedMemory>,
    /// The scheduler topology's node ids (what placements deal rows to).
    nodes: Arc<[usize]>,
    /// Shared scans: batches of queries over one table snapshot.
    sharing: Arc<SharedScans>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("workers", &self.scheduler.config().workers)
            .finish()
    }
}

impl Engine {
    /// Starts an engine: its scheduler's workers, an empty catalog, the
    /// memory pool and the spill area (stale areas of gone processes
    /// removed).
    pub fn new(config: EngineConfig) -> Engine {
        let nodes: Arc<[usize]> = config
            .scheduler
            .topology
            .nodes()
            .iter()
            .map(|n| n.id)
            .collect();
        let backing = match config.scheduler.topology.kind() {
            TopologyKind::Detected => Backing::KernelThenFake,
            _ => Backing::Fake,
        };
        Engine {
            catalog: Arc::new(Catalog::new()),
            scheduler: Scheduler::new(config.scheduler),
            log: QueryLog::default(),
            history: WorkHistory::default(),
            file_access: Mutex::new(FileAccess::Denied),
            memory: MemoryPool::new(config.memory.limit),
            query_memory_limit: AtomicUsize::new(config.memory.query_limit),
            spill: Mutex::new({
                let area = SpillArea::new(config.spill.temp_dir.as_deref());
                area.set_file_limit(config.spill.file_limit);
                area.set_force(config.spill.force);
                area
            }),
            data_dir: OnceLock::new(),
            scans: config.scans,
            placed_memory: Arc::new(PlacedMemory::new(PlacedMemoryConfig { backing })),
            nodes,
            sharing: Arc::new(SharedScans::new(config.sharing)),
        }
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Active and recent queries (the `stride.queries` system view).
    pub fn query_log(&self) -> &QueryLog {
        &self.log
    }

    /// Recorded per-pipeline costs (SRPT's estimates): the feedback store.
    pub fn history(&self) -> &WorkHistory {
        &self.history
    }

    /// The engine's scan defaults (`--placement`, `--affinity`).
    pub fn scan_defaults(&self) -> ScanDefaults {
        self.scans
    }

    /// The engine's shared scans (`stride.sharing`, `stride.batches`).
    pub fn sharing(&self) -> &Arc<SharedScans> {
        &self.sharing
    }

    /// Where placed tables' rows live ([`Self::nodes`]' memory).
    pub fn placed_memory(&self) -> &Arc<PlacedMemory> {
        &self.placed_memory
    }

    /// The scheduler topology's node ids, in order.
    pub fn nodes(&self) -> &Arc<[usize]> {
        &self.nodes
    }

    /// Opens the data directory, recovers its tables into the catalog,
    /// hands the recovered catalog to `recovered` (the front end restores
    /// what it keeps in the catalog's security bytes) and, unless that
    /// fails, logs every commit from now on. Call once, before any table is
    /// created or generated.
    pub fn open_data_dir<E: From<EngineError>>(
        &self,
        config: &DataDirConfig,
        recovered: impl FnOnce(&Catalog) -> std::result::Result<(), E>,
    ) -> std::result::Result<&RecoveryReport, E> {
        if self.data_dir.get().is_some() {
            return Err(EngineError::Internal("a data directory is open already".into()).into());
        }
        let dir = DataDir::open(config, &self.catalog).map_err(EngineError::from)?;
        recovered(&self.catalog)?;
        let dir = self.data_dir.get_or_init(|| Arc::new(dir));
        Ok(dir.recovery())
    }

    /// The data directory, if one is open.
    pub fn data_dir(&self) -> Option<&Arc<DataDir>> {
        self.data_dir.get()
    }

    /// `CHECKPOINT`: writes the persistent tables to the data directory and
    /// truncates its log; `None` without a data directory.
    pub fn checkpoint(&self) -> Result<Option<CheckpointInfo>> {
        match self.data_dir.get() {
            Some(d) => Ok(Some(d.checkpoint(&self.catalog)?)),
            None => Ok(None),
        }
    }

    /// The spill area new queries spill to.
    pub fn spill_area(&self) -> Arc<SpillArea> {
        self.spill.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `stride.temp_directory`: the directory the spill area is made in.
    pub fn temp_directory(&self) -> String {
        let spill = self.spill_area();
        let dir = spill.dir();
        dir.parent().unwrap_or(dir).display().to_string()
    }

    /// Moves the spill area of queries started from now on into `parent`
    /// (`stride.temp_directory`), which must be an existing directory.
    pub fn set_temp_directory(&self, parent: &std::path::Path) -> Result<()> {
        if !parent.is_absolute() || !parent.is_dir() {
            return Err(EngineError::setting(
                SettingKind::InvalidValue,
                format!(
                    "invalid value for parameter \"stride.temp_directory\": \"{}\" (an existing directory, as an absolute path)",
                    parent.display()
                ),
            ));
        }
        let mut spill = self.spill.lock().unwrap_or_else(|e| e.into_inner());
        let area = SpillArea::new(Some(parent));
        area.set_file_limit(spill.file_limit());
        area.set_force(spill.forced());
        *spill = area;
        Ok(())
    }

    /// The memory pool every query is charged to.
    pub fn memory(&self) -> &Arc<MemoryPool> {
        &self.memory
    }

    /// Sets the server-wide memory limit (`stride.memory_limit`).
    pub fn set_memory_limit(&self, bytes: usize) {
        self.memory.set_limit(bytes);
    }

    /// The share of one query whose session did not set its own.
    pub fn query_memory_limit(&self) -> usize {
        self.query_memory_limit.load(Ordering::Relaxed)
    }

    /// Sets the default share of one query.
    pub fn set_query_memory_limit(&self, bytes: usize) {
        self.query_memory_limit.store(bytes, Ordering::Relaxed);
    }

    /// Sets which server-side files statements may read.
    pub fn set_file_access(&self, access: FileAccess) {
        *self.file_access.lock().unwrap_or_else(|e| e.into_inner()) = access;
    }

    /// Which server-side files statements may read.
    pub fn file_access(&self) -> FileAccess {
        self.file_access
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The runtime's system view `stride.<name>` (queries, workers, tuning,
    /// numa, memory, storage, storage_tables, batches), built now; `None`:
    /// not one of them.
    pub fn system_view(&self, name: &str, viewer: Viewer) -> Result<Option<Table>> {
        match name {
            "memory" => crate::activity::memory_table(
                &self.memory,
                self.query_memory_limit(),
                &self.spill_area(),
            )
            .map(Some),
            "storage" => crate::storage_view::storage_table(self.data_dir()).map(Some),
            "batches" => crate::sharing_view::batches_table(&self.sharing).map(Some),
            "storage_tables" => {
                crate::storage_view::storage_tables_table(&self.catalog, self.data_dir().is_some())
                    .map(Some)
            }
            _ => crate::activity::system_table(name, &self.log, &self.scheduler, viewer),
        }
    }
}

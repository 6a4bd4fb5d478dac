//! `EngineConfig`: what an engine is started with — its scheduler, memory
//! governance, spill area, scan defaults and shared scans.

use stride_exec::placement::{Affinity, Placement, MEMORY_BOUND_BYTES_PER_SEC};
use stride_sched::SchedulerConfig;

/// Engine settings.
#[derive(Debug, Clone, Default)]
pub struct EngineConfig {
    pub scheduler: SchedulerConfig,
    pub memory: MemoryConfig,
    pub spill: SpillConfig,
    pub scans: ScanDefaults,
    /// Shared scans: the default mode of sessions (`--sharing`), cycle
    /// length and maximum batch size (`stride_exec::shared`).
    pub sharing: stride_exec::SharingConfig,
}

/// How table scans are placed and scheduled unless a session sets
/// `stride.placement` / `stride.affinity` (`stride_exec::placement`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScanDefaults {
    pub placement: Placement,
    pub affinity: Affinity,
    /// Auto's memory-bound threshold, bytes per CPU second.
    pub memory_bound_bytes_per_sec: f64,
}

impl Default for ScanDefaults {
    fn default() -> Self {
        ScanDefaults {
            placement: Default::default(),
            affinity: Default::default(),
            memory_bound_bytes_per_sec: MEMORY_BOUND_BYTES_PER_SEC,
        }
    }
}

/// Where queries spill what their memory share cannot hold (see
/// `stride_exec::spill`).
#[derive(Debug, Clone, Default)]
pub struct SpillConfig {
    /// The directory in which the engine makes its spill area
    /// (`stride-<pid>`); the system's temporary directory when `None`.
    pub temp_dir: Option<std::path::PathBuf>,
    /// `temp_file_limit`: bytes one query may hold in spill files; `None`:
    /// no limit.
    pub file_limit: Option<u64>,
    /// For tests: spillable operators spill every batch
    /// (`stride_exec::SpillArea::set_force`).
    pub force: bool,
}

/// Memory governance (see `stride_exec::memory`).
#[derive(Debug, Clone, Copy)]
pub struct MemoryConfig {
    /// Bytes all queries together may hold (`stride.memory_limit`).
    pub limit: usize,
    /// Bytes one query may hold unless its session sets
    /// `stride.query_memory_limit`; never more than `limit`.
    pub query_limit: usize,
}

impl Default for MemoryConfig {
    /// [`stride_exec::memory::default_limit`] (80% of the machine's or the
    /// cgroup's memory), and half of it for one query, so that one runaway
    /// query leaves room for the others.
    fn default() -> Self {
        let limit = stride_exec::memory::default_limit();
        MemoryConfig {
            limit,
            query_limit: limit / 2,
        }
    }
}

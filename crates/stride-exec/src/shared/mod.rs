//! Shared scans (seed 003 §2.2, SharedDB; issue 21, first increment).
//!
//! Queries whose pipelines scan the same table snapshot at about the same
//! time attach to one *pass*: each morsel of the table is cut once, and
//! every attached query's pipeline (its filter, projection, join probes …
//! up to its first breaker) runs on it in the same task while its rows are
//! in cache.
//!
//! * **Who shares.** With `stride.sharing = scans`, a query's shareable
//!   pipeline ([`run::shareable`]) is its scan of the largest table it
//!   reads (in any order — not below a LIMIT), unless that is its last
//!   pipeline. Only queries over the same snapshot (the same `Arc` of
//!   blocks: each member sees its own snapshot) and the same scan placement
//!   share a pass.
//! * **Batches.** The members of one pass form a *batch*. The batching
//!   rule ([`SharedScans`]): a forming batch starts when it holds
//!   `max_batch` members, or when no pass over its snapshot runs and its
//!   cycle (from its first member's arrival) is over. With a cycle of 0 —
//!   the default — that is SharedDB's rule: the queries that arrive while a
//!   pass runs form the next one, and a query that finds no pass running
//!   starts one at once.
//! * **Scheduling.** A batch is one resource group whose one task set is
//!   the shared pass ([`pass::SharedPass`]), so every policy ranks a batch
//!   like a query (of the default user). A member's own pipelines before
//!   the shared one (build sides it probes) run first as its own group; the
//!   member then attaches and its session thread waits (never a worker);
//!   once the pass ended, the member's own group runs the shared
//!   pipeline's finalization and its remaining pipelines.
//! * **Accounting.** A member's `stride.queries` row gets the CPU time of
//!   its own operators during the pass plus an equal share (1/N of the N
//!   members at the start) of the pass's common work — the pass's CPU time
//!   not spent in any member's operators (cutting morsels, scheduling);
//!   every member counts all morsels and rows of the pass as read.
//!   `stride.batches` shows each finished batch.
//! * **Failure.** A member's error or panic in its operators fails that
//!   member only (it takes no further morsel); a cancel wakes its thread,
//!   which closes the member's gate — waiting for the pushes in flight —
//!   and returns; the pass goes on for the others.
//!
//! The protocol and why no morsel is lost or read twice for a member:
//! `README.md` beside this file.

mod batch;
mod hub;
mod member;
mod pass;
mod run;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use hub::{BatchRecord, SharedScans, RECENT_BATCHES};
pub use member::Member;
pub use pass::SHARED_MORSEL_MIN_ROWS;
pub(crate) use run::{prepare, Prelude};

/// Whether a session's queries share work (`SET stride.sharing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum SharingMode {
    /// Every query runs alone.
    #[default]
    Off = 0,
    /// Queries share scans of the same table snapshot.
    Scans = 1,
}

impl SharingMode {
    pub fn name(self) -> &'static str {
        match self {
            SharingMode::Off => "off",
            SharingMode::Scans => "scans",
        }
    }

    pub(crate) fn from_u8(v: u8) -> Self {
        match v {
            1 => SharingMode::Scans,
            _ => SharingMode::Off,
        }
    }
}

impl fmt::Display for SharingMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A sharing mode name that is none of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown sharing mode \"{0}\" (off or scans)")]
pub struct UnknownSharingMode(pub String);

impl FromStr for SharingMode {
    type Err = UnknownSharingMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Ok(SharingMode::Off),
            "scans" => Ok(SharingMode::Scans),
            _ => Err(UnknownSharingMode(s.to_string())),
        }
    }
}

/// The engine's sharing settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharingConfig {
    /// The mode of sessions that set none (`--sharing`).
    pub mode: SharingMode,
    /// How long a batch forms at least, from its first member's arrival
    /// (`stride.sharing_cycle`; 0: SharedDB's rule, see the module docs).
    pub cycle: Duration,
    /// Most members in one batch (`stride.sharing_max_batch`): bounds the
    /// work of one morsel (each member's operators run on it), which a
    /// task cannot split.
    pub max_batch: usize,
    /// Fewest rows per morsel of a shared pass (default
    /// [`SHARED_MORSEL_MIN_ROWS`]; tests lower it to keep tiny morsels).
    pub min_morsel_rows: usize,
}

/// Default maximum batch size: 64 members' operators on one morsel keep a
/// morsel of the smallest adaptive size well inside `t_max`.
pub const DEFAULT_MAX_BATCH: usize = 64;

impl Default for SharingConfig {
    fn default() -> Self {
        SharingConfig {
            mode: SharingMode::Off,
            cycle: Duration::ZERO,
            max_batch: DEFAULT_MAX_BATCH,
            min_morsel_rows: SHARED_MORSEL_MIN_ROWS,
        }
    }
}

//! Stride's in-memory columnar storage.
//!
//! * [`table`] — immutable table snapshots made of Arrow record batches
//!   ("blocks"); a morsel is any row range of a block.
//! * [`catalog`] — schemas of named tables; writers swap in new snapshots, so
//!   running queries keep reading the snapshot they planned against.
//! * [`tpch`], [`ssb`] — data generators (TPC-H through `tpchgen-arrow`; the Star
//!   Schema Benchmark following its specification).
//! * [`files`] — loading Parquet and CSV files, writing Parquet.
//! * [`wal`], [`durable`] — the data directory: write-ahead log (group
//!   commit), checkpoints as Arrow IPC files, crash recovery.
//! * [`placement`] — memory placed on NUMA nodes (really, or logically where
//!   the machine lacks the node) and the page-socket mapping that tracks it.

pub mod catalog;
pub mod constraints;
pub mod durable;
pub mod error;
pub mod files;
pub mod placement;
pub mod ssb;
pub mod table;
pub mod tpcds;
pub mod tpch;
pub mod wal;

pub use catalog::Catalog;
pub use error::{ObjectKind, StorageError};
pub use table::Table;

/// Rows per block when data is generated or loaded.
pub const DEFAULT_BLOCK_ROWS: usize = 64 * 1024;

/// Schema name for a scale factor: `0.1` → `sf0_1`, `1` → `sf1`.
pub fn scale_factor_schema(prefix: &str, scale: f64) -> String {
    let mut s = format!("{scale}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    format!("{prefix}sf{}", s.replace('.', "_"))
}

//! Memory governance: a server-wide pool and each query's share of it.
//!
//! ```text
//!   MemoryPool (one per engine)      limit: the server-wide memory limit
//!     ├─ QueryMemory (query A)       limit: A's share; used ≤ share
//!     └─ QueryMemory (query B)       Σ used of all queries ≤ pool limit
//! ```
//!
//! Every operator that holds memory past one morsel — a hash join's build
//! side and table, an aggregate's groups and accumulators, a sort's runs,
//! materialized buffers and the query's result — charges its bytes to its
//! query's [`QueryMemory`] *before* it keeps them. A charge that would take
//! the query past its share, or the pool past its limit, fails with
//! [`ExecError::MemoryExhausted`] (SQLSTATE 53200): the query fails alone,
//! and dropping its `QueryMemory` hands everything it held back to the pool.
//! Where the query has a spill directory ([`QueryMemory::with_spill`]),
//! sorts, GROUP BY aggregates and buffers between pipelines answer a
//! refused charge by writing to disk instead ([`crate::spill`]); the
//! refusal is then no error.
//!
//! Charges are made at the grain of a batch, not of an allocation: the
//! accounting bounds what a query can keep, it does not intercept the
//! allocator. Memory that lives only inside one morsel (an expression's
//! temporary arrays) is not charged; a join that would produce an unbounded
//! number of rows from one probe morsel emits them in bounded chunks
//! (see `operator::hash_join`).
//!
//! Both counters are plain atomics updated with compare-and-swap loops, so a
//! charge never takes a lock; `Relaxed` suffices because a counter is only
//! ever compared with its own limit (no other memory is published through
//! it).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow::array::{Array, RecordBatch};

use crate::alloc_guard::AllocAccount;
use crate::error::{ExecError, Result};
use crate::spill::QuerySpill;

/// Where a charge hit its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryScope {
    /// The query's own share (`stride.query_memory_limit`).
    Query,
    /// The server-wide limit (`stride.memory_limit`), shared by all queries.
    Server,
}

/// The server-wide pool every query's memory is charged to.
#[derive(Debug)]
pub struct MemoryPool {
    /// Bytes all queries together may hold; changed by `SET` (Relaxed: read
    /// by each charge, no other data depends on it).
    limit: AtomicUsize,
    /// Bytes held by all running queries (Relaxed CAS, see the module doc).
    used: AtomicUsize,
    /// Highest `used` since start (Relaxed `fetch_max`, for the view).
    peak: AtomicUsize,
    /// Queries that failed because of a limit (Relaxed counter).
    refusals: AtomicUsize,
}

impl MemoryPool {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(MemoryPool {
            limit: AtomicUsize::new(limit),
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            refusals: AtomicUsize::new(0),
        })
    }

    /// A pool without a limit (tests, EXPLAIN, embedded use).
    pub fn unbounded() -> Arc<Self> {
        Self::new(usize::MAX)
    }

    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Changes the limit; queries already holding more keep what they hold,
    /// their next charge fails.
    pub fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, Ordering::Relaxed);
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// How many charges were refused since start.
    pub fn refusals(&self) -> usize {
        self.refusals.load(Ordering::Relaxed)
    }

    /// Adds `bytes` to `used` if that stays within the limit.
    fn try_reserve(&self, bytes: usize) -> bool {
        let limit = self.limit();
        let reserved = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= limit)
            });
        match reserved {
            Ok(before) => {
                self.peak.fetch_max(before + bytes, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// One query's account: what it holds, against its share and the pool.
#[derive(Debug)]
pub struct QueryMemory {
    pool: Arc<MemoryPool>,
    /// The query's share in bytes (fixed when the query starts).
    limit: usize,
    /// Bytes the query holds (Relaxed CAS, see the module doc).
    used: AtomicUsize,
    /// Highest `used` of this query (Relaxed `fetch_max`).
    peak: AtomicUsize,
    /// Where the query's operators put what their share cannot hold;
    /// `None`: a refused charge fails the query (see [`crate::spill`]).
    spill: Option<Arc<QuerySpill>>,
    /// What the allocation guard knows of the query: its tasks allocate on
    /// it ([`crate::alloc_guard`]).
    alloc: Arc<AllocAccount>,
}

impl QueryMemory {
    /// An account of at most `limit` bytes in `pool`.
    pub fn new(pool: Arc<MemoryPool>, limit: usize) -> Arc<Self> {
        Self::with_spill(pool, limit, None)
    }

    /// As [`QueryMemory::new`], with a spill directory: sorts, aggregates
    /// and buffers write what a refused charge cannot keep to `spill`.
    pub fn with_spill(
        pool: Arc<MemoryPool>,
        limit: usize,
        spill: Option<Arc<QuerySpill>>,
    ) -> Arc<Self> {
        Arc::new(QueryMemory {
            pool,
            limit,
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            spill,
            alloc: AllocAccount::new(),
        })
    }

    /// The query's account with the allocation guard.
    pub fn alloc_account(&self) -> &Arc<AllocAccount> {
        &self.alloc
    }

    /// The query's spill directory, where it has one.
    pub fn spill(&self) -> Option<&Arc<QuerySpill>> {
        self.spill.as_ref()
    }

    /// Bytes the query wrote to spill files.
    pub fn spilled_bytes(&self) -> u64 {
        self.spill.as_ref().map_or(0, |s| s.spilled_bytes())
    }

    /// The spill directory, when `err` is a refused charge that spilling
    /// can answer; otherwise `err` back.
    pub fn spill_for(&self, err: ExecError) -> Result<&Arc<QuerySpill>> {
        match (&err, &self.spill) {
            (ExecError::MemoryExhausted { .. }, Some(spill)) => Ok(spill),
            _ => Err(err),
        }
    }

    /// The most bytes this query could hold now: its share, or the pool's
    /// limit where that is lower (spilling operators size their runs by it).
    pub fn budget(&self) -> usize {
        self.limit.min(self.pool.limit())
    }

    /// An account without limits.
    pub fn unbounded() -> Arc<Self> {
        Self::new(MemoryPool::unbounded(), usize::MAX)
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Charges `bytes` for `what` (named in the error), or fails with
    /// [`ExecError::MemoryExhausted`] and charges nothing.
    pub fn grow(&self, bytes: usize, what: &str) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let limit = self.limit;
        let mine = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&total| total <= limit)
            });
        let before = match mine {
            Ok(before) => before,
            Err(used) => return Err(self.refused(MemoryScope::Query, bytes, used, what)),
        };
        if !self.pool.try_reserve(bytes) {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
            return Err(self.refused(MemoryScope::Server, bytes, self.pool.used(), what));
        }
        self.peak.fetch_max(before + bytes, Ordering::Relaxed);
        Ok(())
    }

    /// As [`QueryMemory::grow`], for an operator that spills what is
    /// refused: refused at once where the spill area forces spilling (tests).
    pub fn grow_spillable(&self, bytes: usize, what: &str) -> Result<()> {
        match &self.spill {
            Some(spill) if spill.forced() => Err(ExecError::MemoryExhausted {
                scope: MemoryScope::Query,
                what: what.to_string(),
                requested: bytes,
                used: self.used(),
                limit: self.limit,
            }),
            _ => self.grow(bytes, what),
        }
    }

    /// Returns `bytes` that were charged and are no longer held.
    pub fn shrink(&self, bytes: usize) {
        let bytes = bytes.min(self.used());
        self.used.fetch_sub(bytes, Ordering::Relaxed);
        self.pool.release(bytes);
    }

    /// Charges `bytes` until the returned guard is dropped (memory held for
    /// one step, such as a sort's concatenated input).
    pub fn charge(self: &Arc<Self>, bytes: usize, what: &str) -> Result<Charge> {
        self.grow(bytes, what)?;
        Ok(Charge {
            memory: self.clone(),
            bytes,
        })
    }

    /// A guard over `bytes` already charged (by [`QueryMemory::grow`]):
    /// handing held memory to whoever keeps it from now on, returned when
    /// the guard drops.
    pub fn adopt(self: &Arc<Self>, bytes: usize) -> Charge {
        Charge {
            memory: self.clone(),
            bytes,
        }
    }

    fn refused(&self, scope: MemoryScope, requested: usize, used: usize, what: &str) -> ExecError {
        self.pool.refusals.fetch_add(1, Ordering::Relaxed);
        ExecError::MemoryExhausted {
            scope,
            what: what.to_string(),
            requested,
            used,
            limit: match scope {
                MemoryScope::Query => self.limit,
                MemoryScope::Server => self.pool.limit(),
            },
        }
    }
}

impl Drop for QueryMemory {
    fn drop(&mut self) {
        // Everything the query still holds goes back with it.
        self.pool.release(*self.used.get_mut());
    }
}

/// Memory charged for as long as the guard lives.
#[derive(Debug)]
pub struct Charge {
    memory: Arc<QueryMemory>,
    bytes: usize,
}

impl Charge {
    /// Charges `bytes` more to the same guard.
    pub fn grow(&mut self, bytes: usize, what: &str) -> Result<()> {
        self.memory.grow(bytes, what)?;
        self.bytes += bytes;
        Ok(())
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.memory.shrink(self.bytes);
    }
}

/// The memory this process may use: the least of the machine's RAM, the
/// cgroup's limit and the address-space limit (`ulimit -v`) where those are
/// set; `None` where none can be read.
pub fn available_memory() -> Option<usize> {
    [ram_and_cgroup(), address_space_limit()]
        .into_iter()
        .flatten()
        .min()
}

/// `RLIMIT_AS`, where one is set.
pub(crate) fn address_space_limit() -> Option<usize> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid, exclusive pointer.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) };
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur as usize)
}

pub(crate) fn ram_and_cgroup() -> Option<usize> {
    let ram = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        });
    // cgroup v2 writes "max" when unlimited, which does not parse.
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok());
    match (ram, cgroup) {
        (Some(r), Some(c)) => Some(r.min(c)),
        (r, c) => r.or(c),
    }
}

/// The default server-wide limit: this fraction of [`available_memory`]
/// (DuckDB's default is the same 80%), leaving room for tables, connections
/// and the allocator's slack.
pub const DEFAULT_LIMIT_FRACTION: f64 = 0.8;

/// The default server-wide limit in bytes (8 GiB where the machine's memory
/// cannot be read).
pub fn default_limit() -> usize {
    available_memory()
        .map(|m| (m as f64 * DEFAULT_LIMIT_FRACTION) as usize)
        .unwrap_or(8 << 30)
}

/// Splits a PostgreSQL quantity setting (`512MB`, `1.5 s`) into its number
/// and its unit (trimmed; empty when none); `None` when the number does not
/// parse.
pub fn split_quantity(value: &str) -> Option<(f64, &str)> {
    let v = value.trim();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (number, unit) = v.split_at(split);
    Some((number.parse().ok()?, unit.trim()))
}

/// Parses a memory size as PostgreSQL's memory settings take it: a number
/// with an optional unit `B`, `kB`, `MB`, `GB`, `TB` (powers of 1024, as
/// PostgreSQL reads them; `KiB`…`TiB` too); without a unit, kilobytes (as
/// `work_mem`). `None` for anything else or a value that overflows.
pub fn parse_size(value: &str) -> Option<usize> {
    let (number, unit) = split_quantity(value)?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "b" => 0,
        "" | "kb" | "kib" => 10,
        "mb" | "mib" => 20,
        "gb" | "gib" => 30,
        "tb" | "tib" => 40,
        _ => return None,
    };
    let bytes = (number * (1u64 << shift) as f64).round();
    (bytes.is_finite() && bytes >= 0.0 && bytes < usize::MAX as f64).then_some(bytes as usize)
}

/// The bytes `batch` adds to what a query holds: the memory of the rows it
/// addresses, not of buffers it shares with a larger array (a slice of a
/// stored table costs only its rows).
pub fn batch_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|c| {
            let data = c.to_data();
            data.get_slice_memory_size()
                .unwrap_or_else(|_| c.get_array_memory_size())
        })
        .sum()
}

/// Formats a byte count for messages and views (`1.5 GiB`).
pub fn format_bytes(bytes: usize) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn a_query_is_held_to_its_share_and_the_pool_to_its_limit() {
        let pool = MemoryPool::new(1000);
        let a = QueryMemory::new(pool.clone(), 600);
        let b = QueryMemory::new(pool.clone(), 600);
        a.grow(500, "a").unwrap();
        let err = a.grow(200, "sort").unwrap_err();
        assert!(
            matches!(
                err,
                ExecError::MemoryExhausted {
                    scope: MemoryScope::Query,
                    requested: 200,
                    used: 500,
                    limit: 600,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(a.used(), 500, "a refused charge charges nothing");
        b.grow(400, "b").unwrap();
        let err = b.grow(150, "hash table").unwrap_err();
        assert!(
            matches!(
                err,
                ExecError::MemoryExhausted {
                    scope: MemoryScope::Server,
                    limit: 1000,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!((b.used(), pool.used()), (400, 900));
        assert_eq!(pool.refusals(), 2);
        drop(a);
        assert_eq!(pool.used(), 400, "a dropped query returns what it held");
        b.grow(150, "b").unwrap();
        assert_eq!(pool.peak(), 900);
        drop(b);
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn a_charge_is_returned_when_its_guard_drops() {
        let pool = MemoryPool::new(100);
        let q = QueryMemory::new(pool.clone(), 100);
        {
            let _c = q.charge(80, "concat").unwrap();
            assert_eq!(pool.used(), 80);
            assert!(q.grow(30, "more").is_err());
        }
        assert_eq!((q.used(), pool.used(), q.peak()), (0, 0, 80));
        q.grow(30, "more").unwrap();
        pool.set_limit(10);
        assert!(q.grow(1, "after lowering").is_err());
    }

    #[test]
    fn concurrent_charges_never_pass_the_limit_and_all_return() {
        let pool = MemoryPool::new(10_000);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let pool = pool.clone();
                std::thread::spawn(move || {
                    let q = QueryMemory::new(pool.clone(), 5_000);
                    let mut held = 0;
                    for _ in 0..1000 {
                        if q.grow(7, "x").is_ok() {
                            held += 7;
                        }
                        assert!(pool.used() <= 10_000);
                    }
                    assert_eq!(q.used(), held);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(pool.used(), 0);
        assert!(pool.peak() <= 10_000);
    }

    #[test]
    fn a_slice_costs_its_rows_only() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from_iter_values(0..10_000))],
        )
        .unwrap();
        assert!(batch_bytes(&batch) >= 80_000);
        assert_eq!(batch_bytes(&batch.slice(0, 100)), 800);
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(12), "12 bytes");
    }

    #[test]
    fn sizes_parse_as_postgresql_memory_settings() {
        assert_eq!(parse_size("4GB"), Some(4 << 30));
        assert_eq!(parse_size("1 GiB"), Some(1 << 30));
        assert_eq!(parse_size("512MB"), Some(512 << 20));
        assert_eq!(parse_size("64kB"), Some(64 << 10));
        assert_eq!(parse_size("1024"), Some(1 << 20), "no unit: kilobytes");
        assert_eq!(parse_size("100B"), Some(100));
        assert_eq!(parse_size("1.5GB"), Some(3 << 29));
        for bad in ["", "-1GB", "4 parsecs", "GB", "1e400GB"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
        assert!(default_limit() > 0);
    }
}

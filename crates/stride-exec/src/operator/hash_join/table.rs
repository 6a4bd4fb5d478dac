//! The hash table and the insert pipeline that links its chains.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use stride_sched::FinalizeContext;

use arrow::array::{AsArray, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt32Type};

use super::grace::GraceJoin;
use super::keys::Keys;
use crate::error::{ExecError, Result};
use crate::operator::Sink;
use crate::seq::MorselSeq;
use crate::source::{Morsel, Source};
use crate::step::Steps;

/// Build tables of at most this many rows are linked inside the build's
/// `finish` (well under a millisecond) instead of by the insert pipeline.
pub const INLINE_INSERT_ROWS: usize = 1 << 14;

/// A table's buckets, chains and match bits for `n` build rows, all
/// empty: what takes the time of allocating a large table (writing every
/// bucket once), done apart from the rest of its layout.
#[derive(Debug)]
pub(super) struct TableStructures {
    heads: Vec<AtomicU32>,
    next: Vec<AtomicU32>,
    matched: Vec<AtomicU64>,
}

impl TableStructures {
    pub(super) fn new(n: usize, track_matches: bool) -> Result<Self> {
        if n >= u32::MAX as usize {
            return Err(ExecError::Unsupported(format!(
                "hash join build side of {n} rows (limit {})",
                u32::MAX - 1
            )));
        }
        let buckets = (n.max(1) * 2).next_power_of_two();
        Ok(TableStructures {
            heads: (0..buckets).map(|_| AtomicU32::new(0)).collect(),
            next: (0..n).map(|_| AtomicU32::new(0)).collect(),
            matched: if track_matches {
                (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect()
            } else {
                Vec::new()
            },
        })
    }
}

/// The build rows of `n` whose key is NULL, ascending.
pub(super) fn null_rows(keys: &Keys, n: usize) -> Vec<u32> {
    (0..n)
        .filter(|&row| keys.is_null(row))
        .map(|row| row as u32)
        .collect()
}

/// The hash table: chained buckets over the concatenated build rows.
#[derive(Debug)]
pub struct JoinHashTable {
    pub(super) batch: RecordBatch,
    pub(super) keys: Keys,
    /// `heads[h & mask]` = 1 + first build row of the bucket's chain, 0 if
    /// empty. Swapped (Relaxed) by inserts; loaded (Relaxed) by probes, in a
    /// later task set (see the module doc for the ordering).
    pub(super) heads: Vec<AtomicU32>,
    /// `next[row]` = 1 + next build row in the chain, 0 at the end. Stored
    /// once per row by the row's insert (Relaxed); loaded by probes.
    pub(super) next: Vec<AtomicU32>,
    pub(super) mask: u64,
    /// Rows the insert pipeline links: all of them, or 0 when the build's
    /// `finish` linked them (tables of at most [`INLINE_INSERT_ROWS`] rows).
    pub(super) pipeline_rows: usize,
    /// Set (Release) by the insert pipeline's finish once every row is linked;
    /// loaded (Acquire) by each probe, which fails on an unlinked table.
    pub(super) ready: AtomicBool,
    /// One bit per build row, set (fetch_or, Relaxed) when the row matched.
    /// Read by the build-side pass, which runs in a later task set: the
    /// scheduler's finalization hand-off orders all writes before those reads.
    pub(super) matched: Vec<AtomicU64>,
    /// Build rows whose key is NULL (for `NOT IN` semantics), ascending.
    pub(super) null_rows: Vec<u32>,
    /// Where the build side went instead, when it did not fit the query's
    /// memory (a grace join: the table itself is then empty).
    pub(super) partitioned: Option<Arc<GraceJoin>>,
}

impl JoinHashTable {
    /// Allocates the table's buckets; rows are linked by [`Self::insert`]
    /// (all of them here already when there are few).
    pub(super) fn new(batch: RecordBatch, keys: Keys, track_matches: bool) -> Result<Self> {
        let n = batch.num_rows();
        let structures = TableStructures::new(n, track_matches)?;
        let null_rows = null_rows(&keys, n);
        Ok(Self::assemble(batch, keys, structures, null_rows))
    }

    /// The table of `batch` over structures and NULL-key rows built
    /// beforehand (by [`TableStructures::new`] and [`null_rows`], which a
    /// large build runs as parts of its layout step).
    pub(super) fn assemble(
        batch: RecordBatch,
        keys: Keys,
        structures: TableStructures,
        null_rows: Vec<u32>,
    ) -> Self {
        let n = batch.num_rows();
        let TableStructures {
            heads,
            next,
            matched,
        } = structures;
        let table = JoinHashTable {
            batch,
            keys,
            mask: heads.len() as u64 - 1,
            heads,
            next,
            pipeline_rows: if n <= INLINE_INSERT_ROWS { 0 } else { n },
            ready: AtomicBool::new(false),
            matched,
            null_rows,
            partitioned: None,
        };
        if table.pipeline_rows == 0 {
            table.insert((0..n as u32).rev());
        }
        table
    }

    /// A table with every row linked and ready for probes (a grace join's
    /// partition, loaded in one step).
    pub(super) fn linked(batch: RecordBatch, keys: Keys, track_matches: bool) -> Result<Self> {
        let mut table = Self::new(batch, keys, track_matches)?;
        if table.pipeline_rows > 0 {
            table.insert((0..table.pipeline_rows as u32).rev());
            table.pipeline_rows = 0;
        }
        *table.ready.get_mut() = true;
        Ok(table)
    }

    /// The empty table of a build side that went to `grace`'s partitions:
    /// nothing to link, nothing for the build-side pass; probes defer
    /// their rows to the partitions.
    pub(super) fn partitioned(schema: SchemaRef, grace: Arc<GraceJoin>) -> Result<Self> {
        let mut table = Self::new(RecordBatch::new_empty(schema), Keys::Empty, false)?;
        table.partitioned = Some(grace);
        Ok(table)
    }

    /// Links `rows` into their buckets' chains, each at the chain's front.
    /// Every row must be inserted exactly once (by whichever worker).
    pub(super) fn insert(&self, rows: impl Iterator<Item = u32>) {
        for row in rows {
            let r = row as usize;
            if self.keys.is_null(r) {
                continue;
            }
            let b = (self.keys.hash(r) & self.mask) as usize;
            let prev = self.heads[b].swap(row + 1, Ordering::Relaxed);
            self.next[r].store(prev, Ordering::Relaxed);
        }
    }

    pub fn num_rows(&self) -> usize {
        self.batch.num_rows()
    }

    pub(super) fn mark(&self, row: u32) {
        self.matched[(row / 64) as usize].fetch_or(1 << (row % 64), Ordering::Relaxed);
    }

    pub(super) fn is_matched(&self, row: usize) -> bool {
        self.matched[row / 64].load(Ordering::Relaxed) & (1 << (row % 64)) != 0
    }

    /// Memory of the table's own structures (buckets, chains, match bits).
    pub(super) fn structure_bytes(rows: usize, track_matches: bool) -> usize {
        let buckets = (rows.max(1) * 2).next_power_of_two();
        buckets * 4 + rows * 4 + if track_matches { rows.div_ceil(8) } else { 0 }
    }

    /// Appends candidate pairs (probe row, build row) with equal keys to
    /// `p` and `b`, from `cursor` on, until `rows` probe rows are done or
    /// the pairs reach `budget`; returns where the walk stopped. With
    /// `whole_rows` a row's pairs are never split across two calls.
    pub(super) fn candidates(
        &self,
        probe: &Keys,
        rows: usize,
        mut cursor: ProbeCursor,
        budget: usize,
        whole_rows: bool,
        (p, b): (&mut Vec<u32>, &mut Vec<u32>),
    ) -> ProbeCursor {
        let build_rows = self.num_rows() as u32;
        while cursor.row < rows {
            let i = cursor.row;
            if p.len() >= budget {
                break;
            }
            if let Keys::Empty = probe {
                // Every build row matches: `next` is the next build row.
                let mut j = cursor.next.unwrap_or(0);
                let stop = if whole_rows {
                    build_rows
                } else {
                    build_rows.min(j.saturating_add((budget - p.len()) as u32))
                };
                while j < stop {
                    p.push(i as u32);
                    b.push(j);
                    j += 1;
                }
                cursor = if j < build_rows {
                    ProbeCursor {
                        row: i,
                        next: Some(j),
                    }
                } else {
                    ProbeCursor::row(i + 1)
                };
                continue;
            }
            if probe.is_null(i) {
                cursor = ProbeCursor::row(i + 1);
                continue;
            }
            // `cur` is 1 + the next build row of the chain, 0 at its end.
            let mut cur = match cursor.next {
                Some(next) => next,
                None => self.heads[(probe.hash(i) & self.mask) as usize].load(Ordering::Relaxed),
            };
            while cur != 0 {
                if !whole_rows && p.len() >= budget {
                    break;
                }
                let j = (cur - 1) as usize;
                if probe.eq(i, &self.keys, j) {
                    p.push(i as u32);
                    b.push(j as u32);
                }
                cur = self.next[j].load(Ordering::Relaxed);
            }
            cursor = if cur != 0 {
                ProbeCursor {
                    row: i,
                    next: Some(cur),
                }
            } else {
                ProbeCursor::row(i + 1)
            };
        }
        cursor
    }
}

/// Most (probe row, build row) pairs in one chunk of a probe's output.
pub const CHUNK_PAIRS: usize = 64 * 1024;

/// Where a probe's walk over its candidate pairs stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ProbeCursor {
    /// The probe row being walked.
    pub(super) row: usize,
    /// Where in the row's candidates to go on: `None` at the row's start;
    /// for keyed joins 1 + the next build row of the chain, for joins
    /// without keys the next build row.
    pub(super) next: Option<u32>,
}

impl ProbeCursor {
    pub(super) fn row(row: usize) -> Self {
        ProbeCursor { row, next: None }
    }
}

/// Shared slot the build sink fills and the probe operator and build-side pass read.
pub type HashTableSlot = Arc<OnceLock<JoinHashTable>>;

/// The table in `slot`, or an `Internal` error naming `what` ran before the
/// build's finish filled it.
pub(super) fn built<'a>(slot: &'a HashTableSlot, what: &str) -> Result<&'a JoinHashTable> {
    slot.get()
        .ok_or_else(|| ExecError::Internal(format!("{what} before the hash table was built")))
}

/// The insert pipeline's source: the build rows, as batches of row indices
/// (one `UInt32` column), handed out from the last row down.
#[derive(Debug)]
pub struct JoinTableInsertSource {
    table: HashTableSlot,
    schema: SchemaRef,
    /// Rows handed out so far, counted from the end (Relaxed: only the
    /// returned range is used; each range goes to exactly one morsel).
    cursor: AtomicUsize,
}

impl JoinTableInsertSource {
    pub fn new(table: HashTableSlot) -> Self {
        JoinTableInsertSource {
            table,
            schema: Arc::new(Schema::new(vec![Field::new(
                "build_row",
                DataType::UInt32,
                false,
            )])),
            cursor: AtomicUsize::new(0),
        }
    }
}

impl Source for JoinTableInsertSource {
    fn next_morsel(&self, rows: usize) -> Result<Option<Morsel>> {
        let total = built(&self.table, "hash table insert")?.pipeline_rows;
        let start = self.cursor.fetch_add(rows.max(1), Ordering::Relaxed);
        if start >= total {
            return Ok(None);
        }
        let end = start.saturating_add(rows.max(1)).min(total);
        // Counted from the end: this morsel holds rows [total-end, total-start).
        let (lo, hi) = ((total - end) as u32, (total - start) as u32);
        let batch = RecordBatch::try_new(
            self.schema.clone(),
            vec![Arc::new(UInt32Array::from_iter_values(lo..hi))],
        )?;
        Ok(Some(Morsel {
            slices: vec![(MorselSeq::at(start as u64), batch)],
        }))
    }

    fn remaining_rows(&self) -> Option<usize> {
        let total = self.table.get()?.pipeline_rows;
        Some(total.saturating_sub(self.cursor.load(Ordering::Relaxed)))
    }

    fn name(&self) -> String {
        "scan build rows".to_string()
    }
}

/// The insert pipeline's sink: links each batch's build rows into the table;
/// its finish marks the table ready for probes.
#[derive(Debug)]
pub struct JoinTableInsertSink {
    table: HashTableSlot,
}

impl JoinTableInsertSink {
    pub fn new(table: HashTableSlot) -> Self {
        JoinTableInsertSink { table }
    }

    fn table(&self) -> Result<&JoinHashTable> {
        built(&self.table, "hash table insert")
    }
}

impl Sink for JoinTableInsertSink {
    fn consume(&self, _seq: MorselSeq, batch: RecordBatch, _worker: usize) -> Result<()> {
        let rows = batch
            .column(0)
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| {
                ExecError::Internal("hash table insert of non-row-index input".into())
            })?;
        self.table()?.insert(rows.values().iter().rev().copied());
        Ok(())
    }

    fn finish(&self, _cx: &FinalizeContext<'_>) -> Result<Steps> {
        self.table()?.ready.store(true, Ordering::Release);
        Ok(Steps::new())
    }

    fn name(&self) -> String {
        "link hash table".to_string()
    }
}

//! The hash table and the insert pipeline that links its chains.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use stride_sched::FinalizeContext;

use arrow::array::{AsArray, RecordBatch, UInt32Array};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt32Type};

use super::grace::GraceJoin;
use super::keys::{hash_int, hash_int2, Keys};
use crate::error::{ExecError, Result};
use crate::hash::{hash_bytes, prefetch};
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
    ///
    /// Rows go in groups: the group's buckets are prefetched first, so the
    /// swaps (locked instructions, which do not overlap with other memory
    /// accesses) find their lines in cache.
    pub(super) fn insert(&self, rows: impl Iterator<Item = u32>) {
        let mut rows = rows
            .filter(|&row| !self.keys.is_null(row as usize))
            .peekable();
        let mut group = [(0u32, 0usize); GROUP];
        while rows.peek().is_some() {
            let mut n = 0;
            for (slot, row) in group.iter_mut().zip(rows.by_ref()) {
                let bucket = (self.keys.hash(row as usize) & self.mask) as usize;
                prefetch(&self.heads[bucket]);
                *slot = (row, bucket);
                n += 1;
            }
            for &(row, bucket) in &group[..n] {
                let prev = self.heads[bucket].swap(row + 1, Ordering::Relaxed);
                self.next[row as usize].store(prev, Ordering::Relaxed);
            }
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
    /// the pairs reach `budget`; returns where the walk stopped. `walk`
    /// says whether a row's pairs may be split across two calls and
    /// whether a row's first match is enough.
    pub(super) fn candidates(
        &self,
        probe: &Keys,
        rows: usize,
        cursor: ProbeCursor,
        budget: usize,
        walk: Walk,
        (p, b): (&mut Vec<u32>, &mut Vec<u32>),
    ) -> ProbeCursor {
        let mut chains = Chains {
            table: self,
            budget,
            walk,
            p,
            b,
        };
        let null =
            |nulls: &Option<NullBuffer>, i: usize| nulls.as_ref().is_some_and(|n| n.is_null(i));
        match (probe, &self.keys) {
            (Keys::Empty, _) => chains.cross(rows, cursor),
            (Keys::Int(a, nulls), Keys::Int(k, _)) => chains.walk(
                rows,
                cursor,
                |i| null(nulls, i),
                |i| hash_int(a[i]),
                |j| prefetch(&k[j]),
                |i, j| a[i] == k[j],
            ),
            (Keys::Int2(a1, a2, nulls), Keys::Int2(k1, k2, _)) => chains.walk(
                rows,
                cursor,
                |i| null(nulls, i),
                |i| hash_int2(a1[i], a2[i]),
                |j| {
                    prefetch(&k1[j]);
                    prefetch(&k2[j]);
                },
                |i, j| a1[i] == k1[j] && a2[i] == k2[j],
            ),
            (Keys::Rows(r, nulls), Keys::Rows(k, _)) => chains.walk(
                rows,
                cursor,
                |i| null(nulls, i),
                |i| hash_bytes(r.row(i).as_ref()),
                |j| prefetch(k.row(j).as_ref().as_ptr()),
                |i, j| r.row(i) == k.row(j),
            ),
            // Keys encoded apart never compare equal (both sides share one
            // encoder, so this is an empty build side at most).
            _ => ProbeCursor::row(rows),
        }
    }
}

/// How a probe walks a row's chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// A chunk may end inside a row's chain (inner joins and build-side
    /// modes: the pairs are independent).
    Split,
    /// A row's pairs are never split across two chunks (joins that decide
    /// per probe row: probe-side outer, or semi/anti/mark with a filter or
    /// build-side state).
    WholeRows,
    /// Only whether a row has an equal key counts: its walk stops at the
    /// first (semi, anti and mark joins without a filter whose build side
    /// records nothing).
    FirstMatch,
}

/// Probe rows walked together. Their buckets, then their first
/// candidates' keys and chain links, are prefetched in passes over the
/// group before the pairs are made, so the cache misses of one row overlap
/// with the other rows' instead of following each other (one row at a
/// time, each load waits on the last).
const GROUP: usize = 32;

/// Tables of at most this many buckets (64 KiB of them, for up to 8 Ki
/// build rows) are walked row by row, without the group's prefetch passes.
pub(super) const CACHE_RESIDENT_BUCKETS: usize = 1 << 14;

/// One walk of probe rows against a table, appending to `p` and `b`.
struct Chains<'a> {
    table: &'a JoinHashTable,
    budget: usize,
    walk: Walk,
    p: &'a mut Vec<u32>,
    b: &'a mut Vec<u32>,
}

impl Chains<'_> {
    /// The keyed walk over `rows`, generic over the key encoding so each
    /// encoding's hash and compare are inlined.
    #[inline(always)]
    fn walk(
        &mut self,
        rows: usize,
        mut cursor: ProbeCursor,
        is_null: impl Fn(usize) -> bool,
        hash: impl Fn(usize) -> u64,
        touch: impl Fn(usize),
        eq: impl Fn(usize, usize) -> bool,
    ) -> ProbeCursor {
        let t = self.table;
        if let Some(next) = cursor.next {
            cursor = self.chain(cursor.row, next, &eq);
            if cursor.next.is_some() {
                return cursor;
            }
        }
        if t.heads.len() <= CACHE_RESIDENT_BUCKETS {
            // A small table: its buckets, links and keys stay in cache, so
            // there is no miss for prefetching to overlap, only the passes'
            // bookkeeping to save.
            while cursor.row < rows {
                let i = cursor.row;
                if self.p.len() >= self.budget {
                    return cursor;
                }
                let head = if is_null(i) {
                    0
                } else {
                    t.heads[(hash(i) & t.mask) as usize].load(Ordering::Relaxed)
                };
                cursor = self.chain(i, head, &eq);
                if cursor.next.is_some() {
                    return cursor;
                }
            }
            return cursor;
        }
        let mut buckets = [0usize; GROUP];
        let mut heads = [0u32; GROUP];
        while cursor.row < rows {
            let start = cursor.row;
            let n = GROUP.min(rows - start);
            // Pass 1: each row's bucket, prefetched.
            for (k, bucket) in buckets[..n].iter_mut().enumerate() {
                let i = start + k;
                *bucket = if is_null(i) {
                    usize::MAX
                } else {
                    let bucket = (hash(i) & t.mask) as usize;
                    prefetch(&t.heads[bucket]);
                    bucket
                };
            }
            // Pass 2: each row's bucket head (1 + build row, 0 = empty);
            // the first candidate's key and link, prefetched.
            for (head, &bucket) in heads[..n].iter_mut().zip(&buckets[..n]) {
                *head = match t.heads.get(bucket) {
                    Some(head) => head.load(Ordering::Relaxed),
                    None => 0,
                };
                if let Some(j) = head.checked_sub(1) {
                    touch(j as usize);
                    prefetch(&t.next[j as usize]);
                }
            }
            // Pass 3: the pairs, in chain order, within the budget.
            for (k, &head) in heads[..n].iter().enumerate() {
                let i = start + k;
                if self.p.len() >= self.budget {
                    return ProbeCursor::row(i);
                }
                let after = self.chain(i, head, &eq);
                if after.next.is_some() {
                    return after;
                }
            }
            cursor = ProbeCursor::row(start + n);
        }
        cursor
    }

    /// Walks probe row `i`'s chain from `cur` (1 + build row, 0 at the
    /// end); returns where it stopped: inside the chain when a split walk
    /// filled its budget, else at the next row.
    #[inline(always)]
    fn chain(&mut self, i: usize, mut cur: u32, eq: &impl Fn(usize, usize) -> bool) -> ProbeCursor {
        while cur != 0 {
            if self.walk == Walk::Split && self.p.len() >= self.budget {
                return ProbeCursor {
                    row: i,
                    next: Some(cur),
                };
            }
            let j = cur - 1;
            if eq(i, j as usize) {
                self.p.push(i as u32);
                self.b.push(j);
                if self.walk == Walk::FirstMatch {
                    break;
                }
            }
            cur = self.table.next[j as usize].load(Ordering::Relaxed);
        }
        ProbeCursor::row(i + 1)
    }

    /// A join without keys: every build row matches every probe row; the
    /// cursor's `next` is the next build row.
    fn cross(&mut self, rows: usize, mut cursor: ProbeCursor) -> ProbeCursor {
        let build_rows = self.table.num_rows() as u32;
        while cursor.row < rows && self.p.len() < self.budget {
            let i = cursor.row;
            if self.walk == Walk::FirstMatch {
                if build_rows > 0 {
                    self.p.push(i as u32);
                    self.b.push(0);
                }
                cursor = ProbeCursor::row(i + 1);
                continue;
            }
            let mut j = cursor.next.unwrap_or(0);
            let stop = if self.walk == Walk::Split {
                build_rows.min(j.saturating_add((self.budget - self.p.len()) as u32))
            } else {
                build_rows
            };
            while j < stop {
                self.p.push(i as u32);
                self.b.push(j);
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

//! Hash join: build on one input, probe with the other.
//!
//! ```text
//!  build pipeline:  source ─► … ─► HashBuildSink ──finish──► JoinHashTable
//!                                   (concatenated rows, keys, empty buckets)
//!  insert pipeline: JoinTableInsertSource ─► JoinTableInsertSink
//!                   (build-row ranges)        (links rows into bucket chains)
//!  probe pipeline:  source ─► … ─► HashProbeOperator ─► … ─► sink
//!  (build-side pass, only for outer/semi/anti joins that keep build rows)
//!                   JoinBuildScanSource (reads the match bitmap) ─► … ─► same sink
//! ```
//!
//! The build side is whichever input the planner chose (the smaller one);
//! every SQL join type is mapped onto four independent behaviours:
//! * `emit_pairs` — output matching (left, right) pairs (inner and outer joins);
//! * probe-side `Outer`/`Semi`/`Anti` — decided per probe row, in the probe pipeline;
//! * build-side `Outer`/`Semi`/`Anti` — matches are recorded in an atomic bitmap
//!   over build rows and a final pass emits the wanted build rows.
//!
//! Output columns are always `left ++ right` (or one side only for semi/anti
//! joins), whichever side was built.
//!
//! ## Building the table in parallel
//!
//! A sink's `finish` runs as one finalization step that the scheduler cannot
//! split, and linking millions of rows into bucket chains is mostly cache
//! misses (SF 1 `orders`: tens of milliseconds). So the build's `finish`
//! only concatenates the rows, encodes their keys and allocates the buckets
//! — for more than [`SPLIT_BUILD_ROWS`] rows not even that: it returns a
//! split step ([`crate::step`]) whose parts, on any workers, encode the keys
//! and concatenate one column each, and whose finish allocates the table —
//! and a pipeline of its own, with morsels of build rows, links them:
//!
//! ```text
//!   table state:   allocated ──insert tasks (any worker, any order)──► linked ──insert finish──► ready
//!   insert row r:  prev = heads[b].swap(r + 1)   (atomic: concurrent inserts into one bucket
//!                  next[r] = prev                 each take a distinct predecessor)
//! ```
//!
//! Every row is handed out exactly once (a cursor over row ranges), so each
//! `next[r]` has one writer. All accesses are `Relaxed`: the probe reads
//! `heads` and `next` only in a later task set, and the scheduler's task-set
//! hand-off (the last task's completion, then the finalization, then the next
//! task set's first task) orders every insert before every probe; `ready`
//! (Release in the insert finish, Acquire in the probe) turns a broken
//! ordering into an error rather than a wrong result. Rows are handed out from
//! the end and each morsel inserts its rows in descending order, so with one
//! worker every chain lists its rows in ascending order; with several the
//! chain order (and so the order of a probe row's matches) varies from run to
//! run, as the order of the morsels does anyway. Tables of at most
//! [`INLINE_INSERT_ROWS`] rows are linked inside the build's `finish`, where a
//! pipeline would cost more than it saves.
//!
//! ## Bounded output
//!
//! One probe row can match every build row (a cross join, a join on a key
//! with few values), so the output of one probe morsel is unbounded. The
//! probe walks candidate pairs with a [`ProbeCursor`] and emits a chunk
//! whenever it holds [`CHUNK_PAIRS`] pairs, resuming inside a row's chain
//! where the join type allows (inner joins and build-side modes); a join
//! that decides per probe row (probe-side outer, semi, anti) cuts between
//! rows only, and a chunk that one row makes larger than `CHUNK_PAIRS` is
//! charged to the query's memory while it lives. The build side — its
//! batches, the concatenated rows, encoded keys and buckets — is charged
//! as it is collected and built (see [`crate::memory`]).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, RecordBatch, RecordBatchOptions,
    UInt32Array,
};
use arrow::buffer::NullBuffer;
use arrow::compute::{cast, concat_batches, filter_record_batch, take};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, UInt32Type};
use arrow::row::{RowConverter, Rows, SortField};
use datafusion_expr::JoinType;

use super::{Demand, Emit, Operator, PerWorker, Sink};
use crate::error::{ExecError, Result};
use crate::hash::{hash_bytes, hash_u64, is_int_like, normalize_float_key};
use crate::memory::{batch_bytes, QueryMemory};
use crate::plan::{BuildSide, ExprRef};
use crate::seq::MorselSeq;
use crate::source::{Morsel, Source};
use crate::step::{SplitStep, Steps};

/// What a side of the join contributes beyond matching pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideMode {
    /// Nothing beyond the pairs.
    None,
    /// Rows without a match, padded with NULLs on the other side.
    Outer,
    /// Rows with at least one match (this side's columns only).
    Semi,
    /// Rows without any match (this side's columns only).
    Anti,
}

/// The behaviour of a join once its build side is fixed.
#[derive(Debug, Clone, Copy)]
pub struct JoinModes {
    pub emit_pairs: bool,
    pub probe: SideMode,
    pub build: SideMode,
}

impl JoinModes {
    pub fn new(join_type: JoinType, build: BuildSide) -> Result<Self> {
        use JoinType::*;
        let build_left = build == BuildSide::Left;
        // (mode of the left input, mode of the right input, emit pairs)
        let (left, right, pairs) = match join_type {
            Inner => (SideMode::None, SideMode::None, true),
            Left => (SideMode::Outer, SideMode::None, true),
            Right => (SideMode::None, SideMode::Outer, true),
            Full => (SideMode::Outer, SideMode::Outer, true),
            LeftSemi => (SideMode::Semi, SideMode::None, false),
            LeftAnti => (SideMode::Anti, SideMode::None, false),
            RightSemi => (SideMode::None, SideMode::Semi, false),
            RightAnti => (SideMode::None, SideMode::Anti, false),
            other => {
                return Err(ExecError::Unsupported(format!("join type {other}")));
            }
        };
        let (build_mode, probe_mode) = if build_left {
            (left, right)
        } else {
            (right, left)
        };
        Ok(JoinModes {
            emit_pairs: pairs,
            probe: probe_mode,
            build: build_mode,
        })
    }
}

/// Encoded join keys of a batch.
#[derive(Debug)]
enum Keys {
    /// One integer-like key column, widened to i64; `None` entries are NULL.
    Int(Vec<i64>, Option<NullBuffer>),
    /// Two integer-like key columns, widened to i64.
    Int2(Vec<i64>, Vec<i64>, Option<NullBuffer>),
    /// Multi-column or non-integer keys in Arrow's row format.
    Rows(Rows, Option<NullBuffer>),
    /// No keys: every row matches every row (cross / theta join).
    Empty,
}

impl Keys {
    /// Memory the encoded keys hold.
    fn bytes(&self) -> usize {
        match self {
            Keys::Int(v, _) => v.capacity() * 8,
            Keys::Int2(a, b, _) => (a.capacity() + b.capacity()) * 8,
            Keys::Rows(r, _) => r.size(),
            Keys::Empty => 0,
        }
    }

    fn is_null(&self, i: usize) -> bool {
        match self {
            Keys::Int(_, nulls) | Keys::Int2(_, _, nulls) | Keys::Rows(_, nulls) => {
                nulls.as_ref().is_some_and(|n| n.is_null(i))
            }
            Keys::Empty => false,
        }
    }

    #[inline]
    fn hash(&self, i: usize) -> u64 {
        match self {
            Keys::Int(v, _) => hash_u64(v[i] as u64),
            Keys::Int2(a, b, _) => hash_u64(a[i] as u64 ^ hash_u64(b[i] as u64)),
            Keys::Rows(r, _) => hash_bytes(r.row(i).as_ref()),
            Keys::Empty => 0,
        }
    }

    #[inline]
    fn eq(&self, i: usize, other: &Keys, j: usize) -> bool {
        match (self, other) {
            (Keys::Int(a, _), Keys::Int(b, _)) => a[i] == b[j],
            (Keys::Int2(a1, a2, _), Keys::Int2(b1, b2, _)) => a1[i] == b1[j] && a2[i] == b2[j],
            (Keys::Rows(a, _), Keys::Rows(b, _)) => a.row(i) == b.row(j),
            (Keys::Empty, Keys::Empty) => true,
            _ => false,
        }
    }
}

/// Turns key columns into [`Keys`]; shared by build and probe so both encode alike.
#[derive(Debug)]
pub struct KeyEncoder {
    types: Vec<DataType>,
    converter: Option<RowConverter>,
    /// NULL keys match each other (otherwise they never match).
    null_equals_null: bool,
}

impl KeyEncoder {
    pub fn new(types: Vec<DataType>, null_equals_null: bool) -> Result<Self> {
        let int_fast = (types.len() == 1 || types.len() == 2)
            && types.iter().all(is_int_like)
            && !null_equals_null;
        let converter = if types.is_empty() || int_fast {
            None
        } else {
            Some(RowConverter::new(
                types.iter().map(|t| SortField::new(t.clone())).collect(),
            )?)
        };
        Ok(KeyEncoder {
            types,
            converter,
            null_equals_null,
        })
    }

    fn encode(&self, columns: Vec<ArrayRef>) -> Result<Keys> {
        if self.types.is_empty() {
            return Ok(Keys::Empty);
        }
        let columns = columns
            .into_iter()
            .zip(&self.types)
            .map(|(c, t)| {
                let c = if c.data_type() == t { c } else { cast(&c, t)? };
                normalize_float_key(c)
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let nulls = if self.null_equals_null {
            None
        } else {
            NullBuffer::union_many(
                columns
                    .iter()
                    .map(|c| c.logical_nulls())
                    .collect::<Vec<_>>()
                    .iter()
                    .map(|n| n.as_ref()),
            )
        };
        match &self.converter {
            None => {
                let widen = |c: &ArrayRef| -> Result<Vec<i64>> {
                    let w = cast(c, &DataType::Int64)?;
                    Ok(w.as_primitive::<Int64Type>().values().to_vec())
                };
                match columns.as_slice() {
                    [a] => Ok(Keys::Int(widen(a)?, nulls)),
                    [a, b] => Ok(Keys::Int2(widen(a)?, widen(b)?, nulls)),
                    _ => Err(ExecError::Internal("integer join keys of arity > 2".into())),
                }
            }
            Some(conv) => Ok(Keys::Rows(conv.convert_columns(&columns)?, nulls)),
        }
    }
}

fn eval_keys(exprs: &[ExprRef], batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| Ok(e.evaluate(batch)?.into_array(batch.num_rows())?))
        .collect()
}

/// Build tables of at most this many rows are linked inside the build's
/// `finish` (well under a millisecond) instead of by the insert pipeline.
pub const INLINE_INSERT_ROWS: usize = 1 << 14;

/// The hash table: chained buckets over the concatenated build rows.
#[derive(Debug)]
pub struct JoinHashTable {
    batch: RecordBatch,
    keys: Keys,
    /// `heads[h & mask]` = 1 + first build row of the bucket's chain, 0 if
    /// empty. Swapped (Relaxed) by inserts; loaded (Relaxed) by probes, in a
    /// later task set (see the module doc for the ordering).
    heads: Vec<AtomicU32>,
    /// `next[row]` = 1 + next build row in the chain, 0 at the end. Stored
    /// once per row by the row's insert (Relaxed); loaded by probes.
    next: Vec<AtomicU32>,
    mask: u64,
    /// Rows the insert pipeline links: all of them, or 0 when the build's
    /// `finish` linked them (tables of at most [`INLINE_INSERT_ROWS`] rows).
    pipeline_rows: usize,
    /// Set (Release) by the insert pipeline's finish once every row is linked;
    /// loaded (Acquire) by each probe, which fails on an unlinked table.
    ready: AtomicBool,
    /// One bit per build row, set (fetch_or, Relaxed) when the row matched.
    /// Read by the build-side pass, which runs in a later task set: the
    /// scheduler's finalization hand-off orders all writes before those reads.
    matched: Vec<AtomicU64>,
    /// Build rows whose key is NULL (for `NOT IN` semantics), ascending.
    null_rows: Vec<u32>,
}

impl JoinHashTable {
    /// Allocates the table's buckets; rows are linked by [`Self::insert`]
    /// (all of them here already when there are few).
    fn new(batch: RecordBatch, keys: Keys, track_matches: bool) -> Result<Self> {
        let n = batch.num_rows();
        if n >= u32::MAX as usize {
            return Err(ExecError::Unsupported(format!(
                "hash join build side of {n} rows (limit {})",
                u32::MAX - 1
            )));
        }
        let buckets = (n.max(1) * 2).next_power_of_two();
        let null_rows = (0..n)
            .filter(|&row| keys.is_null(row))
            .map(|row| row as u32)
            .collect();
        let matched = if track_matches {
            (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect()
        } else {
            Vec::new()
        };
        let table = JoinHashTable {
            batch,
            keys,
            heads: (0..buckets).map(|_| AtomicU32::new(0)).collect(),
            next: (0..n).map(|_| AtomicU32::new(0)).collect(),
            mask: buckets as u64 - 1,
            pipeline_rows: if n <= INLINE_INSERT_ROWS { 0 } else { n },
            ready: AtomicBool::new(false),
            matched,
            null_rows,
        };
        if table.pipeline_rows == 0 {
            table.insert((0..n as u32).rev());
        }
        Ok(table)
    }

    /// Links `rows` into their buckets' chains, each at the chain's front.
    /// Every row must be inserted exactly once (by whichever worker).
    fn insert(&self, rows: impl Iterator<Item = u32>) {
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

    fn mark(&self, row: u32) {
        self.matched[(row / 64) as usize].fetch_or(1 << (row % 64), Ordering::Relaxed);
    }

    fn is_matched(&self, row: usize) -> bool {
        self.matched[row / 64].load(Ordering::Relaxed) & (1 << (row % 64)) != 0
    }

    /// Memory of the table's own structures (buckets, chains, match bits).
    fn structure_bytes(rows: usize, track_matches: bool) -> usize {
        let buckets = (rows.max(1) * 2).next_power_of_two();
        buckets * 4 + rows * 4 + if track_matches { rows.div_ceil(8) } else { 0 }
    }

    /// Appends candidate pairs (probe row, build row) with equal keys to
    /// `p` and `b`, from `cursor` on, until `rows` probe rows are done or
    /// the pairs reach `budget`; returns where the walk stopped. With
    /// `whole_rows` a row's pairs are never split across two calls.
    fn candidates(
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
struct ProbeCursor {
    /// The probe row being walked.
    row: usize,
    /// Where in the row's candidates to go on: `None` at the row's start;
    /// for keyed joins 1 + the next build row of the chain, for joins
    /// without keys the next build row.
    next: Option<u32>,
}

impl ProbeCursor {
    fn row(row: usize) -> Self {
        ProbeCursor { row, next: None }
    }
}

/// Shared slot the build sink fills and the probe operator and build-side pass read.
pub type HashTableSlot = Arc<OnceLock<JoinHashTable>>;

/// The table in `slot`, or an `Internal` error naming `what` ran before the
/// build's finish filled it.
fn built<'a>(slot: &'a HashTableSlot, what: &str) -> Result<&'a JoinHashTable> {
    slot.get()
        .ok_or_else(|| ExecError::Internal(format!("{what} before the hash table was built")))
}

/// Collects the build side; when finalized, concatenates it, encodes its keys
/// and allocates the table (which the insert pipeline then links).
#[derive(Debug)]
pub struct HashBuildSink {
    keys: Vec<ExprRef>,
    encoder: Arc<KeyEncoder>,
    schema: SchemaRef,
    parts: PerWorker<Vec<RecordBatch>>,
    track_matches: bool,
    table: HashTableSlot,
    memory: Arc<QueryMemory>,
}

impl HashBuildSink {
    pub fn new(
        keys: Vec<ExprRef>,
        encoder: Arc<KeyEncoder>,
        schema: SchemaRef,
        workers: usize,
        track_matches: bool,
        table: HashTableSlot,
        memory: Arc<QueryMemory>,
    ) -> Self {
        HashBuildSink {
            keys,
            encoder,
            schema: crate::nullable_schema(&schema),
            parts: PerWorker::new(workers),
            track_matches,
            table,
            memory,
        }
    }
}

/// Puts the built table into its slot (once).
fn install(slot: &HashTableSlot, table: JoinHashTable) -> Result<()> {
    slot.set(table)
        .map_err(|_| ExecError::Internal("hash table built twice".into()))
}

/// Build sides of more rows than this are laid out by a split step
/// ([`LayOutBuild`]) instead of inside the build's `finish`.
pub const SPLIT_BUILD_ROWS: usize = 1 << 16;

/// The split finish of a large build side: part 0 evaluates and encodes
/// the keys of every collected batch, part `1 + c` concatenates column
/// `c`; the step's finish puts the columns together (no copy) and
/// allocates the table, which the insert pipeline then links.
#[derive(Debug)]
struct LayOutBuild {
    keys: Vec<ExprRef>,
    encoder: Arc<KeyEncoder>,
    schema: SchemaRef,
    track_matches: bool,
    table: HashTableSlot,
    memory: Arc<QueryMemory>,
    /// The collected batches, until the step's finish drops them.
    input: std::sync::Mutex<Vec<RecordBatch>>,
    columns: Vec<OnceLock<ArrayRef>>,
    /// The encoded keys, from part 0 until the step's finish takes them.
    encoded: std::sync::Mutex<Option<Keys>>,
    rows: usize,
    /// Bytes of `input` charged to the query.
    collected: usize,
}

impl LayOutBuild {
    fn input(&self) -> std::sync::MutexGuard<'_, Vec<RecordBatch>> {
        self.input.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl SplitStep for LayOutBuild {
    fn name(&self) -> String {
        "hash join build: concatenate columns, encode keys".into()
    }

    fn parts(&self) -> usize {
        1 + self.columns.len()
    }

    fn run_part(&self, part: usize, _worker: usize) -> Result<usize> {
        // The batches are shared (Arc'd arrays): cloning the list is cheap
        // and lets the parts run without holding the lock.
        let input = self.input().clone();
        let built = match part.checked_sub(1) {
            None => {
                let mut per_key: Vec<Vec<ArrayRef>> = vec![Vec::new(); self.keys.len()];
                for batch in &input {
                    for (k, array) in eval_keys(&self.keys, batch)?.into_iter().enumerate() {
                        per_key[k].push(array);
                    }
                }
                let columns = per_key
                    .iter()
                    .map(|arrays| {
                        let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
                        Ok(arrow::compute::concat(&refs)?)
                    })
                    .collect::<Result<Vec<ArrayRef>>>()?;
                let keys = self.encoder.encode(columns)?;
                self.memory.grow(keys.bytes(), "hash join keys")?;
                let mut slot = self.encoded.lock().unwrap_or_else(|e| e.into_inner());
                slot.replace(keys).is_none()
            }
            Some(c) => {
                let refs: Vec<&dyn Array> = input.iter().map(|b| b.column(c).as_ref()).collect();
                let column = arrow::compute::concat(&refs)?;
                self.columns[c].set(column).is_ok()
            }
        };
        if !built {
            return Err(ExecError::Internal("hash build part ran twice".into()));
        }
        Ok(input.iter().map(|b| b.num_rows()).sum::<usize>() / self.parts())
    }

    fn finish(&self) -> Result<Steps> {
        let missing = || ExecError::Internal("hash build laid out before its parts ran".into());
        let columns = self
            .columns
            .iter()
            .map(|c| c.get().cloned().ok_or_else(missing))
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(self.rows)),
        )?;
        std::mem::take(&mut *self.input());
        self.memory.shrink(self.collected);
        let keys = self
            .encoded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(missing)?;
        install(
            &self.table,
            JoinHashTable::new(batch, keys, self.track_matches)?,
        )?;
        Ok(Steps::new())
    }
}

impl Sink for HashBuildSink {
    fn consume(&self, _seq: MorselSeq, batch: RecordBatch, worker: usize) -> Result<()> {
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            batch.columns().to_vec(),
            &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )?;
        self.memory
            .grow(batch_bytes(&batch), "hash join build side")?;
        self.parts.with(worker, |p| p.push(batch));
        Ok(())
    }

    fn finish(&self) -> Result<Steps> {
        let parts: Vec<RecordBatch> = self.parts.take_all().into_iter().flatten().collect();
        let collected: usize = parts.iter().map(batch_bytes).sum();
        let rows: usize = parts.iter().map(|p| p.num_rows()).sum();
        // The concatenated copy, then the table's structures; the collected
        // batches are returned once the copy replaced them.
        self.memory.grow(
            collected + JoinHashTable::structure_bytes(rows, self.track_matches),
            "hash join table",
        )?;
        if rows > SPLIT_BUILD_ROWS {
            return Ok(vec![Arc::new(LayOutBuild {
                keys: self.keys.clone(),
                encoder: self.encoder.clone(),
                schema: self.schema.clone(),
                track_matches: self.track_matches,
                table: self.table.clone(),
                memory: self.memory.clone(),
                columns: (0..self.schema.fields().len())
                    .map(|_| OnceLock::new())
                    .collect(),
                encoded: std::sync::Mutex::new(None),
                rows,
                collected,
                input: std::sync::Mutex::new(parts),
            })]);
        }
        let batch = concat_batches(&self.schema, &parts)?;
        drop(parts);
        self.memory.shrink(collected);
        let keys = self.encoder.encode(eval_keys(&self.keys, &batch)?)?;
        self.memory.grow(keys.bytes(), "hash join keys")?;
        install(
            &self.table,
            JoinHashTable::new(batch, keys, self.track_matches)?,
        )?;
        Ok(Steps::new())
    }

    fn name(&self) -> String {
        let k: Vec<String> = self.keys.iter().map(|e| e.to_string()).collect();
        format!("build hash table [{}]", k.join(", "))
    }
}

/// Probes the hash table with each batch.
#[derive(Debug)]
pub struct HashProbeOperator {
    keys: Vec<ExprRef>,
    encoder: Arc<KeyEncoder>,
    table: HashTableSlot,
    modes: JoinModes,
    build_side: BuildSide,
    filter: Option<ExprRef>,
    null_aware: bool,
    /// Output schema (left ++ right, or one side for semi/anti).
    schema: SchemaRef,
    /// Schema of left ++ right (the filter's input).
    joined_schema: SchemaRef,
    /// Charged for a chunk larger than [`CHUNK_PAIRS`] while it lives.
    memory: Arc<QueryMemory>,
}

impl HashProbeOperator {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        keys: Vec<ExprRef>,
        encoder: Arc<KeyEncoder>,
        table: HashTableSlot,
        modes: JoinModes,
        build_side: BuildSide,
        filter: Option<ExprRef>,
        null_aware: bool,
        schema: SchemaRef,
        joined_schema: SchemaRef,
        memory: Arc<QueryMemory>,
    ) -> Self {
        HashProbeOperator {
            keys,
            encoder,
            table,
            modes,
            build_side,
            filter,
            null_aware,
            schema: crate::nullable_schema(&schema),
            joined_schema: crate::nullable_schema(&joined_schema),
            memory,
        }
    }

    /// Gathers `left ++ right` rows for index pairs (build indices may be NULL).
    fn gather(
        &self,
        table: &JoinHashTable,
        probe: &RecordBatch,
        probe_idx: &UInt32Array,
        build_idx: &UInt32Array,
    ) -> Result<RecordBatch> {
        let p_cols = probe
            .columns()
            .iter()
            .map(|c| take(c.as_ref(), probe_idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let b_cols = table
            .batch
            .columns()
            .iter()
            .map(|c| take(c.as_ref(), build_idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let columns = match self.build_side {
            BuildSide::Left => b_cols.into_iter().chain(p_cols).collect(),
            BuildSide::Right => p_cols.into_iter().chain(b_cols).collect(),
        };
        Ok(RecordBatch::try_new_with_options(
            self.joined_schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(probe_idx.len())),
        )?)
    }
}

impl HashProbeOperator {
    /// The output for candidate pairs `p`/`b` of `batch`, which complete
    /// the probe rows `rows` when the join decides per probe row.
    fn chunk(
        &self,
        table: &JoinHashTable,
        batch: &RecordBatch,
        keys: &Keys,
        rows: std::ops::Range<usize>,
        p: &mut Vec<u32>,
        b: &mut Vec<u32>,
    ) -> Result<RecordBatch> {
        // Apply the non-equi condition to candidate pairs.
        let mut pairs: Option<RecordBatch> = None;
        if let Some(filter) = &self.filter {
            let joined = self.gather(
                table,
                batch,
                &UInt32Array::from(p.clone()),
                &UInt32Array::from(b.clone()),
            )?;
            let mask = filter.evaluate(&joined)?.into_array(joined.num_rows())?;
            let mask: &BooleanArray = mask.as_boolean();
            let keep: Vec<bool> = (0..mask.len())
                .map(|i| mask.is_valid(i) && mask.value(i))
                .collect();
            let mut w = 0;
            for (r, &k) in keep.iter().enumerate() {
                if k {
                    p[w] = p[r];
                    b[w] = b[r];
                    w += 1;
                }
            }
            p.truncate(w);
            b.truncate(w);
            if self.modes.emit_pairs && self.modes.probe != SideMode::Outer {
                pairs = Some(filter_record_batch(&joined, &BooleanArray::from(keep))?);
            }
        }

        if self.modes.build != SideMode::None {
            for &j in b.iter() {
                table.mark(j);
            }
        }

        let first = rows.start;
        let count = rows.len();
        match self.modes.probe {
            SideMode::Semi | SideMode::Anti => {
                let mut matched = vec![false; count];
                for &i in p.iter() {
                    matched[i as usize - first] = true;
                }
                let want = self.modes.probe == SideMode::Semi;
                let mut keep: Vec<bool> = matched.into_iter().map(|m| m == want).collect();
                let slice = batch.slice(first, count);
                if self.null_aware && self.modes.probe == SideMode::Anti {
                    self.null_aware_anti(table, &slice, keys, first, &mut keep)?;
                }
                let out = filter_record_batch(&slice, &BooleanArray::from(keep))?;
                Ok(RecordBatch::try_new_with_options(
                    self.schema.clone(),
                    out.columns().to_vec(),
                    &RecordBatchOptions::new().with_row_count(Some(out.num_rows())),
                )?)
            }
            SideMode::Outer => {
                let mut matched = vec![false; count];
                for &i in p.iter() {
                    matched[i as usize - first] = true;
                }
                let mut probe_idx = std::mem::take(p);
                let mut build_idx: Vec<Option<u32>> = b.drain(..).map(Some).collect();
                for (i, m) in matched.iter().enumerate() {
                    if !m {
                        probe_idx.push((first + i) as u32);
                        build_idx.push(None);
                    }
                }
                self.gather(
                    table,
                    batch,
                    &UInt32Array::from(probe_idx),
                    &UInt32Array::from(build_idx),
                )
            }
            SideMode::None => {
                if !self.modes.emit_pairs {
                    // The build side alone produces output (build-side semi/anti).
                    return Ok(RecordBatch::new_empty(self.schema.clone()));
                }
                match pairs {
                    Some(pairs) => Ok(pairs),
                    None => self.gather(
                        table,
                        batch,
                        &UInt32Array::from(std::mem::take(p)),
                        &UInt32Array::from(std::mem::take(b)),
                    ),
                }
            }
        }
    }

    /// `x NOT IN (set)` is NULL, not true, when `x` is NULL and the set is not
    /// empty, or when `x` is not in the set and the set holds a NULL. With a
    /// join filter (a correlated `NOT IN`) the set is the build rows that pass
    /// the filter for this probe row, so the NULL checks evaluate it per pair.
    ///
    /// `batch` holds the probe rows of `keep`, which are rows `first..` of
    /// the rows `keys` encodes.
    fn null_aware_anti(
        &self,
        table: &JoinHashTable,
        batch: &RecordBatch,
        keys: &Keys,
        first: usize,
        keep: &mut [bool],
    ) -> Result<()> {
        let Some(filter) = &self.filter else {
            if !table.null_rows.is_empty() {
                keep.iter_mut().for_each(|k| *k = false);
            } else if table.num_rows() > 0 {
                for (i, k) in keep.iter_mut().enumerate() {
                    if keys.is_null(first + i) {
                        *k = false;
                    }
                }
            }
            return Ok(());
        };
        let (mut p, mut b) = (Vec::new(), Vec::new());
        for (i, &k) in keep.iter().enumerate() {
            if !k {
                continue;
            }
            if keys.is_null(first + i) {
                p.extend(std::iter::repeat_n(i as u32, table.num_rows()));
                b.extend(0..table.num_rows() as u32);
            } else {
                p.extend(std::iter::repeat_n(i as u32, table.null_rows.len()));
                b.extend_from_slice(&table.null_rows);
            }
        }
        if p.is_empty() {
            return Ok(());
        }
        let joined = self.gather(
            table,
            batch,
            &UInt32Array::from(p.clone()),
            &UInt32Array::from(b),
        )?;
        let mask = filter.evaluate(&joined)?.into_array(joined.num_rows())?;
        let mask: &BooleanArray = mask.as_boolean();
        for (r, &i) in p.iter().enumerate() {
            if mask.is_valid(r) && mask.value(r) {
                keep[i as usize] = false;
            }
        }
        Ok(())
    }
}

impl Operator for HashProbeOperator {
    fn process(&self, batch: RecordBatch, _worker: usize, emit: &mut Emit<'_>) -> Result<()> {
        let table = self
            .table
            .get()
            .filter(|t| t.ready.load(Ordering::Acquire))
            .ok_or_else(|| ExecError::Internal("probe before the hash table was built".into()))?;
        let n = batch.num_rows();
        let keys = self.encoder.encode(eval_keys(&self.keys, &batch)?)?;
        // Per-row decisions (probe-side outer, semi, anti) need all of a
        // row's pairs in one chunk.
        let whole_rows = self.modes.probe != SideMode::None;
        let row_bytes = |b: &RecordBatch| batch_bytes(b) / b.num_rows().max(1);
        let pair_bytes = 8 + row_bytes(&batch) + row_bytes(&table.batch);
        let mut cursor = ProbeCursor::row(0);
        let (mut p, mut b) = (Vec::new(), Vec::new());
        while cursor.row < n {
            let first = cursor.row;
            p.clear();
            b.clear();
            cursor = table.candidates(&keys, n, cursor, CHUNK_PAIRS, whole_rows, (&mut p, &mut b));
            let _oversized = if p.len() > CHUNK_PAIRS {
                Some(self.memory.charge(p.len() * pair_bytes, "join output")?)
            } else {
                None
            };
            let out = self.chunk(table, &batch, &keys, first..cursor.row, &mut p, &mut b)?;
            if emit(out)? == Demand::Enough {
                break;
            }
        }
        Ok(())
    }

    fn name(&self) -> String {
        let k: Vec<String> = self.keys.iter().map(|e| e.to_string()).collect();
        format!("probe [{}]", k.join(", "))
    }
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
        let end = (start + rows.max(1)).min(total);
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

    fn finish(&self) -> Result<Steps> {
        self.table()?.ready.store(true, Ordering::Release);
        Ok(Steps::new())
    }

    fn name(&self) -> String {
        "link hash table".to_string()
    }
}

/// The build-side pass: emits build rows by their match bit after the probe
/// pipeline finished (build-side outer, semi and anti joins).
#[derive(Debug)]
pub struct JoinBuildScanSource {
    table: HashTableSlot,
    mode: SideMode,
    build_side: BuildSide,
    /// Types of the probe side's columns (NULL padding for outer joins).
    probe_types: Vec<DataType>,
    schema: SchemaRef,
    /// Build rows handed out so far (Relaxed: only the returned range is used).
    cursor: AtomicUsize,
}

impl JoinBuildScanSource {
    pub fn new(
        table: HashTableSlot,
        mode: SideMode,
        build_side: BuildSide,
        probe_types: Vec<DataType>,
        schema: SchemaRef,
    ) -> Self {
        JoinBuildScanSource {
            table,
            mode,
            build_side,
            probe_types,
            schema: crate::nullable_schema(&schema),
            cursor: AtomicUsize::new(0),
        }
    }
}

impl Source for JoinBuildScanSource {
    fn next_morsel(&self, rows: usize) -> Result<Option<Morsel>> {
        let table = built(&self.table, "build-side pass")?;
        let rows = rows.max(1);
        let start = self.cursor.fetch_add(rows, Ordering::Relaxed);
        let total = table.num_rows();
        if start >= total {
            return Ok(None);
        }
        let end = (start + rows).min(total);
        let want_matched = self.mode == SideMode::Semi;
        let keep: BooleanArray = (start..end)
            .map(|r| Some(table.is_matched(r) == want_matched))
            .collect();
        let build = filter_record_batch(&table.batch.slice(start, end - start), &keep)?;
        let m = build.num_rows();
        let columns: Vec<ArrayRef> = match self.mode {
            SideMode::Outer => {
                let nulls = self.probe_types.iter().map(|t| new_null_array(t, m));
                match self.build_side {
                    BuildSide::Left => build.columns().iter().cloned().chain(nulls).collect(),
                    BuildSide::Right => nulls.chain(build.columns().iter().cloned()).collect(),
                }
            }
            _ => build.columns().to_vec(),
        };
        let out = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(m)),
        )?;
        Ok(Some(Morsel {
            slices: vec![(MorselSeq::at(start as u64), out)],
        }))
    }

    fn name(&self) -> String {
        format!("scan hash table ({:?} build rows)", self.mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;

    /// A build table of `n` rows whose key is `row % distinct`.
    fn table(n: usize, distinct: i64) -> JoinHashTable {
        let keys: ArrayRef = Arc::new(Int64Array::from_iter_values(
            (0..n as i64).map(|r| r % distinct),
        ));
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)])),
            vec![keys.clone()],
        )
        .unwrap();
        let encoded = KeyEncoder::new(vec![DataType::Int64], false)
            .unwrap()
            .encode(vec![keys])
            .unwrap();
        JoinHashTable::new(batch, encoded, false).unwrap()
    }

    /// The build rows each key `0..distinct` finds, in chain order.
    fn matches(t: &JoinHashTable, distinct: i64) -> Vec<Vec<u32>> {
        let probe = KeyEncoder::new(vec![DataType::Int64], false)
            .unwrap()
            .encode(vec![Arc::new(Int64Array::from_iter_values(0..distinct))])
            .unwrap();
        let (mut p, mut b) = (Vec::new(), Vec::new());
        let end = t.candidates(
            &probe,
            distinct as usize,
            ProbeCursor::row(0),
            usize::MAX,
            true,
            (&mut p, &mut b),
        );
        assert_eq!(end, ProbeCursor::row(distinct as usize));
        let mut out = vec![Vec::new(); distinct as usize];
        for (i, j) in p.into_iter().zip(b) {
            out[i as usize].push(j);
        }
        out
    }

    /// Drains the insert pipeline's source into its sink from `threads`
    /// threads, as the workers of the insert task set would.
    fn insert_in_parallel(slot: &HashTableSlot, threads: usize, morsel_rows: usize) {
        let source = JoinTableInsertSource::new(slot.clone());
        let sink = JoinTableInsertSink::new(slot.clone());
        std::thread::scope(|s| {
            for w in 0..threads {
                let (source, sink) = (&source, &sink);
                s.spawn(move || {
                    while let Some(m) = source.next_morsel(morsel_rows).unwrap() {
                        for (seq, batch) in m.slices {
                            sink.consume(seq, batch, w).unwrap();
                        }
                    }
                });
            }
        });
        sink.finish().unwrap();
    }

    #[test]
    fn small_tables_are_linked_in_the_build_and_need_no_insert_morsels() {
        let slot: HashTableSlot = Arc::new(OnceLock::new());
        slot.set(table(INLINE_INSERT_ROWS, 100)).unwrap();
        let source = JoinTableInsertSource::new(slot.clone());
        assert_eq!(source.remaining_rows(), Some(0));
        assert!(source.next_morsel(1000).unwrap().is_none());
        let t = slot.get().unwrap();
        let m = matches(t, 100);
        assert!(m.iter().all(|rows| rows.len() == INLINE_INSERT_ROWS / 100
            || rows.len() == INLINE_INSERT_ROWS / 100 + 1));
        assert!(m.iter().all(|rows| rows.windows(2).all(|w| w[0] < w[1])));
    }

    #[test]
    fn one_inserting_worker_links_every_chain_in_ascending_row_order() {
        let n = INLINE_INSERT_ROWS * 3 + 7;
        let slot: HashTableSlot = Arc::new(OnceLock::new());
        slot.set(table(n, 1000)).unwrap();
        insert_in_parallel(&slot, 1, 999);
        let m = matches(slot.get().unwrap(), 1000);
        for (key, rows) in m.iter().enumerate() {
            let want: Vec<u32> = (key as u32..n as u32).step_by(1000).collect();
            assert_eq!(rows, &want, "key {key}");
        }
    }

    /// Concurrent inserts into shared buckets: every row ends up in exactly
    /// one chain, its key's, none lost and none linked twice.
    #[test]
    fn concurrent_inserts_link_every_row_exactly_once() {
        for (threads, distinct, morsel) in [(4, 7, 13), (8, 5000, 1000), (3, 1, 4096)] {
            let n = INLINE_INSERT_ROWS * 4 + 11;
            let slot: HashTableSlot = Arc::new(OnceLock::new());
            slot.set(table(n, distinct)).unwrap();
            insert_in_parallel(&slot, threads, morsel);
            let t = slot.get().unwrap();
            assert!(t.ready.load(Ordering::Acquire));
            let mut seen = vec![0u32; n];
            for (key, rows) in matches(t, distinct).into_iter().enumerate() {
                for r in rows {
                    assert_eq!(r as i64 % distinct, key as i64);
                    seen[r as usize] += 1;
                }
            }
            let wrong: Vec<usize> = (0..n).filter(|&r| seen[r] != 1).collect();
            assert!(
                wrong.is_empty(),
                "rows found ≠ once: {:?}",
                &wrong[..wrong.len().min(10)]
            );
        }
    }

    /// A probe of `join_type` (build side right) over the table in `slot`,
    /// with one Int64 key column `k` on both sides.
    fn probe_of(
        slot: &HashTableSlot,
        join_type: JoinType,
        memory: Arc<QueryMemory>,
    ) -> HashProbeOperator {
        let schema = slot.get().unwrap().batch.schema();
        let modes = JoinModes::new(join_type, BuildSide::Right).unwrap();
        let joined = Arc::new(Schema::new(vec![
            Field::new("pk", DataType::Int64, true),
            Field::new("k", DataType::Int64, true),
        ]));
        let out = match join_type {
            JoinType::LeftSemi | JoinType::LeftAnti => schema.clone(),
            _ => joined.clone(),
        };
        HashProbeOperator::new(
            vec![Arc::new(
                datafusion_physical_expr::expressions::Column::new("k", 0),
            )],
            Arc::new(KeyEncoder::new(vec![DataType::Int64], false).unwrap()),
            slot.clone(),
            modes,
            BuildSide::Right,
            None,
            false,
            out,
            joined,
            memory,
        )
    }

    /// Runs `probe` over `batch`, collecting the chunks it emits; stops
    /// taking chunks after `take` of them.
    fn run(probe: &HashProbeOperator, batch: RecordBatch, take: usize) -> Result<Vec<RecordBatch>> {
        let mut chunks = Vec::new();
        probe.process(batch, 0, &mut |b| {
            chunks.push(b);
            Ok(if chunks.len() >= take {
                Demand::Enough
            } else {
                Demand::More
            })
        })?;
        Ok(chunks)
    }

    fn keys(values: impl IntoIterator<Item = i64>) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from_iter_values(values))],
        )
        .unwrap()
    }

    #[test]
    fn probing_a_table_before_its_insert_pipeline_finished_is_an_internal_error() {
        let slot: HashTableSlot = Arc::new(OnceLock::new());
        slot.set(table(INLINE_INSERT_ROWS + 1, 10)).unwrap();
        let probe = probe_of(&slot, JoinType::LeftSemi, QueryMemory::unbounded());
        let err = run(&probe, keys(0..20), usize::MAX).unwrap_err();
        assert!(matches!(err, ExecError::Internal(_)), "{err}");
        insert_in_parallel(&slot, 2, 100);
        let out = run(&probe, keys(0..20), usize::MAX).unwrap();
        let rows: usize = out.iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows, 10, "keys 0..10 of 0..20 are in the table");
    }

    #[test]
    fn a_probe_row_with_more_matches_than_a_chunk_is_split_inside_its_chain() {
        // 3 keys over 3·CHUNK_PAIRS/2 build rows: each probe row matches
        // CHUNK_PAIRS/2 rows; 5 probe rows yield 2.5 chunks of pairs.
        let n = 3 * CHUNK_PAIRS / 2;
        let slot: HashTableSlot = Arc::new(OnceLock::new());
        slot.set(table(n, 3)).unwrap();
        insert_in_parallel(&slot, 2, 4096);
        let probe = probe_of(&slot, JoinType::Inner, QueryMemory::unbounded());
        let chunks = run(&probe, keys([0, 1, 2, 0, 7, 1]), usize::MAX).unwrap();
        let sizes: Vec<usize> = chunks.iter().map(|c| c.num_rows()).collect();
        assert_eq!(sizes, vec![CHUNK_PAIRS, CHUNK_PAIRS, CHUNK_PAIRS / 2]);
        // Every pair joins equal keys.
        for c in &chunks {
            let (pk, bk) = (
                c.column(0).as_primitive::<Int64Type>(),
                c.column(1).as_primitive::<Int64Type>(),
            );
            for r in 0..c.num_rows() {
                assert_eq!(pk.value(r), bk.value(r));
            }
        }
        let total: usize = sizes.iter().sum();
        assert_eq!(total, 5 * CHUNK_PAIRS / 2);
        // A satisfied consumer stops the probe after the first chunk.
        assert_eq!(run(&probe, keys([0, 1, 2, 0, 7, 1]), 1).unwrap().len(), 1);
    }

    #[test]
    fn a_per_row_join_keeps_rows_whole_and_charges_an_oversized_chunk() {
        let n = 2 * CHUNK_PAIRS;
        let slot: HashTableSlot = Arc::new(OnceLock::new());
        slot.set(table(n, 1)).unwrap();
        insert_in_parallel(&slot, 2, 4096);
        // A left outer join decides per probe row: the row matching all
        // 2·CHUNK_PAIRS build rows comes as one chunk, charged while it lives.
        let pool = crate::memory::MemoryPool::new(usize::MAX);
        let memory = QueryMemory::new(pool.clone(), usize::MAX);
        let probe = probe_of(&slot, JoinType::Left, memory.clone());
        let chunks = run(&probe, keys([0, 5, 0]), usize::MAX).unwrap();
        let sizes: Vec<usize> = chunks.iter().map(|c| c.num_rows()).collect();
        assert_eq!(
            sizes,
            vec![n, n + 1],
            "row 0 alone, then rows 5 (unmatched) and 0"
        );
        assert!(memory.peak() >= n * 16, "the oversized chunk was charged");
        assert_eq!(memory.used(), 0, "and returned");
        // Under a share smaller than such a chunk the join fails alone.
        let small = QueryMemory::new(pool, 64 * 1024);
        let probe = probe_of(&slot, JoinType::Left, small);
        let err = run(&probe, keys([0]), usize::MAX).unwrap_err();
        assert!(matches!(err, ExecError::MemoryExhausted { .. }), "{err}");
    }

    #[test]
    fn a_cross_join_emits_bounded_chunks() {
        let n = CHUNK_PAIRS + 10;
        let batch = keys(0..n as i64);
        let slot: HashTableSlot = Arc::new(OnceLock::new());
        let table = JoinHashTable::new(batch, Keys::Empty, false).unwrap();
        table.ready.store(true, Ordering::Release);
        slot.set(table).unwrap();
        let probe = HashProbeOperator::new(
            Vec::new(),
            Arc::new(KeyEncoder::new(Vec::new(), false).unwrap()),
            slot.clone(),
            JoinModes::new(JoinType::Inner, BuildSide::Right).unwrap(),
            BuildSide::Right,
            None,
            false,
            Arc::new(Schema::new(vec![
                Field::new("a", DataType::Int64, true),
                Field::new("b", DataType::Int64, true),
            ])),
            Arc::new(Schema::new(vec![
                Field::new("a", DataType::Int64, true),
                Field::new("b", DataType::Int64, true),
            ])),
            QueryMemory::unbounded(),
        );
        let chunks = run(&probe, keys([1, 2, 3]), usize::MAX).unwrap();
        assert!(chunks.iter().all(|c| c.num_rows() <= CHUNK_PAIRS));
        let total: usize = chunks.iter().map(|c| c.num_rows()).sum();
        assert_eq!(total, 3 * n);
    }

    /// A build side of 200 000 rows (two key columns: the Int2 codec; a
    /// string key: the row format) collected by two workers goes through
    /// the split step and gives the table the one-step layout gives: the
    /// concatenated rows in worker order and every key's rows.
    #[test]
    fn a_large_build_side_is_laid_out_by_a_split_step() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let batch = |from: i64| {
            let ids = from..from + 1000;
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from_iter(
                        ids.clone().map(|i| (i % 13 != 0).then_some(i % 1000)),
                    )),
                    Arc::new(Int64Array::from_iter_values(ids.clone())),
                    Arc::new(arrow::array::StringArray::from_iter_values(
                        ids.map(|i| format!("k{}", i % 777)),
                    )),
                ],
            )
            .unwrap()
        };
        let col = |i: usize| -> ExprRef {
            Arc::new(datafusion_physical_expr::expressions::Column::new(
                schema.field(i).name(),
                i,
            ))
        };
        for (keys, types) in [
            (vec![col(0), col(1)], vec![DataType::Int64, DataType::Int64]),
            (vec![col(2)], vec![DataType::Utf8]),
        ] {
            let slot: HashTableSlot = Arc::new(OnceLock::new());
            let encoder = Arc::new(KeyEncoder::new(types, false).unwrap());
            let sink = HashBuildSink::new(
                keys.clone(),
                encoder.clone(),
                schema.clone(),
                2,
                true,
                slot.clone(),
                QueryMemory::unbounded(),
            );
            let mut by_worker = vec![Vec::new(), Vec::new()];
            for (i, from) in (0..200_000).step_by(1000).enumerate() {
                sink.consume(MorselSeq::at(i as u64), batch(from), i % 2)
                    .unwrap();
                by_worker[i % 2].push(batch(from));
            }
            let steps = sink.finish().unwrap();
            assert_eq!(steps.len(), 1, "laid out by a step");
            assert_eq!(steps[0].parts(), 4, "keys + 3 columns");
            crate::step::run_inline(steps).unwrap();
            insert_in_parallel(&slot, 2, 5000);
            let t = slot.get().unwrap();
            let all: Vec<RecordBatch> = by_worker.into_iter().flatten().collect();
            let expected = concat_batches(&schema, &all).unwrap();
            assert_eq!(t.batch, expected);
            let reference = encoder
                .encode(eval_keys(&keys, &expected).unwrap())
                .unwrap();
            for row in (0..t.num_rows()).step_by(997) {
                assert_eq!(t.keys.hash(row), reference.hash(row));
                assert_eq!(t.keys.is_null(row), reference.is_null(row));
                assert!(t.keys.is_null(row) || t.keys.eq(row, &reference, row));
            }
            assert_eq!(t.null_rows.len(), reference_nulls(&reference, t.num_rows()));
        }
    }

    fn reference_nulls(keys: &Keys, rows: usize) -> usize {
        (0..rows).filter(|&r| keys.is_null(r)).count()
    }
}

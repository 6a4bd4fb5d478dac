//! Hash aggregation with per-worker partial state and a partitioned merge.
//!
//! ```text
//!  task set k   (partial):  source ─► … ─► AggregateSink        each worker owns a
//!                                            │ finish            hash table + accumulators
//!                                            ▼
//!                            per worker: key rows, hashes, accumulator states,
//!                            group indices split into P partitions by hash,
//!                            P = max(4·workers, groups / 4096) (merge_partitions)
//!  task set k+1 (merge):    AggregateMergeSource ─► … ─► sink   one morsel = one partition:
//!                                                              merge every worker's groups of
//!                                                              that partition, then evaluate
//! ```
//!
//! Each worker's hash table is split into 64 sub-tables by hash bits, so that
//! growing it rehashes a sixty-fourth of the groups at a time rather than all
//! of them inside one morsel (see [`SUB_TABLES`]); its own per-group arrays
//! (keys, hashes) grow ahead of the accumulators' ([`grow_early`]), so that
//! not every array of the partial doubles in the same morsel. Preparing the
//! merge runs as a step whose parts each list one chunk of a partial's
//! groups by partition ([`PrepareMerge`]).
//!
//! Memory: after each batch a worker charges its query for what its hash
//! table, keys and accumulators grew by ([`crate::memory`]); the partial
//! state handed to the merge stays charged until the merge ends.
//!
//! **Spilling** (where the query has a spill directory and there is a
//! GROUP BY):
//!
//! ```text
//!   partial ──charge refused──► the worker writes its table to a spill file:
//!      ▲                        per merge partition (hash bits 40.., of a
//!      │                        fixed SPILL_PARTITIONS) one batch of keys ++
//!      └──── empty table ◄───── accumulator states; its charge goes back
//!   finish: if any worker spilled, every worker's table is spilled too, and
//!           the merge uses SPILL_PARTITIONS partitions
//!   merge:  partition p = batch p of every spill file, merged with
//!           `merge_batch` into one table, charged while it is built
//! ```
//!
//! A spilled merge holds one partition at a time: ~1/256 of all partial
//! groups. Where one partition alone does not fit the query's budget, the
//! merge fails with 53200 (no recursive repartitioning). An aggregate
//! without GROUP BY has a single group and does not spill (its refused
//! charge fails as before: only DISTINCT aggregates grow there). Writing a
//! spill decodes the table's keys once, a copy that is not charged.
//!
//! Group keys are encoded as `i64` (one integer-like column, in the
//! open-addressing maps of [`int_map`]), as one `u128` where the columns
//! fit 15 bytes ([`packed`]; a worker's table moves to the row format when a
//! batch holds a string too long for its slot, and at the merge every
//! partial does once one has), or with Arrow's row format; aggregate functions are
//! DataFusion's (`GroupsAccumulator` where the function has one, otherwise one
//! `Accumulator` per group). Without GROUP BY there is one group and the result
//! has exactly one row, also for empty input.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use stride_sched::FinalizeContext;

use arrow::array::{
    new_empty_array, Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch,
    RecordBatchOptions, UInt32Array,
};
use arrow::buffer::NullBuffer;
use arrow::compute::{filter, take, take_record_batch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use arrow::row::{RowConverter, Rows, SortField};
use datafusion_common::ScalarValue;
use datafusion_expr::{Accumulator, EmitTo, GroupsAccumulator};
use hashbrown::HashTable;

use super::{PerWorker, Sink};
use crate::error::{ExecError, Result};
use crate::hash::{hash_bytes, is_int_like, normalize_float_key};
use crate::memory::QueryMemory;
use crate::plan::{AggregateSpec, ExprRef};
use crate::seq::MorselSeq;
use crate::source::{Morsel, Source};
use crate::spill::{QuerySpill, SpillFile};
use crate::step::{SplitStep, Steps};

mod int_map;
mod packed;
use int_map::{hash_key, IntMap};
use packed::{hash_packed, PackedLayout};

/// One aggregate's per-group state, in either of DataFusion's two forms.
enum GroupState {
    Groups(Box<dyn GroupsAccumulator>),
    /// One row accumulator per group (functions without a groups accumulator,
    /// e.g. DISTINCT aggregates).
    Rows {
        spec: AggregateSpec,
        accs: Vec<Box<dyn Accumulator>>,
    },
}

impl std::fmt::Debug for GroupState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupState::Groups(_) => f.write_str("GroupsAccumulator"),
            GroupState::Rows { accs, .. } => write!(f, "{} row accumulators", accs.len()),
        }
    }
}

/// Row indices of each group, for the row-accumulator path.
fn rows_by_group(groups: &[usize], total: usize) -> Vec<Vec<u32>> {
    let mut by = vec![Vec::new(); total];
    for (row, &g) in groups.iter().enumerate() {
        by[g].push(row as u32);
    }
    by
}

impl GroupState {
    fn new(spec: &AggregateSpec) -> Result<Self> {
        if spec.function.groups_accumulator_supported() {
            Ok(GroupState::Groups(
                spec.function.create_groups_accumulator()?,
            ))
        } else {
            Ok(GroupState::Rows {
                spec: spec.clone(),
                accs: Vec::new(),
            })
        }
    }

    fn grow(
        spec: &AggregateSpec,
        accs: &mut Vec<Box<dyn Accumulator>>,
        total: usize,
    ) -> Result<()> {
        while accs.len() < total {
            accs.push(spec.function.create_accumulator()?);
        }
        Ok(())
    }

    fn update(
        &mut self,
        values: &[ArrayRef],
        groups: &[usize],
        filter_mask: Option<&BooleanArray>,
        total: usize,
    ) -> Result<()> {
        match self {
            GroupState::Groups(acc) => Ok(acc.update_batch(values, groups, filter_mask, total)?),
            GroupState::Rows { spec, accs } => {
                Self::grow(spec, accs, total)?;
                let by = rows_by_group(groups, total);
                for (g, rows) in by.into_iter().enumerate() {
                    if rows.is_empty() {
                        continue;
                    }
                    let idx = UInt32Array::from(rows);
                    let mut cols = values
                        .iter()
                        .map(|v| take(v.as_ref(), &idx, None))
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    if let Some(mask) = filter_mask {
                        let m = take(mask, &idx, None)?;
                        let m = m.as_boolean();
                        cols = cols
                            .iter()
                            .map(|c| filter(c.as_ref(), m))
                            .collect::<std::result::Result<Vec<_>, _>>()?;
                    }
                    accs[g].update_batch(&cols)?;
                }
                Ok(())
            }
        }
    }

    /// Memory the accumulators hold.
    fn bytes(&self) -> usize {
        match self {
            GroupState::Groups(acc) => acc.size(),
            GroupState::Rows { accs, .. } => accs.iter().map(|a| a.size()).sum(),
        }
    }

    fn state(&mut self) -> Result<Vec<ArrayRef>> {
        match self {
            GroupState::Groups(acc) => Ok(acc.state(EmitTo::All)?),
            GroupState::Rows { spec, accs } => {
                let fields = spec.function.state_fields()?;
                let mut columns: Vec<Vec<ScalarValue>> = vec![Vec::new(); fields.len()];
                for acc in accs.iter_mut() {
                    for (c, v) in acc.state()?.into_iter().enumerate() {
                        columns[c].push(v);
                    }
                }
                columns
                    .into_iter()
                    .zip(fields)
                    .map(|(vals, f)| {
                        if vals.is_empty() {
                            Ok(new_empty_array(f.data_type()))
                        } else {
                            Ok(ScalarValue::iter_to_array(vals)?)
                        }
                    })
                    .collect()
            }
        }
    }

    fn merge(&mut self, states: &[ArrayRef], groups: &[usize], total: usize) -> Result<()> {
        match self {
            GroupState::Groups(acc) => Ok(acc.merge_batch(states, groups, total)?),
            GroupState::Rows { spec, accs } => {
                Self::grow(spec, accs, total)?;
                for (g, rows) in rows_by_group(groups, total).into_iter().enumerate() {
                    if rows.is_empty() {
                        continue;
                    }
                    let idx = UInt32Array::from(rows);
                    let cols = states
                        .iter()
                        .map(|v| take(v.as_ref(), &idx, None))
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    accs[g].merge_batch(&cols)?;
                }
                Ok(())
            }
        }
    }

    fn evaluate(&mut self, total: usize) -> Result<ArrayRef> {
        match self {
            GroupState::Groups(acc) => Ok(acc.evaluate(EmitTo::All)?),
            GroupState::Rows { spec, accs } => {
                Self::grow(spec, accs, total)?;
                if accs.is_empty() {
                    return Ok(new_empty_array(spec.function.field().data_type()));
                }
                let vals = accs
                    .iter_mut()
                    .map(|a| a.evaluate())
                    .collect::<datafusion_common::Result<Vec<_>>>()?;
                Ok(ScalarValue::iter_to_array(vals)?)
            }
        }
    }
}

/// How group keys are encoded: one integer-like column as a widened `i64`
/// (no per-row allocation, integer compare), anything else in Arrow's row format.
#[derive(Debug)]
enum KeyCodec {
    Int(DataType),
    /// Keys that fit 15 bytes ([`packed`]); a batch that does not fit goes
    /// to the row format of `rows`.
    Packed {
        layout: PackedLayout,
        rows: RowConverter,
    },
    Rows(RowConverter),
}

/// Encoded group keys, of an input batch or of a group table.
#[derive(Debug)]
enum GroupKeys {
    /// `nulls[i]` is true where key `i` is NULL; `None` when no key is NULL.
    Int {
        values: Vec<i64>,
        nulls: Option<Vec<bool>>,
    },
    /// Keys packed into one word each ([`packed`]).
    Packed(Vec<u128>),
    Rows(Rows),
}

/// Hash of the NULL integer key (NULLs form one group).
const NULL_KEY_HASH: u64 = 0x5bd1_e995_1234_5678;

impl GroupKeys {
    /// Memory the encoded keys hold.
    fn bytes(&self) -> usize {
        match self {
            GroupKeys::Int { values, nulls } => {
                values.capacity() * 8 + nulls.as_ref().map_or(0, |n| n.capacity())
            }
            GroupKeys::Packed(v) => v.capacity() * 16,
            GroupKeys::Rows(r) => r.size(),
        }
    }

    fn len(&self) -> usize {
        match self {
            GroupKeys::Int { values, .. } => values.len(),
            GroupKeys::Packed(v) => v.len(),
            GroupKeys::Rows(r) => r.num_rows(),
        }
    }

    #[inline]
    fn is_null(nulls: &Option<Vec<bool>>, i: usize) -> bool {
        nulls.as_ref().is_some_and(|n| n[i])
    }

    #[inline]
    fn hash(&self, i: usize) -> u64 {
        match self {
            GroupKeys::Int { values, nulls } => {
                if Self::is_null(nulls, i) {
                    NULL_KEY_HASH
                } else {
                    hash_key(values[i])
                }
            }
            GroupKeys::Packed(v) => hash_packed(v[i]),
            GroupKeys::Rows(r) => hash_bytes(r.row(i).as_ref()),
        }
    }

    /// Whether key `i` of `self` equals key `j` of `other` (NULL equals NULL).
    #[inline]
    fn eq(&self, i: usize, other: &GroupKeys, j: usize) -> bool {
        match (self, other) {
            (
                GroupKeys::Int {
                    values: a,
                    nulls: na,
                },
                GroupKeys::Int {
                    values: b,
                    nulls: nb,
                },
            ) => {
                let (x, y) = (Self::is_null(na, i), Self::is_null(nb, j));
                x == y && (x || a[i] == b[j])
            }
            (GroupKeys::Packed(a), GroupKeys::Packed(b)) => a[i] == b[j],
            (GroupKeys::Rows(a), GroupKeys::Rows(b)) => a.row(i) == b.row(j),
            _ => false,
        }
    }

    /// Makes room for `more` keys (integer and packed keys only: Arrow's
    /// rows grow as they do).
    fn reserve_exact(&mut self, more: usize) {
        match self {
            GroupKeys::Int { values, nulls } => {
                values.reserve_exact(more);
                if let Some(n) = nulls {
                    n.reserve_exact(more);
                }
            }
            GroupKeys::Packed(v) => v.reserve_exact(more),
            GroupKeys::Rows(_) => {}
        }
    }

    /// Whether keys of `self` and `other` are encoded alike (and so can be
    /// compared and copied between them).
    fn same_encoding(&self, other: &GroupKeys) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }

    /// Appends key `i` of `other`.
    fn push_from(&mut self, other: &GroupKeys, i: usize) {
        match (self, other) {
            (
                GroupKeys::Int { values, nulls },
                GroupKeys::Int {
                    values: src,
                    nulls: src_nulls,
                },
            ) => {
                let null = Self::is_null(src_nulls, i);
                if null && nulls.is_none() {
                    *nulls = Some(vec![false; values.len()]);
                }
                if let Some(n) = nulls {
                    n.push(null);
                }
                values.push(src[i]);
            }
            (GroupKeys::Packed(v), GroupKeys::Packed(src)) => v.push(src[i]),
            (GroupKeys::Rows(rows), GroupKeys::Rows(src)) => rows.push(src.row(i)),
            // `GroupTable::intern` checks the encodings first.
            _ => debug_assert!(false, "group keys of two encodings"),
        }
    }
}

impl KeyCodec {
    fn new(types: Vec<DataType>) -> Result<Self> {
        if types.len() == 1 && is_int_like(&types[0]) {
            return Ok(KeyCodec::Int(types[0].clone()));
        }
        let layout = PackedLayout::new(&types);
        let rows = RowConverter::new(types.into_iter().map(SortField::new).collect())?;
        Ok(match layout {
            Some(layout) => KeyCodec::Packed { layout, rows },
            None => KeyCodec::Rows(rows),
        })
    }

    /// The row converter of keys that go to Arrow's row format.
    fn rows(&self) -> Option<&RowConverter> {
        match self {
            KeyCodec::Int(_) => None,
            KeyCodec::Packed { rows, .. } | KeyCodec::Rows(rows) => Some(rows),
        }
    }

    /// `keys` in Arrow's row format (packed keys unpacked and encoded;
    /// row keys as they are).
    fn to_rows(&self, keys: GroupKeys) -> Result<GroupKeys> {
        match (self, keys) {
            (KeyCodec::Packed { layout, rows }, GroupKeys::Packed(v)) => {
                Ok(GroupKeys::Rows(rows.convert_columns(&layout.unpack(&v)?)?))
            }
            (_, rows @ GroupKeys::Rows(_)) => Ok(rows),
            _ => Err(ExecError::Internal(
                "group keys of the wrong encoding".into(),
            )),
        }
    }

    fn empty(&self) -> GroupKeys {
        match self {
            KeyCodec::Int(_) => GroupKeys::Int {
                values: Vec::new(),
                nulls: None,
            },
            KeyCodec::Packed { .. } => GroupKeys::Packed(Vec::new()),
            KeyCodec::Rows(conv) => GroupKeys::Rows(conv.empty_rows(0, 0)),
        }
    }

    fn encode(&self, columns: &[ArrayRef]) -> Result<GroupKeys> {
        match self {
            KeyCodec::Int(_) => {
                let wide = arrow::compute::cast(&columns[0], &DataType::Int64)?;
                let nulls = wide
                    .logical_nulls()
                    .filter(|n| n.null_count() > 0)
                    .map(|n| (0..n.len()).map(|i| n.is_null(i)).collect());
                Ok(GroupKeys::Int {
                    values: wide.as_primitive::<Int64Type>().values().to_vec(),
                    nulls,
                })
            }
            KeyCodec::Packed { layout, rows } => match layout.pack(columns)? {
                Some(keys) => Ok(GroupKeys::Packed(keys)),
                None => Ok(GroupKeys::Rows(rows.convert_columns(columns)?)),
            },
            KeyCodec::Rows(conv) => {
                let columns = columns
                    .iter()
                    .map(|c| normalize_float_key(c.clone()))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                Ok(GroupKeys::Rows(conv.convert_columns(&columns)?))
            }
        }
    }

    fn decode(&self, keys: &GroupKeys) -> Result<Vec<ArrayRef>> {
        match (self, keys) {
            (KeyCodec::Int(t), GroupKeys::Int { values, nulls }) => {
                let array: ArrayRef = Arc::new(Int64Array::new(
                    values.clone().into(),
                    nulls
                        .as_ref()
                        .map(|n| NullBuffer::from_iter(n.iter().map(|&x| !x))),
                ));
                Ok(vec![arrow::compute::cast(&array, t)?])
            }
            (KeyCodec::Packed { layout, .. }, GroupKeys::Packed(keys)) => layout.unpack(keys),
            (KeyCodec::Packed { rows: conv, .. } | KeyCodec::Rows(conv), GroupKeys::Rows(rows)) => {
                Ok(conv.convert_rows(rows.iter())?)
            }
            _ => Err(ExecError::Internal(
                "group keys of the wrong encoding".into(),
            )),
        }
    }
}

/// Hash sub-tables per group table: a lookup picks one by 6 hash bits.
///
/// A hash table that outgrows its capacity rehashes every entry inside one
/// insert, which inside one morsel is work the scheduler cannot split (q18 at
/// SF 1: 1.5 M groups, single morsels of 20–65 ms at each doubling). With
/// the groups spread over 64 sub-tables, each grows on its own (at staggered
/// fills, [`grow_staggered`]) and one growth rehashes ~1/64 of the groups.
const SUB_TABLES: usize = 64;

/// The sub-table of hash `h`: bits 32..38, apart from the bits hashbrown
/// uses inside a table (the low bits index buckets, the top 7 are tags) and
/// from those that pick merge partitions (from bit 40 up).
#[inline]
fn sub_table(h: u64) -> usize {
    ((h >> 32) as usize) & (SUB_TABLES - 1)
}

/// Sub-tables smaller than this grow when full, like any table.
const STAGGER_MIN_CAPACITY: usize = 1024;

/// Grows sub-table `s` (of [`SUB_TABLES`]) before it is full: at a fill of
/// `(SUB_TABLES + s + 1) / (2 · SUB_TABLES)` of its capacity, between one
/// half and all of it.
///
/// Hashing spreads the groups evenly, so sub-tables that all grew when full
/// would reach their capacities within a few hundred inserts of each other
/// and rehash together, in one morsel. A sub-table that doubles at a fill of
/// `f` holds `f/2` of its new capacity and doubles again at `f` of it, so
/// sub-table `s` keeps growing at the same point of every doubling period:
/// the growths of the 64 sub-tables stay spread evenly over the period, one
/// sixty-fourth of the groups at a time. The price is a lower fill (on
/// average three quarters of a full table's) of the sub-tables' buckets.
#[inline]
fn grow_staggered(map: &mut HashTable<u32>, s: usize, hashes: &[u64]) {
    let cap = map.capacity();
    if cap >= STAGGER_MIN_CAPACITY && map.len() >= stagger_fill(cap, s, SUB_TABLES) {
        // Room for one more than the capacity: hashbrown doubles the buckets.
        map.reserve(cap - map.len() + 1, |&g| hashes[g as usize]);
    }
}

/// Entries at which sub-table `s` of `of`, of capacity `cap`, grows:
/// `(of + s + 1) / (2 · of)` of its capacity ([`grow_staggered`]).
#[inline]
fn stagger_fill(cap: usize, s: usize, of: usize) -> usize {
    cap * (of + s + 1) / (2 * of)
}

/// A group table's own arrays of fewer slots than this grow when full,
/// like any vector.
const EARLY_GROWTH_MIN: usize = 1 << 16;

/// Doubles a group table's per-group arrays (hashes, integer keys) at
/// three quarters of their capacity rather than when full.
///
/// The accumulators' arrays (DataFusion's, out of our hands) double when
/// the number of groups passes a power of two, and so, growing one group
/// at a time, would the table's own arrays: every per-group array of a
/// partial then doubles — copied whole — in the same morsel (q18 at SF 1:
/// 16 MB copied at once past 512 Ki groups, 3–6 ms in one morsel). Grown
/// at `3·2^k` groups instead, the table's arrays never double in the
/// morsel where the accumulators' do.
#[inline]
fn grow_early(hashes: &mut Vec<u64>, keys: &mut GroupKeys) {
    let (len, cap) = (hashes.len(), hashes.capacity());
    if cap >= EARLY_GROWTH_MIN && len == cap / 4 * 3 {
        hashes.reserve_exact(2 * cap - len);
        keys.reserve_exact(2 * cap - len);
    }
}

/// A hash table from encoded group keys to dense group indices.
#[derive(Debug)]
struct GroupTable {
    index: GroupIndex,
    keys: GroupKeys,
    hashes: Vec<u64>,
}

/// Where a group table finds a key's group: `maps[sub_table(h) %
/// maps.len()]` holds the groups of hash `h`.
#[derive(Debug)]
enum GroupIndex {
    /// Integer keys: open addressing with the key in the slot
    /// ([`int_map`]); the NULL key's group apart.
    Int {
        maps: Vec<IntMap>,
        null_group: Option<u32>,
    },
    /// Packed keys or keys in Arrow's row format, compared in the
    /// table's `keys`.
    Hashed(Vec<HashTable<u32>>),
}

/// Rows of a batch whose slots an integer intern loads before it walks
/// them (see [`int_map`]).
const INTERN_GROUP: usize = 32;

impl GroupTable {
    /// A table of `sub_tables` maps (a power of two, at most [`SUB_TABLES`]):
    /// the partial phase's tables grow without bound and take all of them,
    /// a merge partition's (~[`GROUPS_PER_PARTITION`] groups) takes one.
    fn new(codec: &KeyCodec, sub_tables: usize) -> Self {
        debug_assert!(sub_tables.is_power_of_two() && sub_tables <= SUB_TABLES);
        let index = match codec {
            KeyCodec::Int(_) => GroupIndex::Int {
                maps: (0..sub_tables)
                    .map(|s| IntMap::new((sub_tables > 1).then_some((s, sub_tables))))
                    .collect(),
                null_group: None,
            },
            KeyCodec::Packed { .. } | KeyCodec::Rows(_) => {
                GroupIndex::Hashed((0..sub_tables).map(|_| HashTable::new()).collect())
            }
        };
        GroupTable {
            index,
            keys: codec.empty(),
            hashes: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Memory the table holds: its maps, hashes and keys.
    fn bytes(&self) -> usize {
        let maps: usize = match &self.index {
            GroupIndex::Int { maps, .. } => maps.iter().map(IntMap::allocation_size).sum(),
            GroupIndex::Hashed(maps) => maps.iter().map(|m| m.allocation_size()).sum(),
        };
        maps + self.hashes.capacity() * 8 + self.keys.bytes()
    }

    /// (entries, capacity) of each sub-table.
    #[cfg(test)]
    fn fill(&self) -> Vec<(usize, usize)> {
        match &self.index {
            GroupIndex::Int { maps, .. } => maps.iter().map(|m| (m.len(), m.capacity())).collect(),
            GroupIndex::Hashed(maps) => maps.iter().map(|m| (m.len(), m.capacity())).collect(),
        }
    }

    /// Moves a table of packed keys to Arrow's row format: the same groups
    /// in the same order, hashed anew. Tables in the row format already
    /// (and integer tables) stay as they are.
    fn move_to_rows(&mut self, codec: &KeyCodec) -> Result<()> {
        if !matches!(self.keys, GroupKeys::Packed(_)) {
            return Ok(());
        }
        let GroupIndex::Hashed(maps) = &self.index else {
            return Err(ExecError::Internal(
                "packed keys in an integer table".into(),
            ));
        };
        let keys = std::mem::replace(&mut self.keys, GroupKeys::Packed(Vec::new()));
        let rows = codec.to_rows(keys)?;
        let rows_codec = codec
            .rows()
            .ok_or_else(|| ExecError::Internal("no row format for these keys".into()))?;
        let mut table = GroupTable {
            index: GroupIndex::Hashed((0..maps.len()).map(|_| HashTable::new()).collect()),
            keys: GroupKeys::Rows(rows_codec.empty_rows(0, 0)),
            hashes: Vec::new(),
        };
        let mut groups = Vec::new();
        table.intern(&rows, None, &mut groups)?;
        if groups.iter().enumerate().any(|(i, &g)| i != g) {
            return Err(ExecError::Internal(
                "group keys changed groups in the row format".into(),
            ));
        }
        *self = table;
        Ok(())
    }

    /// Interns `input` after making its encoding and the table's agree:
    /// a table of packed keys meeting keys in the row format moves to the
    /// row format, and packed keys meeting a table in the row format are
    /// encoded as rows.
    fn intern_any(
        &mut self,
        codec: &KeyCodec,
        input: GroupKeys,
        sel: Option<&[u32]>,
        out: &mut Vec<usize>,
    ) -> Result<()> {
        let input = match (&self.keys, input) {
            (GroupKeys::Packed(_), rows @ GroupKeys::Rows(_)) => {
                self.move_to_rows(codec)?;
                rows
            }
            (GroupKeys::Rows(_), packed @ GroupKeys::Packed(_)) => codec.to_rows(packed)?,
            (_, same) => same,
        };
        self.intern(&input, sel, out)
    }

    /// Group index of each key of `input` (`sel` picks keys; all when `None`).
    fn intern(
        &mut self,
        input: &GroupKeys,
        sel: Option<&[u32]>,
        out: &mut Vec<usize>,
    ) -> Result<()> {
        if !self.keys.same_encoding(input) {
            return Err(ExecError::Internal(
                "group keys of two encodings in one table".into(),
            ));
        }
        let n = sel.map_or(input.len(), |s| s.len());
        out.clear();
        out.reserve(n);
        match (&mut self.index, input) {
            (
                GroupIndex::Int { maps, null_group },
                GroupKeys::Int {
                    values,
                    nulls: input_nulls,
                },
            ) => {
                let GroupTable { keys, hashes, .. } = self;
                let sub_mask = maps.len() - 1;
                let mut group_hashes = [0u64; INTERN_GROUP];
                for start in (0..n).step_by(INTERN_GROUP) {
                    let m = INTERN_GROUP.min(n - start);
                    let row = |k: usize| sel.map_or(start + k, |s| s[start + k] as usize);
                    // Pass 1: hash each row and load its first slot.
                    for (k, h) in group_hashes[..m].iter_mut().enumerate() {
                        let i = row(k);
                        *h = if GroupKeys::is_null(input_nulls, i) {
                            NULL_KEY_HASH
                        } else {
                            let h = hash_key(values[i]);
                            maps[sub_table(h) & sub_mask].touch(h);
                            h
                        };
                    }
                    // Pass 2: find or enter each row's group.
                    for (k, &h) in group_hashes[..m].iter().enumerate() {
                        let i = row(k);
                        let new = || {
                            let g = hashes.len() as u32;
                            grow_early(hashes, keys);
                            keys.push_from(input, i);
                            hashes.push(h);
                            g
                        };
                        let g = if GroupKeys::is_null(input_nulls, i) {
                            *null_group.get_or_insert_with(new)
                        } else {
                            maps[sub_table(h) & sub_mask].find_or_insert(h, values[i], new)
                        };
                        out.push(g as usize);
                    }
                }
            }
            (GroupIndex::Hashed(maps), _) => {
                let GroupTable { keys, hashes, .. } = self;
                let sub_mask = maps.len() - 1;
                for k in 0..n {
                    let i = sel.map_or(k, |s| s[k] as usize);
                    let h = input.hash(i);
                    let map = &mut maps[sub_table(h) & sub_mask];
                    let g = match map.find(h, |&g| keys.eq(g as usize, input, i)) {
                        Some(&g) => g,
                        None => {
                            let g = hashes.len() as u32;
                            grow_early(hashes, keys);
                            keys.push_from(input, i);
                            hashes.push(h);
                            if sub_mask > 0 {
                                grow_staggered(map, sub_table(h) & sub_mask, hashes);
                            }
                            map.insert_unique(h, g, |&g| hashes[g as usize]);
                            g
                        }
                    };
                    out.push(g as usize);
                }
            }
            // The codec encodes every batch alike: integer keys meet an
            // integer index, rows a rows index.
            (GroupIndex::Int { .. }, _) => {
                return Err(ExecError::Internal(
                    "non-integer keys interned into an integer group table".into(),
                ))
            }
        }
        Ok(())
    }
}

/// One worker's partial aggregation.
#[derive(Debug, Default)]
struct Partial {
    table: Option<GroupTable>,
    states: Vec<GroupState>,
    /// Groups when there is no GROUP BY: 1 once any row arrived.
    keyless_groups: usize,
    /// Bytes of this partial charged to the query.
    charged: usize,
}

/// Groups per merge partition that the partition count aims for: a
/// partition is one morsel of the merge, which cannot be split, so its size
/// bounds how long a merge task runs past `t_max` (about 0.2 µs per group
/// and aggregate on the development machine: ~1 ms per partition).
pub const GROUPS_PER_PARTITION: usize = 4096;

/// Most merge partitions (the partition is taken from 24 hash bits).
pub const MAX_PARTITIONS: usize = 4096;

/// What the partial phase hands to the merge: the partitions it chose, once
/// it knew how many groups there are, and every worker's partial.
#[derive(Debug)]
struct MergeInput {
    partitions: usize,
    parts: Vec<PartialOutput>,
    /// Partials written to disk (all of them, once any was).
    spilled: Vec<SpilledPartial>,
    /// Bytes of `parts` charged to the query (returned when the merge ends).
    charged: usize,
}

/// Merge partitions of an aggregate that spilled: fixed before the first
/// spill, so that a spilled partial is split by the same hash bits as the
/// merge reads it.
pub const SPILL_PARTITIONS: usize = 256;

/// One worker's partial written to a spill file: per merge partition, one
/// batch of group keys followed by each aggregate's state columns.
#[derive(Debug)]
struct SpilledPartial {
    file: SpillFile,
    /// The batch of each merge partition (`None`: no group there).
    batches: Vec<Option<usize>>,
    /// State columns of each aggregate.
    widths: Vec<usize>,
}

/// The number of merge partitions for `groups` partial groups: at least
/// `min` (enough morsels for every worker), about
/// [`GROUPS_PER_PARTITION`] groups each, at most [`MAX_PARTITIONS`].
pub fn merge_partitions(groups: usize, min: usize) -> usize {
    groups
        .div_ceil(GROUPS_PER_PARTITION)
        .clamp(min.max(1), MAX_PARTITIONS.max(min))
}

/// A finished partial, split into partitions for the merge.
#[derive(Debug)]
struct PartialOutput {
    keys: Option<GroupKeys>,
    states: Vec<Vec<ArrayRef>>,
    /// Per chunk of its groups (ascending), the chunk's groups by merge
    /// partition ([`PrepareMerge`]).
    chunks: Vec<Vec<Vec<u32>>>,
}

impl PartialOutput {
    /// The partial's groups in merge partition `p`, ascending.
    fn in_partition(&self, p: usize) -> Vec<u32> {
        match self.chunks.as_slice() {
            [one] => one[p].clone(),
            chunks => chunks.iter().flat_map(|c| c[p].iter().copied()).collect(),
        }
    }
}

#[derive(Debug)]
struct AggregateShared {
    group_by: Vec<ExprRef>,
    aggregates: Vec<AggregateSpec>,
    /// Argument expressions of each aggregate (taken out of the functions once).
    args: Vec<Vec<ExprRef>>,
    /// `None` without GROUP BY.
    codec: Option<KeyCodec>,
    /// Schema of the aggregation's input (to size accumulators without input).
    input_schema: SchemaRef,
    schema: SchemaRef,
    /// Fewest merge partitions (1 without GROUP BY, which has one group);
    /// the partial phase raises it with the number of groups
    /// ([`merge_partitions`]).
    min_partitions: usize,
    /// Merge partitions once the aggregate spilled ([`SPILL_PARTITIONS`],
    /// or `min_partitions` where that is more).
    spill_partitions: usize,
}

/// The partial phase.
#[derive(Debug)]
pub struct AggregateSink {
    shared: Arc<AggregateShared>,
    partials: PerWorker<Partial>,
    output: Arc<Mutex<Option<Arc<MergeInput>>>>,
    memory: Arc<QueryMemory>,
    /// Partials written to disk so far.
    spilled: Mutex<Vec<SpilledPartial>>,
}

/// The merge phase: one morsel per partition.
#[derive(Debug)]
pub struct AggregateMergeSource {
    shared: Arc<AggregateShared>,
    /// Set by the partial phase's finish, taken by the merge's.
    input: Arc<Mutex<Option<Arc<MergeInput>>>>,
    memory: Arc<QueryMemory>,
    /// Next partition to merge (Relaxed: only the returned index is used).
    cursor: AtomicUsize,
}

/// Creates the two halves of an aggregation.
pub fn aggregate(
    group_by: Vec<ExprRef>,
    group_types: Vec<DataType>,
    aggregates: Vec<AggregateSpec>,
    input_schema: SchemaRef,
    schema: SchemaRef,
    workers: usize,
    memory: Arc<QueryMemory>,
) -> Result<(AggregateSink, AggregateMergeSource)> {
    let codec = if group_by.is_empty() {
        None
    } else {
        Some(KeyCodec::new(group_types)?)
    };
    let min_partitions = if group_by.is_empty() {
        1
    } else {
        (workers * 4).max(1)
    };
    // An order-sensitive aggregate (`array_agg(x ORDER BY k)`) reads its
    // ordering values after its arguments, as DataFusion's accumulators
    // for them expect (their states carry those values, so that partial
    // results merge in order).
    let args = aggregates
        .iter()
        .map(|a| {
            let mut exprs = a.function.expressions();
            exprs.extend(a.function.order_bys().iter().map(|o| o.expr.clone()));
            exprs
        })
        .collect();
    let shared = Arc::new(AggregateShared {
        group_by,
        aggregates,
        args,
        codec,
        input_schema: crate::nullable_schema(&input_schema),
        schema: crate::nullable_schema(&schema),
        min_partitions,
        spill_partitions: SPILL_PARTITIONS.max(min_partitions),
    });
    let output = Arc::new(Mutex::new(None));
    Ok((
        AggregateSink {
            shared: shared.clone(),
            partials: PerWorker::new(workers),
            output: output.clone(),
            memory: memory.clone(),
            spilled: Mutex::default(),
        },
        AggregateMergeSource {
            shared,
            input: output,
            memory: memory.clone(),
            cursor: AtomicUsize::new(0),
        },
    ))
}

fn eval_all(exprs: &[ExprRef], batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| Ok(e.evaluate(batch)?.into_array(batch.num_rows())?))
        .collect()
}

impl AggregateSink {
    /// Writes worker partial `p` to a spill file, one batch per merge
    /// partition (keys, then every aggregate's state columns), and resets
    /// it to an empty table; its charge goes back.
    fn spill_partial(&self, spill: &Arc<QuerySpill>, p: &mut Partial) -> Result<()> {
        let s = &self.shared;
        let (Some(mut table), Some(codec)) = (p.table.take(), &s.codec) else {
            return Ok(());
        };
        // Spilled partials are split by the hashes of the row format, so
        // that one key lands in one partition whichever encoding each
        // worker's table had.
        table.move_to_rows(codec)?;
        let states = p
            .states
            .iter_mut()
            .map(GroupState::state)
            .collect::<Result<Vec<_>>>()?;
        p.states = s
            .aggregates
            .iter()
            .map(GroupState::new)
            .collect::<Result<_>>()?;
        let mut columns = codec.decode(&table.keys)?;
        let hashes = table.hashes;
        drop(table.index);
        let widths = states.iter().map(Vec::len).collect();
        columns.extend(states.into_iter().flatten());
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .enumerate()
                .map(|(i, c)| Field::new(format!("c{i}"), c.data_type().clone(), true))
                .collect::<Vec<_>>(),
        ));
        let all = RecordBatch::try_new_with_options(
            schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(hashes.len())),
        )?;
        let mut by_partition = vec![Vec::new(); s.spill_partitions];
        for (g, h) in hashes.iter().enumerate() {
            by_partition[partition_of(*h, s.spill_partitions)].push(g as u32);
        }
        drop(hashes);
        let mut writer = spill.create(schema)?;
        let mut batches = Vec::with_capacity(by_partition.len());
        for groups in by_partition {
            batches.push(if groups.is_empty() {
                None
            } else {
                let part = take_record_batch(&all, &UInt32Array::from(groups))?;
                Some(writer.write(&part)?)
            });
        }
        drop(all);
        self.spilled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(SpilledPartial {
                file: writer.finish()?,
                batches,
                widths,
            });
        self.memory.shrink(std::mem::take(&mut p.charged));
        Ok(())
    }
}

/// The merge partition of a group of hash `h`, of `partitions`: high bits
/// pick it (low bits index tables).
#[inline]
fn partition_of(h: u64, partitions: usize) -> usize {
    ((h >> 40) as usize) % partitions
}

/// Aggregates of more groups than this prepare their merge in a split
/// step ([`PrepareMerge`]) rather than inside the sink's `finish`.
const SPLIT_PREPARE_GROUPS: usize = 1 << 14;

/// Groups of a partial one part of [`PrepareMerge`] lists by merge
/// partition: a part is one morsel, and scattering a worker's whole
/// partial (q18 at SF 1: ~750 K groups into ~370 partitions) took 4–6 ms
/// in one; a sixteenth of that stays well under a millisecond.
const PREPARE_CHUNK_GROUPS: usize = 1 << 16;

/// One worker's partial, taken apart for [`PrepareMerge`]: its
/// accumulators (turned into state arrays by one part), its keys (moved
/// to the merge untouched) and its groups' hashes (read by the parts that
/// list the groups by partition).
#[derive(Debug)]
struct PreparedPartial {
    states: Mutex<Option<Vec<GroupState>>>,
    keys: Mutex<Option<GroupKeys>>,
    /// `None` without GROUP BY: the partial's one group goes to partition 0.
    hashes: Option<Vec<u64>>,
    /// The state arrays, once the partial's state part ran (until the
    /// step's finish takes them).
    state_arrays: Mutex<Option<Vec<Vec<ArrayRef>>>>,
    /// Per chunk of [`PREPARE_CHUNK_GROUPS`] groups, its groups by merge
    /// partition, once the chunk's part ran (until the finish takes them).
    chunks: Vec<Mutex<Option<Vec<Vec<u32>>>>>,
}

/// What one part of [`PrepareMerge`] does.
#[derive(Debug, Clone, Copy)]
enum PreparePart {
    /// Turns partial `p`'s accumulators into state arrays.
    States(usize),
    /// Lists chunk `c` of partial `p`'s groups by merge partition.
    Chunk(usize, usize),
}

/// Prepares the partitioned merge: for every worker's partial, one part
/// turns its accumulators into state arrays, and one part per chunk of
/// its groups lists them by merge partition; the step's finish hands the
/// merge its input.
#[derive(Debug)]
struct PrepareMerge {
    partials: Vec<PreparedPartial>,
    parts: Vec<PreparePart>,
    /// Groups per chunk ([`PREPARE_CHUNK_GROUPS`]; tests use fewer).
    chunk_groups: usize,
    partitions: usize,
    spilled: Mutex<Vec<SpilledPartial>>,
    charged: usize,
    output: Arc<Mutex<Option<Arc<MergeInput>>>>,
}

impl PrepareMerge {
    fn new(
        partials: Vec<Partial>,
        partitions: usize,
        spilled: Vec<SpilledPartial>,
        charged: usize,
        output: Arc<Mutex<Option<Arc<MergeInput>>>>,
        chunk_groups: usize,
    ) -> Self {
        let chunk_groups = chunk_groups.max(1);
        let mut parts = Vec::new();
        let partials = partials
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let (keys, hashes) = match p.table {
                    Some(table) => (Some(table.keys), Some(table.hashes)),
                    None => (None, None),
                };
                let groups = hashes.as_ref().map_or(1, Vec::len);
                let chunks = groups.div_ceil(chunk_groups).max(1);
                parts.push(PreparePart::States(i));
                parts.extend((0..chunks).map(|c| PreparePart::Chunk(i, c)));
                PreparedPartial {
                    states: Mutex::new(Some(p.states)),
                    keys: Mutex::new(keys),
                    hashes,
                    state_arrays: Mutex::new(None),
                    chunks: (0..chunks).map(|_| Mutex::new(None)).collect(),
                }
            })
            .collect();
        PrepareMerge {
            partials,
            parts,
            chunk_groups,
            partitions,
            spilled: Mutex::new(spilled),
            charged,
            output,
        }
    }
}

/// Puts a part's output into its empty slot; `None` if it was not empty.
fn put<T>(slot: &Mutex<Option<T>>, value: T) -> Option<()> {
    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
    slot.is_none().then(|| *slot = Some(value))
}

/// Takes a part's output out of its slot.
fn take_out<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

impl SplitStep for PrepareMerge {
    fn name(&self) -> String {
        "aggregate: prepare the merge".into()
    }

    fn parts(&self) -> usize {
        self.parts.len()
    }

    fn run_part(&self, part: usize, _worker: usize) -> Result<usize> {
        let twice = || ExecError::Internal("partial prepared twice".into());
        match self.parts[part] {
            PreparePart::States(i) => {
                let p = &self.partials[i];
                let mut states = p
                    .states
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .ok_or_else(twice)?;
                let arrays = states
                    .iter_mut()
                    .map(GroupState::state)
                    .collect::<Result<Vec<_>>>()?;
                put(&p.state_arrays, arrays).ok_or_else(twice)?;
                Ok(p.hashes.as_ref().map_or(1, Vec::len))
            }
            PreparePart::Chunk(i, c) => {
                let p = &self.partials[i];
                let mut by_partition = vec![Vec::new(); self.partitions];
                let rows = match &p.hashes {
                    Some(hashes) => {
                        let first = c * self.chunk_groups;
                        let end = (first + self.chunk_groups).min(hashes.len());
                        for (g, h) in hashes[first..end].iter().enumerate() {
                            by_partition[partition_of(*h, self.partitions)]
                                .push((first + g) as u32);
                        }
                        end - first
                    }
                    None => {
                        by_partition[0].push(0);
                        1
                    }
                };
                put(&p.chunks[c], by_partition).ok_or_else(twice)?;
                Ok(rows)
            }
        }
    }

    fn finish(&self) -> Result<Steps> {
        let missing = || ExecError::Internal("merge prepared before its parts".into());
        let parts = self
            .partials
            .iter()
            .map(|p| {
                Ok(PartialOutput {
                    keys: p.keys.lock().unwrap_or_else(|e| e.into_inner()).take(),
                    states: take_out(&p.state_arrays).ok_or_else(missing)?,
                    chunks: p
                        .chunks
                        .iter()
                        .map(|c| take_out(c).ok_or_else(missing))
                        .collect::<Result<_>>()?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut output = self.output.lock().unwrap_or_else(|e| e.into_inner());
        if output.is_some() {
            return Err(ExecError::Internal("aggregate finished twice".into()));
        }
        *output = Some(Arc::new(MergeInput {
            partitions: self.partitions,
            parts,
            spilled: std::mem::take(&mut *self.spilled.lock().unwrap_or_else(|e| e.into_inner())),
            charged: self.charged,
        }));
        Ok(Steps::new())
    }
}

impl Sink for AggregateSink {
    fn consume(&self, _seq: MorselSeq, batch: RecordBatch, worker: usize) -> Result<()> {
        let s = &self.shared;
        let n = batch.num_rows();
        let keys = match &s.codec {
            Some(codec) => Some(codec.encode(&eval_all(&s.group_by, &batch)?)?),
            None => None,
        };
        let args: Vec<Vec<ArrayRef>> = s
            .args
            .iter()
            .map(|exprs| eval_all(exprs, &batch))
            .collect::<Result<_>>()?;
        let filters: Vec<Option<ArrayRef>> = s
            .aggregates
            .iter()
            .map(|a| {
                a.filter
                    .as_ref()
                    .map(|f| Ok::<_, ExecError>(f.evaluate(&batch)?.into_array(n)?))
                    .transpose()
            })
            .collect::<Result<_>>()?;
        self.partials.with(worker, |p| {
            if p.states.len() != s.aggregates.len() {
                p.states = s
                    .aggregates
                    .iter()
                    .map(GroupState::new)
                    .collect::<Result<_>>()?;
            }
            let mut groups = Vec::new();
            let total = match (keys, &s.codec) {
                (Some(keys), Some(codec)) => {
                    let table = p
                        .table
                        .get_or_insert_with(|| GroupTable::new(codec, SUB_TABLES));
                    table.intern_any(codec, keys, None, &mut groups)?;
                    table.len()
                }
                _ => {
                    groups = vec![0; n];
                    p.keyless_groups = 1;
                    1
                }
            };
            for ((state, values), f) in p.states.iter_mut().zip(&args).zip(&filters) {
                state.update(values, &groups, f.as_ref().map(|f| f.as_boolean()), total)?;
            }
            let held = p.table.as_ref().map_or(0, GroupTable::bytes)
                + p.states.iter().map(GroupState::bytes).sum::<usize>();
            if held > p.charged {
                let charged = if s.codec.is_some() {
                    self.memory.grow_spillable(held - p.charged, "aggregate")
                } else {
                    self.memory.grow(held - p.charged, "aggregate")
                };
                match charged {
                    Ok(()) => p.charged = held,
                    // Without GROUP BY there is one group: nothing to split.
                    Err(refused) if s.codec.is_none() => return Err(refused),
                    Err(refused) => {
                        let spill = self.memory.spill_for(refused)?;
                        self.spill_partial(spill, p)?;
                    }
                }
            }
            Ok(())
        })
    }

    fn finish(&self, _cx: &FinalizeContext<'_>) -> Result<Steps> {
        let s = &self.shared;
        let mut partials = self.partials.take_all();
        let spilled = {
            let mut spilled = self.spilled.lock().unwrap_or_else(|e| e.into_inner());
            if !spilled.is_empty() {
                // Once one partial spilled, all do: the merge then holds
                // one partition at a time, not every worker's groups.
                drop(spilled);
                let spill = self.memory.spill().ok_or_else(|| {
                    ExecError::Internal("aggregate spilled without a spill directory".into())
                })?;
                for p in partials.iter_mut() {
                    if p.table.is_some() {
                        self.spill_partial(spill, p)?;
                    }
                }
                partials.clear();
                spilled = self.spilled.lock().unwrap_or_else(|e| e.into_inner());
            }
            std::mem::take(&mut *spilled)
        };
        // The merge partitions groups by their partials' hashes, so all
        // partials must encode keys alike: where one worker's table went
        // to the row format (a string longer than its packed slot), the
        // others' go too.
        if let Some(codec) = &s.codec {
            let tables = || partials.iter().filter_map(|p| p.table.as_ref());
            if tables().any(|t| matches!(t.keys, GroupKeys::Rows(_)))
                && tables().any(|t| matches!(t.keys, GroupKeys::Packed(_)))
            {
                for table in partials.iter_mut().filter_map(|p| p.table.as_mut()) {
                    table.move_to_rows(codec)?;
                }
            }
        }
        let partitions = if !spilled.is_empty() {
            s.spill_partitions
        } else if s.codec.is_some() {
            let groups = partials
                .iter()
                .map(|p| p.table.as_ref().map_or(0, |t| t.hashes.len()))
                .sum();
            merge_partitions(groups, s.min_partitions)
        } else {
            1
        };
        let charged = partials.iter().map(|p| p.charged).sum();
        let partials: Vec<Partial> = partials
            .into_iter()
            .filter(|p| p.table.is_some() || p.keyless_groups > 0) // saw no input
            .collect();
        let groups: usize = partials
            .iter()
            .map(|p| {
                p.table
                    .as_ref()
                    .map_or(p.keyless_groups, |t| t.hashes.len())
            })
            .sum();
        let prepare = PrepareMerge::new(
            partials,
            partitions,
            spilled,
            charged,
            self.output.clone(),
            PREPARE_CHUNK_GROUPS,
        );
        if groups <= SPLIT_PREPARE_GROUPS {
            // Little to do: no step of its own.
            for part in 0..prepare.parts() {
                prepare.run_part(part, 0)?;
            }
            return prepare.finish();
        }
        Ok(vec![Arc::new(prepare)])
    }

    fn name(&self) -> String {
        let g: Vec<String> = self.shared.group_by.iter().map(|e| e.to_string()).collect();
        let a: Vec<&str> = self
            .shared
            .aggregates
            .iter()
            .map(|a| a.function.name())
            .collect();
        format!("aggregate [{}] group by [{}]", a.join(", "), g.join(", "))
    }
}

impl AggregateMergeSource {
    fn merge_partition(&self, partition: usize, input: &MergeInput) -> Result<RecordBatch> {
        let s = &self.shared;
        let mut states = s
            .aggregates
            .iter()
            .map(GroupState::new)
            .collect::<Result<Vec<_>>>()?;
        let mut table = s.codec.as_ref().map(|c| GroupTable::new(c, 1));
        let mut groups = Vec::new();
        let mut total = 0;
        if table.is_none() {
            // Keyless: exactly one group, also when no row arrived. The group
            // is created by one all-NULL row that the filter masks out, so
            // accumulators report "no value" (count 0, sum NULL).
            total = 1;
            let columns = s
                .input_schema
                .fields()
                .iter()
                .map(|f| arrow::array::new_null_array(f.data_type(), 1))
                .collect();
            let nulls = RecordBatch::try_new_with_options(
                s.input_schema.clone(),
                columns,
                &RecordBatchOptions::new().with_row_count(Some(1)),
            )?;
            let masked = BooleanArray::from(vec![false]);
            for (state, exprs) in states.iter_mut().zip(&s.args) {
                let values = eval_all(exprs, &nulls)?;
                state.update(&values, &[0], Some(&masked), 1)?;
            }
        }
        for spilled in &input.spilled {
            let Some(index) = spilled.batches[partition] else {
                continue;
            };
            let batch = spilled.file.read(index)?;
            let keys = batch.num_columns() - spilled.widths.iter().sum::<usize>();
            if let (Some(t), Some(codec)) = (&mut table, &s.codec) {
                t.intern_any(
                    codec,
                    codec.encode(&batch.columns()[..keys])?,
                    None,
                    &mut groups,
                )?;
                total = t.len();
            }
            let mut column = keys;
            for (state, &width) in states.iter_mut().zip(&spilled.widths) {
                state.merge(&batch.columns()[column..column + width], &groups, total)?;
                column += width;
            }
        }
        // What a spilled aggregate's merge holds of one partition is
        // charged while the partition's result is built.
        let _merged = if input.spilled.is_empty() {
            None
        } else {
            let held = table.as_ref().map_or(0, GroupTable::bytes)
                + states.iter().map(GroupState::bytes).sum::<usize>();
            Some(self.memory.charge(held, "aggregate merge")?)
        };
        for part in &input.parts {
            let sel = part.in_partition(partition);
            if sel.is_empty() {
                continue;
            }
            match (&mut table, &part.keys) {
                (Some(t), Some(keys)) => {
                    if let (GroupKeys::Rows(_), Some(codec)) = (keys, &s.codec) {
                        // The partials went to the row format (see `finish`).
                        t.move_to_rows(codec)?;
                    }
                    t.intern(keys, Some(&sel), &mut groups)?;
                    total = t.len();
                }
                _ => groups = vec![0; sel.len()],
            }
            let idx = UInt32Array::from(sel);
            for (state, cols) in states.iter_mut().zip(&part.states) {
                let cols = cols
                    .iter()
                    .map(|c| take(c.as_ref(), &idx, None))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                state.merge(&cols, &groups, total)?;
            }
        }
        let mut columns: Vec<ArrayRef> = match (&table, &s.codec) {
            (Some(t), Some(codec)) => codec.decode(&t.keys)?,
            _ => Vec::new(),
        };
        if total == 0 {
            return Ok(RecordBatch::new_empty(s.schema.clone()));
        }
        for state in states.iter_mut() {
            let mut col = state.evaluate(total)?;
            let want = s.schema.field(columns.len()).data_type();
            if col.data_type() != want {
                col = arrow::compute::cast(&col, want)?;
            }
            columns.push(col);
        }
        Ok(RecordBatch::try_new_with_options(
            s.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(total)),
        )?)
    }
}

impl Source for AggregateMergeSource {
    fn finish(&self) {
        let input = self.input.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(input) = input {
            self.memory.shrink(input.charged);
        }
    }

    fn next_morsel(&self, _rows: usize) -> Result<Option<Morsel>> {
        let input = self
            .input
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| ExecError::Internal("aggregate merge without its input".into()))?;
        let p = self.cursor.fetch_add(1, Ordering::Relaxed);
        if p >= input.partitions {
            return Ok(None);
        }
        let batch = self.merge_partition(p, &input)?;
        Ok(Some(Morsel {
            slices: vec![(MorselSeq::at(p as u64), batch)],
        }))
    }

    fn name(&self) -> String {
        if self.shared.codec.is_some() {
            format!(
                "merge aggregate (≥ {} partitions of ~{GROUPS_PER_PARTITION} groups)",
                self.shared.min_partitions
            )
        } else {
            "merge aggregate (1 partition)".to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_partitions_grow_with_the_groups_between_the_bounds() {
        // Few groups: enough morsels for every worker.
        assert_eq!(merge_partitions(0, 8), 8);
        assert_eq!(merge_partitions(8 * GROUPS_PER_PARTITION, 8), 8);
        // 1.5 M groups (TPC-H SF 1 orders): ~4096 groups each.
        assert_eq!(merge_partitions(1_500_000, 8), 367);
        // Capped, but never below the minimum.
        assert_eq!(merge_partitions(usize::MAX / 2, 8), MAX_PARTITIONS);
        assert_eq!(merge_partitions(10, 0), 1);
        assert_eq!(merge_partitions(10, MAX_PARTITIONS * 2), MAX_PARTITIONS * 2);
    }

    /// Interns `n` distinct keys in batches of `batch`, returning how many
    /// sub-tables grew (past [`STAGGER_MIN_CAPACITY`]) in each batch.
    fn growths_per_batch(
        table: &mut GroupTable,
        codec: &KeyCodec,
        n: i64,
        batch: i64,
    ) -> Vec<usize> {
        let mut out = Vec::new();
        let mut groups = Vec::new();
        for start in (0..n).step_by(batch as usize) {
            let keys: ArrayRef = Arc::new(arrow::array::Int64Array::from_iter_values(
                start..(start + batch).min(n),
            ));
            let before = table.fill();
            table
                .intern(&codec.encode(&[keys]).unwrap(), None, &mut groups)
                .unwrap();
            out.push(
                table
                    .fill()
                    .iter()
                    .zip(&before)
                    .filter(|((_, cap), (_, b))| cap != b && *b >= STAGGER_MIN_CAPACITY)
                    .count(),
            );
        }
        out
    }

    /// A table of packed keys that meets a string longer than its slot
    /// moves to the row format with every group where it was; packed keys
    /// that come after find those groups.
    #[test]
    fn packed_keys_move_to_rows_and_keep_their_groups() {
        use arrow::array::StringArray;
        let codec = KeyCodec::new(vec![DataType::Utf8, DataType::Utf8]).unwrap();
        assert!(matches!(codec, KeyCodec::Packed { .. }));
        let batch = |a: &[&str], b: &[Option<&str>]| -> Vec<ArrayRef> {
            vec![
                Arc::new(StringArray::from(a.to_vec())),
                Arc::new(StringArray::from(b.to_vec())),
            ]
        };
        let mut table = GroupTable::new(&codec, SUB_TABLES);
        let mut groups = Vec::new();
        let short = codec
            .encode(&batch(&["A", "N", "A"], &[Some("F"), None, Some("F")]))
            .unwrap();
        assert!(matches!(short, GroupKeys::Packed(_)));
        table.intern_any(&codec, short, None, &mut groups).unwrap();
        assert_eq!(groups, vec![0, 1, 0]);
        let long = codec
            .encode(&batch(&["a longer key", "N"], &[Some("F"), None]))
            .unwrap();
        assert!(matches!(long, GroupKeys::Rows(_)));
        table.intern_any(&codec, long, None, &mut groups).unwrap();
        assert_eq!(groups, vec![2, 1]);
        assert!(matches!(table.keys, GroupKeys::Rows(_)));
        let again = codec.encode(&batch(&["A"], &[Some("F")])).unwrap();
        table.intern_any(&codec, again, None, &mut groups).unwrap();
        assert_eq!(groups, vec![0]);
        let keys = codec.decode(&table.keys).unwrap();
        assert_eq!(
            keys,
            batch(&["A", "N", "a longer key"], &[Some("F"), None, Some("F")])
        );
    }

    #[test]
    fn sub_tables_grow_a_few_at_a_time_and_keep_every_group() {
        let codec = KeyCodec::new(vec![DataType::Int64]).unwrap();
        let mut table = GroupTable::new(&codec, SUB_TABLES);
        // 1 M groups in morsels of 2048 keys: with growth only when full, all
        // 64 sub-tables double within the same one or two morsels.
        let n = 1 << 20;
        let growths = growths_per_batch(&mut table, &codec, n, 2048);
        let total: usize = growths.iter().sum();
        assert!(total >= 3 * SUB_TABLES, "{total} growths past the minimum");
        let worst = *growths.iter().max().unwrap();
        assert!(worst <= 8, "{worst} sub-tables grew in one morsel");
        // Every key kept its group: interning them again adds none.
        let keys: ArrayRef = Arc::new(arrow::array::Int64Array::from_iter_values(0..n));
        let mut groups = Vec::new();
        table
            .intern(&codec.encode(&[keys]).unwrap(), None, &mut groups)
            .unwrap();
        assert_eq!(table.len(), n as usize);
        assert!(groups.iter().enumerate().all(|(i, &g)| i == g));
    }

    mod spilling {
        use super::*;
        use crate::memory::MemoryPool;
        use crate::spill::SpillArea;
        use arrow::array::StringArray;
        use arrow::util::display::array_value_to_string;
        use datafusion_functions_aggregate::average::avg_udaf;
        use datafusion_functions_aggregate::count::count_udaf;
        use datafusion_functions_aggregate::min_max::max_udaf;
        use datafusion_functions_aggregate::sum::sum_udaf;
        use datafusion_physical_expr::aggregate::AggregateExprBuilder;
        use datafusion_physical_expr::expressions::Column;

        /// Every row the merge emits, its cells as text joined by `|`, in
        /// the order emitted.
        pub(super) fn merged_rows(merge: &AggregateMergeSource) -> Vec<String> {
            let mut rows = Vec::new();
            while let Some(m) = merge.next_morsel(1).unwrap() {
                for (_, b) in m.slices {
                    for r in 0..b.num_rows() {
                        let cells: Vec<String> = b
                            .columns()
                            .iter()
                            .map(|c| array_value_to_string(c, r).unwrap())
                            .collect();
                        rows.push(cells.join("|"));
                    }
                }
            }
            rows
        }

        pub(super) fn input_schema() -> SchemaRef {
            Arc::new(Schema::new(vec![
                Field::new("k", DataType::Int64, true),
                Field::new("s", DataType::Utf8, true),
                Field::new("v", DataType::Int64, true),
                Field::new("f", DataType::Float64, true),
            ]))
        }

        /// 30 000 rows over ~6 000 keys `k` (NULL among them), 3 values of `s`.
        pub(super) fn batch(from: i64, n: i64) -> RecordBatch {
            let ids = from..from + n;
            RecordBatch::try_new(
                input_schema(),
                vec![
                    Arc::new(Int64Array::from_iter(
                        ids.clone()
                            .map(|i| (i % 1009 != 0).then_some((i * 7919) % 6007)),
                    )),
                    Arc::new(StringArray::from_iter(
                        ids.clone()
                            .map(|i| Some(["a", "bb", "ccc"][(i % 3) as usize])),
                    )),
                    Arc::new(Int64Array::from_iter(
                        ids.clone().map(|i| (i % 7 != 0).then_some(i % 101)),
                    )),
                    Arc::new(arrow::array::Float64Array::from_iter(
                        ids.map(|i| (i % 5 != 0).then_some((i % 13) as f64 / 4.0)),
                    )),
                ],
            )
            .unwrap()
        }

        pub(super) fn col(name: &str) -> ExprRef {
            let i = input_schema().index_of(name).unwrap();
            Arc::new(Column::new(name, i))
        }

        pub(super) fn spec(
            f: Arc<datafusion_expr::AggregateUDF>,
            arg: &str,
            name: &str,
            distinct: bool,
        ) -> AggregateSpec {
            let mut b = AggregateExprBuilder::new(f, vec![col(arg)])
                .schema(input_schema())
                .alias(name);
            if distinct {
                b = b.distinct();
            }
            AggregateSpec {
                function: Arc::new(b.build().unwrap()),
                filter: None,
            }
        }

        /// The aggregate both groups of tests run — sum, count, avg, max and
        /// count distinct over the input — grouped by `keys`, on `workers`
        /// partials charging `memory`.
        pub(super) fn aggregate_over(
            keys: &[&str],
            workers: usize,
            memory: Arc<QueryMemory>,
        ) -> (AggregateSink, AggregateMergeSource) {
            let aggregates = vec![
                spec(sum_udaf(), "v", "sum", false),
                spec(count_udaf(), "v", "count", false),
                spec(avg_udaf(), "f", "avg", false),
                spec(max_udaf(), "s", "max", false),
                spec(count_udaf(), "v", "distinct", true),
            ];
            let input = input_schema();
            let mut fields: Vec<Field> = keys
                .iter()
                .map(|k| input.field_with_name(k).unwrap().clone())
                .collect();
            fields.extend(
                aggregates
                    .iter()
                    .map(|a| a.function.field().as_ref().clone()),
            );
            aggregate(
                keys.iter().map(|k| col(k)).collect(),
                keys.iter()
                    .map(|k| input.field_with_name(k).unwrap().data_type().clone())
                    .collect(),
                aggregates,
                input.clone(),
                Arc::new(Schema::new(fields)),
                workers,
                memory,
            )
            .unwrap()
        }

        /// Aggregates the input under `limit` bytes with 2 workers; returns
        /// the result rows as sorted text and the bytes spilled.
        fn run(keys: &[&str], limit: usize, parent: &std::path::Path) -> (Vec<String>, u64) {
            let area = SpillArea::new(Some(parent));
            let memory =
                QueryMemory::with_spill(MemoryPool::new(1 << 30), limit, Some(area.query()));
            let (sink, merge) = aggregate_over(keys, 2, memory.clone());
            for (i, from) in (0..30_000).step_by(1000).enumerate() {
                sink.consume(MorselSeq::at(i as u64), batch(from, 1000), i % 2)
                    .unwrap();
            }
            crate::step::run_inline(
                sink.finish(&stride_sched::FinalizeContext::detached())
                    .unwrap(),
            )
            .unwrap();
            let mut rows = merged_rows(&merge);
            rows.sort();
            let spilled = memory.spilled_bytes();
            let dir = memory.spill().unwrap().dir().to_path_buf();
            drop((sink, merge, memory));
            assert!(!dir.exists(), "the query's spill files are gone");
            (rows, spilled)
        }

        #[test]
        fn a_spilled_aggregate_gives_the_in_memory_result() {
            let parent = crate::spill::tests::temp_parent("aggregate");
            for keys in [&["k"][..], &["k", "s"][..]] {
                let (expected, none) = run(keys, usize::MAX, &parent);
                assert_eq!(none, 0);
                let groups: std::collections::HashSet<&str> = expected
                    .iter()
                    .map(|r| r.rsplitn(6, '|').last().unwrap())
                    .collect();
                assert_eq!(groups.len(), expected.len(), "each group once");
                assert!(expected.len() > 6000, "{keys:?}: {}", expected.len());
                for limit in [1 << 20, 200 << 10] {
                    let (got, spilled) = run(keys, limit, &parent);
                    assert!(spilled > 0, "{keys:?} at {limit}: spilled");
                    assert_eq!(got, expected, "{keys:?} at {limit}");
                }
            }
            std::fs::remove_dir_all(&parent).unwrap();
        }

        #[test]
        fn without_group_by_a_refused_charge_still_fails() {
            let parent = crate::spill::tests::temp_parent("aggregate-keyless");
            let area = SpillArea::new(Some(&parent));
            let memory =
                QueryMemory::with_spill(MemoryPool::new(1 << 30), 4 << 10, Some(area.query()));
            let aggregates = vec![spec(count_udaf(), "k", "distinct", true)];
            let schema = Arc::new(Schema::new(vec![aggregates[0]
                .function
                .field()
                .as_ref()
                .clone()]));
            let (sink, _merge) = aggregate(
                vec![],
                vec![],
                aggregates,
                input_schema(),
                schema,
                1,
                memory,
            )
            .unwrap();
            let err = (0..30)
                .map(|i| sink.consume(MorselSeq::at(i), batch(i as i64 * 1000, 1000), 0))
                .find_map(|r| r.err())
                .expect("refused");
            assert_eq!(err.kind(), Some(crate::ErrorKind::OutOfMemory));
            drop((sink, _merge, area));
            std::fs::remove_dir_all(&parent).unwrap();
        }
    }

    mod chunked {
        use super::spilling::{aggregate_over, batch, merged_rows};
        use super::*;
        use crate::memory::MemoryPool;

        /// Aggregates 30 000 rows (keys `keys`) on `workers` partials and
        /// prepares the merge with `chunk_groups` groups per chunk; returns
        /// the merge's rows as text, in the order it emits them, and the
        /// number of parts the prepare step had.
        fn run(keys: &[&str], workers: usize, chunk_groups: usize) -> (Vec<String>, usize) {
            let memory = QueryMemory::new(MemoryPool::new(1 << 30), usize::MAX);
            let (sink, merge) = aggregate_over(keys, workers, memory);
            for (i, from) in (0..30_000).step_by(1000).enumerate() {
                sink.consume(MorselSeq::at(i as u64), batch(from, 1000), i % workers)
                    .unwrap();
            }
            let partials = sink.partials.take_all();
            let groups: usize = partials
                .iter()
                .map(|p| p.table.as_ref().map_or(1, GroupTable::len))
                .sum();
            let partitions = merge_partitions(groups, sink.shared.min_partitions);
            let prepare = PrepareMerge::new(
                partials,
                partitions,
                Vec::new(),
                0,
                sink.output.clone(),
                chunk_groups,
            );
            let parts = prepare.parts();
            crate::step::run_inline(vec![Arc::new(prepare)]).unwrap();
            let rows = merged_rows(&merge);
            (rows, parts)
        }

        #[test]
        fn a_merge_prepared_in_chunks_gives_the_same_rows_in_the_same_order() {
            for keys in [&["k"][..], &["k", "s"][..], &[][..]] {
                for workers in [1, 2] {
                    let (whole, one_chunk) = run(keys, workers, usize::MAX);
                    // One part for the states and one for the groups, per partial.
                    assert_eq!(one_chunk, 2 * workers, "{keys:?}");
                    let (chunked, parts) = run(keys, workers, 7);
                    if !keys.is_empty() {
                        assert!(parts > 400 * workers, "{keys:?}: {parts} parts");
                    }
                    assert_eq!(chunked, whole, "{keys:?} on {workers} workers");
                    assert!(!whole.is_empty());
                }
            }
        }
    }

    #[test]
    fn the_tables_own_arrays_grow_apart_from_powers_of_two() {
        let codec = KeyCodec::new(vec![DataType::Int64]).unwrap();
        let mut table = GroupTable::new(&codec, SUB_TABLES);
        let mut groups = Vec::new();
        let mut grew = 0;
        for start in (0..1i64 << 20).step_by(2048) {
            let keys: ArrayRef = Arc::new(arrow::array::Int64Array::from_iter_values(
                start..start + 2048,
            ));
            let (len, cap) = (table.hashes.len(), table.hashes.capacity());
            let key_cap = match &table.keys {
                GroupKeys::Int { values, .. } => values.capacity(),
                _ => unreachable!("an integer key"),
            };
            table
                .intern(&codec.encode(&[keys]).unwrap(), None, &mut groups)
                .unwrap();
            let after = table.hashes.len();
            if table.hashes.capacity() != cap && cap >= EARLY_GROWTH_MIN {
                grew += 1;
                // Grown before full, in a batch that crossed no power of
                // two (where the accumulators double), keys alike.
                assert!(len < cap, "grew only when full at {len}");
                assert_eq!(
                    (len..after).find(|n| n.is_power_of_two()),
                    None,
                    "grew at {len}..{after}"
                );
                assert_eq!(table.hashes.capacity(), 2 * cap);
                match &table.keys {
                    GroupKeys::Int { values, .. } => {
                        assert_eq!(values.capacity(), 2 * key_cap.max(cap))
                    }
                    _ => unreachable!("an integer key"),
                }
            }
        }
        // 64 Ki → 128 Ki → … → 2 Mi slots for 1 Mi groups (the last at
        // 768 Ki groups).
        assert_eq!(grew, 5, "early growths past the minimum");
        assert_eq!(table.len(), 1 << 20);
        assert!(groups
            .iter()
            .enumerate()
            .all(|(i, &g)| g == (1 << 20) - 2048 + i));
    }

    #[test]
    fn a_single_map_grows_only_when_full() {
        let codec = KeyCodec::new(vec![DataType::Int64]).unwrap();
        let mut table = GroupTable::new(&codec, 1);
        growths_per_batch(&mut table, &codec, 100_000, 4096);
        let (len, capacity) = table.fill()[0];
        // Full growth keeps the fill above half of the capacity.
        assert!(len * 2 > capacity, "{len} of {capacity}");
    }
}

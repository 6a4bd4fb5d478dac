//! Hash aggregation with per-worker partial state and a partitioned merge.
//!
//! ```text
//!  task set k   (partial):  source ─► … ─► AggregateSink        each worker owns a
//!                                            │ finish            hash table + accumulators
//!                                            ▼
//!                            per worker: key rows, hashes, accumulator states,
//!                            group indices split into P partitions by hash
//!  task set k+1 (merge):    AggregateMergeSource ─► … ─► sink   one morsel = one partition:
//!                                                              merge every worker's groups of
//!                                                              that partition, then evaluate
//! ```
//!
//! Group keys are encoded with Arrow's row format; aggregate functions are
//! DataFusion's (`GroupsAccumulator` where the function has one, otherwise one
//! `Accumulator` per group). Without GROUP BY there is one group and the result
//! has exactly one row, also for empty input.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use arrow::array::{
    new_empty_array, Array, ArrayRef, AsArray, BooleanArray, RecordBatch, RecordBatchOptions,
    UInt32Array,
};
use arrow::compute::{filter, take};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, Rows, SortField};
use datafusion_common::ScalarValue;
use datafusion_expr::{Accumulator, EmitTo, GroupsAccumulator};
use hashbrown::HashTable;

use super::{PerWorker, Sink};
use crate::error::{ExecError, Result};
use crate::hash::hash_bytes;
use crate::plan::{AggregateSpec, ExprRef};
use crate::source::{Morsel, Source};

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
            Ok(GroupState::Groups(spec.function.create_groups_accumulator()?))
        } else {
            Ok(GroupState::Rows {
                spec: spec.clone(),
                accs: Vec::new(),
            })
        }
    }

    fn grow(spec: &AggregateSpec, accs: &mut Vec<Box<dyn Accumulator>>, total: usize) -> Result<()> {
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

/// A hash table from encoded group keys to dense group indices.
#[derive(Debug)]
struct GroupTable {
    map: HashTable<u32>,
    keys: Rows,
    hashes: Vec<u64>,
}

impl GroupTable {
    fn new(converter: &RowConverter) -> Self {
        GroupTable {
            map: HashTable::new(),
            keys: converter.empty_rows(0, 0),
            hashes: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Group index of each row of `rows` (`sel` picks rows; all when `None`).
    fn intern(&mut self, rows: &Rows, sel: Option<&[u32]>, out: &mut Vec<usize>) {
        let GroupTable { map, keys, hashes } = self;
        let n = sel.map_or(rows.num_rows(), |s| s.len());
        out.clear();
        out.reserve(n);
        for k in 0..n {
            let i = sel.map_or(k, |s| s[k] as usize);
            let row = rows.row(i);
            let h = hash_bytes(row.as_ref());
            let g = match map.find(h, |&g| keys.row(g as usize) == row) {
                Some(&g) => g,
                None => {
                    let g = hashes.len() as u32;
                    keys.push(row);
                    hashes.push(h);
                    map.insert_unique(h, g, |&g| hashes[g as usize]);
                    g
                }
            };
            out.push(g as usize);
        }
    }
}

/// One worker's partial aggregation.
#[derive(Debug, Default)]
struct Partial {
    table: Option<GroupTable>,
    states: Vec<GroupState>,
    /// Groups when there is no GROUP BY: 1 once any row arrived.
    keyless_groups: usize,
}

/// A finished partial, split into partitions for the merge.
#[derive(Debug)]
struct PartialOutput {
    keys: Option<Rows>,
    states: Vec<Vec<ArrayRef>>,
    by_partition: Vec<Vec<u32>>,
}

#[derive(Debug)]
struct AggregateShared {
    group_by: Vec<ExprRef>,
    aggregates: Vec<AggregateSpec>,
    converter: Option<RowConverter>,
    /// Schema of the aggregation's input (to size accumulators without input).
    input_schema: SchemaRef,
    schema: SchemaRef,
    partitions: usize,
}

/// The partial phase.
#[derive(Debug)]
pub struct AggregateSink {
    shared: Arc<AggregateShared>,
    partials: PerWorker<Partial>,
    output: Arc<OnceLock<Vec<PartialOutput>>>,
}

/// The merge phase: one morsel per partition.
#[derive(Debug)]
pub struct AggregateMergeSource {
    shared: Arc<AggregateShared>,
    input: Arc<OnceLock<Vec<PartialOutput>>>,
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
) -> Result<(AggregateSink, AggregateMergeSource)> {
    let converter = if group_by.is_empty() {
        None
    } else {
        Some(RowConverter::new(
            group_types.into_iter().map(SortField::new).collect(),
        )?)
    };
    let partitions = if group_by.is_empty() { 1 } else { (workers * 4).max(1) };
    let shared = Arc::new(AggregateShared {
        group_by,
        aggregates,
        converter,
        input_schema: crate::nullable_schema(&input_schema),
        schema: crate::nullable_schema(&schema),
        partitions,
    });
    let output = Arc::new(OnceLock::new());
    Ok((
        AggregateSink {
            shared: shared.clone(),
            partials: PerWorker::new(workers),
            output: output.clone(),
        },
        AggregateMergeSource {
            shared,
            input: output,
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

impl Sink for AggregateSink {
    fn consume(&self, _seq: u64, batch: RecordBatch, worker: usize) -> Result<()> {
        let s = &self.shared;
        let n = batch.num_rows();
        let keys = match &s.converter {
            Some(conv) => Some(conv.convert_columns(&eval_all(&s.group_by, &batch)?)?),
            None => None,
        };
        let args: Vec<Vec<ArrayRef>> = s
            .aggregates
            .iter()
            .map(|a| eval_all(&a.function.expressions(), &batch))
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
                p.states = s.aggregates.iter().map(GroupState::new).collect::<Result<_>>()?;
            }
            let mut groups = Vec::new();
            let total = match (&keys, &s.converter) {
                (Some(rows), Some(conv)) => {
                    let table = p.table.get_or_insert_with(|| GroupTable::new(conv));
                    table.intern(rows, None, &mut groups);
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
            Ok(())
        })
    }

    fn finish(&self) -> Result<()> {
        let s = &self.shared;
        let mut outputs = Vec::new();
        for mut p in self.partials.take_all() {
            if p.table.is_none() && p.keyless_groups == 0 {
                continue; // this worker saw no input
            }
            let states = p
                .states
                .iter_mut()
                .map(|st| st.state())
                .collect::<Result<Vec<_>>>()?;
            let mut by_partition = vec![Vec::new(); s.partitions];
            let keys = match p.table {
                Some(table) => {
                    for (g, h) in table.hashes.iter().enumerate() {
                        // High bits pick the partition; low bits index tables.
                        by_partition[((h >> 40) as usize) % s.partitions].push(g as u32);
                    }
                    Some(table.keys)
                }
                None => {
                    if p.keyless_groups > 0 {
                        by_partition[0].push(0);
                    }
                    None
                }
            };
            outputs.push(PartialOutput {
                keys,
                states,
                by_partition,
            });
        }
        self.output
            .set(outputs)
            .map_err(|_| ExecError::Internal("aggregate finished twice".into()))
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
    fn merge_partition(&self, partition: usize, input: &[PartialOutput]) -> Result<RecordBatch> {
        let s = &self.shared;
        let mut states = s
            .aggregates
            .iter()
            .map(GroupState::new)
            .collect::<Result<Vec<_>>>()?;
        let mut table = s.converter.as_ref().map(GroupTable::new);
        let mut groups = Vec::new();
        let mut total = 0;
        if table.is_none() {
            // Keyless: exactly one group, also when no row arrived.
            total = 1;
            let empty = RecordBatch::new_empty(s.input_schema.clone());
            for (state, spec) in states.iter_mut().zip(&s.aggregates) {
                let values = eval_all(&spec.function.expressions(), &empty)?;
                state.update(&values, &[], None, 1)?;
            }
        }
        for part in input {
            let sel = &part.by_partition[partition];
            if sel.is_empty() {
                continue;
            }
            match (&mut table, &part.keys) {
                (Some(t), Some(keys)) => {
                    t.intern(keys, Some(sel), &mut groups);
                    total = t.len();
                }
                _ => groups = vec![0; sel.len()],
            }
            let idx = UInt32Array::from(sel.clone());
            for (state, cols) in states.iter_mut().zip(&part.states) {
                let cols = cols
                    .iter()
                    .map(|c| take(c.as_ref(), &idx, None))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                state.merge(&cols, &groups, total)?;
            }
        }
        let mut columns: Vec<ArrayRef> = match (&table, &s.converter) {
            (Some(t), Some(conv)) => conv.convert_rows(t.keys.iter())?,
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
    fn next_morsel(&self, _rows: usize) -> Result<Option<Morsel>> {
        let input = self
            .input
            .get()
            .ok_or_else(|| ExecError::Internal("aggregate merge before the partial phase".into()))?;
        let p = self.cursor.fetch_add(1, Ordering::Relaxed);
        if p >= self.shared.partitions {
            return Ok(None);
        }
        let batch = self.merge_partition(p, input)?;
        Ok(Some(Morsel {
            slices: vec![(p as u64, batch)],
        }))
    }

    fn name(&self) -> String {
        format!("merge aggregate ({} partitions)", self.shared.partitions)
    }
}


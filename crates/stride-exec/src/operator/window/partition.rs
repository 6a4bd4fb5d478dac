//! The window node's sink and the step that prepares its sorted rows.
//!
//! ```text
//!  consume   worker w keeps (seq, batch) of the sorted input, charged
//!  finish    blocks in sequence order ─► PrepareBlocks (one part a block;
//!            run inline when there are few rows)
//!  part k    arguments of every function over block k; the block's keys in
//!            row format: where, inside the block, a partition or a peer
//!            group starts (local counts); the block's first and last keys;
//!            each aggregate over frames from the partition's first row:
//!            its state over the block's last partition ([`Tail`])
//!  finish    joins the blocks' edges (does block k start a partition or
//!            a peer group?) and publishes [`Prepared`] to the source
//! ```
//!
//! Everything kept (input blocks, arguments, per-row counts) is charged to
//! the query until the source finishes.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef, Float64Array, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{OwnedRow, RowConverter, Rows, SortField};
use stride_sched::FinalizeContext;

use super::source::WindowSource;
use crate::error::{ExecError, Result};
use crate::memory::{batch_bytes, Charge, QueryMemory};
use crate::operator::{PerWorker, Sink};
use crate::plan::{
    ExprRef, FrameBound, FrameUnits, SortKey, WindowFunctionSpec, WindowKind, WindowPlan,
};
use crate::seq::MorselSeq;
use crate::step::{split_unless_small, SplitStep, Steps};

/// What the sink, the prepare step and the source of one window node share.
#[derive(Debug)]
pub(super) struct WindowShared {
    pub(super) partition_by: Vec<ExprRef>,
    pub(super) order_by: Vec<SortKey>,
    pub(super) functions: Vec<WindowFunctionSpec>,
    /// The node's output (input columns ++ one per function), nullable.
    pub(super) schema: SchemaRef,
    /// Partition keys in row format; `None` without PARTITION BY.
    partition_keys: Option<RowConverter>,
    /// Partition and order keys in row format (peers share them); `None`
    /// without either.
    all_keys: Option<RowConverter>,
    /// Whether some frame is a RANGE with an offset: the first order key is
    /// kept as `f64` to search for the frame's ends.
    range_offsets: bool,
    memory: Arc<QueryMemory>,
}

/// Rows of the window's input a worker collected, with their charge.
#[derive(Debug, Default)]
struct Collected {
    batches: Vec<(MorselSeq, RecordBatch)>,
    charge: Option<Charge>,
}

/// Keeps the sorted input of a window node (see the module docs).
#[derive(Debug)]
pub struct WindowSink {
    shared: Arc<WindowShared>,
    collected: PerWorker<Collected>,
    prepared: Arc<Mutex<Option<Arc<Prepared>>>>,
}

/// One block of sorted rows and what the functions need of it.
#[derive(Debug)]
pub(super) struct Block {
    pub(super) batch: RecordBatch,
    /// Each function's argument arrays over this block (lag/lead offsets
    /// and defaults, ntile and nth_value counts cast to what evaluation
    /// reads).
    pub(super) args: Vec<Vec<ArrayRef>>,
    /// The first order key as `f64`, where a RANGE frame has an offset.
    pub(super) range_key: Option<Float64Array>,
    /// `peers[j]`: peer groups that start at rows `1..=j` of this block.
    peers: Vec<u32>,
    /// Per function, for an aggregate whose frame starts UNBOUNDED
    /// PRECEDING: its accumulator's state over the block's rows from
    /// `tail` on (see [`Tail`]).
    pub(super) tails: Vec<Option<Tail>>,
}

/// An aggregate's state over the rows of a block from its last partition
/// start (or its first row) to its end. A frame that starts at a
/// partition's first row and spans blocks merges these states instead of
/// adding the rows again, so a morsel deep inside a large partition does
/// not re-read the partition's earlier rows.
#[derive(Debug)]
pub(super) struct Tail {
    /// The block's row where the state starts.
    pub(super) from: usize,
    pub(super) state: Vec<ArrayRef>,
}

/// The window's rows, ready for evaluation: sorted blocks, where
/// partitions start, and per-row peer-group counts.
#[derive(Debug)]
pub(super) struct Prepared {
    pub(super) blocks: Vec<Block>,
    /// `starts[k]`: first row of block `k`; last entry: all rows.
    starts: Vec<usize>,
    /// Peer groups that start before block `k` or at its first row.
    peer_base: Vec<u64>,
    /// First row of every partition, ascending (empty without rows).
    partition_starts: Vec<usize>,
    _charges: Vec<Charge>,
}

impl Prepared {
    pub(super) fn rows(&self) -> usize {
        self.starts.last().copied().unwrap_or(0)
    }

    /// Block and offset of row `i`.
    pub(super) fn locate(&self, i: usize) -> (usize, usize) {
        let k = self.starts.partition_point(|&s| s <= i) - 1;
        (k, i - self.starts[k])
    }

    /// First row of block `k`.
    pub(super) fn block_start(&self, k: usize) -> usize {
        self.starts[k]
    }

    /// Peer groups starting at or before row `i` (strictly increasing at
    /// each group's first row).
    pub(super) fn peer_count(&self, i: usize) -> u64 {
        let (k, j) = self.locate(i);
        self.peer_count_in(k, j)
    }

    /// [`Self::peer_count`] of row `j` of block `k`.
    pub(super) fn peer_count_in(&self, k: usize, j: usize) -> u64 {
        self.peer_base[k] + u64::from(self.blocks[k].peers[j])
    }

    /// The partition holding row `i`.
    pub(super) fn partition_of(&self, i: usize) -> Range<usize> {
        let p = self.partition_starts.partition_point(|&s| s <= i) - 1;
        let end = self
            .partition_starts
            .get(p + 1)
            .copied()
            .unwrap_or(self.rows());
        self.partition_starts[p]..end
    }

    /// The pieces of rows `range` per block: (block, first offset, end offset).
    pub(super) fn segments(
        &self,
        range: Range<usize>,
    ) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let first = if range.start < range.end {
            self.locate(range.start).0
        } else {
            self.blocks.len()
        };
        (first..self.blocks.len())
            .take_while(move |&k| self.starts[k] < range.end)
            .map(move |k| {
                let lo = range.start.max(self.starts[k]) - self.starts[k];
                let hi = range.end.min(self.starts[k + 1]) - self.starts[k];
                (k, lo, hi)
            })
    }
}

/// Creates the sink and the source of a window node.
pub(super) fn window(
    plan: &WindowPlan,
    input_schema: &SchemaRef,
    workers: usize,
    memory: Arc<QueryMemory>,
) -> Result<(WindowSink, WindowSource)> {
    let input_schema = crate::nullable_schema(input_schema);
    let field = |e: &ExprRef, options| -> Result<SortField> {
        Ok(SortField::new_with_options(
            e.data_type(&input_schema)?,
            options,
        ))
    };
    let partition_fields = plan
        .partition_by
        .iter()
        .map(|e| field(e, Default::default()))
        .collect::<Result<Vec<_>>>()?;
    let mut all_fields = partition_fields.clone();
    for k in &plan.order_by {
        all_fields.push(field(&k.expr, k.options)?);
    }
    let converter = |fields: Vec<SortField>| -> Result<Option<RowConverter>> {
        Ok(if fields.is_empty() {
            None
        } else {
            Some(RowConverter::new(fields)?)
        })
    };
    let range_offsets = plan.functions.iter().any(|f| {
        f.frame.units == FrameUnits::Range
            && [&f.frame.start, &f.frame.end]
                .iter()
                .any(|b| matches!(b, FrameBound::Preceding(_) | FrameBound::Following(_)))
    });
    let shared = Arc::new(WindowShared {
        partition_by: plan.partition_by.clone(),
        order_by: plan.order_by.clone(),
        functions: plan.functions.clone(),
        schema: crate::nullable_schema(&plan.schema),
        partition_keys: converter(partition_fields)?,
        all_keys: converter(all_fields)?,
        range_offsets,
        memory: memory.clone(),
    });
    let prepared = Arc::new(Mutex::new(None));
    Ok((
        WindowSink {
            shared: shared.clone(),
            collected: PerWorker::new(workers),
            prepared: prepared.clone(),
        },
        WindowSource::new(shared, prepared),
    ))
}

/// Rows at most for which the prepare step runs inside the sink's finish.
const INLINE_PREPARE_ROWS: usize = 1 << 14;

impl Sink for WindowSink {
    fn consume(&self, seq: MorselSeq, batch: RecordBatch, worker: usize) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let bytes = batch_bytes(&batch);
        self.collected.with(worker, |c| {
            match &mut c.charge {
                Some(charge) => charge.grow(bytes, "window")?,
                None => c.charge = Some(self.shared.memory.charge(bytes, "window")?),
            }
            c.batches.push((seq, batch));
            Ok(())
        })
    }

    fn finish(&self, _cx: &FinalizeContext<'_>) -> Result<Steps> {
        let mut batches = Vec::new();
        let mut charges = Vec::new();
        for c in self.collected.take_all() {
            batches.extend(c.batches);
            charges.extend(c.charge);
        }
        batches.sort_by_key(|(seq, _)| *seq);
        let blocks: Vec<RecordBatch> = batches.into_iter().map(|(_, b)| b).collect();
        let rows: usize = blocks.iter().map(RecordBatch::num_rows).sum();
        let step = PrepareBlocks {
            shared: self.shared.clone(),
            outputs: blocks.iter().map(|_| Mutex::new(None)).collect(),
            blocks,
            charges: Mutex::new(charges),
            prepared: self.prepared.clone(),
        };
        split_unless_small(Arc::new(step), rows <= INLINE_PREPARE_ROWS)
    }

    fn name(&self) -> String {
        let f: Vec<&str> = self
            .shared
            .functions
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        format!("window [{}]", f.join(", "))
    }
}

/// What a prepare part found in its block.
#[derive(Debug)]
struct BlockPrep {
    args: Vec<Vec<ArrayRef>>,
    range_key: Option<Float64Array>,
    peers: Vec<u32>,
    tails: Vec<Option<Tail>>,
    /// Rows of the block (after the first) that start a partition.
    partition_starts: Vec<usize>,
    /// The first and last row's partition keys and all keys.
    partition_edges: Edges,
    key_edges: Edges,
    charge: Charge,
}

/// The step that prepares the blocks (see the module docs).
#[derive(Debug)]
struct PrepareBlocks {
    shared: Arc<WindowShared>,
    blocks: Vec<RecordBatch>,
    outputs: Vec<Mutex<Option<BlockPrep>>>,
    charges: Mutex<Vec<Charge>>,
    prepared: Arc<Mutex<Option<Arc<Prepared>>>>,
}

fn eval(e: &ExprRef, batch: &RecordBatch) -> Result<ArrayRef> {
    Ok(e.evaluate(batch)?.into_array(batch.num_rows())?)
}

/// The type evaluation reads argument `i` of a function as (`None`: as
/// given).
fn argument_type(kind: &WindowKind, i: usize, value: &DataType) -> Option<DataType> {
    match (kind, i) {
        (WindowKind::Ntile, 0) | (WindowKind::NthValue, 1) => Some(DataType::Int64),
        (WindowKind::Lag | WindowKind::Lead, 1) => Some(DataType::Int64),
        (WindowKind::Lag | WindowKind::Lead, 2) => Some(value.clone()),
        _ => None,
    }
}

/// The [`Tail`] of aggregate `f` over a block of `n` rows whose argument
/// arrays are `values`, if `f` is an aggregate over frames that start
/// UNBOUNDED PRECEDING.
fn tail(
    f: &WindowFunctionSpec,
    values: &[ArrayRef],
    from: usize,
    n: usize,
) -> Result<Option<Tail>> {
    let WindowKind::Aggregate(function) = &f.kind else {
        return Ok(None);
    };
    if f.frame.start != FrameBound::UnboundedPreceding {
        return Ok(None);
    }
    let mut acc = function.create_accumulator()?;
    let rows: Vec<ArrayRef> = values.iter().map(|a| a.slice(from, n - from)).collect();
    acc.update_batch(&rows)?;
    let state = acc
        .state()?
        .iter()
        .map(|v| v.to_array())
        .collect::<datafusion_common::Result<Vec<_>>>()?;
    Ok(Some(Tail { from, state }))
}

/// Rows `1..` of `rows` that differ from the row before.
fn changes(rows: &Rows) -> impl Iterator<Item = usize> + '_ {
    (1..rows.num_rows()).filter(move |&j| rows.row(j) != rows.row(j - 1))
}

/// A block's first and last row of some keys (`None`: no such keys).
type Edges = Option<(OwnedRow, OwnedRow)>;

/// Whether the block after `before` starts with other keys than `before`
/// ends with.
fn differs(before: &Edges, after: &Edges) -> bool {
    match (before, after) {
        (Some((_, last)), Some((first, _))) => last.row() != first.row(),
        _ => false,
    }
}

fn edges(rows: &Rows) -> Edges {
    let n = rows.num_rows();
    (n > 0).then(|| (rows.row(0).owned(), rows.row(n - 1).owned()))
}

impl PrepareBlocks {
    fn keys(
        &self,
        exprs: &[ExprRef],
        converter: &RowConverter,
        batch: &RecordBatch,
    ) -> Result<Rows> {
        let columns = exprs
            .iter()
            .map(|e| eval(e, batch))
            .collect::<Result<Vec<_>>>()?;
        Ok(converter.convert_columns(&columns)?)
    }
}

impl SplitStep for PrepareBlocks {
    fn name(&self) -> String {
        "window: partitions and peers".into()
    }

    fn parts(&self) -> usize {
        self.blocks.len()
    }

    fn run_part(&self, part: usize, _worker: usize) -> Result<usize> {
        let s = &self.shared;
        let batch = &self.blocks[part];
        let n = batch.num_rows();
        let mut args = Vec::with_capacity(s.functions.len());
        for f in &s.functions {
            let mut values: Vec<ArrayRef> = Vec::with_capacity(f.args.len());
            for (i, e) in f.args.iter().enumerate() {
                let mut a = eval(e, batch)?;
                let value_type = values
                    .first()
                    .map_or(a.data_type().clone(), |v| v.data_type().clone());
                if let Some(t) = argument_type(&f.kind, i, &value_type) {
                    if a.data_type() != &t {
                        a = cast(&a, &t)?;
                    }
                }
                values.push(a);
            }
            args.push(values);
        }
        let range_key = match (s.range_offsets, s.order_by.first()) {
            (true, Some(k)) => {
                let key = eval(&k.expr, batch)?;
                let key = cast(&key, &DataType::Float64)?;
                Some(
                    key.as_any()
                        .downcast_ref::<Float64Array>()
                        .ok_or_else(|| ExecError::Internal("RANGE key is not f64".into()))?
                        .clone(),
                )
            }
            _ => None,
        };
        let partition_rows = s
            .partition_keys
            .as_ref()
            .map(|c| self.keys(&s.partition_by, c, batch))
            .transpose()?;
        let all_exprs: Vec<ExprRef> = s
            .partition_by
            .iter()
            .cloned()
            .chain(s.order_by.iter().map(|k| k.expr.clone()))
            .collect();
        let key_rows = s
            .all_keys
            .as_ref()
            .map(|c| self.keys(&all_exprs, c, batch))
            .transpose()?;
        let partition_starts: Vec<usize> = partition_rows
            .as_ref()
            .map(|r| changes(r).collect())
            .unwrap_or_default();
        let mut peers = vec![0u32; n];
        if let Some(rows) = &key_rows {
            let mut count = 0u32;
            let mut next = changes(rows).peekable();
            for (j, p) in peers.iter_mut().enumerate() {
                if next.peek() == Some(&j) {
                    next.next();
                    count += 1;
                }
                *p = count;
            }
        }
        let tail_from = partition_starts.last().copied().unwrap_or(0);
        let tails = s
            .functions
            .iter()
            .zip(&args)
            .map(|(f, values)| tail(f, values, tail_from, n))
            .collect::<Result<Vec<_>>>()?;
        let held = args
            .iter()
            .flatten()
            .map(|a| a.get_array_memory_size())
            .sum::<usize>()
            + range_key.as_ref().map_or(0, |k| k.get_array_memory_size())
            + 4 * n
            + 8 * partition_starts.len();
        let charge = s.memory.charge(held, "window")?;
        *self.outputs[part].lock().unwrap_or_else(|e| e.into_inner()) = Some(BlockPrep {
            args,
            range_key,
            peers,
            tails,
            partition_starts,
            partition_edges: partition_rows.as_ref().and_then(edges),
            key_edges: key_rows.as_ref().and_then(edges),
            charge,
        });
        Ok(n)
    }

    fn finish(&self) -> Result<Steps> {
        let mut blocks = Vec::with_capacity(self.blocks.len());
        let mut starts = Vec::with_capacity(self.blocks.len() + 1);
        let mut peer_base = Vec::with_capacity(self.blocks.len());
        let mut partition_starts = Vec::new();
        let mut charges =
            std::mem::take(&mut *self.charges.lock().unwrap_or_else(|e| e.into_inner()));
        let mut row = 0usize;
        let mut peers_before = 0u64;
        let mut previous: Option<(Edges, Edges)> = None;
        for (batch, output) in self.blocks.iter().zip(&self.outputs) {
            let prep = output
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .ok_or_else(|| ExecError::Internal("window block prepared twice".into()))?;
            let (new_partition, new_peer) = match &previous {
                None => (true, true),
                Some((partition_edges, key_edges)) => {
                    let p = differs(partition_edges, &prep.partition_edges);
                    (p, p || differs(key_edges, &prep.key_edges))
                }
            };
            if new_partition {
                partition_starts.push(row);
            }
            partition_starts.extend(prep.partition_starts.iter().map(|&j| row + j));
            peers_before += u64::from(new_peer);
            peer_base.push(peers_before);
            peers_before += u64::from(prep.peers.last().copied().unwrap_or(0));
            starts.push(row);
            row += batch.num_rows();
            charges.push(prep.charge);
            previous = Some((prep.partition_edges, prep.key_edges));
            blocks.push(Block {
                batch: batch.clone(),
                args: prep.args,
                range_key: prep.range_key,
                peers: prep.peers,
                tails: prep.tails,
            });
        }
        starts.push(row);
        let mut slot = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return Err(ExecError::Internal("window prepared twice".into()));
        }
        *slot = Some(Arc::new(Prepared {
            blocks,
            starts,
            peer_base,
            partition_starts,
            _charges: charges,
        }));
        Ok(Steps::new())
    }
}

//! The probe: candidate pairs in bounded chunks, per join mode.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use arrow::array::{Array, AsArray, BooleanArray, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::compute::{filter_record_batch, take};
use arrow::datatypes::SchemaRef;

use super::grace::GracePasses;
use super::keys::{eval_keys, KeyEncoder, Keys};
use super::scan::JoinBuildScanSource;
use super::table::{HashTableSlot, JoinHashTable, ProbeCursor, Walk, CHUNK_PAIRS};
use super::{JoinModes, SideMode};
use crate::error::{ExecError, Result};
use crate::memory::{batch_bytes, QueryMemory};
use crate::operator::{Deferred, Demand, Emit, Operator, Output, Resume};
use crate::plan::{BuildSide, ExprRef};

/// Probes the hash table with each batch; where the build side went to
/// disk (a grace join), sets the batch aside in its partitions instead.
#[derive(Debug, Clone)]
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

    pub(super) fn modes(&self) -> JoinModes {
        self.modes
    }

    /// The same probe of another table (a grace join's partition).
    pub(super) fn with_table(&self, table: HashTableSlot) -> Self {
        HashProbeOperator {
            table,
            ..self.clone()
        }
    }

    /// The build-side pass over `table`, a build side of `build_columns`
    /// columns probed by this operator.
    pub(super) fn build_pass(
        &self,
        table: HashTableSlot,
        build_columns: usize,
    ) -> Result<JoinBuildScanSource> {
        let fields = self.joined_schema.fields();
        let probe_fields = match self.build_side {
            BuildSide::Left => fields.get(build_columns..),
            BuildSide::Right => fields
                .len()
                .checked_sub(build_columns)
                .map(|n| &fields[..n]),
        }
        .ok_or_else(|| ExecError::Internal("join schema narrower than its build side".into()))?;
        Ok(JoinBuildScanSource::new(
            table,
            self.modes.build,
            self.build_side,
            probe_fields.iter().map(|f| f.data_type().clone()).collect(),
            self.schema.clone(),
        ))
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
            SideMode::Mark => {
                let mut matched = vec![false; count];
                for &i in p.iter() {
                    matched[i as usize - first] = true;
                }
                let slice = batch.slice(first, count);
                let mut columns = slice.columns().to_vec();
                columns.push(Arc::new(BooleanArray::from(matched)));
                Ok(RecordBatch::try_new_with_options(
                    self.schema.clone(),
                    columns,
                    &RecordBatchOptions::new().with_row_count(Some(count)),
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

/// Where a probe stopped inside a batch ([`Resume`]): the batch's encoded
/// keys and the walk's cursor.
struct ProbeResume {
    keys: Keys,
    cursor: ProbeCursor,
}

impl Operator for HashProbeOperator {
    fn process(&self, batch: RecordBatch, worker: usize, emit: &mut Emit<'_>) -> Result<()> {
        self.process_resumable(&batch, None, worker, emit).map(drop)
    }

    fn output(&self) -> Output {
        Output::Resumable
    }

    fn process_resumable(
        &self,
        batch: &RecordBatch,
        from: Option<Resume>,
        _worker: usize,
        emit: &mut Emit<'_>,
    ) -> Result<Option<Resume>> {
        let table = self
            .table
            .get()
            .filter(|t| t.ready.load(Ordering::Acquire))
            .ok_or_else(|| ExecError::Internal("probe before the hash table was built".into()))?;
        let n = batch.num_rows();
        let (keys, mut cursor) = match from {
            Some(resume) => {
                let r: ProbeResume = resume.into_state()?;
                (r.keys, r.cursor)
            }
            None => {
                let keys = self.encoder.encode(eval_keys(&self.keys, batch)?)?;
                if let Some(grace) = &table.partitioned {
                    let needs_match = matches!(self.modes.probe, SideMode::None | SideMode::Semi);
                    grace.defer_probe(batch, &keys, needs_match)?;
                    return Ok(None);
                }
                (keys, ProbeCursor::row(0))
            }
        };
        // Per-row decisions (probe-side outer, semi, anti, mark) need all
        // of a row's pairs in one chunk, or only its first when neither a
        // filter nor the build side looks at the pairs.
        let walk = match self.modes.probe {
            SideMode::None => Walk::Split,
            SideMode::Semi | SideMode::Anti | SideMode::Mark
                if self.filter.is_none() && self.modes.build == SideMode::None =>
            {
                Walk::FirstMatch
            }
            _ => Walk::WholeRows,
        };
        let row_bytes = |b: &RecordBatch| batch_bytes(b) / b.num_rows().max(1);
        let pair_bytes = 8 + row_bytes(batch) + row_bytes(&table.batch);
        let (mut p, mut b) = (Vec::new(), Vec::new());
        while cursor.row < n {
            let first = cursor.row;
            p.clear();
            b.clear();
            cursor = table.candidates(&keys, n, cursor, CHUNK_PAIRS, walk, (&mut p, &mut b));
            let _oversized = if p.len() > CHUNK_PAIRS {
                Some(self.memory.charge(p.len() * pair_bytes, "join output")?)
            } else {
                None
            };
            let out = self.chunk(table, batch, &keys, first..cursor.row, &mut p, &mut b)?;
            match emit(out)? {
                Demand::More => {}
                Demand::Enough => break,
                Demand::Suspend if cursor.row < n => {
                    return Ok(Some(Resume::new(ProbeResume { keys, cursor })));
                }
                Demand::Suspend => break,
            }
        }
        Ok(None)
    }

    fn deferred(&self) -> Result<Option<Arc<dyn Deferred>>> {
        match self.table.get().and_then(|t| t.partitioned.clone()) {
            Some(grace) => Ok(Some(Arc::new(GracePasses::new(grace, self.clone())?))),
            None => Ok(None),
        }
    }

    fn name(&self) -> String {
        let k: Vec<String> = self.keys.iter().map(|e| e.to_string()).collect();
        format!("probe [{}]", k.join(", "))
    }
}

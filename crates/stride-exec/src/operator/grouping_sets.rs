//! GROUPING SETS expansion: every input row once per grouping set, in the
//! aggregate's input pipeline, so that the parallel hash aggregate groups
//! all sets at once.
//!
//! ```text
//!   source ─► … ─► GroupingSetsOperator ─► AggregateSink
//!                  per morsel and set:    keyed on (keys, grouping id[, ordinal])
//!                  input ++ keys (absent ones NULL) ++ grouping id ++ ordinal ++ real
//! ```
//!
//! The output of one input batch is one batch per set (bounded chunks: each
//! as long as the input), and a task may stop after any of them
//! (`crate::suspend`). A set's *grouping id* is the bitmask of its
//! absent keys, bit `n-1-i` for key `i` (PostgreSQL's `GROUPING()` order);
//! the *ordinal* numbers repeated sets with the same mask so that each
//! repetition forms groups of its own. A key's NULL from the data and a
//! NULL of a rolled-up key differ in the grouping id.
//!
//! A set without keys (the grand total) yields one row even for empty
//! input: the operator adds one row per such set after the last input row
//! ([`Operator::deferred`]), all NULL with `real` false; the aggregates'
//! filters exclude rows whose `real` is false, so the row only makes the
//! group exist (count 0, sum NULL), as without GROUP BY.

use std::sync::{Arc, Mutex};

use arrow::array::{new_null_array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::ScalarValue;

use super::{Deferred, Demand, Emit, Operator, Output, Pass, PassRun, Resume};
use crate::error::{ExecError, Result};
use crate::plan::{ExprRef, GroupingSet};
use crate::source::{BlockSource, Blocks};

/// Expands each input batch into one batch per grouping set.
#[derive(Debug)]
pub struct GroupingSetsOperator {
    keys: Vec<ExprRef>,
    sets: Vec<GroupingSet>,
    /// Type of the grouping-id column (`UInt8` … `UInt64`).
    id_type: DataType,
    /// Output schema (input ++ keys ++ id ++ ordinal ++ real), all nullable.
    schema: SchemaRef,
    /// The grand-total rows, until the pipeline takes them.
    totals: Arc<GrandTotals>,
}

impl GroupingSetsOperator {
    pub fn new(
        keys: Vec<ExprRef>,
        sets: Vec<GroupingSet>,
        id_type: DataType,
        schema: SchemaRef,
    ) -> Result<Self> {
        if keys.len() >= 64 {
            return Err(ExecError::Internal(format!(
                "{} grouping keys do not fit a 64-bit grouping id",
                keys.len()
            )));
        }
        let schema = crate::nullable_schema(&schema);
        let totals = grand_total_rows(&sets, keys.len(), &id_type, &schema)?;
        Ok(GroupingSetsOperator {
            keys,
            sets,
            id_type,
            schema,
            totals: Arc::new(GrandTotals {
                batch: Mutex::new(totals),
            }),
        })
    }
}

/// A constant column of `rows` values of the grouping-id type.
fn id_column(id_type: &DataType, id: u64, rows: usize) -> Result<ArrayRef> {
    Ok(ScalarValue::UInt64(Some(id))
        .cast_to(id_type)?
        .to_array_of_size(rows)?)
}

/// One all-NULL row per set without keys, `real` false; `None` if no set
/// is empty.
fn grand_total_rows(
    sets: &[GroupingSet],
    keys: usize,
    id_type: &DataType,
    schema: &SchemaRef,
) -> Result<Option<RecordBatch>> {
    let all_absent = (1u64 << keys) - 1;
    let totals: Vec<&GroupingSet> = sets.iter().filter(|s| s.mask == all_absent).collect();
    if totals.is_empty() {
        return Ok(None);
    }
    let rows = totals.len();
    let fields = schema.fields();
    let base = fields.len() - 3;
    let mut columns: Vec<ArrayRef> = fields[..base]
        .iter()
        .map(|f| new_null_array(f.data_type(), rows))
        .collect();
    let ids = totals
        .iter()
        .map(|s| ScalarValue::UInt64(Some(s.mask)).cast_to(id_type))
        .collect::<datafusion_common::Result<Vec<_>>>()?;
    columns.push(ScalarValue::iter_to_array(ids)?);
    columns.push(Arc::new(arrow::array::UInt32Array::from_iter_values(
        totals.iter().map(|s| s.ordinal),
    )));
    columns.push(Arc::new(BooleanArray::from(vec![false; rows])));
    Ok(Some(RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &RecordBatchOptions::new().with_row_count(Some(rows)),
    )?))
}

/// Where an expansion stopped inside a batch ([`Resume`]): the evaluated
/// keys and the next set.
struct SetsResume {
    keys: Vec<ArrayRef>,
    next: usize,
}

impl Operator for GroupingSetsOperator {
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
        let n = batch.num_rows();
        let (keys, first) = match from {
            Some(resume) => {
                let r: SetsResume = resume.into_state()?;
                (r.keys, r.next)
            }
            None => {
                let keys = self
                    .keys
                    .iter()
                    .map(|e| e.evaluate(batch).and_then(|v| v.into_array(n)))
                    .collect::<datafusion_common::Result<Vec<_>>>()?;
                (keys, 0)
            }
        };
        let real: ArrayRef = Arc::new(BooleanArray::from(vec![true; n]));
        let width = keys.len();
        for (k, set) in self.sets.iter().enumerate().skip(first) {
            let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
            for (i, key) in keys.iter().enumerate() {
                let absent = set.mask & (1u64 << (width - 1 - i)) != 0;
                columns.push(if absent {
                    new_null_array(key.data_type(), n)
                } else {
                    key.clone()
                });
            }
            columns.push(id_column(&self.id_type, set.mask, n)?);
            columns.push(Arc::new(arrow::array::UInt32Array::from_value(
                set.ordinal,
                n,
            )));
            columns.push(real.clone());
            let out = RecordBatch::try_new_with_options(
                self.schema.clone(),
                columns,
                &RecordBatchOptions::new().with_row_count(Some(n)),
            )?;
            match emit(out)? {
                Demand::More => {}
                Demand::Enough => return Ok(None),
                Demand::Suspend if k + 1 < self.sets.len() => {
                    return Ok(Some(Resume::new(SetsResume { keys, next: k + 1 })));
                }
                Demand::Suspend => return Ok(None),
            }
        }
        Ok(None)
    }

    fn deferred(&self) -> Result<Option<Arc<dyn Deferred>>> {
        Ok(Some(self.totals.clone()))
    }

    fn name(&self) -> String {
        let k: Vec<String> = self.keys.iter().map(|e| e.to_string()).collect();
        let s: Vec<String> = self.sets.iter().map(|s| s.to_string()).collect();
        format!("grouping sets [{}] of [{}]", s.join(", "), k.join(", "))
    }
}

/// The rows of the sets without keys, handed to the pipeline once as a
/// pass after the last input row.
#[derive(Debug)]
struct GrandTotals {
    batch: Mutex<Option<RecordBatch>>,
}

impl Deferred for GrandTotals {
    fn next_pass(&self) -> Result<Option<Pass>> {
        let batch = self.batch.lock().unwrap_or_else(|e| e.into_inner()).take();
        Ok(batch.map(|b| Pass {
            steps: Vec::new(),
            runs: vec![PassRun {
                source: Arc::new(BlockSource::new(Blocks::Batches {
                    name: "grand totals".to_string(),
                    batches: vec![b].into(),
                })),
                operator: None,
            }],
        }))
    }
}

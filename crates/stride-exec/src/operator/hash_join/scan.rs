//! The build-side pass: build rows by their match bit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, SchemaRef};

use super::table::{built, HashTableSlot};
use super::SideMode;
use crate::error::Result;
use crate::plan::BuildSide;
use crate::seq::MorselSeq;
use crate::source::{Morsel, Source};

/// pipeline finished (build-side outer, semi and anti joins).
#[derive(Debug)]
pub struct JoinBuildScanSource {
    table: HashTableSlot,
    mode: SideMode,
    build_side: BuildSide,
    /// Types of the probe side's columns (NULL padding for outer joins).
    probe_types: Vec<DataType>,
    schema: SchemaRef,
    /// The pass whose rows these are ([`MorselSeq::in_pass`]; 0 for a
    /// compiled pipeline, a grace join's partition pass otherwise).
    pass: u32,
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
            pass: 0,
            cursor: AtomicUsize::new(0),
        }
    }

    /// The same pass numbered as rows of the `pass`-th deferred pass.
    pub fn in_pass(self, pass: u32) -> Self {
        JoinBuildScanSource { pass, ..self }
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
        let end = start.saturating_add(rows).min(total);
        let slice = table.batch.slice(start, end - start);
        let build = if self.mode == SideMode::Mark {
            slice
        } else {
            let want_matched = self.mode == SideMode::Semi;
            let keep: BooleanArray = (start..end)
                .map(|r| Some(table.is_matched(r) == want_matched))
                .collect();
            filter_record_batch(&slice, &keep)?
        };
        let m = build.num_rows();
        let columns: Vec<ArrayRef> = match self.mode {
            SideMode::Mark => {
                let marks: BooleanArray = (start..end).map(|r| Some(table.is_matched(r))).collect();
                let mut columns = build.columns().to_vec();
                columns.push(Arc::new(marks));
                columns
            }
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
            slices: vec![(MorselSeq::at(start as u64).in_pass(self.pass), out)],
        }))
    }

    fn name(&self) -> String {
        format!("scan hash table ({:?} build rows)", self.mode)
    }
}

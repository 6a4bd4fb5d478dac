//! `stride.batches`: the finished batches of shared scans
//! (`stride_exec::shared`), newest first — which table, the how-manieth
//! pass over its snapshot, how many members (and how many left or failed),
//! rows and morsels read once for all of them, the pass's CPU time, how
//! long the batch formed and how long its pass ran.

use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use stride_exec::shared::BatchRecord;
use stride_exec::SharedScans;
use stride_storage::Table;

use crate::error::Result;

pub fn batches_table(sharing: &SharedScans) -> Result<Table> {
    let rows = sharing.recent_batches();
    let f = |name: &str, t: DataType| Field::new(name, t, false);
    let schema = Arc::new(Schema::new(vec![
        f("batch", DataType::Int64),
        f("table_name", DataType::Utf8),
        f("cycle", DataType::Int64),
        f("members", DataType::Int64),
        f("detached", DataType::Int64),
        f("failed", DataType::Int64),
        f("state", DataType::Utf8),
        f("rows_read", DataType::Int64),
        f("morsels", DataType::Int64),
        f("cpu_ms", DataType::Float64),
        f("forming_ms", DataType::Float64),
        f("elapsed_ms", DataType::Float64),
        f("ended_at", DataType::Timestamp(TimeUnit::Microsecond, None)),
    ]));
    let int = |g: &dyn Fn(&BatchRecord) -> u64| -> ArrayRef {
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|r| g(r).min(i64::MAX as u64) as i64),
        ))
    };
    let ms = |g: &dyn Fn(&BatchRecord) -> std::time::Duration| -> ArrayRef {
        Arc::new(Float64Array::from_iter_values(
            rows.iter().map(|r| g(r).as_secs_f64() * 1e3),
        ))
    };
    let text = |g: &dyn Fn(&BatchRecord) -> &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(rows.iter().map(g)))
    };
    let columns: Vec<ArrayRef> = vec![
        int(&|r| r.batch),
        text(&|r| &r.table),
        int(&|r| r.cycle),
        int(&|r| r.members as u64),
        int(&|r| r.detached as u64),
        int(&|r| r.failed as u64),
        text(&|r| &r.state),
        int(&|r| r.rows_read),
        int(&|r| r.morsels),
        ms(&|r| r.cpu),
        ms(&|r| r.forming),
        ms(&|r| r.elapsed),
        Arc::new(TimestampMicrosecondArray::from_iter_values(
            rows.iter().map(|r| {
                r.ended_at
                    .duration_since(std::time::SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_micros() as i64)
                    .unwrap_or(0)
            }),
        )),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Table::new("batches".to_string(), schema, vec![batch])?)
}

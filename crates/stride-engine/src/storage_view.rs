//! The system views of the data directory: `stride.storage` (one row: the
//! log, the last checkpoint, commits and fsyncs, bulk writes' files) and `stride.storage_tables`
//! (one row per table: rows, bytes in memory, whether it is persisted —
//! generated benchmark schemas are not).

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use arrow::array::{ArrayRef, BooleanArray, Int64Array, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use stride_storage::durable::DataDir;
use stride_storage::{Catalog, Table};

use crate::error::Result;

/// `stride.storage`: one row; without a data directory its path is NULL
/// and the figures are zero.
pub fn storage_table(dir: Option<&Arc<DataDir>>) -> Result<Table> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("data_dir", DataType::Utf8, true),
        Field::new("log_bytes", DataType::Int64, false),
        Field::new("log_segments", DataType::Int64, false),
        Field::new("end_lsn", DataType::Int64, false),
        Field::new("flushed_lsn", DataType::Int64, false),
        // Since the process started.
        Field::new("commits", DataType::Int64, false),
        Field::new("fsyncs", DataType::Int64, false),
        Field::new("checkpoint_lsn", DataType::Int64, true),
        Field::new(
            "checkpoint_time",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        ),
        Field::new("checkpoint_tables", DataType::Int64, true),
        Field::new("checkpoint_bytes", DataType::Int64, true),
        Field::new("checkpoint_log_size", DataType::Int64, true),
        // Bulk writes' files named by records after the last checkpoint.
        Field::new("bulk_files", DataType::Int64, false),
        Field::new("bulk_bytes", DataType::Int64, false),
        Field::new("bulk_write_size", DataType::Int64, true),
    ]));
    let status = dir.map(|d| d.status());
    let int = |v: Option<u64>| -> ArrayRef {
        Arc::new(Int64Array::from(vec![
            v.map(|v| v.min(i64::MAX as u64) as i64)
        ]))
    };
    let figure = |f: fn(&stride_storage::durable::DataDirStatus) -> u64| {
        int(Some(status.as_ref().map_or(0, f)))
    };
    let checkpoint = status.as_ref().and_then(|s| s.checkpoint.clone());
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![status
            .as_ref()
            .map(|s| s.path.display().to_string())])),
        figure(|s| s.log_bytes),
        figure(|s| s.log_segments as u64),
        figure(|s| s.end_lsn),
        figure(|s| s.flushed_lsn),
        figure(|s| s.commits),
        figure(|s| s.fsyncs),
        int(checkpoint.as_ref().map(|c| c.lsn)),
        Arc::new(TimestampMicrosecondArray::from(vec![checkpoint
            .as_ref()
            .map(|c| {
                c.time
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_micros() as i64
            })])),
        int(checkpoint.as_ref().map(|c| c.tables as u64)),
        int(checkpoint.as_ref().map(|c| c.bytes)),
        int(status.as_ref().map(|s| s.checkpoint_log_bytes)),
        figure(|s| s.bulk_files as u64),
        figure(|s| s.bulk_bytes),
        int(status.as_ref().map(|s| s.bulk_write_bytes)),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Table::new("storage".to_string(), schema, vec![batch])?)
}

/// `stride.storage_tables`: every table, whether it is persisted.
pub fn storage_tables_table(catalog: &Catalog, persisting: bool) -> Result<Table> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("schema", DataType::Utf8, false),
        Field::new("table", DataType::Utf8, false),
        Field::new("rows", DataType::Int64, false),
        Field::new("memory_bytes", DataType::Int64, false),
        Field::new("persisted", DataType::Boolean, false),
    ]));
    let mut schemas = Vec::new();
    let mut tables = Vec::new();
    let mut rows = Vec::new();
    let mut bytes = Vec::new();
    let mut persisted = Vec::new();
    catalog.read_state(|state| {
        for (schema, list) in state.schemas() {
            for (name, t) in list {
                schemas.push(schema.clone());
                tables.push(name.clone());
                rows.push(t.num_rows() as i64);
                bytes.push(t.memory_size() as i64);
                persisted.push(persisting && !state.is_transient(schema));
            }
        }
    });
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(schemas)),
            Arc::new(StringArray::from(tables)),
            Arc::new(Int64Array::from(rows)),
            Arc::new(Int64Array::from(bytes)),
            Arc::new(BooleanArray::from(persisted)),
        ],
    )?;
    Ok(Table::new(
        "storage_tables".to_string(),
        schema,
        vec![batch],
    )?)
}

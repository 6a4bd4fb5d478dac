//! Loading Parquet and CSV files into blocks, and writing Parquet.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;

use crate::error::{Result, StorageError};
use crate::DEFAULT_BLOCK_ROWS;

fn open(path: &Path) -> Result<File> {
    File::open(path).map_err(|source| StorageError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// A file's batches as they are read, one block at a time (so that a
/// caller can account for each before the next is read).
pub type Batches = Box<dyn Iterator<Item = Result<RecordBatch>>>;

/// Reads a Parquet file block by block.
pub fn read_parquet(path: &Path) -> Result<(SchemaRef, Batches)> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(open(path)?)?;
    let schema = builder.schema().clone();
    let reader = builder.with_batch_size(DEFAULT_BLOCK_ROWS).build()?;
    Ok((schema, Box::new(reader.map(|b| b.map_err(Into::into)))))
}

/// CSV reading options.
#[derive(Debug, Clone)]
pub struct CsvOptions {
    pub has_header: bool,
    pub delimiter: u8,
    /// The schema to read with; inferred from the first 1000 rows when `None`.
    pub schema: Option<SchemaRef>,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            has_header: true,
            delimiter: b',',
            schema: None,
        }
    }
}

/// Reads a CSV file block by block.
pub fn read_csv(path: &Path, options: &CsvOptions) -> Result<(SchemaRef, Batches)> {
    use arrow::csv::reader::Format;
    let format = Format::default()
        .with_header(options.has_header)
        .with_delimiter(options.delimiter);
    let schema = match &options.schema {
        Some(s) => s.clone(),
        None => {
            let (schema, _) = format.infer_schema(open(path)?, Some(1000))?;
            Arc::new(schema)
        }
    };
    let reader = arrow::csv::ReaderBuilder::new(schema.clone())
        .with_format(format)
        .with_batch_size(DEFAULT_BLOCK_ROWS)
        .build(open(path)?)?;
    Ok((schema, Box::new(reader.map(|b| b.map_err(Into::into)))))
}

/// Writes batches to a Parquet file (snappy-compressed).
pub fn write_parquet(path: &Path, schema: &SchemaRef, batches: &[RecordBatch]) -> Result<u64> {
    let file = File::create(path).map_err(|source| StorageError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .build();
    let mut writer = ArrowWriter::try_new(file, schema.clone(), Some(props))?;
    let mut rows = 0u64;
    for b in batches {
        writer.write(b)?;
        rows += b.num_rows() as u64;
    }
    writer.close()?;
    Ok(rows)
}

/// Writes batches to a CSV file with a header row.
pub fn write_csv(path: &Path, batches: &[RecordBatch]) -> Result<u64> {
    let file = File::create(path).map_err(|source| StorageError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let mut writer = arrow::csv::WriterBuilder::new()
        .with_header(true)
        .build(file);
    let mut rows = 0u64;
    for b in batches {
        writer.write(b)?;
        rows += b.num_rows() as u64;
    }
    Ok(rows)
}

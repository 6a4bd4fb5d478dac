//! Immutable table snapshots.
//!
//! A [`Table`] is a schema plus a list of blocks (Arrow record batches). Blocks
//! are never modified: appending rows makes a new snapshot that shares the old
//! blocks (`RecordBatch` clones are reference-counted), so readers never see a
//! partially written table and writers never wait for readers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float64Type, SchemaRef};

use crate::constraints::{self, KeyConstraint, KeyIndex};
use crate::error::{Result, StorageError};
use crate::placement::{PlacedTable, Placement};

/// Source of table incarnation ids; Relaxed: ids only need to be unique.
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(1);

/// Appends merge into a last block while it stays within this many rows
/// (see [`Table::append`]).
pub const COALESCE_ROWS: usize = 4096;

#[derive(Debug, Clone)]
pub struct Table {
    name: String,
    /// The table's incarnation: new for every [`Table::new`], kept by
    /// [`Table::append`], so that a committing transaction tells a table it
    /// appended to from one dropped and created again under the same name.
    id: u64,
    schema: SchemaRef,
    blocks: Arc<[RecordBatch]>,
    rows: usize,
    /// Per column: (min, max) as f64 for numeric and date columns, computed
    /// on first request (the planner's range selectivities).
    ranges: ColumnRanges,
    /// How the rows are dealt to memory nodes (`None`: the scanning
    /// session's default), and where the placed columns' pages are once
    /// placed ([`Table::placed`]; appended blocks are not placed).
    placement: Option<Placement>,
    placed: Option<Arc<PlacedTable>>,
    /// The keys declared in the schema's metadata (`crate::constraints`).
    keys: Arc<[KeyConstraint]>,
    /// Per key, the values this snapshot holds: built by the first write
    /// check, handed on (extended) to the snapshot an append makes.
    key_index: Arc<OnceLock<Arc<[KeyIndex]>>>,
}

impl Table {
    /// Makes a table from blocks; every block must have exactly `schema`'s
    /// column types (field names and nullability are taken from `schema`).
    pub fn new(
        name: impl Into<String>,
        schema: SchemaRef,
        blocks: Vec<RecordBatch>,
    ) -> Result<Self> {
        let name = name.into();
        let blocks = blocks
            .into_iter()
            .filter(|b| b.num_rows() > 0)
            .map(|b| conform(&name, &schema, b))
            .collect::<Result<Vec<_>>>()?;
        let rows = blocks.iter().map(|b| b.num_rows()).sum();
        let keys: Arc<[KeyConstraint]> = constraints::keys(&schema).into();
        let key_index = Arc::new(OnceLock::new());
        if !keys.is_empty() && rows > 0 {
            // Rows written as a whole (CREATE TABLE AS, an UPDATE's new
            // snapshot) are checked as a whole.
            let built = constraints::extend_indexes(&name, &schema, &keys, None, &blocks)?;
            let _ = key_index.set(built.into());
        }
        Ok(Table {
            name,
            id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed),
            ranges: empty_ranges(&schema),
            schema,
            blocks: blocks.into(),
            rows,
            placement: None,
            placed: None,
            keys,
            key_index,
        })
    }

    /// The keys declared on the table (`PRIMARY KEY`, `UNIQUE`).
    pub fn keys(&self) -> &[KeyConstraint] {
        &self.keys
    }

    /// The key indices of this snapshot, built from its rows if no write
    /// built them yet.
    fn key_index(&self) -> Result<Arc<[KeyIndex]>> {
        if let Some(built) = self.key_index.get() {
            return Ok(built.clone());
        }
        let built: Arc<[KeyIndex]> =
            constraints::extend_indexes(&self.name, &self.schema, &self.keys, None, &self.blocks)?
                .into();
        Ok(self.key_index.get_or_init(|| built).clone())
    }

    /// The same table (name, incarnation, rows in order) over `blocks` —
    /// its rows copied into placed memory — with `placement` and where the
    /// pages went. `blocks` must hold the same rows.
    pub fn placed(&self, blocks: Vec<RecordBatch>, placed: PlacedTable) -> Result<Table> {
        let rows: usize = blocks.iter().map(|b| b.num_rows()).sum();
        if rows != self.rows {
            return Err(StorageError::Internal(format!(
                "placing table {}: {rows} rows for {}",
                self.name, self.rows
            )));
        }
        Ok(Table {
            name: self.name.clone(),
            id: self.id,
            ranges: self.ranges.clone(),
            schema: self.schema.clone(),
            blocks: blocks.into(),
            rows,
            placement: Some(placed.placement),
            placed: Some(Arc::new(placed)),
            keys: self.keys.clone(),
            key_index: self.key_index.clone(),
        })
    }

    /// The same table with its placement reset to the sessions' default
    /// (blocks stay where they are).
    pub fn unplaced(&self) -> Table {
        Table {
            placement: None,
            placed: None,
            ..self.clone()
        }
    }

    /// How the rows are dealt to memory nodes; `None`: the scanning
    /// session's default.
    pub fn placement(&self) -> Option<Placement> {
        self.placement
    }

    /// Where the placed columns' pages are (tables placed with `ALTER
    /// TABLE … SET (placement = …)`).
    pub fn placed_pages(&self) -> Option<&Arc<PlacedTable>> {
        self.placed.as_ref()
    }

    /// (min, max) of a numeric or date column as f64 (dates in days since
    /// the epoch, decimals at their value); `None` for other types, for an
    /// empty or all-NULL column, or an index out of range.
    pub fn column_range(&self, column: usize) -> Option<(f64, f64)> {
        *self.ranges.get(column)?.get_or_init(|| {
            let mut range: Option<(f64, f64)> = None;
            for block in self.blocks.iter() {
                let col = block.column(column);
                let numeric = match col.data_type() {
                    DataType::Date32 => arrow::compute::cast(col, &DataType::Int32).ok()?,
                    t if t.is_numeric() => col.clone(),
                    _ => return None,
                };
                let values = arrow::compute::cast(&numeric, &DataType::Float64).ok()?;
                let values = values.as_primitive::<Float64Type>();
                if let (Some(lo), Some(hi)) =
                    (arrow::compute::min(values), arrow::compute::max(values))
                {
                    range = Some(match range {
                        Some((a, b)) => (a.min(lo), b.max(hi)),
                        None => (lo, hi),
                    });
                }
            }
            range
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The table's incarnation (see the field).
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub fn blocks(&self) -> &Arc<[RecordBatch]> {
        &self.blocks
    }

    pub fn num_rows(&self) -> usize {
        self.rows
    }

    /// Bytes held by the table's arrays.
    pub fn memory_size(&self) -> usize {
        self.blocks.iter().map(|b| b.get_array_memory_size()).sum()
    }

    /// `blocks` as this table stores them: empty ones dropped, each cast to
    /// the table's column types (what [`Table::append`] appends).
    pub fn conform_blocks(&self, blocks: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
        blocks
            .into_iter()
            .filter(|b| b.num_rows() > 0)
            .map(|b| conform(&self.name, &self.schema, b))
            .collect()
    }

    /// A new snapshot with `more` appended. Small appends (single-row
    /// INSERTs) are merged into a last block of fewer than
    /// [`COALESCE_ROWS`] rows — a copy of at most that many rows — so that
    /// a table written a row at a time keeps few blocks and an append stays
    /// cheap however many came before (each snapshot copies the block list).
    ///
    /// Fails, leaving this snapshot as it is, where a row breaks a declared
    /// key, a `NOT NULL` or a length.
    pub fn append(&self, more: Vec<RecordBatch>) -> Result<Table> {
        let more = self.conform_blocks(more)?;
        let key_index = Arc::new(OnceLock::new());
        if !self.keys.is_empty() && !more.is_empty() {
            let base = self.key_index()?;
            let extended = constraints::extend_indexes(
                &self.name,
                &self.schema,
                &self.keys,
                Some(&base),
                &more,
            )?;
            let _ = key_index.set(extended.into());
        }
        let mut blocks: Vec<RecordBatch> = self.blocks.to_vec();
        for b in more {
            match blocks.last_mut() {
                Some(last) if last.num_rows() + b.num_rows() <= COALESCE_ROWS => {
                    *last = arrow::compute::concat_batches(&self.schema, [&*last, &b])?;
                }
                _ => blocks.push(b),
            }
        }
        let rows = blocks.iter().map(|b| b.num_rows()).sum();
        Ok(Table {
            name: self.name.clone(),
            id: self.id,
            ranges: empty_ranges(&self.schema),
            schema: self.schema.clone(),
            blocks: blocks.into(),
            rows,
            placement: self.placement,
            placed: self.placed.clone(),
            keys: self.keys.clone(),
            key_index,
        })
    }
}

/// `schema` with string views (`Utf8View`) replaced by plain strings (`Utf8`).
///
/// Generated and loaded data is stored as `Utf8`: joins and sorts gather rows
/// with `take`, which for views clones the list of every data buffer per call,
/// while for plain strings it copies just the bytes of the taken rows.
pub fn plain_strings(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<arrow::datatypes::Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            arrow::datatypes::DataType::Utf8View => f
                .as_ref()
                .clone()
                .with_data_type(arrow::datatypes::DataType::Utf8),
            _ => f.as_ref().clone(),
        })
        .collect();
    std::sync::Arc::new(arrow::datatypes::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ))
}

/// Lazily computed (min, max) per column.
type ColumnRanges = Arc<[OnceLock<Option<(f64, f64)>>]>;

fn empty_ranges(schema: &SchemaRef) -> ColumnRanges {
    schema.fields().iter().map(|_| OnceLock::new()).collect()
}

/// Re-labels a batch with `schema`, casting columns whose type differs,
/// and hands back the spare capacity of the buffers only it owns
/// ([`shrink`]).
fn conform(table: &str, schema: &SchemaRef, batch: RecordBatch) -> Result<RecordBatch> {
    let batch = shrink(batch)?;
    if batch.num_columns() != schema.fields().len() {
        return Err(StorageError::InvalidArgument(format!(
            "a block has {} columns, the table has {}",
            batch.num_columns(),
            schema.fields().len()
        )));
    }
    // A block of exactly the table's schema passed Arrow's NOT NULL check
    // when it was made; lengths are Stride's own.
    let limited = schema
        .fields()
        .iter()
        .any(|f| constraints::max_chars(f).is_some());
    if batch.schema() == *schema && !limited {
        return Ok(batch);
    }
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let column = if column.data_type() == field.data_type() {
            column.clone()
        } else {
            arrow::compute::cast(column, field.data_type())?
        };
        if !field.is_nullable() && column.null_count() > 0 {
            return Err(StorageError::NotNullViolation {
                column: field.name().clone(),
                table: table.to_string(),
            });
        }
        constraints::check_length(field, column.as_ref())?;
        columns.push(column);
    }
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// The batch with the spare capacity of buffers that only it holds given
/// back: a table keeps its blocks for as long as it lives, and a computed
/// column's buffers may be much larger than its values (string
/// concatenation's output keeps about twice its bytes). Buffers shared
/// with another array (a slice of a stored table) are left as they are.
fn shrink(batch: RecordBatch) -> Result<RecordBatch> {
    let (schema, mut columns, rows) = batch.into_parts();
    for column in &mut columns {
        // `ArrayRef`'s shrink_to_fit touches only an array it holds alone,
        // and within it only buffers no other array shares.
        <arrow::array::ArrayRef as arrow::array::Array>::shrink_to_fit(column);
    }
    Ok(RecordBatch::try_new_with_options(
        schema,
        columns,
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows)),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{Field, Schema};

    fn rows(schema: &SchemaRef, from: i64, n: i64) -> RecordBatch {
        RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from_iter_values(from..from + n))],
        )
        .unwrap()
    }

    #[test]
    fn a_block_gives_back_the_spare_capacity_only_it_owns() {
        use arrow::array::{Array, StringArray, StringBuilder};
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, false)]));
        // 1 000 values of 10 bytes in a buffer built for 10× that.
        let mut builder = StringBuilder::with_capacity(1_000, 100_000);
        for i in 0..1_000 {
            builder.append_value(format!("{i:010}"));
        }
        let owned = builder.finish();
        let values_capacity = |a: &StringArray| a.to_data().buffers()[1].capacity();
        assert!(values_capacity(&owned) >= 100_000);
        let shared = StringArray::from_iter_values((0..1_000).map(|i| format!("{i:010}")));
        let slice = shared.slice(0, 500);
        let table = Table::new(
            "t",
            schema.clone(),
            vec![
                RecordBatch::try_new(schema.clone(), vec![Arc::new(owned)]).unwrap(),
                RecordBatch::try_new(schema.clone(), vec![Arc::new(slice)]).unwrap(),
            ],
        )
        .unwrap();
        let column = |b: usize| table.blocks()[b].column(0).as_string::<i32>().clone();
        assert!(
            values_capacity(&column(0)) < 100_000,
            "{}",
            values_capacity(&column(0))
        );
        assert_eq!(column(0).value(999), "0000000999");
        // The slice shares its buffers with `shared`: left whole.
        assert_eq!(column(1).len(), 500);
        assert_eq!(column(1).value(499), "0000000499");
        assert_eq!(values_capacity(&column(1)), values_capacity(&shared));
        assert_eq!(table.num_rows(), 1_500);
    }

    #[test]
    fn row_at_a_time_appends_keep_few_blocks_and_every_row_in_order() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let mut table = Table::new("t", schema.clone(), vec![rows(&schema, 0, 10)]).unwrap();
        let id = table.id();
        for i in 10..10_000 {
            table = table.append(vec![rows(&schema, i, 1)]).unwrap();
        }
        // A large append stays a block of its own.
        table = table.append(vec![rows(&schema, 10_000, 5_000)]).unwrap();
        assert_eq!(table.id(), id, "appends keep the incarnation");
        assert_eq!(table.num_rows(), 15_000);
        assert_eq!(
            table.blocks().len(),
            10_000usize.div_ceil(COALESCE_ROWS) + 1
        );
        let all: Vec<i64> = table
            .blocks()
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_primitive::<arrow::datatypes::Int64Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(all, (0..15_000).collect::<Vec<_>>());
    }
}

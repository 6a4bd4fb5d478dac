//! TPC-H data through `tpchgen-arrow` (the same data as `tpchgen-cli`).
//!
//! Large tables are generated in parts on several threads; the parts are
//! concatenated in part order, so the result does not depend on the thread count.

use arrow::array::RecordBatch;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow,
    SupplierArrow,
};

use crate::error::{Result, StorageError};
use crate::table::Table;
use crate::DEFAULT_BLOCK_ROWS;

/// The eight TPC-H tables in dependency order.
pub const TABLES: [&str; 8] = [
    "region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem",
];

/// Generates all eight tables at `scale` using up to `threads` threads.
pub fn generate(scale: f64, threads: usize) -> Result<Vec<Table>> {
    if !(scale > 0.0 && scale.is_finite()) || scale > 1000.0 {
        return Err(StorageError::InvalidArgument(format!(
            "TPC-H scale factor must be in (0, 1000], got {scale}"
        )));
    }
    TABLES
        .iter()
        .map(|name| generate_table(name, scale, threads))
        .collect()
}

/// Generates one TPC-H table.
pub fn generate_table(name: &str, scale: f64, threads: usize) -> Result<Table> {
    // Parts: enough that each is a few hundred thousand rows at most; nation and
    // region ignore part numbers and must be generated as one part.
    let parts: i32 = match name {
        "nation" | "region" => 1,
        _ => ((scale * 8.0).ceil() as i32).clamp(1, 4096),
    };
    let threads = threads.max(1).min(parts as usize);
    let mut results: Vec<Option<Vec<RecordBatch>>> = vec![None; parts as usize];
    let next = std::sync::atomic::AtomicI32::new(1);
    let schema = std::thread::scope(|scope| -> Result<_> {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<Vec<(i32, Vec<RecordBatch>)>> {
                    let mut out = Vec::new();
                    loop {
                        let part = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if part > parts {
                            return Ok(out);
                        }
                        out.push((part, generate_part(name, scale, part, parts)?));
                    }
                })
            })
            .collect();
        for h in handles {
            let produced = h
                .join()
                .map_err(|_| StorageError::Internal("TPC-H generator thread panicked".into()))??;
            for (part, batches) in produced {
                results[(part - 1) as usize] = Some(batches);
            }
        }
        Ok(schema_of(name))
    })?;
    let batches: Vec<RecordBatch> = results.into_iter().flatten().flatten().collect();
    let schema = crate::table::plain_strings(&schema?);
    Table::new(name, schema, batches)
}

fn schema_of(name: &str) -> Result<arrow::datatypes::SchemaRef> {
    Ok(match name {
        "region" => RegionArrow::schema_ref(),
        "nation" => NationArrow::schema_ref(),
        "supplier" => SupplierArrow::schema_ref(),
        "customer" => CustomerArrow::schema_ref(),
        "part" => PartArrow::schema_ref(),
        "partsupp" => PartSuppArrow::schema_ref(),
        "orders" => OrderArrow::schema_ref(),
        "lineitem" => LineItemArrow::schema_ref(),
        other => {
            return Err(StorageError::InvalidArgument(format!(
                "unknown TPC-H table \"{other}\""
            )))
        }
    })
}

fn generate_part(name: &str, sf: f64, part: i32, parts: i32) -> Result<Vec<RecordBatch>> {
    let b = DEFAULT_BLOCK_ROWS;
    Ok(match name {
        "region" => RegionArrow::new(RegionGenerator::new(sf, part, parts))
            .with_batch_size(b)
            .collect::<std::result::Result<_, _>>()?,
        "nation" => NationArrow::new(NationGenerator::new(sf, part, parts))
            .with_batch_size(b)
            .collect::<std::result::Result<_, _>>()?,
        "supplier" => SupplierArrow::new(SupplierGenerator::new(sf, part, parts))
            .with_batch_size(b)
            .collect::<std::result::Result<_, _>>()?,
        "customer" => CustomerArrow::new(CustomerGenerator::new(sf, part, parts))
            .with_batch_size(b)
            .collect::<std::result::Result<_, _>>()?,
        "part" => PartArrow::new(PartGenerator::new(sf, part, parts))
            .with_batch_size(b)
            .collect::<std::result::Result<_, _>>()?,
        "partsupp" => PartSuppArrow::new(PartSuppGenerator::new(sf, part, parts))
            .with_batch_size(b)
            .collect::<std::result::Result<_, _>>()?,
        "orders" => OrderArrow::new(OrderGenerator::new(sf, part, parts))
            .with_batch_size(b)
            .collect::<std::result::Result<_, _>>()?,
        "lineitem" => LineItemArrow::new(LineItemGenerator::new(sf, part, parts))
            .with_batch_size(b)
            .collect::<std::result::Result<_, _>>()?,
        other => {
            return Err(StorageError::InvalidArgument(format!(
                "unknown TPC-H table \"{other}\""
            )))
        }
    })
}

//! The commit of a transaction's catalog operations: validated against
//! what committed since the transaction read its tables (first committer
//! wins), applied all at once, and — with a data directory — logged under
//! the catalog's writer lock, fsynced by group commit and published only
//! once durable; an automatic checkpoint when the log has grown past its
//! size. An operation that carries many rows (a table created or replaced,
//! an append: CREATE TABLE AS, COPY FROM, INSERT … SELECT, an external
//! table's rows) is a *bulk write*: its rows go to a file of their own,
//! durable before the small record that names it is logged
//! (`stride_storage::durable`). (The SQL front end's `txn` module says
//! what a transaction is.)

use std::collections::BTreeMap;
use std::sync::Arc;

use stride_storage::catalog::CatalogOp;
use stride_storage::durable::{BulkWrite, DataDir};
use stride_storage::{wal, StorageError, Table};

use crate::error::Result;
use crate::Engine;

/// What one table's writes in a transaction started from.
#[derive(Debug, Clone)]
pub struct Touched {
    /// The table's snapshot in the view before the transaction's first
    /// write to it.
    pub base: Option<Arc<Table>>,
    /// Created, replaced or dropped (not only appended to).
    pub rewritten: bool,
}

impl Engine {
    /// Applies a transaction's operations atomically; with a data
    /// directory, durably. `touched` holds, per table the transaction
    /// wrote, the snapshot it started from: a table it created, replaced or
    /// dropped must still be exactly that snapshot (or still absent), a
    /// table it only appended to the same incarnation, else the commit
    /// fails with a serialization failure.
    pub fn commit(
        &self,
        ops: &[CatalogOp],
        touched: &BTreeMap<(String, String), Touched>,
    ) -> Result<()> {
        let catalog = self.catalog();
        let dir = self.data_dir();
        // Encoding (the rows' IPC bytes, or a bulk write's file) happens
        // before the catalog's lock; which operations are logged is checked
        // again under it.
        let mut logged = Vec::with_capacity(ops.len());
        let mut encoded = Vec::new();
        let mut bulk = Vec::new();
        if let Some(d) = dir {
            for op in ops {
                let log = catalog.read_state(|state| state.is_logged(op));
                if log {
                    match encode(d, op, &mut bulk) {
                        Ok(bytes) => encoded.push(bytes),
                        Err(e) => {
                            d.discard_bulk(&bulk);
                            return Err(e.into());
                        }
                    }
                }
                logged.push(log);
            }
        }
        let conflict = |what: String| StorageError::SerializationFailure(what);
        let committed = catalog.commit_durable(|state| {
            for ((schema, table), t) in touched {
                let now = state.table(schema, table);
                let same = match (now, &t.base) {
                    (None, None) => true,
                    (Some(a), Some(b)) if t.rewritten => Arc::ptr_eq(a, b),
                    (Some(a), Some(b)) => a.id() == b.id(),
                    _ => false,
                };
                if !same {
                    return Err(conflict(format!(
                        "table \"{schema}.{table}\" was changed by another transaction"
                    )));
                }
            }
            for (i, op) in ops.iter().enumerate() {
                if dir.is_some() && state.is_logged(op) != logged[i] {
                    return Err(conflict(format!(
                        "schema \"{}\" was dropped or created by another transaction",
                        op.schema().unwrap_or_default()
                    )));
                }
                state.apply(op).map_err(|e| match e {
                    // A key value a concurrent transaction committed first
                    // is a unique violation, as PostgreSQL reports it to
                    // the second inserter.
                    StorageError::UniqueViolation { .. } => e,
                    e => conflict(format!("another transaction committed first ({e})")),
                })?;
            }
            match dir {
                Some(d) if !encoded.is_empty() => d.append_with_bulk(&encoded, &bulk).map(Some),
                _ => Ok(None),
            }
        });
        let lsn = match committed {
            Ok(lsn) => lsn,
            Err(e) => {
                // No record names the bulk files: they are garbage.
                if let Some(d) = dir {
                    d.discard_bulk(&bulk);
                }
                return Err(e.into());
            }
        };
        if let (Some(d), Some(lsn)) = (dir, lsn) {
            d.wait_durable(lsn)?;
            catalog.publish(lsn);
            if d.wants_checkpoint() {
                // The commit is durable whatever happens to the checkpoint;
                // a failed one is reported and tried again at a later commit.
                if let Err(e) = d.try_checkpoint(catalog) {
                    eprintln!("stride: automatic checkpoint failed: {e}");
                }
            }
        }
        Ok(())
    }
}

/// One logged operation's bytes: inline, or — when it carries at least the
/// directory's `bulk_write_bytes` of rows — a record naming the bulk file
/// its rows were written to (pushed to `bulk`).
fn encode(
    dir: &DataDir,
    op: &CatalogOp,
    bulk: &mut Vec<BulkWrite>,
) -> std::result::Result<Vec<u8>, StorageError> {
    if let Some((schema, blocks)) = wal::op_rows(op) {
        let bytes: usize = blocks.iter().map(|b| b.get_array_memory_size()).sum();
        if bytes as u64 >= dir.bulk_write_bytes() {
            let table = match op {
                CatalogOp::PutTable { table, .. } => Some(table),
                _ => None,
            };
            let written = dir.write_bulk(&schema, blocks, table)?;
            let bytes = wal::encode_op_in_file(op, &written.file);
            bulk.push(written);
            return bytes;
        }
    }
    wal::encode_op(op)
}

//! The catalog: schemas of named table snapshots.
//!
//! Names are stored lower-case (SQL identifiers are case-insensitive unless
//! quoted; the SQL layer normalises them before calling in). A reader takes
//! `Arc<Table>` snapshots; writers replace whole snapshots under the write lock.
//!
//! Transactions (in `stride-sql`) work on a private [`Catalog::snapshot`] and
//! describe their effect as a list of [`CatalogOp`]s; [`Catalog::commit`]
//! applies such a list to the shared catalog atomically (on a copy of the
//! state, swapped in only when every step succeeded), and recovery replays
//! the same operations from the write-ahead log.
//!
//! Schemas made by [`Catalog::create_transient_schema`] (generated benchmark
//! data) are marked transient: nothing in them is logged or checkpointed.
//!
//! ```text
//!   commit ──► head (validated against, built on) ──log fsync──► visible (read)
//! ```
//!
//! A durable commit ([`Catalog::commit_durable`]) builds the next *head*
//! under the writer mutex — later commits validate against it — and stays
//! *pending* until its log record is on disk; [`Catalog::publish`] then makes
//! the heads of every commit up to that LSN *visible*, in commit order.
//! Readers see only the visible state: never a commit that a crash could
//! still lose.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use arrow::array::RecordBatch;

use crate::error::{ObjectKind, Result, StorageError};
use crate::table::Table;

/// Schema every catalog starts with.
pub const DEFAULT_SCHEMA: &str = "public";

/// One change of the catalog: what a transaction did, what the log records.
#[derive(Debug, Clone)]
pub enum CatalogOp {
    CreateSchema(String),
    /// Drops an empty schema (`CASCADE` is a `DropTable` per table first).
    DropSchema(String),
    /// Creates table `table.name()` in `schema`, or replaces it.
    PutTable {
        schema: String,
        table: Arc<Table>,
    },
    /// Appends rows to an existing table.
    Append {
        schema: String,
        table: String,
        blocks: Vec<RecordBatch>,
    },
    DropTable {
        schema: String,
        table: String,
    },
    /// Replaces the security catalog — roles, table owners, grants — as its
    /// owner (the SQL layer's `roles`) encoded it. Storage keeps, logs and
    /// checkpoints the bytes without reading them.
    PutSecurity(Arc<Vec<u8>>),
}

impl CatalogOp {
    /// The schema the operation changes (`None`: the security catalog).
    pub fn schema(&self) -> Option<&str> {
        match self {
            CatalogOp::CreateSchema(s) | CatalogOp::DropSchema(s) => Some(s),
            CatalogOp::PutTable { schema, .. }
            | CatalogOp::Append { schema, .. }
            | CatalogOp::DropTable { schema, .. } => Some(schema),
            CatalogOp::PutSecurity(_) => None,
        }
    }
}

/// The catalog's contents: schemas of tables, and which schemas are
/// transient (not persisted).
#[derive(Debug, Clone)]
pub struct CatalogState {
    schemas: BTreeMap<String, BTreeMap<String, Arc<Table>>>,
    transient: BTreeSet<String>,
    /// The security catalog's bytes ([`CatalogOp::PutSecurity`]), if any
    /// were ever committed.
    security: Option<Arc<Vec<u8>>>,
}

impl Default for CatalogState {
    fn default() -> Self {
        let mut schemas = BTreeMap::new();
        schemas.insert(DEFAULT_SCHEMA.to_string(), BTreeMap::new());
        CatalogState {
            schemas,
            transient: BTreeSet::new(),
            security: None,
        }
    }
}

impl CatalogState {
    /// The current snapshot of `schema.name`, if there is one.
    pub fn table(&self, schema: &str, name: &str) -> Option<&Arc<Table>> {
        self.schemas.get(schema)?.get(name)
    }

    pub fn schema_exists(&self, name: &str) -> bool {
        self.schemas.contains_key(name)
    }

    /// Whether `schema` holds generated data that is never persisted.
    pub fn is_transient(&self, schema: &str) -> bool {
        self.transient.contains(schema)
    }

    /// The security catalog's bytes, as last committed.
    pub fn security(&self) -> Option<&Arc<Vec<u8>>> {
        self.security.as_ref()
    }

    /// Whether `op` is logged: everything but changes of transient schemas.
    pub fn is_logged(&self, op: &CatalogOp) -> bool {
        op.schema().is_none_or(|s| !self.is_transient(s))
    }

    /// Every schema with its tables.
    pub fn schemas(&self) -> impl Iterator<Item = (&String, &BTreeMap<String, Arc<Table>>)> {
        self.schemas.iter()
    }

    /// Applies one operation; on error nothing changed.
    pub fn apply(&mut self, op: &CatalogOp) -> Result<()> {
        match op {
            CatalogOp::CreateSchema(name) => {
                if self.schemas.contains_key(name) {
                    return Err(StorageError::AlreadyExists {
                        kind: ObjectKind::Schema,
                        name: name.clone(),
                    });
                }
                self.schemas.insert(name.clone(), BTreeMap::new());
            }
            CatalogOp::DropSchema(name) => match self.schemas.get(name) {
                None => return Err(StorageError::SchemaNotFound(name.clone())),
                Some(tables) if !tables.is_empty() => {
                    return Err(StorageError::SchemaNotEmpty(name.clone()))
                }
                Some(_) => {
                    self.schemas.remove(name);
                    self.transient.remove(name);
                }
            },
            CatalogOp::PutTable { schema, table } => {
                self.tables_mut(schema)?
                    .insert(table.name().to_string(), table.clone());
            }
            CatalogOp::Append {
                schema,
                table,
                blocks,
            } => {
                let tables = self.tables_mut(schema)?;
                let current = tables
                    .get(table)
                    .ok_or_else(|| StorageError::TableNotFound(format!("{schema}.{table}")))?;
                let next = Arc::new(current.append(blocks.clone())?);
                tables.insert(table.clone(), next);
            }
            CatalogOp::DropTable { schema, table } => {
                if self.tables_mut(schema)?.remove(table).is_none() {
                    return Err(StorageError::TableNotFound(format!("{schema}.{table}")));
                }
            }
            CatalogOp::PutSecurity(bytes) => self.security = Some(bytes.clone()),
        }
        Ok(())
    }

    fn tables_mut(&mut self, schema: &str) -> Result<&mut BTreeMap<String, Arc<Table>>> {
        self.schemas
            .get_mut(schema)
            .ok_or_else(|| StorageError::SchemaNotFound(schema.to_string()))
    }
}

#[derive(Debug, Default)]
pub struct Catalog {
    /// What readers see: every commit whose log record is durable.
    state: RwLock<CatalogState>,
    /// Commits serialize here.
    writer: Mutex<Writer>,
}

/// The commits not yet visible.
#[derive(Debug, Default)]
struct Writer {
    /// The state after the last commit; `None`: the visible one.
    head: Option<CatalogState>,
    /// (LSN, state after that commit), in commit order.
    pending: VecDeque<(u64, CatalogState)>,
}

impl Catalog {
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, CatalogState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, CatalogState> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_writer(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An independent copy of the catalog as readers see it now (a
    /// transaction's private view: later changes of either do not reach the
    /// other).
    pub fn snapshot(&self) -> Catalog {
        Catalog {
            state: RwLock::new(self.read().clone()),
            writer: Mutex::default(),
        }
    }

    /// Runs `f` on the visible state under the read lock.
    pub fn read_state<R>(&self, f: impl FnOnce(&CatalogState) -> R) -> R {
        f(&self.read())
    }

    /// Runs `f` on the head — the state after every commit, durable or
    /// pending — with commits held off while it runs (a checkpoint's
    /// consistent cut).
    pub fn read_head<R>(&self, f: impl FnOnce(&CatalogState) -> R) -> R {
        let writer = self.lock_writer();
        match &writer.head {
            Some(head) => f(head),
            None => f(&self.read()),
        }
    }

    /// Runs `f` on a copy of the head and installs the copy only when `f`
    /// succeeds: all of `f`'s changes or none. Visible at once, or with the
    /// last pending durable commit if there is one.
    pub fn commit<R>(&self, f: impl FnOnce(&mut CatalogState) -> Result<R>) -> Result<R> {
        let mut r = None;
        self.commit_durable(|state| {
            r = Some(f(state)?);
            Ok(None)
        })?;
        r.ok_or_else(|| StorageError::Internal("a commit without a result".into()))
    }

    /// Like [`Catalog::commit`], for a commit whose log record `f` appends:
    /// `f` returns its LSN, and the new state stays invisible to readers
    /// until [`Catalog::publish`] is called with an LSN at least as large.
    /// `f` returning `None` (nothing logged) is visible with the commits
    /// before it. Returns the LSN whose publication makes the commit
    /// visible (`None`: visible already).
    pub fn commit_durable(
        &self,
        f: impl FnOnce(&mut CatalogState) -> Result<Option<u64>>,
    ) -> Result<Option<u64>> {
        let mut writer = self.lock_writer();
        let mut next = match &writer.head {
            Some(head) => head.clone(),
            None => self.read().clone(),
        };
        let lsn = f(&mut next)?;
        match lsn.or(writer.pending.back().map(|p| p.0)) {
            None => {
                *self.write() = next;
                writer.head = None;
                Ok(None)
            }
            Some(lsn) => {
                writer.pending.push_back((lsn, next.clone()));
                writer.head = Some(next);
                Ok(Some(lsn))
            }
        }
    }

    /// Makes every pending commit with an LSN ≤ `durable` visible.
    pub fn publish(&self, durable: u64) {
        let mut writer = self.lock_writer();
        let mut last = None;
        while writer.pending.front().is_some_and(|p| p.0 <= durable) {
            last = writer.pending.pop_front().map(|p| p.1);
        }
        if let Some(state) = last {
            *self.write() = state;
        }
        if writer.pending.is_empty() {
            writer.head = None;
        }
    }

    /// Applies one operation.
    pub fn apply(&self, op: &CatalogOp) -> Result<()> {
        self.commit(|state| state.apply(op))
    }

    pub fn create_schema(&self, name: &str, if_not_exists: bool) -> Result<()> {
        self.commit(|state| {
            if if_not_exists && state.schemas.contains_key(name) {
                return Ok(());
            }
            state.apply(&CatalogOp::CreateSchema(name.to_string()))
        })
    }

    /// Creates (if missing) a schema of generated data, which is never
    /// logged or checkpointed. An existing schema that is not transient is
    /// refused: its tables are persisted.
    pub fn create_transient_schema(&self, name: &str) -> Result<()> {
        self.commit(|state| state.create_transient_schema(name))
    }

    pub fn drop_schema(&self, name: &str, if_exists: bool, cascade: bool) -> Result<()> {
        self.commit(|state| state.drop_schema(name, if_exists, cascade))
    }
}

impl CatalogState {
    fn create_transient_schema(&mut self, name: &str) -> Result<()> {
        let state = self;
        if state.schemas.contains_key(name) {
            if state.transient.contains(name) {
                return Ok(());
            }
            return Err(StorageError::InvalidArgument(format!(
                "schema \"{name}\" holds persisted tables: generated data cannot go into it"
            )));
        }
        state.schemas.insert(name.to_string(), BTreeMap::new());
        state.transient.insert(name.to_string());
        Ok(())
    }

    fn drop_schema(&mut self, name: &str, if_exists: bool, cascade: bool) -> Result<()> {
        let state = self;
        match state.schemas.get(name) {
            None if if_exists => Ok(()),
            None => Err(StorageError::SchemaNotFound(name.to_string())),
            Some(tables) if !tables.is_empty() && !cascade => {
                Err(StorageError::SchemaNotEmpty(name.to_string()))
            }
            Some(_) => {
                state.schemas.remove(name);
                state.transient.remove(name);
                Ok(())
            }
        }
    }
}

impl Catalog {
    pub fn schema_exists(&self, name: &str) -> bool {
        self.read().schemas.contains_key(name)
    }

    /// Whether `schema` holds generated data that is never persisted.
    pub fn is_transient(&self, schema: &str) -> bool {
        self.read().transient.contains(schema)
    }

    /// The security catalog's bytes, as readers see them.
    pub fn security(&self) -> Option<Arc<Vec<u8>>> {
        self.read().security.clone()
    }

    pub fn schema_names(&self) -> Vec<String> {
        self.read().schemas.keys().cloned().collect()
    }

    pub fn table_names(&self, schema: &str) -> Result<Vec<String>> {
        self.read()
            .schemas
            .get(schema)
            .map(|t| t.keys().cloned().collect())
            .ok_or_else(|| StorageError::SchemaNotFound(schema.to_string()))
    }

    pub fn table(&self, schema: &str, name: &str) -> Result<Arc<Table>> {
        let state = self.read();
        let tables = state
            .schemas
            .get(schema)
            .ok_or_else(|| StorageError::SchemaNotFound(schema.to_string()))?;
        tables
            .get(name)
            .cloned()
            .ok_or_else(|| StorageError::TableNotFound(format!("{schema}.{name}")))
    }

    /// Adds a table. With `replace`, an existing table of that name is swapped out.
    pub fn put_table(&self, schema: &str, table: Table, replace: bool) -> Result<()> {
        let table = Arc::new(table);
        self.commit(|state| {
            let tables = state.tables_mut(schema)?;
            if !replace && tables.contains_key(table.name()) {
                return Err(StorageError::AlreadyExists {
                    kind: ObjectKind::Table,
                    name: format!("{schema}.{}", table.name()),
                });
            }
            tables.insert(table.name().to_string(), table.clone());
            Ok(())
        })
    }

    /// Atomically replaces table `name` with `f(current)`, so that two
    /// concurrent writers never lose each other's rows.
    pub fn update_table(
        &self,
        schema: &str,
        name: &str,
        f: impl FnOnce(&Table) -> Result<Table>,
    ) -> Result<Arc<Table>> {
        self.commit(|state| {
            let tables = state.tables_mut(schema)?;
            let current = tables
                .get(name)
                .ok_or_else(|| StorageError::TableNotFound(format!("{schema}.{name}")))?;
            let next = Arc::new(f(current)?);
            tables.insert(name.to_string(), next.clone());
            Ok(next)
        })
    }

    pub fn drop_table(&self, schema: &str, name: &str, if_exists: bool) -> Result<()> {
        self.commit(|state| {
            let removed = state.schemas.get_mut(schema).and_then(|t| t.remove(name));
            match removed {
                Some(_) => Ok(()),
                None if if_exists => Ok(()),
                None => Err(StorageError::TableNotFound(format!("{schema}.{name}"))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_durable_commit_is_visible_only_once_published() {
        let catalog = Catalog::new();
        let create = |name: &str| CatalogOp::CreateSchema(name.to_string());
        catalog
            .commit_durable(|s| s.apply(&create("a")).map(|()| Some(10)))
            .unwrap();
        // Later commits build on it; readers do not see it yet.
        catalog
            .commit_durable(|s| s.apply(&create("b")).map(|()| Some(20)))
            .unwrap();
        assert!(catalog.commit(|s| s.apply(&create("a"))).is_err());
        assert!(!catalog.schema_exists("a"));
        assert!(catalog.read_head(|s| s.schema_exists("a") && s.schema_exists("b")));
        // An unlogged commit becomes visible with the last pending one.
        catalog.create_schema("c", false).unwrap();
        assert!(!catalog.schema_exists("c"));
        catalog.publish(15);
        assert!(catalog.schema_exists("a") && !catalog.schema_exists("b"));
        catalog.publish(20);
        assert!(catalog.schema_exists("b") && catalog.schema_exists("c"));
        // Nothing pending: a commit is visible at once.
        catalog.create_schema("d", false).unwrap();
        assert!(catalog.schema_exists("d"));
    }
}

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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

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
}

impl CatalogOp {
    /// The schema the operation changes.
    pub fn schema(&self) -> &str {
        match self {
            CatalogOp::CreateSchema(s) | CatalogOp::DropSchema(s) => s,
            CatalogOp::PutTable { schema, .. }
            | CatalogOp::Append { schema, .. }
            | CatalogOp::DropTable { schema, .. } => schema,
        }
    }
}

/// The catalog's contents: schemas of tables, and which schemas are
/// transient (not persisted).
#[derive(Debug, Clone)]
pub struct CatalogState {
    schemas: BTreeMap<String, BTreeMap<String, Arc<Table>>>,
    transient: BTreeSet<String>,
}

impl Default for CatalogState {
    fn default() -> Self {
        let mut schemas = BTreeMap::new();
        schemas.insert(DEFAULT_SCHEMA.to_string(), BTreeMap::new());
        CatalogState {
            schemas,
            transient: BTreeSet::new(),
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
    state: RwLock<CatalogState>,
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

    /// An independent copy of the catalog as it is now (a transaction's
    /// private view: later changes of either do not reach the other).
    pub fn snapshot(&self) -> Catalog {
        Catalog {
            state: RwLock::new(self.read().clone()),
        }
    }

    /// Runs `f` on the state under the read lock: no commit happens while
    /// it runs.
    pub fn read_state<R>(&self, f: impl FnOnce(&CatalogState) -> R) -> R {
        f(&self.read())
    }

    /// Runs `f` on a copy of the state under the write lock and installs the
    /// copy only when `f` succeeds: all of `f`'s changes or none.
    pub fn commit<R>(&self, f: impl FnOnce(&mut CatalogState) -> Result<R>) -> Result<R> {
        let mut state = self.write();
        let mut next = state.clone();
        let r = f(&mut next)?;
        *state = next;
        Ok(r)
    }

    /// Applies one operation.
    pub fn apply(&self, op: &CatalogOp) -> Result<()> {
        self.write().apply(op)
    }

    pub fn create_schema(&self, name: &str, if_not_exists: bool) -> Result<()> {
        let mut state = self.write();
        if if_not_exists && state.schemas.contains_key(name) {
            return Ok(());
        }
        state.apply(&CatalogOp::CreateSchema(name.to_string()))
    }

    /// Creates (if missing) a schema of generated data, which is never
    /// logged or checkpointed. An existing schema that is not transient is
    /// refused: its tables are persisted.
    pub fn create_transient_schema(&self, name: &str) -> Result<()> {
        let mut state = self.write();
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

    pub fn drop_schema(&self, name: &str, if_exists: bool, cascade: bool) -> Result<()> {
        let mut state = self.write();
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

    pub fn schema_exists(&self, name: &str) -> bool {
        self.read().schemas.contains_key(name)
    }

    /// Whether `schema` holds generated data that is never persisted.
    pub fn is_transient(&self, schema: &str) -> bool {
        self.read().transient.contains(schema)
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
        let mut state = self.write();
        let tables = state.tables_mut(schema)?;
        if !replace && tables.contains_key(table.name()) {
            return Err(StorageError::AlreadyExists {
                kind: ObjectKind::Table,
                name: format!("{schema}.{}", table.name()),
            });
        }
        tables.insert(table.name().to_string(), Arc::new(table));
        Ok(())
    }

    /// Atomically replaces table `name` with `f(current)`, so that two
    /// concurrent writers never lose each other's rows.
    pub fn update_table(
        &self,
        schema: &str,
        name: &str,
        f: impl FnOnce(&Table) -> Result<Table>,
    ) -> Result<Arc<Table>> {
        let mut state = self.write();
        let tables = state.tables_mut(schema)?;
        let current = tables
            .get(name)
            .ok_or_else(|| StorageError::TableNotFound(format!("{schema}.{name}")))?;
        let next = Arc::new(f(current)?);
        tables.insert(name.to_string(), next.clone());
        Ok(next)
    }

    pub fn drop_table(&self, schema: &str, name: &str, if_exists: bool) -> Result<()> {
        let mut state = self.write();
        let removed = state.schemas.get_mut(schema).and_then(|t| t.remove(name));
        match removed {
            Some(_) => Ok(()),
            None if if_exists => Ok(()),
            None => Err(StorageError::TableNotFound(format!("{schema}.{name}"))),
        }
    }
}

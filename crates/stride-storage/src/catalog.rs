//! The catalog: schemas of named table snapshots.
//!
//! Names are stored lower-case (SQL identifiers are case-insensitive unless
//! quoted; the SQL layer normalises them before calling in). A reader takes
//! `Arc<Table>` snapshots; writers replace whole snapshots under the write lock.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::error::{ObjectKind, Result, StorageError};
use crate::table::Table;

/// Schema every catalog starts with.
pub const DEFAULT_SCHEMA: &str = "public";

#[derive(Debug)]
pub struct Catalog {
    schemas: RwLock<BTreeMap<String, BTreeMap<String, Arc<Table>>>>,
}

impl Default for Catalog {
    fn default() -> Self {
        let mut schemas = BTreeMap::new();
        schemas.insert(DEFAULT_SCHEMA.to_string(), BTreeMap::new());
        Catalog {
            schemas: RwLock::new(schemas),
        }
    }
}

impl Catalog {
    pub fn new() -> Self {
        Self::default()
    }

    fn read(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, BTreeMap<String, Arc<Table>>>> {
        self.schemas.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, BTreeMap<String, Arc<Table>>>> {
        self.schemas.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn create_schema(&self, name: &str, if_not_exists: bool) -> Result<()> {
        let mut schemas = self.write();
        if schemas.contains_key(name) {
            if if_not_exists {
                return Ok(());
            }
            return Err(StorageError::AlreadyExists {
                kind: ObjectKind::Schema,
                name: name.to_string(),
            });
        }
        schemas.insert(name.to_string(), BTreeMap::new());
        Ok(())
    }

    pub fn drop_schema(&self, name: &str, if_exists: bool, cascade: bool) -> Result<()> {
        let mut schemas = self.write();
        match schemas.get(name) {
            None if if_exists => Ok(()),
            None => Err(StorageError::SchemaNotFound(name.to_string())),
            Some(tables) if !tables.is_empty() && !cascade => {
                Err(StorageError::SchemaNotEmpty(name.to_string()))
            }
            Some(_) => {
                schemas.remove(name);
                Ok(())
            }
        }
    }

    pub fn schema_exists(&self, name: &str) -> bool {
        self.read().contains_key(name)
    }

    pub fn schema_names(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    pub fn table_names(&self, schema: &str) -> Result<Vec<String>> {
        self.read()
            .get(schema)
            .map(|t| t.keys().cloned().collect())
            .ok_or_else(|| StorageError::SchemaNotFound(schema.to_string()))
    }

    pub fn table(&self, schema: &str, name: &str) -> Result<Arc<Table>> {
        let schemas = self.read();
        let tables = schemas
            .get(schema)
            .ok_or_else(|| StorageError::SchemaNotFound(schema.to_string()))?;
        tables
            .get(name)
            .cloned()
            .ok_or_else(|| StorageError::TableNotFound(format!("{schema}.{name}")))
    }

    /// Adds a table. With `replace`, an existing table of that name is swapped out.
    pub fn put_table(&self, schema: &str, table: Table, replace: bool) -> Result<()> {
        let mut schemas = self.write();
        let tables = schemas
            .get_mut(schema)
            .ok_or_else(|| StorageError::SchemaNotFound(schema.to_string()))?;
        if !replace && tables.contains_key(table.name()) {
            return Err(StorageError::AlreadyExists {
                kind: ObjectKind::Table,
                name: format!("{schema}.{}", table.name()),
            });
        }
        tables.insert(table.name().to_string(), Arc::new(table));
        Ok(())
    }

    /// Atomically replaces table `name` with `f(current)`. Used by INSERT, so
    /// that two concurrent inserts never lose each other's rows.
    pub fn update_table(
        &self,
        schema: &str,
        name: &str,
        f: impl FnOnce(&Table) -> Result<Table>,
    ) -> Result<Arc<Table>> {
        let mut schemas = self.write();
        let tables = schemas
            .get_mut(schema)
            .ok_or_else(|| StorageError::SchemaNotFound(schema.to_string()))?;
        let current = tables
            .get(name)
            .ok_or_else(|| StorageError::TableNotFound(format!("{schema}.{name}")))?;
        let next = Arc::new(f(current)?);
        tables.insert(name.to_string(), next.clone());
        Ok(next)
    }

    pub fn drop_table(&self, schema: &str, name: &str, if_exists: bool) -> Result<()> {
        let mut schemas = self.write();
        let removed = schemas.get_mut(schema).and_then(|t| t.remove(name));
        match removed {
            Some(_) => Ok(()),
            None if if_exists => Ok(()),
            None => Err(StorageError::TableNotFound(format!("{schema}.{name}"))),
        }
    }
}

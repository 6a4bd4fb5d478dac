//! Statements that change the catalog: `CREATE` / `DROP SCHEMA`,
//! `CREATE` / `DROP TABLE` (`AS SELECT` included), `CREATE EXTERNAL TABLE`,
//! and `INSERT` (`UPDATE` and `DELETE` are in `dml.rs`).

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion_common::SchemaReference;
use datafusion_expr::logical_plan::{DdlStatement, DmlStatement, WriteOp};
use datafusion_expr::LogicalPlan;
use stride_storage::catalog::{CatalogOp, DEFAULT_SCHEMA};
use stride_storage::Table;

use super::{command, Session, StatementOutput};
use crate::error::{PlanKind, Result, SqlError};

impl Session {
    /// Runs a DDL statement inside the session's transaction
    /// ([`Session::writing`]): reads its view, records its operations.
    pub(super) fn ddl(&mut self, ddl: DdlStatement) -> Result<StatementOutput> {
        let catalog = self.catalog_view().clone();
        match ddl {
            DdlStatement::CreateCatalogSchema(c) => {
                let name = c.schema_name.rsplit('.').next().unwrap_or(&c.schema_name);
                if catalog.schema_exists(name) {
                    if c.if_not_exists {
                        return Ok(command("CREATE SCHEMA"));
                    }
                    return Err(stride_storage::StorageError::AlreadyExists {
                        kind: stride_storage::ObjectKind::Schema,
                        name: name.to_string(),
                    }
                    .into());
                }
                self.write_op(CatalogOp::CreateSchema(name.to_string()))?;
                Ok(command("CREATE SCHEMA"))
            }
            DdlStatement::DropCatalogSchema(d) => {
                let name = match &d.name {
                    SchemaReference::Bare { schema } => schema.to_string(),
                    SchemaReference::Full { schema, .. } => schema.to_string(),
                };
                let tables = match catalog.table_names(&name) {
                    Ok(t) => t,
                    Err(_) if d.if_exists => return Ok(command("DROP SCHEMA")),
                    Err(e) => return Err(e.into()),
                };
                if !tables.is_empty() && !d.cascade {
                    return Err(stride_storage::StorageError::SchemaNotEmpty(name).into());
                }
                for table in tables {
                    self.write_op(CatalogOp::DropTable {
                        schema: name.clone(),
                        table,
                    })?;
                }
                self.write_op(CatalogOp::DropSchema(name.clone()))?;
                self.schema_dropped(&name);
                if self.default_schema == name {
                    self.default_schema = DEFAULT_SCHEMA.to_string();
                }
                Ok(command("DROP SCHEMA"))
            }
            DdlStatement::DropTable(d) => {
                let (schema, table) = self.table_name(&d.name);
                match catalog.table(&schema, &table) {
                    Ok(_) => {
                        self.write_op(CatalogOp::DropTable {
                            schema: schema.clone(),
                            table: table.clone(),
                        })?;
                        self.table_dropped(&schema, &table);
                    }
                    Err(_) if d.if_exists => {}
                    Err(e) => return Err(e.into()),
                }
                Ok(command("DROP TABLE"))
            }
            DdlStatement::CreateMemoryTable(c) => {
                let (schema, table) = self.table_name(&c.name);
                let existed = catalog.table(&schema, &table).is_ok();
                if existed {
                    if c.if_not_exists {
                        return Ok(command("CREATE TABLE"));
                    }
                    if !c.or_replace {
                        return Err(stride_storage::StorageError::AlreadyExists {
                            kind: stride_storage::ObjectKind::Table,
                            name: format!("{schema}.{table}"),
                        }
                        .into());
                    }
                }
                let arrow_schema: SchemaRef = Arc::new(c.input.schema().as_arrow().clone());
                let is_plain_create =
                    matches!(c.input.as_ref(), LogicalPlan::EmptyRelation(e) if !e.produce_one_row);
                // Rows of a query: its source tables' keys and defaults are
                // not the new table's.
                let arrow_schema = if is_plain_create {
                    arrow_schema
                } else {
                    Arc::new(stride_storage::constraints::derived(&arrow_schema))
                };
                let (batches, tag) = if is_plain_create {
                    (Vec::new(), "CREATE TABLE".to_string())
                } else {
                    let plan = self.optimize(c.input.as_ref().clone())?;
                    let out = self.run_query(&plan)?;
                    let n = out.num_rows();
                    (out.batches, format!("SELECT {n}"))
                };
                let t = Table::new(table.clone(), arrow_schema, batches)?;
                self.put_table(&schema, t, existed)?;
                Ok(command(&tag))
            }
            DdlStatement::CreateExternalTable(c) => {
                let (schema, table) = self.table_name(&c.name);
                let location = c.locations.first().cloned().ok_or_else(|| {
                    SqlError::plan(PlanKind::Other, "CREATE EXTERNAL TABLE needs a LOCATION")
                })?;
                let path = self.engine.runtime().file_access().resolve(&location)?;
                let path = path.as_path();
                let (file_schema, batches) = match c.file_type.to_uppercase().as_str() {
                    "PARQUET" => stride_storage::files::read_parquet(path)?,
                    "CSV" => {
                        let has_header = c
                            .options
                            .get("format.has_header")
                            .map(|v| v == "true")
                            .unwrap_or(true);
                        let delimiter = c
                            .options
                            .get("format.delimiter")
                            .and_then(|d| d.bytes().next())
                            .unwrap_or(b',');
                        let declared = c.schema.as_arrow();
                        let opts = stride_storage::files::CsvOptions {
                            has_header,
                            delimiter,
                            schema: (!declared.fields().is_empty())
                                .then(|| Arc::new(declared.clone())),
                        };
                        stride_storage::files::read_csv(path, &opts)?
                    }
                    other => {
                        return Err(SqlError::Unsupported(format!(
                            "external tables stored as {other} (PARQUET and CSV are supported)"
                        )))
                    }
                };
                let existed = catalog.table(&schema, &table).is_ok();
                if existed && c.if_not_exists {
                    return Ok(command("CREATE TABLE"));
                }
                if existed && !c.or_replace {
                    return Err(stride_storage::StorageError::AlreadyExists {
                        kind: stride_storage::ObjectKind::Table,
                        name: format!("{schema}.{table}"),
                    }
                    .into());
                }
                // Each block is charged to the statement's share before the
                // next is read: a file larger than the share fails with
                // 53200 instead of taking the server's memory. The charge
                // ends with the load (the table's storage is the catalog's).
                let memory = stride_exec::QueryMemory::new(
                    self.engine.runtime().memory().clone(),
                    self.query_memory_limit(),
                );
                let mut loaded = Vec::new();
                for batch in batches {
                    let batch = batch?;
                    memory
                        .grow(stride_exec::memory::batch_bytes(&batch), "file load")
                        .map_err(SqlError::from)?;
                    loaded.push(batch);
                    self.interrupt.check()?;
                }
                let t = Table::new(table.clone(), file_schema, loaded)?;
                self.put_table(&schema, t, existed)?;
                Ok(command("CREATE TABLE"))
            }
            other => Err(SqlError::Unsupported(other.name().to_string())),
        }
    }

    pub(super) fn dml(&mut self, dml: DmlStatement) -> Result<StatementOutput> {
        match dml.op {
            WriteOp::Insert(_) => {
                let (schema, table) = self.table_name(&dml.table_name);
                let plan = self.optimize(dml.input.as_ref().clone())?;
                let out = self.run_query(&plan)?;
                let n = out.num_rows();
                // The target must exist in the view even for no rows.
                self.catalog_view().table(&schema, &table)?;
                self.write_op(CatalogOp::Append {
                    schema,
                    table,
                    blocks: out.batches,
                })?;
                Ok(command(&format!("INSERT 0 {n}")))
            }
            WriteOp::Delete => self.delete(dml),
            WriteOp::Update => self.update(dml),
            other => Err(SqlError::Unsupported(format!("{other}"))),
        }
    }
}

impl Session {
    /// Creates or (`replacing`) replaces a table in the transaction's view.
    pub(super) fn put_table(&mut self, schema: &str, table: Table, replacing: bool) -> Result<()> {
        let name = table.name().to_string();
        self.write_op(CatalogOp::PutTable {
            schema: schema.to_string(),
            table: Arc::new(table),
        })?;
        if !replacing {
            self.table_created(schema, &name);
        }
        Ok(())
    }
}

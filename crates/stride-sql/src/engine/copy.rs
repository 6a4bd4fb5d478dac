//! `COPY`, the session's part: resolving the table and its columns,
//! privileges (`INSERT` for `FROM`, `SELECT` through the query for `TO`,
//! superuser for server files), running the query of `COPY … TO`, and
//! appending the rows of `COPY … FROM` through the same transactional path
//! as `INSERT`. Moving and converting the data is the caller's (the
//! wire-protocol server's copy sub-protocol).
//!
//! The query of `COPY … TO STDOUT` streams: where the request has a
//! receiver (the server), its rows go to it while the query runs, after
//! [`ResultReceiver::copy_columns`] (not `columns`: they become copy data,
//! not a result) — so a copy of a table larger than the query's memory
//! share goes out whole, at the client's pace. Without one (embedded use)
//! they are collected.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::datatypes::{FieldRef, SchemaRef};
use datafusion_common::TableReference;
use stride_storage::catalog::CatalogOp;

use super::{command, QueryOutput, ResultReceiver, Session, StatementOutput};
use crate::copy::{CopyEndpoint, CopyOptions, CopyRelation};
use crate::error::{PlanKind, Result, SqlError, UndefinedKind};
use crate::roles::TablePrivilege;

/// A `COPY … FROM` waiting for its rows.
#[derive(Debug, Clone)]
pub struct CopyIn {
    /// The statement's text (for the query log).
    pub sql: String,
    pub schema: String,
    pub table: String,
    /// The table's columns when the statement began.
    pub table_schema: SchemaRef,
    /// The columns the rows fill, in the rows' order (indices into
    /// `table_schema`); the others get NULL.
    pub columns: Vec<usize>,
    pub options: CopyOptions,
    /// A server file to read the rows from (else the client sends them).
    pub file: Option<PathBuf>,
}

impl CopyIn {
    /// The fields of the columns the rows fill, in their order.
    pub fn fields(&self) -> Vec<FieldRef> {
        self.columns
            .iter()
            .map(|&i| self.table_schema.fields()[i].clone())
            .collect()
    }
}

/// The rows of a `COPY … TO STDOUT`, to be sent in `options`' format:
/// collected in `output`, or streamed to the request's receiver already
/// (`output.streamed`; see the module docs).
#[derive(Debug)]
pub struct CopyOut {
    pub output: QueryOutput,
    pub options: CopyOptions,
}

/// The request's receiver, told that the result it gets is a copy's.
struct CopyReceiver {
    inner: Arc<dyn ResultReceiver>,
    options: CopyOptions,
}

impl ResultReceiver for CopyReceiver {
    fn columns(&self, schema: &SchemaRef) -> Result<()> {
        self.inner.copy_columns(schema, &self.options)
    }

    fn copy_columns(&self, schema: &SchemaRef, options: &CopyOptions) -> Result<()> {
        self.inner.copy_columns(schema, options)
    }

    fn batch(&self, batch: stride_exec::StreamedBatch) -> Result<()> {
        self.inner.batch(batch)
    }
}

/// An identifier as PostgreSQL folds it: unquoted to lower case.
fn folded(ident: &datafusion_sql::sqlparser::ast::Ident) -> String {
    match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    }
}

/// `name` as a double-quoted SQL identifier.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl Session {
    /// Runs the `COPY` statement of a request (see [`crate::copy::is_copy`]):
    /// `FROM` returns [`StatementOutput::CopyIn`] for the caller to feed
    /// ([`Session::copy_rows`]), `TO` runs its query and returns
    /// [`StatementOutput::CopyOut`].
    pub(super) fn copy(&mut self, sql: &str) -> Result<StatementOutput> {
        let stmt = crate::copy::parse(sql)?;
        self.check_not_aborted()?;
        self.interrupt.check()?;
        if let CopyEndpoint::File(_) = &stmt.endpoint {
            self.engine.roles.require_superuser(self.role, || {
                "permission denied to COPY to or from a file: only superusers may \
                 (use COPY … FROM STDIN / TO STDOUT, or psql's \\copy)"
                    .into()
            })?;
        }
        if stmt.to {
            if let CopyEndpoint::File(_) = stmt.endpoint {
                return Err(SqlError::Unsupported(
                    "COPY … TO a server file (use COPY … TO STDOUT)".into(),
                ));
            }
            let query = match &stmt.relation {
                CopyRelation::Query(q) => q.clone(),
                CopyRelation::Table { name, columns } => {
                    let (schema, table) = self.copy_table(name)?;
                    let list = if columns.is_empty() {
                        "*".to_string()
                    } else {
                        columns
                            .iter()
                            .map(|c| quoted(&folded(c)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    format!("SELECT {list} FROM {}.{}", quoted(&schema), quoted(&table))
                }
            };
            let output = self.copy_query(&query, sql, &stmt.options)?;
            return Ok(StatementOutput::CopyOut(Box::new(CopyOut {
                output,
                options: stmt.options,
            })));
        }
        let CopyRelation::Table { name, columns } = &stmt.relation else {
            return Err(SqlError::Internal("COPY (query) FROM parsed".into()));
        };
        let (schema, table) = self.copy_table(name)?;
        let table_schema = self.catalog_view().table(&schema, &table)?.schema().clone();
        self.engine
            .roles
            .check_table(self.role, &schema, &table, TablePrivilege::Insert)?;
        let columns = if columns.is_empty() {
            (0..table_schema.fields().len()).collect()
        } else {
            let mut picked: Vec<usize> = Vec::with_capacity(columns.len());
            for c in columns {
                let name = folded(c);
                let i = table_schema.index_of(&name).map_err(|_| {
                    SqlError::undefined(
                        UndefinedKind::Column,
                        format!("column \"{name}\" of relation \"{table}\" does not exist"),
                    )
                })?;
                if picked.contains(&i) {
                    return Err(SqlError::plan(
                        PlanKind::DuplicateColumn,
                        format!("column \"{name}\" specified more than once"),
                    ));
                }
                picked.push(i);
            }
            picked
        };
        let file = match &stmt.endpoint {
            CopyEndpoint::File(location) => {
                Some(self.engine.runtime().file_access().resolve(location)?)
            }
            CopyEndpoint::Client => None,
        };
        Ok(StatementOutput::CopyIn(Box::new(CopyIn {
            sql: sql.trim().trim_end_matches(';').trim_end().to_string(),
            schema,
            table,
            table_schema,
            columns,
            options: stmt.options,
            file,
        })))
    }

    /// The schema and name of the table a `COPY` names.
    fn copy_table(
        &self,
        name: &datafusion_sql::sqlparser::ast::ObjectName,
    ) -> Result<(String, String)> {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|p| {
                p.as_ident()
                    .map(folded)
                    .ok_or_else(|| SqlError::Syntax(format!("invalid table name {name}")))
            })
            .collect::<Result<_>>()?;
        let reference = match parts.as_slice() {
            [t] => TableReference::bare(t.as_str()),
            [s, t] => TableReference::partial(s.as_str(), t.as_str()),
            [c, s, t] => TableReference::full(c.as_str(), s.as_str(), t.as_str()),
            _ => return Err(SqlError::Syntax(format!("invalid table name {name}"))),
        };
        let (schema, table) = self.table_name(&reference);
        self.catalog_view().table(&schema, &table)?;
        Ok((schema, table))
    }

    /// Runs the query of a `COPY … TO` as a statement of its own (bound,
    /// authorized, logged under the `COPY` text), its rows streamed to the
    /// request's receiver as copy data where there is one.
    fn copy_query(&mut self, query: &str, sql: &str, options: &CopyOptions) -> Result<QueryOutput> {
        let mut statements = crate::limits::parse(query)?;
        let (Some(stmt), true) = (statements.pop_front(), statements.is_empty()) else {
            return Err(SqlError::Syntax("COPY needs exactly one query".into()));
        };
        let mut prepared = self.prepare_statement(stmt)?;
        prepared.sql = sql.trim().trim_end_matches(';').trim_end().to_string();
        let copy = self.receiver.clone().map(|inner| {
            Arc::new(CopyReceiver {
                inner,
                options: options.clone(),
            }) as Arc<dyn ResultReceiver>
        });
        let request = std::mem::replace(&mut self.receiver, copy);
        // Run to its end, also in a request that opens its query live.
        let output = self.not_opening(|s| s.run_prepared(&prepared, Vec::new()));
        self.receiver = request;
        let output = output?;
        match output {
            StatementOutput::Query(q) => Ok(q),
            _ => Err(SqlError::Unsupported(
                "COPY (statement) TO of a statement that is not a query".into(),
            )),
        }
    }

    /// Appends the rows of a `COPY … FROM` (`batches`: the copied columns,
    /// in the statement's order) as `INSERT` would: in the open transaction
    /// block, or as a transaction of its own; all of them or none. Returns
    /// the `COPY n` command.
    pub fn copy_rows(
        &mut self,
        copy: &CopyIn,
        batches: Vec<RecordBatch>,
    ) -> Result<StatementOutput> {
        self.begin_request();
        let result = self.append_copied(copy, batches);
        if result.is_err() {
            self.statement_failed();
        }
        result
    }

    fn append_copied(
        &mut self,
        copy: &CopyIn,
        batches: Vec<RecordBatch>,
    ) -> Result<StatementOutput> {
        self.check_not_aborted()?;
        self.engine.roles.check_table(
            self.role,
            &copy.schema,
            &copy.table,
            TablePrivilege::Insert,
        )?;
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let mut blocks = Vec::with_capacity(batches.len());
        for batch in batches {
            let n = batch.num_rows();
            let mut columns: Vec<ArrayRef> = copy
                .table_schema
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), n))
                .collect();
            for (k, &i) in copy.columns.iter().enumerate() {
                columns[i] = batch.column(k).clone();
            }
            blocks.push(RecordBatch::try_new_with_options(
                stride_exec::nullable_schema(&copy.table_schema),
                columns,
                &RecordBatchOptions::new().with_row_count(Some(n)),
            )?);
        }
        let sql = copy.sql.clone();
        self.logged(&sql, |s| {
            s.writing("COPY", |s| {
                let now = s.catalog_view().table(&copy.schema, &copy.table)?;
                if now.schema().fields() != copy.table_schema.fields() {
                    return Err(SqlError::PlanInvalidated(format!(
                        "table \"{}\" changed while COPY was reading its rows",
                        copy.table
                    )));
                }
                s.write_op(CatalogOp::Append {
                    schema: copy.schema.clone(),
                    table: copy.table.clone(),
                    blocks,
                })?;
                Ok(command(&format!("COPY {rows}")))
            })
        })
    }
}

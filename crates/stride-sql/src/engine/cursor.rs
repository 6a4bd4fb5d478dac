//! Cursors: `DECLARE name [NO SCROLL] CURSOR [WITH[OUT] HOLD] FOR query`,
//! `FETCH [FORWARD] [n | ALL | NEXT] [FROM | IN] name`, `CLOSE name | ALL`
//! (psycopg's server-side "named" cursors, JDBC's fetch size in a
//! transaction).
//!
//! `DECLARE` runs the query on the scheduler at once (it reads the table
//! snapshots of that moment, as a PostgreSQL cursor reads its snapshot) and
//! keeps the result; `FETCH` hands it out in order. A cursor without `WITH
//! HOLD` exists only inside a transaction block and closes at its end; one
//! `WITH HOLD` lives until `CLOSE`, `DISCARD ALL` or the end of the session.
//! Only forward fetching: `SCROLL` cursors are refused.

use std::collections::HashMap;
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion_sql::sqlparser::ast::{
    CloseCursor, Declare, DeclareType, FetchDirection, Ident, Statement as SqlStatement,
};
use stride_exec::QueryStats;

use super::{command, QueryOutput, Session, StatementOutput};
use crate::error::{PlanKind, Result, SqlError};

/// An open cursor: its rows and how many were fetched.
#[derive(Debug)]
pub(super) struct Cursor {
    schema: SchemaRef,
    rows: RecordBatch,
    position: usize,
    hold: bool,
}

/// The session's open cursors by name.
pub(super) type Cursors = HashMap<String, Cursor>;

/// A cursor statement, parsed.
#[derive(Debug, Clone)]
pub(super) enum CursorStatement {
    /// `DECLARE`: the name, `WITH HOLD`, the query's statement.
    Declare { name: String, hold: bool },
    /// `FETCH`: at most this many rows (`None`: all that remain).
    Fetch { name: String, count: Option<usize> },
    /// `CLOSE name` (`None`: `CLOSE ALL`).
    Close(Option<String>),
}

fn ident_name(i: &Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

fn count_of(v: &datafusion_sql::sqlparser::ast::ValueWithSpan) -> Result<usize> {
    match &v.value {
        datafusion_sql::sqlparser::ast::Value::Number(n, _) => n
            .parse::<usize>()
            .map_err(|_| SqlError::Syntax(format!("invalid FETCH count {n}"))),
        other => Err(SqlError::Syntax(format!("invalid FETCH count {other}"))),
    }
}

/// The cursor statement `stmt` is, with the query a `DECLARE` runs.
pub(super) fn parse(
    stmt: &SqlStatement,
) -> Option<Result<(CursorStatement, Option<SqlStatement>)>> {
    match stmt {
        SqlStatement::Declare { stmts } => {
            let [Declare {
                names,
                declare_type: Some(DeclareType::Cursor),
                binary,
                scroll,
                hold,
                for_query: Some(query),
                ..
            }] = stmts.as_slice()
            else {
                return Some(Err(SqlError::Unsupported(
                    "DECLARE other than one CURSOR ... FOR query".into(),
                )));
            };
            if *scroll == Some(true) {
                return Some(Err(SqlError::Unsupported(
                    "SCROLL cursors (cursors fetch forward only)".into(),
                )));
            }
            if *binary == Some(true) {
                return Some(Err(SqlError::Unsupported("BINARY cursors".into())));
            }
            let [name] = names.as_slice() else {
                return Some(Err(SqlError::Syntax("DECLARE names one cursor".into())));
            };
            Some(Ok((
                CursorStatement::Declare {
                    name: ident_name(name),
                    hold: *hold == Some(true),
                },
                Some(SqlStatement::Query(query.clone())),
            )))
        }
        SqlStatement::Fetch {
            name, direction, ..
        } => {
            let count = match direction {
                FetchDirection::Next => Ok(Some(1)),
                FetchDirection::All | FetchDirection::ForwardAll => Ok(None),
                FetchDirection::Count { limit } => count_of(limit).map(Some),
                FetchDirection::Forward { limit } => match limit {
                    Some(l) => count_of(l).map(Some),
                    None => Ok(Some(1)),
                },
                other => Err(SqlError::Unsupported(format!(
                    "FETCH {other} (cursors fetch forward only)"
                ))),
            };
            Some(count.map(|count| {
                (
                    CursorStatement::Fetch {
                        name: ident_name(name),
                        count,
                    },
                    None,
                )
            }))
        }
        SqlStatement::Close { cursor } => Some(Ok((
            CursorStatement::Close(match cursor {
                CloseCursor::All => None,
                CloseCursor::Specific { name } => Some(ident_name(name)),
            }),
            None,
        ))),
        _ => None,
    }
}

fn undefined(name: &str) -> SqlError {
    SqlError::UndefinedCursor(format!("cursor \"{name}\" does not exist"))
}

impl Session {
    /// The columns `FETCH` from cursor `name` returns (also its portal's
    /// description for the extended protocol's Describe).
    pub fn cursor_schema(&self, name: &str) -> Option<SchemaRef> {
        self.cursors.get(name).map(|c| c.schema.clone())
    }

    /// Opens cursor `name` over a query's result.
    pub(super) fn declare_cursor(
        &mut self,
        name: &str,
        hold: bool,
        output: QueryOutput,
    ) -> Result<StatementOutput> {
        self.check_declare(hold)?;
        if self.cursors.contains_key(name) {
            return Err(SqlError::DuplicateCursor(format!(
                "cursor \"{name}\" already exists"
            )));
        }
        let rows = arrow::compute::concat_batches(&output.schema, &output.batches)?;
        self.cursors.insert(
            name.to_string(),
            Cursor {
                schema: output.schema,
                rows,
                position: 0,
                hold,
            },
        );
        Ok(command("DECLARE CURSOR"))
    }

    /// Whether a `DECLARE` of a cursor without `WITH HOLD` may run now.
    pub(super) fn check_declare(&self, hold: bool) -> Result<()> {
        if !hold && !self.transaction.open {
            return Err(SqlError::plan(
                PlanKind::NoActiveTransaction,
                "DECLARE CURSOR can only be used in transaction blocks",
            ));
        }
        Ok(())
    }

    /// `FETCH`: the next `count` rows (all that remain for `None`).
    pub(super) fn fetch(&mut self, name: &str, count: Option<usize>) -> Result<StatementOutput> {
        let cursor = self.cursors.get_mut(name).ok_or_else(|| undefined(name))?;
        let left = cursor.rows.num_rows() - cursor.position;
        let n = count.map_or(left, |c| c.min(left));
        let batch = cursor.rows.slice(cursor.position, n);
        cursor.position += n;
        Ok(StatementOutput::Query(QueryOutput {
            schema: cursor.schema.clone(),
            batches: vec![batch],
            streamed: None,
            stats: QueryStats::default(),
            planning: Duration::ZERO,
            execution: Duration::ZERO,
        }))
    }

    /// `CLOSE name` / `CLOSE ALL`.
    pub(super) fn close_cursor(&mut self, name: Option<&str>) -> Result<StatementOutput> {
        match name {
            Some(name) => {
                self.cursors.remove(name).ok_or_else(|| undefined(name))?;
            }
            None => self.cursors.clear(),
        }
        Ok(command("CLOSE CURSOR"))
    }

    /// The end of a transaction block closes the cursors it declared
    /// without `WITH HOLD`.
    pub(super) fn end_transaction_cursors(&mut self) {
        self.cursors.retain(|_, c| c.hold);
    }
}

//! Cursors: `DECLARE name [NO SCROLL] CURSOR [WITH[OUT] HOLD] FOR query`,
//! `FETCH [FORWARD] [n | ALL | NEXT] [FROM | IN] name`, `CLOSE name | ALL`
//! (psycopg's server-side "named" cursors, JDBC's fetch size in a
//! transaction).
//!
//! `DECLARE` opens the query live (`engine::live`): it is submitted at
//! once, reads the table snapshots of that moment (as a PostgreSQL cursor
//! reads its snapshot) whenever its rows are fetched, and streams its
//! result into a bounded queue; `FETCH n` hands out the next `n` rows
//! (streamed to the client as they come, when the request has a
//! receiver). A client that stops fetching makes the query *pause*: it
//! holds no worker and no more memory than its queue. Closing a cursor
//! before its last row cancels its query and returns its memory and spill
//! files. A cursor without `WITH HOLD` exists only inside a transaction
//! block and closes at its end; one `WITH HOLD` lives until `CLOSE`,
//! `DISCARD ALL` or the end of the session. Only forward fetching:
//! `SCROLL` cursors are refused.
//!
//! **Held cursors and scheduler slots.** PostgreSQL materializes a `WITH
//! HOLD` cursor's rest at `COMMIT`; Stride keeps it live, like every
//! cursor, under one rule that keeps idle cursors from starving other
//! queries: *a paused query never holds a scheduler slot that another
//! query waits for.* When a query has to wait for admission (all slots
//! taken), every paused query is resumed, and a query that would pause
//! while one waits runs on instead, its rows parked on disk in the
//! query's spill directory (`stride_exec::stream`, `stride_sched::pause`):
//! it finishes and its slot goes to the waiting query, and the cursor's
//! later fetches read the parked rows. So an idle cursor costs its slot
//! only while slots are free — more open cursors than slots delay a new
//! query by at most the time the displaced cursors' queries take to
//! finish. What such a query parks counts against its share's
//! backlog limit and `temp_file_limit` (past either, the query fails
//! with 53200 / 53400 and the cursor's next fetch reports it).

use std::collections::HashMap;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use datafusion_expr::LogicalPlan;
use datafusion_sql::sqlparser::ast::{
    CloseCursor, Declare, DeclareType, FetchDirection, Ident, Statement as SqlStatement,
};
use stride_exec::QueryStats;

use super::live::LiveQuery;
use super::{command, QueryOutput, Session, StatementOutput};
use crate::column_names::ColumnNames;
use crate::error::{PlanKind, Result, SqlError};

/// An open cursor: its query, running or paused until fetched from.
#[derive(Debug)]
pub(super) struct Cursor {
    live: LiveQuery,
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
        self.cursors.get(name).map(|c| c.live.schema().clone())
    }

    /// Opens cursor `name` over the query `plan` (bound, authorized) of
    /// the statement `sql`, its columns named `names`.
    pub(super) fn declare_cursor(
        &mut self,
        name: &str,
        hold: bool,
        plan: LogicalPlan,
        sql: &str,
        names: Option<&ColumnNames>,
    ) -> Result<StatementOutput> {
        self.check_declare(hold)?;
        if self.cursors.contains_key(name) {
            return Err(SqlError::DuplicateCursor(format!(
                "cursor \"{name}\" already exists"
            )));
        }
        let (output, opened) = self.opening(|s| s.dispatch(plan, sql, true, names));
        output?;
        let Some(live) = opened else {
            return Err(SqlError::plan(
                PlanKind::Other,
                "DECLARE CURSOR needs a query",
            ));
        };
        self.cursors.insert(name.to_string(), Cursor { live, hold });
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

    /// `FETCH`: the next `count` rows (all that remain for `None`),
    /// streamed to the request's receiver where it has one (and does not
    /// open its query live: a portal executed with a row limit sends what
    /// it returns), collected otherwise. A fetch that fails closes the
    /// cursor (its query is stopped).
    pub(super) fn fetch(&mut self, name: &str, count: Option<usize>) -> Result<StatementOutput> {
        let mut cursor = self.cursors.remove(name).ok_or_else(|| undefined(name))?;
        let schema = cursor.live.schema().clone();
        let receiver = self.receiver.clone().filter(|_| !self.opening_wanted());
        let mut batches = Vec::new();
        let fetched = match &receiver {
            Some(r) => r
                .columns(&schema)
                .and_then(|()| self.fetch_rows(&mut cursor.live, count, &mut |b| r.batch(b))),
            None => self.fetch_rows(&mut cursor.live, count, &mut |b| {
                batches.push(b.batch);
                Ok(())
            }),
        }?;
        self.cursors.insert(name.to_string(), cursor);
        Ok(StatementOutput::Query(QueryOutput {
            schema,
            batches,
            streamed: receiver.map(|_| fetched.rows),
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

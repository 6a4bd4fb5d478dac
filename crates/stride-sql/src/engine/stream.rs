//! Requests whose results stream: a statement's query hands its rows to the
//! caller's [`ResultReceiver`] while it runs (`stride_exec::stream`), instead
//! of returning them all at its end. The server's connection is the
//! receiver: it sends rows to the client as they come, so a result need not
//! fit the query's memory share and its first rows leave before its last
//! are computed.
//!
//! Only a statement's own query streams — not its scalar subqueries, not
//! the query of `DECLARE CURSOR`, `COPY … TO` or a DML statement, whose rows
//! the session itself keeps or consumes. The receiver is the session's for
//! one request; every other statement's output is returned as before.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion_common::ScalarValue;
use stride_exec::StreamedBatch;

use super::{Prepared, Session, StatementOutput};
use crate::error::Result;

/// Takes a streamed query's result, on the session's thread.
pub trait ResultReceiver: Send + Sync {
    /// A streamed result begins: its columns, before any of its batches.
    fn columns(&self, schema: &SchemaRef) -> Result<()>;
    /// The next batch of rows (holding its memory charge until dropped).
    /// An error — the client went away — cancels the query, and the
    /// statement fails with it.
    fn batch(&self, batch: StreamedBatch) -> Result<()>;
}

impl Session {
    /// Runs the statements of `sql` as [`Session::execute_statements`] does,
    /// streaming each query's rows to `receiver` (its output then carries
    /// [`super::QueryOutput::streamed`]) and handing each statement's
    /// result to `each` as soon as the statement ended, so that the
    /// caller can answer statement by statement in order.
    pub fn execute_statements_streaming(
        &mut self,
        sql: &str,
        receiver: Arc<dyn ResultReceiver>,
        each: &mut dyn FnMut(Result<StatementOutput>),
    ) {
        self.receiver = Some(receiver);
        self.execute_each(sql, each);
        self.receiver = None;
    }

    /// [`Session::execute_prepared`], a query's rows streamed to `receiver`.
    pub fn execute_prepared_streaming(
        &mut self,
        prepared: &Prepared,
        params: Vec<ScalarValue>,
        receiver: Arc<dyn ResultReceiver>,
    ) -> Result<StatementOutput> {
        self.receiver = Some(receiver);
        let out = self.execute_prepared(prepared, params);
        self.receiver = None;
        out
    }

    /// Runs `f` with the request's receiver put aside: a statement whose
    /// query's rows the session hands on in another form (`COPY … TO`)
    /// collects them.
    pub(super) fn collecting<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let receiver = self.receiver.take();
        let out = f(self);
        self.receiver = receiver;
        out
    }
}

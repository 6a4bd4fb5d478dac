//! Requests whose results stream: a statement's query hands its rows to the
//! caller's [`ResultReceiver`] while it runs (`stride_exec::stream`), instead
//! of returning them all at its end. The server's connection is the
//! receiver: it sends rows to the client as they come, so a result need not
//! fit the query's memory share and its first rows leave before its last
//! are computed.
//!
//! Only a statement's own query streams — not its scalar subqueries, not
//! the query of `DECLARE CURSOR` (opened live for its fetches,
//! `engine::live`) or of a DML statement, whose rows the session itself
//! consumes. The query of a `COPY … TO STDOUT` streams as copy data
//! ([`ResultReceiver::copy_columns`]); a `FETCH` streams the rows it
//! fetches. The receiver is the session's for one request; every other
//! statement's output is returned as before.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion_common::ScalarValue;
use stride_exec::StreamedBatch;

use super::{Prepared, Session, StatementOutput};
use crate::copy::CopyOptions;
use crate::error::Result;

/// Takes a streamed query's result, on the session's thread.
pub trait ResultReceiver: Send + Sync {
    /// A streamed result begins: its columns, before any of its batches.
    fn columns(&self, schema: &SchemaRef) -> Result<()>;
    /// The result of a `COPY … TO STDOUT` begins instead: its batches are
    /// rows to send in `options`' format, its statement's output a
    /// [`StatementOutput::CopyOut`] that says how many were streamed.
    fn copy_columns(&self, schema: &SchemaRef, options: &CopyOptions) -> Result<()>;
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
}

/// Where a statement's query result goes.
pub(super) enum Destination<'a> {
    /// Into the output (scalar subqueries, embedded use).
    Collect,
    /// To the request's receiver while the query runs.
    Stream(&'a dyn ResultReceiver),
    /// Nowhere yet: the query is opened for later fetches (`engine::live`).
    Open,
}

//! Live results: a query whose result is read at its consumer's pace over
//! several requests — a portal executed with a row limit (the server's
//! Execute with `max_rows`, JDBC's fetch size), a cursor (`DECLARE` …
//! `FETCH`, `engine::cursor`) — instead of all at once.
//!
//! ```text
//!  open: the statement's own query is submitted with a streamed result
//!        (stride_exec::LiveResult) and the request returns a LiveQuery
//!  fetch(n): up to n rows handed out; rows of a batch past n kept for
//!        the next fetch; between fetches the query pauses (backpressure)
//!  the last row handed out ─► the query log's entry is done, with stats
//!  dropped before (Close, Sync, transaction end, disconnect, an error)
//!        ─► the query is cancelled, its memory and spill files returned,
//!           its entry `cancelled`
//! ```
//!
//! The query reads the table snapshots of the moment it was opened,
//! whenever its rows are fetched. Its log entry stays `running` from the
//! open to the last row. A cancel or `statement_timeout` reaches the query
//! only while a fetch runs (the fetch publishes its canceller to the
//! session's interrupt), as PostgreSQL cancels only a running statement;
//! a fetch that fails ends the query. A query opened live holds its
//! scheduler slot while it waits for its consumer only as long as no other
//! group waits for one (`stride_exec::stream`, `stride_sched::pause`).

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use datafusion_common::ScalarValue;
use stride_exec::{LiveNext, LiveResult, StreamedBatch};

use super::{Engine, Prepared, ResultReceiver, Session, StatementOutput};
use crate::error::{Result, SqlError};

/// How long one wait for the next batch lasts before the fetch checks its
/// interrupt again.
const PATIENCE: Duration = Duration::from_millis(20);

/// A query opened by a request and read by later ones (see the module
/// docs).
pub struct LiveQuery {
    result: LiveResult,
    engine: Arc<Engine>,
    /// The query log's entry; finished when the result ends or is dropped.
    log_id: Option<u64>,
    history_key: crate::history::PlanKey,
    /// Rows pulled past the last fetch's limit: the next fetch's first.
    pending: Option<StreamedBatch>,
    /// Every row was handed out.
    done: bool,
}

impl std::fmt::Debug for LiveQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveQuery")
            .field("rows", &self.rows())
            .field("done", &self.done)
            .finish()
    }
}

/// What one fetch of a live query did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fetched {
    /// Rows handed out by this fetch.
    pub rows: usize,
    /// Every row of the result has now been handed out.
    pub done: bool,
}

/// What [`Session::open_prepared`] did.
#[derive(Debug)]
// One value per Execute; the query is the common case.
#[allow(clippy::large_enum_variant)]
pub enum Opened {
    /// The statement is a query: its result waits for fetches.
    Live(LiveQuery),
    /// Any other statement ran to its end as
    /// [`Session::execute_prepared_streaming`] runs it.
    Done(StatementOutput),
}

/// Whether the statement's own query is opened live rather than run.
#[derive(Debug, Default)]
pub(super) enum Opening {
    #[default]
    Off,
    Wanted,
    /// Boxed: the other states, which most requests are in, are empty.
    Opened(Box<LiveQuery>),
}

impl LiveQuery {
    pub(super) fn new(
        result: LiveResult,
        engine: Arc<Engine>,
        history_key: crate::history::PlanKey,
    ) -> Self {
        LiveQuery {
            result,
            engine,
            log_id: None,
            history_key,
            pending: None,
            done: false,
        }
    }

    /// The result's columns.
    pub fn schema(&self) -> &SchemaRef {
        self.result.schema()
    }

    /// Rows handed out so far.
    pub fn rows(&self) -> usize {
        self.result.rows() - self.pending.as_ref().map_or(0, |b| b.num_rows())
    }

    /// Whether every row was handed out.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The query's log entry ends: `Ok` with its statistics, or why not.
    fn finish_log(&mut self, outcome: std::result::Result<&stride_exec::QueryStats, &SqlError>) {
        let Some(id) = self.log_id.take() else {
            return;
        };
        let runtime = self.engine.runtime();
        let log = runtime.query_log();
        match outcome {
            Ok(stats) => {
                runtime.record(&self.history_key, stats);
                log.finish(id, Ok(stats));
            }
            Err(e @ (SqlError::Cancelled | SqlError::Timeout)) => {
                log.finish(id, Err(("cancelled", e.to_string())))
            }
            Err(e) => log.finish(id, Err(("failed", e.to_string()))),
        }
    }
}

impl Drop for LiveQuery {
    /// Closed before its last row: the result cancels its query
    /// (`stride_exec::LiveResult`'s drop); the entry says so.
    fn drop(&mut self) {
        if !self.done {
            let closed = SqlError::Cancelled;
            self.finish_log(Err(&closed));
        }
    }
}

impl Session {
    /// As [`Session::execute_prepared_streaming`], except that a query is
    /// not run but opened: its rows wait for [`Session::fetch_live`] (a
    /// portal executed with a row limit). Every other statement runs as
    /// there (a `COPY … TO`'s rows stream to `receiver`).
    pub fn open_prepared(
        &mut self,
        prepared: &Prepared,
        params: Vec<ScalarValue>,
        receiver: Arc<dyn ResultReceiver>,
    ) -> Result<Opened> {
        let (out, opened) =
            self.opening(|s| s.execute_prepared_streaming(prepared, params, receiver));
        let out = out?;
        Ok(match opened {
            Some(live) => Opened::Live(live),
            None => Opened::Done(out),
        })
    }

    /// Hands the next `limit` rows of `live` (all that remain for `None`)
    /// to `receiver` (its columns were described when the query opened).
    /// Runs as a request: a cancel or the statement timeout stops it, and
    /// then the query, with 57014; any error ends the query and fails the
    /// transaction block.
    pub fn fetch_live(
        &mut self,
        live: &mut LiveQuery,
        limit: Option<usize>,
        receiver: &dyn ResultReceiver,
    ) -> Result<Fetched> {
        self.begin_request();
        let out = self
            .check_not_aborted()
            .and_then(|()| self.fetch_rows(live, limit, &mut |b| receiver.batch(b)));
        if out.is_err() {
            self.statement_failed();
        }
        out
    }

    /// Hands up to `limit` rows of `live` to `deliver`, the query's
    /// canceller published meanwhile; an error ends the query.
    pub(super) fn fetch_rows(
        &self,
        live: &mut LiveQuery,
        limit: Option<usize>,
        deliver: &mut dyn FnMut(StreamedBatch) -> Result<()>,
    ) -> Result<Fetched> {
        self.interrupt.publish(Some(live.result.canceller()));
        let out = self.pull_rows(live, limit, deliver);
        self.interrupt.publish(None);
        if let Err(e) = &out {
            live.result.stop();
            live.pending = None;
            live.finish_log(Err(e));
            live.done = true;
        }
        out
    }

    fn pull_rows(
        &self,
        live: &mut LiveQuery,
        limit: Option<usize>,
        deliver: &mut dyn FnMut(StreamedBatch) -> Result<()>,
    ) -> Result<Fetched> {
        let mut budget = limit.unwrap_or(usize::MAX);
        let mut rows = 0;
        while budget > 0 && !live.done {
            self.interrupt.check()?;
            let mut batch = match live.pending.take() {
                Some(b) => b,
                None => match live.result.next(PATIENCE).map_err(|e| self.exec_error(e))? {
                    LiveNext::Batch(b) => b,
                    LiveNext::Idle => continue,
                    LiveNext::Ended(out) => {
                        live.finish_log(Ok(&out.stats));
                        live.done = true;
                        break;
                    }
                },
            };
            if batch.num_rows() > budget {
                let front = batch.take_front(budget);
                live.pending = Some(batch);
                batch = front;
            }
            let n = batch.num_rows();
            deliver(batch)?;
            rows += n;
            budget -= n;
        }
        Ok(Fetched {
            rows,
            done: live.done,
        })
    }

    /// Runs `f` with the statement's own query opened live instead of run
    /// (`Opening::Wanted`); returns what `f` returned and the query it
    /// opened, if any.
    pub(super) fn opening<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> (R, Option<LiveQuery>) {
        let before = self.opening.replace(Opening::Wanted);
        let out = f(self);
        let opened = match self.opening.replace(before) {
            Opening::Opened(live) => Some(*live),
            _ => None,
        };
        (out, opened)
    }

    /// Runs `f` with every query run to its end, also where the request
    /// opens its query live (the query of a `COPY … TO`).
    pub(super) fn not_opening<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let before = self.opening.replace(Opening::Off);
        let out = f(self);
        self.opening.replace(before);
        out
    }

    /// Whether the statement's own query is to be opened live.
    pub(super) fn opening_wanted(&self) -> bool {
        matches!(*self.opening.borrow(), Opening::Wanted)
    }

    /// The statement's query was opened live: kept for the request.
    pub(super) fn opened(&self, live: LiveQuery) {
        self.opening.replace(Opening::Opened(Box::new(live)));
    }

    /// The query log's entry `id` belongs to the query the statement
    /// opened, if it opened one (then it ends with the query's last row,
    /// not with the statement).
    pub(super) fn adopt_log_entry(&self, id: u64) -> bool {
        match &mut *self.opening.borrow_mut() {
            Opening::Opened(live) => {
                live.log_id = Some(id);
                true
            }
            _ => false,
        }
    }
}

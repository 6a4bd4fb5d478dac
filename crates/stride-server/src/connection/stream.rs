//! Results sent while their query runs.
//!
//! ```text
//!  blocking thread (the session)                 connection task
//!    query's rows ─► Streamer ──Event (bounded)──► RowDescription (simple query)
//!    each statement's end ────────────────────────► DataRow… (flushed when the
//!                                                   channel is empty or 256 KiB
//!                                                   are buffered), then the
//!                                                   statement's CommandComplete
//!                                                   or ErrorResponse
//! ```
//!
//! The statement runs on a blocking thread ([`Connection::with_session`]);
//! its query streams each result batch to the session's receiver, a
//! [`Streamer`], which hands it to the connection's task through a small
//! bounded channel and waits (the blocking thread, never a worker) while
//! the channel is full. The task encodes and writes the rows while it keeps
//! watching for a disconnect and the statement timeout. So a result flows
//! at the client's pace: a slow client fills the socket, the channel, and
//! then the query's own queue, whose surplus the executor parks on disk
//! (`stride_exec::stream`); memory stays bounded by the query's share.
//!
//! A `COPY … TO STDOUT` streams the same way: its result begins with
//! [`Event::CopyColumns`] instead of [`Event::Columns`] — a CopyOutResponse
//! instead of a RowDescription — and its batches go out as CopyData, one
//! a row; the statement's end sends CopyDone and `COPY n`.
//!
//! A client that stops reading while its statement is stopped (timeout,
//! CancelRequest) is handled by `stall`: batches that arrive after the
//! stop are dropped.
//!
//! A client that goes away mid-stream ends the task's receiving end: the
//! streamer's next send fails, which cancels the query; the task also
//! cancels it through the session's interrupt. An error after some rows
//! were sent is an ErrorResponse after those DataRows, as in PostgreSQL.
//! Each statement's outcome of a simple query comes through the same
//! channel, so replies keep the statements' order; what follows a
//! `COPY … FROM STDIN` waits until the session is back (the copy needs it).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use stride_exec::StreamedBatch;
use stride_sql::{CopyOptions, ResultReceiver, SqlError, StatementOutput};
use tokio::sync::{mpsc, watch};

use super::{describe_schema, encode_rows, Close, Connection};
use crate::copy_format::RowWriter;
use crate::sqlstate;

/// Events in flight between the statement's thread and the connection.
/// Each batch holds its memory charge until it was encoded.
const CHANNEL_EVENTS: usize = 4;

/// What the statement's thread tells the connection while it runs.
pub(super) enum Event {
    /// A streamed result begins.
    Columns(SchemaRef),
    /// A `COPY … TO STDOUT`'s rows begin.
    CopyColumns(SchemaRef, CopyOptions),
    Batch(StreamedBatch),
    /// A statement of a simple query ended (boxed: a batch, the common
    /// event, is far smaller).
    Statement(Box<Result<StatementOutput, SqlError>>),
}

/// The session's [`ResultReceiver`]: sends events to the connection.
pub(super) struct Streamer {
    tx: mpsc::Sender<Event>,
    /// Set by the connection when it stopped the request while its writes
    /// wait for a client that reads nothing (`Some(timed out)`; `stall`).
    halted: watch::Receiver<Option<bool>>,
}

impl Streamer {
    /// Sends an event, waiting while the channel is full (on the
    /// statement's blocking thread). Fails once the connection stopped
    /// listening: the client is gone.
    pub(super) fn send(&self, event: Event) -> Result<(), SqlError> {
        self.tx
            .blocking_send(event)
            .map_err(|_| SqlError::Cancelled)
    }

    /// As [`Streamer::send`], for the rows of a result: gives up (the
    /// event dropped) with the stop's error once the connection halted
    /// the request, so that the statement ends although its client reads
    /// nothing.
    fn send_rows(&self, event: Event) -> Result<(), SqlError> {
        let mut halted = self.halted.clone();
        let stop = |timed_out: bool| {
            if timed_out {
                SqlError::Timeout
            } else {
                SqlError::Cancelled
            }
        };
        if let Some(timed_out) = *halted.borrow_and_update() {
            return Err(stop(timed_out));
        }
        tokio::runtime::Handle::current().block_on(async {
            tokio::select! {
                sent = self.tx.send(event) => sent.map_err(|_| SqlError::Cancelled),
                why = halted.wait_for(Option::is_some) => {
                    Err(stop(why.map(|w| *w == Some(true)).unwrap_or(false)))
                }
            }
        })
    }
}

impl ResultReceiver for Streamer {
    fn columns(&self, schema: &SchemaRef) -> Result<(), SqlError> {
        self.send_rows(Event::Columns(schema.clone()))
    }

    fn copy_columns(&self, schema: &SchemaRef, options: &CopyOptions) -> Result<(), SqlError> {
        self.send_rows(Event::CopyColumns(schema.clone(), options.clone()))
    }

    fn batch(&self, batch: StreamedBatch) -> Result<(), SqlError> {
        self.send_rows(Event::Batch(batch))
    }
}

/// The connection's end of one request's stream.
pub(super) struct Streaming {
    rx: mpsc::Receiver<Event>,
    /// The portal's result formats (extended protocol, which described the
    /// rows already), or `None`: a simple query, which sends a
    /// RowDescription when a result begins.
    formats: Option<Vec<i16>>,
    /// A row could not be encoded: the error was sent, the rest of this
    /// result is dropped.
    pub(super) failed: bool,
    /// A `COPY … TO STDOUT` is streaming: its rows' writer (the statement's
    /// end finishes the copy with it).
    pub(super) copy: Option<RowWriter>,
    /// Events held back behind a `COPY … FROM STDIN` until the session is
    /// back.
    deferred: Option<Vec<Event>>,
    /// The statement's thread returned the session: a copy can run.
    session_back: bool,
}

impl Streaming {
    /// A stream and the receiver to hand to the session; `halted` is the
    /// connection's stop signal (`stall`).
    pub(super) fn new(
        formats: Option<Vec<i16>>,
        halted: watch::Receiver<Option<bool>>,
    ) -> (Arc<Streamer>, Self) {
        let (tx, rx) = mpsc::channel(CHANNEL_EVENTS);
        let streaming = Streaming {
            rx,
            formats,
            failed: false,
            copy: None,
            deferred: None,
            session_back: false,
        };
        (Arc::new(Streamer { tx, halted }), streaming)
    }

    /// The next event; `None` once every sender is gone.
    pub(super) async fn recv(&mut self) -> Option<Event> {
        self.rx.recv().await
    }
}

impl Connection {
    /// Answers one event (see the module docs).
    pub(super) async fn on_event(
        &mut self,
        streaming: &mut Streaming,
        event: Event,
    ) -> Result<(), Close> {
        if let Some(deferred) = streaming.deferred.as_mut() {
            deferred.push(event);
            return Ok(());
        }
        match event {
            Event::Columns(schema) => {
                streaming.failed = false;
                if streaming.formats.is_none() {
                    self.out.row_description(&describe_schema(&schema, &[]));
                }
            }
            Event::CopyColumns(schema, options) => {
                streaming.failed = false;
                streaming.copy = Some(self.begin_copy_out(&schema, options));
            }
            Event::Batch(batch) => {
                let stopped = self.stop.as_ref().is_some_and(|s| s.stopped);
                if !streaming.failed && !stopped {
                    let sent = match streaming.copy.as_mut() {
                        Some(writer) => self.send_copy_batch(writer, &batch.batch).await?,
                        None => {
                            let formats = streaming.formats.clone().unwrap_or_default();
                            self.send_batch(&batch.batch, &formats).await?
                        }
                    };
                    if let Err(message) = sent {
                        if streaming.copy.take().is_some() {
                            // The client is in copy-out mode: end it first.
                            self.out.copy_done();
                        }
                        self.out.error("ERROR", sqlstate::INTERNAL_ERROR, &message);
                        streaming.failed = true;
                    }
                }
                drop(batch);
                if streaming.rx.is_empty() {
                    // Nothing more is ready: what was encoded goes now, so
                    // that a slow query's first rows reach the client.
                    self.flush().await?;
                }
            }
            Event::Statement(result) => {
                if !streaming.session_back && matches!(*result, Ok(StatementOutput::CopyIn(_))) {
                    streaming.deferred = Some(vec![Event::Statement(result)]);
                } else if std::mem::take(&mut streaming.failed) && result.is_ok() {
                    // Its error was the reply.
                } else {
                    let copying = streaming.copy.take();
                    self.answer(*result, copying).await?;
                }
            }
        }
        Ok(())
    }

    /// After the statement's thread returned: the events still in the
    /// channel, then those held back behind a `COPY … FROM STDIN`.
    pub(super) async fn drain(&mut self, streaming: &mut Streaming) -> Result<(), Close> {
        while let Ok(event) = streaming.rx.try_recv() {
            self.on_event(streaming, event).await?;
        }
        streaming.session_back = true;
        for event in streaming.deferred.take().unwrap_or_default() {
            self.on_event(streaming, event).await?;
        }
        Ok(())
    }

    /// Sends every row of `batch` as DataRows, writing whenever the output
    /// buffer is full; the inner error: a value that cannot be encoded.
    async fn send_batch(
        &mut self,
        batch: &RecordBatch,
        formats: &[i16],
    ) -> Result<Result<(), String>, Close> {
        let mut row = 0;
        while row < batch.num_rows() {
            match encode_rows(&mut self.out, batch, formats, row, usize::MAX) {
                Ok(n) => row += n,
                Err(message) => return Ok(Err(message)),
            }
            self.flush_if_full().await?;
        }
        Ok(Ok(()))
    }
}

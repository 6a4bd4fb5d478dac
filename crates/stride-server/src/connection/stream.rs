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
use stride_sql::{ResultReceiver, SqlError, StatementOutput};
use tokio::sync::mpsc;

use super::{describe_schema, encode_rows, Close, Connection};
use crate::sqlstate;

/// Events in flight between the statement's thread and the connection.
/// Each batch holds its memory charge until it was encoded.
const CHANNEL_EVENTS: usize = 4;

/// What the statement's thread tells the connection while it runs.
pub(super) enum Event {
    /// A streamed result begins.
    Columns(SchemaRef),
    Batch(StreamedBatch),
    /// A statement of a simple query ended (boxed: a batch, the common
    /// event, is far smaller).
    Statement(Box<Result<StatementOutput, SqlError>>),
}

/// The session's [`ResultReceiver`]: sends events to the connection.
pub(super) struct Streamer {
    tx: mpsc::Sender<Event>,
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
}

impl ResultReceiver for Streamer {
    fn columns(&self, schema: &SchemaRef) -> Result<(), SqlError> {
        self.send(Event::Columns(schema.clone()))
    }

    fn batch(&self, batch: StreamedBatch) -> Result<(), SqlError> {
        self.send(Event::Batch(batch))
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
    /// Events held back behind a `COPY … FROM STDIN` until the session is
    /// back.
    deferred: Option<Vec<Event>>,
    /// The statement's thread returned the session: a copy can run.
    session_back: bool,
}

impl Streaming {
    /// A stream and the receiver to hand to the session.
    pub(super) fn new(formats: Option<Vec<i16>>) -> (Arc<Streamer>, Self) {
        let (tx, rx) = mpsc::channel(CHANNEL_EVENTS);
        let streaming = Streaming {
            rx,
            formats,
            failed: false,
            deferred: None,
            session_back: false,
        };
        (Arc::new(Streamer { tx }), streaming)
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
            Event::Batch(batch) => {
                if !streaming.failed {
                    let formats = streaming.formats.clone().unwrap_or_default();
                    if let Err(message) = self.send_batch(&batch.batch, &formats).await? {
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
                    self.answer(*result).await?;
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

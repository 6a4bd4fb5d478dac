//! Writes to a client that stopped reading, while a statement runs.
//!
//! A client that stops reading fills its socket, and the connection's task
//! waits in the write. A statement's timeout or a CancelRequest must still
//! stop the statement at once:
//!
//! ```text
//!  flush while a request runs:  write ──────────────► done
//!                                  └─ deadline / CancelRequest first
//!                                       ─► the query is cancelled (interrupt), and the
//!                                          statement's thread stops waiting for room in
//!                                          the channel (halt): the statement ends now,
//!                                          its memory returned, its error queued
//!                                       ─► the write goes on; rows that arrive later
//!                                          are dropped; a write that moves no byte for
//!                                          `stalled_client_timeout` closes the connection
//!                                       ─► written: the statement's 57014 follows
//! ```
//!
//! A write never stops in the middle of a message unless the connection
//! closes, so the protocol stays in step and a client that reads on gets
//! the rows sent before the stop, then the error. The watch lasts from the
//! request's start to its reply's last byte when the request was stopped
//! during a write; otherwise it ends with the statement (a reply that the
//! client reads slowly after its statement ended is not cut off). What
//! stays charged until the client reads or is disconnected: the batches
//! already in the channel (four at most).

use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use super::{Close, Connection};

/// What a blocked write races while a request runs.
pub(super) struct Stop {
    /// The request's `statement_timeout`.
    deadline: Option<tokio::time::Instant>,
    /// CancelRequests for this connection (a count; the value at the
    /// request's start seen already).
    cancels: watch::Receiver<u64>,
    /// The request was stopped while a write waited: its query is
    /// cancelled, and writes must make progress within the server's
    /// `stalled_client_timeout`.
    pub(super) stopped: bool,
}

impl Stop {
    pub(super) fn new(
        deadline: Option<std::time::Instant>,
        mut cancels: watch::Receiver<u64>,
    ) -> Self {
        cancels.borrow_and_update();
        Stop {
            deadline: deadline.map(tokio::time::Instant::from_std),
            cancels,
            stopped: false,
        }
    }

    /// Resolves when the deadline passes or a CancelRequest comes; whether
    /// it was the deadline.
    async fn fired(&mut self) -> bool {
        let deadline = self.deadline;
        let timer = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let cancels = &mut self.cancels;
        tokio::select! {
            () = timer => true,
            changed = cancels.changed() => {
                if changed.is_err() {
                    // The registry let go (the server is closing): only
                    // the deadline is left to wait for.
                    std::future::pending::<()>().await;
                }
                false
            }
        }
    }
}

impl Connection {
    /// Writes the buffered output racing the request's stop (see the
    /// module docs).
    pub(super) async fn write_watched(&mut self, stop: &mut Stop) -> Result<(), Close> {
        let patience = self.shared.config.stalled_client_timeout;
        let mut written = 0;
        while written < self.out.buf.len() {
            let pending = &self.out.buf[written..];
            let n = if stop.stopped {
                match tokio::time::timeout(patience, self.stream.write(pending)).await {
                    Ok(r) => r.map_err(|_| Close::Gone)?,
                    // The client reads nothing: it never will.
                    Err(_) => return Err(Close::Gone),
                }
            } else {
                let raced = tokio::select! {
                    r = self.stream.write(pending) => Ok(r),
                    timed_out = stop.fired() => Err(timed_out),
                };
                match raced {
                    Ok(r) => r.map_err(|_| Close::Gone)?,
                    Err(timed_out) => {
                        // Stopped now, whatever the client does: the
                        // query's work ends at once.
                        stop.stopped = true;
                        if let Some(i) = &self.interrupt {
                            if timed_out {
                                i.time_out();
                            } else {
                                i.cancel();
                            }
                        }
                        // The statement's thread stops waiting for room.
                        self.halt.send_replace(Some(timed_out));
                        continue;
                    }
                }
            };
            if n == 0 {
                return Err(Close::Gone);
            }
            written += n;
        }
        // TLS records may wait in rustls until flushed.
        let flush = self.stream.flush();
        if stop.stopped {
            match tokio::time::timeout(patience, flush).await {
                Ok(r) => r.map_err(|_| Close::Gone),
                Err(_) => Err(Close::Gone),
            }
        } else {
            flush.await.map_err(|_| Close::Gone)
        }
    }
}

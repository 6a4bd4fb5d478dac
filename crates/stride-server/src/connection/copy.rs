//! The copy sub-protocol of a connection.
//!
//! ```text
//!  COPY … FROM STDIN ─► CopyInResponse ─► client: CopyData… then CopyDone ─► rows read and
//!                                          │      (Flush/Sync ignored)        appended as one
//!                                          │                                  write ─► COPY n
//!                                          └─ CopyFail ─► 57014; another message ─► 08P01
//!  COPY … TO STDOUT  ─► CopyOutResponse, CopyData per row (streamed while the
//!                        query runs, `stream`), CopyDone, COPY n
//!  COPY … FROM 'file' (superusers) ─► the file read and appended like client data
//! ```
//!
//! Client data is kept until CopyDone (at most [`MAX_COPY_DATA`] bytes),
//! then read and appended on a blocking thread: a bad line, a CopyFail or
//! too much data leaves the table as it was, and inside a transaction
//! block aborts the block. After a failed copy the client's remaining
//! CopyData messages are ignored by the main loop, as PostgreSQL does.
//!
//! In the extended query protocol a `COPY` runs at Execute (Parse, Bind
//! and Describe — NoData — as for any command): the same exchange follows
//! it, the Sync a driver sends right after Execute (tokio-postgres sends
//! Bind, Execute, Sync at once) ignored during copy-in as PostgreSQL
//! ignores it; after an error the connection skips to the next Sync.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::util::display::FormatOptions;
use stride_sql::{CopyFormat, CopyIn, CopyOptions, CopyOut, SqlError, StatementOutput};

use super::{Close, Connection};
use crate::copy_format::{self, CopyDataError, RowWriter};
use crate::protocol;
use crate::sqlstate;
use crate::types::ColumnEncoder;

/// The most client data one `COPY … FROM STDIN` may send.
pub const MAX_COPY_DATA: usize = 256 << 20;

/// Why a `COPY … FROM` failed after its statement was accepted.
enum CopyFailure {
    /// The data could not be read.
    Data(CopyDataError),
    /// The server file could not be read.
    File(std::io::Error),
    /// The append was refused.
    Sql(SqlError),
}

impl Connection {
    /// Runs a `COPY … FROM` the session accepted: reads the rows from the
    /// client (or the server file) and appends them; answers `COPY n` or
    /// the error. Returns whether the copy failed (its error sent).
    pub(super) async fn copy_in(&mut self, copy: Box<CopyIn>) -> Result<bool, Close> {
        // The client's data, read here; a server file is read on the
        // blocking thread.
        let sent = match copy.file {
            Some(_) => None,
            None => match self.receive_copy_data(&copy).await? {
                Some(data) => Some(data),
                None => return Ok(true),
            },
        };
        let table = copy.table.clone();
        let outcome = self
            .with_session(move |s| {
                let read = match (sent, &copy.file) {
                    (Some(d), _) => Ok(d),
                    (None, Some(path)) => std::fs::read(path),
                    (None, None) => Ok(Vec::new()),
                };
                let data = match read {
                    Ok(d) => d,
                    Err(e) => {
                        s.fail_statement();
                        return Err(CopyFailure::File(e));
                    }
                };
                let batches = match copy_format::decode(&data, &copy.options, &copy.fields()) {
                    Ok(b) => b,
                    Err(e) => {
                        s.fail_statement();
                        return Err(CopyFailure::Data(e));
                    }
                };
                drop(data);
                s.copy_rows(&copy, batches).map_err(CopyFailure::Sql)
            })
            .await?;
        match outcome {
            Ok(StatementOutput::Command { tag }) => {
                self.out.command_complete(&tag);
                return Ok(false);
            }
            Ok(_) => self.out.error(
                "ERROR",
                sqlstate::INTERNAL_ERROR,
                "internal error: COPY returned no command tag",
            ),
            Err(CopyFailure::Data(e)) => {
                let message = format!("{e}, COPY {table}");
                self.out.error("ERROR", sqlstate::of_copy(&e), &message);
            }
            Err(CopyFailure::File(e)) => {
                self.out.error(
                    "ERROR",
                    sqlstate::IO_ERROR,
                    &format!("could not read the COPY file: {e}"),
                );
            }
            Err(CopyFailure::Sql(e)) => self.sql_error(&e),
        }
        Ok(true)
    }

    /// The copy-in exchange: CopyInResponse, then CopyData up to CopyDone.
    /// `None` if the copy failed here (answered already).
    async fn receive_copy_data(&mut self, copy: &CopyIn) -> Result<Option<Vec<u8>>, Close> {
        let binary = copy.options.format == CopyFormat::Binary;
        self.out.copy_response(b'G', binary, copy.columns.len());
        self.flush().await?;
        let mut data = Vec::new();
        loop {
            let Some((tag, body)) = self.read_message().await? else {
                return Err(Close::Gone);
            };
            let failure = match tag {
                b'd' => {
                    if data.len() + body.len() > MAX_COPY_DATA {
                        Some((
                            sqlstate::PROGRAM_LIMIT_EXCEEDED,
                            format!(
                                "COPY data larger than {} MiB: load it in parts",
                                MAX_COPY_DATA >> 20
                            ),
                        ))
                    } else {
                        data.extend_from_slice(&body);
                        None
                    }
                }
                b'c' => return Ok(Some(data)),
                b'f' => {
                    let reason = protocol::parse_copy_fail(&body)
                        .unwrap_or_else(|e| format!("(unreadable CopyFail: {e})"));
                    Some((
                        sqlstate::QUERY_CANCELED,
                        format!("COPY from stdin failed: {reason}"),
                    ))
                }
                b'H' | b'S' => None,
                // Terminate: the client is leaving, the copy with it.
                b'X' => return Err(Close::Gone),
                other => Some((
                    sqlstate::PROTOCOL_VIOLATION,
                    format!("unexpected message type 0x{other:02X} during COPY from stdin"),
                )),
            };
            if let Some((code, message)) = failure {
                if let Some(s) = self.session.as_mut() {
                    s.fail_statement();
                }
                self.out.error("ERROR", code, &message);
                return Ok(None);
            }
        }
    }

    /// Finishes a `COPY … TO STDOUT`: its rows stream while its query ran
    /// (`copying`: the writer [`Connection::begin_copy_out`] made, the
    /// rows sent already) or come collected in `copy`; then CopyDone and
    /// `COPY n`. Returns whether the copy failed (its error sent).
    pub(super) async fn copy_out(
        &mut self,
        copy: Box<CopyOut>,
        copying: Option<RowWriter>,
    ) -> Result<bool, Close> {
        let CopyOut { output, options } = *copy;
        let streamed = output.streamed.is_some();
        let mut writer = match copying {
            Some(w) => w,
            None => self.begin_copy_out(&output.schema, options),
        };
        if !streamed {
            for batch in &output.batches {
                if let Err(message) = self.send_copy_batch(&mut writer, batch).await? {
                    // The client is in copy-out mode: end it, then report.
                    self.out.copy_done();
                    self.out.error("ERROR", sqlstate::INTERNAL_ERROR, &message);
                    return Ok(true);
                }
            }
        }
        if let Some(trailer) = writer.trailer() {
            let at = self.out.begin_copy_data();
            self.out.buf.extend_from_slice(&trailer);
            self.out.end_copy_data(at);
        }
        self.out.copy_done();
        self.out
            .command_complete(&format!("COPY {}", output.num_rows()));
        Ok(false)
    }

    /// Starts a `COPY … TO STDOUT`: CopyOutResponse and the header line
    /// where asked for; returns the writer of its rows.
    pub(super) fn begin_copy_out(&mut self, schema: &SchemaRef, options: CopyOptions) -> RowWriter {
        let binary = options.format == CopyFormat::Binary;
        self.out.copy_response(b'H', binary, schema.fields().len());
        let mut writer = RowWriter::new(options);
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        if let Some(header) = writer.header(&names) {
            let at = self.out.begin_copy_data();
            self.out.buf.extend_from_slice(&header);
            self.out.end_copy_data(at);
        }
        writer
    }

    /// Sends every row of `batch` as CopyData, writing whenever the output
    /// buffer is full; the inner error: a value that cannot be encoded.
    pub(super) async fn send_copy_batch(
        &mut self,
        writer: &mut RowWriter,
        batch: &RecordBatch,
    ) -> Result<Result<(), String>, Close> {
        let mut row = 0;
        while row < batch.num_rows() {
            match encode_copy_rows(&mut self.out, writer, batch, row) {
                Ok(n) => row += n,
                Err(message) => return Ok(Err(message)),
            }
            self.flush_if_full().await?;
        }
        Ok(Ok(()))
    }
}

/// Encodes rows `start..` of `batch` as CopyData messages, one a row,
/// until [`super::FLUSH_BYTES`] are buffered; returns how many.
fn encode_copy_rows(
    out: &mut protocol::Out,
    writer: &mut RowWriter,
    batch: &RecordBatch,
    start: usize,
) -> Result<usize, String> {
    let binary = writer.binary();
    let format = FormatOptions::default().with_null("");
    let encoders = batch
        .columns()
        .iter()
        .map(|c| ColumnEncoder::new(c, binary, &format))
        .collect::<Result<Vec<_>, _>>()?;
    let mut row = start;
    while row < batch.num_rows() {
        let at = out.begin_copy_data();
        writer.row(batch.columns(), &encoders, row, &mut out.buf);
        out.end_copy_data(at);
        row += 1;
        if out.buf.len() >= super::FLUSH_BYTES {
            break;
        }
    }
    Ok(row - start)
}

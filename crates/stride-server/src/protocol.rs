//! PostgreSQL frontend/backend protocol version 3: framing, frontend message
//! parsing and backend message encoding.
//!
//! Every frontend message after the startup packet is `tag: u8, len: i32,
//! body: [u8; len - 4]`; the startup packet has no tag. Parsing never trusts
//! a length: lengths below 4 or above [`MAX_MESSAGE`] / [`MAX_STARTUP`] are
//! [`ProtocolError`]s, and a body is parsed with bounds checks so that a
//! truncated or malformed message is an error, never a panic.

use std::fmt::Write as _;

/// Largest frontend message accepted (a query text of up to this size).
pub const MAX_MESSAGE: usize = 64 << 20;
/// Largest startup packet accepted (PostgreSQL uses 10 000 bytes).
pub const MAX_STARTUP: usize = 10_000;
/// Largest message accepted before authentication completes (a password);
/// an unauthenticated client cannot make the server buffer more.
pub const MAX_AUTH_MESSAGE: usize = 4096;

pub const PROTOCOL_3_0: i32 = 196_608;
pub const SSL_REQUEST: i32 = 80_877_103;
pub const GSSENC_REQUEST: i32 = 80_877_104;
pub const CANCEL_REQUEST: i32 = 80_877_102;

/// A malformed message: the connection that sent it cannot be trusted to
/// stay in sync and is closed after an ErrorResponse (SQLSTATE 08P01).
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("invalid message length {0}")]
    Length(i64),
    #[error("message too large ({0} bytes, at most {1})")]
    TooLarge(usize, usize),
    /// A string field is not valid UTF-8 (the only encoding Stride speaks);
    /// the message's framing is intact.
    #[error("invalid byte sequence for encoding \"UTF8\" in {0} message")]
    NotUtf8(&'static str),
    #[error("truncated {0} message")]
    Truncated(&'static str),
    #[error("invalid {0} message: {1}")]
    Invalid(&'static str, String),
    #[error("unsupported frontend protocol {major}.{minor}: the server supports 3.0")]
    Version { major: i32, minor: i32 },
    #[error("unknown message type {0:?}")]
    UnknownTag(char),
}

/// The first packet of a connection.
#[derive(Debug)]
pub enum Startup {
    Ssl,
    Gss,
    Cancel {
        process_id: i32,
        secret_key: i32,
    },
    /// Protocol 3.0 with its parameters (`user`, `database`, ...).
    Start {
        params: Vec<(String, String)>,
    },
}

/// A frontend message of the normal phase.
#[derive(Debug)]
pub enum Frontend {
    Query(String),
    Parse {
        name: String,
        query: String,
        param_types: Vec<u32>,
    },
    Bind {
        portal: String,
        statement: String,
        param_formats: Vec<i16>,
        params: Vec<Option<Vec<u8>>>,
        result_formats: Vec<i16>,
    },
    Describe {
        kind: u8,
        name: String,
    },
    Execute {
        portal: String,
        max_rows: i32,
    },
    Close {
        kind: u8,
        name: String,
    },
    Sync,
    Flush,
    Terminate,
    Password(String),
    /// CopyData, CopyDone or CopyFail outside `COPY … FROM STDIN`: ignored,
    /// as PostgreSQL ignores them (a client still sending after its COPY
    /// failed).
    StrayCopy,
    /// FunctionCall: recognised, not supported.
    Unsupported(&'static str),
}

/// A bounds-checked reader over one message body.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtocolError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(ProtocolError::Truncated(self.what))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub fn u8(&mut self) -> Result<u8, ProtocolError> {
        Ok(self.take(1)?[0])
    }

    pub fn i16(&mut self) -> Result<i16, ProtocolError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub fn i32(&mut self) -> Result<i32, ProtocolError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A count that must be non-negative and plausible for the bytes left
    /// (each counted item needs at least `min_item` bytes).
    pub fn count16(&mut self, min_item: usize) -> Result<usize, ProtocolError> {
        let n = self.i16()?;
        if n < 0 || (n as usize).saturating_mul(min_item) > self.remaining() {
            return Err(ProtocolError::Invalid(self.what, format!("count {n}")));
        }
        Ok(n as usize)
    }

    pub fn cstr(&mut self) -> Result<String, ProtocolError> {
        let rest = &self.buf[self.pos..];
        let nul = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(ProtocolError::Truncated(self.what))?;
        let s = std::str::from_utf8(&rest[..nul])
            .map_err(|_| ProtocolError::NotUtf8(self.what))?
            .to_string();
        self.pos += nul + 1;
        Ok(s)
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], ProtocolError> {
        self.take(n)
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn finish(&self) -> Result<(), ProtocolError> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(ProtocolError::Invalid(
                self.what,
                format!("{} trailing bytes", self.remaining()),
            ))
        }
    }
}

/// Parses a SASLInitialResponse body: the mechanism and the client's first
/// message (a length of -1 means none, which SCRAM does not allow).
pub fn parse_sasl_initial(body: &[u8]) -> Result<(String, &[u8]), ProtocolError> {
    let mut r = Reader::new(body, "SASLInitialResponse");
    let mechanism = r.cstr()?;
    let len = r.i32()?;
    if len < 0 || len as usize != r.remaining() {
        return Err(ProtocolError::Invalid(
            "SASLInitialResponse",
            format!("length {len}"),
        ));
    }
    let data = r.bytes(len as usize)?;
    Ok((mechanism, data))
}

/// Parses the startup packet body (after its length word).
pub fn parse_startup(body: &[u8]) -> Result<Startup, ProtocolError> {
    let mut r = Reader::new(body, "startup");
    let code = r.i32()?;
    match code {
        SSL_REQUEST => Ok(Startup::Ssl),
        GSSENC_REQUEST => Ok(Startup::Gss),
        CANCEL_REQUEST => {
            let process_id = r.i32()?;
            let secret_key = r.i32()?;
            Ok(Startup::Cancel {
                process_id,
                secret_key,
            })
        }
        PROTOCOL_3_0 => {
            let mut params = Vec::new();
            loop {
                let key = r.cstr()?;
                if key.is_empty() {
                    break;
                }
                let value = r.cstr()?;
                params.push((key, value));
            }
            r.finish()?;
            Ok(Startup::Start { params })
        }
        other => Err(ProtocolError::Version {
            major: other >> 16,
            minor: other & 0xffff,
        }),
    }
}

/// Parses one message of the normal phase.
pub fn parse_frontend(tag: u8, body: &[u8]) -> Result<Frontend, ProtocolError> {
    match tag {
        b'Q' => {
            let mut r = Reader::new(body, "Query");
            let q = r.cstr()?;
            r.finish()?;
            Ok(Frontend::Query(q))
        }
        b'P' => {
            let mut r = Reader::new(body, "Parse");
            let name = r.cstr()?;
            let query = r.cstr()?;
            let n = r.count16(4)?;
            let param_types = (0..n)
                .map(|_| r.i32().map(|t| t as u32))
                .collect::<Result<_, _>>()?;
            r.finish()?;
            Ok(Frontend::Parse {
                name,
                query,
                param_types,
            })
        }
        b'B' => {
            let mut r = Reader::new(body, "Bind");
            let portal = r.cstr()?;
            let statement = r.cstr()?;
            let nf = r.count16(2)?;
            let param_formats = (0..nf).map(|_| r.i16()).collect::<Result<Vec<_>, _>>()?;
            let np = r.count16(4)?;
            let mut params = Vec::with_capacity(np);
            for _ in 0..np {
                let len = r.i32()?;
                if len == -1 {
                    params.push(None);
                } else if len < 0 {
                    return Err(ProtocolError::Invalid(
                        "Bind",
                        format!("parameter length {len}"),
                    ));
                } else {
                    params.push(Some(r.bytes(len as usize)?.to_vec()));
                }
            }
            let nr = r.count16(2)?;
            let result_formats = (0..nr).map(|_| r.i16()).collect::<Result<Vec<_>, _>>()?;
            r.finish()?;
            for f in param_formats.iter().chain(&result_formats) {
                if *f != 0 && *f != 1 {
                    return Err(ProtocolError::Invalid("Bind", format!("format code {f}")));
                }
            }
            Ok(Frontend::Bind {
                portal,
                statement,
                param_formats,
                params,
                result_formats,
            })
        }
        b'D' | b'C' => {
            let what = if tag == b'D' { "Describe" } else { "Close" };
            let mut r = Reader::new(body, what);
            let kind = r.u8()?;
            if kind != b'S' && kind != b'P' {
                return Err(ProtocolError::Invalid(
                    what,
                    format!("kind {:?}", kind as char),
                ));
            }
            let name = r.cstr()?;
            r.finish()?;
            Ok(if tag == b'D' {
                Frontend::Describe { kind, name }
            } else {
                Frontend::Close { kind, name }
            })
        }
        b'E' => {
            let mut r = Reader::new(body, "Execute");
            let portal = r.cstr()?;
            let max_rows = r.i32()?;
            r.finish()?;
            Ok(Frontend::Execute { portal, max_rows })
        }
        b'S' => Ok(Frontend::Sync),
        b'H' => Ok(Frontend::Flush),
        b'X' => Ok(Frontend::Terminate),
        b'p' => {
            let mut r = Reader::new(body, "PasswordMessage");
            let p = r.cstr()?;
            Ok(Frontend::Password(p))
        }
        b'd' | b'c' | b'f' => Ok(Frontend::StrayCopy),
        b'F' => Ok(Frontend::Unsupported("the function call protocol")),
        other => Err(ProtocolError::UnknownTag(other as char)),
    }
}

/// The message of a CopyFail.
pub fn parse_copy_fail(body: &[u8]) -> Result<String, ProtocolError> {
    let mut r = Reader::new(body, "CopyFail");
    let message = r.cstr()?;
    r.finish()?;
    Ok(message)
}

/// Builds backend messages into one output buffer.
#[derive(Default)]
pub struct Out {
    pub buf: Vec<u8>,
}

impl Out {
    /// Starts a message with `tag`; returns the position of its length word.
    fn begin(&mut self, tag: u8) -> usize {
        self.buf.push(tag);
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        at
    }

    fn end(&mut self, at: usize) {
        let len = (self.buf.len() - at) as i32;
        self.buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }

    fn cstr(&mut self, s: &str) {
        // A NUL inside a string would end it early on the client; replace it.
        self.buf
            .extend(s.bytes().map(|b| if b == 0 { b'?' } else { b }));
        self.buf.push(0);
    }

    fn i16(&mut self, v: i16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub fn auth_ok(&mut self) {
        let at = self.begin(b'R');
        self.i32(0);
        self.end(at);
    }

    /// AuthenticationSASL offering one mechanism.
    pub fn auth_sasl(&mut self, mechanism: &str) {
        let at = self.begin(b'R');
        self.i32(10);
        self.cstr(mechanism);
        self.buf.push(0);
        self.end(at);
    }

    /// AuthenticationSASLContinue with the server's challenge.
    pub fn auth_sasl_continue(&mut self, data: &[u8]) {
        let at = self.begin(b'R');
        self.i32(11);
        self.buf.extend_from_slice(data);
        self.end(at);
    }

    /// AuthenticationSASLFinal with the server's signature.
    pub fn auth_sasl_final(&mut self, data: &[u8]) {
        let at = self.begin(b'R');
        self.i32(12);
        self.buf.extend_from_slice(data);
        self.end(at);
    }

    pub fn parameter_status(&mut self, name: &str, value: &str) {
        let at = self.begin(b'S');
        self.cstr(name);
        self.cstr(value);
        self.end(at);
    }

    pub fn backend_key(&mut self, pid: i32, key: i32) {
        let at = self.begin(b'K');
        self.i32(pid);
        self.i32(key);
        self.end(at);
    }

    /// `status`: `I` idle, `T` in a transaction block, `E` failed block.
    pub fn ready(&mut self, status: u8) {
        let at = self.begin(b'Z');
        self.buf.push(status);
        self.end(at);
    }

    pub fn error(&mut self, severity: &str, code: &str, message: &str) {
        self.error_with(severity, code, message, &[]);
    }

    /// An ErrorResponse with more fields than severity, code and message:
    /// `extra` as (field type, value), e.g. `D` detail, `t` table, `c`
    /// column, `n` constraint.
    pub fn error_with(
        &mut self,
        severity: &str,
        code: &str,
        message: &str,
        extra: &[(u8, String)],
    ) {
        let at = self.begin(b'E');
        for (field, value) in [
            (b'S', severity),
            (b'V', severity),
            (b'C', code),
            (b'M', message),
        ] {
            self.buf.push(field);
            self.cstr(value);
        }
        for (field, value) in extra {
            self.buf.push(*field);
            self.cstr(value);
        }
        self.buf.push(0);
        self.end(at);
    }

    pub fn notice(&mut self, message: &str) {
        let at = self.begin(b'N');
        for (field, value) in [
            (b'S', "NOTICE"),
            (b'V', "NOTICE"),
            (b'C', "00000"),
            (b'M', message),
        ] {
            self.buf.push(field);
            self.cstr(value);
        }
        self.buf.push(0);
        self.end(at);
    }

    /// `fields`: (name, type oid, type size, format).
    pub fn row_description(&mut self, fields: &[(String, u32, i16, i16)]) {
        let at = self.begin(b'T');
        self.i16(fields.len() as i16);
        for (name, oid, size, format) in fields {
            self.cstr(name);
            self.i32(0); // table oid
            self.i16(0); // column number
            self.i32(*oid as i32);
            self.i16(*size);
            self.i32(-1); // type modifier
            self.i16(*format);
        }
        self.end(at);
    }

    pub fn no_data(&mut self) {
        let at = self.begin(b'n');
        self.end(at);
    }

    pub fn parameter_description(&mut self, oids: &[u32]) {
        let at = self.begin(b't');
        self.i16(oids.len() as i16);
        for oid in oids {
            self.i32(*oid as i32);
        }
        self.end(at);
    }

    /// Starts a DataRow of `columns` values; follow with [`Out::value`] /
    /// [`Out::null`] per column and [`Out::end_row`].
    pub fn begin_row(&mut self, columns: usize) -> usize {
        let at = self.begin(b'D');
        self.i16(columns as i16);
        at
    }

    pub fn null(&mut self) {
        self.i32(-1);
    }

    /// Reserves a value's length word; returns its position for
    /// [`Out::end_value`].
    pub fn begin_value(&mut self) -> usize {
        let at = self.buf.len();
        self.i32(0);
        at
    }

    pub fn end_value(&mut self, at: usize) {
        let len = (self.buf.len() - at - 4) as i32;
        self.buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }

    pub fn end_row(&mut self, at: usize) {
        self.end(at);
    }

    /// CopyInResponse (`G`) or CopyOutResponse (`H`): the overall format
    /// (0 text, 1 binary) for each of `columns` columns.
    pub fn copy_response(&mut self, tag: u8, binary: bool, columns: usize) {
        let at = self.begin(tag);
        self.buf.push(u8::from(binary));
        self.i16(i16::try_from(columns).unwrap_or(i16::MAX));
        for _ in 0..columns {
            self.i16(i16::from(binary));
        }
        self.end(at);
    }

    /// Starts a CopyData message; its payload follows in `buf`, then
    /// [`Out::end_copy_data`].
    pub fn begin_copy_data(&mut self) -> usize {
        self.begin(b'd')
    }

    pub fn end_copy_data(&mut self, at: usize) {
        self.end(at);
    }

    pub fn copy_done(&mut self) {
        let at = self.begin(b'c');
        self.end(at);
    }

    pub fn command_complete(&mut self, tag: &str) {
        let at = self.begin(b'C');
        self.cstr(tag);
        self.end(at);
    }

    pub fn empty_query(&mut self) {
        let at = self.begin(b'I');
        self.end(at);
    }

    pub fn parse_complete(&mut self) {
        let at = self.begin(b'1');
        self.end(at);
    }

    pub fn bind_complete(&mut self) {
        let at = self.begin(b'2');
        self.end(at);
    }

    pub fn close_complete(&mut self) {
        let at = self.begin(b'3');
        self.end(at);
    }

    pub fn portal_suspended(&mut self) {
        let at = self.begin(b's');
        self.end(at);
    }

    pub fn negotiate_version(&mut self, minor: i32, unknown: &[String]) {
        let at = self.begin(b'v');
        self.i32(minor);
        self.i32(unknown.len() as i32);
        for o in unknown {
            self.cstr(o);
        }
        self.end(at);
    }
}

/// `text` with its control characters shown (for log lines).
pub fn printable(text: &str, max: usize) -> String {
    let mut s = String::new();
    for c in text.chars().take(max) {
        if c.is_control() {
            let _ = write!(s, "\\x{:02x}", c as u32);
        } else {
            s.push(c);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_parses_parameters_and_rejects_garbage() {
        let mut body = PROTOCOL_3_0.to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0alice\0database\0stride\0\0");
        match parse_startup(&body).unwrap() {
            Startup::Start { params } => {
                assert_eq!(params[0], ("user".into(), "alice".into()));
                assert_eq!(params[1], ("database".into(), "stride".into()));
            }
            other => panic!("{other:?}"),
        }
        // Missing terminator.
        let mut cut = PROTOCOL_3_0.to_be_bytes().to_vec();
        cut.extend_from_slice(b"user\0al");
        assert!(matches!(
            parse_startup(&cut),
            Err(ProtocolError::Truncated(_))
        ));
        // Protocol 2.0.
        assert!(matches!(
            parse_startup(&(2i32 << 16).to_be_bytes()),
            Err(ProtocolError::Version { major: 2, minor: 0 })
        ));
        assert!(parse_startup(&[1, 2]).is_err());
    }

    #[test]
    fn bind_with_lying_counts_is_an_error_not_a_panic() {
        // portal "", statement "", 0 formats, 30000 params but no bytes.
        let body = [0u8, 0, 0, 0, 0x75, 0x30];
        assert!(parse_frontend(b'B', &body).is_err());
        // A parameter length beyond the body.
        let body = [0u8, 0, 0, 0, 0, 1, 0, 0, 0, 100, 1, 2];
        assert!(matches!(
            parse_frontend(b'B', &body),
            Err(ProtocolError::Truncated(_))
        ));
        // Negative length other than -1.
        let body = [0u8, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe, 0, 0];
        assert!(parse_frontend(b'B', &body).is_err());
        // A valid one: one NULL parameter, one binary result format.
        let body = [
            b'p', 0, b's', 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0, 1, 0, 1,
        ];
        match parse_frontend(b'B', &body).unwrap() {
            Frontend::Bind {
                portal,
                statement,
                params,
                result_formats,
                ..
            } => {
                assert_eq!((portal.as_str(), statement.as_str()), ("p", "s"));
                assert_eq!(params, vec![None]);
                assert_eq!(result_formats, vec![1]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_tags_and_trailing_bytes_are_errors() {
        assert!(matches!(
            parse_frontend(b'!', &[]),
            Err(ProtocolError::UnknownTag('!'))
        ));
        assert!(parse_frontend(b'Q', b"select 1\0extra").is_err());
        assert!(parse_frontend(b'Q', b"no terminator").is_err());
        assert!(parse_frontend(b'Q', &[0xff, 0xfe, 0]).is_err());
        assert!(parse_frontend(b'D', b"X\0").is_err());
    }

    #[test]
    fn messages_carry_their_length() {
        let mut out = Out::default();
        out.command_complete("SELECT 1");
        assert_eq!(out.buf[0], b'C');
        let len = i32::from_be_bytes(out.buf[1..5].try_into().unwrap()) as usize;
        assert_eq!(len, out.buf.len() - 1);
        let row = out.begin_row(1);
        let v = out.begin_value();
        out.buf.extend_from_slice(b"42");
        out.end_value(v);
        out.end_row(row);
        let tail = &out.buf[len + 1..];
        assert_eq!(tail[0], b'D');
        assert_eq!(&tail[7..11], &2i32.to_be_bytes());
    }
}

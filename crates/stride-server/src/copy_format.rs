//! `COPY` data formats as PostgreSQL 15 reads and writes them: text
//! (delimited, backslash escapes, `\N` for NULL), CSV (quotes, fields that
//! span lines) and binary (`PGCOPY` signature, length-prefixed values).
//!
//! Reading turns the whole input into batches of the copied columns'
//! types, or fails on the first bad line with a typed [`CopyDataError`];
//! writing turns one row into one CopyData payload (clients such as
//! psycopg read a row per message).

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, RecordBatch, RecordBatchOptions, StringBuilder};
use arrow::compute::CastOptions;
use arrow::datatypes::{DataType, FieldRef, Schema};
use datafusion_common::ScalarValue;
use stride_sql::{CopyFormat, CopyOptions};

use crate::types::{self, ColumnEncoder};

/// Rows per batch handed to the insert.
const BATCH_ROWS: usize = 8192;

/// The signature that starts binary `COPY` data.
pub const BINARY_SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";

/// Why `COPY … FROM` data could not be read; each kind has its SQLSTATE
/// (`sqlstate::of_copy`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyDataError {
    /// The data breaks the format: a wrong number of columns, an
    /// unterminated quoted field, a truncated binary tuple (22P04).
    #[error("{0}")]
    BadFormat(String),
    /// A value is not valid input for its column's type (22P02).
    #[error("{0}")]
    InvalidText(String),
    /// A binary value of the wrong size or form for its type (22P03).
    #[error("{0}")]
    InvalidBinary(String),
    /// Bytes that are not UTF-8 (22021).
    #[error("{0}")]
    Encoding(String),
}

type Result<T> = std::result::Result<T, CopyDataError>;

/// Reads `COPY … FROM` data into batches of `fields`' types.
pub fn decode(data: &[u8], options: &CopyOptions, fields: &[FieldRef]) -> Result<Vec<RecordBatch>> {
    let mut columns = Columns::new(fields, options.format == CopyFormat::Binary);
    match options.format {
        CopyFormat::Text => read_text(data, options, &mut columns)?,
        CopyFormat::Csv => read_csv(data, options, &mut columns)?,
        CopyFormat::Binary => read_binary(data, &mut columns)?,
    }
    columns.finish()
}

/// One column's values of the batch being collected.
enum Pending {
    /// Decoded one by one (binary values, PostgreSQL's boolean spellings).
    Scalars(Vec<ScalarValue>),
    /// The text of each value, cast to the column's type as a whole when
    /// the batch is cut (the cast a single value's decoding does, once per
    /// column), with each row's line for the error of a value it refuses.
    Text {
        strings: StringBuilder,
        lines: Vec<usize>,
    },
}

/// Values collected column by column, cut into batches.
struct Columns<'a> {
    fields: &'a [FieldRef],
    pending: Vec<Pending>,
    /// Rows collected since the last cut.
    rows: usize,
    batches: Vec<RecordBatch>,
    /// 1-based line (text, CSV) or tuple (binary) of the current row.
    line: usize,
}

impl<'a> Columns<'a> {
    fn new(fields: &'a [FieldRef], binary: bool) -> Self {
        let pending = fields
            .iter()
            .map(|f| {
                // Booleans, bytea and intervals have text forms of their
                // own (`t`, `\x6869`, `1 day 02:00:00`) that a cast from a
                // string misreads or refuses.
                let own_text = matches!(f.data_type(), DataType::Boolean | DataType::Interval(_))
                    || types::is_binary_type(f.data_type());
                if binary || own_text {
                    Pending::Scalars(Vec::new())
                } else {
                    Pending::Text {
                        strings: StringBuilder::new(),
                        lines: Vec::new(),
                    }
                }
            })
            .collect();
        Columns {
            fields,
            pending,
            rows: 0,
            batches: Vec::new(),
            line: 0,
        }
    }

    fn where_(&self, column: usize) -> String {
        where_at(self.line, self.fields[column].name())
    }

    /// Checks a row's width.
    fn check_width(&self, got: usize) -> Result<()> {
        let want = self.fields.len();
        if got > want {
            return Err(CopyDataError::BadFormat(format!(
                "extra data after last expected column (line {})",
                self.line
            )));
        }
        if got < want {
            return Err(CopyDataError::BadFormat(format!(
                "missing data for column \"{}\" (line {})",
                self.fields[got].name(),
                self.line
            )));
        }
        Ok(())
    }

    /// Adds the value of `column` (`None`: NULL) in text or binary form.
    fn push(&mut self, column: usize, value: Option<&[u8]>, binary: bool) -> Result<()> {
        let data_type = self.fields[column].data_type();
        let text = match value {
            Some(bytes) if !binary => Some(std::str::from_utf8(bytes).map_err(|_| {
                CopyDataError::Encoding(format!(
                    "invalid byte sequence for encoding \"UTF8\" ({})",
                    self.where_(column)
                ))
            })?),
            _ => None,
        };
        let line = self.line;
        let scalar = match (&mut self.pending[column], value) {
            (Pending::Text { strings, lines }, _) => {
                strings.append_option(text);
                lines.push(line);
                return Ok(());
            }
            (Pending::Scalars(_), None) => ScalarValue::try_from(data_type)
                .map_err(|e| CopyDataError::InvalidText(e.to_string()))?,
            (Pending::Scalars(_), Some(bytes)) if binary => {
                let (oid, _) = types::pg_type(data_type);
                types::decode_param(Some(bytes), oid, 1, Some(data_type)).map_err(|e| {
                    CopyDataError::InvalidBinary(format!("{e} ({})", self.where_(column)))
                })?
            }
            (Pending::Scalars(_), Some(_)) => decode_text(
                text.unwrap_or_default(),
                data_type,
                line,
                self.fields[column].name(),
            )?,
        };
        if let Pending::Scalars(values) = &mut self.pending[column] {
            values.push(scalar);
        }
        Ok(())
    }

    /// Ends a row; cuts a batch when enough rows are collected.
    fn end_row(&mut self) -> Result<()> {
        self.rows += 1;
        if self.rows >= BATCH_ROWS {
            self.cut()?;
        }
        Ok(())
    }

    fn cut(&mut self) -> Result<()> {
        let rows = std::mem::take(&mut self.rows);
        if rows == 0 {
            return Ok(());
        }
        let arrays = self
            .pending
            .iter_mut()
            .zip(self.fields)
            .map(|(p, f)| match p {
                Pending::Scalars(values) => {
                    let a = ScalarValue::iter_to_array(std::mem::take(values))
                        .map_err(|e| CopyDataError::InvalidText(e.to_string()))?;
                    if a.data_type() == f.data_type() {
                        Ok(a)
                    } else {
                        arrow::compute::cast(&a, f.data_type())
                            .map_err(|e| CopyDataError::InvalidText(e.to_string()))
                    }
                }
                Pending::Text { strings, lines } => {
                    let lines = std::mem::take(lines);
                    cast_text(Arc::new(strings.finish()), f, &lines)
                }
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let schema = Arc::new(Schema::new(
            self.fields
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        ));
        let batch = RecordBatch::try_new_with_options(
            schema,
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map_err(|e| CopyDataError::InvalidText(e.to_string()))?;
        self.batches.push(batch);
        Ok(())
    }

    fn finish(mut self) -> Result<Vec<RecordBatch>> {
        self.cut()?;
        Ok(self.batches)
    }
}

fn where_at(line: usize, column: &str) -> String {
    format!("line {line}, column {column}")
}

/// One text value as its column's type (22P02 if it is not valid input).
fn decode_text(text: &str, data_type: &DataType, line: usize, column: &str) -> Result<ScalarValue> {
    types::decode_param(Some(text.as_bytes()), 0, 0, Some(data_type))
        .map_err(|e| CopyDataError::InvalidText(format!("{e} ({})", where_at(line, column))))
}

/// A column of text values cast to its type as a whole; where the cast
/// refuses a value, the first value refused alone is the error.
fn cast_text(strings: ArrayRef, field: &FieldRef, lines: &[usize]) -> Result<ArrayRef> {
    if *field.data_type() == DataType::Utf8 {
        return Ok(strings);
    }
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    match arrow::compute::cast_with_options(&strings, field.data_type(), &options) {
        Ok(a) => Ok(a),
        Err(e) => {
            let texts = strings.as_string::<i32>();
            for (row, text) in texts.iter().enumerate() {
                if let Some(text) = text {
                    decode_text(text, field.data_type(), lines[row], field.name())?;
                }
            }
            Err(CopyDataError::InvalidText(e.to_string()))
        }
    }
}

/// The lines of text data: split at `\n` (a `\r` before it dropped), up
/// to the end-of-data marker `\.`.
fn text_lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let data = data.strip_suffix(b"\n").unwrap_or(data);
    data.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .take_while(|l| *l != b"\\.")
        .filter(move |_| !data.is_empty())
}

fn read_text(data: &[u8], o: &CopyOptions, columns: &mut Columns<'_>) -> Result<()> {
    let mut fields: Vec<&[u8]> = Vec::new();
    let mut value = Vec::new();
    for (i, line) in text_lines(data).enumerate() {
        columns.line = i + 1;
        if i == 0 && o.header {
            continue;
        }
        split_text(line, o.delimiter, &mut fields);
        if columns.fields.is_empty() && fields == [b""] {
            // A table of no columns: an empty line is a row.
            fields.clear();
        }
        columns.check_width(fields.len())?;
        for (c, raw) in fields.iter().enumerate() {
            if *raw == o.null.as_bytes() {
                columns.push(c, None, false)?;
            } else {
                unescape_text(raw, &mut value).map_err(|e| {
                    CopyDataError::BadFormat(format!("{e} ({})", columns.where_(c)))
                })?;
                columns.push(c, Some(&value), false)?;
            }
        }
        columns.end_row()?;
    }
    Ok(())
}

/// Splits a text-format line at unescaped delimiters (raw fields, escapes
/// kept).
fn split_text<'a>(line: &'a [u8], delimiter: u8, out: &mut Vec<&'a [u8]>) {
    out.clear();
    let mut start = 0;
    let mut i = 0;
    while i < line.len() {
        match line[i] {
            b'\\' => i += 2,
            b if b == delimiter => {
                out.push(&line[start..i]);
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    out.push(&line[start.min(line.len())..]);
}

/// Resolves the backslash escapes of a text-format field into `out`.
fn unescape_text(raw: &[u8], out: &mut Vec<u8>) -> std::result::Result<(), &'static str> {
    out.clear();
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        i += 1;
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let Some(&e) = raw.get(i) else {
            return Err("backslash at the end of a line");
        };
        i += 1;
        match e {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut v = u32::from(e - b'0');
                for _ in 0..2 {
                    match raw.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push((v & 0xff) as u8);
            }
            b'x' if raw.get(i).is_some_and(u8::is_ascii_hexdigit) => {
                let mut v = 0u32;
                for _ in 0..2 {
                    match raw.get(i).and_then(|d| char::from(*d).to_digit(16)) {
                        Some(d) => {
                            v = v * 16 + d;
                            i += 1;
                        }
                        None => break,
                    }
                }
                out.push(v as u8);
            }
            other => out.push(other),
        }
    }
    Ok(())
}

fn read_csv(data: &[u8], o: &CopyOptions, columns: &mut Columns<'_>) -> Result<()> {
    let mut pos = 0;
    let mut line = 0usize;
    let mut row = 0usize;
    // (value, quoted) per field of the current row
    let mut fields: Vec<(Vec<u8>, bool)> = Vec::new();
    while pos < data.len() {
        line += 1;
        columns.line = line;
        let rest = &data[pos..];
        if rest == b"\\." || rest.starts_with(b"\\.\n") || rest.starts_with(b"\\.\r\n") {
            break;
        }
        fields.clear();
        let mut value = Vec::new();
        let mut quoted = false;
        loop {
            let Some(&b) = data.get(pos) else {
                fields.push((std::mem::take(&mut value), quoted));
                break;
            };
            pos += 1;
            if b == o.quote {
                quoted = true;
                let start_line = line;
                loop {
                    let Some(&q) = data.get(pos) else {
                        return Err(CopyDataError::BadFormat(format!(
                            "unterminated CSV quoted field (line {start_line})"
                        )));
                    };
                    pos += 1;
                    let next = data.get(pos).copied();
                    // An escaped quote (or, with an escape other than the
                    // quote, an escaped escape) is taken literally.
                    if q == o.escape
                        && (next == Some(o.quote)
                            || (o.escape != o.quote && next == Some(o.escape)))
                    {
                        value.push(next.unwrap_or(q));
                        pos += 1;
                        continue;
                    }
                    if q == o.quote {
                        break;
                    }
                    if q == b'\n' {
                        line += 1;
                    }
                    value.push(q);
                }
            } else if b == o.delimiter {
                fields.push((std::mem::take(&mut value), quoted));
                quoted = false;
            } else if b == b'\n' {
                fields.push((std::mem::take(&mut value), quoted));
                break;
            } else if b == b'\r' {
                if data.get(pos) == Some(&b'\n') {
                    pos += 1;
                    fields.push((std::mem::take(&mut value), quoted));
                    break;
                }
                return Err(CopyDataError::BadFormat(format!(
                    "unquoted carriage return found in data (line {line})"
                )));
            } else {
                value.push(b);
            }
        }
        row += 1;
        if row == 1 && o.header {
            continue;
        }
        columns.line = line;
        if columns.fields.is_empty() && fields.len() == 1 && fields[0] == (Vec::new(), false) {
            fields.clear();
        }
        columns.check_width(fields.len())?;
        for (c, (v, quoted)) in fields.iter().enumerate() {
            if !quoted && v.as_slice() == o.null.as_bytes() {
                columns.push(c, None, false)?;
            } else {
                columns.push(c, Some(v), false)?;
            }
        }
        columns.end_row()?;
    }
    Ok(())
}

/// A bounds-checked reader of binary `COPY` data.
struct BinaryReader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> BinaryReader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(CopyDataError::BadFormat(
                "unexpected EOF in COPY data".into(),
            ));
        };
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn i16(&mut self) -> Result<i16> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Result<i32> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

fn read_binary(data: &[u8], columns: &mut Columns<'_>) -> Result<()> {
    let mut r = BinaryReader { data, pos: 0 };
    if r.take(BINARY_SIGNATURE.len()).ok() != Some(&BINARY_SIGNATURE[..]) {
        return Err(CopyDataError::BadFormat(
            "COPY file signature not recognized".into(),
        ));
    }
    let flags = r.i32()?;
    if flags & (1 << 16) != 0 {
        return Err(CopyDataError::BadFormat(
            "binary COPY data with OIDs is not supported".into(),
        ));
    }
    if flags & !0xffff & !(1 << 16) != 0 {
        return Err(CopyDataError::BadFormat(
            "unrecognized critical flags in COPY file header".into(),
        ));
    }
    let extension = r.i32()?;
    let extension = usize::try_from(extension).map_err(|_| {
        CopyDataError::BadFormat("invalid COPY file header (negative extension length)".into())
    })?;
    r.take(extension)?;
    loop {
        let count = r.i16()?;
        if count == -1 {
            if r.pos != data.len() {
                return Err(CopyDataError::BadFormat(
                    "received copy data after EOF marker".into(),
                ));
            }
            return Ok(());
        }
        columns.line += 1;
        columns.check_width(usize::try_from(count).unwrap_or(usize::MAX))?;
        for c in 0..columns.fields.len() {
            let len = r.i32()?;
            if len == -1 {
                columns.push(c, None, true)?;
            } else {
                let len = usize::try_from(len).map_err(|_| {
                    CopyDataError::BadFormat(format!(
                        "invalid field size {len} ({})",
                        columns.where_(c)
                    ))
                })?;
                let bytes = r.take(len)?;
                columns.push(c, Some(bytes), true)?;
            }
        }
        columns.end_row()?;
    }
}

/// Writes rows of one result in a `COPY … TO` format.
pub struct RowWriter {
    options: CopyOptions,
    /// Scratch space for one value's text.
    value: Vec<u8>,
    /// The binary header, written in front of the first row (or the
    /// trailer), as PostgreSQL sends it: psycopg expects it there.
    prefix: Vec<u8>,
}

impl RowWriter {
    pub fn new(options: CopyOptions) -> Self {
        let prefix = if options.format == CopyFormat::Binary {
            let mut p = BINARY_SIGNATURE.to_vec();
            p.extend_from_slice(&0i32.to_be_bytes()); // flags
            p.extend_from_slice(&0i32.to_be_bytes()); // extension length
            p
        } else {
            Vec::new()
        };
        RowWriter {
            options,
            value: Vec::new(),
            prefix,
        }
    }

    /// Whether rows are written in the binary format.
    pub fn binary(&self) -> bool {
        self.options.format == CopyFormat::Binary
    }

    /// A header line of column names where asked for (text, CSV), sent
    /// as a message of its own; `None`: none.
    pub fn header(&mut self, names: &[&str]) -> Option<Vec<u8>> {
        let o = &self.options;
        match o.format {
            CopyFormat::Binary => None,
            _ if !o.header => None,
            _ => {
                let mut out = Vec::new();
                for (i, name) in names.iter().enumerate() {
                    if i > 0 {
                        out.push(o.delimiter);
                    }
                    self.field(name.as_bytes(), i == 0, &mut out);
                }
                out.push(b'\n');
                Some(out)
            }
        }
    }

    /// What follows the rows: the binary trailer (after the header if no
    /// row was written); `None` for text and CSV.
    pub fn trailer(&mut self) -> Option<Vec<u8>> {
        (self.options.format == CopyFormat::Binary).then(|| {
            let mut out = std::mem::take(&mut self.prefix);
            out.extend_from_slice(&(-1i16).to_be_bytes());
            out
        })
    }

    /// Appends row `row` of `columns` to `out`.
    pub fn row(
        &mut self,
        columns: &[ArrayRef],
        encoders: &[ColumnEncoder<'_>],
        row: usize,
        out: &mut Vec<u8>,
    ) {
        let o = &self.options;
        if o.format == CopyFormat::Binary {
            out.append(&mut self.prefix);
            out.extend_from_slice(&(columns.len() as i16).to_be_bytes());
            for (c, enc) in columns.iter().zip(encoders) {
                if types::is_null(c, row) {
                    out.extend_from_slice(&(-1i32).to_be_bytes());
                } else {
                    let at = out.len();
                    out.extend_from_slice(&[0; 4]);
                    enc.encode(row, out);
                    let len = (out.len() - at - 4) as i32;
                    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
                }
            }
            return;
        }
        for (i, (c, enc)) in columns.iter().zip(encoders).enumerate() {
            if i > 0 {
                out.push(o.delimiter);
            }
            if types::is_null(c, row) {
                out.extend_from_slice(o.null.as_bytes());
            } else {
                let mut value = std::mem::take(&mut self.value);
                value.clear();
                enc.encode(row, &mut value);
                self.field(&value, i == 0, out);
                self.value = value;
            }
        }
        out.push(b'\n');
    }

    /// Appends one non-NULL value, escaped (text) or quoted where needed
    /// (CSV).
    fn field(&self, value: &[u8], first: bool, out: &mut Vec<u8>) {
        let o = &self.options;
        if o.format == CopyFormat::Csv {
            let quote = value == o.null.as_bytes()
                || (first && value == b"\\.")
                || value
                    .iter()
                    .any(|&b| b == o.delimiter || b == o.quote || b == b'\n' || b == b'\r');
            if !quote {
                out.extend_from_slice(value);
                return;
            }
            out.push(o.quote);
            for &b in value {
                if b == o.quote || b == o.escape {
                    out.push(o.escape);
                }
                out.push(b);
            }
            out.push(o.quote);
            return;
        }
        for &b in value {
            match b {
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' if o.delimiter != b'\t' => out.extend_from_slice(b"\\t"),
                8 => out.extend_from_slice(b"\\b"),
                12 => out.extend_from_slice(b"\\f"),
                11 => out.extend_from_slice(b"\\v"),
                d if d == o.delimiter => {
                    out.push(b'\\');
                    out.push(d);
                }
                other => out.push(other),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray, Int32Array, StringArray};
    use arrow::datatypes::{Field, Int32Type};
    use std::sync::Arc;

    fn options(sql: &str) -> CopyOptions {
        stride_sql::copy::parse(sql).unwrap().options
    }

    fn fields() -> Vec<FieldRef> {
        vec![
            Arc::new(Field::new("a", DataType::Int32, true)),
            Arc::new(Field::new("s", DataType::Utf8, true)),
        ]
    }

    /// The `a` and `s` columns read back.
    type Read = (Vec<Option<i32>>, Vec<Option<String>>);

    fn read(data: &str, sql: &str) -> Result<Read> {
        let batches = decode(data.as_bytes(), &options(sql), &fields())?;
        let mut a = Vec::new();
        let mut s = Vec::new();
        for b in batches {
            a.extend(b.column(0).as_primitive::<Int32Type>().iter());
            s.extend(
                b.column(1)
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.map(str::to_string)),
            );
        }
        Ok((a, s))
    }

    #[test]
    fn text_escapes_nulls_and_end_marker() {
        let (a, s) = read(
            "1\tx\\ty\\\\z\n\\N\t\\N\n3\t\\101\\x42\r\n\\.\nignored\n",
            "COPY t FROM STDIN",
        )
        .unwrap();
        assert_eq!(a, vec![Some(1), None, Some(3)]);
        assert_eq!(s, vec![Some("x\ty\\z".into()), None, Some("AB".into())]);
    }

    #[test]
    fn csv_quotes_span_lines_and_distinguish_empty_from_null() {
        let (a, s) = read(
            "a,s\n1,\"x,\"\"y\"\"\nz\"\n2,\"\"\n,\n",
            "COPY t FROM STDIN (FORMAT csv, HEADER)",
        )
        .unwrap();
        assert_eq!(a, vec![Some(1), Some(2), None]);
        assert_eq!(
            s,
            vec![Some("x,\"y\"\nz".into()), Some(String::new()), None]
        );
    }

    #[test]
    fn bad_input_is_typed() {
        let sql = "COPY t FROM STDIN";
        assert!(matches!(
            read("1\tx\t3\n", sql),
            Err(CopyDataError::BadFormat(_))
        ));
        assert!(matches!(read("1\n", sql), Err(CopyDataError::BadFormat(_))));
        assert!(matches!(
            read("one\tx\n", sql),
            Err(CopyDataError::InvalidText(_))
        ));
        let csv = "COPY t FROM STDIN CSV";
        assert!(matches!(
            read("1,\"open\n", csv),
            Err(CopyDataError::BadFormat(_))
        ));
        let bin = "COPY t FROM STDIN BINARY";
        assert!(matches!(
            read("PGCOPY\n", bin),
            Err(CopyDataError::BadFormat(_))
        ));
    }

    #[test]
    fn written_rows_read_back_in_every_format() {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![Some(7), None])),
            Arc::new(StringArray::from(vec![Some("a\tb,\"c\"\n\\"), Some("")])),
        ];
        let fmt = arrow::util::display::FormatOptions::default();
        for sql in [
            "COPY t TO STDOUT",
            "COPY t TO STDOUT (FORMAT csv, HEADER)",
            "COPY t TO STDOUT (FORMAT binary)",
        ] {
            let o = options(sql);
            let binary = o.format == CopyFormat::Binary;
            let encoders: Vec<ColumnEncoder<'_>> = columns
                .iter()
                .map(|c| ColumnEncoder::new(c, binary, &fmt).unwrap())
                .collect();
            let mut w = RowWriter::new(o.clone());
            let mut data = w.header(&["a", "s"]).unwrap_or_default();
            assert_eq!(data.is_empty(), !o.header, "{sql}");
            for row in 0..2 {
                w.row(&columns, &encoders, row, &mut data);
            }
            data.extend(w.trailer().unwrap_or_default());
            let batches = decode(&data, &o, &fields()).unwrap();
            assert_eq!(batches[0].num_rows(), 2, "{sql}");
            assert_eq!(batches[0].column(0).null_count(), 1, "{sql}");
            let s = batches[0].column(1).as_string::<i32>();
            assert_eq!(s.value(0), "a\tb,\"c\"\n\\", "{sql}");
            assert_eq!((s.is_null(1), s.value(1)), (false, ""), "{sql}");
        }
    }
}

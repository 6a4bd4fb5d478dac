//! The write-ahead log's format: segments of checksummed records, each the
//! catalog operations of one committed transaction.
//!
//! ```text
//!  wal/<start LSN, 20 digits>.log
//!  ┌──────────────────────────┬──────────────────────────────────────────┐
//!  │ "STRWAL01" | start LSN u64 │ record │ record │ … │ (torn tail?)     │
//!  └──────────────────────────┴──────────────────────────────────────────┘
//!  record  = payload length u64 LE | CRC-32 (IEEE) of payload u32 LE | payload
//!  payload = op count u32 | op …
//!  op      = tag u8 | schema str | [table str] | [Arrow IPC stream: u64 length | bytes]
//!          | tag u8 | schema str | table str | file                   (bulk writes)
//!  file    = name str | length u64 | CRC-32 of the file u32
//!  str     = length u32 | UTF-8
//! ```
//!
//! A bulk write (a large `PutTable` or `Append`: CREATE TABLE AS, COPY
//! FROM, INSERT … SELECT, an external table's rows) keeps its rows out of
//! the log: they go to an Arrow IPC stream file in the data directory's
//! `bulk/`, fsynced before the record that names it — with the file's
//! length and checksum — is appended ([`crate::durable`]).
//!
//! A log sequence number (LSN) is a byte position in the log as if all
//! segments were one stream without headers; a record's LSN is the position
//! of its end, so "flushed up to LSN n" covers every record whose LSN ≤ n.
//! Table rows travel as an Arrow IPC stream (the table's schema, then its
//! batches), never in a format of Stride's own.
//!
//! Reading stops at the first record that does not check out — a length
//! beyond the end of the file or a checksum that does not match: the tail a
//! crash tore. Recovery truncates the last segment there.

use std::io::Cursor;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

use crate::catalog::CatalogOp;
use crate::error::{Result, StorageError};
use crate::table::Table;

/// The first bytes of every segment (the format's version is in them).
pub const SEGMENT_MAGIC: &[u8; 8] = b"STRWAL01";
/// Bytes before the first record of a segment.
pub const SEGMENT_HEADER: u64 = 16;
/// Bytes of a record's frame (length and checksum).
pub const RECORD_HEADER: u64 = 12;

const TAG_CREATE_SCHEMA: u8 = 1;
const TAG_DROP_SCHEMA: u8 = 2;
const TAG_PUT_TABLE: u8 = 3;
const TAG_APPEND: u8 = 4;
const TAG_DROP_TABLE: u8 = 5;
const TAG_PUT_SECURITY: u8 = 6;
const TAG_PUT_TABLE_FILE: u8 = 7;
const TAG_APPEND_FILE: u8 = 8;

/// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320) lookup tables for
/// slicing by 8: `CRC_TABLES[0]` is the byte-at-a-time table, `[k][b]` the
/// CRC of byte `b` followed by `k` zero bytes.
const CRC_TABLES: [[u32; 256]; 8] = {
    let mut tables = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        tables[0][i] = c;
        i += 1;
    }
    let mut t = 1;
    while t < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = tables[t - 1][i];
            tables[t][i] = (prev >> 8) ^ tables[0][(prev & 0xFF) as usize];
            i += 1;
        }
        t += 1;
    }
    tables
};

/// CRC-32 of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut c = Crc32::default();
    c.update(bytes);
    c.finish()
}

/// A CRC-32 computed over bytes given in pieces (the same value as
/// [`crc32`] of their concatenation).
#[derive(Debug, Clone, Copy)]
pub struct Crc32 {
    state: u32,
}

impl Default for Crc32 {
    fn default() -> Self {
        Crc32 { state: !0 }
    }
}

impl Crc32 {
    pub fn update(&mut self, bytes: &[u8]) {
        let t = &CRC_TABLES;
        let mut c = self.state;
        let mut chunks = bytes.chunks_exact(8);
        for w in &mut chunks {
            let lo = c ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            c = t[7][(lo & 0xFF) as usize]
                ^ t[6][((lo >> 8) & 0xFF) as usize]
                ^ t[5][((lo >> 16) & 0xFF) as usize]
                ^ t[4][(lo >> 24) as usize]
                ^ t[3][w[4] as usize]
                ^ t[2][w[5] as usize]
                ^ t[1][w[6] as usize]
                ^ t[0][w[7] as usize];
        }
        for &b in chunks.remainder() {
            c = t[0][((c ^ b as u32) & 0xFF) as usize] ^ (c >> 8);
        }
        self.state = c;
    }

    pub fn finish(&self) -> u32 {
        !self.state
    }
}

/// A bulk write's file, as a log record names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRef {
    /// The file's name in the data directory's `bulk/`.
    pub name: String,
    /// Its length in bytes.
    pub len: u64,
    /// CRC-32 of its bytes.
    pub crc: u32,
}

/// The rows of an operation a bulk write may keep out of the log: a
/// `PutTable`'s or an `Append`'s (schema and batches); `None` for others.
pub fn op_rows(op: &CatalogOp) -> Option<(SchemaRef, &[RecordBatch])> {
    match op {
        CatalogOp::PutTable { table, .. } => Some((table.schema().clone(), table.blocks())),
        CatalogOp::Append { blocks, .. } => blocks.first().map(|b| (b.schema(), &blocks[..])),
        _ => None,
    }
}

/// An operation's bytes in a payload with its rows in `file` instead of
/// inline (a `PutTable` or `Append` only).
pub fn encode_op_in_file(op: &CatalogOp, file: &FileRef) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let (tag, schema, table) = match op {
        CatalogOp::PutTable { schema, table } => (TAG_PUT_TABLE_FILE, schema, table.name()),
        CatalogOp::Append { schema, table, .. } => (TAG_APPEND_FILE, schema, table.as_str()),
        other => {
            return Err(StorageError::Internal(format!(
                "{other:?} has no rows to keep in a file"
            )))
        }
    };
    out.push(tag);
    put_str(&mut out, schema);
    put_str(&mut out, table);
    put_str(&mut out, &file.name);
    out.extend_from_slice(&file.len.to_le_bytes());
    out.extend_from_slice(&file.crc.to_le_bytes());
    Ok(out)
}

/// A segment's header for a segment that starts at `start_lsn`.
pub fn segment_header(start_lsn: u64) -> [u8; SEGMENT_HEADER as usize] {
    let mut h = [0u8; SEGMENT_HEADER as usize];
    h[..8].copy_from_slice(SEGMENT_MAGIC);
    h[8..].copy_from_slice(&start_lsn.to_le_bytes());
    h
}

/// A framed record of `payload`.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + RECORD_HEADER as usize);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// One operation's bytes in a payload.
pub fn encode_op(op: &CatalogOp) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    match op {
        CatalogOp::CreateSchema(s) => {
            out.push(TAG_CREATE_SCHEMA);
            put_str(&mut out, s);
        }
        CatalogOp::DropSchema(s) => {
            out.push(TAG_DROP_SCHEMA);
            put_str(&mut out, s);
        }
        CatalogOp::PutTable { schema, table } => {
            out.push(TAG_PUT_TABLE);
            put_str(&mut out, schema);
            put_str(&mut out, table.name());
            put_ipc(&mut out, table.schema(), table.blocks())?;
        }
        CatalogOp::Append {
            schema,
            table,
            blocks,
        } => {
            out.push(TAG_APPEND);
            put_str(&mut out, schema);
            put_str(&mut out, table);
            let Some(first) = blocks.first() else {
                return Err(StorageError::Internal("an append of no rows".into()));
            };
            put_ipc(&mut out, &first.schema(), blocks)?;
        }
        CatalogOp::DropTable { schema, table } => {
            out.push(TAG_DROP_TABLE);
            put_str(&mut out, schema);
            put_str(&mut out, table);
        }
        CatalogOp::PutSecurity(bytes) => {
            out.push(TAG_PUT_SECURITY);
            put_bytes(&mut out, bytes);
        }
    }
    Ok(out)
}

/// A record's payload of already encoded operations.
pub fn payload(ops: &[Vec<u8>]) -> Vec<u8> {
    let len = 4 + ops.iter().map(Vec::len).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    for op in ops {
        out.extend_from_slice(op);
    }
    out
}

/// Reads a bulk write's file: its schema and batches, once its length and
/// checksum are what the record says.
pub type FileLoader<'a> = dyn FnMut(&FileRef) -> Result<(SchemaRef, Vec<RecordBatch>)> + 'a;

/// The operations of a record's payload (one that names no bulk file).
pub fn decode_payload(payload: &[u8]) -> Result<Vec<CatalogOp>> {
    decode_payload_with(payload, &mut |f: &FileRef| {
        Err(corrupt(format!(
            "a record naming bulk file {} read without its directory",
            f.name
        )))
    })
}

/// The operations of a record's payload, the rows of bulk writes read by
/// `load`.
pub fn decode_payload_with(payload: &[u8], load: &mut FileLoader<'_>) -> Result<Vec<CatalogOp>> {
    Ok(decode_payload_files(payload, load)?
        .into_iter()
        .map(|(op, _)| op)
        .collect())
}

/// [`decode_payload_with`], each operation with the bulk file its rows came
/// from.
pub fn decode_payload_files(
    payload: &[u8],
    load: &mut FileLoader<'_>,
) -> Result<Vec<(CatalogOp, Option<FileRef>)>> {
    let mut r = Reader { bytes: payload };
    let count = r.u32()?;
    let mut ops = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let tag = r.take(1)?[0];
        let mut from = None;
        let op = match tag {
            TAG_CREATE_SCHEMA => CatalogOp::CreateSchema(r.str()?),
            TAG_DROP_SCHEMA => CatalogOp::DropSchema(r.str()?),
            TAG_PUT_TABLE => {
                let schema = r.str()?;
                let name = r.str()?;
                let (arrow_schema, blocks) = r.ipc()?;
                let table = Table::new(name, arrow_schema, blocks)?;
                CatalogOp::PutTable {
                    schema,
                    table: Arc::new(table),
                }
            }
            TAG_APPEND => {
                let schema = r.str()?;
                let table = r.str()?;
                let (_, blocks) = r.ipc()?;
                CatalogOp::Append {
                    schema,
                    table,
                    blocks,
                }
            }
            TAG_DROP_TABLE => CatalogOp::DropTable {
                schema: r.str()?,
                table: r.str()?,
            },
            TAG_PUT_SECURITY => CatalogOp::PutSecurity(Arc::new(r.bytes()?.to_vec())),
            TAG_PUT_TABLE_FILE => {
                let schema = r.str()?;
                let name = r.str()?;
                let file = r.file()?;
                let (arrow_schema, blocks) = load(&file)?;
                from = Some(file);
                let table = Table::new(name, arrow_schema, blocks)?;
                CatalogOp::PutTable {
                    schema,
                    table: Arc::new(table),
                }
            }
            TAG_APPEND_FILE => {
                let schema = r.str()?;
                let table = r.str()?;
                let file = r.file()?;
                let (_, blocks) = load(&file)?;
                from = Some(file);
                CatalogOp::Append {
                    schema,
                    table,
                    blocks,
                }
            }
            other => return Err(corrupt(format!("unknown operation tag {other}"))),
        };
        ops.push((op, from));
    }
    if !r.bytes.is_empty() {
        return Err(corrupt("bytes after the last operation".into()));
    }
    Ok(ops)
}

/// The records of one segment's bytes.
#[derive(Debug)]
pub struct SegmentScan {
    /// The segment's start LSN (from its header).
    pub start_lsn: u64,
    /// (LSN of the record's end, payload) in order.
    pub records: Vec<(u64, Vec<u8>)>,
    /// Bytes of the file up to the end of the last good record.
    pub valid_len: u64,
    /// Whether bytes follow the last good record (a torn tail).
    pub torn: bool,
}

/// Reads a segment: its header must be intact (else `Err`); records are
/// read up to the first one that does not check out.
pub fn scan_segment(bytes: &[u8]) -> Result<SegmentScan> {
    if bytes.len() < SEGMENT_HEADER as usize || &bytes[..8] != SEGMENT_MAGIC {
        return Err(corrupt(
            "a log segment without a valid header (unknown format version?)".into(),
        ));
    }
    let start_lsn = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let mut pos = SEGMENT_HEADER as usize;
    let mut records = Vec::new();
    loop {
        let rest = &bytes[pos..];
        if rest.len() < RECORD_HEADER as usize {
            break;
        }
        let len = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes"));
        let crc = u32::from_le_bytes(rest[8..12].try_into().expect("4 bytes"));
        let body = &rest[RECORD_HEADER as usize..];
        if len > body.len() as u64 {
            break;
        }
        let payload = &body[..len as usize];
        if crc32(payload) != crc {
            break;
        }
        pos += RECORD_HEADER as usize + len as usize;
        records.push((start_lsn + pos as u64 - SEGMENT_HEADER, payload.to_vec()));
    }
    Ok(SegmentScan {
        start_lsn,
        records,
        valid_len: pos as u64,
        torn: pos < bytes.len(),
    })
}

fn corrupt(reason: String) -> StorageError {
    StorageError::Internal(format!("corrupt log record: {reason}"))
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn put_ipc(out: &mut Vec<u8>, schema: &SchemaRef, blocks: &[RecordBatch]) -> Result<()> {
    let len_at = out.len();
    out.extend_from_slice(&0u64.to_le_bytes());
    let start = out.len();
    {
        let mut w = StreamWriter::try_new(&mut *out, schema)?;
        for b in blocks {
            w.write(b)?;
        }
        w.finish()?;
    }
    let len = (out.len() - start) as u64;
    out[len_at..start].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.bytes.len() < n {
            return Err(corrupt("the payload ends early".into()));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn str(&mut self) -> Result<String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| corrupt("a name is not UTF-8".into()))
    }

    fn file(&mut self) -> Result<FileRef> {
        let name = self.str()?;
        let len = u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"));
        let crc = self.u32()?;
        Ok(FileRef { name, len, crc })
    }

    fn ipc(&mut self) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let n = u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"));
        let n = usize::try_from(n).map_err(|_| corrupt("an oversized stream".into()))?;
        read_ipc_stream(self.take(n)?)
    }
}

/// The schema and batches of an Arrow IPC stream.
pub fn read_ipc_stream(bytes: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let reader = StreamReader::try_new(Cursor::new(bytes), None)?;
    let schema = reader.schema();
    let blocks = reader.collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((schema, blocks))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    fn table() -> Table {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec![Some("a"), None, Some("c")])),
            ],
        )
        .unwrap();
        Table::new("t", schema, vec![batch]).unwrap()
    }

    fn segment(records: &[Vec<u8>]) -> Vec<u8> {
        let mut bytes = segment_header(100).to_vec();
        for r in records {
            bytes.extend_from_slice(&frame(r));
        }
        bytes
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn operations_round_trip() {
        let t = Arc::new(table());
        let ops = [
            CatalogOp::CreateSchema("s".into()),
            CatalogOp::PutTable {
                schema: "s".into(),
                table: t.clone(),
            },
            CatalogOp::Append {
                schema: "s".into(),
                table: "t".into(),
                blocks: t.blocks().to_vec(),
            },
            CatalogOp::DropTable {
                schema: "s".into(),
                table: "t".into(),
            },
            CatalogOp::DropSchema("s".into()),
        ];
        let encoded: Vec<Vec<u8>> = ops.iter().map(|o| encode_op(o).unwrap()).collect();
        let decoded = decode_payload(&payload(&encoded)).unwrap();
        assert_eq!(decoded.len(), 5);
        match &decoded[1] {
            CatalogOp::PutTable { schema, table } => {
                assert_eq!(schema, "s");
                assert_eq!(table.name(), "t");
                assert_eq!(table.num_rows(), 3);
                assert_eq!(table.schema(), t.schema());
                assert_eq!(table.blocks()[0], t.blocks()[0]);
            }
            other => panic!("{other:?}"),
        }
        match &decoded[2] {
            CatalogOp::Append { blocks, .. } => assert_eq!(blocks[0], t.blocks()[0]),
            other => panic!("{other:?}"),
        }
        assert!(matches!(&decoded[4], CatalogOp::DropSchema(s) if s == "s"));
    }

    #[test]
    fn crc32_in_pieces_matches_crc32_of_the_whole() {
        // Every length around the 8-byte slices, split at every point.
        let bytes: Vec<u8> = (0..67u32).map(|i| (i * 37 + 11) as u8).collect();
        // The byte-at-a-time definition.
        let reference = |bytes: &[u8]| {
            let mut c = !0u32;
            for &b in bytes {
                c ^= b as u32;
                for _ in 0..8 {
                    c = if c & 1 != 0 {
                        0xEDB8_8320 ^ (c >> 1)
                    } else {
                        c >> 1
                    };
                }
            }
            !c
        };
        for len in 0..bytes.len() {
            let whole = &bytes[..len];
            assert_eq!(crc32(whole), reference(whole), "length {len}");
            for cut in 0..=len {
                let mut c = Crc32::default();
                c.update(&whole[..cut]);
                c.update(&whole[cut..]);
                assert_eq!(c.finish(), reference(whole), "length {len} cut {cut}");
            }
        }
    }

    #[test]
    fn operations_in_files_round_trip_through_the_loader() {
        let t = Arc::new(table());
        let file = FileRef {
            name: "00000000000000000007.arrow".into(),
            len: 1234,
            crc: 0xDEAD_BEEF,
        };
        let put = CatalogOp::PutTable {
            schema: "s".into(),
            table: t.clone(),
        };
        let append = CatalogOp::Append {
            schema: "s".into(),
            table: "t".into(),
            blocks: t.blocks().to_vec(),
        };
        let encoded = vec![
            encode_op_in_file(&put, &file).unwrap(),
            encode_op_in_file(&append, &file).unwrap(),
        ];
        // The record is small: the rows are not in it.
        assert!(encoded.iter().map(Vec::len).sum::<usize>() < 150);
        let bytes = payload(&encoded);
        let mut asked = Vec::new();
        let ops = decode_payload_with(&bytes, &mut |f: &FileRef| {
            asked.push(f.clone());
            Ok((t.schema().clone(), t.blocks().to_vec()))
        })
        .unwrap();
        assert_eq!(asked, vec![file.clone(), file.clone()]);
        assert!(
            matches!(&ops[0], CatalogOp::PutTable { table, .. } if table.num_rows() == 3 && table.name() == "t")
        );
        assert!(
            matches!(&ops[1], CatalogOp::Append { table, blocks, .. } if table == "t" && blocks.len() == 1)
        );
        // Without a loader such a record is an error, not an empty table.
        assert!(decode_payload(&bytes).is_err());
        assert!(encode_op_in_file(&CatalogOp::CreateSchema("s".into()), &file).is_err());
    }

    #[test]
    fn record_lsns_are_end_positions() {
        let bytes = segment(&[vec![1, 2, 3], vec![4; 10]]);
        let scan = scan_segment(&bytes).unwrap();
        assert_eq!(scan.start_lsn, 100);
        assert_eq!(scan.records[0].0, 100 + 12 + 3);
        assert_eq!(scan.records[1].0, 100 + 12 + 3 + 12 + 10);
        assert_eq!(scan.valid_len, bytes.len() as u64);
        assert!(!scan.torn);
    }

    #[test]
    fn a_torn_tail_ends_the_scan_at_the_last_whole_record() {
        let bytes = segment(&[vec![1, 2, 3], vec![4; 10]]);
        for cut in 1..(12 + 10) {
            let torn = &bytes[..bytes.len() - cut];
            let scan = scan_segment(torn).unwrap();
            assert_eq!(scan.records.len(), 1, "cut {cut}");
            assert_eq!(scan.valid_len, 16 + 12 + 3);
            assert!(scan.torn);
        }
    }

    #[test]
    fn a_flipped_bit_fails_the_checksum() {
        let mut bytes = segment(&[vec![1, 2, 3], vec![4; 10]]);
        let last = bytes.len() - 1;
        bytes[last] ^= 0x10;
        let scan = scan_segment(&bytes).unwrap();
        assert_eq!(scan.records.len(), 1);
        assert!(scan.torn);
        // A corrupt length (longer than the file) is a torn record too.
        let mut bytes = segment(&[vec![1, 2, 3]]);
        bytes[16] = 0xFF;
        let scan = scan_segment(&bytes).unwrap();
        assert!(scan.records.is_empty());
        assert!(scan.torn);
    }

    #[test]
    fn a_segment_of_another_format_is_refused() {
        let mut bytes = segment(&[vec![1]]);
        bytes[7] = b'9';
        assert!(scan_segment(&bytes).is_err());
        assert!(scan_segment(b"short").is_err());
    }

    #[test]
    fn a_payload_with_garbage_is_refused() {
        assert!(decode_payload(&[1, 0, 0, 0, 99]).is_err());
        assert!(decode_payload(&[2, 0, 0, 0]).is_err());
        let mut p = payload(&[encode_op(&CatalogOp::CreateSchema("x".into())).unwrap()]);
        p.push(0);
        assert!(decode_payload(&p).is_err());
    }
}

//! Raw PostgreSQL protocol messages, for tests that send what no driver would.

use std::io::Read;
use std::net::TcpStream;

/// A protocol 3.0 startup packet for `user` (database `stride`).
pub fn startup_packet(user: &str) -> Vec<u8> {
    let mut body = 196_608i32.to_be_bytes().to_vec();
    for (k, v) in [("user", user), ("database", "stride")] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut packet = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    packet.extend_from_slice(&body);
    packet
}

/// A frontend message: tag, length, body.
pub fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// A Query message carrying `sql` as given (any bytes).
pub fn query_bytes(sql: &[u8]) -> Vec<u8> {
    let mut body = sql.to_vec();
    body.push(0);
    message(b'Q', &body)
}

/// A Query message.
pub fn query_message(sql: &str) -> Vec<u8> {
    query_bytes(sql.as_bytes())
}

/// Reads backend messages until `until` is seen (or the stream ends);
/// returns the (tag, body) pairs.
pub fn read_until(stream: &mut TcpStream, until: u8) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    loop {
        let mut header = [0u8; 5];
        if stream.read_exact(&mut header).is_err() {
            return out;
        }
        let len = i32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        if stream.read_exact(&mut body).is_err() {
            return out;
        }
        let tag = header[0];
        out.push((tag, body));
        if tag == until {
            return out;
        }
    }
}

/// Reads at most `count` backend messages, stopping after a ReadyForQuery
/// (or when the stream ends).
#[allow(dead_code)]
pub fn read_messages(stream: &mut TcpStream, count: usize) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while out.len() < count {
        let mut header = [0u8; 5];
        if stream.read_exact(&mut header).is_err() {
            break;
        }
        let len = i32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        if stream.read_exact(&mut body).is_err() {
            break;
        }
        out.push((header[0], body));
        if header[0] == b'Z' {
            break;
        }
    }
    out
}

/// The SQLSTATE field of an ErrorResponse body.
pub fn sqlstate_of(body: &[u8]) -> String {
    body.split(|&b| b == 0)
        .find_map(|f| {
            f.strip_prefix(b"C")
                .map(|c| String::from_utf8_lossy(c).into_owned())
        })
        .unwrap_or_default()
}

/// The extended protocol's messages for running `sql` without parameters
/// through the unnamed statement and portal: Parse, Bind (text results),
/// Describe (portal) and Execute (every row); no Sync.
pub fn extended_messages(sql: &str) -> Vec<u8> {
    let (parse_bind, execute) = unnamed_portal(sql, 0);
    let mut out = parse_bind;
    out.extend(message(b'D', b"P\0"));
    out.extend(execute);
    out
}

/// Parse and Bind of `sql` as the unnamed statement and portal, an
/// Execute of at most `max_rows` rows, then Sync.
pub fn limited_messages(sql: &str, max_rows: i32) -> Vec<u8> {
    let (mut out, execute) = unnamed_portal(sql, max_rows);
    out.extend(execute);
    out.extend(sync_message());
    out
}

/// Parse and Bind (no parameters, text results) of `sql` as the unnamed
/// statement and portal, and an Execute of at most `max_rows` (0: all).
fn unnamed_portal(sql: &str, max_rows: i32) -> (Vec<u8>, Vec<u8>) {
    let mut parse = vec![0u8];
    parse.extend_from_slice(sql.as_bytes());
    parse.push(0);
    parse.extend_from_slice(&0i16.to_be_bytes());
    // Portal "", statement "", no parameter formats, no parameters, no
    // result formats.
    let mut bind = vec![0u8, 0u8];
    for count in [0i16, 0, 0] {
        bind.extend_from_slice(&count.to_be_bytes());
    }
    let mut execute = vec![0u8];
    execute.extend_from_slice(&max_rows.to_be_bytes());
    let mut out = message(b'P', &parse);
    out.extend(message(b'B', &bind));
    (out, message(b'E', &execute))
}

/// A Sync message.
pub fn sync_message() -> Vec<u8> {
    message(b'S', b"")
}

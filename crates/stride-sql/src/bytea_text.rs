//! PostgreSQL's text forms of bytea, read: the hex form (`\x6869`) and
//! the escape form (`a\000b`, `\\`). Parameters in text format, COPY's
//! text data and string literals cast to bytea are all read here, so that
//! `'\x6869'::bytea` is the two bytes PostgreSQL makes of it.

/// The bytes of a bytea in text form: PostgreSQL's hex form (`\x` then
/// pairs of hex digits, whitespace between pairs allowed) or its escape
/// form (`\\` a backslash, `\ooo` an octal byte, anything else itself).
pub fn decode(text: &str) -> Result<Vec<u8>, String> {
    let invalid = || format!("invalid input syntax for type bytea: \"{text}\"");
    if let Some(hex) = text.strip_prefix("\\x") {
        let digits: Vec<u8> = hex.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        if !digits.len().is_multiple_of(2) {
            return Err(invalid());
        }
        return digits
            .chunks(2)
            .map(|pair| {
                let nibble = |c: u8| (c as char).to_digit(16).ok_or_else(invalid);
                Ok((nibble(pair[0])? * 16 + nibble(pair[1])?) as u8)
            })
            .collect();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
        } else if bytes.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else {
            let octal = bytes.get(i + 1..i + 4).ok_or_else(invalid)?;
            let digit = |c: u8| match c {
                b'0'..=b'7' => Ok(u32::from(c - b'0')),
                _ => Err(invalid()),
            };
            let value = digit(octal[0])? * 64 + digit(octal[1])? * 8 + digit(octal[2])?;
            out.push(u8::try_from(value).map_err(|_| invalid())?);
            i += 4;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn reads_hex_and_escape_forms() {
        assert_eq!(decode("\\x6869ff").unwrap(), b"hi\xff");
        assert_eq!(decode("\\x68 69").unwrap(), b"hi");
        assert_eq!(decode("\\x").unwrap(), b"");
        assert_eq!(decode("hi").unwrap(), b"hi");
        assert_eq!(decode("a\\000b\\\\c\\377").unwrap(), b"a\0b\\c\xff");
        for bad in ["\\x6", "\\xzz", "a\\9", "a\\", "\\400"] {
            let e = decode(bad).unwrap_err();
            assert!(
                e.starts_with("invalid input syntax for type bytea"),
                "{bad}: {e}"
            );
        }
    }
}

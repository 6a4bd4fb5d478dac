//! SCRAM-SHA-256 verifiers (RFC 5802, RFC 7677): what the role catalog
//! keeps of a password.
//!
//! A [`Verifier`] holds the salt, the iteration count, the stored key and
//! the server key; never the password. The server's half of the exchange
//! lives in `stride-server` (`scram.rs`) and reads verifiers from the role
//! catalog ([`crate::roles`]); both use the primitives here. As PostgreSQL
//! does, the password is normalized with SASLprep when it is valid UTF-8
//! that SASLprep accepts and used as raw bytes otherwise, and a verifier may
//! be given in PostgreSQL's text form (`SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`,
//! what psql's `\password` sends) instead of a password.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// The mechanism name.
pub const MECHANISM: &str = "SCRAM-SHA-256";
/// PBKDF2 iterations for verifiers made here (PostgreSQL's default).
pub const ITERATIONS: u32 = 4096;
/// Bytes of salt (PostgreSQL: 16).
pub const SALT_BYTES: usize = 16;
/// Most PBKDF2 iterations a verifier given as text may ask for: every
/// authentication makes the client, not the server, run them, but an
/// absurd count is a typo.
const MAX_ITERATIONS: u32 = 10_000_000;

type HmacSha256 = Hmac<Sha256>;

/// HMAC-SHA-256.
pub fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// PBKDF2-HMAC-SHA-256 with one output block (RFC 8018 §5.2, dkLen = 32).
pub fn salted_password(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut block = salt.to_vec();
    block.extend_from_slice(&1u32.to_be_bytes());
    let mut u = hmac(password, &block);
    let mut out = u;
    for _ in 1..iterations {
        u = hmac(password, &u);
        for (o, x) in out.iter_mut().zip(u) {
            *o ^= x;
        }
    }
    out
}

/// The password as SCRAM hashes it: SASLprep'd when possible.
pub fn normalize(password: &str) -> Vec<u8> {
    match stringprep::saslprep(password) {
        Ok(p) => p.into_owned().into_bytes(),
        Err(_) => password.as_bytes().to_vec(),
    }
}

/// Fresh random bytes from the OS.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf).expect("the OS random number generator failed");
    buf
}

/// What the server stores of a password.
#[derive(Clone, PartialEq, Eq)]
pub struct Verifier {
    salt: Vec<u8>,
    iterations: u32,
    stored_key: [u8; 32],
    server_key: [u8; 32],
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verifier(SCRAM-SHA-256, secret)")
    }
}

impl Verifier {
    /// A verifier of `password` with a fresh random salt from the OS.
    pub fn new(password: &str) -> Verifier {
        Verifier::with_salt(password, &random_bytes(SALT_BYTES), ITERATIONS)
    }

    /// A verifier of `password` with the given salt (tests, seeded callers).
    pub fn with_salt(password: &str, salt: &[u8], iterations: u32) -> Verifier {
        let salted = salted_password(&normalize(password), salt, iterations);
        let client_key = hmac(&salted, b"Client Key");
        Verifier {
            salt: salt.to_vec(),
            iterations,
            stored_key: Sha256::digest(client_key).into(),
            server_key: hmac(&salted, b"Server Key"),
        }
    }

    /// A verifier from its parts (the server's stand-in for a role that
    /// does not exist: no password proves it).
    pub fn from_keys(
        salt: &[u8],
        iterations: u32,
        stored_key: [u8; 32],
        server_key: [u8; 32],
    ) -> Verifier {
        Verifier {
            salt: salt.to_vec(),
            iterations,
            stored_key,
            server_key,
        }
    }

    /// PostgreSQL's text form of a verifier,
    /// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64
    /// fields); `None` when `text` is not one.
    pub fn parse(text: &str) -> Option<Verifier> {
        let rest = text.strip_prefix("SCRAM-SHA-256$")?;
        let (params, keys) = rest.split_once('$')?;
        let (iterations, salt) = params.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        let iterations: u32 = iterations.parse().ok()?;
        if !(1..=MAX_ITERATIONS).contains(&iterations) {
            return None;
        }
        let salt = B64.decode(salt).ok()?;
        let stored_key: [u8; 32] = B64.decode(stored).ok()?.try_into().ok()?;
        let server_key: [u8; 32] = B64.decode(server).ok()?.try_into().ok()?;
        (!salt.is_empty()).then_some(Verifier {
            salt,
            iterations,
            stored_key,
            server_key,
        })
    }

    /// The verifier in PostgreSQL's text form (what [`Verifier::parse`]
    /// reads; `pg_authid.rolpassword`).
    pub fn to_pg_text(&self) -> String {
        format!(
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            B64.encode(&self.salt),
            B64.encode(self.stored_key),
            B64.encode(self.server_key)
        )
    }

    pub fn salt(&self) -> &[u8] {
        &self.salt
    }

    pub fn iterations(&self) -> u32 {
        self.iterations
    }

    pub fn stored_key(&self) -> &[u8; 32] {
        &self.stored_key
    }

    pub fn server_key(&self) -> &[u8; 32] {
        &self.server_key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_text_form_round_trips() {
        let v = Verifier::with_salt("pencil", b"0123456789abcdef", 4096);
        let text = v.to_pg_text();
        assert!(text.starts_with("SCRAM-SHA-256$4096:MDEyMzQ1Njc4OWFiY2RlZg==$"));
        assert_eq!(Verifier::parse(&text), Some(v));
        for bad in [
            "pencil",
            "SCRAM-SHA-256$",
            "SCRAM-SHA-256$4096:c2FsdA==$short:short",
            "SCRAM-SHA-256$0:c2FsdA==$AAAA:AAAA",
            "md5abcdef",
        ] {
            assert!(Verifier::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn salts_are_fresh() {
        assert_ne!(Verifier::new("x").salt(), Verifier::new("x").salt());
        assert_eq!(Verifier::new("x").salt().len(), SALT_BYTES);
    }
}

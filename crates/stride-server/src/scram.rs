//! SCRAM-SHA-256 authentication (RFC 5802, RFC 7677), the exchange
//! PostgreSQL uses by default since version 14.
//!
//! ```text
//!  server: AuthenticationSASL ["SCRAM-SHA-256"]
//!  client: SASLInitialResponse  "n,,n=,r=<client nonce>"            (client-first)
//!  server: AuthenticationSASLContinue "r=<nonce>,s=<salt>,i=<iter>" (server-first)
//!  client: SASLResponse "c=biws,r=<nonce>,p=<proof>"                (client-final)
//!  server: AuthenticationSASLFinal "v=<server signature>", then AuthenticationOk
//! ```
//!
//! The server keeps only a [`Verifier`] (salt, iteration count, stored key,
//! server key) per role, in the engine's role catalog
//! (`stride_sql::roles`; the type and its derivation live in
//! `stride_sql::scram`), never the password. The client proves it knows the password
//! without sending it; the server proves it knows the verifier. As in
//! PostgreSQL, the user name inside the exchange is ignored (the startup
//! packet's counts), channel binding is not offered (a client that insists
//! on it is refused), and the password is normalized with SASLprep when it
//! is valid UTF-8 that SASLprep accepts, used as raw bytes otherwise.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use stride_sql::scram::hmac;
pub use stride_sql::scram::{random_bytes, Verifier, ITERATIONS, MECHANISM};

/// Bytes of server nonce (PostgreSQL: 18).
const NONCE_BYTES: usize = 18;

/// Why an exchange failed. Every variant is answered with 28P01 (or 08P01
/// for a malformed message) and the connection closes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScramError {
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("channel binding is not supported")]
    ChannelBinding,
    #[error("the nonce does not match")]
    Nonce,
    #[error("wrong password")]
    Proof,
}

/// One exchange, between the client's first message and its final one.
#[derive(Debug)]
pub struct Exchange {
    client_first_bare: String,
    server_first: String,
    nonce: String,
    gs2_header: String,
}

/// Reads `key=value` attributes separated by commas.
fn attribute(part: Option<&str>, key: char) -> Result<&str, ScramError> {
    part.and_then(|p| p.strip_prefix(key))
        .and_then(|p| p.strip_prefix('='))
        .ok_or(ScramError::Malformed("missing attribute"))
}

impl Exchange {
    /// Handles the client-first message; returns the exchange and the
    /// server-first message to send.
    pub fn start(
        verifier: &Verifier,
        client_first: &[u8],
    ) -> Result<(Exchange, String), ScramError> {
        Exchange::start_with_nonce(
            verifier,
            client_first,
            &B64.encode(random_bytes(NONCE_BYTES)),
        )
    }

    fn start_with_nonce(
        verifier: &Verifier,
        client_first: &[u8],
        server_nonce: &str,
    ) -> Result<(Exchange, String), ScramError> {
        let text =
            std::str::from_utf8(client_first).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        // gs2-header: cbind-flag "," [authzid] ","
        let mut parts = text.splitn(3, ',');
        let flag = parts.next().ok_or(ScramError::Malformed("empty"))?;
        let authzid = parts.next().ok_or(ScramError::Malformed("no gs2 header"))?;
        let bare = parts
            .next()
            .ok_or(ScramError::Malformed("no client-first-bare"))?;
        match flag {
            "n" | "y" => {}
            f if f.starts_with("p=") => return Err(ScramError::ChannelBinding),
            _ => return Err(ScramError::Malformed("bad channel binding flag")),
        }
        if !authzid.is_empty() {
            return Err(ScramError::Malformed(
                "authorization identities are not supported",
            ));
        }
        let mut attrs = bare.split(',');
        let first = attrs.next();
        if first.is_some_and(|a| a.starts_with("m=")) {
            return Err(ScramError::Malformed(
                "mandatory extensions are not supported",
            ));
        }
        // The user name (n=) is ignored, as in PostgreSQL.
        attribute(first, 'n')?;
        let client_nonce = attribute(attrs.next(), 'r')?;
        if client_nonce.is_empty()
            || !client_nonce
                .bytes()
                .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
        {
            return Err(ScramError::Malformed("bad client nonce"));
        }
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(verifier.salt()),
            verifier.iterations()
        );
        Ok((
            Exchange {
                client_first_bare: bare.to_string(),
                server_first: server_first.clone(),
                nonce,
                gs2_header: format!("{flag},{authzid},"),
            },
            server_first,
        ))
    }

    /// Verifies the client-final message; returns the server-final message.
    pub fn finish(self, verifier: &Verifier, client_final: &[u8]) -> Result<String, ScramError> {
        let text =
            std::str::from_utf8(client_final).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (without_proof, proof) = text
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut attrs = without_proof.split(',');
        let binding = attribute(attrs.next(), 'c')?;
        if B64.decode(binding).ok().as_deref() != Some(self.gs2_header.as_bytes()) {
            return Err(ScramError::ChannelBinding);
        }
        if attribute(attrs.next(), 'r')? != self.nonce {
            return Err(ScramError::Nonce);
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("proof is not base64"))?;
        if proof.len() != 32 {
            return Err(ScramError::Malformed("proof has the wrong length"));
        }
        let auth_message = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let client_signature = hmac(verifier.stored_key(), auth_message.as_bytes());
        let mut client_key = [0u8; 32];
        for (k, (p, s)) in client_key
            .iter_mut()
            .zip(proof.iter().zip(client_signature))
        {
            *k = p ^ s;
        }
        let computed: [u8; 32] = Sha256::digest(client_key).into();
        // Constant time: the comparison does not stop at the first difference.
        let differs = computed
            .iter()
            .zip(verifier.stored_key())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if differs != 0 {
            return Err(ScramError::Proof);
        }
        let server_signature = hmac(verifier.server_key(), auth_message.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stride_sql::scram::{normalize, salted_password};

    /// The client's side, written from RFC 5802 §3 for the test.
    fn client_final(
        password: &str,
        client_first_bare: &str,
        server_first: &str,
    ) -> (String, String) {
        let mut salt = None;
        let mut iterations = None;
        let mut nonce = None;
        for a in server_first.split(',') {
            match a.split_at(2) {
                ("r=", v) => nonce = Some(v.to_string()),
                ("s=", v) => salt = Some(B64.decode(v).unwrap()),
                ("i=", v) => iterations = Some(v.parse().unwrap()),
                _ => {}
            }
        }
        let salted = salted_password(&normalize(password), &salt.unwrap(), iterations.unwrap());
        let client_key = hmac(&salted, b"Client Key");
        let stored_key: [u8; 32] = Sha256::digest(client_key).into();
        let without_proof = format!("c=biws,r={}", nonce.unwrap());
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let signature = hmac(&stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = hmac(&salted, b"Server Key");
        let expected_server = format!("v={}", B64.encode(hmac(&server_key, auth.as_bytes())));
        (
            format!("{without_proof},p={}", B64.encode(proof)),
            expected_server,
        )
    }

    #[test]
    fn pbkdf2_matches_the_rfc_7914_vector() {
        // RFC 7914 §11: PBKDF2-HMAC-SHA256, P="passwd", S="salt", c=1.
        let out = salted_password(b"passwd", b"salt", 1);
        assert_eq!(
            out[..16],
            [
                0x55, 0xac, 0x04, 0x6e, 0x56, 0xe3, 0x08, 0x9f, 0xec, 0x16, 0x91, 0xc2, 0x25, 0x44,
                0xb6, 0x05
            ]
        );
    }

    #[test]
    fn rfc_7677_example_exchange() {
        // RFC 7677 §3: user "user", password "pencil".
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let v = Verifier::with_salt("pencil", &salt, 4096);
        let (ex, server_first) = Exchange::start_with_nonce(
            &v,
            b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        )
        .unwrap();
        assert_eq!(
            server_first,
            "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let server_final = ex
            .finish(
                &v,
                b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
            )
            .unwrap();
        assert_eq!(
            server_final,
            "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }

    #[test]
    fn wrong_passwords_nonces_and_bindings_are_refused() {
        let v = Verifier::new("secret");
        let bare = "n=,r=abcdef";
        let (ex, server_first) = Exchange::start(&v, format!("n,,{bare}").as_bytes()).unwrap();
        let (good, expected) = client_final("secret", bare, &server_first);
        assert_eq!(ex.finish(&v, good.as_bytes()).unwrap(), expected);

        let (ex, server_first) = Exchange::start(&v, format!("n,,{bare}").as_bytes()).unwrap();
        let (bad, _) = client_final("wrong", bare, &server_first);
        assert_eq!(ex.finish(&v, bad.as_bytes()), Err(ScramError::Proof));

        let (ex, server_first) = Exchange::start(&v, format!("n,,{bare}").as_bytes()).unwrap();
        let (good, _) = client_final("secret", bare, &server_first);
        let tampered = good.replacen("r=abcdef", "r=abcdeX", 1);
        assert_eq!(ex.finish(&v, tampered.as_bytes()), Err(ScramError::Nonce));

        assert_eq!(
            Exchange::start(&v, b"p=tls-server-end-point,,n=,r=x").unwrap_err(),
            ScramError::ChannelBinding
        );
        for garbage in [
            &b""[..],
            b"n,,",
            b"x,,n=,r=a",
            b"n,,n=,r=",
            b"\xff\xfe",
            b"n,a=b,n=,r=a",
        ] {
            assert!(Exchange::start(&v, garbage).is_err(), "{garbage:?}");
        }
    }
}

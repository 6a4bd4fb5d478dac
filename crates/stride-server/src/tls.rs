//! TLS through rustls: a connection's byte stream, plain or encrypted.
//!
//! A client asks for TLS with an SSLRequest before its startup packet; the
//! server answers `S` and the TLS handshake follows on the same socket (or
//! `N` when no certificate is configured). With
//! [`crate::ServerConfig::require_tls`], a client that starts up in plain text
//! is refused (SQLSTATE 28000).

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// Why a certificate or key could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The server side of TLS: certificate chain and private key.
#[derive(Clone)]
pub struct TlsAcceptor(tokio_rustls::TlsAcceptor);

impl std::fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsAcceptor")
    }
}

impl TlsAcceptor {
    /// Loads a PEM certificate chain and a PEM private key (PKCS#8, PKCS#1 or
    /// SEC1), as PostgreSQL's `ssl_cert_file` and `ssl_key_file`.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
        let file_error = |path: &Path, e: &dyn std::fmt::Display| TlsError::File {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        let certs = CertificateDer::pem_file_iter(cert)
            .map_err(|e| file_error(cert, &e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| file_error(cert, &e))?;
        if certs.is_empty() {
            return Err(file_error(cert, &"no certificate in the file"));
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, &e))?;
        TlsAcceptor::new(certs, key)
    }

    /// An acceptor for a certificate chain and its key.
    pub fn new(
        certs: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<TlsAcceptor, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        Ok(TlsAcceptor(tokio_rustls::TlsAcceptor::from(Arc::new(
            config,
        ))))
    }

    /// Runs the handshake on an accepted socket.
    pub(crate) async fn accept(&self, tcp: TcpStream) -> io::Result<Stream> {
        let tls = self.0.accept(tcp).await?;
        Ok(Stream::Tls(Box::new(tls)))
    }
}

/// A connection's byte stream.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
    /// Taken for a TLS upgrade (never read or written).
    Upgrading,
}

impl Stream {
    /// The socket underneath.
    pub(crate) fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Stream::Plain(s) => Some(s),
            Stream::Tls(t) => Some(t.get_ref().0),
            Stream::Upgrading => None,
        }
    }

    pub(crate) fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }
}

fn upgrading() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "stream taken for a TLS upgrade",
    )
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_read(cx, buf),
            Stream::Upgrading => Poll::Ready(Err(upgrading())),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_write(cx, buf),
            Stream::Upgrading => Poll::Ready(Err(upgrading())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_flush(cx),
            Stream::Upgrading => Poll::Ready(Err(upgrading())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_shutdown(cx),
            Stream::Upgrading => Poll::Ready(Err(upgrading())),
        }
    }
}

//! `EngineError`: what the engine-wide runtime refuses, one variant per
//! kind a client must tell apart. The SQL front end carries each variant
//! to its own typed error and the server to a SQLSTATE; no message is read.

use stride_exec::ExecError;
use stride_storage::StorageError;

/// Errors of the engine-wide runtime.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A query's execution failed (its kind: [`ExecError::kind`]).
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The catalog or the data directory refused.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// An engine-wide setting refused; `kind` says why.
    #[error("{message}")]
    Setting { kind: SettingKind, message: String },
    /// Not permitted (SQLSTATE 42501): a server-side file outside what
    /// [`crate::FileAccess`] allows.
    #[error("{0}")]
    InsufficientPrivilege(String),
    /// A server-side file that does not exist (SQLSTATE 58P01).
    #[error("{0}")]
    UndefinedFile(String),
    /// An object of another kind than needed: a location that is not a
    /// regular file (SQLSTATE 42809).
    #[error("{0}")]
    WrongObjectType(String),
    /// A broken invariant.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Why a setting (`SET`, `SHOW`) was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingKind {
    /// No parameter of that name (42704).
    Unrecognized,
    /// A value the parameter does not take (22023).
    InvalidValue,
    /// A parameter fixed for the server's lifetime, or one that needs
    /// what this engine lacks (55P02).
    ReadOnly,
}

impl EngineError {
    /// An [`EngineError::Setting`] of `kind`.
    pub fn setting(kind: SettingKind, message: impl Into<String>) -> Self {
        EngineError::Setting {
            kind,
            message: message.into(),
        }
    }
}

impl From<arrow::error::ArrowError> for EngineError {
    fn from(e: arrow::error::ArrowError) -> Self {
        EngineError::Exec(ExecError::Arrow(e))
    }
}

/// The engine's result type.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

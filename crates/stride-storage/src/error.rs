use arrow::error::ArrowError;

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("schema \"{0}\" does not exist")]
    SchemaNotFound(String),
    #[error("table \"{0}\" does not exist")]
    TableNotFound(String),
    #[error("{kind} \"{name}\" already exists")]
    AlreadyExists { kind: &'static str, name: String },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("Arrow error: {0}")]
    Arrow(#[from] ArrowError),
    #[error("Parquet error: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

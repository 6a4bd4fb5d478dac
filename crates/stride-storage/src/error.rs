use arrow::error::ArrowError;

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("schema \"{0}\" does not exist")]
    SchemaNotFound(String),
    #[error("table \"{0}\" does not exist")]
    TableNotFound(String),
    #[error("{kind} \"{name}\" already exists")]
    AlreadyExists { kind: ObjectKind, name: String },
    /// `DROP SCHEMA` without `CASCADE` of a schema that still holds tables.
    #[error("cannot drop schema \"{0}\" because other objects depend on it (use CASCADE)")]
    SchemaNotEmpty(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A write would give a key declared `PRIMARY KEY` or `UNIQUE` a value
    /// the table already holds (SQLSTATE 23505).
    #[error("duplicate key value violates unique constraint \"{constraint}\"")]
    UniqueViolation {
        constraint: String,
        table: String,
        /// PostgreSQL's detail line: `Key (a)=(1) already exists.`
        detail: String,
    },
    /// A NULL written to a `NOT NULL` column (SQLSTATE 23502).
    #[error(
        "null value in column \"{column}\" of relation \"{table}\" violates not-null constraint"
    )]
    NotNullViolation { column: String, table: String },
    /// A string longer than its column's declared length (SQLSTATE 22001);
    /// the column's type as PostgreSQL names it.
    #[error("value too long for type {0}")]
    StringTooLong(String),
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("Arrow error: {0}")]
    Arrow(#[from] ArrowError),
    #[error("Parquet error: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// A commit found that a concurrent transaction committed a change to
    /// what it wrote first (first committer wins; SQLSTATE 40001).
    #[error("could not serialize access due to concurrent update: {0}")]
    SerializationFailure(String),
    /// A data directory whose contents cannot be recovered (an unknown
    /// format version, a corrupt checkpoint, a gap in the log): Stride
    /// refuses to start rather than start empty.
    #[error("cannot recover data directory {path}: {reason}")]
    Unrecoverable { path: String, reason: String },
    /// Another process holds the data directory's lock.
    #[error("data directory {path} is in use by another process ({holder})")]
    DataDirInUse { path: String, holder: String },
    #[error("internal error: {0}")]
    Internal(String),
}

impl StorageError {
    /// An I/O error on `path`.
    pub fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        StorageError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// The kind of catalog object an error is about, so that callers tell a
/// duplicate schema from a duplicate table without reading the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Schema,
    Table,
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ObjectKind::Schema => "schema",
            ObjectKind::Table => "table",
        })
    }
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

use arrow::error::ArrowError;
use datafusion_common::DataFusionError;
use stride_sched::QueryError;
use stride_storage::StorageError;

use crate::memory::MemoryScope;

/// Errors of the executor.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The plan uses something Stride does not execute yet; names the construct.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// Evaluating an expression failed (division by zero, overflow, bad cast…).
    #[error("{0}")]
    DataFusion(DataFusionError),
    #[error("{0}")]
    Arrow(#[from] ArrowError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A query-level failure reported by the scheduler (cancelled, panicked…).
    #[error(transparent)]
    Query(#[from] QueryError),
    /// A scalar subquery returned more than one row.
    #[error("{0}")]
    CardinalityViolation(String),
    /// A function's argument it refuses (`generate_series` with a step of
    /// zero; SQLSTATE 22023).
    #[error("{0}")]
    InvalidParameter(String),
    /// A charge to the query's memory account was refused (SQLSTATE 53200).
    #[error("out of memory: {what} needs {} more, the query holds {} and {} is {}", crate::memory::format_bytes(*requested), crate::memory::format_bytes(*used), match scope { MemoryScope::Query => "the query's share (stride.query_memory_limit)", MemoryScope::Server => "the server's memory limit (stride.memory_limit)" }, crate::memory::format_bytes(*limit))]
    MemoryExhausted {
        scope: MemoryScope,
        what: String,
        requested: usize,
        /// Bytes held when refused: the query's own, or all queries' for `Server`.
        used: usize,
        limit: usize,
    },
    /// The query allocated while the whole process was past its allocation
    /// limit ([`crate::alloc_guard`]; SQLSTATE 53200, as a failed `malloc`
    /// in a PostgreSQL backend).
    #[error("out of memory: the server had allocated {} of its allocation limit (stride.allocation_limit) of {} when this query allocated more", crate::memory::format_bytes(*allocated), crate::memory::format_bytes(*limit))]
    AllocationLimit { allocated: usize, limit: usize },
    /// A function was asked to build a value larger than one value may be
    /// (SQLSTATE 54000, PostgreSQL's "requested length too large").
    #[error("requested length too large: {function} would build {} and one value may hold at most {}", crate::memory::format_bytes(*requested), crate::memory::format_bytes(*limit))]
    ValueTooLarge {
        function: String,
        requested: usize,
        limit: usize,
    },
    /// A query's spill files would hold more than `temp_file_limit`
    /// (SQLSTATE 53400, as PostgreSQL's).
    #[error("temporary file size exceeds temp_file_limit ({limit_kb}kB)")]
    TempFileLimit { limit_kb: u64 },
    /// Writing or reading a spill file failed.
    #[error("could not write or read spill file \"{}\": {source}", path.display())]
    SpillIo {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// A broken invariant of the executor itself.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ExecError {
    pub(crate) fn spill_io(path: &std::path::Path, source: std::io::Error) -> Self {
        ExecError::SpillIo {
            path: path.to_path_buf(),
            source,
        }
    }
}

pub type Result<T, E = ExecError> = std::result::Result<T, E>;

/// A DataFusion error, or the executor error it carries (Stride's own
/// functions raise typed errors through DataFusion, e.g.
/// [`ExecError::ValueTooLarge`]): that one comes back as itself.
impl From<DataFusionError> for ExecError {
    fn from(e: DataFusionError) -> Self {
        match e {
            DataFusionError::External(inner) => match inner.downcast::<ExecError>() {
                Ok(exec) => *exec,
                Err(other) => ExecError::DataFusion(DataFusionError::External(other)),
            },
            other => ExecError::DataFusion(other),
        }
    }
}

/// The kinds of error a client must tell apart (each has its own SQLSTATE),
/// read from the typed error chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A result out of its type's range (arithmetic overflow).
    Overflow,
    DivisionByZero,
    /// A memory limit refused a charge.
    OutOfMemory,
    /// The query was cancelled (by a client, a timeout or a disconnect).
    Cancelled,
    /// A scalar subquery returned more than one row.
    CardinalityViolation,
    /// A value could not be computed from its input (a bad cast, a string
    /// that does not parse, an invalid argument).
    InvalidData,
    /// A value larger than one value may be.
    ValueTooLarge,
    /// A function's argument it refuses.
    InvalidParameter,
    /// A query's spill files passed `temp_file_limit`.
    TempFileLimit,
    /// The spill directory's file system is full.
    DiskFull,
}

impl ExecError {
    /// The kind of error this is, looking through the errors that tasks
    /// returned to the scheduler; `None` for every other error.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            ExecError::MemoryExhausted { .. } | ExecError::AllocationLimit { .. } => {
                Some(ErrorKind::OutOfMemory)
            }
            ExecError::ValueTooLarge { .. } => Some(ErrorKind::ValueTooLarge),
            ExecError::TempFileLimit { .. } => Some(ErrorKind::TempFileLimit),
            ExecError::SpillIo { source, .. } => io_kind(source),
            ExecError::CardinalityViolation(_) => Some(ErrorKind::CardinalityViolation),
            ExecError::InvalidParameter(_) => Some(ErrorKind::InvalidParameter),
            ExecError::Query(QueryError::Cancelled) => Some(ErrorKind::Cancelled),
            ExecError::DataFusion(e) => datafusion_kind(e),
            ExecError::Arrow(e) => arrow_kind(e),
            ExecError::Query(QueryError::Failed(task)) => {
                let inner = &task.0;
                if let Some(e) = inner.downcast_ref::<ExecError>() {
                    e.kind()
                } else if let Some(e) = inner.downcast_ref::<DataFusionError>() {
                    datafusion_kind(e)
                } else {
                    inner.downcast_ref::<ArrowError>().and_then(arrow_kind)
                }
            }
            _ => None,
        }
    }
}

fn datafusion_kind(e: &DataFusionError) -> Option<ErrorKind> {
    match e.find_root() {
        DataFusionError::ArrowError(a, _) => arrow_kind(a),
        DataFusionError::External(x) => match x.downcast_ref::<ExecError>() {
            Some(e) => e.kind(),
            None => x.downcast_ref::<ArrowError>().and_then(arrow_kind),
        },
        DataFusionError::Execution(_) => Some(ErrorKind::InvalidData),
        _ => None,
    }
}

fn io_kind(e: &std::io::Error) -> Option<ErrorKind> {
    (e.raw_os_error() == Some(libc::ENOSPC)).then_some(ErrorKind::DiskFull)
}

fn arrow_kind(e: &ArrowError) -> Option<ErrorKind> {
    match e {
        ArrowError::IoError(_, io) => io_kind(io),
        ArrowError::ArithmeticOverflow(_) => Some(ErrorKind::Overflow),
        ArrowError::DivideByZero => Some(ErrorKind::DivisionByZero),
        ArrowError::CastError(_)
        | ArrowError::ParseError(_)
        | ArrowError::InvalidArgumentError(_)
        | ArrowError::ComputeError(_) => Some(ErrorKind::InvalidData),
        _ => None,
    }
}

impl From<ExecError> for stride_sched::TaskError {
    fn from(e: ExecError) -> Self {
        stride_sched::TaskError::new(e)
    }
}

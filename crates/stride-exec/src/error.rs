use arrow::error::ArrowError;
use datafusion_common::DataFusionError;
use stride_sched::QueryError;
use stride_storage::StorageError;

/// Errors of the executor.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The plan uses something Stride does not execute yet; names the construct.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// Evaluating an expression failed (division by zero, overflow, bad cast…).
    #[error("{0}")]
    DataFusion(#[from] DataFusionError),
    #[error("{0}")]
    Arrow(#[from] ArrowError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A query-level failure reported by the scheduler (cancelled, panicked…).
    #[error(transparent)]
    Query(#[from] QueryError),
    /// A scalar subquery returned more than one row, and similar data errors.
    #[error("{0}")]
    Data(String),
    /// A broken invariant of the executor itself.
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = ExecError> = std::result::Result<T, E>;

impl From<ExecError> for stride_sched::TaskError {
    fn from(e: ExecError) -> Self {
        stride_sched::TaskError::new(e)
    }
}

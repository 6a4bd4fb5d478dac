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

/// The kinds of data error a client must tell apart (each has its own
/// SQLSTATE), read from the typed error chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataErrorKind {
    /// A result out of its type's range (arithmetic overflow).
    Overflow,
    DivisionByZero,
}

impl ExecError {
    /// The data error this is, looking through the errors that tasks
    /// returned to the scheduler; `None` for every other error.
    pub fn data_error_kind(&self) -> Option<DataErrorKind> {
        match self {
            ExecError::DataFusion(e) => datafusion_kind(e),
            ExecError::Arrow(e) => arrow_kind(e),
            ExecError::Query(QueryError::Failed(task)) => {
                let inner = &task.0;
                if let Some(e) = inner.downcast_ref::<ExecError>() {
                    e.data_error_kind()
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

fn datafusion_kind(e: &DataFusionError) -> Option<DataErrorKind> {
    match e.find_root() {
        DataFusionError::ArrowError(a, _) => arrow_kind(a),
        DataFusionError::External(x) => x.downcast_ref::<ArrowError>().and_then(arrow_kind),
        _ => None,
    }
}

fn arrow_kind(e: &ArrowError) -> Option<DataErrorKind> {
    match e {
        ArrowError::ArithmeticOverflow(_) => Some(DataErrorKind::Overflow),
        ArrowError::DivideByZero => Some(DataErrorKind::DivisionByZero),
        _ => None,
    }
}

impl From<ExecError> for stride_sched::TaskError {
    fn from(e: ExecError) -> Self {
        stride_sched::TaskError::new(e)
    }
}

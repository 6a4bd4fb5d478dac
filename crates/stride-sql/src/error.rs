use datafusion_common::DataFusionError;
use stride_exec::ExecError;
use stride_storage::StorageError;

/// Errors of the SQL layer, one variant per kind a client must tell apart.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// The text is not valid SQL.
    #[error("syntax error: {0}")]
    Syntax(String),
    /// Valid SQL naming something that does not exist (table, column, function).
    #[error("{0}")]
    Undefined(String),
    /// Valid SQL that Stride does not support; names the construct.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// Planning failed otherwise (type errors, ambiguous names…).
    #[error("planning error: {0}")]
    Plan(String),
    #[error("invalid setting: {0}")]
    Setting(String),
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The statement was cancelled (a client's cancel request or disconnect).
    #[error("canceling statement due to user request")]
    Cancelled,
    /// No prepared statement of that name (SQLSTATE 26000).
    #[error("{0}")]
    UndefinedPreparedStatement(String),
    /// The session may not do this (SQLSTATE 42501).
    #[error("{0}")]
    InsufficientPrivilege(String),
    /// An object of that name exists already (SQLSTATE 42710): a role.
    #[error("{0}")]
    DuplicateObject(String),
    /// No object of that name (SQLSTATE 42704): a role.
    #[error("{0}")]
    UndefinedObject(String),
    /// The object cannot be dropped while others depend on it (SQLSTATE
    /// 2BP01): a role that owns tables, the bootstrap superuser.
    #[error("{0}")]
    DependentObjects(String),
    /// The object is in use (SQLSTATE 55006): the session's own role.
    #[error("{0}")]
    ObjectInUse(String),
    /// A privilege that does not apply to the object (SQLSTATE 0LP01).
    #[error("{0}")]
    InvalidGrant(String),
    /// A name the system reserves (SQLSTATE 42939): `public`, `pg_*`.
    #[error("{0}")]
    ReservedName(String),
    /// An integer result out of its type's range (SQLSTATE 22003).
    #[error("{0}")]
    NumericOutOfRange(String),
    /// The statement ran past its `statement_timeout`.
    #[error("canceling statement due to statement timeout")]
    Timeout,
    /// The statement is beyond what a stack may hold (SQLSTATE 54001).
    #[error("statement too complex: {0}")]
    TooComplex(String),
    /// A prepared statement's tables changed shape since it was prepared
    /// (PostgreSQL: "cached plan must not change result type").
    #[error("{0}")]
    PlanInvalidated(String),
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = SqlError> = std::result::Result<T, E>;

impl From<DataFusionError> for SqlError {
    fn from(e: DataFusionError) -> Self {
        match e.find_root() {
            DataFusionError::SQL(p, _) => SqlError::Syntax(p.to_string()),
            DataFusionError::NotImplemented(m) => SqlError::Unsupported(m.clone()),
            DataFusionError::SchemaError(s, _) => SqlError::Undefined(s.to_string()),
            DataFusionError::Plan(m) if m.contains("not found") => SqlError::Undefined(m.clone()),
            DataFusionError::Plan(m) => SqlError::Plan(m.clone()),
            DataFusionError::External(ext) => match ext.downcast_ref::<StorageError>() {
                Some(StorageError::TableNotFound(t)) => {
                    SqlError::Undefined(format!("table \"{t}\" does not exist"))
                }
                Some(StorageError::SchemaNotFound(s)) => {
                    SqlError::Undefined(format!("schema \"{s}\" does not exist"))
                }
                _ => SqlError::Plan(ext.to_string()),
            },
            other => SqlError::Exec(ExecError::DataFusion(DataFusionError::Internal(
                other.to_string(),
            ))),
        }
    }
}

use datafusion_common::{DataFusionError, SchemaError};
use stride_engine::EngineError;
use stride_exec::ExecError;
use stride_storage::StorageError;

/// Why a `SET` or `SHOW` was refused (the engine's kinds: engine-wide
/// settings are refused there).
pub use stride_engine::SettingKind;

/// Errors of the SQL layer, one variant per kind a client must tell apart.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// The text is not valid SQL.
    #[error("syntax error: {0}")]
    Syntax(String),
    /// Valid SQL naming something that does not exist; `kind` says what.
    #[error("{message}")]
    Undefined {
        kind: UndefinedKind,
        message: String,
    },
    /// Valid SQL that Stride does not support; names the construct.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// Planning failed otherwise; `kind` says why.
    #[error("planning error: {message}")]
    Plan { kind: PlanKind, message: String },
    /// `SET` / `SHOW` refused; `kind` says why.
    #[error("invalid setting: {message}")]
    Setting { kind: SettingKind, message: String },
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
    /// No savepoint of that name (SQLSTATE 3B001).
    #[error("{0}")]
    UndefinedSavepoint(String),
    /// No cursor of that name (SQLSTATE 34000).
    #[error("{0}")]
    UndefinedCursor(String),
    /// A cursor of that name is open already (SQLSTATE 42P03).
    #[error("{0}")]
    DuplicateCursor(String),
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
    /// A literal that is not a value of its type (SQLSTATE 22P02): a
    /// bytea string in neither of PostgreSQL's forms.
    #[error("{0}")]
    InvalidTextRepresentation(String),
    /// A date, time or interval literal that cannot be read (SQLSTATE
    /// 22007).
    #[error("{0}")]
    InvalidDatetimeFormat(String),
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
    /// A statement in a transaction block that failed earlier (SQLSTATE
    /// 25P02).
    #[error("current transaction is aborted, commands ignored until end of transaction block")]
    InFailedTransaction,
    /// A write in a read-only transaction (SQLSTATE 25006).
    #[error("{0}")]
    ReadOnlyTransaction(String),
    #[error("internal error: {0}")]
    Internal(String),
}

/// What a statement named that does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UndefinedKind {
    /// A table or view (SQLSTATE 42P01).
    Table,
    /// A column of the tables in scope (42703).
    Column,
    /// A function of no registered name (42883).
    Function,
    /// A schema (3F000).
    Schema,
    /// A server-side file (58P01).
    File,
}

/// Why the planner refused a statement that names only things that exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanKind {
    /// Types that do not fit together: an operator's operands, a function's
    /// arguments, the branches of a `CASE` (42804). Every refusal of
    /// DataFusion's analyzer, whose work is type coercion.
    DatatypeMismatch,
    /// An unqualified column name that more than one table in scope has
    /// (42702).
    AmbiguousColumn,
    /// Two columns of one name where names must be unique (42701).
    DuplicateColumn,
    /// An object of another kind than the statement needs: a location that
    /// is not a regular file (42809).
    WrongObjectType,
    /// A statement that may not run inside a transaction block (25001).
    InTransactionBlock,
    /// The statement needs a transaction block (`DECLARE` without `WITH
    /// HOLD`; SQLSTATE 25P01).
    NoActiveTransaction,
    /// A table definition that contradicts itself: two primary keys
    /// (42P16).
    InvalidTableDefinition,
    /// An option value the statement does not take: a `COPY` delimiter
    /// of two characters, an unknown `COPY` format (22023).
    InvalidParameter,
    /// Anything else (42000).
    Other,
}

impl SqlError {
    /// An [`SqlError::Undefined`] of `kind`.
    pub fn undefined(kind: UndefinedKind, message: impl Into<String>) -> Self {
        SqlError::Undefined {
            kind,
            message: message.into(),
        }
    }

    /// An [`SqlError::Plan`] of `kind`.
    pub fn plan(kind: PlanKind, message: impl Into<String>) -> Self {
        SqlError::Plan {
            kind,
            message: message.into(),
        }
    }

    /// An [`SqlError::Setting`] of `kind`.
    pub fn setting(kind: SettingKind, message: impl Into<String>) -> Self {
        SqlError::Setting {
            kind,
            message: message.into(),
        }
    }
}

pub type Result<T, E = SqlError> = std::result::Result<T, E>;

/// An engine error as the SQL error of the same kind.
impl From<EngineError> for SqlError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Exec(e) => SqlError::Exec(e),
            EngineError::Storage(e) => SqlError::Storage(e),
            EngineError::Setting { kind, message } => SqlError::Setting { kind, message },
            EngineError::InsufficientPrivilege(m) => SqlError::InsufficientPrivilege(m),
            EngineError::UndefinedFile(m) => SqlError::undefined(UndefinedKind::File, m),
            EngineError::WrongObjectType(m) => SqlError::plan(PlanKind::WrongObjectType, m),
            EngineError::Internal(m) => SqlError::Internal(m),
        }
    }
}

/// A DataFusion error as the SQL error it stands for, classified by its
/// variant, never by its text. Layers of context DataFusion adds are peeled
/// off; an error Stride raised inside a DataFusion callback (a `SqlError` or
/// a `StorageError` or an `ExecError` carried by `DataFusionError::External`)
/// comes back as itself.
impl From<DataFusionError> for SqlError {
    fn from(e: DataFusionError) -> Self {
        let mut e = e;
        loop {
            e = match e {
                DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
                    *inner
                }
                DataFusionError::Shared(shared) => match std::sync::Arc::try_unwrap(shared) {
                    Ok(inner) => inner,
                    Err(shared) => return classify(&shared),
                },
                DataFusionError::External(ext) => {
                    let ext = match ext.downcast::<SqlError>() {
                        Ok(sql) => return *sql,
                        Err(other) => other,
                    };
                    let ext = match ext.downcast::<StorageError>() {
                        Ok(storage) => return SqlError::Storage(*storage),
                        Err(other) => other,
                    };
                    match ext.downcast::<DataFusionError>() {
                        Ok(inner) => *inner,
                        // An executor error (as itself) or one of no known
                        // type (an internal error).
                        Err(other) => {
                            return SqlError::Exec(ExecError::from(DataFusionError::External(
                                other,
                            )))
                        }
                    }
                }
                other => return classify(&other),
            }
        }
    }
}

/// The SQL error of a DataFusion error that carries no other error.
fn classify(e: &DataFusionError) -> SqlError {
    match e {
        DataFusionError::SQL(p, _) => SqlError::Syntax(p.to_string()),
        DataFusionError::NotImplemented(m) => SqlError::Unsupported(m.clone()),
        DataFusionError::SchemaError(s, _) => {
            let message = s.to_string();
            match s.as_ref() {
                SchemaError::FieldNotFound { .. } => {
                    SqlError::undefined(UndefinedKind::Column, message)
                }
                SchemaError::AmbiguousReference { .. } => {
                    SqlError::plan(PlanKind::AmbiguousColumn, message)
                }
                SchemaError::DuplicateQualifiedField { .. }
                | SchemaError::DuplicateUnqualifiedField { .. } => {
                    SqlError::plan(PlanKind::DuplicateColumn, message)
                }
            }
        }
        DataFusionError::Plan(m) => SqlError::plan(PlanKind::Other, m.clone()),
        // Wrappers are peeled before; one that could not be (a shared
        // error still referenced elsewhere) is looked into by reference.
        DataFusionError::Shared(inner) => classify(inner),
        DataFusionError::Context(_, inner) | DataFusionError::Diagnostic(_, inner) => {
            classify(inner)
        }
        other => SqlError::Exec(ExecError::DataFusion(DataFusionError::Internal(
            other.to_string(),
        ))),
    }
}

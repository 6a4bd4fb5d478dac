//! Engine errors as PostgreSQL SQLSTATE codes.

use stride_exec::ErrorKind;
use stride_sql::{PlanKind, SettingKind, SqlError, UndefinedKind};
use stride_storage::{ObjectKind, StorageError};

use crate::copy_format::CopyDataError;

pub const SYNTAX_ERROR: &str = "42601";
pub const UNDEFINED_TABLE: &str = "42P01";
pub const UNDEFINED_COLUMN: &str = "42703";
pub const UNDEFINED_FUNCTION: &str = "42883";
pub const UNDEFINED_OBJECT: &str = "42704";
pub const INVALID_SCHEMA_NAME: &str = "3F000";
pub const DUPLICATE_TABLE: &str = "42P07";
pub const DUPLICATE_SCHEMA: &str = "42P06";
pub const DUPLICATE_COLUMN: &str = "42701";
pub const AMBIGUOUS_COLUMN: &str = "42702";
pub const WRONG_OBJECT_TYPE: &str = "42809";
pub const ACTIVE_SQL_TRANSACTION: &str = "25001";
pub const CANT_CHANGE_RUNTIME_PARAM: &str = "55P02";
pub const UNDEFINED_FILE: &str = "58P01";
pub const IO_ERROR: &str = "58030";
pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
pub const QUERY_CANCELED: &str = "57014";
pub const PROTOCOL_VIOLATION: &str = "08P01";
pub const INVALID_PASSWORD: &str = "28P01";
pub const TOO_MANY_CONNECTIONS: &str = "53300";
pub const INVALID_PARAMETER_VALUE: &str = "22023";
pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
pub const INVALID_SQL_STATEMENT_NAME: &str = "26000";
pub const INVALID_CURSOR_NAME: &str = "34000";
pub const INVALID_SAVEPOINT_SPECIFICATION: &str = "3B001";
pub const DUPLICATE_CURSOR: &str = "42P03";
pub const NO_ACTIVE_SQL_TRANSACTION: &str = "25P01";
pub const DATA_EXCEPTION: &str = "22000";
pub const DIVISION_BY_ZERO: &str = "22012";
pub const CARDINALITY_VIOLATION: &str = "21000";
pub const DUPLICATE_OBJECT: &str = "42710";
pub const DATATYPE_MISMATCH: &str = "42804";
pub const INVALID_TABLE_DEFINITION: &str = "42P16";
pub const UNIQUE_VIOLATION: &str = "23505";
pub const NOT_NULL_VIOLATION: &str = "23502";
pub const STRING_DATA_RIGHT_TRUNCATION: &str = "22001";
pub const INTERNAL_ERROR: &str = "XX000";
pub const OUT_OF_MEMORY: &str = "53200";
/// A value larger than one value may be ("requested length too large").
pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
pub const DISK_FULL: &str = "53100";
pub const CONFIGURATION_LIMIT_EXCEEDED: &str = "53400";
pub const CHARACTER_NOT_IN_REPERTOIRE: &str = "22021";
pub const STATEMENT_TOO_COMPLEX: &str = "54001";
pub const NUMERIC_VALUE_OUT_OF_RANGE: &str = "22003";
pub const INVALID_DATETIME_FORMAT: &str = "22007";
pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
pub const INVALID_AUTHORIZATION_SPECIFICATION: &str = "28000";
pub const DEPENDENT_OBJECTS_STILL_EXIST: &str = "2BP01";
pub const OBJECT_IN_USE: &str = "55006";
pub const INVALID_GRANT_OPERATION: &str = "0LP01";
pub const RESERVED_NAME: &str = "42939";
pub const SERIALIZATION_FAILURE: &str = "40001";
pub const IN_FAILED_SQL_TRANSACTION: &str = "25P02";
pub const READ_ONLY_SQL_TRANSACTION: &str = "25006";
pub const DATA_CORRUPTED: &str = "XX001";
pub const BAD_COPY_FILE_FORMAT: &str = "22P04";
pub const INVALID_BINARY_REPRESENTATION: &str = "22P03";

/// The SQLSTATE of an engine error, read from its variant and typed kind
/// alone: no message is looked at.
pub fn of(e: &SqlError) -> &'static str {
    match e {
        SqlError::Syntax(_) => SYNTAX_ERROR,
        SqlError::Undefined { kind, .. } => match kind {
            UndefinedKind::Table => UNDEFINED_TABLE,
            UndefinedKind::Column => UNDEFINED_COLUMN,
            UndefinedKind::Function => UNDEFINED_FUNCTION,
            UndefinedKind::Schema => INVALID_SCHEMA_NAME,
            UndefinedKind::File => UNDEFINED_FILE,
        },
        SqlError::Unsupported(_) => FEATURE_NOT_SUPPORTED,
        SqlError::Plan { kind, .. } => match kind {
            PlanKind::DatatypeMismatch => DATATYPE_MISMATCH,
            PlanKind::AmbiguousColumn => AMBIGUOUS_COLUMN,
            PlanKind::DuplicateColumn => DUPLICATE_COLUMN,
            PlanKind::WrongObjectType => WRONG_OBJECT_TYPE,
            PlanKind::InTransactionBlock => ACTIVE_SQL_TRANSACTION,
            PlanKind::NoActiveTransaction => NO_ACTIVE_SQL_TRANSACTION,
            PlanKind::InvalidParameter => INVALID_PARAMETER_VALUE,
            PlanKind::InvalidTableDefinition => INVALID_TABLE_DEFINITION,
            PlanKind::Other => SYNTAX_ERROR_OR_ACCESS_RULE,
        },
        SqlError::Setting { kind, .. } => match kind {
            SettingKind::Unrecognized => UNDEFINED_OBJECT,
            SettingKind::InvalidValue => INVALID_PARAMETER_VALUE,
            SettingKind::ReadOnly => CANT_CHANGE_RUNTIME_PARAM,
        },
        SqlError::Cancelled | SqlError::Timeout => QUERY_CANCELED,
        SqlError::TooComplex(_) => STATEMENT_TOO_COMPLEX,
        SqlError::PlanInvalidated(_) => FEATURE_NOT_SUPPORTED,
        SqlError::NumericOutOfRange(_) => NUMERIC_VALUE_OUT_OF_RANGE,
        SqlError::InvalidDatetimeFormat(_) => INVALID_DATETIME_FORMAT,
        SqlError::InvalidTextRepresentation(_) => INVALID_TEXT_REPRESENTATION,
        SqlError::InsufficientPrivilege(_) => INSUFFICIENT_PRIVILEGE,
        SqlError::DuplicateObject(_) => DUPLICATE_OBJECT,
        SqlError::UndefinedObject(_) => UNDEFINED_OBJECT,
        SqlError::UndefinedCursor(_) => INVALID_CURSOR_NAME,
        SqlError::UndefinedSavepoint(_) => INVALID_SAVEPOINT_SPECIFICATION,
        SqlError::DuplicateCursor(_) => DUPLICATE_CURSOR,
        SqlError::DependentObjects(_) => DEPENDENT_OBJECTS_STILL_EXIST,
        SqlError::ObjectInUse(_) => OBJECT_IN_USE,
        SqlError::InvalidGrant(_) => INVALID_GRANT_OPERATION,
        SqlError::ReservedName(_) => RESERVED_NAME,
        SqlError::UndefinedPreparedStatement(_) => INVALID_SQL_STATEMENT_NAME,
        SqlError::Exec(e) => match e.kind() {
            Some(ErrorKind::Overflow) => NUMERIC_VALUE_OUT_OF_RANGE,
            Some(ErrorKind::DivisionByZero) => DIVISION_BY_ZERO,
            Some(ErrorKind::OutOfMemory) => OUT_OF_MEMORY,
            Some(ErrorKind::TempFileLimit) => CONFIGURATION_LIMIT_EXCEEDED,
            Some(ErrorKind::DiskFull) => DISK_FULL,
            Some(ErrorKind::Cancelled) => QUERY_CANCELED,
            Some(ErrorKind::CardinalityViolation) => CARDINALITY_VIOLATION,
            Some(ErrorKind::InvalidData) => DATA_EXCEPTION,
            Some(ErrorKind::ValueTooLarge) => PROGRAM_LIMIT_EXCEEDED,
            Some(ErrorKind::InvalidParameter) => INVALID_PARAMETER_VALUE,
            None => INTERNAL_ERROR,
        },
        SqlError::Storage(e) => match e {
            StorageError::SchemaNotFound(_) => INVALID_SCHEMA_NAME,
            StorageError::TableNotFound(_) => UNDEFINED_TABLE,
            StorageError::AlreadyExists { kind, .. } => match kind {
                ObjectKind::Schema => DUPLICATE_SCHEMA,
                ObjectKind::Table => DUPLICATE_TABLE,
            },
            StorageError::SchemaNotEmpty(_) => DEPENDENT_OBJECTS_STILL_EXIST,
            StorageError::InvalidArgument(_) => INVALID_PARAMETER_VALUE,
            StorageError::UniqueViolation { .. } => UNIQUE_VIOLATION,
            StorageError::NotNullViolation { .. } => NOT_NULL_VIOLATION,
            StorageError::StringTooLong(_) => STRING_DATA_RIGHT_TRUNCATION,
            StorageError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                UNDEFINED_FILE
            }
            StorageError::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull => {
                DISK_FULL
            }
            StorageError::Io { .. } => IO_ERROR,
            StorageError::SerializationFailure(_) => SERIALIZATION_FAILURE,
            StorageError::Unrecoverable { .. } => DATA_CORRUPTED,
            StorageError::DataDirInUse { .. } => OBJECT_IN_USE,
            // A file that is not what its format says.
            StorageError::Arrow(_) | StorageError::Parquet(_) => DATA_EXCEPTION,
            StorageError::Internal(_) => INTERNAL_ERROR,
        },
        SqlError::InFailedTransaction => IN_FAILED_SQL_TRANSACTION,
        SqlError::ReadOnlyTransaction(_) => READ_ONLY_SQL_TRANSACTION,
        SqlError::Internal(_) => INTERNAL_ERROR,
    }
}

/// Class 42 without a more specific code.
const SYNTAX_ERROR_OR_ACCESS_RULE: &str = "42000";

/// The ErrorResponse fields beyond the message that an error carries, as
/// PostgreSQL sends them for a constraint violation: `D` detail, `t`
/// table, `c` column, `n` constraint (clients read them as, e.g.,
/// psycopg's `diag.constraint_name`).
pub fn fields(e: &SqlError) -> Vec<(u8, String)> {
    match e {
        SqlError::Storage(StorageError::UniqueViolation {
            constraint,
            table,
            detail,
        }) => vec![
            (b'D', detail.clone()),
            (b't', table.clone()),
            (b'n', constraint.clone()),
        ],
        SqlError::Storage(StorageError::NotNullViolation { column, table }) => {
            vec![(b't', table.clone()), (b'c', column.clone())]
        }
        _ => Vec::new(),
    }
}

/// The SQLSTATE of `COPY … FROM` data that could not be read, by kind.
pub fn of_copy(e: &CopyDataError) -> &'static str {
    match e {
        CopyDataError::BadFormat(_) => BAD_COPY_FILE_FORMAT,
        CopyDataError::InvalidText(_) => INVALID_TEXT_REPRESENTATION,
        CopyDataError::InvalidBinary(_) => INVALID_BINARY_REPRESENTATION,
        CopyDataError::Encoding(_) => CHARACTER_NOT_IN_REPERTOIRE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_by_kind() {
        assert_eq!(of(&SqlError::Syntax("x".into())), "42601");
        let undefined = |kind| of(&SqlError::undefined(kind, "x"));
        assert_eq!(undefined(UndefinedKind::Table), "42P01");
        assert_eq!(undefined(UndefinedKind::Column), "42703");
        assert_eq!(undefined(UndefinedKind::Function), "42883");
        assert_eq!(undefined(UndefinedKind::Schema), "3F000");
        assert_eq!(undefined(UndefinedKind::File), "58P01");
        let plan = |kind| of(&SqlError::plan(kind, "x"));
        assert_eq!(plan(PlanKind::DatatypeMismatch), "42804");
        assert_eq!(plan(PlanKind::AmbiguousColumn), "42702");
        assert_eq!(plan(PlanKind::DuplicateColumn), "42701");
        assert_eq!(plan(PlanKind::WrongObjectType), "42809");
        assert_eq!(plan(PlanKind::InTransactionBlock), "25001");
        assert_eq!(plan(PlanKind::InvalidParameter), "22023");
        assert_eq!(plan(PlanKind::Other), "42000");
        let setting = |kind| of(&SqlError::setting(kind, "x"));
        assert_eq!(setting(SettingKind::Unrecognized), "42704");
        assert_eq!(setting(SettingKind::InvalidValue), "22023");
        assert_eq!(setting(SettingKind::ReadOnly), "55P02");
        assert_eq!(of(&SqlError::Unsupported("x".into())), "0A000");
        assert_eq!(of(&SqlError::Cancelled), "57014");
        assert_eq!(of(&SqlError::Timeout), "57014");
        assert_eq!(of(&SqlError::TooComplex("x".into())), "54001");
        assert_eq!(of(&SqlError::Internal("x".into())), "XX000");
        assert_eq!(of(&SqlError::InsufficientPrivilege("x".into())), "42501");
        assert_eq!(of(&SqlError::DuplicateObject("x".into())), "42710");
        assert_eq!(of(&SqlError::UndefinedObject("x".into())), "42704");
        assert_eq!(of(&SqlError::DependentObjects("x".into())), "2BP01");
        assert_eq!(of(&SqlError::InFailedTransaction), "25P02");
        assert_eq!(of(&SqlError::ReadOnlyTransaction("x".into())), "25006");
        assert_eq!(
            of(&SqlError::Exec(stride_exec::ExecError::InvalidParameter(
                "x".into()
            ))),
            "22023"
        );
        let storage = |e| of(&SqlError::Storage(e));
        assert_eq!(
            storage(StorageError::SerializationFailure("x".into())),
            "40001"
        );
        let io =
            |kind: std::io::ErrorKind| StorageError::io(std::path::Path::new("wal"), kind.into());
        assert_eq!(storage(io(std::io::ErrorKind::StorageFull)), "53100");
        assert_eq!(storage(io(std::io::ErrorKind::PermissionDenied)), "58030");
        assert_eq!(
            storage(StorageError::Unrecoverable {
                path: "d".into(),
                reason: "x".into()
            }),
            "XX001"
        );
    }

    /// The same message under different kinds gives different codes, and
    /// a message that names one kind under another kind gives the other's
    /// code: no path reads the text.
    #[test]
    fn messages_are_never_read() {
        let message = "schema \"s\" does not exist (column function table unrecognized)";
        let codes: Vec<&str> = [
            UndefinedKind::Table,
            UndefinedKind::Column,
            UndefinedKind::Function,
            UndefinedKind::Schema,
            UndefinedKind::File,
        ]
        .into_iter()
        .map(|kind| of(&SqlError::undefined(kind, message)))
        .collect();
        assert_eq!(codes, ["42P01", "42703", "42883", "3F000", "58P01"]);
        let unrecognized = "unrecognized configuration parameter \"x\"";
        assert_eq!(
            of(&SqlError::setting(SettingKind::InvalidValue, unrecognized)),
            "22023"
        );
        assert_eq!(
            of(&SqlError::setting(
                SettingKind::Unrecognized,
                "invalid value"
            )),
            "42704"
        );
        let coercion = "Cannot coerce: no function matches, invalid function";
        assert_eq!(of(&SqlError::plan(PlanKind::Other, coercion)), "42000");
        // Storage errors by variant: a table's "does not exist" differs
        // from a schema's, a schema's "already exists" from a table's.
        let storage = |e| of(&SqlError::Storage(e));
        assert_eq!(storage(StorageError::SchemaNotFound("t".into())), "3F000");
        assert_eq!(storage(StorageError::TableNotFound("s".into())), "42P01");
        let exists = |kind| StorageError::AlreadyExists {
            kind,
            name: "x".into(),
        };
        assert_eq!(storage(exists(ObjectKind::Schema)), "42P06");
        assert_eq!(storage(exists(ObjectKind::Table)), "42P07");
        assert_eq!(storage(StorageError::SchemaNotEmpty("s".into())), "2BP01");
        assert_eq!(
            storage(StorageError::InvalidArgument("already exists".into())),
            "22023"
        );
        assert_eq!(storage(StorageError::Internal("not found".into())), "XX000");
        let io = |raw| StorageError::Io {
            path: "/x".into(),
            source: std::io::Error::from_raw_os_error(raw),
        };
        assert_eq!(storage(io(2)), "58P01"); // ENOENT
        assert_eq!(storage(io(5)), "58030"); // EIO
    }

    /// DataFusion's errors classified by their structured variants.
    #[test]
    fn datafusion_errors_by_their_variant() {
        use datafusion_common::{Column, DataFusionError, SchemaError};
        let schema_error = |e: SchemaError| {
            of(&SqlError::from(DataFusionError::SchemaError(
                Box::new(e),
                Box::new(None),
            )))
        };
        let field = || Box::new(Column::from_name("c"));
        assert_eq!(
            schema_error(SchemaError::FieldNotFound {
                field: field(),
                valid_fields: Vec::new(),
            }),
            "42703"
        );
        assert_eq!(
            schema_error(SchemaError::AmbiguousReference { field: field() }),
            "42702"
        );
        assert_eq!(
            schema_error(SchemaError::DuplicateUnqualifiedField { name: "c".into() }),
            "42701"
        );
        // A storage error raised in a planner callback, under context.
        let lookup = DataFusionError::External(Box::new(StorageError::SchemaNotFound("s".into())))
            .context("while planning");
        assert_eq!(of(&SqlError::from(lookup)), "3F000");
        // A Stride error raised in a callback comes back as itself.
        let own = DataFusionError::External(Box::new(SqlError::undefined(
            UndefinedKind::Function,
            "function f does not exist",
        )));
        assert_eq!(of(&SqlError::from(own)), "42883");
        // A plan error whose text names a missing table is still only that.
        let plan = DataFusionError::Plan("table \"t\" not found".into());
        assert_eq!(of(&SqlError::from(plan)), "42000");
    }

    #[test]
    fn executor_errors_by_their_typed_kind() {
        use stride_exec::memory::MemoryScope;
        use stride_exec::ExecError;
        let oom = ExecError::MemoryExhausted {
            scope: MemoryScope::Query,
            what: "sort".into(),
            requested: 10,
            used: 5,
            limit: 12,
        };
        assert_eq!(of(&SqlError::Exec(oom)), "53200");
        let temp = ExecError::TempFileLimit { limit_kb: 1024 };
        assert_eq!(of(&SqlError::Exec(temp)), "53400");
        let full = ExecError::SpillIo {
            path: "/tmp/x".into(),
            source: std::io::Error::from_raw_os_error(28), // ENOSPC
        };
        assert_eq!(of(&SqlError::Exec(full)), "53100");
        // Wrapped the way a failed task returns it to the scheduler.
        let task = stride_sched::TaskError::new(ExecError::CardinalityViolation("2 rows".into()));
        let wrapped = ExecError::Query(stride_sched::QueryError::Failed(task));
        assert_eq!(of(&SqlError::Exec(wrapped)), "21000");
        let cast = ExecError::Arrow(arrow::error::ArrowError::CastError("x".into()));
        assert_eq!(of(&SqlError::Exec(cast)), "22000");
        assert_eq!(
            of(&SqlError::Exec(ExecError::Internal("cancelled? no".into()))),
            "XX000",
            "a message is never read for its code"
        );
    }
}

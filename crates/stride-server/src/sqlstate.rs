//! Engine errors as PostgreSQL SQLSTATE codes.

use stride_exec::ErrorKind;
use stride_sql::SqlError;

pub const SYNTAX_ERROR: &str = "42601";
pub const UNDEFINED_TABLE: &str = "42P01";
pub const UNDEFINED_COLUMN: &str = "42703";
pub const UNDEFINED_FUNCTION: &str = "42883";
pub const UNDEFINED_OBJECT: &str = "42704";
pub const INVALID_SCHEMA_NAME: &str = "3F000";
pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
pub const QUERY_CANCELED: &str = "57014";
pub const PROTOCOL_VIOLATION: &str = "08P01";
pub const INVALID_PASSWORD: &str = "28P01";
pub const TOO_MANY_CONNECTIONS: &str = "53300";
pub const INVALID_PARAMETER_VALUE: &str = "22023";
pub const INVALID_TEXT_REPRESENTATION: &str = "22P02";
pub const INVALID_SQL_STATEMENT_NAME: &str = "26000";
pub const INVALID_CURSOR_NAME: &str = "34000";
pub const DATA_EXCEPTION: &str = "22000";
pub const DIVISION_BY_ZERO: &str = "22012";
pub const CARDINALITY_VIOLATION: &str = "21000";
pub const DUPLICATE_OBJECT: &str = "42710";
pub const DATATYPE_MISMATCH: &str = "42804";
pub const INTERNAL_ERROR: &str = "XX000";
pub const OUT_OF_MEMORY: &str = "53200";
/// A value larger than one value may be ("requested length too large").
pub const PROGRAM_LIMIT_EXCEEDED: &str = "54000";
pub const DISK_FULL: &str = "53100";
pub const CONFIGURATION_LIMIT_EXCEEDED: &str = "53400";
pub const CHARACTER_NOT_IN_REPERTOIRE: &str = "22021";
pub const STATEMENT_TOO_COMPLEX: &str = "54001";
pub const NUMERIC_VALUE_OUT_OF_RANGE: &str = "22003";
pub const INSUFFICIENT_PRIVILEGE: &str = "42501";
pub const INVALID_AUTHORIZATION_SPECIFICATION: &str = "28000";
pub const DEPENDENT_OBJECTS_STILL_EXIST: &str = "2BP01";
pub const OBJECT_IN_USE: &str = "55006";
pub const INVALID_GRANT_OPERATION: &str = "0LP01";
pub const RESERVED_NAME: &str = "42939";

/// The SQLSTATE of an engine error.
pub fn of(e: &SqlError) -> &'static str {
    match e {
        SqlError::Syntax(_) => SYNTAX_ERROR,
        SqlError::Undefined(m) => {
            let m = m.to_ascii_lowercase();
            if m.contains("schema") {
                INVALID_SCHEMA_NAME
            } else if m.contains("column") || m.contains("field") {
                UNDEFINED_COLUMN
            } else if m.contains("function") {
                UNDEFINED_FUNCTION
            } else {
                UNDEFINED_TABLE
            }
        }
        SqlError::Unsupported(_) => FEATURE_NOT_SUPPORTED,
        SqlError::Plan(m) => {
            let m = m.to_ascii_lowercase();
            if m.contains("invalid function") || m.contains("no function matches") {
                UNDEFINED_FUNCTION
            } else if m.contains("cannot") && m.contains("type") || m.contains("coerc") {
                DATATYPE_MISMATCH
            } else {
                SYNTAX_ERROR_OR_ACCESS_RULE
            }
        }
        SqlError::Setting(m) => {
            if m.contains("unrecognized") {
                UNDEFINED_OBJECT
            } else {
                INVALID_PARAMETER_VALUE
            }
        }
        SqlError::Cancelled | SqlError::Timeout => QUERY_CANCELED,
        SqlError::TooComplex(_) => STATEMENT_TOO_COMPLEX,
        SqlError::PlanInvalidated(_) => FEATURE_NOT_SUPPORTED,
        SqlError::NumericOutOfRange(_) => NUMERIC_VALUE_OUT_OF_RANGE,
        SqlError::InsufficientPrivilege(_) => INSUFFICIENT_PRIVILEGE,
        SqlError::DuplicateObject(_) => DUPLICATE_OBJECT,
        SqlError::UndefinedObject(_) => UNDEFINED_OBJECT,
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
            None => INTERNAL_ERROR,
        },
        SqlError::Storage(e) => {
            let m = e.to_string().to_ascii_lowercase();
            if m.contains("already exists") {
                DUPLICATE_OBJECT
            } else if m.contains("does not exist") || m.contains("not found") {
                UNDEFINED_TABLE
            } else {
                DATA_EXCEPTION
            }
        }
        SqlError::Internal(_) => INTERNAL_ERROR,
    }
}

/// Class 42 without a more specific code.
const SYNTAX_ERROR_OR_ACCESS_RULE: &str = "42000";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_by_kind() {
        assert_eq!(of(&SqlError::Syntax("x".into())), "42601");
        assert_eq!(
            of(&SqlError::Undefined("table \"t\" does not exist".into())),
            "42P01"
        );
        assert_eq!(
            of(&SqlError::Undefined("schema \"s\" does not exist".into())),
            "3F000"
        );
        assert_eq!(of(&SqlError::Unsupported("x".into())), "0A000");
        assert_eq!(of(&SqlError::Cancelled), "57014");
        assert_eq!(of(&SqlError::Timeout), "57014");
        assert_eq!(of(&SqlError::TooComplex("x".into())), "54001");
        assert_eq!(of(&SqlError::Internal("x".into())), "XX000");
        assert_eq!(of(&SqlError::InsufficientPrivilege("x".into())), "42501");
        assert_eq!(of(&SqlError::DuplicateObject("x".into())), "42710");
        assert_eq!(of(&SqlError::UndefinedObject("x".into())), "42704");
        assert_eq!(of(&SqlError::DependentObjects("x".into())), "2BP01");
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

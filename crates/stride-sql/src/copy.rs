//! `COPY` statements: recognising them, parsing them (sqlparser's
//! PostgreSQL dialect: DataFusion's parser knows only its own `COPY … TO
//! 'file'`), and their options as PostgreSQL defines them.
//!
//! The statement's work is split: the session resolves the table, checks
//! privileges and runs the query of `COPY … TO` (`engine/copy.rs`); the
//! wire-protocol server moves the data in the copy sub-protocol and
//! converts it between rows and text, CSV or binary lines.

use datafusion_sql::sqlparser::ast::{
    CopyLegacyCsvOption, CopyLegacyOption, CopyOption, CopySource, CopyTarget, Ident, ObjectName,
    Statement,
};
use datafusion_sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion_sql::sqlparser::parser::Parser;

use crate::error::{PlanKind, Result, SqlError};

/// The data format of a `COPY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFormat {
    Text,
    Csv,
    Binary,
}

/// The options of a `COPY`, validated and with PostgreSQL's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOptions {
    pub format: CopyFormat,
    /// Column separator (one byte): tab for text, comma for CSV.
    pub delimiter: u8,
    /// How NULL is written: `\N` for text, the empty string for CSV.
    pub null: String,
    /// A first line of column names (skipped on input).
    pub header: bool,
    /// CSV quote character (one byte; default `"`).
    pub quote: u8,
    /// CSV escape character inside quotes (one byte; default the quote).
    pub escape: u8,
}

/// Where `COPY` data comes from or goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyEndpoint {
    /// `STDIN` / `STDOUT`: the client, over the copy sub-protocol.
    Client,
    /// A server-side file (superusers only).
    File(String),
}

/// What a `COPY` reads or fills.
#[derive(Debug, Clone)]
pub enum CopyRelation {
    /// A table, optionally a list of its columns.
    Table {
        name: ObjectName,
        columns: Vec<Ident>,
    },
    /// `COPY (query) TO`: the query's SQL text.
    Query(String),
}

/// A parsed `COPY` statement.
#[derive(Debug, Clone)]
pub struct CopyStatement {
    pub relation: CopyRelation,
    /// `COPY … TO` (else `FROM`).
    pub to: bool,
    pub endpoint: CopyEndpoint,
    pub options: CopyOptions,
}

/// Whether the request's first word is `COPY` (comments and whitespace
/// before it skipped).
pub fn is_copy(sql: &str) -> bool {
    let mut rest = sql;
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix("--") {
            rest = r.find('\n').map_or("", |i| &r[i..]);
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |i| &r[i + 2..]);
        } else {
            break;
        }
    }
    rest.get(..4)
        .is_some_and(|w| w.eq_ignore_ascii_case("copy"))
        && !rest[4..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
}

fn unsupported(what: impl Into<String>) -> SqlError {
    SqlError::Unsupported(what.into())
}

fn invalid(message: impl Into<String>) -> SqlError {
    SqlError::plan(PlanKind::InvalidParameter, message)
}

/// Parses a request that [`is_copy`]: exactly one `COPY` statement.
pub fn parse(sql: &str) -> Result<CopyStatement> {
    use datafusion_sql::sqlparser::tokenizer::{Token, Tokenizer};
    // sqlparser reads what follows `COPY … FROM STDIN;` as inline data:
    // a request of more statements is refused before it can.
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .map_err(|e| SqlError::Syntax(e.to_string()))?;
    let after = tokens
        .iter()
        .skip_while(|t| **t != Token::SemiColon)
        .any(|t| !matches!(t, Token::SemiColon | Token::Whitespace(_)));
    if after {
        return Err(unsupported(
            "COPY together with other statements in one request (send it alone)",
        ));
    }
    let mut statements = Parser::new(&PostgreSqlDialect {})
        .with_recursion_limit(crate::limits::PARSER_RECURSION_LIMIT)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| SqlError::Syntax(e.to_string()))?;
    if statements.len() != 1 {
        return Err(unsupported(
            "COPY together with other statements in one request (send it alone)",
        ));
    }
    let Some(Statement::Copy {
        source,
        to,
        target,
        options,
        legacy_options,
        values,
    }) = statements.pop()
    else {
        return Err(SqlError::Internal(
            "a COPY request parsed as another statement".into(),
        ));
    };
    if !values.is_empty() {
        return Err(SqlError::Syntax(
            "COPY data inside the statement text: send it in the copy protocol".into(),
        ));
    }
    let relation = match source {
        CopySource::Table {
            table_name,
            columns,
        } => CopyRelation::Table {
            name: table_name,
            columns,
        },
        CopySource::Query(q) => CopyRelation::Query(q.to_string()),
    };
    let endpoint = match target {
        CopyTarget::Stdin if !to => CopyEndpoint::Client,
        CopyTarget::Stdout if to => CopyEndpoint::Client,
        CopyTarget::Stdin | CopyTarget::Stdout => {
            return Err(SqlError::Syntax(format!(
                "COPY {} {target} is not valid",
                if to { "TO" } else { "FROM" }
            )))
        }
        CopyTarget::File { filename } => CopyEndpoint::File(filename),
        CopyTarget::Program { .. } => return Err(unsupported("COPY … PROGRAM")),
    };
    Ok(CopyStatement {
        relation,
        to,
        endpoint,
        options: options_of(&options, &legacy_options)?,
    })
}

/// Options as given, before defaults.
#[derive(Default)]
struct Given {
    format: Option<CopyFormat>,
    delimiter: Option<char>,
    null: Option<String>,
    header: Option<bool>,
    quote: Option<char>,
    escape: Option<char>,
}

fn set<T>(slot: &mut Option<T>, value: T, name: &str) -> Result<()> {
    if slot.is_some() {
        return Err(SqlError::Syntax(format!(
            "conflicting or redundant options: {name}"
        )));
    }
    *slot = Some(value);
    Ok(())
}

/// Validates `COPY` options as PostgreSQL 15 does (`WITH (…)` and the
/// pre-9.0 syntax psql's `\copy` passes on); refuses the ones Stride does
/// not implement.
fn options_of(options: &[CopyOption], legacy: &[CopyLegacyOption]) -> Result<CopyOptions> {
    let mut g = Given::default();
    for o in options {
        match o {
            CopyOption::Format(name) => {
                let format = match name.value.to_ascii_lowercase().as_str() {
                    "text" => CopyFormat::Text,
                    "csv" => CopyFormat::Csv,
                    "binary" => CopyFormat::Binary,
                    other => {
                        return Err(invalid(format!("COPY format \"{other}\" not recognized")))
                    }
                };
                set(&mut g.format, format, "FORMAT")?;
            }
            CopyOption::Freeze(false) => {}
            CopyOption::Freeze(true) => return Err(unsupported("COPY option FREEZE")),
            CopyOption::Delimiter(c) => set(&mut g.delimiter, *c, "DELIMITER")?,
            CopyOption::Null(s) => set(&mut g.null, s.clone(), "NULL")?,
            CopyOption::Header(h) => set(&mut g.header, *h, "HEADER")?,
            CopyOption::Quote(c) => set(&mut g.quote, *c, "QUOTE")?,
            CopyOption::Escape(c) => set(&mut g.escape, *c, "ESCAPE")?,
            CopyOption::Encoding(e) => {
                let e = e.to_ascii_uppercase().replace(['-', '_'], "");
                if e != "UTF8" {
                    return Err(unsupported(format!(
                        "COPY ENCODING '{e}' (Stride speaks UTF8 only)"
                    )));
                }
            }
            CopyOption::ForceQuote(_) => return Err(unsupported("COPY option FORCE_QUOTE")),
            CopyOption::ForceNotNull(_) => return Err(unsupported("COPY option FORCE_NOT_NULL")),
            CopyOption::ForceNull(_) => return Err(unsupported("COPY option FORCE_NULL")),
        }
    }
    for o in legacy {
        match o {
            CopyLegacyOption::Binary => set(&mut g.format, CopyFormat::Binary, "BINARY")?,
            CopyLegacyOption::Delimiter(c) => set(&mut g.delimiter, *c, "DELIMITER")?,
            CopyLegacyOption::Null(s) => set(&mut g.null, s.clone(), "NULL")?,
            CopyLegacyOption::Header => set(&mut g.header, true, "HEADER")?,
            CopyLegacyOption::Csv(csv) => {
                set(&mut g.format, CopyFormat::Csv, "CSV")?;
                for c in csv {
                    match c {
                        CopyLegacyCsvOption::Header => set(&mut g.header, true, "HEADER")?,
                        CopyLegacyCsvOption::Quote(q) => set(&mut g.quote, *q, "QUOTE")?,
                        CopyLegacyCsvOption::Escape(e) => set(&mut g.escape, *e, "ESCAPE")?,
                        CopyLegacyCsvOption::ForceQuote(_) => {
                            return Err(unsupported("COPY option FORCE QUOTE"))
                        }
                        CopyLegacyCsvOption::ForceNotNull(_) => {
                            return Err(unsupported("COPY option FORCE NOT NULL"))
                        }
                    }
                }
            }
            other => return Err(unsupported(format!("COPY option {other}"))),
        }
    }
    resolve(g)
}

/// One single-byte character, or the error PostgreSQL gives.
fn one_byte(c: char, what: &str) -> Result<u8> {
    u8::try_from(u32::from(c))
        .ok()
        .filter(u8::is_ascii)
        .ok_or_else(|| invalid(format!("COPY {what} must be a single one-byte character")))
}

fn resolve(g: Given) -> Result<CopyOptions> {
    let format = g.format.unwrap_or(CopyFormat::Text);
    let csv = format == CopyFormat::Csv;
    if format == CopyFormat::Binary {
        for (given, name) in [
            (g.delimiter.is_some(), "DELIMITER"),
            (g.null.is_some(), "NULL"),
            (g.header.is_some(), "HEADER"),
        ] {
            if given {
                return Err(invalid(format!("cannot specify {name} in BINARY mode")));
            }
        }
    }
    if !csv && g.quote.is_some() {
        return Err(invalid("COPY QUOTE requires CSV mode"));
    }
    if !csv && g.escape.is_some() {
        return Err(invalid("COPY ESCAPE requires CSV mode"));
    }
    let delimiter = one_byte(
        g.delimiter.unwrap_or(if csv { ',' } else { '\t' }),
        "delimiter",
    )?;
    let quote = one_byte(g.quote.unwrap_or('"'), "quote")?;
    let escape = one_byte(g.escape.unwrap_or(char::from(quote)), "escape")?;
    let null = g
        .null
        .unwrap_or_else(|| if csv { String::new() } else { "\\N".into() });
    if matches!(delimiter, b'\r' | b'\n') || null.contains(['\r', '\n']) {
        return Err(invalid(
            "COPY delimiter and null representation cannot be newline or carriage return",
        ));
    }
    if !csv && (delimiter == b'\\' || delimiter.is_ascii_lowercase() || delimiter.is_ascii_digit())
    {
        return Err(invalid(format!(
            "COPY delimiter cannot be \"{}\"",
            char::from(delimiter)
        )));
    }
    if csv && delimiter == quote {
        return Err(invalid("COPY delimiter and quote must be different"));
    }
    if null.as_bytes().contains(&delimiter) {
        return Err(invalid(
            "COPY delimiter character must not appear in the NULL specification",
        ));
    }
    Ok(CopyOptions {
        format,
        delimiter,
        null,
        header: g.header.unwrap_or(false),
        quote,
        escape,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_copy_only_as_the_first_word() {
        assert!(is_copy("  -- hi\n /* x */ copy t from stdin"));
        assert!(is_copy("COPY(select 1) TO STDOUT"));
        assert!(!is_copy("copyright"));
        assert!(!is_copy("select 'copy'"));
    }

    #[test]
    fn defaults_and_legacy_options_follow_postgres() {
        let s = parse("COPY t FROM STDIN").unwrap();
        assert_eq!(s.options.delimiter, b'\t');
        assert_eq!(s.options.null, "\\N");
        let s = parse("COPY t (a, b) FROM STDIN CSV HEADER QUOTE '''' ").unwrap();
        assert_eq!(s.options.format, CopyFormat::Csv);
        assert!(s.options.header);
        assert_eq!((s.options.quote, s.options.escape), (b'\'', b'\''));
        assert_eq!(s.options.null, "");
        let s = parse("COPY (SELECT 1) TO STDOUT WITH (FORMAT csv, DELIMITER ';')").unwrap();
        assert!(s.to);
        assert_eq!(s.options.delimiter, b';');
    }

    #[test]
    fn refuses_what_postgres_refuses_and_what_stride_lacks() {
        let kind = |sql: &str| match parse(sql) {
            Err(SqlError::Unsupported(_)) => "unsupported",
            Err(SqlError::Plan { .. }) => "invalid",
            Err(SqlError::Syntax(_)) => "syntax",
            Err(_) => "other",
            Ok(_) => "ok",
        };
        assert_eq!(
            kind("COPY t FROM STDIN (FORMAT csv, FORCE_NULL (a))"),
            "unsupported"
        );
        assert_eq!(kind("COPY t FROM STDIN (FREEZE)"), "unsupported");
        assert_eq!(kind("COPY t FROM STDIN (QUOTE '\"')"), "invalid");
        assert_eq!(kind("COPY t FROM STDIN (FORMAT binary, HEADER)"), "invalid");
        assert_eq!(kind("COPY t FROM STDIN (FORMAT xml)"), "invalid");
        assert_eq!(
            kind("COPY t FROM STDIN (DELIMITER ',', DELIMITER ';')"),
            "syntax"
        );
        assert_eq!(kind("COPY t FROM PROGRAM 'ls'"), "unsupported");
        assert_eq!(kind("COPY t TO STDIN"), "syntax");
        assert_eq!(kind("COPY t FROM STDIN; SELECT 1"), "unsupported");
        assert_eq!(kind("COPY t FROM STDIN;"), "ok");
    }
}

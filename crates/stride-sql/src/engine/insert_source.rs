//! `INSERT … SELECT` whose query holds a `VALUES` list of its own.
//!
//! DataFusion plans an INSERT's source with the target table's schema in
//! its planner context, and every `VALUES` list planned in that context —
//! not only the source's own body — takes the table's columns: a nested
//! `(VALUES (0), (1)) AS a(x)` joined to something else fails with
//! "Inconsistent data length across values list" (or, worse, has its
//! literals typed as the table's columns when the widths happen to agree).
//! Before planning, every `VALUES` list inside the source other than the
//! source's body itself is rewritten into the query PostgreSQL defines it
//! to be: `SELECT e11 AS column1, … UNION ALL SELECT e21 AS column1, …`
//! (the column names `VALUES` gets; types unified as `UNION ALL` unifies
//! them, as `VALUES` does).

use std::ops::ControlFlow;

use datafusion_sql::parser::Statement as DFStatement;
use datafusion_sql::sqlparser::ast::{Query, SetExpr, Statement, Values, VisitMut, VisitorMut};
use datafusion_sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion_sql::sqlparser::parser::Parser;

use crate::error::{Result, SqlError};

/// Rewrites the nested `VALUES` lists of an INSERT's source (any other
/// statement is returned as it is).
pub(super) fn rewrite(mut stmt: DFStatement) -> Result<DFStatement> {
    let DFStatement::Statement(s) = &mut stmt else {
        return Ok(stmt);
    };
    let Statement::Insert(insert) = s.as_mut() else {
        return Ok(stmt);
    };
    let Some(source) = insert.source.as_mut() else {
        return Ok(stmt);
    };
    let root: *const Query = source.as_ref();
    let mut nested = Nested { root, error: None };
    let _ = source.visit(&mut nested);
    match nested.error {
        Some(e) => Err(e),
        None => Ok(stmt),
    }
}

struct Nested {
    /// The source query itself: its own body may stay `VALUES`.
    root: *const Query,
    error: Option<SqlError>,
}

impl VisitorMut for Nested {
    type Break = ();

    fn post_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if std::ptr::eq(query as *const Query, self.root) {
            return ControlFlow::Continue(());
        }
        if let SetExpr::Values(values) = query.body.as_ref() {
            match union_of_selects(values) {
                Ok(body) => query.body = body,
                Err(e) => {
                    self.error = Some(e);
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// `VALUES (a, b), (c, d)` as `SELECT a AS column1, b AS column2 UNION ALL
/// SELECT c AS column1, d AS column2`, by printing and parsing SQL (the
/// expressions print as the SQL they were parsed from).
fn union_of_selects(values: &Values) -> Result<Box<SetExpr>> {
    let selects: Vec<String> = values
        .rows
        .iter()
        .map(|row| {
            let items: Vec<String> = row
                .content
                .iter()
                .enumerate()
                .map(|(i, e)| format!("{e} AS column{}", i + 1))
                .collect();
            format!("SELECT {}", items.join(", "))
        })
        .collect();
    let sql = selects.join(" UNION ALL ");
    let query = Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&sql)
        .and_then(|mut p| p.parse_query())
        .map_err(|e| SqlError::Internal(format!("rewriting a VALUES list: {e}")))?;
    Ok(query.body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let stmt = crate::limits::parse(sql).unwrap().pop_front().unwrap();
        rewrite(stmt).unwrap().to_string()
    }

    #[test]
    fn only_values_nested_in_an_insert_source_are_rewritten() {
        // The source's own VALUES stays (it takes the table's types).
        assert_eq!(
            rewritten("INSERT INTO t VALUES (1, 'a'), (2, 'b')"),
            "INSERT INTO t VALUES (1, 'a'), (2, 'b')"
        );
        let nested =
            rewritten("INSERT INTO t SELECT x, y FROM (VALUES (0), (NULL)) AS a(x) CROSS JOIN u");
        assert!(
            nested.contains("(SELECT 0 AS column1 UNION ALL SELECT NULL AS column1) AS a (x)"),
            "{nested}"
        );
        // A query is left alone.
        let q = "SELECT * FROM (VALUES (1)) AS v";
        assert_eq!(rewritten(q), q);
    }
}

//! `DEFAULT` in the rows of `INSERT … VALUES`: before planning, each
//! unquoted `DEFAULT` item becomes its column's default expression, or
//! NULL where the column has none, as PostgreSQL reads it. (A column left
//! out of the column list gets its default from the planner:
//! `crate::context`.)

use datafusion_sql::parser::Statement as DFStatement;
use datafusion_sql::sqlparser::ast::{Expr, SetExpr, Statement, TableObject, Value};
use datafusion_sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion_sql::sqlparser::parser::Parser;

use crate::error::{Result, SqlError};
use crate::pg_compat::folded;

/// A target column: its name and `DEFAULT` expression (SQL text), if any.
pub(super) type Column = (String, Option<String>);

/// Replaces the `DEFAULT` items of `stmt`'s `VALUES` rows; `columns_of`
/// gives the target table's columns in order (from its name's parts,
/// folded), `None` when there is no such table (the planner reports it).
pub(super) fn rewrite(
    stmt: &mut DFStatement,
    columns_of: &dyn Fn(&[String]) -> Option<Vec<Column>>,
) -> Result<()> {
    let DFStatement::Statement(s) = stmt else {
        return Ok(());
    };
    let Statement::Insert(insert) = s.as_mut() else {
        return Ok(());
    };
    let Some(source) = insert.source.as_mut() else {
        return Ok(());
    };
    let SetExpr::Values(values) = source.body.as_mut() else {
        return Ok(());
    };
    let is_default = |e: &Expr| {
        matches!(e, Expr::Identifier(i) if i.quote_style.is_none()
            && i.value.eq_ignore_ascii_case("default"))
    };
    if !values.rows.iter().flat_map(|r| &r.content).any(is_default) {
        return Ok(());
    }
    let TableObject::TableName(name) = &insert.table else {
        return Ok(());
    };
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|p| p.as_ident().map(folded))
        .collect();
    let Some(table_columns) = columns_of(&parts) else {
        return Ok(());
    };
    // The row's items in the order of the column list, or of the table.
    let targets: Vec<Option<&Column>> = if insert.columns.is_empty() {
        table_columns.iter().map(Some).collect()
    } else {
        insert
            .columns
            .iter()
            .map(|c| {
                let name = c.0.last().and_then(|p| p.as_ident()).map(folded);
                table_columns.iter().find(|(n, _)| Some(n) == name.as_ref())
            })
            .collect()
    };
    for row in &mut values.rows {
        for (item, target) in row.content.iter_mut().zip(&targets) {
            if !is_default(item) {
                continue;
            }
            *item = match target.and_then(|(_, d)| d.as_deref()) {
                Some(sql) => Parser::new(&PostgreSqlDialect {})
                    .try_with_sql(sql)
                    .and_then(|mut p| p.parse_expr())
                    .map_err(|e| SqlError::Internal(format!("a stored DEFAULT: {e}")))?,
                None => Expr::value(Value::Null),
            };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let mut stmts = crate::limits::parse(sql).unwrap();
        let mut stmt = stmts.pop_front().unwrap();
        let columns = |parts: &[String]| {
            (parts == ["t"]).then(|| {
                vec![
                    ("a".to_string(), None),
                    ("b".to_string(), Some("5 + 1".to_string())),
                    ("c".to_string(), Some("'x'".to_string())),
                ]
            })
        };
        rewrite(&mut stmt, &columns).unwrap();
        stmt.to_string()
    }

    #[test]
    fn default_items_take_their_columns_default_or_null() {
        assert_eq!(
            rewritten("INSERT INTO t VALUES (1, DEFAULT, default), (DEFAULT, 2, 'y')"),
            "INSERT INTO t VALUES (1, 5 + 1, 'x'), (NULL, 2, 'y')"
        );
        assert_eq!(
            rewritten("INSERT INTO t (c, a) VALUES (DEFAULT, DEFAULT)"),
            "INSERT INTO t (c, a) VALUES ('x', NULL)"
        );
        // A quoted "default" is a column name; other tables are left alone.
        assert_eq!(
            rewritten("INSERT INTO t VALUES (\"default\", 1, 2)"),
            "INSERT INTO t VALUES (\"default\", 1, 2)"
        );
        assert_eq!(
            rewritten("INSERT INTO u VALUES (DEFAULT)"),
            "INSERT INTO u VALUES (DEFAULT)"
        );
    }
}

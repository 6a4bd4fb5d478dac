//! Set-returning functions in the select list, as PostgreSQL runs them:
//! `SELECT c.name, unnest(c.keys) AS k, generate_subscripts(c.keys, 1) AS
//! i FROM c` gives one row per element of each row's array, and several
//! such calls in one list advance together ("zipped": the row count is
//! that of the longest, the shorter ones padded with NULL). SQLAlchemy's
//! reflection of keys and indexes asks exactly this.
//!
//! Rewritten on the parsed statement, before [`super::syntax`]: the
//! select gets one more `FROM` item, a series over the subscripts,
//!
//! ```text
//! SELECT c.name, array_element(c.keys, __srf_i) AS k, __srf_i AS i
//! FROM c, generate_series(1, greatest(array_length(c.keys, 1), …)) AS __srf_i
//! ```
//!
//! which `syntax` then makes a lateral call over the items before it. A
//! row whose arrays are all NULL or empty gives no row, as in PostgreSQL.
//!
//! Only calls that are a whole select item (`unnest(a)`,
//! `generate_subscripts(a, 1)`, aliased or not) are rewritten, and only in
//! a select without `GROUP BY`, aggregates over them or `DISTINCT ON`;
//! anything else is left for the planner, which refuses it as before.

use std::ops::ControlFlow;

use datafusion_sql::sqlparser::ast::helpers::attached_token::AttachedToken;
use datafusion_sql::sqlparser::ast::{
    BinaryOperator, CaseWhen, Distinct, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArguments, GroupByExpr, Ident, ObjectName, Query, Select, SelectItem, SetExpr,
    TableAlias, TableWithJoins, Value, VisitorMut,
};

/// The name of the series column added to the rewritten select.
const SUBSCRIPT: &str = "__srf_i";

/// The visitor that rewrites every select whose list holds set-returning
/// calls (see the module docs).
pub struct SelectListSets;

impl VisitorMut for SelectListSets {
    type Break = ();

    fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<Self::Break> {
        set_expr(q.body.as_mut());
        ControlFlow::Continue(())
    }
}

fn set_expr(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => rewrite(select),
        SetExpr::SetOperation { left, right, .. } => {
            set_expr(left);
            set_expr(right);
        }
        _ => {}
    }
}

/// A set-returning call of the select list.
enum Call {
    /// `unnest(a)`: the element.
    Unnest(Expr),
    /// `generate_subscripts(a, d)`: the subscript. Stride's arrays have
    /// one dimension, so a `d` other than 1 gives no subscripts (NULL
    /// beside the other calls' values). `None`: `d` is the literal 1.
    Subscripts(Expr, Option<Box<Expr>>),
}

impl Call {
    /// How many rows the call gives for a row.
    fn length(&self) -> Expr {
        match self {
            Call::Unnest(a) | Call::Subscripts(a, None) => {
                crate::pg_compat::call("array_length", vec![a.clone(), one()])
            }
            Call::Subscripts(a, Some(d)) => when_first(
                d,
                crate::pg_compat::call("array_length", vec![a.clone(), one()]),
            ),
        }
    }

    /// Its value at subscript [`SUBSCRIPT`].
    fn value(&self) -> Expr {
        match self {
            Call::Unnest(a) => crate::pg_compat::call("array_element", vec![a.clone(), column()]),
            Call::Subscripts(_, None) => column(),
            Call::Subscripts(_, Some(d)) => when_first(d, column()),
        }
    }
}

/// `CASE WHEN d = 1 THEN then END`.
fn when_first(d: &Expr, then: Expr) -> Expr {
    Expr::Case {
        case_token: AttachedToken::empty(),
        end_token: AttachedToken::empty(),
        operand: None,
        conditions: vec![CaseWhen {
            condition: Expr::BinaryOp {
                left: Box::new(Expr::Nested(Box::new(d.clone()))),
                op: BinaryOperator::Eq,
                right: Box::new(one()),
            },
            result: then,
        }],
        else_result: None,
    }
}

fn rewrite(select: &mut Select) {
    let grouped = !matches!(&select.group_by, GroupByExpr::Expressions(e, _) if e.is_empty());
    let distinct_on = matches!(select.distinct, Some(Distinct::On(_)));
    if grouped || distinct_on {
        return;
    }
    let mut lengths: Vec<Expr> = Vec::new();
    for item in &mut select.projection {
        let (expr, alias) = match item {
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.clone())),
            _ => continue,
        };
        let Some(call) = set_call(expr) else {
            continue;
        };
        let length = call.length();
        if !lengths.contains(&length) {
            lengths.push(length);
        }
        let name = match call {
            Call::Unnest(_) => "unnest",
            Call::Subscripts(..) => "generate_subscripts",
        };
        // PostgreSQL names an unaliased call after its function.
        *item = SelectItem::ExprWithAlias {
            expr: call.value(),
            alias: alias.unwrap_or_else(|| Ident::new(name)),
        };
    }
    if lengths.is_empty() {
        return;
    }
    let count = if lengths.len() == 1 {
        lengths.remove(0)
    } else {
        crate::pg_compat::call("greatest", lengths)
    };
    let series = super::syntax::call(
        ObjectName::from(vec![Ident::new("generate_series")]),
        [one(), count]
            .into_iter()
            .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
            .collect(),
        Some(TableAlias {
            explicit: true,
            name: Ident::new(SUBSCRIPT),
            columns: vec![],
            at: None,
        }),
    );
    select.from.push(TableWithJoins {
        relation: series,
        joins: vec![],
    });
}

/// `e` as a set-returning call of the select list, if it is one.
fn set_call(e: &Expr) -> Option<Call> {
    let Expr::Function(f) = e else {
        return None;
    };
    if f.over.is_some() || f.filter.is_some() {
        return None;
    }
    let name = f.name.0.last()?.as_ident()?.value.to_ascii_lowercase();
    let args = plain_args(f)?;
    match (name.as_str(), args.as_slice()) {
        ("unnest", [a]) => Some(Call::Unnest((*a).clone())),
        ("generate_subscripts", [a, d]) => {
            let first =
                matches!(d, Expr::Value(v) if matches!(&v.value, Value::Number(n, _) if n == "1"));
            Some(Call::Subscripts(
                (*a).clone(),
                (!first).then(|| Box::new((*d).clone())),
            ))
        }
        _ => None,
    }
}

fn plain_args(f: &Function) -> Option<Vec<&Expr>> {
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return None;
    }
    list.args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect()
}

fn column() -> Expr {
    Expr::Identifier(Ident::new(SUBSCRIPT))
}

fn one() -> Expr {
    Expr::value(Value::Number("1".into(), false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_sql::sqlparser::ast::VisitMut;
    use datafusion_sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion_sql::sqlparser::parser::Parser;

    fn rewritten(sql: &str) -> String {
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        let _ = s[0].visit(&mut SelectListSets);
        s[0].to_string()
    }

    #[test]
    fn calls_of_one_array_share_one_series() {
        assert_eq!(
            rewritten("SELECT c.n, unnest(c.k) AS a, generate_subscripts(c.k, 1) AS o FROM c"),
            "SELECT c.n, array_element(c.k, __srf_i) AS a, __srf_i AS o FROM c, \
             generate_series(1, array_length(c.k, 1)) AS __srf_i"
        );
    }

    #[test]
    fn calls_of_several_arrays_run_to_the_longest() {
        assert_eq!(
            rewritten("SELECT unnest(x.a), unnest(x.b) FROM x"),
            "SELECT array_element(x.a, __srf_i) AS unnest, array_element(x.b, __srf_i) AS unnest \
             FROM x, generate_series(1, greatest(array_length(x.a, 1), array_length(x.b, 1))) AS __srf_i"
        );
    }

    #[test]
    fn a_dimension_other_than_one_gives_no_subscripts() {
        assert_eq!(
            rewritten("SELECT generate_subscripts(x.a, $1) FROM x"),
            "SELECT CASE WHEN ($1) = 1 THEN __srf_i END AS generate_subscripts FROM x, \
             generate_series(1, CASE WHEN ($1) = 1 THEN array_length(x.a, 1) END) AS __srf_i"
        );
    }

    #[test]
    fn what_is_not_a_whole_select_item_is_left_alone() {
        for sql in [
            "SELECT unnest(a) + 1 FROM x",
            "SELECT count(*) FROM x GROUP BY unnest(a)",
            "SELECT x.a FROM x",
        ] {
            assert_eq!(rewritten(sql), sql);
        }
    }
}

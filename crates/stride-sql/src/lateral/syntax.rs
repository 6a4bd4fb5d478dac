//! The parsed statement's side of `LATERAL` set-returning functions.
//!
//! PostgreSQL lets a function in `FROM` read the columns of the items
//! before it without the keyword (`FROM t, generate_series(1, t.n)`).
//! DataFusion's planner binds a function's arguments to no columns, and
//! its `LATERAL f(…)` binds them as plain columns of the function's own
//! input, which Stride's call node cannot type. So every set-returning
//! call that is not the first item of its `FROM` (or is on the right of
//! an inner, left or cross join) becomes a lateral derived table over the
//! call alone: `LATERAL (SELECT * FROM f(…) AS a(c)) AS a`. The planner
//! binds the columns it reads from the items before it as outer
//! references, typed, under a `Subquery` the plan side
//! (`super::plan`) turns into a per-row expansion. A first item, or one
//! written `LATERAL f(…)` first, stays a plain call (it has nothing before
//! it to read; outer references there are a correlated subquery's).

use std::ops::ControlFlow;

use datafusion_sql::sqlparser::ast::{
    FunctionArg, Ident, JoinOperator, ObjectName, Query, SetExpr, TableAlias, TableFactor,
    TableFunctionArgs, TableWithJoins, VisitorMut,
};
use datafusion_sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion_sql::sqlparser::parser::Parser;

use crate::table_functions::SetFunction;

/// The visitor that makes set-returning calls after the first `FROM` item
/// lateral derived tables (run after `pg_compat`'s own table-function
/// rewrite, so calls are `Table` factors with arguments by then).
pub struct LateralCalls;

impl VisitorMut for LateralCalls {
    type Break = crate::error::SqlError;

    fn post_visit_query(&mut self, q: &mut Query) -> ControlFlow<Self::Break> {
        match set_expr(q.body.as_mut()) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => ControlFlow::Break(e),
        }
    }
}

fn set_expr(body: &mut SetExpr) -> crate::error::Result<()> {
    match body {
        SetExpr::Select(select) => {
            for (i, item) in select.from.iter_mut().enumerate() {
                table_with_joins(item, i > 0)?;
            }
            Ok(())
        }
        SetExpr::SetOperation { left, right, .. } => {
            set_expr(left)?;
            set_expr(right)
        }
        _ => Ok(()),
    }
}

/// One `FROM` item; `after`: whether items come before it.
fn table_with_joins(item: &mut TableWithJoins, after: bool) -> crate::error::Result<()> {
    factor(&mut item.relation, after)?;
    for join in &mut item.joins {
        let lateral = matches!(
            join.join_operator,
            JoinOperator::Join(_)
                | JoinOperator::Inner(_)
                | JoinOperator::Left(_)
                | JoinOperator::LeftOuter(_)
                | JoinOperator::CrossJoin(_)
        );
        factor(&mut join.relation, lateral)?;
    }
    Ok(())
}

/// A set-returning call as a `Table` factor with arguments; made a lateral
/// derived table when `lateral`.
fn factor(f: &mut TableFactor, lateral: bool) -> crate::error::Result<()> {
    if let TableFactor::NestedJoin {
        table_with_joins: inner,
        ..
    } = f
    {
        // Inside parentheses, the first item reads nothing before it.
        return table_with_joins(inner, false);
    }
    // `LATERAL f(…)`: the planner's `Function` factor, made a call.
    if let TableFactor::Function {
        name,
        args,
        alias,
        with_ordinality,
        ..
    } = f
    {
        if set_function(name).is_none() {
            return Ok(());
        }
        if *with_ordinality {
            return Err(crate::error::SqlError::Unsupported(
                "WITH ORDINALITY".into(),
            ));
        }
        *f = call(name.clone(), std::mem::take(args), alias.take());
    }
    let TableFactor::Table {
        name,
        args: Some(_),
        alias,
        ..
    } = f
    else {
        return Ok(());
    };
    let Some(function) = set_function(name) else {
        return Ok(());
    };
    if !lateral {
        return Ok(());
    }
    let outer_alias = TableAlias {
        explicit: true,
        name: alias
            .as_ref()
            .map_or_else(|| Ident::new(function.name()), |a| a.name.clone()),
        columns: Vec::new(),
        at: None,
    };
    let mut subquery = select_star()?;
    let SetExpr::Select(select) = subquery.body.as_mut() else {
        return Err(crate::error::SqlError::Internal(
            "SELECT * parsed as no SELECT".into(),
        ));
    };
    select.from[0].relation = f.clone();
    *f = TableFactor::Derived {
        lateral: true,
        subquery: Box::new(subquery),
        alias: Some(outer_alias),
        sample: None,
    };
    Ok(())
}

/// The set-returning function `name` names (unqualified by now).
fn set_function(name: &ObjectName) -> Option<SetFunction> {
    let [part] = name.0.as_slice() else {
        return None;
    };
    SetFunction::by_name(&part.as_ident()?.value.to_lowercase())
}

/// The call of `name` with `args` as a `Table` factor.
pub(crate) fn call(
    name: ObjectName,
    args: Vec<FunctionArg>,
    alias: Option<TableAlias>,
) -> TableFactor {
    TableFactor::Table {
        name,
        alias,
        args: Some(TableFunctionArgs {
            args,
            settings: None,
        }),
        with_hints: vec![],
        version: None,
        with_ordinality: false,
        partitions: vec![],
        json_path: None,
        sample: None,
        index_hints: vec![],
    }
}

/// `SELECT * FROM x`, whose one item the caller replaces.
fn select_star() -> crate::error::Result<Query> {
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, "SELECT * FROM x")
        .map_err(|e| crate::error::SqlError::Internal(e.to_string()))?;
    match statements.pop() {
        Some(datafusion_sql::sqlparser::ast::Statement::Query(q)) => Ok(*q),
        _ => Err(crate::error::SqlError::Internal(
            "SELECT * parsed as no query".into(),
        )),
    }
}

//! PostgreSQL syntax that clients send in their catalog queries, rewritten
//! on the parsed statement into what DataFusion's planner binds:
//!
//! | PostgreSQL                          | becomes                              |
//! |-------------------------------------|--------------------------------------|
//! | `a OPERATOR(pg_catalog.~) b`        | `a ~ b` (any built-in operator)      |
//! | `x COLLATE "default"` / `"C"` / `pg_catalog.default` | `x` (Stride compares strings bytewise: the C collation) |
//! | `x::regclass`, `::regtype`, `::regnamespace`, `::regproc` | `regclass(x)` … (`crate::pg_functions`) |
//! | `x::regclass::text`                 | `regclassout(x)` (the name)          |
//! | `x::oid`, `::xid`                   | `CAST(x AS BIGINT)` (OIDs are int8)  |
//! | `x::name`, `::"char"`, `::pg_catalog.text`, `::int2[]` | `CAST(x AS TEXT)` (the catalogs' arrays are text) |
//! | `x = ANY(ARRAY[a, b])`, `x <> ALL(ARRAY[..])` | `x IN (a, b)`, `x NOT IN (..)` |
//! | `a[i]` on an array                  | `array_element(a, i)`                |
//! | `pg_catalog.f(...)`                 | `f(...)`                             |
//! | `FROM pg_catalog.generate_series(..) s` | `FROM generate_series(..) AS s (s)` (the column named after the alias) |
//! | `1.5e300`, `1e-50` (an exponent number past 38 decimal digits) | `CAST('1.5e300' AS DOUBLE PRECISION)` (as DuckDB reads it; the parser refuses such decimals) |
//! | `SELECT unnest(t.a), generate_subscripts(t.a, 1) FROM t` | `SELECT array_element(t.a, __srf_i), __srf_i FROM t, generate_series(1, array_length(t.a, 1)) AS __srf_i` (`crate::lateral::select_list`) |
//! | `FROM t, generate_series(1, t.n) s` | `FROM t, LATERAL (SELECT * FROM generate_series(1, t.n) AS s (s)) AS s` (`crate::lateral`) |
//!
//! Other collations and operators are left alone, so the planner refuses
//! them as before.

use std::ops::ControlFlow;

use datafusion_sql::parser::Statement as DFStatement;
use datafusion_sql::sqlparser::ast::helpers::attached_token::AttachedToken;
use datafusion_sql::sqlparser::ast::CaseWhen;
use datafusion_sql::sqlparser::ast::{
    AccessExpr, BinaryOperator, DataType, Expr, Function, FunctionArg, FunctionArgExpr,
    FunctionArgumentList, FunctionArguments, Ident, ObjectName, ObjectNamePart, Subscript,
};

/// Rewrites `stmt` in place; `is_aggregate` tells aggregate functions.
///
/// Fails (0A000) for what the planner would otherwise take and ignore:
/// `WITH ORDINALITY` on a set-returning function.
pub fn rewrite(
    stmt: &mut DFStatement,
    is_aggregate: &dyn Fn(&str) -> bool,
) -> crate::error::Result<()> {
    if let DFStatement::Explain(e) = stmt {
        return rewrite(&mut e.statement, is_aggregate);
    }
    if let DFStatement::Statement(s) = stmt {
        use datafusion_sql::sqlparser::ast::VisitMut;
        let _ = s
            .as_mut()
            .visit(&mut crate::lateral::select_list::SelectListSets);
        if let ControlFlow::Break(e) = s.as_mut().visit(&mut TableFunctions) {
            return Err(e);
        }
        if let ControlFlow::Break(e) = s.as_mut().visit(&mut crate::lateral::syntax::LateralCalls) {
            return Err(e);
        }
        let _ = s.as_mut().visit(&mut DistinctNames);
        typed_literals(s.as_mut())?;
        let _ = datafusion_sql::sqlparser::ast::visit_expressions_mut(s.as_mut(), |e| {
            rewrite_expr(e);
            if let Expr::Subquery(q) = e {
                if let Some(condition) = single_value(q, is_aggregate) {
                    let subquery = std::mem::replace(
                        e,
                        Expr::value(datafusion_sql::sqlparser::ast::Value::Null),
                    );
                    *e = Expr::Case {
                        case_token: AttachedToken::empty(),
                        end_token: AttachedToken::empty(),
                        operand: None,
                        conditions: vec![CaseWhen {
                            condition,
                            result: subquery,
                        }],
                        else_result: None,
                    };
                }
            }
            ControlFlow::<()>::Continue(())
        });
    }
    Ok(())
}

/// String literals of PostgreSQL's types read as PostgreSQL reads them,
/// before the planner folds them (where text that is no value of its type
/// would fail as an internal error):
///
/// * interval literals and casts in forms Arrow's parser does not read
///   (`interval '1 day 02:00:00'`, `'@ 1 day ago'::interval`) are rewritten
///   into the form it reads ([`crate::interval_text`]); 22007 for text
///   neither reads;
/// * strings cast to bytea are decoded from the hex or escape form
///   ([`crate::bytea_text`]) into a hex literal; 22P02 for neither;
/// * strings cast to numbers, booleans, dates and timestamps are checked
///   ([`check_literal_cast`]).
///
/// `TRY_CAST` / `SAFE_CAST` make NULL of what they cannot read: they are
/// rewritten where the text reads, never refused.
fn typed_literals(s: &mut datafusion_sql::sqlparser::ast::Statement) -> crate::error::Result<()> {
    use crate::error::SqlError;
    use datafusion_sql::sqlparser::ast::{CastKind, Value};
    fn literal(e: &mut Expr) -> Option<&mut String> {
        match e {
            Expr::Value(v) => match &mut v.value {
                Value::SingleQuotedString(text) => Some(text),
                _ => None,
            },
            _ => None,
        }
    }
    let flow = datafusion_sql::sqlparser::ast::visit_expressions_mut(s, |e| {
        // Whether a literal this expression cannot read is an error.
        let strict = match e {
            Expr::Cast { kind, .. } => matches!(kind, CastKind::Cast | CastKind::DoubleColon),
            _ => true,
        };
        let refuse = |error: SqlError| {
            if strict {
                ControlFlow::Break(error)
            } else {
                ControlFlow::Continue(())
            }
        };
        match e {
            Expr::Cast {
                expr,
                data_type: DataType::Bytea,
                ..
            } => {
                // `'\x6869'::bytea` is two bytes, as PostgreSQL reads it; a
                // cast from a string would keep the six characters.
                let Some(text) = literal(expr) else {
                    return ControlFlow::Continue(());
                };
                match crate::bytea_text::decode(text) {
                    Ok(bytes) => {
                        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                        **expr = Expr::value(Value::HexStringLiteral(hex));
                        ControlFlow::Continue(())
                    }
                    Err(message) => refuse(SqlError::InvalidTextRepresentation(message)),
                }
            }
            Expr::Interval(iv) if iv.leading_field.is_none() && iv.last_field.is_none() => {
                match literal(&mut iv.value) {
                    Some(text) => interval(text).map_or_else(refuse, ControlFlow::Continue),
                    None => ControlFlow::Continue(()),
                }
            }
            Expr::Cast {
                expr,
                data_type: DataType::Interval { fields: None, .. },
                ..
            } => match literal(expr) {
                Some(text) => interval(text).map_or_else(refuse, ControlFlow::Continue),
                None => ControlFlow::Continue(()),
            },
            Expr::Cast {
                expr, data_type, ..
            } if strict => match literal(expr) {
                Some(text) => {
                    check_literal_cast(text, data_type).map_or_else(refuse, ControlFlow::Continue)
                }
                None => ControlFlow::Continue(()),
            },
            _ => ControlFlow::Continue(()),
        }
    });
    match flow {
        ControlFlow::Break(e) => Err(e),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// An interval literal's text made readable for Arrow (unchanged when it
/// reads it already).
fn interval(text: &mut String) -> crate::error::Result<()> {
    let readable = crate::interval_text::for_arrow(text)
        .map_err(crate::error::SqlError::InvalidDatetimeFormat)?;
    if let std::borrow::Cow::Owned(normal) = readable {
        *text = normal;
    }
    Ok(())
}

/// A string literal cast to a number, boolean, date or timestamp is read
/// here, before the planner folds the cast (where a value that is no such
/// thing would fail as an internal error): PostgreSQL's SQLSTATEs — 22P02
/// for text that is no value of the type, 22003 for an integer out of its
/// type's range, 22007 for a date or timestamp that cannot be read. Other
/// targets are left to the planner.
fn check_literal_cast(text: &str, target: &DataType) -> crate::error::Result<()> {
    use crate::error::SqlError;
    use arrow::datatypes::{DataType as Arrow, TimeUnit};
    use datafusion_sql::sqlparser::ast::TimezoneInfo;
    let (arrow, name) = match target {
        DataType::SmallInt(_) | DataType::Int2(_) => (Arrow::Int16, "smallint"),
        DataType::Int(_) | DataType::Integer(_) | DataType::Int4(_) => (Arrow::Int32, "integer"),
        DataType::BigInt(_) | DataType::Int8(_) => (Arrow::Int64, "bigint"),
        DataType::Real | DataType::Float4 => (Arrow::Float32, "real"),
        DataType::Double(_) | DataType::DoublePrecision | DataType::Float8 => {
            (Arrow::Float64, "double precision")
        }
        DataType::Bool | DataType::Boolean => (Arrow::Boolean, "boolean"),
        DataType::Date => (Arrow::Date32, "date"),
        DataType::Timestamp(_, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone) => (
            Arrow::Timestamp(TimeUnit::Nanosecond, None),
            "timestamp without time zone",
        ),
        _ => return Ok(()),
    };
    let strings = arrow::array::StringArray::from(vec![text]);
    let options = arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    if arrow::compute::cast_with_options(&strings, &arrow, &options).is_ok() {
        return Ok(());
    }
    let message = format!("invalid input syntax for type {name}: \"{text}\"");
    Err(match arrow {
        Arrow::Date32 | Arrow::Timestamp(..) => SqlError::InvalidDatetimeFormat(message),
        Arrow::Int16 | Arrow::Int32 | Arrow::Int64 if text.trim().parse::<i128>().is_ok() => {
            SqlError::NumericOutOfRange(format!(
                "value \"{}\" is out of range for type {name}",
                text.trim()
            ))
        }
        _ => SqlError::InvalidTextRepresentation(message),
    })
}

/// Whether a number written with an exponent needs more than 38 decimal
/// digits (`1.5e300`, `1e-50`): DataFusion's parser refuses such decimals
/// (or types them past what Stride computes in), so they are read as
/// doubles, as DuckDB reads them (PostgreSQL keeps them numeric).
/// Numbers without an exponent are left to the parser.
fn beyond_decimal(n: &str) -> bool {
    let Some(at) = n.find(['e', 'E']) else {
        return false;
    };
    let (mantissa, exponent) = (&n[..at], &n[at + 1..]);
    let Ok(exponent) = exponent.parse::<i64>() else {
        return false;
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = format!("{int}{frac}").trim_start_matches('0').to_string();
    if digits.is_empty() {
        return false; // zero
    }
    let digits = digits.len() as i64;
    // value = digits × 10^(exponent - frac digits)
    let scale = frac.len() as i64 - exponent;
    let needed = if scale < 0 {
        digits - scale
    } else {
        digits.max(scale)
    };
    needed > 38
}

/// A correlated scalar subquery that aggregates nothing (`(SELECT
/// c.collname FROM pg_collation c WHERE c.oid = a.attcollation)`):
/// PostgreSQL gives its one row's value, NULL for none and fails for more.
/// DataFusion decorrelates only aggregating subqueries, so the output is
/// wrapped in `single_value`, the aggregate that means exactly that.
///
/// Returns the conjuncts of the subquery's WHERE clause that read only the
/// outer query's columns, which DataFusion cannot decorrelate: the caller
/// makes them the condition of a CASE around the subquery (NULL when they
/// do not hold, as the subquery gives).
fn single_value(
    q: &mut datafusion_sql::sqlparser::ast::Query,
    is_aggregate: &dyn Fn(&str) -> bool,
) -> Option<Expr> {
    use datafusion_sql::sqlparser::ast::{GroupByExpr, SelectItem, SetExpr, TableFactor};
    if q.with.is_some() || q.order_by.is_some() || q.limit_clause.is_some() || q.fetch.is_some() {
        return None;
    }
    let SetExpr::Select(select) = q.body.as_mut() else {
        return None;
    };
    let grouped = match &select.group_by {
        GroupByExpr::All(_) => true,
        GroupByExpr::Expressions(exprs, _) => !exprs.is_empty(),
    };
    if grouped
        || select.having.is_some()
        || select.distinct.is_some()
        || select.projection.len() != 1
    {
        return None;
    }
    // Relations (names and aliases) the subquery's own FROM brings.
    let mut own: Vec<String> = Vec::new();
    for t in &select.from {
        for factor in std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)) {
            match factor {
                TableFactor::Table { name, alias, .. } => {
                    if let Some(last) = name_parts(name).pop() {
                        own.push(last);
                    }
                    own.push(name_parts(name).join("."));
                    if let Some(a) = alias {
                        own.push(a.name.value.to_lowercase());
                    }
                }
                TableFactor::Derived { alias: Some(a), .. }
                | TableFactor::Function { alias: Some(a), .. } => {
                    own.push(a.name.value.to_lowercase())
                }
                _ => {}
            }
        }
    }
    let mut correlated = false;
    let mut aggregates = false;
    let _ = datafusion_sql::sqlparser::ast::visit_expressions(select.as_ref(), |e| {
        match e {
            Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
                let qualifier: Vec<String> = parts[..parts.len() - 1]
                    .iter()
                    .map(|p| p.value.to_lowercase())
                    .collect();
                let last = qualifier.last().cloned().unwrap_or_default();
                if !own.contains(&last) && !own.contains(&qualifier.join(".")) {
                    correlated = true;
                }
            }
            Expr::Function(f) => {
                if let Some(n) = name_parts(&f.name).last() {
                    aggregates |= is_aggregate(n);
                }
            }
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    if !correlated || aggregates {
        return None;
    }
    // Conjuncts of the WHERE clause that read only the outer query's
    // columns (`AND a.atthasdef`): for the caller's CASE.
    let mut outer_only = Vec::new();
    if let Some(selection) = select.selection.take() {
        let mut kept = Vec::new();
        let mut all = conjuncts(selection);
        // `inner = outer` makes the outer expression the inner one in the
        // other conjuncts (both are equal and not NULL where the conjunct
        // holds), so that `outer <> inner2` becomes `inner <> inner2`,
        // which DataFusion can decorrelate.
        let mut equal: Vec<(Expr, Expr)> = Vec::new();
        for c in &all {
            if let Expr::BinaryOp {
                left,
                op: BinaryOperator::Eq,
                right,
            } = c
            {
                let (l, r) = (left.as_ref(), right.as_ref());
                if reads_only_outer(l, &own) && reads_only_inner(r, &own) {
                    equal.push((l.clone(), r.clone()));
                } else if reads_only_outer(r, &own) && reads_only_inner(l, &own) {
                    equal.push((r.clone(), l.clone()));
                }
            }
        }
        for c in all.iter_mut() {
            let is_link = matches!(c, Expr::BinaryOp { left, op: BinaryOperator::Eq, right }
                if equal.iter().any(|(o, i)| (left.as_ref() == o && right.as_ref() == i)
                    || (left.as_ref() == i && right.as_ref() == o)));
            if is_link || reads_only_outer(c, &own) {
                continue;
            }
            let _ = datafusion_sql::sqlparser::ast::visit_expressions_mut(c, |x| {
                if let Some((_, inner)) = equal.iter().find(|(outer, _)| x == outer) {
                    *x = inner.clone();
                }
                ControlFlow::<()>::Continue(())
            });
        }
        for c in all {
            if reads_only_outer(&c, &own) {
                outer_only.push(c);
            } else {
                kept.push(c);
            }
        }
        select.selection = and_all(kept);
    }
    match &mut select.projection[0] {
        SelectItem::UnnamedExpr(e) => {
            let inner =
                std::mem::replace(e, Expr::value(datafusion_sql::sqlparser::ast::Value::Null));
            *e = call(crate::pg_functions::SINGLE_VALUE, vec![inner]);
        }
        SelectItem::ExprWithAlias { expr, .. } => {
            let inner = std::mem::replace(
                expr,
                Expr::value(datafusion_sql::sqlparser::ast::Value::Null),
            );
            *expr = call(crate::pg_functions::SINGLE_VALUE, vec![inner]);
        }
        _ => {}
    }
    and_all(outer_only)
}

/// Set-returning functions in `FROM` (`pg_catalog.generate_series(0, n)
/// s`, `unnest(a) x`): `unnest` of one array made a table function, the
/// schema qualifier dropped (the planner takes a
/// table function's name from its first part), and, as PostgreSQL names
/// the one column of a function that returns a scalar after the call's
/// alias, that alias given as the column's name too (`s` is then the
/// value: `prattrs[s]`).
struct TableFunctions;

impl datafusion_sql::sqlparser::ast::VisitorMut for TableFunctions {
    type Break = crate::error::SqlError;

    fn pre_visit_table_factor(
        &mut self,
        factor: &mut datafusion_sql::sqlparser::ast::TableFactor,
    ) -> ControlFlow<crate::error::SqlError> {
        use datafusion_sql::sqlparser::ast::{TableAliasColumnDef, TableFactor};
        // `unnest(a)` of one array: the table function (the parser makes
        // it a factor of its own, which the planner binds only for lists).
        if let TableFactor::UNNEST {
            alias,
            array_exprs,
            with_offset: false,
            with_offset_alias: None,
            with_ordinality: false,
        } = factor
        {
            if let [array] = array_exprs.as_slice() {
                *factor = crate::lateral::syntax::call(
                    ObjectName::from(vec![Ident::new("unnest")]),
                    vec![FunctionArg::Unnamed(FunctionArgExpr::Expr(array.clone()))],
                    alias.take(),
                );
            }
        }
        let (name, alias, ordinality) = match factor {
            TableFactor::Table {
                name,
                alias,
                args: Some(_),
                with_ordinality,
                ..
            } => (name, alias, *with_ordinality),
            TableFactor::Function { name, alias, .. } => (name, alias, false),
            TableFactor::UNNEST {
                with_ordinality: true,
                ..
            } => {
                return ControlFlow::Break(crate::error::SqlError::Unsupported(
                    "WITH ORDINALITY".into(),
                ))
            }
            _ => return ControlFlow::Continue(()),
        };
        if ordinality {
            return ControlFlow::Break(crate::error::SqlError::Unsupported(
                "WITH ORDINALITY".into(),
            ));
        }
        let parts = name_parts(name);
        let Some(function) = unqualified(&parts).map(str::to_string) else {
            return ControlFlow::Continue(());
        };
        if parts.len() == 2 {
            *name = ObjectName::from(vec![Ident::new(function.clone())]);
        }
        if crate::table_functions::SetFunction::by_name(&function).is_some() {
            if let Some(alias) = alias {
                if alias.columns.is_empty() {
                    alias.columns = vec![TableAliasColumnDef {
                        name: alias.name.clone(),
                        data_type: None,
                    }];
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// PostgreSQL lets a query's output columns share a name (`SELECT NULL,
/// NULL`, `SELECT a, t.a`, `SELECT a, b AS a`); DataFusion does not. A
/// later column whose name — its alias, a column reference's column, else
/// its text — repeats an earlier one's is named `?column?` (PostgreSQL's
/// name for an unnamed column), made unique with a number. These names stay inside the plan: a statement's
/// result columns are named by `crate::column_names`, so the client sees
/// `?column?` twice.
struct DistinctNames;

impl datafusion_sql::sqlparser::ast::VisitorMut for DistinctNames {
    type Break = ();

    fn post_visit_query(
        &mut self,
        q: &mut datafusion_sql::sqlparser::ast::Query,
    ) -> ControlFlow<()> {
        distinct_names(q.body.as_mut());
        ControlFlow::Continue(())
    }
}

fn distinct_names(body: &mut datafusion_sql::sqlparser::ast::SetExpr) {
    use datafusion_sql::sqlparser::ast::{SelectItem, SetExpr};
    match body {
        SetExpr::Select(select) => {
            let mut seen: Vec<String> = Vec::new();
            let mut n = 0;
            for item in select.projection.iter_mut() {
                let (expr, name) = match &*item {
                    SelectItem::UnnamedExpr(e) => (None, output_key(e)),
                    SelectItem::ExprWithAlias { expr, alias } => (Some(expr), folded(alias)),
                    _ => continue,
                };
                if !seen.contains(&name) {
                    seen.push(name);
                    continue;
                }
                let expr = match (expr, &*item) {
                    (Some(expr), _) | (None, SelectItem::UnnamedExpr(expr)) => expr.clone(),
                    _ => continue,
                };
                n += 1;
                let alias = if n == 1 {
                    "?column?".to_string()
                } else {
                    format!("?column?{n}")
                };
                seen.push(alias.clone());
                *item = SelectItem::ExprWithAlias {
                    expr,
                    alias: Ident::with_quote('"', alias),
                };
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            distinct_names(left);
            distinct_names(right);
        }
        _ => {}
    }
}

/// What DataFusion names an unaliased output column after, as far as the
/// syntax tells: a cast is named as its argument (`x::int` and `x::text`
/// are both `x`), a column reference by its column, anything else by its
/// text.
fn output_key(e: &Expr) -> String {
    match e {
        Expr::Cast { expr, .. } => output_key(expr),
        Expr::Identifier(i) => folded(i),
        Expr::CompoundIdentifier(parts) => parts.last().map(folded).unwrap_or_default(),
        other => other.to_string(),
    }
}

/// An identifier as the binder folds it: lower-cased (ASCII only, as
/// PostgreSQL and DataFusion fold names) unless quoted.
pub(crate) fn folded(i: &Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_ascii_lowercase()
    }
}

fn name_parts(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .map(|p| match p {
            ObjectNamePart::Identifier(i) if i.quote_style.is_some() => i.value.clone(),
            ObjectNamePart::Identifier(i) => i.value.to_lowercase(),
            other => other.to_string(),
        })
        .collect()
}

/// `[pg_catalog.]name` → `name`.
fn unqualified(parts: &[String]) -> Option<&str> {
    match parts {
        [name] => Some(name),
        [schema, name] if schema == "pg_catalog" => Some(name),
        _ => None,
    }
}

/// A call of function `name` with positional `args`.
pub(crate) fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// What a cast to `data_type` becomes.
enum CastTarget {
    /// A `reg*` type: this conversion function.
    Reg(&'static str),
    /// A plain type the planner knows.
    Plain(DataType),
    /// Text: also the name of a `reg*` value.
    Text,
    Keep,
}

fn cast_target(data_type: &DataType) -> CastTarget {
    let parts = match data_type {
        DataType::Regclass => return CastTarget::Reg("regclass"),
        DataType::Text => return CastTarget::Text,
        // Arrays of the catalogs are in PostgreSQL's text form.
        DataType::Array(datafusion_sql::sqlparser::ast::ArrayElemTypeDef::SquareBracket(_, _)) => {
            return CastTarget::Text
        }
        DataType::Custom(name, modifiers) if modifiers.is_empty() => name_parts(name),
        _ => return CastTarget::Keep,
    };
    let Some(name) = unqualified(&parts) else {
        return CastTarget::Keep;
    };
    match name {
        "regclass" => CastTarget::Reg("regclass"),
        "regtype" => CastTarget::Reg("regtype"),
        "regnamespace" => CastTarget::Reg("regnamespace"),
        "regproc" | "regprocedure" => CastTarget::Reg("regproc"),
        "oid" | "xid" | "int8" => CastTarget::Plain(DataType::BigInt(None)),
        "int4" => CastTarget::Plain(DataType::Int(None)),
        "int2" => CastTarget::Plain(DataType::SmallInt(None)),
        "bool" => CastTarget::Plain(DataType::Boolean),
        "float8" => CastTarget::Plain(DataType::DoublePrecision),
        "float4" => CastTarget::Plain(DataType::Real),
        "name" | "char" | "text" | "varchar" | "pg_node_tree" => CastTarget::Text,
        _ => CastTarget::Keep,
    }
}

/// The `reg*` conversion a rewritten cast called, if `expr` is one.
fn reg_call(expr: &Expr) -> Option<&'static str> {
    let Expr::Function(f) = expr else {
        return None;
    };
    match name_parts(&f.name).as_slice() {
        [n] => ["regclass", "regtype", "regnamespace", "regproc"]
            .into_iter()
            .find(|r| r == n),
        _ => None,
    }
}

fn rewrite_expr(e: &mut Expr) {
    match e {
        Expr::Value(v) => {
            use datafusion_sql::sqlparser::ast::{CastKind, Value};
            if let Value::Number(n, _) = &v.value {
                if beyond_decimal(n) {
                    *e = Expr::Cast {
                        kind: CastKind::Cast,
                        expr: Box::new(Expr::value(Value::SingleQuotedString(n.clone()))),
                        data_type: DataType::DoublePrecision,
                        array: false,
                        format: None,
                    };
                }
            }
        }
        Expr::BinaryOp { op, .. } => {
            if let BinaryOperator::PGCustomBinaryOperator(parts) = op {
                let parts: Vec<String> = parts.iter().map(|p| p.to_lowercase()).collect();
                let builtin = match unqualified(&parts) {
                    Some("~") => Some(BinaryOperator::PGRegexMatch),
                    Some("~*") => Some(BinaryOperator::PGRegexIMatch),
                    Some("!~") => Some(BinaryOperator::PGRegexNotMatch),
                    Some("!~*") => Some(BinaryOperator::PGRegexNotIMatch),
                    Some("~~") => Some(BinaryOperator::PGLikeMatch),
                    Some("!~~") => Some(BinaryOperator::PGNotLikeMatch),
                    Some("=") => Some(BinaryOperator::Eq),
                    Some("<>") | Some("!=") => Some(BinaryOperator::NotEq),
                    Some("<") => Some(BinaryOperator::Lt),
                    Some("<=") => Some(BinaryOperator::LtEq),
                    Some(">") => Some(BinaryOperator::Gt),
                    Some(">=") => Some(BinaryOperator::GtEq),
                    Some("+") => Some(BinaryOperator::Plus),
                    Some("-") => Some(BinaryOperator::Minus),
                    Some("*") => Some(BinaryOperator::Multiply),
                    Some("/") => Some(BinaryOperator::Divide),
                    Some("||") => Some(BinaryOperator::StringConcat),
                    _ => None,
                };
                if let Some(b) = builtin {
                    *op = b;
                }
            }
        }
        Expr::Collate { expr, collation } => {
            let parts = name_parts(collation);
            let bytewise = matches!(
                unqualified(&parts),
                Some("default") | Some("C") | Some("POSIX") | Some("c") | Some("posix")
            );
            if bytewise {
                *e = std::mem::replace(
                    expr.as_mut(),
                    Expr::value(datafusion_sql::sqlparser::ast::Value::Null),
                );
            }
        }
        Expr::Cast {
            expr, data_type, ..
        } => match cast_target(data_type) {
            CastTarget::Reg(f) => {
                let inner = std::mem::replace(
                    expr.as_mut(),
                    Expr::value(datafusion_sql::sqlparser::ast::Value::Null),
                );
                *e = call(f, vec![inner]);
            }
            CastTarget::Text => {
                if let Some(reg) = reg_call(expr) {
                    if let Expr::Function(f) = expr.as_mut() {
                        f.name = ObjectName::from(vec![Ident::new(format!("{reg}out"))]);
                    }
                    *e = std::mem::replace(
                        expr.as_mut(),
                        Expr::value(datafusion_sql::sqlparser::ast::Value::Null),
                    );
                } else if !matches!(data_type, DataType::Text) {
                    *data_type = DataType::Text;
                }
            }
            CastTarget::Plain(t) => *data_type = t,
            CastTarget::Keep => {}
        },
        Expr::AnyOp {
            left,
            compare_op: BinaryOperator::Eq,
            right,
            ..
        } => {
            if let Some(list) = array_items(right) {
                *e = Expr::InList {
                    expr: left.clone(),
                    list,
                    negated: false,
                };
            } else if !matches!(right.as_ref(), Expr::Subquery(_)) {
                let (array, value) = (right.as_ref().clone(), left.as_ref().clone());
                *e = call("array_any_eq", vec![array, value]);
            }
        }
        Expr::AllOp {
            left,
            compare_op: BinaryOperator::NotEq,
            right,
        } => {
            if let Some(list) = array_items(right) {
                *e = Expr::InList {
                    expr: left.clone(),
                    list,
                    negated: true,
                };
            }
        }
        Expr::CompoundFieldAccess { root, access_chain } => {
            if let [AccessExpr::Subscript(Subscript::Index { index })] = access_chain.as_slice() {
                let root = std::mem::replace(
                    root.as_mut(),
                    Expr::value(datafusion_sql::sqlparser::ast::Value::Null),
                );
                *e = call("array_element", vec![root, index.clone()]);
            }
        }
        Expr::Function(f) if is_array_constructor(f) => {
            if let FunctionArguments::Subquery(q) = &f.args {
                if let Some(q) = array_subquery(q) {
                    *e = Expr::Subquery(Box::new(q));
                }
            }
        }
        Expr::Function(f) => {
            let parts = name_parts(&f.name);
            if let [schema, name] = parts.as_slice() {
                if schema == "pg_catalog" {
                    f.name = ObjectName::from(vec![Ident::new(name.clone())]);
                }
            }
        }
        _ => {}
    }
}

fn conjuncts(e: Expr) -> Vec<Expr> {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            let mut out = conjuncts(*left);
            out.extend(conjuncts(*right));
            out
        }
        Expr::Nested(inner)
            if matches!(
                inner.as_ref(),
                Expr::BinaryOp {
                    op: BinaryOperator::And,
                    ..
                }
            ) =>
        {
            conjuncts(*inner)
        }
        other => vec![other],
    }
}

fn and_all(parts: Vec<Expr>) -> Option<Expr> {
    parts.into_iter().reduce(|a, b| Expr::BinaryOp {
        left: Box::new(a),
        op: BinaryOperator::And,
        right: Box::new(b),
    })
}

/// What the columns `e` names refer to, relative to the relations `own`.
#[derive(Default)]
struct Reads {
    /// Qualified column references.
    columns: usize,
    /// Some are qualified by a relation in `own`.
    inner: bool,
    /// Some are qualified by a relation not in `own`.
    outer: bool,
    /// Unqualified names (which side they mean is not known).
    unqualified: bool,
    /// A subquery.
    subquery: bool,
}

fn reads(e: &Expr, own: &[String]) -> Reads {
    let mut r = Reads::default();
    let _ = datafusion_sql::sqlparser::ast::visit_expressions(e, |x| {
        match x {
            Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
                r.columns += 1;
                let qualifier: Vec<String> = parts[..parts.len() - 1]
                    .iter()
                    .map(|p| p.value.to_lowercase())
                    .collect();
                let last = qualifier.last().cloned().unwrap_or_default();
                if own.contains(&last) || own.contains(&qualifier.join(".")) {
                    r.inner = true;
                } else {
                    r.outer = true;
                }
            }
            Expr::Identifier(_) => r.unqualified = true,
            Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => r.subquery = true,
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    r
}

/// Whether `e` names columns, all of them qualified by relations in
/// `own`, and holds no subquery.
fn reads_only_inner(e: &Expr, own: &[String]) -> bool {
    let r = reads(e, own);
    r.columns > 0 && !r.outer && !r.subquery
}

/// Whether `e` names columns, all of them qualified by relations not in
/// `own`, and holds no subquery (nor an unqualified name, which may be
/// inner).
fn reads_only_outer(e: &Expr, own: &[String]) -> bool {
    let r = reads(e, own);
    r.columns > 0 && !r.inner && !r.unqualified && !r.subquery
}

fn is_array_constructor(f: &Function) -> bool {
    matches!(name_parts(&f.name).as_slice(), [n] if n == "array")
}

/// `ARRAY(SELECT x FROM ... ORDER BY k)` as `(SELECT array_agg(x ORDER BY
/// k) FROM ...)`; `None` where the subquery is not one plain SELECT of
/// one column.
fn array_subquery(
    q: &datafusion_sql::sqlparser::ast::Query,
) -> Option<datafusion_sql::sqlparser::ast::Query> {
    use datafusion_sql::sqlparser::ast::{
        FunctionArgumentClause, OrderByKind, SelectItem, SetExpr, Value,
    };
    let mut q = q.clone();
    if q.limit_clause.is_some() || q.fetch.is_some() || q.with.is_some() {
        return None;
    }
    let order = q.order_by.take();
    let SetExpr::Select(select) = q.body.as_mut() else {
        return None;
    };
    if select.projection.len() != 1 {
        return None;
    }
    let item = match &select.projection[0] {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e.clone(),
        _ => return None,
    };
    let mut clauses = Vec::new();
    if let Some(order) = order {
        let OrderByKind::Expressions(mut exprs) = order.kind else {
            return None;
        };
        for o in exprs.iter_mut() {
            // `ORDER BY 1`: the one output column.
            if let Expr::Value(v) = &o.expr {
                if matches!(&v.value, Value::Number(n, _) if n == "1") {
                    o.expr = item.clone();
                }
            }
        }
        clauses.push(FunctionArgumentClause::OrderBy(exprs));
    }
    let Expr::Function(mut agg) = call("array_agg", vec![item]) else {
        return None;
    };
    if let FunctionArguments::List(list) = &mut agg.args {
        list.clauses = clauses;
    }
    select.projection = vec![SelectItem::UnnamedExpr(Expr::Function(agg))];
    Some(q)
}

/// The elements of an `ARRAY[...]` literal (possibly parenthesized).
fn array_items(e: &Expr) -> Option<Vec<Expr>> {
    match e {
        Expr::Array(a) if !a.elem.is_empty() => Some(a.elem.clone()),
        Expr::Nested(inner) => array_items(inner),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponent_numbers_past_38_digits_are_read_as_doubles() {
        for n in ["1.5e300", "1e38", "1E-50", "12.5e37"] {
            assert!(beyond_decimal(n), "{n}");
        }
        for n in [
            "1e6", "2.5E3", "1e-3", "1e37", "1e-38", "0e500", "123", "1.5",
        ] {
            assert!(!beyond_decimal(n), "{n}");
        }
    }

    fn rewritten(sql: &str) -> String {
        let mut stmts = crate::limits::parse(sql).unwrap();
        let mut s = stmts.pop_front().unwrap();
        rewrite(&mut s, &|n| n == "max" || n == "array_agg").unwrap();
        s.to_string()
    }

    #[test]
    fn psql_syntax_becomes_plain_sql() {
        assert_eq!(
            rewritten("SELECT 1 FROM t WHERE c.relname OPERATOR(pg_catalog.~) '^(t)$' COLLATE pg_catalog.default"),
            "SELECT 1 FROM t WHERE c.relname ~ '^(t)$'"
        );
        assert_eq!(
            rewritten(
                "SELECT 'pg_class'::regclass, c.oid::pg_catalog.regclass::pg_catalog.text, x::oid"
            ),
            "SELECT regclass('pg_class'), regclassout(c.oid), x::BIGINT"
        );
        assert_eq!(
            rewritten("SELECT pg_catalog.version() WHERE k = ANY (ARRAY['r', 'p'])"),
            "SELECT version() WHERE k IN ('r', 'p')"
        );
        assert_eq!(
            rewritten("SELECT (current_schemas(true))[1]"),
            "SELECT array_element((current_schemas(true)), 1)"
        );
        assert_eq!(
            rewritten("SELECT (SELECT c.collname FROM pg_collation c WHERE c.oid = a.attcollation) FROM pg_attribute a"),
            "SELECT (SELECT single_value(c.collname) FROM pg_collation c WHERE c.oid = a.attcollation) FROM pg_attribute a"
        );
        assert_eq!(
            rewritten("SELECT (SELECT c.n FROM c, t WHERE c.oid = a.x AND t.oid = a.y AND a.x <> t.z AND a.h) FROM a"),
            "SELECT CASE WHEN a.h THEN (SELECT single_value(c.n) FROM c, t WHERE c.oid = a.x AND t.oid = a.y AND c.oid <> t.z) END FROM a"
        );
        // Uncorrelated or aggregating subqueries stay as they are.
        assert_eq!(
            rewritten(
                "SELECT (SELECT max(c.x) FROM c WHERE c.y = a.y), (SELECT c.x FROM c) FROM a"
            ),
            "SELECT (SELECT max(c.x) FROM c WHERE c.y = a.y), (SELECT c.x FROM c) FROM a"
        );
        assert_eq!(
            rewritten("SELECT array(select rolname from pg_roles where oid = any (pol.polroles) order by 1) FROM pol"),
            "SELECT (SELECT array_agg(rolname ORDER BY rolname) FROM pg_roles WHERE array_any_eq(pol.polroles, oid)) FROM pol"
        );
        assert_eq!(
            rewritten("SELECT a, NULL, NULL FROM t"),
            "SELECT a, NULL, NULL AS \"?column?\" FROM t"
        );
        assert_eq!(
            rewritten("SELECT a, t.A, b AS a, c AS \"A\" FROM t"),
            "SELECT a, t.A AS \"?column?\", b AS \"?column?2\", c AS \"A\" FROM t"
        );
        assert_eq!(
            rewritten("SELECT CAST(1 AS INT), 1::BIGINT, x::INT, x::TEXT FROM t"),
            "SELECT CAST(1 AS INT), 1::BIGINT AS \"?column?\", x::INT, x::TEXT AS \"?column?2\" FROM t"
        );
        // A call after the first item becomes a lateral derived table
        // (`crate::lateral`).
        assert_eq!(
            rewritten("SELECT s FROM pg_catalog.generate_series(0, 2) s, generate_series(1, 2) AS t(n), generate_series(1, 3)"),
            "SELECT s FROM generate_series(0, 2) s (s), LATERAL (SELECT * FROM generate_series(1, 2) AS t (n)) AS t, LATERAL (SELECT * FROM generate_series(1, 3)) AS generate_series"
        );
        assert_eq!(
            rewritten("SELECT x FROM unnest(t.a) x, pg_catalog.unnest(t.b) AS y"),
            "SELECT x FROM unnest(t.a) x (x), LATERAL (SELECT * FROM unnest(t.b) AS y (y)) AS y"
        );
        // Other collations stay, and the planner refuses them.
        assert!(rewritten("SELECT a COLLATE \"de_DE\" FROM t").contains("COLLATE"));
    }
}

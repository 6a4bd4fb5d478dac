//! The names of a query's result columns as PostgreSQL gives them.
//!
//! DataFusion names an unaliased output column after its expression's
//! display text (`Int64(1) + Int64(1)`, `count(*)`, `sum(t.x)`);
//! PostgreSQL names it by its rule *FigureColname* (`parser/parse_target.c`,
//! described in the manual under "Column Labels" of `SELECT`), and clients
//! show those names (psql's headers, JDBC's `getColumnLabel`, the keys of
//! psycopg's and pandas' rows). The names are computed here from the
//! statement's syntax tree, before any rewriting, and given only to the
//! result's fields — what `RowDescription`, a prepared statement's Describe,
//! a cursor's `FETCH`, `COPY … TO`'s header and in-process results report.
//! The plan keeps DataFusion's names inside: two result columns may share a
//! name (`SELECT count(*), count(x)` gives two columns `count`, as in
//! PostgreSQL), which a DataFusion projection refuses.
//!
//! The rule, for a `SELECT` list item:
//!
//! * `expr AS name`: `name` (lower-cased unless quoted, as identifiers are);
//! * a column reference `a`, `t.a`, `s.t.a`: its last part; a field or
//!   subscript `(r).f`, `a[1]`: the last field named, else the base's name;
//! * a function call (aggregates with `FILTER`, window functions, `count(*)`
//!   too): the function's name without its schema — `sum`, `row_number`,
//!   `coalesce`, `nullif`, `greatest`, `current_date`; the special syntaxes
//!   PostgreSQL turns into calls by their function's name: `EXTRACT` →
//!   `extract`, `SUBSTRING` → `substring`, `POSITION` → `position`,
//!   `OVERLAY` → `overlay`, `TRIM` → `btrim` / `ltrim` / `rtrim`,
//!   `AT TIME ZONE` → `timezone`, `CEIL` → `ceil`, `FLOOR` → `floor`;
//! * `ARRAY[..]` and `ARRAY(subquery)`: `array`; `ROW(..)` and `(a, b)`:
//!   `row`; `EXISTS (..)`: `exists`;
//! * a scalar subquery `(SELECT ..)`: the name of its first column;
//! * a cast `x::t`, `CAST(x AS t)`: the name of `x` where it has a strong
//!   one (every name above); otherwise the type's name as PostgreSQL spells
//!   it internally (`CAST(1 AS int)` → `int4`, `'x'::varchar` → `varchar`,
//!   `1::double precision` → `float8`). Typed literals (`date '..'`,
//!   `interval '..'`) and `TRUE`/`FALSE` (PostgreSQL reads them as `'t'::bool`)
//!   are casts of constants: `date`, `interval`, `bool`;
//! * `CASE`: `case` — a weak name, which a cast around it replaces;
//! * anything else — constants, operators (`a + 1`, `-a`, `a IS NULL`,
//!   `a || b`, `NOT EXISTS`, `x IN (..)`), parameters —: `?column?`.
//!
//! A set operation takes its names from its first (leftmost) branch; `VALUES`
//! names its columns `column1`, `column2`, …; `TABLE t` and `*` / `t.*` keep
//! the names the planner gives the columns they expand to, except where the
//! expanded relation is a derived table or common table expression without
//! a column list, whose names follow this rule too.

use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};

use crate::pg_compat::folded;
use datafusion_sql::parser::Statement as DFStatement;
use datafusion_sql::sqlparser::ast::{
    AccessExpr, ArrayElemTypeDef, Cte, DataType, ExactNumberInfo, Expr, JoinConstraint,
    JoinOperator, ObjectName, ObjectNamePart, Query, Select, SelectItem,
    SelectItemQualifiedWildcardKind, SetExpr, Statement as SqlStatement, TableFactor,
    TableWithJoins, TimezoneInfo, TrimWhereField, Value, WildcardAdditionalOptions,
};

/// PostgreSQL's name for a column whose expression gives none.
pub const UNNAMED: &str = "?column?";

/// One entry of a query's output, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    /// One column of this name.
    Name(String),
    /// Any number of columns (a wildcard's expansion) whose names are the
    /// planner's.
    Expand,
}

/// The output column names of a query, computed from its syntax
/// ([`ColumnNames::of_statement`]) and given to the bound plan's result
/// fields ([`ColumnNames::rename`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnNames {
    slots: Vec<Slot>,
}

/// How sure a name is (FigureColname's strength): a cast keeps its
/// argument's name only where it is strong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strength {
    Weak,
    Strong,
}

/// The common table expressions a query's `FROM` may name, innermost last.
type Scope<'a> = Vec<&'a Cte>;

impl ColumnNames {
    /// The names of a query statement's result columns; `None` for any
    /// other statement.
    pub fn of_statement(stmt: &DFStatement) -> Option<ColumnNames> {
        match stmt {
            DFStatement::Statement(s) => match s.as_ref() {
                SqlStatement::Query(q) => Some(ColumnNames::of_query(q)),
                _ => None,
            },
            _ => None,
        }
    }

    /// The names of a query's result columns.
    pub fn of_query(query: &Query) -> ColumnNames {
        ColumnNames {
            slots: merged(query_slots(query, &Vec::new())),
        }
    }

    /// The names given to `count` result columns: `None` where the column
    /// keeps the planner's name (a wildcard's expansion, or every column
    /// where the count does not match the syntax's).
    pub fn names(&self, count: usize) -> Vec<Option<&str>> {
        let named = self
            .slots
            .iter()
            .filter(|s| matches!(s, Slot::Name(_)))
            .count();
        let expands = self.slots.len() - named;
        if named > count || (expands == 0 && named != count) {
            return vec![None; count];
        }
        if expands == 0 {
            return self.slots.iter().map(slot_name).collect();
        }
        // Where more than one wildcard expands, the columns between the
        // first and the last are the planner's: how many each wildcard
        // gives is not known here.
        let prefix = self
            .slots
            .iter()
            .take_while(|s| matches!(s, Slot::Name(_)))
            .map(slot_name);
        let suffix: Vec<Option<&str>> = {
            let mut tail: Vec<Option<&str>> = self
                .slots
                .iter()
                .rev()
                .take_while(|s| matches!(s, Slot::Name(_)))
                .map(slot_name)
                .collect();
            tail.reverse();
            tail
        };
        let mut out: Vec<Option<&str>> = prefix.collect();
        let middle = count - out.len() - suffix.len();
        out.extend(std::iter::repeat_n(None, middle));
        out.extend(suffix);
        out
    }

    /// `schema` with its fields named as PostgreSQL names them (types,
    /// nullability and metadata unchanged).
    pub fn rename(&self, schema: &Schema) -> SchemaRef {
        let names = self.names(schema.fields().len());
        let fields: Vec<_> = schema
            .fields()
            .iter()
            .zip(names)
            .map(|(f, name)| match name {
                Some(name) if name != f.name() => {
                    Arc::new(f.as_ref().clone().with_name(name.to_string()))
                }
                _ => f.clone(),
            })
            .collect();
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
    }
}

fn slot_name(slot: &Slot) -> Option<&str> {
    match slot {
        Slot::Name(n) => Some(n.as_str()),
        Slot::Expand => None,
    }
}

/// Adjacent expansions are one expansion.
fn merged(slots: Vec<Slot>) -> Vec<Slot> {
    let mut out: Vec<Slot> = Vec::with_capacity(slots.len());
    for slot in slots {
        if slot == Slot::Expand && out.last() == Some(&Slot::Expand) {
            continue;
        }
        out.push(slot);
    }
    out
}

/// PostgreSQL's name for the expression of an unaliased `SELECT` item
/// (FigureColname): `?column?` where it gives none.
pub fn figure_colname(expr: &Expr) -> String {
    figure(expr, &Vec::new()).map_or_else(|| UNNAMED.to_string(), |(name, _)| name)
}

/// The last part of a qualified name, folded.
fn last_name(name: &ObjectName) -> Option<String> {
    match name.0.last()? {
        ObjectNamePart::Identifier(i) => Some(folded(i)),
        other => Some(other.to_string().to_ascii_lowercase()),
    }
}

fn query_slots<'a>(query: &'a Query, scope: &Scope<'a>) -> Vec<Slot> {
    let mut scope = scope.clone();
    if let Some(with) = &query.with {
        scope.extend(with.cte_tables.iter());
    }
    set_slots(&query.body, &scope)
}

fn set_slots<'a>(body: &'a SetExpr, scope: &Scope<'a>) -> Vec<Slot> {
    match body {
        SetExpr::Select(select) => select_slots(select, scope),
        SetExpr::Query(q) => query_slots(q, scope),
        SetExpr::SetOperation { left, .. } => set_slots(left, scope),
        SetExpr::Values(values) => {
            let width = values.rows.first().map_or(0, |row| row.len());
            (1..=width)
                .map(|i| Slot::Name(format!("column{i}")))
                .collect()
        }
        _ => vec![Slot::Expand],
    }
}

fn select_slots<'a>(select: &'a Select, scope: &Scope<'a>) -> Vec<Slot> {
    let mut slots = Vec::with_capacity(select.projection.len());
    for item in &select.projection {
        match item {
            SelectItem::UnnamedExpr(e) => slots.push(Slot::Name(
                figure(e, scope).map_or_else(|| UNNAMED.to_string(), |(name, _)| name),
            )),
            SelectItem::ExprWithAlias { alias, .. } => slots.push(Slot::Name(folded(alias))),
            SelectItem::Wildcard(options) if plain(options) => {
                for from in &select.from {
                    slots.extend(from_slots(from, scope));
                }
            }
            SelectItem::QualifiedWildcard(
                SelectItemQualifiedWildcardKind::ObjectName(name),
                options,
            ) if plain(options) => {
                let relation = last_name(name);
                let found = select
                    .from
                    .iter()
                    .flat_map(|from| {
                        std::iter::once(&from.relation)
                            .chain(from.joins.iter().map(|j| &j.relation))
                    })
                    .find(|factor| relation.is_some() && factor_name(factor) == relation);
                match found {
                    Some(factor) => slots.extend(factor_slots(factor, scope)),
                    None => slots.push(Slot::Expand),
                }
            }
            _ => slots.push(Slot::Expand),
        }
    }
    slots
}

/// A wildcard without `EXCEPT`, `EXCLUDE`, `REPLACE`, … (which only
/// DataFusion's dialects know).
fn plain(options: &WildcardAdditionalOptions) -> bool {
    options.opt_ilike.is_none()
        && options.opt_exclude.is_none()
        && options.opt_except.is_none()
        && options.opt_replace.is_none()
        && options.opt_rename.is_none()
        && options.opt_alias.is_none()
}

/// The columns `*` gives over one `FROM` item: its relations' in order
/// where they are joined `ON` a condition or crossed; one expansion where
/// `USING` or `NATURAL` merge columns or the join keeps one side only.
fn from_slots<'a>(from: &'a TableWithJoins, scope: &Scope<'a>) -> Vec<Slot> {
    let concatenates = from.joins.iter().all(|j| match &j.join_operator {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c)
        | JoinOperator::CrossJoin(c) => {
            matches!(c, JoinConstraint::On(_) | JoinConstraint::None)
        }
        _ => false,
    });
    if !concatenates {
        return vec![Slot::Expand];
    }
    let mut slots = factor_slots(&from.relation, scope);
    for join in &from.joins {
        slots.extend(factor_slots(&join.relation, scope));
    }
    slots
}

/// The name a `FROM` item is referred to by: its alias, else a table's
/// (or common table expression's) own name.
fn factor_name(factor: &TableFactor) -> Option<String> {
    match factor {
        TableFactor::Table { name, alias, .. } => match alias {
            Some(alias) => Some(folded(&alias.name)),
            None => last_name(name),
        },
        TableFactor::Derived { alias, .. } | TableFactor::NestedJoin { alias, .. } => {
            alias.as_ref().map(|a| folded(&a.name))
        }
        _ => None,
    }
}

/// The columns of one `FROM` relation: a derived table's or a common
/// table expression's by this rule, where no column list renames them;
/// a table's (and anything else's) the planner's.
fn factor_slots<'a>(factor: &'a TableFactor, scope: &Scope<'a>) -> Vec<Slot> {
    match factor {
        TableFactor::Derived {
            subquery, alias, ..
        } if alias.as_ref().is_none_or(|a| a.columns.is_empty()) => query_slots(subquery, scope),
        TableFactor::Table {
            name, alias, args, ..
        } if args.is_none() && alias.as_ref().is_none_or(|a| a.columns.is_empty()) => {
            let [ObjectNamePart::Identifier(table)] = name.0.as_slice() else {
                return vec![Slot::Expand];
            };
            let table = folded(table);
            // The innermost definition of the name; the query of a common
            // table expression sees only those defined before it, which is
            // what its own scope would hold (a prefix of this one).
            let Some(at) = scope
                .iter()
                .rposition(|cte| folded(&cte.alias.name) == table)
            else {
                return vec![Slot::Expand];
            };
            let cte = scope[at];
            if !cte.alias.columns.is_empty() {
                return vec![Slot::Expand];
            }
            query_slots(&cte.query, &scope[..at].to_vec())
        }
        TableFactor::NestedJoin {
            table_with_joins,
            alias: None,
        } => from_slots(table_with_joins, scope),
        _ => vec![Slot::Expand],
    }
}

/// FigureColname for one expression: its name and how strong it is, or
/// `None` where PostgreSQL gives it none.
fn figure(expr: &Expr, scope: &Scope<'_>) -> Option<(String, Strength)> {
    let strong = |name: &str| Some((name.to_string(), Strength::Strong));
    match expr {
        Expr::Identifier(i) => Some((folded(i), Strength::Strong)),
        Expr::CompoundIdentifier(parts) => parts.last().map(|i| (folded(i), Strength::Strong)),
        Expr::CompoundFieldAccess { root, access_chain } => {
            let field = access_chain.iter().rev().find_map(|a| match a {
                AccessExpr::Dot(Expr::Identifier(i)) => Some(folded(i)),
                AccessExpr::Dot(Expr::CompoundIdentifier(parts)) => parts.last().map(folded),
                _ => None,
            });
            match field {
                Some(name) => Some((name, Strength::Strong)),
                None => figure(root, scope),
            }
        }
        Expr::Function(f) => last_name(&f.name).map(|n| (n, Strength::Strong)),
        Expr::Extract { .. } => strong("extract"),
        Expr::Substring { .. } => strong("substring"),
        Expr::Position { .. } => strong("position"),
        Expr::Overlay { .. } => strong("overlay"),
        Expr::Ceil { .. } => strong("ceil"),
        Expr::Floor { .. } => strong("floor"),
        Expr::AtTimeZone { .. } => strong("timezone"),
        Expr::Trim { trim_where, .. } => match trim_where {
            Some(TrimWhereField::Leading) => strong("ltrim"),
            Some(TrimWhereField::Trailing) => strong("rtrim"),
            Some(TrimWhereField::Both) | None => strong("btrim"),
        },
        Expr::Array(_) => strong("array"),
        Expr::Tuple(_) => strong("row"),
        Expr::Exists { negated: false, .. } => strong("exists"),
        Expr::Subquery(q) => match query_slots(q, scope).first() {
            Some(Slot::Name(name)) => Some((name.clone(), Strength::Strong)),
            _ => None,
        },
        Expr::Cast {
            expr, data_type, ..
        } => match figure(expr, scope) {
            Some((name, Strength::Strong)) => Some((name, Strength::Strong)),
            _ => Some((type_name(data_type), Strength::Weak)),
        },
        Expr::TypedString(t) => Some((type_name(&t.data_type), Strength::Weak)),
        Expr::Interval(_) => Some(("interval".to_string(), Strength::Weak)),
        Expr::Value(v) if matches!(v.value, Value::Boolean(_)) => {
            Some(("bool".to_string(), Strength::Weak))
        }
        Expr::Case { .. } => Some(("case".to_string(), Strength::Weak)),
        Expr::Nested(e) | Expr::Collate { expr: e, .. } => figure(e, scope),
        _ => None,
    }
}

/// A type's name as PostgreSQL's grammar spells the type internally
/// (`int` → `int4`, `double precision` → `float8`, `varchar(10)` →
/// `varchar`); an array type is named by its element type.
fn type_name(t: &DataType) -> String {
    let name = match t {
        DataType::SmallInt(_) | DataType::Int2(_) => "int2",
        DataType::Int(_) | DataType::Integer(_) | DataType::Int4(_) => "int4",
        DataType::BigInt(_) | DataType::Int8(_) => "int8",
        DataType::Real | DataType::Float4 => "float4",
        DataType::Float(ExactNumberInfo::Precision(p))
        | DataType::Float(ExactNumberInfo::PrecisionAndScale(p, _))
            if *p <= 24 =>
        {
            "float4"
        }
        DataType::Float(_) | DataType::Float8 | DataType::Double(_) | DataType::DoublePrecision => {
            "float8"
        }
        DataType::Numeric(_) | DataType::Decimal(_) | DataType::Dec(_) => "numeric",
        DataType::Bool | DataType::Boolean => "bool",
        DataType::Char(_) | DataType::Character(_) => "bpchar",
        DataType::Varchar(_) | DataType::CharVarying(_) | DataType::CharacterVarying(_) => {
            "varchar"
        }
        DataType::Text => "text",
        DataType::Bytea => "bytea",
        DataType::Uuid => "uuid",
        DataType::JSON => "json",
        DataType::JSONB => "jsonb",
        DataType::Date => "date",
        DataType::Time(_, TimezoneInfo::WithTimeZone | TimezoneInfo::Tz) => "timetz",
        DataType::Time(..) => "time",
        DataType::Timestamp(_, TimezoneInfo::WithTimeZone | TimezoneInfo::Tz) => "timestamptz",
        DataType::Timestamp(..) => "timestamp",
        DataType::Interval { .. } => "interval",
        DataType::Bit(_) => "bit",
        DataType::BitVarying(_) | DataType::VarBit(_) => "varbit",
        DataType::Regclass => "regclass",
        DataType::Array(
            ArrayElemTypeDef::AngleBracket(elem)
            | ArrayElemTypeDef::SquareBracket(elem, _)
            | ArrayElemTypeDef::Parenthesis(elem),
        ) => return type_name(elem),
        DataType::Custom(name, _) => {
            return last_name(name).unwrap_or_else(|| UNNAMED.to_string());
        }
        other => {
            // Types PostgreSQL does not have: their SQL spelling, without
            // modifiers.
            let text = other.to_string().to_ascii_lowercase();
            let end = text.find(['(', ' ']).unwrap_or(text.len());
            return text[..end].to_string();
        }
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType as ArrowType, Field};

    fn names(sql: &str) -> Vec<Option<String>> {
        let mut statements = crate::limits::parse(sql).unwrap();
        let stmt = statements.pop_front().unwrap();
        let names = ColumnNames::of_statement(&stmt).unwrap();
        names
            .slots
            .iter()
            .map(|s| slot_name(s).map(str::to_string))
            .collect()
    }

    fn named(sql: &str) -> Vec<String> {
        names(sql)
            .into_iter()
            .map(|n| n.unwrap_or_else(|| "*".to_string()))
            .collect()
    }

    #[test]
    fn expressions_are_named_as_postgresql_names_them() {
        let cases: &[(&str, &str)] = &[
            ("1 + 1", "?column?"),
            ("'x'", "?column?"),
            ("NULL", "?column?"),
            ("a + 1", "?column?"),
            ("-a", "?column?"),
            ("a IS NULL", "?column?"),
            ("a IN (1, 2)", "?column?"),
            ("a || b", "?column?"),
            ("NOT EXISTS (SELECT 1)", "?column?"),
            ("$1", "?column?"),
            ("a", "a"),
            ("A", "a"),
            ("\"A\"", "A"),
            ("t.a", "a"),
            ("s.t.a", "a"),
            ("(a)", "a"),
            ("count(*)", "count"),
            ("count(x) FILTER (WHERE x > 1)", "count"),
            ("sum(t.x)", "sum"),
            ("pg_catalog.upper(s)", "upper"),
            (
                "row_number() OVER (PARTITION BY a ORDER BY b)",
                "row_number",
            ),
            ("coalesce(a, b)", "coalesce"),
            ("NULLIF(a, b)", "nullif"),
            ("greatest(a, b)", "greatest"),
            ("current_date", "current_date"),
            ("CURRENT_TIMESTAMP", "current_timestamp"),
            ("EXTRACT(year FROM d)", "extract"),
            ("SUBSTRING(s FROM 1 FOR 2)", "substring"),
            ("TRIM(s)", "btrim"),
            ("TRIM(LEADING 'x' FROM s)", "ltrim"),
            ("TRIM(TRAILING 'x' FROM s)", "rtrim"),
            ("POSITION('a' IN s)", "position"),
            ("d AT TIME ZONE 'UTC'", "timezone"),
            ("CASE WHEN a THEN 1 END", "case"),
            ("ARRAY[1, 2]", "array"),
            ("ARRAY(SELECT 1)", "array"),
            ("ROW(1, 2)", "row"),
            ("(1, 2)", "row"),
            ("EXISTS (SELECT 1)", "exists"),
            ("(SELECT max(x) FROM t)", "max"),
            ("(SELECT x AS y FROM t)", "y"),
            ("(SELECT 1)", "?column?"),
            ("x::text", "x"),
            ("d::date", "d"),
            ("CAST(a AS int)", "a"),
            ("CAST(1 AS int)", "int4"),
            ("CAST(1 AS integer)", "int4"),
            ("1::bigint", "int8"),
            ("1::smallint", "int2"),
            ("1::double precision", "float8"),
            ("1::real", "float4"),
            ("1::float", "float8"),
            ("1::numeric(10, 2)", "numeric"),
            ("'x'::varchar(3)", "varchar"),
            ("'x'::char(3)", "bpchar"),
            ("'x'::text", "text"),
            ("'1'::oid", "oid"),
            ("'{1}'::int[]", "int4"),
            ("'2020-01-01'::timestamp", "timestamp"),
            ("'2020-01-01'::timestamptz", "timestamptz"),
            ("'2020-01-01'::timestamp with time zone", "timestamptz"),
            ("CASE WHEN a THEN 1 END::text", "text"),
            ("count(*)::int", "count"),
            ("date '2020-01-01'", "date"),
            ("interval '1 day'", "interval"),
            ("TRUE", "bool"),
            ("a[1]", "a"),
            ("x COLLATE \"C\"", "x"),
        ];
        for (expr, want) in cases {
            assert_eq!(named(&format!("SELECT {expr}")), vec![*want], "{expr}");
        }
    }

    #[test]
    fn queries_name_their_columns() {
        assert_eq!(named("SELECT a AS X, b AS \"Y\" FROM t"), ["x", "Y"]);
        // Duplicates stay duplicates.
        assert_eq!(
            named("SELECT count(*), count(x) FROM t"),
            ["count", "count"]
        );
        // A set operation: its first branch's names.
        assert_eq!(
            named("SELECT sum(a) FROM t UNION ALL SELECT b AS c FROM u"),
            ["sum"]
        );
        assert_eq!(
            named("(SELECT 1 AS x UNION SELECT 2) UNION SELECT 3 ORDER BY 1"),
            ["x"]
        );
        assert_eq!(named("VALUES (1, 'a'), (2, 'b')"), ["column1", "column2"]);
        assert_eq!(
            named("WITH w AS (SELECT 1) SELECT max(a), * FROM t"),
            ["max", "*"]
        );
        // A wildcard over derived tables and common table expressions
        // names their columns by the rule; tables keep the planner's.
        assert_eq!(
            named("SELECT * FROM (SELECT count(*), 1 + 1 FROM t) s"),
            ["count", "?column?"]
        );
        assert_eq!(
            named("WITH w AS (SELECT min(a) FROM t) SELECT w.*, u.* FROM w JOIN u ON true"),
            ["min", "*"]
        );
        assert_eq!(
            named("WITH w AS (SELECT min(a) FROM t) SELECT * FROM w, t"),
            ["min", "*"]
        );
        assert_eq!(
            named("WITH w (m) AS (SELECT min(a) FROM t) SELECT * FROM w"),
            ["*"]
        );
        assert_eq!(
            named("SELECT * FROM (SELECT 1) s (x) JOIN (SELECT 2) r USING (x)"),
            ["*"]
        );
        assert!(ColumnNames::of_statement(
            &crate::limits::parse("CREATE TABLE t (a int)")
                .unwrap()
                .pop_front()
                .unwrap()
        )
        .is_none());
    }

    fn schema(names: &[&str]) -> Schema {
        Schema::new(
            names
                .iter()
                .map(|n| Field::new(*n, ArrowType::Int64, true))
                .collect::<Vec<_>>(),
        )
    }

    fn renamed(sql: &str, planned: &[&str]) -> Vec<String> {
        let stmt = crate::limits::parse(sql).unwrap().pop_front().unwrap();
        let names = ColumnNames::of_statement(&stmt).unwrap();
        names
            .rename(&schema(planned))
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    #[test]
    fn result_fields_take_the_names_and_wildcards_keep_the_planners() {
        assert_eq!(
            renamed(
                "SELECT count(*), count(x) FROM t",
                &["count(*)", "count(t.x)"]
            ),
            ["count", "count"]
        );
        assert_eq!(
            renamed(
                "SELECT 1 + 1, *, sum(a) FROM t",
                &["Int64(1) + Int64(1)", "a", "b", "sum(t.a)"]
            ),
            ["?column?", "a", "b", "sum"]
        );
        // Two wildcards: the columns between them keep the planner's names.
        assert_eq!(
            renamed(
                "SELECT 1, t.*, 2, u.*, 3 FROM t, u",
                &["Int64(1)", "a", "Int64(2)", "b", "Int64(3)"]
            ),
            ["?column?", "a", "Int64(2)", "b", "?column?"]
        );
        // A count that does not match the syntax changes nothing.
        assert_eq!(renamed("SELECT 1, 2", &["x"]), ["x"]);
        let typed = Schema::new(vec![Field::new("count(*)", ArrowType::Int64, false)]);
        let stmt = crate::limits::parse("SELECT count(*) FROM t")
            .unwrap()
            .pop_front()
            .unwrap();
        let out = ColumnNames::of_statement(&stmt).unwrap().rename(&typed);
        assert_eq!(out.field(0).name(), "count");
        assert_eq!(out.field(0).data_type(), &ArrowType::Int64);
        assert!(!out.field(0).is_nullable());
    }

    #[test]
    fn figure_colname_names_unnamed_expressions() {
        let stmt = crate::limits::parse("SELECT 1 + 1, upper(s)")
            .unwrap()
            .pop_front()
            .unwrap();
        let DFStatement::Statement(s) = stmt else {
            panic!()
        };
        let SqlStatement::Query(q) = *s else { panic!() };
        let SetExpr::Select(select) = *q.body else {
            panic!()
        };
        let exprs: Vec<String> = select
            .projection
            .iter()
            .map(|item| match item {
                SelectItem::UnnamedExpr(e) => figure_colname(e),
                _ => panic!(),
            })
            .collect();
        assert_eq!(exprs, ["?column?", "upper"]);
    }
}

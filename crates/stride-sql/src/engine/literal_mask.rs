//! A query's literals turned into parameters where that provably keeps its
//! meaning: the statement *shape* the plan cache (`plan_cache`) keys
//! simple-protocol queries by, and the values that fill the shape's
//! parameters at each execution.
//!
//! Only what one column is compared with is masked: `col <op> x` and
//! `x <op> col` (`=`, `<>`, `<`, `<=`, `>`, `>=`), `col [NOT] BETWEEN x AND
//! x`, `col [NOT] IN (x, …)` and `col [NOT] [I]LIKE x` without `ESCAPE`,
//! where `col` is a (possibly qualified) column name and `x` is
//!
//! * a literal: an unsigned number or a plain single-quoted string
//!   ([`Literal::Number`], [`Literal::Text`]), or
//! * a *constant expression* ([`Literal::Constant`]) built only from such
//!   literals, `DATE '…'` and `TIMESTAMP '…'`, `INTERVAL '…' unit`, unary
//!   minus, `+ - * /`, parentheses and `CAST`s to number, text, date and
//!   timestamp types — `date '1998-12-01' - interval '90' day`,
//!   `0.06 - 0.01`, `date '1995-03-15'` — masked whole as one parameter.
//!   Its value is computed at each execution by planning and optimizing it
//!   as the session plans any statement (`Session::compute_constants`), so
//!   it is the value a full plan of the text folds it to (month-end
//!   arithmetic included: DataFusion computes it, nothing here does).
//!
//! DataFusion types such a parameter as the column
//! ([`datafusion_expr::Expr::infer_placeholder_types`]), and the value is
//! converted into that type only where the conversion is exact
//! ([`Literal::exact_value`], [`exact_scalar`]): comparing the column with
//! the exact value in the column's type is what comparing it with the
//! literal in their common type does. Every other literal — `LIMIT 10`,
//! `ORDER BY 2`, a function's argument (`substring(c_phone from 1 for 2)`),
//! arithmetic involving a column, `CASE`, `VALUES` rows — stays in the
//! shape's text, so two statements that differ there are different shapes.
//! The shape also records each masked value's *kind*: a number, a string,
//! or a constant expression's form with its literals blanked
//! (`DATE '' - INTERVAL '' DAY`), so a date-valued expression and a string
//! in the same place are different shapes, as a number and a string are.

use std::ops::ControlFlow;

use arrow::datatypes::DataType;
use datafusion_common::ScalarValue;
use datafusion_sql::parser::Statement as DFStatement;
use datafusion_sql::sqlparser::ast::{
    visit_expressions, visit_expressions_mut, BinaryOperator, CastKind, DataType as SqlType, Expr,
    Statement, TimezoneInfo, UnaryOperator, Value,
};

/// A masked literal, as the client wrote it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Literal {
    /// An unsigned number: digits, optionally a `.` and more digits.
    Number(String),
    /// A plain single-quoted string.
    Text(String),
    /// A constant expression (see the module documentation).
    Constant {
        /// The expression as written.
        expr: Box<Expr>,
        /// Its value as the session computes it
        /// (`Session::compute_constants`); `None` until computed.
        value: Option<ScalarValue>,
    },
}

/// A query with its maskable literals replaced by `$1..$n`.
#[derive(Debug)]
pub(super) struct Masked {
    /// The statement with parameters, to be planned on a cache miss.
    pub statement: DFStatement,
    /// The shape: the masked statement's text and each literal's kind
    /// (a number and a string in the same place are different shapes:
    /// they compare differently with the same column).
    pub shape: String,
    /// The masked literals, in parameter order.
    pub literals: Vec<Literal>,
}

/// Masks `stmt`'s literals; `None` for what is not a query or already has
/// parameters (the simple protocol has no values for them).
pub(super) fn mask(stmt: &DFStatement) -> Option<Masked> {
    let DFStatement::Statement(s) = stmt else {
        return None;
    };
    if !matches!(s.as_ref(), Statement::Query(_)) {
        return None;
    }
    let has_parameter = visit_expressions(s.as_ref(), |e| match e {
        Expr::Value(v) if matches!(v.value, Value::Placeholder(_)) => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    });
    if has_parameter.is_break() {
        return None;
    }
    // Columns with two or more IN lists keep their lists' values in the
    // text: DataFusion's simplifier intersects `c IN (…) AND c IN (…)` and
    // subtracts `c NOT IN (…)` by comparing the items as expressions, so
    // two parameters that will hold equal values would count as different
    // (`i IN ($1, $2) AND i IN ($3, $4)` folds to false even when $2 = $3).
    let mut in_lists: Vec<String> = Vec::new();
    let _ = visit_expressions(s.as_ref(), |e| {
        if let Expr::InList { expr, .. } = e {
            if is_column(expr) {
                in_lists.push(column_key(expr));
            }
        }
        ControlFlow::<()>::Continue(())
    });
    let repeated_in = |expr: &Expr| {
        let key = column_key(expr);
        in_lists.iter().filter(|k| **k == key).count() > 1
    };
    let mut statement: Statement = s.as_ref().clone();
    let mut literals = Vec::new();
    let _ = visit_expressions_mut(&mut statement, |e| {
        match e {
            Expr::BinaryOp { left, op, right } if is_comparison(op) => {
                if is_column(left) {
                    mask_one(right, &mut literals);
                } else if is_column(right) {
                    mask_one(left, &mut literals);
                }
            }
            Expr::Between {
                expr, low, high, ..
            } if is_column(expr) => {
                mask_one(low, &mut literals);
                mask_one(high, &mut literals);
            }
            Expr::InList { expr, list, .. } if is_column(expr) && !repeated_in(expr) => {
                for item in list {
                    mask_one(item, &mut literals);
                }
            }
            Expr::Like {
                expr,
                pattern,
                escape_char: None,
                any: false,
                ..
            }
            | Expr::ILike {
                expr,
                pattern,
                escape_char: None,
                any: false,
                ..
            } if is_column(expr) => mask_one(pattern, &mut literals),
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    let kinds: String = literals.iter().map(kind).collect();
    let shape = format!("{statement}\u{0}{kinds}");
    Some(Masked {
        statement: DFStatement::Statement(Box::new(statement)),
        shape,
        literals,
    })
}

fn is_comparison(op: &BinaryOperator) -> bool {
    matches!(
        op,
        BinaryOperator::Eq
            | BinaryOperator::NotEq
            | BinaryOperator::Lt
            | BinaryOperator::LtEq
            | BinaryOperator::Gt
            | BinaryOperator::GtEq
    )
}

/// A column reference by its last name part, folded as the binder folds
/// it: two references that may be the same column have the same key
/// (others may too).
fn column_key(e: &Expr) -> String {
    match e {
        Expr::Identifier(ident) => crate::pg_compat::folded(ident),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .map(crate::pg_compat::folded)
            .unwrap_or_default(),
        _ => String::new(),
    }
}

fn is_column(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
}

/// Replaces `e` by a parameter if it is a maskable literal or constant
/// expression: a string equal to one masked before takes its parameter,
/// anything else the next.
///
/// Equal strings share a parameter so that the optimizer, which plans the
/// masked statement once for the shape, still sees the equal expressions
/// the text has: TPC-H Q19 repeats `l_shipmode IN ('AIR', 'AIR REG')` in
/// each branch of an `OR`, and only identical branches' common conjuncts
/// are factored out and pushed below the join (with a parameter each, the
/// filter stays above it: 2.4× slower). The shape's text shows which
/// places share one (`$1 … $1`), so a statement whose equal strings sit
/// elsewhere is another shape. Numbers and constant expressions never
/// share: drawn bounds meet by chance (Q19's `l_quantity <= 13` and
/// `>= 13`), and each chance meeting would be a shape of its own. A
/// parameter compared with columns of two types has no type of its own:
/// binding such a shape fails, and the statement is planned in full
/// (`plan_cache`).
fn mask_one(e: &mut Expr, literals: &mut Vec<Literal>) {
    let Some(literal) = maskable(e) else { return };
    let shared = match literal {
        Literal::Text(_) => literals.iter().position(|l| *l == literal),
        _ => None,
    };
    let index = match shared {
        Some(earlier) => earlier + 1,
        None => {
            literals.push(literal);
            literals.len()
        }
    };
    *e = Expr::Value(Value::Placeholder(format!("${index}")).with_empty_span());
}

/// What `e` is masked as: a plain literal as itself, any other constant
/// expression as a [`Literal::Constant`]; `None` for what stays in the text.
fn maskable(e: &Expr) -> Option<Literal> {
    if let Expr::Value(v) = e {
        match &v.value {
            Value::Number(text, false) if is_plain_number(text) => {
                return Some(Literal::Number(text.clone()))
            }
            Value::SingleQuotedString(text) => return Some(Literal::Text(text.clone())),
            _ => {}
        }
    }
    is_constant(e).then(|| Literal::Constant {
        expr: Box::new(e.clone()),
        value: None,
    })
}

/// Whether `e` is built only from literals (numbers, plain strings, typed
/// date and timestamp strings, intervals), unary minus and plus, `+ - * /`,
/// parentheses and casts to [`is_value_type`] types.
fn is_constant(e: &Expr) -> bool {
    match e {
        Expr::Value(v) => matches!(
            v.value,
            Value::Number(_, false) | Value::SingleQuotedString(_)
        ),
        Expr::TypedString(t) => {
            is_day_or_time(&t.data_type) && matches!(t.value.value, Value::SingleQuotedString(_))
        }
        Expr::Interval(i) => matches!(
            i.value.as_ref(),
            Expr::Value(v) if matches!(v.value, Value::Number(_, false) | Value::SingleQuotedString(_))
        ),
        Expr::UnaryOp {
            op: UnaryOperator::Minus | UnaryOperator::Plus,
            expr,
        } => is_constant(expr),
        Expr::BinaryOp { left, op, right } => {
            matches!(
                op,
                BinaryOperator::Plus
                    | BinaryOperator::Minus
                    | BinaryOperator::Multiply
                    | BinaryOperator::Divide
            ) && is_constant(left)
                && is_constant(right)
        }
        Expr::Cast {
            kind: CastKind::Cast | CastKind::DoubleColon,
            expr,
            data_type,
            array: false,
            format: None,
        } => is_value_type(data_type) && is_constant(expr),
        Expr::Nested(inner) => is_constant(inner),
        _ => false,
    }
}

/// `DATE` or `TIMESTAMP` without a time zone: the typed strings a
/// constant expression may hold.
fn is_day_or_time(t: &SqlType) -> bool {
    matches!(
        t,
        SqlType::Date | SqlType::Timestamp(_, TimezoneInfo::None | TimezoneInfo::WithoutTimeZone)
    )
}

/// The types a constant expression may cast to: integers, decimals, text,
/// dates and timestamps without a time zone.
fn is_value_type(t: &SqlType) -> bool {
    is_day_or_time(t)
        || matches!(
            t,
            SqlType::SmallInt(_)
                | SqlType::Int(_)
                | SqlType::Integer(_)
                | SqlType::BigInt(_)
                | SqlType::Int2(_)
                | SqlType::Int4(_)
                | SqlType::Int8(_)
                | SqlType::Numeric(_)
                | SqlType::Decimal(_)
                | SqlType::Dec(_)
                | SqlType::Text
                | SqlType::Varchar(_)
        )
}

/// A masked value's kind in the shape: `n` a number, `t` a string, a
/// constant expression as `e(…)` around its [`form`].
fn kind(literal: &Literal) -> String {
    match literal {
        Literal::Number(_) => "n".to_string(),
        Literal::Text(_) => "t".to_string(),
        Literal::Constant { expr, .. } => format!("e({})", form(expr)),
    }
}

/// A constant expression's text with every number written `0` and every
/// string (plain, typed or an interval's) empty: what expressions of one
/// kind have in common (`DATE '' + INTERVAL '' MONTH`).
fn form(e: &Expr) -> String {
    let mut blank = e.clone();
    let _ = visit_expressions_mut(&mut blank, |e| {
        match e {
            Expr::Value(v) => blank_value(&mut v.value),
            Expr::TypedString(t) => blank_value(&mut t.value.value),
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
    blank.to_string()
}

/// A number as `0`, a string as `''`.
fn blank_value(v: &mut Value) {
    match v {
        Value::Number(text, _) => *text = "0".to_string(),
        Value::SingleQuotedString(text) => text.clear(),
        _ => {}
    }
}

/// Digits, optionally followed by `.` and digits (no sign, no exponent).
fn is_plain_number(text: &str) -> bool {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit())
}

impl Literal {
    /// The literal as a value of `target` (the type DataFusion gave its
    /// parameter: the compared column's), if it converts exactly; `None`
    /// sends the statement to a full plan, which compares the literal in
    /// the types' common type. A constant expression converts its computed
    /// value ([`exact_scalar`]); `None` while it has none.
    pub(super) fn exact_value(&self, target: &DataType) -> Option<ScalarValue> {
        match (self, target) {
            (Literal::Constant { value, .. }, t) => exact_scalar(value.as_ref()?, t),
            (Literal::Number(text), t) if t.is_integer() => {
                let (int, frac) = text.split_once('.').unwrap_or((text, ""));
                if frac.bytes().any(|b| b != b'0') {
                    return None;
                }
                let v: i64 = int.parse().ok()?;
                let value = ScalarValue::Int64(Some(v)).cast_to(t).ok()?;
                // Arrow refuses an out-of-range cast; check the round trip
                // all the same.
                (value.cast_to(&DataType::Int64).ok()? == ScalarValue::Int64(Some(v)))
                    .then_some(value)
            }
            (Literal::Number(text), DataType::Decimal128(precision, decimal_scale)) => {
                let scale = u32::try_from(*decimal_scale).ok()?;
                let (int, frac) = text.split_once('.').unwrap_or((text, ""));
                let kept = frac.get(..frac.len().min(scale as usize))?;
                if frac.bytes().skip(kept.len()).any(|b| b != b'0') {
                    return None;
                }
                let digits = format!("{int}{kept:0<width$}", width = scale as usize);
                let unscaled: i128 = digits.parse().ok()?;
                let limit = 10i128.checked_pow(u32::from(*precision))?;
                (unscaled < limit)
                    .then(|| ScalarValue::Decimal128(Some(unscaled), *precision, *decimal_scale))
            }
            (Literal::Text(s), DataType::Utf8) => Some(ScalarValue::Utf8(Some(s.clone()))),
            (Literal::Text(s), DataType::LargeUtf8) => {
                Some(ScalarValue::LargeUtf8(Some(s.clone())))
            }
            (Literal::Text(s), DataType::Utf8View) => Some(ScalarValue::Utf8View(Some(s.clone()))),
            (Literal::Text(s), DataType::Date32) => {
                // The cast DataFusion folds `date_col < '1994-01-01'` with;
                // only a date written as it prints back (no time part, no
                // other spelling) is taken.
                let value = ScalarValue::Utf8(Some(s.clone()))
                    .cast_to(&DataType::Date32)
                    .ok()?;
                let back = value.cast_to(&DataType::Utf8).ok()?;
                (back == ScalarValue::Utf8(Some(s.clone())) && !value.is_null()).then_some(value)
            }
            _ => None,
        }
    }

    /// Whether a parameter of type `t` can take a literal of this kind at
    /// all (an exact conversion exists for some values); a constant
    /// expression by its computed value's type (its kind's: every
    /// expression of one [`form`] computes a value of one class).
    pub(super) fn fits(&self, t: &DataType) -> bool {
        match self {
            Literal::Number(_) => fits_class(Class::Number, t),
            Literal::Text(_) => fits_class(Class::Text, t),
            Literal::Constant { value, .. } => value
                .as_ref()
                .and_then(|v| class_of(&v.data_type()))
                .is_some_and(|c| fits_class(c, t)),
        }
    }
}

/// What a masked value compares as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Integers and decimals.
    Number,
    /// Strings.
    Text,
    /// Dates and timestamps without a time zone.
    Day,
}

/// The class of a value of type `t`; `None` for values never masked into
/// a parameter (floats, intervals, zoned timestamps, …).
fn class_of(t: &DataType) -> Option<Class> {
    match t {
        t if t.is_integer() => Some(Class::Number),
        DataType::Decimal128(..) => Some(Class::Number),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Some(Class::Text),
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, None) => Some(Class::Day),
        _ => None,
    }
}

/// Whether a parameter of type `t` takes values of class `c`: numbers into
/// integers and decimals, strings into strings and dates (as a date column
/// compared with a string casts the string), dates and timestamps into
/// dates.
fn fits_class(c: Class, t: &DataType) -> bool {
    match c {
        Class::Number => t.is_integer() || matches!(t, DataType::Decimal128(..)),
        Class::Text => matches!(
            t,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Date32
        ),
        Class::Day => matches!(t, DataType::Date32),
    }
}

/// A computed value as a value of `target`, if it converts exactly: a
/// string as a [`Literal::Text`] of its text would; a number, date or
/// timestamp only where casting it to `target` and back gives it again
/// (`0.05` into `decimal(15,2)`, a timestamp at midnight into a date; not
/// `0.055`, not a timestamp with a time of day). Comparing the column with
/// that value in the column's type is then what the full plan's comparison
/// in the two types' common type does. `None` for a null or any other value.
pub(super) fn exact_scalar(value: &ScalarValue, target: &DataType) -> Option<ScalarValue> {
    if value.is_null() {
        return None;
    }
    let class = class_of(&value.data_type())?;
    if !fits_class(class, target) {
        return None;
    }
    match value {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Literal::Text(s.clone()).exact_value(target),
        _ => {
            let converted = value.cast_to(target).ok()?;
            let back = converted.cast_to(&value.data_type()).ok()?;
            (!converted.is_null() && back == *value).then_some(converted)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masked(sql: &str) -> Option<Masked> {
        let mut statements = crate::limits::parse(sql).unwrap();
        mask(&statements.pop_front().unwrap())
    }

    #[test]
    fn masks_only_literals_compared_with_a_column() {
        let m = masked(
            "select a, 3 from t where a = 5 and 'x' <> t.b and c between 1 and 2.50 \
             and d in ('p', 'q') and e like 'ab%' and f + 1 > 7 and g < date '1994-01-01' \
             group by 1 order by 2 limit 10",
        )
        .unwrap();
        assert_eq!(
            m.literals[..7],
            [
                Literal::Number("5".into()),
                Literal::Text("x".into()),
                Literal::Number("1".into()),
                Literal::Number("2.50".into()),
                Literal::Text("p".into()),
                Literal::Text("q".into()),
                Literal::Text("ab%".into()),
            ]
        );
        assert_eq!(constants(&m), ["DATE '1994-01-01'"]);
        let text = m.shape.split('\u{0}').next().unwrap();
        assert!(text.contains("a = $1"), "{text}");
        assert!(text.contains("f + 1 > 7"), "{text}");
        assert!(text.contains("g < $8"), "{text}");
        assert!(text.contains("LIMIT 10"), "{text}");
        assert!(text.contains("SELECT a, 3"), "{text}");
        assert!(m.shape.ends_with("\u{0}ntnnttte(DATE '')"), "{}", m.shape);
    }

    /// The masked constant expressions' texts, in parameter order.
    fn constants(m: &Masked) -> Vec<String> {
        m.literals
            .iter()
            .filter_map(|l| match l {
                Literal::Constant { expr, value: None } => Some(expr.to_string()),
                _ => None,
            })
            .collect()
    }

    /// The shape's text (without the kinds).
    fn text(m: &Masked) -> &str {
        m.shape.split('\u{0}').next().unwrap()
    }

    #[test]
    fn constant_expressions_compared_with_a_column_are_masked_whole() {
        let m = masked(
            "select * from lineitem where l_shipdate <= date '1998-12-01' - interval '90' day \
             and o_orderdate >= date '1994-01-01' \
             and o_orderdate < date '1994-01-01' + interval '3' month \
             and l_discount between 0.06 - 0.01 and 0.06 + 0.01 \
             and l_quantity <= (1 + 10) and l_tax > -0.5 \
             and l_commitdate in (cast('1995-01-01' as date), '1995-01-02'::date) \
             and timestamp '1995-01-01 00:00:00' < l_receiptdate",
        )
        .unwrap();
        assert_eq!(
            constants(&m),
            [
                "DATE '1998-12-01' - INTERVAL '90' DAY",
                "DATE '1994-01-01'",
                "DATE '1994-01-01' + INTERVAL '3' MONTH",
                "0.06 - 0.01",
                "0.06 + 0.01",
                "(1 + 10)",
                "-0.5",
                "CAST('1995-01-01' AS DATE)",
                "'1995-01-02'::DATE",
                "TIMESTAMP '1995-01-01 00:00:00'",
            ]
        );
        assert_eq!(m.literals.len(), 10);
        assert_eq!(
            text(&m),
            "SELECT * FROM lineitem WHERE l_shipdate <= $1 AND o_orderdate >= $2 \
             AND o_orderdate < $3 AND l_discount BETWEEN $4 AND $5 AND l_quantity <= $6 \
             AND l_tax > $7 AND l_commitdate IN ($8, $9) AND $10 < l_receiptdate"
        );
    }

    #[test]
    fn limits_function_arguments_case_and_column_arithmetic_stay_in_the_text() {
        for sql in [
            "select * from customer where substring(c_phone from 1 for 2) in ('13', '31') limit 10",
            "select case when a then date '1995-01-01' else date '1996-01-01' + interval '1' day end from t",
            "select * from t where d + interval '1' day < date '1995-01-01'",
            "select * from t where d < e + interval '1' day",
            "select * from t where d < now() - interval '1' day",
            "select * from t where d < to_date('1995-01-01')",
            "select * from t where d < cast('1995-01-01' as timestamp with time zone)",
            "select * from t where d < try_cast('1995-01-01' as date)",
            "select * from t where case when a then 1 else 2 end = 3 - 1",
            "select * from t where d || 'x' = 'y' || 'x'",
        ] {
            let m = masked(sql).unwrap();
            assert!(m.literals.is_empty(), "{sql}: {:?}", m.literals);
            assert!(!text(&m).contains('$'), "{sql}: {}", text(&m));
        }
    }

    #[test]
    fn one_shape_for_other_dates_and_intervals_another_for_other_kinds() {
        let shape = |sql: &str| masked(sql).unwrap().shape;
        let q1 = |days: u32| {
            shape(&format!(
                "select * from l where l_shipdate <= date '1998-12-01' - interval '{days}' day"
            ))
        };
        assert_eq!(q1(90), q1(61));
        let q4 = |day: &str| {
            shape(&format!(
                "select * from o where o_orderdate >= date '{day}' \
                 and o_orderdate < date '{day}' + interval '3' month"
            ))
        };
        assert_eq!(q4("1993-07-01"), q4("1997-10-01"));
        assert_eq!(
            shape("select * from l where l_discount between 0.06 - 0.01 and 0.06 + 0.01"),
            shape("select * from l where l_discount between 0.03 - 0.01 and 0.03 + 0.01"),
        );
        // A date, a timestamp, a string and a number in one place; a month
        // and a day interval; a sum and a difference: all different.
        let kinds = [
            "select * from t where d < date '1995-01-01'",
            "select * from t where d < timestamp '1995-01-01 00:00:00'",
            "select * from t where d < '1995-01-01'",
            "select * from t where d < 5",
            "select * from t where d < date '1995-01-01' + interval '1' month",
            "select * from t where d < date '1995-01-01' + interval '1' day",
            "select * from t where d < date '1995-01-01' - interval '1' day",
            "select * from t where d < cast('1995-01-01' as date)",
            "select * from t where d < cast('1995-01-01' as text)",
        ];
        let shapes: std::collections::HashSet<String> = kinds.iter().map(|q| shape(q)).collect();
        assert_eq!(shapes.len(), kinds.len(), "{shapes:#?}");
        // The text is the same for all of them: only the kinds differ.
        assert!(kinds
            .iter()
            .all(|q| text(&masked(q).unwrap()) == "SELECT * FROM t WHERE d < $1"));
    }

    #[test]
    fn same_shape_for_other_values_other_shape_for_other_kinds() {
        let a = masked("select * from t where a = 5").unwrap();
        let b = masked("SELECT *   FROM t WHERE a = 70 -- comment").unwrap();
        let c = masked("select * from t where a = '5'").unwrap();
        assert_eq!(a.shape, b.shape);
        assert_ne!(a.shape, c.shape);
    }

    #[test]
    fn equal_strings_share_a_parameter_and_the_sharing_is_part_of_the_shape() {
        let m = masked(
            "select * from t where (a in ('x', 'y') and b = 1) or (e = 'x' and f = 'y' and b = 2) \
             or c < date '1994-01-01' or d >= date '1994-01-01'",
        )
        .unwrap();
        assert_eq!(
            m.literals[..4],
            [
                Literal::Text("x".into()),
                Literal::Text("y".into()),
                Literal::Number("1".into()),
                Literal::Number("2".into()),
            ]
        );
        // Constant expressions do not share, even when equal.
        assert_eq!(constants(&m), ["DATE '1994-01-01'", "DATE '1994-01-01'"]);
        let shared = text(&m);
        assert!(
            shared.contains("a IN ($1, $2) AND b = $3) OR (e = $1 AND f = $2 AND b = $4)"),
            "{shared}"
        );
        assert!(shared.contains("c < $5 OR d >= $6"), "{shared}");
        // Other values, shared alike: the same shape.
        let other = masked(
            "select * from t where (a in ('p', 'q') and b = 7) or (e = 'p' and f = 'q' and b = 8) \
             or c < date '1995-01-01' or d >= date '1995-01-01'",
        )
        .unwrap();
        assert_eq!(m.shape, other.shape);
        // Values shared in other places: another shape.
        let apart = masked(
            "select * from t where (a in ('x', 'y') and b = 1) or (e = 'x' and f = 'z' and b = 2) \
             or c < date '1994-01-01' or d >= date '1994-01-01'",
        )
        .unwrap();
        assert_ne!(m.shape, apart.shape);
        // Numbers do not share: bounds that meet by chance keep the shape.
        let equal_numbers = masked("select * from t where b <= 13 or e >= 13").unwrap();
        assert_eq!(
            text(&equal_numbers),
            "SELECT * FROM t WHERE b <= $1 OR e >= $2"
        );
        assert_eq!(
            equal_numbers.shape,
            masked("select * from t where b <= 13 or e >= 14")
                .unwrap()
                .shape
        );
    }

    #[test]
    fn a_column_with_two_in_lists_keeps_their_values_in_the_text() {
        let m = masked(
            "select * from t where i in (1, 2, 10) and t.I in (2, 10, 30) and j in (4, 5) \
             and k not in (1) and k in (2)",
        )
        .unwrap();
        assert_eq!(
            text(&m),
            "SELECT * FROM t WHERE i IN (1, 2, 10) AND t.I IN (2, 10, 30) AND j IN ($1, $2) \
             AND k NOT IN (1) AND k IN (2)"
        );
    }

    #[test]
    fn statements_with_parameters_or_not_queries_are_not_masked() {
        assert!(masked("select * from t where a = $1").is_none());
        assert!(masked("insert into t values (1)").is_none());
        assert!(masked("explain select 1").is_none());
    }

    #[test]
    fn exact_conversions_only() {
        let n = |s: &str| Literal::Number(s.into());
        let t = |s: &str| Literal::Text(s.into());
        assert_eq!(
            n("5").exact_value(&DataType::Int32),
            Some(ScalarValue::Int32(Some(5)))
        );
        assert_eq!(
            n("5.00").exact_value(&DataType::Int16),
            Some(ScalarValue::Int16(Some(5)))
        );
        assert_eq!(n("5.5").exact_value(&DataType::Int32), None);
        assert_eq!(n("3000000000").exact_value(&DataType::Int32), None);
        assert_eq!(
            n("99999999999999999999").exact_value(&DataType::Int64),
            None
        );
        assert_eq!(
            n("0.05").exact_value(&DataType::Decimal128(15, 2)),
            Some(ScalarValue::Decimal128(Some(5), 15, 2))
        );
        assert_eq!(
            n("24").exact_value(&DataType::Decimal128(15, 2)),
            Some(ScalarValue::Decimal128(Some(2400), 15, 2))
        );
        assert_eq!(
            n("0.0500").exact_value(&DataType::Decimal128(15, 2)),
            Some(ScalarValue::Decimal128(Some(5), 15, 2))
        );
        assert_eq!(n("0.055").exact_value(&DataType::Decimal128(15, 2)), None);
        assert_eq!(n("1000").exact_value(&DataType::Decimal128(4, 2)), None);
        assert_eq!(n("1.5").exact_value(&DataType::Float64), None);
        assert_eq!(n("1").exact_value(&DataType::Utf8), None);
        assert_eq!(t("1").exact_value(&DataType::Int32), None);
        assert_eq!(
            t("1995-03-15").exact_value(&DataType::Date32),
            Some(ScalarValue::Date32(Some(9204)))
        );
        assert_eq!(t("1995-3-15").exact_value(&DataType::Date32), None);
        assert_eq!(t("not a date").exact_value(&DataType::Date32), None);
        assert_eq!(
            t("ab").exact_value(&DataType::Utf8View),
            Some(ScalarValue::Utf8View(Some("ab".into())))
        );
    }

    #[test]
    fn computed_values_convert_exactly_only() {
        let date = DataType::Date32;
        let dec = |v: i128, p: u8, s: i8| ScalarValue::Decimal128(Some(v), p, s);
        let ts = |nanos: i64| ScalarValue::TimestampNanosecond(Some(nanos), None);
        let day = 86_400_000_000_000i64;
        assert_eq!(
            exact_scalar(&ScalarValue::Date32(Some(9204)), &date),
            Some(ScalarValue::Date32(Some(9204)))
        );
        assert_eq!(
            exact_scalar(&ts(9204 * day), &date),
            Some(ScalarValue::Date32(Some(9204)))
        );
        assert_eq!(
            exact_scalar(&ts(9204 * day + 1), &date),
            None,
            "a time part"
        );
        assert_eq!(
            exact_scalar(&dec(5, 3, 2), &DataType::Decimal128(15, 2)),
            Some(dec(5, 15, 2))
        );
        assert_eq!(
            exact_scalar(&dec(55, 4, 3), &DataType::Decimal128(15, 2)),
            None
        );
        assert_eq!(
            exact_scalar(&ScalarValue::Int64(Some(11)), &DataType::Decimal128(15, 2)),
            Some(dec(1100, 15, 2))
        );
        assert_eq!(
            exact_scalar(&dec(50, 3, 1), &DataType::Int32),
            Some(ScalarValue::Int32(Some(5)))
        );
        assert_eq!(exact_scalar(&dec(55, 3, 1), &DataType::Int32), None);
        assert_eq!(
            exact_scalar(&ScalarValue::Int64(Some(3_000_000_000)), &DataType::Int32),
            None
        );
        assert_eq!(
            exact_scalar(&ScalarValue::Utf8(Some("1995-03-15".into())), &date),
            Some(ScalarValue::Date32(Some(9204)))
        );
        assert_eq!(
            exact_scalar(&ScalarValue::Utf8(Some("1995-3-15".into())), &date),
            None
        );
        // Not into another class: a date into text, a number into a date,
        // floats and intervals at all, nulls.
        assert_eq!(
            exact_scalar(&ScalarValue::Date32(Some(9204)), &DataType::Utf8),
            None
        );
        assert_eq!(exact_scalar(&ScalarValue::Int64(Some(5)), &date), None);
        assert_eq!(
            exact_scalar(&ScalarValue::Float64(Some(5.0)), &DataType::Int64),
            None
        );
        assert_eq!(
            exact_scalar(&ScalarValue::new_interval_mdn(1, 0, 0), &DataType::Int64),
            None
        );
        assert_eq!(exact_scalar(&ScalarValue::Date32(None), &date), None);
    }

    #[test]
    fn a_constant_fits_and_converts_by_its_computed_value() {
        let mut m = masked("select * from t where d < date '1995-03-15'").unwrap();
        assert!(
            matches!(m.literals[..], [Literal::Constant { value: None, .. }]),
            "{:?}",
            m.literals
        );
        assert!(!m.literals[0].fits(&DataType::Date32), "not computed yet");
        assert_eq!(m.literals[0].exact_value(&DataType::Date32), None);
        if let Literal::Constant { value, .. } = &mut m.literals[0] {
            *value = Some(ScalarValue::Date32(Some(9204)));
        }
        assert!(m.literals[0].fits(&DataType::Date32));
        assert!(!m.literals[0].fits(&DataType::Utf8));
        assert!(!m.literals[0].fits(&DataType::Int32));
        assert_eq!(
            m.literals[0].exact_value(&DataType::Date32),
            Some(ScalarValue::Date32(Some(9204)))
        );
    }
}

//! A query's literals turned into parameters where that provably keeps its
//! meaning: the statement *shape* the plan cache (`plan_cache`) keys
//! simple-protocol queries by, and the values that fill the shape's
//! parameters at each execution.
//!
//! Only a literal that one column is compared with is masked:
//! `col <op> lit` and `lit <op> col` (`=`, `<>`, `<`, `<=`, `>`, `>=`),
//! `col [NOT] BETWEEN lit AND lit`, `col [NOT] IN (lit, …)` and
//! `col [NOT] [I]LIKE lit` without `ESCAPE`, where `col` is a (possibly
//! qualified) column name and `lit` an unsigned number or a plain
//! single-quoted string. DataFusion types such a parameter as the column
//! ([`datafusion_expr::Expr::infer_placeholder_types`]), and the value is
//! converted into that type only where the conversion is exact
//! ([`Literal::exact_value`]): comparing the column with the exact value in
//! the column's type is what comparing it with the literal in their common
//! type does. Every other literal — `LIMIT 10`, `ORDER BY 2`, a function's
//! argument, `date '1994-01-01'`, `interval '3' month`, arithmetic,
//! `CASE` results, `VALUES` rows — stays in the shape's text, so two
//! statements that differ there are different shapes.

use std::ops::ControlFlow;

use arrow::datatypes::DataType;
use datafusion_common::ScalarValue;
use datafusion_sql::parser::Statement as DFStatement;
use datafusion_sql::sqlparser::ast::{
    visit_expressions, visit_expressions_mut, BinaryOperator, Expr, Statement, Value,
};
use datafusion_sql::sqlparser::tokenizer::Span;

/// A masked literal, as the client wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Literal {
    /// An unsigned number: digits, optionally a `.` and more digits.
    Number(String),
    /// A plain single-quoted string.
    Text(String),
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
            Expr::InList { expr, list, .. } if is_column(expr) => {
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
    let kinds: String = literals
        .iter()
        .map(|l| match l {
            Literal::Number(_) => 'n',
            Literal::Text(_) => 't',
        })
        .collect();
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

fn is_column(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
}

/// Replaces `e` by the next parameter if it is a maskable literal.
fn mask_one(e: &mut Expr, literals: &mut Vec<Literal>) {
    let Expr::Value(v) = e else { return };
    let literal = match &v.value {
        Value::Number(text, false) if is_plain_number(text) => Literal::Number(text.clone()),
        Value::SingleQuotedString(text) => Literal::Text(text.clone()),
        _ => return,
    };
    literals.push(literal);
    v.value = Value::Placeholder(format!("${}", literals.len()));
    v.span = Span::empty();
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
    /// the types' common type.
    pub(super) fn exact_value(&self, target: &DataType) -> Option<ScalarValue> {
        match (self, target) {
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
    /// all (an exact conversion exists for some values).
    pub(super) fn fits(&self, t: &DataType) -> bool {
        match self {
            Literal::Number(_) => t.is_integer() || matches!(t, DataType::Decimal128(..)),
            Literal::Text(_) => matches!(
                t,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Date32
            ),
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
            m.literals,
            vec![
                Literal::Number("5".into()),
                Literal::Text("x".into()),
                Literal::Number("1".into()),
                Literal::Number("2.50".into()),
                Literal::Text("p".into()),
                Literal::Text("q".into()),
                Literal::Text("ab%".into()),
            ]
        );
        let text = m.shape.split('\u{0}').next().unwrap();
        assert!(text.contains("a = $1"), "{text}");
        assert!(text.contains("f + 1 > 7"), "{text}");
        assert!(text.contains("DATE '1994-01-01'"), "{text}");
        assert!(text.contains("LIMIT 10"), "{text}");
        assert!(text.contains("SELECT a, 3"), "{text}");
        assert!(m.shape.ends_with("\u{0}ntnnttt"), "{}", m.shape);
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
}

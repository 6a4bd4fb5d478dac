//! Conjuncts that read one column and literals only, compiled to the set
//! of values they accept.
//!
//! `l_quantity >= 1 AND l_quantity <= 11 OR l_quantity >= 10 AND
//! l_quantity <= 20` accepts the values in `[1, 20]`; `l_shipmode = 'AIR'
//! OR l_shipmode = 'AIR REG'` accepts two strings. Written as a
//! [`ValueSet`], such a conjunct — and every other conjunct of the same
//! predicate over the same column — is one pass over the column (see
//! `kernel.rs`) instead of a pass per comparison and per `AND`/`OR`.
//!
//! # Why the set is exact, NULLs included
//!
//! Only comparisons of the column with non-NULL literals
//! (`=`, `<>`, `<`, `<=`, `>`, `>=`, `IN`, `NOT IN`), and `AND`, `OR` and
//! `NOT` over them, compile. For a
//! non-NULL value every comparison is true or false, so the three-valued
//! expression is two-valued there and equals membership in the set built
//! from the same operators (intersection, union, complement). For a NULL
//! value every comparison is NULL, and `AND`, `OR` and `NOT` of NULLs are
//! NULL, which a filter rejects — so a row passes exactly when its value
//! is non-NULL and in the set. Anything else (`IS NULL`, a NULL literal,
//! a function, a cast, two columns) is left to the expression itself.

use datafusion_common::ScalarValue;
use datafusion_expr::Operator as Op;
use datafusion_physical_expr::expressions::{BinaryExpr, Column, InListExpr, Literal, NotExpr};

use crate::plan::ExprRef;

/// How the values of an ordered column compare: which literals may stand
/// beside it, and which array types it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Domain {
    /// Any integer type; literals of any integer type.
    Integer,
    /// Days since the epoch (`Date32`).
    Date32,
    /// Unscaled `Decimal128` values at this scale.
    Decimal { scale: i8 },
}

/// The values a compiled conjunct accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ValueSet {
    /// A union of closed intervals of values in `domain`: sorted,
    /// disjoint and not adjacent (so equal sets have equal ranges).
    Ordered {
        domain: Domain,
        ranges: Vec<(i128, i128)>,
    },
    /// Byte strings: exactly `values` (sorted, distinct), or — `negated`
    /// — every string but them.
    Strings { values: Vec<Vec<u8>>, negated: bool },
}

/// A compiled conjunct: the rows whose `column` holds a non-NULL value in
/// `set`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ColumnTest {
    pub column: usize,
    pub set: ValueSet,
}

impl std::fmt::Display for ColumnTest {
    /// `#5 in [1.00, 30.00]`, `#4 in {'AIR', 'MAIL'}`: the column's index
    /// in the filter's input and the values kept (unscaled for decimals).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{} ", self.column)?;
        match &self.set {
            ValueSet::Ordered { ranges, .. } => {
                let ranges: Vec<String> = ranges
                    .iter()
                    .map(|(lo, hi)| match (*lo == i128::MIN, *hi == i128::MAX) {
                        (true, true) => "any".to_string(),
                        (true, false) => format!("<= {hi}"),
                        (false, true) => format!(">= {lo}"),
                        (false, false) if lo == hi => format!("= {lo}"),
                        (false, false) => format!("[{lo}, {hi}]"),
                    })
                    .collect();
                if ranges.is_empty() {
                    write!(f, "none")
                } else {
                    write!(f, "{}", ranges.join(" or "))
                }
            }
            ValueSet::Strings { values, negated } => {
                let values: Vec<String> = values
                    .iter()
                    .map(|v| format!("'{}'", String::from_utf8_lossy(v)))
                    .collect();
                let not = if *negated { "not " } else { "" };
                write!(f, "{not}in {{{}}}", values.join(", "))
            }
        }
    }
}

/// Compiles `expr` if it reads one column and literals only, in the forms
/// the module docs list.
pub(super) fn compile(expr: &ExprRef) -> Option<ColumnTest> {
    let any = expr.as_ref();
    if let Some(binary) = any.downcast_ref::<BinaryExpr>() {
        return match binary.op() {
            Op::And | Op::Or => {
                let left = compile(binary.left())?;
                let right = compile(binary.right())?;
                if left.column != right.column {
                    return None;
                }
                let set = if *binary.op() == Op::And {
                    left.set.intersect(&right.set)?
                } else {
                    left.set.union(&right.set)?
                };
                Some(ColumnTest {
                    column: left.column,
                    set,
                })
            }
            op => comparison(binary.left(), *op, binary.right()),
        };
    }
    if let Some(in_list) = any.downcast_ref::<InListExpr>() {
        let column = column_index(in_list.expr())?;
        let set = ValueSet::points(in_list.list())?;
        let set = if in_list.negated() {
            set.complement()
        } else {
            set
        };
        return Some(ColumnTest { column, set });
    }
    if let Some(not) = any.downcast_ref::<NotExpr>() {
        let inner = compile(not.arg())?;
        return Some(ColumnTest {
            column: inner.column,
            set: inner.set.complement(),
        });
    }
    None
}

/// `column op literal` or `literal op column`.
fn comparison(left: &ExprRef, op: Op, right: &ExprRef) -> Option<ColumnTest> {
    if let (Some(column), Some(value)) = (column_index(left), literal(right)) {
        return Some(ColumnTest {
            column,
            set: ValueSet::leaf(op, value)?,
        });
    }
    let (column, value) = (column_index(right)?, literal(left)?);
    let flipped = match op {
        Op::Lt => Op::Gt,
        Op::LtEq => Op::GtEq,
        Op::Gt => Op::Lt,
        Op::GtEq => Op::LtEq,
        Op::Eq | Op::NotEq => op,
        _ => return None,
    };
    Some(ColumnTest {
        column,
        set: ValueSet::leaf(flipped, value)?,
    })
}

fn column_index(expr: &ExprRef) -> Option<usize> {
    expr.downcast_ref::<Column>().map(Column::index)
}

fn literal(expr: &ExprRef) -> Option<&ScalarValue> {
    expr.downcast_ref::<Literal>().map(Literal::value)
}

/// A literal as a point of a domain, or a string; `None` for NULL and for
/// types no set is built over.
enum Point<'a> {
    Ordered(Domain, i128),
    Bytes(&'a [u8]),
}

fn point(value: &ScalarValue) -> Option<Point<'_>> {
    use ScalarValue as S;
    let integer = |v: i128| Some(Point::Ordered(Domain::Integer, v));
    match value {
        S::Int8(Some(v)) => integer((*v).into()),
        S::Int16(Some(v)) => integer((*v).into()),
        S::Int32(Some(v)) => integer((*v).into()),
        S::Int64(Some(v)) => integer((*v).into()),
        S::UInt8(Some(v)) => integer((*v).into()),
        S::UInt16(Some(v)) => integer((*v).into()),
        S::UInt32(Some(v)) => integer((*v).into()),
        S::UInt64(Some(v)) => integer((*v).into()),
        S::Date32(Some(v)) => Some(Point::Ordered(Domain::Date32, (*v).into())),
        S::Decimal128(Some(v), _, scale) => {
            Some(Point::Ordered(Domain::Decimal { scale: *scale }, *v))
        }
        S::Utf8(Some(v)) | S::LargeUtf8(Some(v)) | S::Utf8View(Some(v)) => {
            Some(Point::Bytes(v.as_bytes()))
        }
        _ => None,
    }
}

impl ValueSet {
    /// The values `v` with `v op value`.
    fn leaf(op: Op, value: &ScalarValue) -> Option<ValueSet> {
        match point(value)? {
            Point::Ordered(domain, v) => {
                let ranges = match op {
                    Op::Eq => vec![(v, v)],
                    Op::NotEq => {
                        return ValueSet::ordered(domain, vec![(v, v)]).map(|s| s.complement())
                    }
                    Op::Lt => vec![(i128::MIN, v.checked_sub(1)?)],
                    Op::LtEq => vec![(i128::MIN, v)],
                    Op::Gt => vec![(v.checked_add(1)?, i128::MAX)],
                    Op::GtEq => vec![(v, i128::MAX)],
                    _ => return None,
                };
                ValueSet::ordered(domain, ranges)
            }
            Point::Bytes(bytes) => {
                let negated = match op {
                    Op::Eq => false,
                    Op::NotEq => true,
                    _ => return None,
                };
                Some(ValueSet::Strings {
                    values: vec![bytes.to_vec()],
                    negated,
                })
            }
        }
    }

    /// The values equal to one of `items`, all non-NULL literals of one
    /// domain (or all strings).
    fn points(items: &[ExprRef]) -> Option<ValueSet> {
        let mut domain_seen = None;
        let mut ranges = Vec::new();
        let mut strings = Vec::new();
        for item in items {
            match point(literal(item)?)? {
                Point::Ordered(domain, v) => {
                    if *domain_seen.get_or_insert(domain) != domain {
                        return None;
                    }
                    ranges.push((v, v));
                }
                Point::Bytes(bytes) => strings.push(bytes.to_vec()),
            }
        }
        match (domain_seen, strings.is_empty()) {
            (Some(domain), true) => ValueSet::ordered(domain, ranges),
            (None, false) => {
                strings.sort_unstable();
                strings.dedup();
                Some(ValueSet::Strings {
                    values: strings,
                    negated: false,
                })
            }
            _ => None,
        }
    }

    /// Normalizes `ranges` (any order, possibly empty intervals).
    fn ordered(domain: Domain, mut ranges: Vec<(i128, i128)>) -> Option<ValueSet> {
        ranges.retain(|(lo, hi)| lo <= hi);
        ranges.sort_unstable();
        let mut merged: Vec<(i128, i128)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            match merged.last_mut() {
                // Overlapping or adjacent (`hi + 1 == lo`): one interval.
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        Some(ValueSet::Ordered {
            domain,
            ranges: merged,
        })
    }

    fn complement(&self) -> ValueSet {
        match self {
            ValueSet::Ordered { domain, ranges } => {
                let mut gaps = Vec::with_capacity(ranges.len() + 1);
                // Everything below the next interval, from `from` on;
                // `None` once an interval reached i128::MAX.
                let mut from = Some(i128::MIN);
                for &(lo, hi) in ranges {
                    if let Some(start) = from {
                        if lo > start {
                            gaps.push((start, lo - 1));
                        }
                    }
                    from = hi.checked_add(1);
                }
                if let Some(start) = from {
                    gaps.push((start, i128::MAX));
                }
                ValueSet::Ordered {
                    domain: *domain,
                    ranges: gaps,
                }
            }
            ValueSet::Strings { values, negated } => ValueSet::Strings {
                values: values.clone(),
                negated: !negated,
            },
        }
    }

    fn intersect(&self, other: &ValueSet) -> Option<ValueSet> {
        match (self, other) {
            (
                ValueSet::Ordered { domain, ranges },
                ValueSet::Ordered {
                    domain: other_domain,
                    ranges: other_ranges,
                },
            ) if domain == other_domain => {
                let mut out = Vec::new();
                for &(lo, hi) in ranges {
                    for &(olo, ohi) in other_ranges {
                        out.push((lo.max(olo), hi.min(ohi)));
                    }
                }
                ValueSet::ordered(*domain, out)
            }
            (ValueSet::Strings { .. }, ValueSet::Strings { .. }) => {
                // A ∩ B = ¬(¬A ∪ ¬B).
                Some(self.complement().union(&other.complement())?.complement())
            }
            _ => None,
        }
    }

    fn union(&self, other: &ValueSet) -> Option<ValueSet> {
        match (self, other) {
            (
                ValueSet::Ordered { domain, ranges },
                ValueSet::Ordered {
                    domain: other_domain,
                    ranges: other_ranges,
                },
            ) if domain == other_domain => {
                ValueSet::ordered(*domain, [ranges.as_slice(), other_ranges].concat())
            }
            (
                ValueSet::Strings { values, negated },
                ValueSet::Strings {
                    values: other_values,
                    negated: other_negated,
                },
            ) => {
                let (values, negated) = match (negated, other_negated) {
                    // A ∪ B.
                    (false, false) => (merge(values, other_values, |_, _| true), false),
                    // ¬A ∪ ¬B = ¬(A ∩ B).
                    (true, true) => (merge(values, other_values, |a, b| a && b), true),
                    // ¬A ∪ B = ¬(A \ B).
                    (true, false) => (merge(values, other_values, |a, b| a && !b), true),
                    (false, true) => (merge(other_values, values, |a, b| a && !b), true),
                };
                Some(ValueSet::Strings { values, negated })
            }
            _ => None,
        }
    }
}

/// The sorted, distinct strings of `a ∪ b` for which `keep(in a, in b)`.
fn merge(a: &[Vec<u8>], b: &[Vec<u8>], keep: impl Fn(bool, bool) -> bool) -> Vec<Vec<u8>> {
    let mut all: Vec<&Vec<u8>> = a.iter().chain(b).collect();
    all.sort_unstable();
    all.dedup();
    let contains = |side: &[Vec<u8>], v: &Vec<u8>| side.binary_search(v).is_ok();
    all.into_iter()
        .filter(|v| keep(contains(a, v), contains(b, v)))
        .cloned()
        .collect()
}

/// The conjuncts of a predicate, with those over one column and literals
/// merged per column: a [`CompiledConjunct`] per column — those over
/// ordered values first, then those over strings, each in the order their
/// columns first appear — and the rest in the predicate's order.
pub(super) fn partition(conjuncts: Vec<ExprRef>) -> (Vec<CompiledConjunct>, Vec<ExprRef>) {
    let mut compiled: Vec<CompiledConjunct> = Vec::new();
    let mut rest = Vec::new();
    for conjunct in conjuncts {
        let Some(test) = compile(&conjunct) else {
            rest.push(conjunct);
            continue;
        };
        let same_column = compiled.iter_mut().find(|c| c.test.column == test.column);
        match same_column {
            Some(c) => match c.test.set.intersect(&test.set) {
                Some(set) => {
                    c.test.set = set;
                    c.exprs.push(conjunct);
                }
                // Literals of two domains on one column (never produced
                // by type coercion): left to the expressions.
                None => rest.push(conjunct),
            },
            None => compiled.push(CompiledConjunct {
                test,
                exprs: vec![conjunct],
            }),
        }
    }
    // Interval tests first: they cost the same on every row, while a
    // string test only tests the rows still alive.
    compiled.sort_by_key(|c| matches!(c.test.set, ValueSet::Strings { .. }));
    (compiled, rest)
}

/// One column's compiled conjuncts.
#[derive(Debug)]
pub(super) struct CompiledConjunct {
    pub test: ColumnTest,
    /// The conjuncts `test` stands for, evaluated instead where the
    /// column's array type does not fit the test's domain.
    pub exprs: Vec<ExprRef>,
}

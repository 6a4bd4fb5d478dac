//! The filter with compiled column tests against DataFusion's evaluation
//! of the whole predicate, on seeded random predicates and data.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, AsArray, Date32Array, Decimal128Array, Int32Array, Int64Array, Int8Array,
    LargeStringArray, RecordBatch, StringArray, StringViewArray, UInt64Array,
};
use arrow::compute::{filter_record_batch, prep_null_mask_filter};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion_common::ScalarValue;
use datafusion_expr::Operator as Op;
use datafusion_physical_expr::expressions::{binary, col, in_list, lit, not};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::column_test::{compile, ValueSet};
use super::FilterOperator;
use crate::operator::{Demand, Operator};
use crate::plan::ExprRef;

/// The column types under test, with the values their data and literals
/// are drawn from (type bounds and their neighbours included).
#[derive(Clone, Copy, Debug)]
enum Kind {
    Int8,
    Int32,
    Int64,
    UInt64,
    Date32,
    Decimal,
    Utf8,
    LargeUtf8,
    Utf8View,
}

const KINDS: [Kind; 9] = [
    Kind::Int8,
    Kind::Int32,
    Kind::Int64,
    Kind::UInt64,
    Kind::Date32,
    Kind::Decimal,
    Kind::Utf8,
    Kind::LargeUtf8,
    Kind::Utf8View,
];

const STRINGS: [&str; 7] = ["", "AIR", "FOB", "AIR REG", "REG AIR", "MAIL", "a"];

impl Kind {
    fn data_type(self) -> DataType {
        match self {
            Kind::Int8 => DataType::Int8,
            Kind::Int32 => DataType::Int32,
            Kind::Int64 => DataType::Int64,
            Kind::UInt64 => DataType::UInt64,
            Kind::Date32 => DataType::Date32,
            Kind::Decimal => DataType::Decimal128(15, 2),
            Kind::Utf8 => DataType::Utf8,
            Kind::LargeUtf8 => DataType::LargeUtf8,
            Kind::Utf8View => DataType::Utf8View,
        }
    }

    /// A value index: small values, or one of the type's ends.
    fn draw(self, rng: &mut SmallRng) -> i128 {
        match self {
            Kind::Utf8 | Kind::LargeUtf8 | Kind::Utf8View => {
                rng.random_range(0..STRINGS.len()) as i128
            }
            _ => {
                let (min, max): (i128, i128) = match self {
                    Kind::Int8 => (i8::MIN.into(), i8::MAX.into()),
                    Kind::Int32 | Kind::Date32 => (i32::MIN.into(), i32::MAX.into()),
                    Kind::Int64 => (i64::MIN.into(), i64::MAX.into()),
                    Kind::UInt64 => (0, u64::MAX.into()),
                    _ => (-999_999_999_999_999, 999_999_999_999_999),
                };
                match rng.random_range(0..10) {
                    0 => min,
                    1 => max,
                    2 => min + 1,
                    3 => max - 1,
                    _ => rng.random_range(-6i128..6).clamp(min, max),
                }
            }
        }
    }

    fn scalar(self, v: i128) -> ScalarValue {
        match self {
            Kind::Int8 => ScalarValue::Int8(Some(v as i8)),
            Kind::Int32 => ScalarValue::Int32(Some(v as i32)),
            Kind::Int64 => ScalarValue::Int64(Some(v as i64)),
            Kind::UInt64 => ScalarValue::UInt64(Some(v as u64)),
            Kind::Date32 => ScalarValue::Date32(Some(v as i32)),
            Kind::Decimal => ScalarValue::Decimal128(Some(v), 15, 2),
            Kind::Utf8 => ScalarValue::Utf8(Some(STRINGS[v as usize].to_string())),
            Kind::LargeUtf8 => ScalarValue::LargeUtf8(Some(STRINGS[v as usize].to_string())),
            Kind::Utf8View => ScalarValue::Utf8View(Some(STRINGS[v as usize].to_string())),
        }
    }

    fn array(self, values: &[Option<i128>]) -> ArrayRef {
        let strings = || values.iter().map(|v| v.map(|v| STRINGS[v as usize]));
        match self {
            Kind::Int8 => Arc::new(Int8Array::from_iter(
                values.iter().map(|v| v.map(|v| v as i8)),
            )),
            Kind::Int32 => Arc::new(Int32Array::from_iter(
                values.iter().map(|v| v.map(|v| v as i32)),
            )),
            Kind::Int64 => Arc::new(Int64Array::from_iter(
                values.iter().map(|v| v.map(|v| v as i64)),
            )),
            Kind::UInt64 => Arc::new(UInt64Array::from_iter(
                values.iter().map(|v| v.map(|v| v as u64)),
            )),
            Kind::Date32 => Arc::new(Date32Array::from_iter(
                values.iter().map(|v| v.map(|v| v as i32)),
            )),
            Kind::Decimal => Arc::new(
                Decimal128Array::from_iter(values.iter().copied())
                    .with_precision_and_scale(15, 2)
                    .unwrap(),
            ),
            Kind::Utf8 => Arc::new(StringArray::from_iter(strings())),
            Kind::LargeUtf8 => Arc::new(LargeStringArray::from_iter(strings())),
            Kind::Utf8View => Arc::new(StringViewArray::from_iter(strings())),
        }
    }
}

/// A random predicate over column `name` of `kind`: comparisons either
/// way round, IN / NOT IN lists, AND, OR and NOT, up to `depth` deep.
fn predicate(rng: &mut SmallRng, kind: Kind, name: &str, schema: &Schema, depth: u32) -> ExprRef {
    let column = col(name, schema).unwrap();
    let strings = matches!(kind, Kind::Utf8 | Kind::LargeUtf8 | Kind::Utf8View);
    if depth > 0 && rng.random_bool(0.6) {
        let left = predicate(rng, kind, name, schema, depth - 1);
        return match rng.random_range(0..5) {
            0 => not(left).unwrap(),
            1 | 2 => binary(
                left,
                Op::And,
                predicate(rng, kind, name, schema, depth - 1),
                schema,
            )
            .unwrap(),
            _ => binary(
                left,
                Op::Or,
                predicate(rng, kind, name, schema, depth - 1),
                schema,
            )
            .unwrap(),
        };
    }
    if rng.random_bool(0.25) {
        let items = (0..rng.random_range(1..5))
            .map(|_| lit(kind.scalar(kind.draw(rng))))
            .collect();
        return in_list(column, items, &rng.random_bool(0.4), schema).unwrap();
    }
    let ops: &[Op] = if strings {
        &[Op::Eq, Op::NotEq]
    } else {
        &[Op::Eq, Op::NotEq, Op::Lt, Op::LtEq, Op::Gt, Op::GtEq]
    };
    let op = ops[rng.random_range(0..ops.len())];
    let value = lit(kind.scalar(kind.draw(rng)));
    if rng.random_bool(0.3) {
        binary(value, op, column, schema).unwrap()
    } else {
        binary(column, op, value, schema).unwrap()
    }
}

fn run(op: &FilterOperator, batch: &RecordBatch) -> RecordBatch {
    let mut out = Vec::new();
    op.process(batch.clone(), 0, &mut |b| {
        out.push(b);
        Ok(Demand::More)
    })
    .unwrap();
    assert_eq!(out.len(), 1);
    out.pop().unwrap()
}

fn expected(predicate: &ExprRef, batch: &RecordBatch) -> RecordBatch {
    let mask = predicate
        .evaluate(batch)
        .unwrap()
        .into_array(batch.num_rows())
        .unwrap();
    filter_record_batch(batch, &prep_null_mask_filter(mask.as_boolean())).unwrap()
}

/// For every column type: 300 seeded random predicates on 200 rows (some
/// NULL, type ends included), alone and after a conjunct on a second
/// column that leaves only some 64-row words alive, and beside a
/// conjunct that does not compile. The filter keeps exactly the rows
/// DataFusion's evaluation of the whole predicate keeps, and every
/// predicate over one column compiled.
#[test]
fn compiled_tests_keep_what_the_expression_keeps() {
    let mut rng = SmallRng::seed_from_u64(0x5eed_f17e);
    for kind in KINDS {
        let schema = Schema::new(vec![
            Field::new("x", kind.data_type(), true),
            Field::new("k", DataType::Int64, false),
        ]);
        let rows = 200;
        let values: Vec<Option<i128>> = (0..rows)
            .map(|_| (!rng.random_bool(0.1)).then(|| kind.draw(&mut rng)))
            .collect();
        let keys = Int64Array::from_iter_values(0..rows as i64);
        let batch = RecordBatch::try_new(
            Arc::new(schema.clone()),
            vec![kind.array(&values), Arc::new(keys)],
        )
        .unwrap();
        let schema = batch.schema();
        let k = || col("k", &schema).unwrap();
        // Keeps rows 64..128 and 150..160: two words of four alive.
        let narrowing = binary(
            binary(
                binary(k(), Op::GtEq, lit(64i64), &schema).unwrap(),
                Op::And,
                binary(k(), Op::Lt, lit(128i64), &schema).unwrap(),
                &schema,
            )
            .unwrap(),
            Op::Or,
            binary(
                binary(k(), Op::GtEq, lit(150i64), &schema).unwrap(),
                Op::And,
                binary(k(), Op::Lt, lit(160i64), &schema).unwrap(),
                &schema,
            )
            .unwrap(),
            &schema,
        )
        .unwrap();
        // `k + 1 > 3`: reads a column but does not compile.
        let opaque = binary(
            binary(k(), Op::Plus, lit(1i64), &schema).unwrap(),
            Op::Gt,
            lit(3i64),
            &schema,
        )
        .unwrap();
        for _ in 0..300 {
            let p = predicate(&mut rng, kind, "x", &schema, 3);
            let test = compile(&p).unwrap_or_else(|| panic!("{kind:?}: {p} did not compile"));
            assert_eq!(test.column, 0);
            if let ValueSet::Ordered { ranges, .. } = &test.set {
                assert!(ranges.windows(2).all(|w| w[0].1 < w[1].0 - 1), "{ranges:?}");
            }
            for whole in [
                p.clone(),
                binary(narrowing.clone(), Op::And, p.clone(), &schema).unwrap(),
                binary(p.clone(), Op::And, opaque.clone(), &schema).unwrap(),
                binary(
                    binary(p.clone(), Op::And, narrowing.clone(), &schema).unwrap(),
                    Op::And,
                    p.clone(),
                    &schema,
                )
                .unwrap(),
            ] {
                let op = FilterOperator::new(whole.clone());
                assert!(!op.column_tests.is_empty(), "{whole}");
                let got = run(&op, &batch);
                assert_eq!(got, expected(&whole, &batch), "{kind:?}: {whole}");
            }
        }
    }
}

/// Where the column's array is not of a type the test reads (a literal of
/// another domain than the data), the operator evaluates the conjuncts
/// themselves and still keeps the right rows.
#[test]
fn a_column_of_another_type_falls_back_to_the_expressions() {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, true)]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(Int32Array::from(vec![
            Some(1),
            None,
            Some(5),
            Some(9),
        ]))],
    )
    .unwrap();
    // Compiled for a Date32 column, run on an Int32 one of the same
    // physical values: the kernel refuses, the expressions decide.
    let date_schema = Schema::new(vec![Field::new("x", DataType::Date32, true)]);
    let p = binary(
        col("x", &date_schema).unwrap(),
        Op::GtEq,
        lit(ScalarValue::Date32(Some(4))),
        &date_schema,
    )
    .unwrap();
    let op = FilterOperator::new(p);
    assert_eq!(op.column_tests.len(), 1);
    let test = &op.column_tests[0].test;
    assert!(super::kernel::evaluate(test, batch.column(0).as_ref(), None).is_none());
    // DataFusion compares Date32 with Int32 as it can; whatever it
    // answers, the operator answers the same rather than guessing.
    let whole = op.predicate.clone();
    match whole.evaluate(&batch) {
        Ok(_) => assert_eq!(run(&op, &batch), expected(&whole, &batch)),
        Err(_) => {
            let mut sink = |_| Ok(Demand::More);
            assert!(op.process(batch.clone(), 0, &mut sink).is_err());
        }
    }
}

/// What does not compile: NULL literals, two columns, IS NULL, functions.
#[test]
fn only_one_column_against_literals_compiles() {
    let schema = Schema::new(vec![
        Field::new("x", DataType::Int64, true),
        Field::new("y", DataType::Int64, true),
    ]);
    let x = || col("x", &schema).unwrap();
    let y = || col("y", &schema).unwrap();
    let cases: Vec<ExprRef> = vec![
        binary(x(), Op::Eq, lit(ScalarValue::Int64(None)), &schema).unwrap(),
        binary(x(), Op::Lt, y(), &schema).unwrap(),
        binary(
            binary(x(), Op::Lt, lit(1i64), &schema).unwrap(),
            Op::Or,
            binary(y(), Op::Lt, lit(1i64), &schema).unwrap(),
            &schema,
        )
        .unwrap(),
        datafusion_physical_expr::expressions::is_null(x()).unwrap(),
        in_list(
            x(),
            vec![lit(1i64), lit(ScalarValue::Int64(None))],
            &true,
            &schema,
        )
        .unwrap(),
    ];
    for case in cases {
        assert!(compile(&case).is_none(), "{case}");
    }
    // The same column in two conjuncts merges into one interval.
    let both = binary(
        binary(x(), Op::GtEq, lit(3i64), &schema).unwrap(),
        Op::And,
        binary(x(), Op::Lt, lit(7i64), &schema).unwrap(),
        &schema,
    )
    .unwrap();
    let op = FilterOperator::new(both);
    assert_eq!(op.column_tests.len(), 1);
    assert!(matches!(
        &op.column_tests[0].test.set,
        ValueSet::Ordered { ranges, .. } if ranges == &[(3, 6)]
    ));
}

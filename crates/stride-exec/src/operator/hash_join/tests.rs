use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use arrow::array::{ArrayRef, AsArray, RecordBatch};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use datafusion_expr::JoinType;

use super::build::*;
use super::keys::*;
use super::probe::*;
use super::table::*;
use super::*;
use crate::error::{ExecError, Result};
use crate::memory::QueryMemory;
use crate::operator::{Demand, Operator, Sink};
use crate::plan::{BuildSide, ExprRef};
use crate::seq::MorselSeq;
use crate::source::Source;
use arrow::array::Int64Array;

/// A build table of `n` rows whose key is `row % distinct`.
fn table(n: usize, distinct: i64) -> JoinHashTable {
    let keys: ArrayRef = Arc::new(Int64Array::from_iter_values(
        (0..n as i64).map(|r| r % distinct),
    ));
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)])),
        vec![keys.clone()],
    )
    .unwrap();
    let encoded = KeyEncoder::new(vec![DataType::Int64], false)
        .unwrap()
        .encode(vec![keys])
        .unwrap();
    JoinHashTable::new(batch, encoded, false).unwrap()
}

/// The build rows each key `0..distinct` finds, in chain order.
fn matches(t: &JoinHashTable, distinct: i64) -> Vec<Vec<u32>> {
    let probe = KeyEncoder::new(vec![DataType::Int64], false)
        .unwrap()
        .encode(vec![Arc::new(Int64Array::from_iter_values(0..distinct))])
        .unwrap();
    let (mut p, mut b) = (Vec::new(), Vec::new());
    let end = t.candidates(
        &probe,
        distinct as usize,
        ProbeCursor::row(0),
        usize::MAX,
        Walk::WholeRows,
        (&mut p, &mut b),
    );
    assert_eq!(end, ProbeCursor::row(distinct as usize));
    let mut out = vec![Vec::new(); distinct as usize];
    for (i, j) in p.into_iter().zip(b) {
        out[i as usize].push(j);
    }
    out
}

/// Drains the insert pipeline's source into its sink from `threads`
/// threads, as the workers of the insert task set would.
fn insert_in_parallel(slot: &HashTableSlot, threads: usize, morsel_rows: usize) {
    let source = JoinTableInsertSource::new(slot.clone());
    let sink = JoinTableInsertSink::new(slot.clone());
    std::thread::scope(|s| {
        for w in 0..threads {
            let (source, sink) = (&source, &sink);
            s.spawn(move || {
                while let Some(m) = source.next_morsel(morsel_rows).unwrap() {
                    for (seq, batch) in m.slices {
                        sink.consume(seq, batch, w).unwrap();
                    }
                }
            });
        }
    });
    sink.finish(&stride_sched::FinalizeContext::detached())
        .unwrap();
}

#[test]
fn small_tables_are_linked_in_the_build_and_need_no_insert_morsels() {
    let slot: HashTableSlot = Arc::new(OnceLock::new());
    slot.set(table(INLINE_INSERT_ROWS, 100)).unwrap();
    let source = JoinTableInsertSource::new(slot.clone());
    assert_eq!(source.remaining_rows(), Some(0));
    assert!(source.next_morsel(1000).unwrap().is_none());
    let t = slot.get().unwrap();
    let m = matches(t, 100);
    assert!(m
        .iter()
        .all(|rows| rows.len() == INLINE_INSERT_ROWS / 100
            || rows.len() == INLINE_INSERT_ROWS / 100 + 1));
    assert!(m.iter().all(|rows| rows.windows(2).all(|w| w[0] < w[1])));
}

#[test]
fn one_inserting_worker_links_every_chain_in_ascending_row_order() {
    let n = INLINE_INSERT_ROWS * 3 + 7;
    let slot: HashTableSlot = Arc::new(OnceLock::new());
    slot.set(table(n, 1000)).unwrap();
    insert_in_parallel(&slot, 1, 999);
    let m = matches(slot.get().unwrap(), 1000);
    for (key, rows) in m.iter().enumerate() {
        let want: Vec<u32> = (key as u32..n as u32).step_by(1000).collect();
        assert_eq!(rows, &want, "key {key}");
    }
}

/// Concurrent inserts into shared buckets: every row ends up in exactly
/// one chain, its key's, none lost and none linked twice.
#[test]
fn concurrent_inserts_link_every_row_exactly_once() {
    for (threads, distinct, morsel) in [(4, 7, 13), (8, 5000, 1000), (3, 1, 4096)] {
        let n = INLINE_INSERT_ROWS * 4 + 11;
        let slot: HashTableSlot = Arc::new(OnceLock::new());
        slot.set(table(n, distinct)).unwrap();
        insert_in_parallel(&slot, threads, morsel);
        let t = slot.get().unwrap();
        assert!(t.ready.load(Ordering::Acquire));
        let mut seen = vec![0u32; n];
        for (key, rows) in matches(t, distinct).into_iter().enumerate() {
            for r in rows {
                assert_eq!(r as i64 % distinct, key as i64);
                seen[r as usize] += 1;
            }
        }
        let wrong: Vec<usize> = (0..n).filter(|&r| seen[r] != 1).collect();
        assert!(
            wrong.is_empty(),
            "rows found ≠ once: {:?}",
            &wrong[..wrong.len().min(10)]
        );
    }
}

/// A probe of `join_type` (build side right) over the table in `slot`,
/// with one Int64 key column `k` on both sides.
fn probe_of(
    slot: &HashTableSlot,
    join_type: JoinType,
    memory: Arc<QueryMemory>,
) -> HashProbeOperator {
    let schema = slot.get().unwrap().batch.schema();
    let modes = JoinModes::new(join_type, BuildSide::Right).unwrap();
    let joined = Arc::new(Schema::new(vec![
        Field::new("pk", DataType::Int64, true),
        Field::new("k", DataType::Int64, true),
    ]));
    let out = match join_type {
        JoinType::LeftSemi | JoinType::LeftAnti => schema.clone(),
        _ => joined.clone(),
    };
    HashProbeOperator::new(
        vec![Arc::new(
            datafusion_physical_expr::expressions::Column::new("k", 0),
        )],
        Arc::new(KeyEncoder::new(vec![DataType::Int64], false).unwrap()),
        slot.clone(),
        modes,
        BuildSide::Right,
        None,
        false,
        out,
        joined,
        memory,
    )
}

/// Runs `probe` over `batch`, collecting the chunks it emits; stops
/// taking chunks after `take` of them.
fn run(probe: &HashProbeOperator, batch: RecordBatch, take: usize) -> Result<Vec<RecordBatch>> {
    let mut chunks = Vec::new();
    probe.process(batch, 0, &mut |b| {
        chunks.push(b);
        Ok(if chunks.len() >= take {
            Demand::Enough
        } else {
            Demand::More
        })
    })?;
    Ok(chunks)
}

fn keys(values: impl IntoIterator<Item = i64>) -> RecordBatch {
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)])),
        vec![Arc::new(Int64Array::from_iter_values(values))],
    )
    .unwrap()
}

#[test]
fn probing_a_table_before_its_insert_pipeline_finished_is_an_internal_error() {
    let slot: HashTableSlot = Arc::new(OnceLock::new());
    slot.set(table(INLINE_INSERT_ROWS + 1, 10)).unwrap();
    let probe = probe_of(&slot, JoinType::LeftSemi, QueryMemory::unbounded());
    let err = run(&probe, keys(0..20), usize::MAX).unwrap_err();
    assert!(matches!(err, ExecError::Internal(_)), "{err}");
    insert_in_parallel(&slot, 2, 100);
    let out = run(&probe, keys(0..20), usize::MAX).unwrap();
    let rows: usize = out.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 10, "keys 0..10 of 0..20 are in the table");
}

#[test]
fn a_probe_row_with_more_matches_than_a_chunk_is_split_inside_its_chain() {
    // 3 keys over 3·CHUNK_PAIRS/2 build rows: each probe row matches
    // CHUNK_PAIRS/2 rows; 5 probe rows yield 2.5 chunks of pairs.
    let n = 3 * CHUNK_PAIRS / 2;
    let slot: HashTableSlot = Arc::new(OnceLock::new());
    slot.set(table(n, 3)).unwrap();
    insert_in_parallel(&slot, 2, 4096);
    let probe = probe_of(&slot, JoinType::Inner, QueryMemory::unbounded());
    let chunks = run(&probe, keys([0, 1, 2, 0, 7, 1]), usize::MAX).unwrap();
    let sizes: Vec<usize> = chunks.iter().map(|c| c.num_rows()).collect();
    assert_eq!(sizes, vec![CHUNK_PAIRS, CHUNK_PAIRS, CHUNK_PAIRS / 2]);
    // Every pair joins equal keys.
    for c in &chunks {
        let (pk, bk) = (
            c.column(0).as_primitive::<Int64Type>(),
            c.column(1).as_primitive::<Int64Type>(),
        );
        for r in 0..c.num_rows() {
            assert_eq!(pk.value(r), bk.value(r));
        }
    }
    let total: usize = sizes.iter().sum();
    assert_eq!(total, 5 * CHUNK_PAIRS / 2);
    // A satisfied consumer stops the probe after the first chunk.
    assert_eq!(run(&probe, keys([0, 1, 2, 0, 7, 1]), 1).unwrap().len(), 1);
}

#[test]
fn a_per_row_join_keeps_rows_whole_and_charges_an_oversized_chunk() {
    let n = 2 * CHUNK_PAIRS;
    let slot: HashTableSlot = Arc::new(OnceLock::new());
    slot.set(table(n, 1)).unwrap();
    insert_in_parallel(&slot, 2, 4096);
    // A left outer join decides per probe row: the row matching all
    // 2·CHUNK_PAIRS build rows comes as one chunk, charged while it lives.
    let pool = crate::memory::MemoryPool::new(usize::MAX);
    let memory = QueryMemory::new(pool.clone(), usize::MAX);
    let probe = probe_of(&slot, JoinType::Left, memory.clone());
    let chunks = run(&probe, keys([0, 5, 0]), usize::MAX).unwrap();
    let sizes: Vec<usize> = chunks.iter().map(|c| c.num_rows()).collect();
    assert_eq!(
        sizes,
        vec![n, n + 1],
        "row 0 alone, then rows 5 (unmatched) and 0"
    );
    assert!(memory.peak() >= n * 16, "the oversized chunk was charged");
    assert_eq!(memory.used(), 0, "and returned");
    // Under a share smaller than such a chunk the join fails alone.
    let small = QueryMemory::new(pool, 64 * 1024);
    let probe = probe_of(&slot, JoinType::Left, small);
    let err = run(&probe, keys([0]), usize::MAX).unwrap_err();
    assert!(matches!(err, ExecError::MemoryExhausted { .. }), "{err}");
}

#[test]
fn a_cross_join_emits_bounded_chunks() {
    let n = CHUNK_PAIRS + 10;
    let batch = keys(0..n as i64);
    let slot: HashTableSlot = Arc::new(OnceLock::new());
    let table = JoinHashTable::new(batch, Keys::Empty, false).unwrap();
    table.ready.store(true, Ordering::Release);
    slot.set(table).unwrap();
    let probe = HashProbeOperator::new(
        Vec::new(),
        Arc::new(KeyEncoder::new(Vec::new(), false).unwrap()),
        slot.clone(),
        JoinModes::new(JoinType::Inner, BuildSide::Right).unwrap(),
        BuildSide::Right,
        None,
        false,
        Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ])),
        Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("b", DataType::Int64, true),
        ])),
        QueryMemory::unbounded(),
    );
    let chunks = run(&probe, keys([1, 2, 3]), usize::MAX).unwrap();
    assert!(chunks.iter().all(|c| c.num_rows() <= CHUNK_PAIRS));
    let total: usize = chunks.iter().map(|c| c.num_rows()).sum();
    assert_eq!(total, 3 * n);
}

/// A build side of 200 000 rows (two key columns: the Int2 codec; a
/// string key: the row format) collected by two workers goes through
/// the split step and gives the table the one-step layout gives: the
/// concatenated rows in worker order and every key's rows.
#[test]
fn a_large_build_side_is_laid_out_by_a_split_step() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, true),
        Field::new("b", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
    ]));
    let batch = |from: i64| {
        let ids = from..from + 1000;
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter(
                    ids.clone().map(|i| (i % 13 != 0).then_some(i % 1000)),
                )),
                Arc::new(Int64Array::from_iter_values(ids.clone())),
                Arc::new(arrow::array::StringArray::from_iter_values(
                    ids.map(|i| format!("k{}", i % 777)),
                )),
            ],
        )
        .unwrap()
    };
    let col = |i: usize| -> ExprRef {
        Arc::new(datafusion_physical_expr::expressions::Column::new(
            schema.field(i).name(),
            i,
        ))
    };
    for (keys, types) in [
        (vec![col(0), col(1)], vec![DataType::Int64, DataType::Int64]),
        (vec![col(2)], vec![DataType::Utf8]),
    ] {
        let slot: HashTableSlot = Arc::new(OnceLock::new());
        let encoder = Arc::new(KeyEncoder::new(types, false).unwrap());
        let sink = HashBuildSink::new(
            keys.clone(),
            encoder.clone(),
            schema.clone(),
            2,
            BuildConfig {
                track_matches: true,
                partition_on_spill: true,
            },
            slot.clone(),
            QueryMemory::unbounded(),
        );
        let mut by_worker = vec![Vec::new(), Vec::new()];
        for (i, from) in (0..200_000).step_by(1000).enumerate() {
            sink.consume(MorselSeq::at(i as u64), batch(from), i % 2)
                .unwrap();
            by_worker[i % 2].push(batch(from));
        }
        let steps = sink
            .finish(&stride_sched::FinalizeContext::detached())
            .unwrap();
        assert_eq!(steps.len(), 1, "laid out by a step");
        assert_eq!(steps[0].parts(), 5, "keys, the table, 3 columns");
        crate::step::run_inline(steps).unwrap();
        insert_in_parallel(&slot, 2, 5000);
        let t = slot.get().unwrap();
        let all: Vec<RecordBatch> = by_worker.into_iter().flatten().collect();
        let expected = concat_batches(&schema, &all).unwrap();
        assert_eq!(t.batch, expected);
        let reference = encoder
            .encode(eval_keys(&keys, &expected).unwrap())
            .unwrap();
        for row in (0..t.num_rows()).step_by(997) {
            assert_eq!(t.keys.hash(row), reference.hash(row));
            assert_eq!(t.keys.is_null(row), reference.is_null(row));
            assert!(t.keys.is_null(row) || t.keys.eq(row, &reference, row));
        }
        assert_eq!(t.null_rows.len(), reference_nulls(&reference, t.num_rows()));
    }
}

fn reference_nulls(keys: &Keys, rows: usize) -> usize {
    (0..rows).filter(|&r| keys.is_null(r)).count()
}

/// Every walk, resumed chunk by chunk with small budgets, finds exactly the
/// pairs a nested loop over the keys finds (NULL keys match nothing), for
/// each key encoding, at probe sizes around the walk's row groups, on a
/// table walked row by row (cache-resident) and on one walked in groups.
#[test]
fn every_walk_finds_the_pairs_of_a_nested_loop() {
    for (build_rows, distinct) in [(300, 11), (9000, 3001)] {
        walks_match_a_nested_loop(build_rows, distinct);
    }
}

fn walks_match_a_nested_loop(build_rows: usize, distinct: usize) {
    use arrow::array::StringArray;
    // Keys: `row % distinct`, with every 7th row NULL.
    let ints = |n: usize, distinct: usize| -> ArrayRef {
        Arc::new(Int64Array::from_iter(
            (0..n).map(|r| (r % 7 != 3).then_some((r % distinct) as i64)),
        ))
    };
    let strings = |n: usize, distinct: usize| -> ArrayRef {
        Arc::new(StringArray::from_iter(
            (0..n).map(|r| (r % 7 != 3).then(|| format!("k{}", r % distinct))),
        ))
    };
    type Columns = fn(usize, usize, &dyn Fn(usize, usize) -> ArrayRef) -> Vec<ArrayRef>;
    let one: Columns = |n, d, f| vec![f(n, d)];
    let two: Columns = |n, d, f| vec![f(n, d), f(n, d + 1)];
    for columns in [one, two] {
        for use_strings in [false, true] {
            let make: &dyn Fn(usize, usize) -> ArrayRef =
                if use_strings { &strings } else { &ints };
            let build_cols = columns(build_rows, distinct, make);
            let types: Vec<DataType> = build_cols.iter().map(|c| c.data_type().clone()).collect();
            let encoder = KeyEncoder::new(types, false).unwrap();
            let fields: Vec<Field> = build_cols
                .iter()
                .enumerate()
                .map(|(i, c)| Field::new(format!("k{i}"), c.data_type().clone(), true))
                .collect();
            let batch =
                RecordBatch::try_new(Arc::new(Schema::new(fields)), build_cols.clone()).unwrap();
            let build = encoder.encode(build_cols).unwrap();
            let t = JoinHashTable::linked(
                batch,
                encoder.encode(columns(build_rows, distinct, make)).unwrap(),
                false,
            )
            .unwrap();
            assert_eq!(
                t.heads.len() <= super::table::CACHE_RESIDENT_BUCKETS,
                build_rows < 1000,
                "each walk is tested"
            );
            for probe_rows in [0, 1, 31, 32, 33, 64, 100] {
                let probe = encoder.encode(columns(probe_rows, 13, make)).unwrap();
                let mut want: Vec<(u32, u32)> = Vec::new();
                for i in 0..probe_rows {
                    for j in 0..build_rows {
                        if !probe.is_null(i) && !build.is_null(j) && probe.eq(i, &build, j) {
                            want.push((i as u32, j as u32));
                        }
                    }
                }
                for (walk, budget) in [
                    (Walk::Split, 1),
                    (Walk::Split, 7),
                    (Walk::WholeRows, 5),
                    (Walk::FirstMatch, 3),
                ] {
                    let mut got = Vec::new();
                    let mut cursor = ProbeCursor::row(0);
                    let mut calls = 0;
                    while cursor.row < probe_rows {
                        let (mut p, mut b) = (Vec::new(), Vec::new());
                        cursor = t.candidates(
                            &probe,
                            probe_rows,
                            cursor,
                            budget,
                            walk,
                            (&mut p, &mut b),
                        );
                        if walk == Walk::Split {
                            assert!(
                                p.len() <= budget,
                                "{walk:?}: {} pairs over {budget}",
                                p.len()
                            );
                        }
                        got.extend(p.into_iter().zip(b));
                        calls += 1;
                        assert!(calls <= 10_000, "the walk makes no progress");
                    }
                    got.sort_unstable();
                    let expected: Vec<(u32, u32)> = if walk == Walk::FirstMatch {
                        // One pair per matching row, with an equal key.
                        let mut rows: Vec<u32> = want.iter().map(|&(i, _)| i).collect();
                        rows.dedup();
                        assert_eq!(got.iter().map(|&(i, _)| i).collect::<Vec<_>>(), rows);
                        assert!(got
                            .iter()
                            .all(|&(i, j)| probe.eq(i as usize, &build, j as usize)));
                        got.clone()
                    } else {
                        want.clone()
                    };
                    assert_eq!(
                        got, expected,
                        "{walk:?} budget {budget}, {probe_rows} probe rows, strings {use_strings}"
                    );
                }
            }
        }
    }
}

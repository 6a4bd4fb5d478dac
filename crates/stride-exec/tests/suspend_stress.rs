//! Stress of suspended morsels (`stride_exec::suspend`) on the real
//! scheduler: pipelines whose two resumable operators each turn a row into
//! many rows, emitted in small chunks, run as several queries at once on
//! four workers with a 20 µs time slice and tiny morsels — so tasks stop
//! inside morsels all the time, for their slice and for each other's
//! arrivals, park the rest, and other workers take it, while the source
//! runs dry under them. Every output row must arrive exactly once, and in
//! the order of the output's sequence numbers the rows must come out as an
//! uninterrupted run makes them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use stride_exec::operator::{Demand, Emit, Operator, Output, Resume, Sink};
use stride_exec::pipeline::Pipeline;
use stride_exec::source::{BlockSource, Blocks};
use stride_exec::{MorselSeq, Result};
use stride_sched::{MorselPolicy, Scheduler, SchedulerConfig, TaskSetWork};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]))
}

/// Each input id `i` becomes `i * fan + j` for `j` in `0..fan`, handed on
/// in chunks of `chunk` rows; resumable after any chunk.
#[derive(Debug)]
struct Fan {
    fan: i64,
    chunk: usize,
}

/// Where a `Fan` stopped: the input row and its next `j`.
struct FanAt(usize, i64);

impl Operator for Fan {
    fn process(&self, batch: RecordBatch, worker: usize, emit: &mut Emit<'_>) -> Result<()> {
        self.process_resumable(&batch, None, worker, emit).map(drop)
    }

    fn output(&self) -> Output {
        Output::Resumable
    }

    fn process_resumable(
        &self,
        batch: &RecordBatch,
        from: Option<Resume>,
        _worker: usize,
        emit: &mut Emit<'_>,
    ) -> Result<Option<Resume>> {
        let ids = batch.column(0).as_primitive::<Int64Type>();
        let FanAt(mut row, mut j) = match from {
            Some(r) => r.into_state()?,
            None => FanAt(0, 0),
        };
        let mut out = Vec::with_capacity(self.chunk);
        while row < ids.len() {
            out.push(ids.value(row) * self.fan + j);
            j += 1;
            if j == self.fan {
                row += 1;
                j = 0;
            }
            if out.len() == self.chunk || row == ids.len() {
                let b = RecordBatch::try_new(
                    schema(),
                    vec![Arc::new(Int64Array::from(std::mem::take(&mut out)))],
                )?;
                match emit(b)? {
                    Demand::More => {}
                    Demand::Enough => return Ok(None),
                    Demand::Suspend if row < ids.len() => {
                        return Ok(Some(Resume::new(FanAt(row, j))))
                    }
                    Demand::Suspend => return Ok(None),
                }
            }
        }
        Ok(None)
    }

    fn name(&self) -> String {
        format!("fan {}", self.fan)
    }
}

/// Keeps every batch with its sequence number.
#[derive(Debug, Default)]
struct Collect {
    got: Mutex<Vec<(MorselSeq, Vec<i64>)>>,
}

impl Sink for Collect {
    fn consume(&self, seq: MorselSeq, batch: RecordBatch, _worker: usize) -> Result<()> {
        let ids = batch.column(0).as_primitive::<Int64Type>();
        let ids = (0..ids.len()).map(|i| ids.value(i)).collect();
        self.got.lock().unwrap().push((seq, ids));
        Ok(())
    }

    fn name(&self) -> String {
        "collect".into()
    }
}

const ROWS: i64 = 600;
const FAN_1: i64 = 7;
const FAN_2: i64 = 5;

/// One query: ids 0..ROWS in blocks of 100, fanned out twice.
fn query() -> (Arc<Pipeline>, Arc<Collect>) {
    let batches: Vec<RecordBatch> = (0..ROWS / 100)
        .map(|b| {
            RecordBatch::try_new(
                schema(),
                vec![Arc::new(Int64Array::from_iter_values(
                    b * 100..(b + 1) * 100,
                ))],
            )
            .unwrap()
        })
        .collect();
    let source = Arc::new(BlockSource::new(Blocks::Batches {
        name: "ids".into(),
        batches: batches.into(),
    }));
    let sink = Arc::new(Collect::default());
    let operators: Vec<Arc<dyn Operator>> = vec![
        Arc::new(Fan {
            fan: FAN_1,
            chunk: 3,
        }),
        Arc::new(Fan {
            fan: FAN_2,
            chunk: 4,
        }),
    ];
    (
        Arc::new(Pipeline::new(0, source, operators, sink.clone())),
        sink,
    )
}

#[test]
fn every_row_arrives_once_and_in_order_under_constant_suspension() {
    let scheduler = Scheduler::new(SchedulerConfig {
        workers: 4,
        pin_workers: false,
        t_max: Duration::from_micros(20),
        morsels: MorselPolicy::Fixed(3),
        ..SchedulerConfig::default()
    });
    let expected: Vec<i64> = (0..ROWS * FAN_1 * FAN_2).collect();
    let mut suspended = 0;
    for round in 0..12 {
        // Three queries at once: each one's arrival is news for the
        // workers running the others (a preemption point inside a morsel).
        let queries: Vec<_> = (0..3).map(|_| query()).collect();
        let handles: Vec<_> = queries
            .iter()
            .map(|(p, _)| scheduler.submit(vec![p.clone() as Arc<dyn TaskSetWork>]))
            .collect();
        for (h, (_, sink)) in handles.into_iter().zip(&queries) {
            let stats = h.wait().unwrap();
            suspended += stats.suspended_morsels;
            let mut got = std::mem::take(&mut *sink.got.lock().unwrap());
            got.sort_by_key(|(seq, _)| *seq);
            let ids: Vec<i64> = got.into_iter().flat_map(|(_, ids)| ids).collect();
            assert!(
                ids == expected,
                "round {round}: {} rows, first difference at {:?}",
                ids.len(),
                ids.iter().zip(&expected).position(|(a, b)| a != b)
            );
        }
    }
    assert!(suspended > 100, "morsels were suspended {suspended} times");
}

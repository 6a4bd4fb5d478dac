//! The system view `stride.numa`: one row per memory node of the
//! scheduler's topology — its workers and cpus, how busy they were, and
//! where the morsels they ran lived (local, remote, stolen; seed 002 §6's
//! metrics). On synthetic and fake topologies (`topology` says which) the
//! nodes, and so every local/remote count, are logical.

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use stride_sched::{PlaceCounts, Scheduler, TopologyKind};
use stride_storage::Table;

use crate::error::Result;

/// One node's figures, summed over its workers.
#[derive(Debug, Default)]
struct NodeRow {
    workers: i64,
    busy_ms: f64,
    places: PlaceCounts,
    steal_tasks: i64,
}

/// `stride.numa` (see the module docs).
pub fn numa_table(scheduler: &Scheduler) -> Result<Table> {
    let topology = &scheduler.config().topology;
    let nodes = topology.nodes();
    let mut rows: Vec<NodeRow> = nodes.iter().map(|_| NodeRow::default()).collect();
    for w in scheduler.worker_stats() {
        let id = topology.worker_node(w.worker);
        let Some(i) = nodes.iter().position(|n| n.id == id) else {
            continue;
        };
        let row = &mut rows[i];
        row.workers += 1;
        row.busy_ms += w.busy.as_secs_f64() * 1e3;
        row.places.local += w.places.local;
        row.places.remote += w.places.remote;
        row.places.stolen += w.places.stolen;
        row.steal_tasks += w.steal_tasks as i64;
    }
    let total_busy: f64 = rows.iter().map(|r| r.busy_ms).sum();
    let kind = match topology.kind() {
        TopologyKind::Detected => "detected",
        TopologyKind::Synthetic => "synthetic",
        TopologyKind::Fake => "fake",
    };
    let n = rows.len();
    let f = |name: &str, t: DataType| Field::new(name, t, false);
    let schema = Arc::new(Schema::new(vec![
        f("node", DataType::Int64),
        f("topology", DataType::Utf8),
        f("oversubscribed", DataType::Boolean),
        f("cpus", DataType::Utf8),
        f("workers", DataType::Int64),
        f("busy_ms", DataType::Float64),
        // This node's share of all workers' busy time (0 when none was).
        f("busy_share", DataType::Float64),
        f("local_morsels", DataType::Int64),
        f("remote_morsels", DataType::Int64),
        f("stolen_morsels", DataType::Int64),
        f("steal_tasks", DataType::Int64),
    ]));
    let int = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as ArrayRef;
    let columns: Vec<ArrayRef> = vec![
        int(nodes.iter().map(|n| n.id as i64).collect()),
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(kind, n))),
        Arc::new(BooleanArray::from(vec![topology.oversubscribed(); n])),
        Arc::new(StringArray::from_iter_values(nodes.iter().map(|n| {
            n.cpus
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(",")
        }))),
        int(rows.iter().map(|r| r.workers).collect()),
        Arc::new(Float64Array::from_iter_values(
            rows.iter().map(|r| r.busy_ms),
        )),
        Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| {
            if total_busy > 0.0 {
                r.busy_ms / total_busy
            } else {
                0.0
            }
        }))),
        int(rows.iter().map(|r| r.places.local as i64).collect()),
        int(rows.iter().map(|r| r.places.remote as i64).collect()),
        int(rows.iter().map(|r| r.places.stolen as i64).collect()),
        int(rows.iter().map(|r| r.steal_tasks).collect()),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Table::new("numa".to_string(), schema, vec![batch])?)
}

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

/// `stride.placement`: one row per column of every table placed with
/// `ALTER TABLE … SET (placement = …)` — its placement, its pages per node
/// from the column's page-socket mapping (seed 002 §4.3), the mapping's
/// ranges and size — and whether the nodes are logical (a fake or
/// synthetic topology, or a node this machine lacks).
pub fn placement_table(catalog: &stride_storage::Catalog) -> Result<Table> {
    let f = |name: &str, t: DataType| Field::new(name, t, false);
    let schema = Arc::new(Schema::new(vec![
        f("schema", DataType::Utf8),
        f("table", DataType::Utf8),
        f("column", DataType::Utf8),
        f("placement", DataType::Utf8),
        f("logical", DataType::Boolean),
        // `node:pages` for every node holding pages of the column.
        f("pages_per_node", DataType::Utf8),
        f("pages", DataType::Int64),
        f("ranges", DataType::Int64),
        f("psm_bits", DataType::Int64),
    ]));
    let mut rows: Vec<PlacementRow> = Vec::new();
    catalog.read_state(|state| {
        for (schema, list) in state.schemas() {
            for (name, t) in list {
                let Some(placed) = t.placed_pages() else {
                    continue;
                };
                for (column, psm) in &placed.columns {
                    let per_node = psm
                        .summary()
                        .iter()
                        .enumerate()
                        .filter(|(_, &p)| p > 0)
                        .map(|(n, p)| format!("{n}:{p}"))
                        .collect::<Vec<_>>()
                        .join(" ");
                    rows.push(PlacementRow {
                        schema: schema.clone(),
                        table: name.clone(),
                        column: column.clone(),
                        placement: placed.placement.to_string(),
                        logical: placed.logical,
                        per_node,
                        pages: psm.total_pages() as i64,
                        ranges: psm.ranges().len() as i64,
                        bits: psm.size_bits() as i64,
                    });
                }
            }
        }
    });
    let text = |g: fn(&PlacementRow) -> &str| {
        Arc::new(StringArray::from_iter_values(rows.iter().map(g))) as ArrayRef
    };
    let int = |g: fn(&PlacementRow) -> i64| {
        Arc::new(Int64Array::from_iter_values(rows.iter().map(g))) as ArrayRef
    };
    let columns: Vec<ArrayRef> = vec![
        text(|r| &r.schema),
        text(|r| &r.table),
        text(|r| &r.column),
        text(|r| &r.placement),
        Arc::new(BooleanArray::from_iter(
            rows.iter().map(|r| Some(r.logical)),
        )),
        text(|r| &r.per_node),
        int(|r| r.pages),
        int(|r| r.ranges),
        int(|r| r.bits),
    ];
    let batch = RecordBatch::try_new(schema.clone(), columns)?;
    Ok(Table::new("placement".to_string(), schema, vec![batch])?)
}

/// One row of `stride.placement`.
struct PlacementRow {
    schema: String,
    table: String,
    column: String,
    placement: String,
    logical: bool,
    per_node: String,
    pages: i64,
    ranges: i64,
    bits: i64,
}

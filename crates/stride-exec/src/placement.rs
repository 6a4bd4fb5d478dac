//! Where a table's rows live and where its scans may run (seed 002 §4.2 and
//! §5, seed 000 §3.3).
//!
//! A [`Placement`] deals a table's rows to memory nodes as *extents*:
//! consecutive rows of one block on one node ([`extents`]). The placement
//! unit never changes the morsel size: a morsel is cut from one node's
//! extents by the scheduler's morsel sizing, as from any source. An
//! [`Affinity`] says how a scan's tasks treat that placement
//! ([`crate::placed_source`]): OS ignores it (one cursor over every row),
//! Target and Bound hand each worker its own node's extents first and
//! differ in what happens when they run dry (stealing or not), Auto picks
//! Bound for scans measured as memory-bound and Target otherwise.
//!
//! **Logical and physical.** The extents are the scheduler's view: which
//! node's workers a morsel is local to. On the machine's own topology a
//! table loaded by one thread sits, by first touch, on that thread's node;
//! on fake and synthetic topologies (more nodes than the machine) the
//! nodes are logical — the extents say where the rows *would* live, and
//! every local/remote count is logical too.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;
use std::sync::Arc;

use arrow::array::RecordBatch;

pub use stride_storage::placement::{parse_named, Placement, UnknownName, PAX_STRIPE_ROWS};

/// How a scan's tasks treat its table's placement (seed 002 §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Affinity {
    /// No affinity: one cursor over every row in order, whatever the node.
    Os,
    /// Soft: own node first, then steal.
    Target,
    /// Hard: only the rows' node's workers (nodes without workers excepted).
    Bound,
    /// Bound when the scan is measured memory-bound (bytes read per CPU
    /// second above [`ScanPlacement::memory_bound_bytes_per_sec`]), Target
    /// until then and otherwise (seed 002 §6.3, §7).
    #[default]
    Auto,
}

impl Affinity {
    pub const ALL: [Affinity; 4] = [
        Affinity::Os,
        Affinity::Target,
        Affinity::Bound,
        Affinity::Auto,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Affinity::Os => "os",
            Affinity::Target => "target",
            Affinity::Bound => "bound",
            Affinity::Auto => "auto",
        }
    }
}

impl fmt::Display for Affinity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Affinity {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, UnknownName> {
        parse_named(s, &Affinity::ALL, Affinity::name, "affinity")
    }
}

/// Default of [`ScanPlacement::memory_bound_bytes_per_sec`]: 2 GB per CPU
/// second. A filter over one or two columns reads well above it on the
/// development machine, TPC-H Q1's eight-column arithmetic well below.
pub const MEMORY_BOUND_BYTES_PER_SEC: f64 = 2e9;

/// How the scans of one query are placed and scheduled.
#[derive(Debug, Clone, PartialEq)]
pub struct ScanPlacement {
    pub placement: Placement,
    pub affinity: Affinity,
    /// The topology's node ids, in order (at least one).
    pub nodes: Arc<[usize]>,
    /// Auto's threshold: bytes a scan's tasks read per CPU second above
    /// which it is memory-bound (and bound to its nodes).
    pub memory_bound_bytes_per_sec: f64,
}

impl Default for ScanPlacement {
    fn default() -> Self {
        ScanPlacement {
            placement: Placement::default(),
            affinity: Affinity::default(),
            nodes: Arc::from([0usize]),
            memory_bound_bytes_per_sec: MEMORY_BOUND_BYTES_PER_SEC,
        }
    }
}

/// Consecutive rows of one block on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    pub block: usize,
    /// Rows of the block.
    pub rows: Range<usize>,
    /// The table row of `rows.start` (the morsels' sequence number).
    pub first_row: usize,
    /// The node the rows live on; `None`: spread over every node
    /// (interleaved pages).
    pub node: Option<usize>,
}

impl Extent {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// The position (in the node list) of the node RR puts table `table` on,
/// out of `nodes`: FNV-1a of its name, so stable across restarts.
pub fn table_node(table: &str, nodes: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in table.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % nodes as u64) as usize
}

/// Deals the rows of `blocks` (of table `table`) to `nodes` as `placement`
/// says, in row order. Every row is in exactly one extent; empty blocks
/// give none.
pub fn extents(
    table: &str,
    blocks: &[RecordBatch],
    placement: Placement,
    nodes: &[usize],
) -> Vec<Extent> {
    let n = nodes.len().max(1);
    let node_at = |i: usize| nodes.get(i % n).copied().unwrap_or(0);
    let total: usize = blocks.iter().map(RecordBatch::num_rows).sum();
    // The node of table row `row`, and the first row after it where the
    // node may change.
    let place = |row: usize| -> (Option<usize>, usize) {
        match placement {
            Placement::FirstTouch => (Some(node_at(0)), usize::MAX),
            Placement::Interleave if n > 1 => (None, usize::MAX),
            Placement::Interleave => (Some(node_at(0)), usize::MAX),
            Placement::RoundRobin => (Some(node_at(table_node(table, n))), usize::MAX),
            Placement::Partitioned => {
                // Part i: rows [i·total/n, (i+1)·total/n).
                let part = (row * n / total.max(1)).min(n - 1);
                let mut end = (part + 1) * total / n;
                if end <= row {
                    end = row + 1;
                }
                (Some(node_at(part)), end)
            }
            Placement::Pax => {
                let stripe = row / PAX_STRIPE_ROWS;
                (Some(node_at(stripe)), (stripe + 1) * PAX_STRIPE_ROWS)
            }
        }
    };
    let mut out = Vec::new();
    let mut first_row = 0;
    for (block, batch) in blocks.iter().enumerate() {
        let len = batch.num_rows();
        let mut at = 0;
        while at < len {
            let (node, next) = place(first_row + at);
            let end = next.saturating_sub(first_row).clamp(at + 1, len);
            out.push(Extent {
                block,
                rows: at..end,
                first_row: first_row + at,
                node,
            });
            at = end;
        }
        first_row += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    fn blocks(sizes: &[usize]) -> Vec<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let mut next = 0i64;
        sizes
            .iter()
            .map(|&n| {
                let values: Vec<i64> = (next..next + n as i64).collect();
                next += n as i64;
                RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(values))])
                    .unwrap()
            })
            .collect()
    }

    /// Every row in exactly one extent, in row order.
    fn covers(extents: &[Extent], sizes: &[usize]) {
        let mut row = 0;
        for e in extents {
            assert_eq!(e.first_row, row);
            assert!(!e.is_empty());
            assert!(e.rows.end <= sizes[e.block]);
            row += e.len();
        }
        assert_eq!(row, sizes.iter().sum::<usize>());
    }

    #[test]
    fn every_placement_covers_every_row_once() {
        let sizes = [0, 70_000, 5, 33_000, 1];
        let b = blocks(&sizes);
        for p in Placement::ALL {
            for nodes in [vec![0], vec![0, 1], vec![0, 1, 2, 3], vec![0, 2, 5]] {
                covers(&extents("t", &b, p, &nodes), &sizes);
            }
        }
    }

    #[test]
    fn partitioned_gives_each_node_a_contiguous_equal_part() {
        let sizes = [60_000, 40_000];
        let e = extents("t", &blocks(&sizes), Placement::Partitioned, &[0, 1, 2, 3]);
        let mut per_node = [0usize; 4];
        let mut last = 0;
        for x in &e {
            let node = x.node.unwrap();
            assert!(node >= last, "parts in node order");
            last = node;
            per_node[node] += x.len();
        }
        assert_eq!(per_node, [25_000; 4]);
    }

    #[test]
    fn pax_stripes_rotate_over_the_nodes_and_rr_keeps_a_table_whole() {
        let e = extents(
            "t",
            &blocks(&[4 * PAX_STRIPE_ROWS]),
            Placement::Pax,
            &[0, 1],
        );
        let nodes: Vec<_> = e.iter().map(|x| x.node.unwrap()).collect();
        assert_eq!(nodes, [0, 1, 0, 1]);
        let rr = extents(
            "lineitem",
            &blocks(&[10, 20]),
            Placement::RoundRobin,
            &[0, 1, 2],
        );
        assert!(rr.windows(2).all(|w| w[0].node == w[1].node));
        let none = extents("t", &blocks(&[10]), Placement::Interleave, &[0, 1]);
        assert_eq!(none[0].node, None);
    }

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for p in Placement::ALL {
            assert_eq!(p.name().parse::<Placement>(), Ok(p));
        }
        for a in Affinity::ALL {
            assert_eq!(a.name().parse::<Affinity>(), Ok(a));
        }
        assert!("numa".parse::<Placement>().is_err());
        assert!("hard".parse::<Affinity>().is_err());
    }
}

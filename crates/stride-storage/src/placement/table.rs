//! A table's placement: how its rows are dealt to memory nodes (seed 002
//! §4.2, seed 000 §3.3), a property of the table
//! (`ALTER TABLE … SET (placement = …)`, else the session's default), and
//! where its placed columns' pages are ([`PlacedTable`]).

use std::fmt;
use std::str::FromStr;

use super::psm::PageSocketMapping;

/// Rows of a PAX stripe: about 2 MiB of a table of sixteen 8-byte columns
/// (seed 000 §3.3 stripes PAX blocks over nodes in 2 MiB pages).
pub const PAX_STRIPE_ROWS: usize = 16 * 1024;

/// How a table's rows are dealt to memory nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Placement {
    /// Where the loading thread touched them first: one node, the first of
    /// the topology (the loader is not a worker).
    #[default]
    FirstTouch,
    /// Pages interleaved over every node: each morsel spans all nodes, so
    /// no node is local to it (its morsels count as remote).
    Interleave,
    /// Seed 002's RR: the whole table on one node, tables dealt to nodes by
    /// name.
    RoundRobin,
    /// Seed 002's PP: the table range-partitioned into one part per node,
    /// part `i` on node `i`.
    Partitioned,
    /// Seed 000's PAX striping: stripes of [`PAX_STRIPE_ROWS`] rows dealt
    /// round-robin over the nodes.
    Pax,
}

impl Placement {
    pub const ALL: [Placement; 5] = [
        Placement::FirstTouch,
        Placement::Interleave,
        Placement::RoundRobin,
        Placement::Partitioned,
        Placement::Pax,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Placement::FirstTouch => "first-touch",
            Placement::Interleave => "interleave",
            Placement::RoundRobin => "rr",
            Placement::Partitioned => "pp",
            Placement::Pax => "pax",
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A placement or affinity name that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} \"{name}\" (expected one of: {expected})")]
pub struct UnknownName {
    pub what: &'static str,
    pub name: String,
    pub expected: String,
}

/// The one of `all` whose name is `s` (case-insensitive).
pub fn parse_named<T: Copy>(
    s: &str,
    all: &[T],
    name: fn(T) -> &'static str,
    what: &'static str,
) -> Result<T, UnknownName> {
    let s = s.trim().to_ascii_lowercase();
    all.iter()
        .copied()
        .find(|&v| name(v) == s)
        .ok_or_else(|| UnknownName {
            what,
            name: s,
            expected: all.iter().map(|&v| name(v)).collect::<Vec<_>>().join(", "),
        })
}

impl FromStr for Placement {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, UnknownName> {
        parse_named(s, &Placement::ALL, Placement::name, "placement")
    }
}

/// Where a placed table's column pages are: one page-socket mapping per
/// column, over all its blocks, as placing them found (logical where the
/// kernel refused a node: [`Self::logical`]).
#[derive(Debug, Clone)]
pub struct PlacedTable {
    pub placement: Placement,
    /// (column name, its pages).
    pub columns: Vec<(String, PageSocketMapping)>,
    /// Some request was recorded logically instead of by the kernel.
    pub logical: bool,
}

//! Placed memory: where the pages of table data live, and the means to move
//! them (issue 20, items 2 and 3; seed 002 §2 and §4.3).
//!
//! # Bird's-eye view
//!
//! * [`nodes`] — [`NodeId`] and [`NodeSet`]: memory nodes (seed 002's
//!   sockets), at most 256 of them.
//! * [`backend`] — [`NodeBackend`]: query the node of pages, move pages,
//!   bind a fresh mapping. [`KernelBackend`] is Linux (`move_pages`,
//!   `mbind`); [`FakeBackend`] is a logical record of a node per page;
//!   [`PlacedMemory`] is the front the engine uses: the kernel, and the
//!   logical record for each request the kernel refuses.
//! * [`memory`] — [`MemPolicy`] (first touch, interleave, on a node,
//!   preferred node); page-aligned mappings placed per a placement
//!   ([`PlacedMemory::map`]); record batches copied once into placed memory
//!   and rebuilt over it ([`PlacedMemory::place_batch`]).
//! * [`psm`] — the [`PageSocketMapping`] of seed 002 §4.3: sorted page
//!   ranges → node, interleave patterns, a per-node summary.
//! * [`table`] — a table's [`Placement`] (first touch, interleave, RR, PP,
//!   PAX stripes) and, once placed, its columns' pages ([`PlacedTable`]).
//!
//! # Real and logical
//!
//! On a NUMA machine everything is real: `mbind` sets where pages are
//! allocated when first touched, `move_pages` finds and moves them.
//!
//! On a machine with one node (the development machine), a placement on
//! node 0 — first touch, node 0, interleave over `{0}` — is still real.
//! A placement naming a node the process cannot allocate on is refused:
//! [`KernelBackend`] checks the nodes against `get_mempolicy`'s allowed
//! nodes first (the kernel refuses a lone missing node — `mbind` gives
//! `EINVAL`, `move_pages` `ENODEV` — but silently drops a missing node from
//! a set, so that interleaving over {0, 1} would quietly become node 0).
//! [`PlacedMemory`] then records the placement logically: the memory is
//! mapped and touched on a real node, and queries report the logical
//! node. The same happens where a sandbox forbids the calls (`EPERM`,
//! `ENOSYS`). Every fallback is counted and the
//! first is kept with its reason ([`PlacedMemory::fallbacks`]), so reports
//! can say which placements were logical. [`Backing::Fake`] makes every
//! placement logical: fake topologies with more nodes than the machine.

pub mod backend;
pub mod error;
pub mod memory;
pub mod nodes;
pub mod psm;
pub mod table;

pub use backend::{
    Backing, FakeBackend, Fallback, FallbackReport, KernelBackend, MemoryUsage, NodeBackend,
    PlacedMemory, PlacedMemoryConfig,
};
pub use error::PlacementError;
pub use memory::{Mapping, MemPolicy, PlacedBatch, PlacedColumn};
pub use nodes::{NodeId, NodeSet, MAX_NODES};
pub use psm::{AddReport, PageRange, PageSocketMapping};
pub use table::{parse_named, PlacedTable, Placement, UnknownName, PAX_STRIPE_ROWS};

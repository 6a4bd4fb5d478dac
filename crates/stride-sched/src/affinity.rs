//! Node affinities: where a task set's tasks may run (seed 002 §5).
//!
//! A task set whose morsels live on memory nodes (a table scan over placed
//! blocks) hands each worker the morsels of the worker's own node first
//! (per-node cursors in the executor's sources). When a worker's node has
//! no morsel left and other nodes still have some, the task returns
//! [`crate::TaskOutcome::NodeDry`] with the task set's affinity:
//!
//! * [`NodeAffinity::Soft`] (seed 002's *Target*): the worker may still
//!   take the rest, but only as a thief — the slot drops to the worker's
//!   *steal tier* ([`Reach::Steal`]), chosen only when no slot of the tier
//!   above (local work, or work without affinity) is runnable; the tasks
//!   it then runs see [`crate::TaskContext::stealing`] and take other
//!   nodes' morsels.
//! * [`NodeAffinity::Hard`] (*Bound*): only workers of the morsel's node
//!   take it; the worker *parks* the slot ([`Reach::Parked`]) and does not
//!   choose it again until the slot holds another entry.
//!
//! Both are thread-local: each worker keeps its own [`Reach`] per slot in
//! its decision core, reset to [`Reach::Local`] whenever it learns a new
//! entry for the slot. Nothing in the shared protocol (slots, masks, pins,
//! finalization counters) changes, so the proof sketch of the lock-free
//! core holds as it is; what needs an argument is that no morsel is
//! stranded (see the crate README, "Node affinities"):
//!
//! 1. A worker parks or demotes a slot only after its own node's cursor was
//!    found dry, and a cursor never refills: the worker loses nothing its
//!    node could still take.
//! 2. A task reports `NodeDry` only while another node still holds
//!    morsels; the task that takes the last morsel (or finds every node
//!    dry) reports `Exhausted`, which starts the normal coordination. A
//!    source never leaves a hard part to a node without workers: such a
//!    node's morsels are taken by any worker ([`crate::TaskContext::node_has_workers`]).
//! 3. A worker that reports `NodeDry` wakes every sleeping worker, so the
//!    workers of the nodes that still hold morsels learn of the task set
//!    even if its installation woke fewer of them.
//!
//! Every morsel is counted by where it ran ([`MorselPlace`]): per query in
//! [`crate::QueryStats`] and per worker in [`crate::WorkerStats`]. On fake
//! and synthetic topologies the places are logical (the node a block was
//! assigned to, the node a worker plays).

/// How strongly a task set's morsels are tied to their memory nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeAffinity {
    /// Seed 002's *Target*: other nodes' workers may steal what is left once
    /// their own node's part is dry.
    Soft,
    /// Seed 002's *Bound*: only the morsel's node's workers take it.
    Hard,
}

/// Where a processed morsel's data lived, relative to the worker that ran it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MorselPlace {
    /// On the worker's node.
    Local,
    /// On another node, taken without an affinity (a single cursor over
    /// every node's blocks: seed 002's *OS* strategy).
    Remote,
    /// On another node, taken by a stealing task (soft affinity, the
    /// worker's own node dry).
    Stolen,
}

/// Morsels of one task by place (plain counters: a task runs on one worker).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PlaceCounts {
    pub local: u64,
    pub remote: u64,
    pub stolen: u64,
}

impl PlaceCounts {
    pub(crate) fn add(&mut self, place: MorselPlace) {
        match place {
            MorselPlace::Local => self.local += 1,
            MorselPlace::Remote => self.remote += 1,
            MorselPlace::Stolen => self.stolen += 1,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.local == 0 && self.remote == 0 && self.stolen == 0
    }
}

/// What a worker may take of one slot's task set, as it last found out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Reach {
    /// Its node's morsels, or any (no affinity): the first tier.
    #[default]
    Local,
    /// Its node's part is dry, the rest may be stolen: the second tier.
    Steal,
    /// Its node's part is dry and the rest is bound elsewhere: never chosen.
    Parked,
    /// Its consumer is behind ([`crate::pause`]): never chosen until a
    /// resume brings the slot's known entry back.
    Paused,
}

impl Reach {
    /// After a task found the worker's node dry.
    pub(crate) fn after(affinity: NodeAffinity) -> Reach {
        match affinity {
            NodeAffinity::Soft => Reach::Steal,
            NodeAffinity::Hard => Reach::Parked,
        }
    }

    /// The tier a decision compares first (smaller first); `None`: not
    /// choosable.
    pub(crate) fn tier(self) -> Option<u8> {
        match self {
            Reach::Local => Some(0),
            Reach::Steal => Some(1),
            Reach::Parked | Reach::Paused => None,
        }
    }
}

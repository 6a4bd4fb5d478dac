//! Memory node identifiers and sets of them.
//!
//! A node is what seed 002 calls a socket: a NUMA memory node. Stride
//! follows the seed's bound of 256 nodes, so a node fits in 8 bits and a set
//! of nodes (an interleave pattern) in 256 bits.

use std::fmt;

/// A memory node (NUMA node, "socket" in seed 002), `0..MAX_NODES`.
pub type NodeId = u8;

/// The most nodes a placement or a [`NodeSet`] can name.
pub const MAX_NODES: usize = 256;

/// A set of memory nodes: a 256-bit mask, iterated in ascending order.
///
/// As an interleave pattern it lists the participating nodes; pages cycle
/// over them in ascending order, wrapping around, which is the order in
/// which Linux's `MPOL_INTERLEAVE` deals pages out.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NodeSet([u64; 4]);

impl NodeSet {
    /// The empty set.
    pub const fn new() -> Self {
        NodeSet([0; 4])
    }

    /// The set of `nodes`.
    pub fn of(nodes: impl IntoIterator<Item = NodeId>) -> Self {
        let mut set = NodeSet::new();
        for n in nodes {
            set.insert(n);
        }
        set
    }

    /// Nodes `0..count` (`count` is capped at [`MAX_NODES`]).
    pub fn first(count: usize) -> Self {
        NodeSet::of((0..count.min(MAX_NODES)).map(|n| n as NodeId))
    }

    pub fn insert(&mut self, node: NodeId) {
        self.0[usize::from(node) / 64] |= 1 << (node % 64);
    }

    pub fn contains(&self, node: NodeId) -> bool {
        self.0[usize::from(node) / 64] & (1 << (node % 64)) != 0
    }

    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// Whether every member of `self` is in `other`.
    pub fn is_subset(&self, other: &NodeSet) -> bool {
        self.0.iter().zip(&other.0).all(|(a, b)| a & !b == 0)
    }

    /// The nodes in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..MAX_NODES)
            .map(|n| n as NodeId)
            .filter(|&n| self.contains(n))
    }

    /// How many members are smaller than `node` (its position in the cycle
    /// when it is a member).
    pub fn rank(&self, node: NodeId) -> usize {
        let word = usize::from(node) / 64;
        let below_in_word = self.0[word] & ((1u64 << (node % 64)) - 1);
        let below: u32 = self.0[..word].iter().map(|w| w.count_ones()).sum();
        (below + below_in_word.count_ones()) as usize
    }

    /// The member at position `index` in ascending order.
    pub fn nth(&self, mut index: usize) -> Option<NodeId> {
        for (w, &word) in self.0.iter().enumerate() {
            let ones = word.count_ones() as usize;
            if index < ones {
                let mut bits = word;
                for _ in 0..index {
                    bits &= bits - 1;
                }
                return Some((w * 64 + bits.trailing_zeros() as usize) as NodeId);
            }
            index -= ones;
        }
        None
    }

    /// The node `steps` places after `start` in the cycle (`start` must be
    /// a member).
    pub fn step(&self, start: NodeId, steps: u64) -> NodeId {
        let len = self.len() as u64;
        debug_assert!(self.contains(start) && len > 0);
        let pos = (self.rank(start) as u64 + steps % len) % len;
        self.nth(pos as usize).unwrap_or(start)
    }

    /// The mask as 64-bit words, node 0 in bit 0 of word 0 (the layout of
    /// a Linux `nodemask`).
    pub fn words(&self) -> &[u64; 4] {
        &self.0
    }
}

impl fmt::Debug for NodeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<NodeId> for NodeSet {
    fn from_iter<I: IntoIterator<Item = NodeId>>(iter: I) -> Self {
        NodeSet::of(iter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_nth_and_step_agree() {
        let set = NodeSet::of([3, 64, 65, 200, 255]);
        assert_eq!(set.len(), 5);
        let members: Vec<NodeId> = set.iter().collect();
        assert_eq!(members, vec![3, 64, 65, 200, 255]);
        for (i, &n) in members.iter().enumerate() {
            assert_eq!(set.rank(n), i);
            assert_eq!(set.nth(i), Some(n));
        }
        assert_eq!(set.nth(5), None);
        assert_eq!(set.step(200, 0), 200);
        assert_eq!(set.step(200, 2), 3);
        assert_eq!(set.step(3, 11), 64);
        assert_eq!(format!("{set:?}"), "{3, 64, 65, 200, 255}");
        assert!(NodeSet::of([64, 255]).is_subset(&set));
        assert!(!NodeSet::of([3, 4]).is_subset(&set));
    }
}

//! Open addressing for one-column integer group keys.
//!
//! A group table over integer keys spends its time in cache misses: with
//! hashbrown and the keys in a vector of their own, a lookup touches the
//! control bytes, the bucket and the group's key, three lines anywhere in
//! memory, and each row waits for the last row's. Here a slot holds the key
//! beside its group, so a lookup touches one line (linear probing stays in
//! it or the next), and [`IntMap::touch`] lets the caller prefetch the slots
//! of a group of rows before it walks them, so their misses overlap.
//!
//! ```text
//!   slot:   key: i64 | group + 1: u32      (group + 1 = 0: empty)
//!   lookup: pos = hash & (slots - 1); walk pos, pos + 1, … to the key or an empty slot
//!   grow:   at `grow_at` entries, double the slots and re-place every entry
//! ```
//!
//! NULL keys never enter the map (the group table keeps their group apart).

use crate::hash::{hash_u64, prefetch};

/// Most entries per slot before a map grows: 5/8 of its slots.
const MAX_FILL_NUM: usize = 5;
const MAX_FILL_DEN: usize = 8;

/// Fewest slots of a map that holds anything.
const MIN_SLOTS: usize = 16;

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    key: i64,
    /// 1 + the key's group; 0 marks an empty slot.
    group: u32,
}

/// A map from integer keys to group indices.
#[derive(Debug, Default)]
pub(super) struct IntMap {
    slots: Vec<Slot>,
    len: usize,
    /// Entries at which the next insert grows the map.
    grow_at: usize,
    /// Where, between half of the capacity and all of it, this map grows
    /// (see `grow_staggered` in the aggregate): `Some((s, of))` for
    /// sub-table `s` of `of`, `None` to grow when full.
    stagger: Option<(usize, usize)>,
}

/// The hash of a non-NULL integer group key.
#[inline(always)]
pub(super) fn hash_key(key: i64) -> u64 {
    hash_u64(key as u64)
}

impl IntMap {
    /// An empty map; `stagger` as in [`IntMap::stagger`].
    pub(super) fn new(stagger: Option<(usize, usize)>) -> Self {
        IntMap {
            stagger,
            ..IntMap::default()
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Entries the map holds before it must grow.
    pub(super) fn capacity(&self) -> usize {
        self.slots.len() * MAX_FILL_NUM / MAX_FILL_DEN
    }

    pub(super) fn allocation_size(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    /// Prefetches the first slot `hash` probes, so that a later lookup
    /// finds it in cache (a hint: a growth in between only costs the miss).
    #[inline(always)]
    pub(super) fn touch(&self, hash: u64) {
        if !self.slots.is_empty() {
            let pos = hash as usize & (self.slots.len() - 1);
            prefetch(&self.slots[pos]);
        }
    }

    /// The group of `key` (whose hash is `hash`), or the group `new`
    /// returns, entered for it, when the key is not in the map.
    #[inline(always)]
    pub(super) fn find_or_insert(&mut self, hash: u64, key: i64, new: impl FnOnce() -> u32) -> u32 {
        if self.len >= self.grow_at {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut pos = hash as usize & mask;
        loop {
            let slot = self.slots[pos];
            if slot.group == 0 {
                let group = new();
                self.slots[pos] = Slot {
                    key,
                    group: group + 1,
                };
                self.len += 1;
                return group;
            }
            if slot.key == key {
                return slot.group - 1;
            }
            pos = (pos + 1) & mask;
        }
    }

    /// Doubles the slots (or allocates the first) and re-places every entry.
    fn grow(&mut self) {
        let slots = (self.slots.len() * 2).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); slots]);
        let mask = slots - 1;
        for slot in old.into_iter().filter(|s| s.group != 0) {
            let mut pos = hash_key(slot.key) as usize & mask;
            while self.slots[pos].group != 0 {
                pos = (pos + 1) & mask;
            }
            self.slots[pos] = slot;
        }
        let cap = self.capacity();
        self.grow_at = match self.stagger {
            Some((s, of)) if cap >= super::STAGGER_MIN_CAPACITY => super::stagger_fill(cap, s, of),
            _ => cap,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_groups_across_growths_and_collisions() {
        let mut map = IntMap::new(None);
        let mut next = 0u32;
        // Keys that share their low bits collide in small maps.
        let keys: Vec<i64> = (0..5000).map(|k| (k % 2500) << 20 | (k / 2500)).collect();
        let mut first = Vec::new();
        for &k in &keys {
            first.push(map.find_or_insert(hash_key(k), k, || {
                next += 1;
                next - 1
            }));
        }
        assert_eq!(map.len(), 5000);
        assert_eq!(first, (0..5000).collect::<Vec<u32>>());
        for (g, &k) in keys.iter().enumerate() {
            assert_eq!(
                map.find_or_insert(hash_key(k), k, || panic!("key {k} lost")),
                g as u32
            );
        }
        assert!(map.len() <= map.capacity());
    }

    #[test]
    fn a_staggered_map_grows_between_half_and_all_of_its_capacity() {
        for s in [0, 31, 63] {
            let mut map = IntMap::new(Some((s, 64)));
            let mut grew_at = Vec::new();
            let mut slots = 0;
            for k in 0..100_000i64 {
                let len = map.len();
                map.find_or_insert(hash_key(k), k, || len as u32);
                if map.slots.len() != slots {
                    if slots * MAX_FILL_NUM / MAX_FILL_DEN >= super::super::STAGGER_MIN_CAPACITY {
                        grew_at.push((len, slots * MAX_FILL_NUM / MAX_FILL_DEN));
                    }
                    slots = map.slots.len();
                }
            }
            assert!(!grew_at.is_empty());
            for (len, cap) in grew_at {
                assert_eq!(len, cap * (64 + s + 1) / 128, "sub-table {s}");
            }
        }
    }
}

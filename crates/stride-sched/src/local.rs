//! A worker's thread-local scheduling state (seed 001 §2.3, Figure 3).
//!
//! Everything a scheduling decision reads lives here and is touched by the
//! owning worker only: the **activity mask** (one bit per slot whose task
//! set the worker believes runnable), per slot the group's [`StrideState`]
//! (pass, priority — the arithmetic is [`crate::policy`]'s), and the worker's
//! own **virtual time** (`max` of its previous value and the smallest pass
//! among its active slots, taken whenever a group enters or a task set is
//! activated: the pass a newcomer starts with).
//!
//! The local view may lag behind the global slots; it is corrected by:
//!
//! * the update masks: a pulled bit makes the worker *visit* the slot (pin,
//!   read, [`LocalState::learn`] the entry, unpin), which enters a new group
//!   (event 2) or activates the next task set (event 3);
//! * picking: a slot found empty or tagged is deactivated (event 1); a slot
//!   found holding an entry other than the one the worker knows (a group or
//!   task set whose mask bit is not pulled yet) is learned first.
//!
//! Groups are identified by their id (unique per scheduler), task sets by
//! their index; nothing here dereferences an entry — the worker passes
//! `learn` an entry it is pinned to.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use crate::group::TaskSetEntry;
use crate::masks::words_for;
use crate::policy::{GroupFacts, Policy, RankContext, Rng, StrideState};

/// What the worker knows about one slot.
#[derive(Debug)]
struct LocalSlot {
    /// Id of the group last seen in the slot; 0: none (ids start at 1).
    group: u64,
    /// Index of the task set last seen.
    task_set: usize,
    stride: StrideState,
    /// The group's cancel flag, kept while the slot is active so that a
    /// cancelled group is served (and so finalized) promptly.
    cancelled: Option<Arc<AtomicBool>>,
}

/// One worker's scheduling state.
#[derive(Debug)]
pub(crate) struct LocalState {
    slots: Vec<LocalSlot>,
    /// Activity mask: bit `k` set iff slot `k` is locally active.
    active: Vec<u64>,
    active_count: usize,
    virtual_time: f64,
    pub(crate) policy: Policy,
    /// The policy epoch `policy` was read at.
    pub(crate) policy_epoch: u64,
    rng: Rng,
    workers: usize,
}

impl LocalState {
    pub(crate) fn new(slots: usize, workers: usize, policy: Policy, worker: usize) -> Self {
        LocalState {
            slots: (0..slots)
                .map(|_| LocalSlot {
                    group: 0,
                    task_set: 0,
                    stride: StrideState::enter(&policy, &GroupFacts::default(), 0, 0.0),
                    cancelled: None,
                })
                .collect(),
            active: vec![0; words_for(slots)],
            active_count: 0,
            virtual_time: 0.0,
            policy,
            policy_epoch: 0,
            rng: Rng::new(0x5EED ^ worker as u64),
            workers,
        }
    }

    fn activate(&mut self, k: usize) {
        let (w, b) = (k / 64, 1u64 << (k % 64));
        if self.active[w] & b == 0 {
            self.active[w] |= b;
            self.active_count += 1;
        }
    }

    pub(crate) fn is_active(&self, k: usize) -> bool {
        self.active[k / 64] & (1u64 << (k % 64)) != 0
    }

    /// Event 1 seen: the slot's task set is exhausted.
    pub(crate) fn deactivate(&mut self, k: usize) {
        let (w, b) = (k / 64, 1u64 << (k % 64));
        if self.active[w] & b != 0 {
            self.active[w] &= !b;
            self.active_count -= 1;
        }
        self.slots[k].cancelled = None;
    }

    /// The slot is empty: its group left.
    pub(crate) fn forget(&mut self, k: usize) {
        self.deactivate(k);
        self.slots[k].group = 0;
    }

    /// Whether the worker's view of slot `k` is `entry`.
    pub(crate) fn knows(&self, k: usize, entry: &TaskSetEntry) -> bool {
        let s = &self.slots[k];
        s.group == entry.group.id && s.task_set == entry.task_set && self.is_active(k)
    }

    /// The worker's virtual time: never decreases; at least the smallest pass
    /// among its active slots.
    fn now_pass(&mut self) -> f64 {
        let mut min: Option<f64> = None;
        self.for_each_active(|k, this| {
            let p = this.slots[k].stride.pass;
            min = Some(min.map_or(p, |m: f64| m.min(p)));
        });
        if let Some(m) = min {
            self.virtual_time = self.virtual_time.max(m);
        }
        self.virtual_time
    }

    fn for_each_active(&self, mut f: impl FnMut(usize, &Self)) {
        for (i, &word) in self.active.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let k = i * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                f(k, self);
            }
        }
    }

    /// Takes `entry`, found in slot `k` while pinned, into the local view:
    /// a group new to the slot enters (event 2), a next task set of the
    /// known group is activated (event 3); either way the slot is active.
    pub(crate) fn learn(&mut self, k: usize, entry: &TaskSetEntry) {
        let group = &entry.group;
        if self.slots[k].group != group.id {
            self.deactivate(k);
            let now = self.now_pass();
            let stride = StrideState::enter(&self.policy, &group.facts, entry.arrival, now);
            let s = &mut self.slots[k];
            s.group = group.id;
            s.task_set = entry.task_set;
            s.stride = stride;
        } else if self.slots[k].task_set != entry.task_set {
            self.deactivate(k);
            let now = self.now_pass();
            let s = &mut self.slots[k];
            s.task_set = entry.task_set;
            s.stride
                .task_set_activated(&self.policy, entry.task_set, now);
        }
        self.slots[k].cancelled = Some(group.cancelled.clone());
        self.activate(k);
    }

    /// The policy's choice among the active slots: the smallest rank, ties to
    /// the earlier arrival; a slot whose group was cancelled comes first.
    pub(crate) fn choose(&mut self) -> Option<usize> {
        let mut ctx = RankContext {
            active_groups: self.active_count,
            workers: self.workers,
            rng: &mut self.rng,
        };
        let mut best: Option<(f64, u64, usize)> = None;
        for (i, &word) in self.active.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let k = i * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let s = &self.slots[k];
                if s.cancelled
                    .as_ref()
                    .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
                {
                    return Some(k);
                }
                let rank = s.stride.rank(&self.policy, &mut ctx);
                let arrival = s.stride.arrival;
                match best {
                    Some((r, a, _)) if (rank, arrival) >= (r, a) => {}
                    _ => best = Some((rank, arrival, k)),
                }
            }
        }
        best.map(|(_, _, k)| k)
    }

    /// Charges a task of slot `k` that ran for `ran`.
    pub(crate) fn charge(&mut self, k: usize, ran: Duration, t_max: Duration) {
        self.slots[k].stride.charge(&self.policy, ran, t_max);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::group::ResourceGroup;

    fn entry(id: u64, task_set: usize, arrival: u64) -> TaskSetEntry {
        let group = Arc::new(ResourceGroup::new(id, Vec::new(), GroupFacts::default()));
        TaskSetEntry::new(group, task_set, 0, arrival)
    }

    #[test]
    fn fifo_chooses_the_earliest_arrival_and_skips_inactive_slots() {
        let mut l = LocalState::new(130, 1, Policy::Fifo, 0);
        assert_eq!(l.choose(), None);
        l.learn(129, &entry(1, 0, 0));
        l.learn(3, &entry(2, 0, 1));
        assert_eq!(l.choose(), Some(129));
        l.deactivate(129);
        assert_eq!(l.choose(), Some(3));
        l.forget(3);
        assert_eq!(l.choose(), None);
    }

    #[test]
    fn fair_newcomer_enters_at_the_smallest_pass_and_keeps_its_state_on_return() {
        let t = Duration::from_millis(2);
        let mut l = LocalState::new(4, 1, Policy::Fair, 0);
        let old = entry(1, 0, 0);
        l.learn(0, &old);
        for _ in 0..10 {
            l.charge(0, t, t);
        }
        l.learn(1, &entry(2, 0, 1));
        assert_eq!(l.slots[1].stride.pass, l.slots[0].stride.pass);
        // Tie: the earlier arrival first; after one charge the newcomer.
        assert_eq!(l.choose(), Some(0));
        l.charge(0, t, t);
        assert_eq!(l.choose(), Some(1));
        // Event 3 for slot 0: same group, next task set; priority kept.
        let pass = l.slots[0].stride.pass;
        let next = TaskSetEntry::new(old.group.clone(), 1, 0, 0);
        l.deactivate(0);
        assert!(!l.knows(0, &next));
        l.learn(0, &next);
        assert!(l.knows(0, &next));
        assert!(l.slots[0].stride.pass >= pass);
    }
}

//! Admission: the wait queue in front of the slot array (seed 001 §2.3).
//!
//! At most `slots` resource groups are bound to slots; groups beyond that
//! wait here in arrival order until a slot frees. The seed does not make the
//! wait queue lock-free and neither do we: it is a `Mutex` around the queue
//! *and* the list of free slots, touched once when a group arrives and once
//! when a group leaves its slot — never on a scheduling decision.
//!
//! **No group is lost.** Both halves of the decision live under the one
//! mutex, which maintains the invariant *"the queue is empty or no slot is
//! free"*: [`Admission::admit`] queues a group only when no slot is free, and
//! [`Admission::release`] frees a slot only when the queue is empty —
//! otherwise it hands the slot straight to the oldest waiting group. So a
//! waiting group is admitted by the release of the next slot, and no slot
//! stays free while a group waits. A slot taken from here is owned by the
//! taker until it installs a task set into it ([`crate::slots`]); admission
//! counts it as occupied from the moment it is taken.
//!
//! Arrival numbers (the `arrival` of [`crate::policy::StrideState`], by which
//! FIFO ranks) are handed out here, at the moment a group gets a slot; since
//! the queue is FIFO and never bypassed, that is submission order.

use std::collections::VecDeque;

use crate::sync::{lock, Mutex};

/// Outcome of [`Admission::admit`].
#[derive(Debug)]
pub enum Admit<G> {
    /// The group got `slot`; the caller owns the slot and must install the
    /// group's first task set into it.
    Slot { group: G, slot: usize, arrival: u64 },
    /// All slots are taken; the group waits.
    Queued,
    /// The scheduler shut down; the group is handed back.
    Closed(G),
}

#[derive(Debug)]
struct Inner<G> {
    waiting: VecDeque<G>,
    /// Free slots; popped from the end, so slot 0 is handed out first.
    free: Vec<usize>,
    slots: usize,
    arrivals: u64,
    closed: bool,
    /// A task set asked whether a slot is wanted before pausing
    /// ([`Admission::slot_wanted`]); never reset. Until then no set can be
    /// paused, and a queued arrival has no paused set to resume.
    pause_asked: bool,
}

/// Wait queue and free-slot list, behind one mutex.
#[derive(Debug)]
pub struct Admission<G> {
    inner: Mutex<Inner<G>>,
}

impl<G> Admission<G> {
    pub fn new(slots: usize) -> Self {
        Admission {
            inner: Mutex::new(Inner {
                waiting: VecDeque::new(),
                free: (0..slots).rev().collect(),
                slots,
                arrivals: 0,
                closed: false,
                pause_asked: false,
            }),
        }
    }

    /// Whether a group waits for a slot, asked by a task set about to pause
    /// (`crate::pause`). Under the same lock as [`Admission::admit`]: a set
    /// that asks before an arrival queues is seen by
    /// [`Admission::pause_asked`] afterwards, and one that asks after it sees
    /// the waiting group and does not pause.
    pub fn slot_wanted(&self) -> bool {
        let mut inner = lock(&self.inner);
        inner.pause_asked = true;
        !inner.waiting.is_empty()
    }

    /// Whether any task set ever asked [`Admission::slot_wanted`], i.e. may
    /// be paused now. Monotonic: read after an arrival queued.
    pub fn pause_asked(&self) -> bool {
        lock(&self.inner).pause_asked
    }

    /// A group arrives: it gets a free slot or waits.
    pub fn admit(&self, group: G) -> Admit<G> {
        let mut inner = lock(&self.inner);
        if inner.closed {
            return Admit::Closed(group);
        }
        match inner.free.pop() {
            Some(slot) => {
                let arrival = inner.arrivals;
                inner.arrivals += 1;
                Admit::Slot {
                    group,
                    slot,
                    arrival,
                }
            }
            None => {
                inner.waiting.push_back(group);
                Admit::Queued
            }
        }
    }

    /// The owner of `slot` is done with it (its group left and the slot was
    /// cleared). Returns the oldest waiting group, which now owns the slot,
    /// with its arrival number; or frees the slot.
    pub fn release(&self, slot: usize) -> Option<(G, u64)> {
        let mut inner = lock(&self.inner);
        match inner.waiting.pop_front() {
            Some(group) => {
                let arrival = inner.arrivals;
                inner.arrivals += 1;
                Some((group, arrival))
            }
            None => {
                inner.free.push(slot);
                None
            }
        }
    }

    /// Groups bound to slots (or being installed) plus waiting groups.
    pub fn active(&self) -> usize {
        let inner = lock(&self.inner);
        inner.slots - inner.free.len() + inner.waiting.len()
    }

    /// Groups waiting for a slot.
    pub fn waiting(&self) -> usize {
        lock(&self.inner).waiting.len()
    }

    /// Shuts admission: later arrivals are handed back; returns the groups
    /// that were waiting.
    pub fn close(&self) -> Vec<G> {
        let mut inner = lock(&self.inner);
        inner.closed = true;
        inner.waiting.drain(..).collect()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn waiting_groups_take_released_slots_in_arrival_order() {
        let a = Admission::new(1);
        assert!(matches!(
            a.admit("a"),
            Admit::Slot {
                slot: 0,
                arrival: 0,
                ..
            }
        ));
        assert!(matches!(a.admit("b"), Admit::Queued));
        assert!(matches!(a.admit("c"), Admit::Queued));
        assert_eq!(a.active(), 3);
        assert_eq!(a.release(0), Some(("b", 1)));
        assert_eq!(a.release(0), Some(("c", 2)));
        assert_eq!(a.release(0), None);
        assert_eq!(a.active(), 0);
        assert!(matches!(a.admit("d"), Admit::Slot { slot: 0, .. }));
        assert!(a.close().is_empty());
        assert!(matches!(a.admit("e"), Admit::Closed("e")));
    }
}

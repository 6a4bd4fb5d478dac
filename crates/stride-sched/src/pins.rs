//! The global state array and the finalization protocol (seed 001 §2.3,
//! "Task Set Finalization").
//!
//! Each worker has one *pin* (an atomic pointer-sized word) holding one of:
//!
//! * `IDLE` (null) — the worker is between decisions;
//! * `PINNED(k)` (odd: `2k + 1`) — the worker chose slot `k` and may be
//!   reading it or running a task of the entry it found there;
//! * `MARKER(e)` (the even, non-null address of entry `e`) — the coordinator
//!   of entry `e` counted this worker into `e`'s finalization counter; the
//!   worker must deregister at `e` when it unpins.
//!
//! The seed's "dedicated finalization marker" here names the entry whose
//! counter it was counted into. That closes an ABA window: a worker may
//! publish `PINNED(k)`, then read an *older*, already tagged entry of slot
//! `k`, stall, and be marked by the coordinator of a *newer* entry of slot
//! `k`; it must then deregister at the newer entry, which the marker names,
//! not at the one it read (which may be freed by then).
//!
//! **Protocol of a worker** (`w`, slot `k`):
//!
//! 1. [`Pins::pin`]: `pin[w] = PINNED(k)` (SeqCst store), *then* read slot
//!    `k` (SeqCst load). Only an untagged entry `e` may be dereferenced, and
//!    only until step 3.
//! 2. It runs a task of `e` (or merely reads `e`'s group). If the task found
//!    `e` dry, or failed, it calls [`Pins::coordinate`]: a compare-exchange
//!    of slot `k` from `e` to `e|TAG` elects exactly one coordinator per
//!    entry. The coordinator walks all pins and compare-exchanges every
//!    `PINNED(k)` into `MARKER(e)` (its own pin included), counting the
//!    successes `n`, then adds `n` to `e`'s finalization counter.
//! 3. [`Pins::unpin`]: `swap(pin[w], IDLE)`. If the old value is
//!    `MARKER(q)`, it decrements `q`'s counter; the worker whose decrement
//!    (or, if `n == 0`, the coordinator whose addition) brings the counter to
//!    zero is `q`'s **finalizer**.
//!
//! **Why the finalizer runs after every task of `e` returned.** Take a
//! worker `w` that ran a task of `e`: its read in step 1 saw `e` untagged, so
//! in the SeqCst order `store PINNED(k)` < `read slot` < `tag` < the
//! coordinator's reads of the pins. So the walk sees `PINNED(k)` in `pin[w]`
//! — unless `w` already unpinned (its task returned) — and counts `w`. A
//! counted worker decrements only after its task returned, so the counter,
//! which starts at 0, is raised by exactly `n` (once, after the walk) and
//! lowered by exactly the `n` marked workers, each after its task; it is 0
//! after both only when all `n` decrements and the addition happened. It can
//! temporarily go negative (decrements before the addition) but cannot hit 0
//! early: before the addition it is `≤ 0` and only falls, after it each
//! decrement is the last one or leaves it positive. The coordinator marks
//! itself (it is pinned to `k` while it coordinates), so `n ≥ 1` and the
//! coordinator's own unpin takes part like any other; the `n == 0` case (no
//! pinned worker at all) is handled by the addition's result.
//!
//! **Memory.** Unpinning with `Release` and the walk's reads (SeqCst, so
//! Acquire) make the task of an uncounted worker happen before the
//! coordinator's addition; the counter's read-modify-writes are `AcqRel`, so
//! every decrement and the addition happen before the finalizer's zero. The
//! finalizer therefore sees every task's effects when it calls `finalize`.
//!
//! **No use-after-free.** An entry is dereferenced only (a) by a worker that
//! read it untagged in step 1, until its step 3 — such a worker is counted,
//! as shown above; (b) by a worker whose unpin found `MARKER(e)`, to
//! decrement — it is counted; (c) by the coordinator, to add — it is pinned
//! and counted itself. The finalizer is the last counted worker to finish, so
//! after it replaced or cleared the slot nobody can reach the entry: a worker
//! pinning slot `k` later reads the new content, and one that read `e|TAG`
//! does not dereference it. The finalizer reclaims the entry.
//!
//! The cost on the decision path is one uncontended SeqCst store (the pin),
//! one SeqCst load (the slot) and one swap (the unpin); pins are padded to
//! their own cache lines.

use std::ptr::{self, NonNull};

use crate::slots::{SlotArray, SlotRead};
use crate::sync::{AtomicI64, AtomicPtr, Ordering, Padded};

/// An entry that can be finalized through the pin protocol.
pub trait Finalizable {
    /// The entry's finalization counter: starts at 0; raised once by the
    /// coordinator by the number of workers it marked, lowered by one by each
    /// marked worker when it unpins. `AcqRel` read-modify-writes only.
    fn finalization_counter(&self) -> &AtomicI64;
}

fn pinned<T>(slot: usize) -> *mut T {
    ptr::without_provenance_mut((slot << 1) | 1)
}

/// What the caller of [`Pins::coordinate`] must do.
#[derive(Debug)]
pub enum Coordination<T> {
    /// Another worker tagged the entry first and coordinates.
    NotFirst,
    /// This worker coordinated; it still has to unpin (which may make it the
    /// finalizer).
    Coordinated,
    /// This worker coordinated and no worker was pinned to the entry: the
    /// caller is the finalizer.
    Finalize(NonNull<T>),
}

/// The global state array: one pin per worker.
#[derive(Debug)]
pub struct Pins<T> {
    /// Per worker: `IDLE`, `PINNED(k)` or `MARKER(e)`. Written by the owner
    /// (store PINNED, SeqCst; swap IDLE, AcqRel) and by coordinators
    /// (compare-exchange PINNED → MARKER, SeqCst).
    pins: Box<[Padded<AtomicPtr<T>>]>,
}

impl<T: Finalizable> Pins<T> {
    pub fn new(workers: usize) -> Self {
        Pins {
            pins: (0..workers)
                .map(|_| Padded(AtomicPtr::new(ptr::null_mut())))
                .collect(),
        }
    }

    /// Step 1: publishes that `worker` picked `slot`, then reads the slot.
    /// On [`SlotRead::Active`] the entry may be dereferenced until
    /// [`Pins::unpin`]. Whatever the result, the worker must unpin next.
    pub fn pin(&self, worker: usize, slots: &SlotArray<T>, slot: usize) -> SlotRead<T> {
        self.pins[worker].store(pinned(slot), Ordering::SeqCst);
        slots.read(slot)
    }

    /// Step 2: `entry`, read from `slot` by the caller's current pin, is
    /// exhausted (or its group failed). The first caller per entry tags the
    /// slot and marks every worker pinned to it.
    pub fn coordinate(
        &self,
        slots: &SlotArray<T>,
        slot: usize,
        entry: NonNull<T>,
    ) -> Coordination<T> {
        if !slots.tag(slot, entry) {
            return Coordination::NotFirst;
        }
        let mut marked = 0i64;
        for pin in self.pins.iter() {
            if pin
                .compare_exchange(
                    pinned(slot),
                    entry.as_ptr(),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_ok()
            {
                marked += 1;
            }
        }
        // SAFETY: the caller read `entry` untagged under its current pin and
        // has not unpinned; the walk above marked it, so the counter cannot
        // reach zero (and the entry cannot be freed) before the caller's own
        // unpin.
        let counter = unsafe { entry.as_ref() }.finalization_counter();
        let before = counter.fetch_add(marked, Ordering::AcqRel);
        if before + marked == 0 {
            Coordination::Finalize(entry)
        } else {
            Coordination::Coordinated
        }
    }

    /// Step 3: `worker` ends its pin. Returns the entry this worker must
    /// finalize, if its deregistration was the last one.
    pub fn unpin(&self, worker: usize) -> Option<NonNull<T>> {
        let old = self.pins[worker].swap(ptr::null_mut(), Ordering::AcqRel);
        if old.is_null() || old.addr() & 1 == 1 {
            return None;
        }
        let entry = NonNull::new(old).expect("checked non-null");
        // SAFETY: a marker names the entry whose coordinator counted this
        // worker; that entry cannot be finalized (hence freed) before this
        // decrement.
        let counter = unsafe { entry.as_ref() }.finalization_counter();
        (counter.fetch_sub(1, Ordering::AcqRel) == 1).then_some(entry)
    }

    /// Number of workers.
    pub fn len(&self) -> usize {
        self.pins.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pins.is_empty()
    }
}

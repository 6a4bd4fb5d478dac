//! Binding groups to slots and giving slots up: the three writes of the
//! protocol that change what a slot holds, each followed by the mask bit
//! that tells the workers (seed 001 §2.3, events 2 and 3).
//!
//! * [`Binding::bind`]: a group that got a slot from admission installs its
//!   first task set and pushes the **change** bit (event 2);
//! * [`Binding::install_next`]: a finalizer installs its group's next task
//!   set into the same slot and pushes the **return** bit (event 3);
//! * [`Binding::release`]: the finalizer of a group's last task set clears
//!   the slot and hands it to the oldest waiting group, which the caller
//!   then binds, or frees it ([`crate::admission`]).
//!
//! The scheduler ([`crate::scheduler`], [`crate::worker`]) and the loom
//! models (`tests/loom.rs`) call these same functions; waking sleeping
//! workers after a bind is the caller's ([`crate::idle`]).
//!
//! Order matters and is the argument of the README's proof sketch: the
//! entry is installed (SeqCst store in [`SlotArray::install`]) *before* the
//! bit is pushed (Release `fetch_or`), so a worker that pulls the bit
//! (Acquire swap) and reads the slot finds the entry, initialized.

use std::ptr::NonNull;

use crate::admission::Admission;
use crate::masks::{MaskKind, UpdateMasks};
use crate::slots::SlotArray;

/// The slot array, the workers' update masks and the admission queue,
/// borrowed together.
#[derive(Debug)]
pub struct Binding<'a, T, G> {
    pub slots: &'a SlotArray<T>,
    pub masks: &'a UpdateMasks,
    pub admission: &'a Admission<G>,
}

impl<T, G> Clone for Binding<'_, T, G> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, G> Copy for Binding<'_, T, G> {}

impl<'a, T, G> Binding<'a, T, G> {
    /// Installs a group's first task set, `entry`, into `slot` (which the
    /// caller owns, from admission or a release) and tells every worker.
    pub fn bind(self, slot: usize, entry: Box<T>) -> NonNull<T> {
        let p = self.slots.install(slot, entry);
        self.masks.push(MaskKind::Change, slot);
        p
    }

    /// Installs the next task set of the group in `slot` (the caller is the
    /// finalizer of the entry it replaces) and tells every worker.
    pub fn install_next(self, slot: usize, entry: Box<T>) -> NonNull<T> {
        let p = self.slots.install(slot, entry);
        self.masks.push(MaskKind::Return, slot);
        p
    }

    /// The finalizer of `slot`'s last task set gives the slot up: clears it
    /// (returning the entry it held, for the caller to reclaim once) and
    /// takes the oldest waiting group with its arrival number — the caller
    /// now owns the slot and must [`Self::bind`] that group — or frees it.
    pub fn release(self, slot: usize) -> (Option<NonNull<T>>, Option<(G, u64)>) {
        let cleared = self.slots.clear(slot);
        (cleared, self.admission.release(slot))
    }
}

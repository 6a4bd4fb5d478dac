//! The global slot array (seed 001 §2.3, "Thread-Local Decisions").
//!
//! `config.slots` slots (default 128); each holds a pointer to the *active
//! task-set entry* of the resource group bound to the slot, or null when no
//! group is bound. When a group's task set is finished, the group's next task
//! set is put into the *same* slot, so per-slot scheduling state (pass,
//! priority) is per group.
//!
//! The pointer's lowest bit is the **exhausted tag**: the first worker that
//! finds the task set dry sets it with a compare-exchange from the untagged
//! to the tagged pointer, which also elects it the finalization coordinator
//! (event 1 of the seed, handled optimistically: nobody is notified; a worker
//! that picks the slot sees the tag and deactivates the slot locally).
//!
//! Who writes a slot:
//!
//! * `install` — by the thread that *owns* the slot: the submitter that got a
//!   free slot from [`crate::admission`], or the finalizer of the slot's
//!   previous entry. Exactly one thread owns a slot at a time, so installs
//!   never race with each other;
//! * `tag` — by any worker pinned to the slot (see [`crate::pins`]);
//! * `clear` — by the owner (the finalizer of a group's last task set), before
//!   it hands the slot back to admission.
//!
//! All slot accesses that decide whether an entry may be dereferenced are
//! `SeqCst`: the read of a slot by a worker and the tag by a coordinator form
//! the store-load (Dekker) pair with the pin publication and the
//! coordinator's walk in [`crate::pins`].
//!
//! Memory reclamation: entries are boxed and leaked into the slot by
//! `install`; [`SlotArray::reclaim`] frees one. Only the finalizer of an entry
//! may reclaim it, after it replaced or cleared the slot; [`crate::pins`]
//! explains why no worker can still dereference it then.

use std::ptr::{self, NonNull};

use crate::sync::{AtomicPtr, Ordering};

const TAG: usize = 1;

/// What a worker found in a slot.
#[derive(Debug)]
pub enum SlotRead<T> {
    /// No group is bound to the slot.
    Empty,
    /// The slot's task set ran dry (tagged pointer). The entry must not be
    /// dereferenced on the strength of this read.
    Exhausted,
    /// The slot's active task-set entry.
    Active(NonNull<T>),
}

/// A fixed array of tagged entry pointers.
#[derive(Debug)]
pub struct SlotArray<T> {
    /// Per slot: null, an untagged entry pointer, or a tagged one. Ownership
    /// of the entry lies with the slot (until its finalizer reclaims it).
    slots: Box<[AtomicPtr<T>]>,
}

impl<T> SlotArray<T> {
    const ALIGNED: () = assert!(std::mem::align_of::<T>() > TAG, "no room for the tag bit");

    pub fn new(slots: usize) -> Self {
        let () = Self::ALIGNED;
        SlotArray {
            slots: (0..slots)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Reads slot `k` (SeqCst: the load half of the pin protocol).
    pub fn read(&self, k: usize) -> SlotRead<T> {
        let p = self.slots[k].load(Ordering::SeqCst);
        if p.is_null() {
            SlotRead::Empty
        } else if p.addr() & TAG != 0 {
            SlotRead::Exhausted
        } else {
            SlotRead::Active(NonNull::new(p).expect("checked non-null"))
        }
    }

    /// Puts `entry` into slot `k`, which the caller owns, and returns its
    /// pointer. The previous content must be null or a tagged entry whose
    /// finalizer is the caller (it reclaims that entry itself). Release (as
    /// part of SeqCst): a worker that reads the pointer sees the entry
    /// initialized.
    pub fn install(&self, k: usize, entry: Box<T>) -> NonNull<T> {
        let p = Box::into_raw(entry);
        self.slots[k].store(p, Ordering::SeqCst);
        NonNull::new(p).expect("Box pointers are non-null")
    }

    /// Tags slot `k` as exhausted if it still holds `entry` untagged; `true`
    /// for exactly one caller per installed entry (the coordinator).
    pub fn tag(&self, k: usize, entry: NonNull<T>) -> bool {
        let p = entry.as_ptr();
        self.slots[k]
            .compare_exchange(
                p,
                p.map_addr(|a| a | TAG),
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
    }

    /// Empties slot `k` and returns the entry it held (untagged), if any.
    /// Called by the slot's owner, or at shutdown once all workers stopped.
    pub fn clear(&self, k: usize) -> Option<NonNull<T>> {
        let p = self.slots[k].swap(ptr::null_mut(), Ordering::SeqCst);
        NonNull::new(p.map_addr(|a| a & !TAG))
    }

    /// Frees an entry that was installed by [`SlotArray::install`].
    ///
    /// # Safety
    ///
    /// `entry` came from `install`, is no longer in any slot, is reclaimed
    /// once, and no thread dereferences it any more: the caller is its
    /// finalizer (see [`crate::pins`]) or the only thread left.
    pub unsafe fn reclaim(entry: NonNull<T>) {
        // SAFETY: per the contract, `entry` is a leaked Box nobody else uses.
        drop(unsafe { Box::from_raw(entry.as_ptr()) });
    }
}

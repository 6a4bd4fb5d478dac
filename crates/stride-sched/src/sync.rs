//! Synchronization facade of the lock-free core.
//!
//! Every atomic, mutex and condition variable of the scheduling core
//! ([`crate::masks`], [`crate::slots`], [`crate::pins`], [`crate::admission`],
//! [`crate::idle`] and the shared state in [`crate::scheduler`]) is imported
//! from here. In an ordinary build these are the `std::sync` types; compiled
//! with `RUSTFLAGS="--cfg loom"` they are loom's model-checked replacements,
//! so `tests/loom.rs` explores every interleaving (and every weak-memory
//! outcome loom models) of the real protocol code, not of a copy.
//!
//! Not routed through here, on purpose: the public task-set handles
//! (`std::sync::Arc<dyn TaskSetWork>`, which loom's `Arc` cannot hold), the
//! per-query statistics counters and the completion slot in
//! [`crate::group`] — statistics and the submitter's wait are not part of the
//! scheduling protocol, and the loom models do not run tasks.

#[cfg(not(loom))]
pub use std::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub use std::sync::{Condvar, Mutex, MutexGuard};

#[cfg(loom)]
pub use loom::sync::atomic::{
    fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub use loom::sync::{Condvar, Mutex, MutexGuard};

/// Aligns its content to a cache line of its own, so that one worker's hot
/// atomics (its update masks, its pin) do not share a line with another's.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Locks `mutex`, ignoring poisoning: every critical section of the core
/// leaves its data consistent before anything in it can panic.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

//! Idle workers: sleeping without spinning and without lost wakeups.
//!
//! A worker whose local activity mask is empty (every slot it knows is
//! empty or exhausted) has nothing to run until some thread installs a task
//! set (events 2 and 3) or the scheduler shuts down. Such a thread calls
//! [`Idle::wake`] *after* it installed the entry and pushed the mask bits.
//!
//! Protocol, with a wake counter `epoch` and a sleeper count:
//!
//! * **Worker**: `e = epoch` (SeqCst) *before* pulling its masks and looking
//!   for work; if it found none: `sleepers += 1` (SeqCst), lock, and while
//!   `epoch == e` and not shut down, wait on the condition variable; unlock,
//!   `sleepers -= 1`, and look again.
//! * **Waker**: `epoch += 1` (SeqCst), then, only if `sleepers > 0`
//!   (SeqCst), lock and `notify_all`.
//!
//! *No lost wakeup.* If the waker's increment comes before the worker's read
//! of `e`, the worker's pull after that read sees the pushed bits (the push
//! happens before the increment, which the worker read). Otherwise the
//! worker's re-check of `epoch` under the lock either sees the increment (and
//! does not wait), or comes before it in the SeqCst order — then so does the
//! worker's `sleepers += 1`, so the waker reads `sleepers > 0`, takes the lock
//! (after the worker released it in `wait`) and notifies a waiting worker.
//! Spurious wakeups only cause another look for work.
//!
//! The busy path pays one `fetch_add` and one load per *install* (not per
//! decision); the lock is taken only when someone sleeps.

use crate::sync::{lock, AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering};

#[derive(Debug)]
pub struct Idle {
    /// Bumped by every wake (SeqCst; pairs with the worker's SeqCst reads of
    /// it before looking for work and under `lock`).
    epoch: AtomicU64,
    /// Workers between "found nothing" and "woke up" (SeqCst, read by wakers).
    sleepers: AtomicUsize,
    /// Set once at shutdown (SeqCst, before the final wake).
    shutdown: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Default for Idle {
    fn default() -> Self {
        Idle {
            epoch: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }
}

impl Idle {
    /// Read by a worker before it pulls its masks and looks for work.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    pub fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// Called after publishing work (an installed task set, pushed masks).
    pub fn wake(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = lock(&self.lock);
            self.cv.notify_all();
        }
    }

    /// Sleeps until the epoch differs from `seen` (the value read before the
    /// worker looked for work and found none) or the scheduler shuts down.
    pub fn sleep(&self, seen: u64) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        {
            let mut guard = lock(&self.lock);
            while self.epoch.load(Ordering::SeqCst) == seen && !self.is_shutdown() {
                guard = self.cv.wait(guard).unwrap_or_else(|e| e.into_inner());
            }
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wakes every worker for good.
    pub fn shut_down(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.wake();
    }
}

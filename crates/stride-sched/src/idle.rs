//! Idle workers: sleeping without spinning and without lost wakeups, and
//! waking only as many of them as the new work can use.
//!
//! A worker whose local activity mask is empty (every slot it knows is
//! empty or exhausted) has nothing to run until some thread installs a task
//! set (events 2 and 3) or the scheduler shuts down. Such a thread calls
//! [`Idle::wake`] *after* it installed the entry and pushed the mask bits,
//! saying how many sleeping workers the new work can use.
//!
//! Protocol, with a wake counter `epoch` and a sleeper count:
//!
//! * **Worker**: `e = epoch` (SeqCst) *before* pulling its masks and looking
//!   for work; if it found none: `sleepers += 1` (SeqCst RMW), lock, and
//!   while `epoch == e` and not shut down, wait on the condition variable;
//!   unlock, `sleepers -= 1`, and look again.
//! * **Waker** (`wake(n)`): `epoch += 1` (SeqCst RMW); then, if `n > 0`,
//!   `s = sleepers` read with a read-modify-write (`fetch_add(0)`, SeqCst),
//!   and only if `s > 0`: lock, and `notify_all` if `n >= s`, else
//!   `notify_one` `n` times; unlock. Shutdown sets its flag, then bumps and
//!   notifies all.
//!
//! Every access to `sleepers` is a read-modify-write, so the argument below
//! needs only their modification order and release/acquire, not the single
//! total order of SeqCst loads (loom treats SeqCst loads as AcqRel and
//! could not check a plain load here; a `fetch_add(0)` costs the same as
//! the `fetch_add` on `epoch` just before it, once per install).
//!
//! *What a wake guarantees.* Call a worker **caught** by a wake if its read
//! of `e` returned the epoch before the wake's bump, and **stuck** if,
//! caught, it then waits on the condition variable without having seen the
//! bump. A worker that reads the bumped epoch (first read or re-check) also
//! sees the pushed bits when it pulls: the pushes happen before the bump,
//! which it read (Acquire). A wake `wake(n)` with `n >= 1` makes at least
//! `min(n, stuck)` stuck workers look again:
//!
//! * take a worker's `sleepers += 1` and the waker's read of `sleepers`. If
//!   the waker's read comes first in `sleepers`' modification order, the
//!   worker's increment reads from it or from a later RMW (all RMWs: one
//!   release sequence), so it synchronizes with the waker's read, which
//!   follows the bump: the worker's re-check sees the bump and it is not
//!   stuck. So every stuck worker's increment comes before the waker's
//!   read, which therefore sees `s > 0`;
//! * the waker then takes the lock. A worker re-checks and enters `wait`
//!   under the lock; one that had not re-checked when the waker took the
//!   lock re-checks after the waker's unlock (synchronized by the lock), sees
//!   the bump and is not stuck. So every stuck worker waits when the waker
//!   notifies;
//! * each `notify_one` unblocks one waiting worker, and a worker it
//!   unblocked cannot wait again before the waker unlocks (waiting needs the
//!   lock), so `n` calls under one lock unblock `min(n, waiting)` distinct
//!   workers; `notify_all` (when `n >= s`) unblocks all of them;
//! * an unblocked worker re-checks `epoch` under the lock, after the
//!   waker's unlock: it sees the bump, stops waiting and looks again.
//!
//! *No lost wakeup.* The scheduler may leave installed work unseen only if
//! every worker is stuck for good. Every install is followed either by
//! `wake(n)` with `n >= 1` (an install by a thread that is not a worker:
//! some worker looks again, or none was stuck and every caught worker looks
//! again anyway), or by a worker that installed it and then decides again
//! itself (it pushed the mask bit to its own mask too) — such a worker may
//! call `wake(0)`, since the work it installed can use no worker beyond
//! itself. A worker that looks again and finds work runs it; one that finds
//! none sleeps again on the new epoch. So installed work always has a worker
//! that sees it; `n` only decides how many others join at once. A too small
//! `n` (a task set that could use more workers than its hint said) costs
//! parallelism until those workers' next wake, never work.
//!
//! `tests/loom.rs` runs this code with two sleepers and targeted wakers,
//! and shows that a wake of no one by a thread that does not look again
//! itself does lose the wakeup.
//!
//! The busy path pays one `fetch_add` and one load per *install* (not per
//! decision); the lock is taken only when someone sleeps and the work can
//! use a sleeper.

use crate::sync::{lock, AtomicBool, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering};

#[derive(Debug)]
pub struct Idle {
    /// Bumped by every wake (SeqCst; pairs with the worker's SeqCst reads of
    /// it before looking for work and under `lock`).
    epoch: AtomicU64,
    /// Workers between "found nothing" and "woke up". Only ever accessed by
    /// SeqCst read-modify-writes (increment and decrement by sleepers, the
    /// wakers' `fetch_add(0)`), so that a waker's read and a sleeper's
    /// increment synchronize in whichever order they come (module docs).
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

    /// Called after publishing work (an installed task set, pushed masks)
    /// that can keep `n` more workers busy: wakes `n` sleeping workers (all
    /// of them if fewer sleep). Workers about to sleep look again anyway.
    /// `n = 0` only for a worker that will look for work again itself
    /// (module docs).
    pub fn wake(&self, n: usize) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if n == 0 {
            return;
        }
        // A read-modify-write, not a load: see the module docs.
        let sleepers = self.sleepers.fetch_add(0, Ordering::SeqCst);
        if sleepers == 0 {
            return;
        }
        let _guard = lock(&self.lock);
        if n >= sleepers {
            self.cv.notify_all();
        } else {
            for _ in 0..n {
                self.cv.notify_one();
            }
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
        self.wake(usize::MAX);
    }
}

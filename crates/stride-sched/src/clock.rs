//! The time a scheduling decision reads.
//!
//! The decision core (`decision.rs`) never reads a clock itself: it is
//! told how long each task ran. Whoever drives it measures that time through
//! a [`Clock`]:
//!
//! * the worker loop ([`crate::worker`]) with [`Clock::Wall`] (the default):
//!   monotonic time since the scheduler started;
//! * tests that drive the *real* worker loop with [`Clock::Virtual`]: their
//!   tasks advance a [`VirtualClock`] by the work they model instead of
//!   spending it, so a run's decisions are a function of the workload alone
//!   and can be compared with the simulator's ([`crate::sim`], which keeps
//!   virtual time itself) decision for decision.
//!
//! Only the charge of a task (its `ran`) goes through the clock. Statistics
//! that are not decisions (queue wait, latency, priority samples) and the
//! adaptive morsel sizer keep wall time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where the worker loop takes time from.
#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// Monotonic wall time ([`Instant`]).
    #[default]
    Wall,
    /// Time that passes only when the tasks say so.
    Virtual(Arc<VirtualClock>),
}

impl Clock {
    /// A fresh virtual clock at zero, and the handle tasks advance it with.
    pub fn virtual_pair() -> (Clock, Arc<VirtualClock>) {
        let clock = Arc::new(VirtualClock::default());
        (Clock::Virtual(clock.clone()), clock)
    }

    /// A point in time to measure from ([`Self::since`]), `wall` being the
    /// wall time now (the worker reads it anyway: no second clock read on
    /// the task path).
    pub(crate) fn start_at(&self, wall: Instant) -> ClockStart {
        match self {
            Clock::Wall => ClockStart::Wall(wall),
            Clock::Virtual(v) => ClockStart::Virtual(v.now()),
        }
    }

    /// Time passed since `start` (taken from this clock).
    pub(crate) fn since(&self, start: ClockStart) -> Duration {
        match (self, start) {
            (Clock::Wall, ClockStart::Wall(at)) => at.elapsed(),
            (Clock::Virtual(v), ClockStart::Virtual(at)) => v.now().saturating_sub(at),
            // A start taken from the other kind of clock cannot happen: a
            // scheduler's clock is fixed at start-up.
            _ => Duration::ZERO,
        }
    }
}

/// A reading of a [`Clock`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum ClockStart {
    Wall(Instant),
    Virtual(Duration),
}

/// Time as a count of nanoseconds that only [`VirtualClock::advance`] moves.
///
/// `nanos` is a plain counter: Relaxed loads and `fetch_add`s. It orders
/// nothing; a test that reads it across threads synchronizes by other means
/// (the tasks that advance it run on the workers, and the scheduler's own
/// protocol orders a task's end before the next decision).
#[derive(Debug, Default)]
pub struct VirtualClock {
    nanos: AtomicU64,
}

impl VirtualClock {
    /// The time now.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    /// Lets `by` pass.
    pub fn advance(&self, by: Duration) {
        let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(ns, Ordering::Relaxed);
    }

    /// Moves the clock forward to `to` (never backwards).
    pub fn advance_to(&self, to: Duration) {
        let ns = u64::try_from(to.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_max(ns, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_virtual_clock_measures_only_what_was_advanced() {
        let (clock, handle) = Clock::virtual_pair();
        let start = clock.start_at(Instant::now());
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(clock.since(start), Duration::ZERO);
        handle.advance(Duration::from_micros(1500));
        assert_eq!(clock.since(start), Duration::from_micros(1500));
        handle.advance_to(Duration::from_micros(1000));
        assert_eq!(handle.now(), Duration::from_micros(1500), "never backwards");
        handle.advance_to(Duration::from_millis(3));
        assert_eq!(clock.since(start), Duration::from_millis(3));
    }

    #[test]
    fn the_wall_clock_measures_elapsed_time() {
        let clock = Clock::Wall;
        let start = clock.start_at(Instant::now());
        std::thread::sleep(Duration::from_millis(2));
        assert!(clock.since(start) >= Duration::from_millis(2));
    }
}

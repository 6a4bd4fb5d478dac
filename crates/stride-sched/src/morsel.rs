//! Adaptive morsel execution (seed 001 §3.1).
//!
//! Every task should use up the target duration `t_max` as precisely as
//! possible, whatever the pipeline's cost per tuple. Each task set keeps one
//! shared throughput estimate `T` (tuples per second) and is in one of three
//! states, which decide the size of the next morsel of a task:
//!
//! ```text
//!   startup ──(a task's doubling stops)──► default ──(remaining < W·t_max)──► shutdown
//!   C0 = 16 tuples, doubling while          one morsel of T·t_max,              morsels of
//!   2·t_{i-1} ≤ t_max − Σ t_k               EWMA  T' = α·T̂ + (1−α)·T           max(t/W, t_min)·T
//! ```
//!
//! A morsel that finishes well before `t_max` (a pipeline that cannot adapt,
//! or an estimate that was too low) is followed by another one sized for the
//! time left, so the task still runs until `t_max` is used up.
//!
//! The estimate is shared by all workers of the task set and updated without
//! synchronisation beyond the atomic itself: it is a statistic, a lost update
//! only delays adaptation by one morsel.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How tasks size their morsels.
#[derive(Debug, Clone, PartialEq)]
pub enum MorselPolicy {
    /// Every morsel has this many tuples (tests use tiny morsels).
    Fixed(usize),
    /// Seed 001 §3.1.
    Adaptive(AdaptiveMorsels),
}

/// Parameters of adaptive morsel execution.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveMorsels {
    /// Tuples of the first startup morsel (`C0`, seed: 16).
    pub initial_tuples: usize,
    /// Weight of the newest measurement in the throughput EWMA (`α`, seed: 0.8).
    pub alpha: f64,
    /// Shortest morsel duration in the shutdown state (`t_min`).
    pub min_duration: Duration,
    /// Morsels per task in the default state: each is sized for
    /// `t_max / morsels_per_task` (seed 001: 1, one morsel of `T·t_max`).
    /// Stride's default of 4 puts a preemption point every `t_max / 4`
    /// ([`crate::TaskContext::next_morsel`]) at the cost of a few more
    /// morsel hand-outs; a task still runs until `t_max` is used up.
    pub morsels_per_task: u32,
}

impl Default for AdaptiveMorsels {
    fn default() -> Self {
        AdaptiveMorsels {
            initial_tuples: 16,
            alpha: 0.8,
            min_duration: Duration::from_micros(100),
            morsels_per_task: 4,
        }
    }
}

/// Per-task-set state: the throughput estimate (f64 bits, tuples per second;
/// 0 while the task set is in its startup state). Loads and stores are
/// Relaxed: no other data is published through it.
#[derive(Debug, Default)]
pub struct MorselState {
    throughput: AtomicU64,
}

impl MorselState {
    fn throughput(&self) -> Option<f64> {
        let t = f64::from_bits(self.throughput.load(Ordering::Relaxed));
        (t > 0.0 && t.is_finite()).then_some(t)
    }

    fn set_throughput(&self, t: f64) {
        if t > 0.0 && t.is_finite() {
            self.throughput.store(t.to_bits(), Ordering::Relaxed);
        }
    }
}

/// Sizes the morsels of one task.
#[derive(Debug)]
pub(crate) struct MorselSizer<'a> {
    policy: &'a MorselPolicy,
    state: &'a MorselState,
    t_max: Duration,
    workers: usize,
    task_start: Instant,
    /// The morsel in flight: (tuples asked for, start).
    current: Option<(usize, Instant)>,
    /// Startup state: size and duration of the previous morsel of this task.
    last: Option<(usize, Duration)>,
    startup: bool,
    /// Longest morsel the task may run (adaptive morsels only; `None`: as
    /// the policy sizes them).
    cap: Option<Duration>,
}

impl<'a> MorselSizer<'a> {
    pub(crate) fn new(
        policy: &'a MorselPolicy,
        state: &'a MorselState,
        t_max: Duration,
        workers: usize,
    ) -> Self {
        Self::starting_at(policy, state, t_max, workers, Instant::now())
    }

    fn starting_at(
        policy: &'a MorselPolicy,
        state: &'a MorselState,
        t_max: Duration,
        workers: usize,
        task_start: Instant,
    ) -> Self {
        MorselSizer {
            policy,
            state,
            t_max,
            workers: workers.max(1),
            task_start,
            current: None,
            last: None,
            startup: state.throughput().is_none(),
            cap: None,
        }
    }

    /// Caps every adaptive morsel of the task at `cap` (a startup morsel
    /// stops doubling there).
    pub(crate) fn cap(&mut self, cap: Option<Duration>) {
        self.cap = cap;
    }

    /// Tuples for the next morsel, or `None` when the task should end.
    /// `remaining` is the number of tuples the source has left, if known.
    pub(crate) fn next(&mut self, remaining: Option<usize>) -> Option<usize> {
        self.next_at(Instant::now(), remaining)
    }

    /// Records that the morsel handed out by [`Self::next`] was processed.
    pub(crate) fn done(&mut self, tuples: usize) {
        self.done_at(Instant::now(), tuples)
    }

    /// Whether the task's time slice `t_max` is used up.
    pub(crate) fn slice_used(&self) -> bool {
        self.task_start.elapsed() >= self.t_max
    }

    /// Records a morsel that tasks before this one suspended and this one
    /// finished: `tuples` source tuples in `spent` over all of them. With
    /// adaptive morsels its throughput moves the set's estimate as a whole
    /// morsel's does; the task's own morsel in flight, if any, is not
    /// touched.
    pub(crate) fn resumed_done(&mut self, tuples: usize, spent: Duration) {
        let MorselPolicy::Adaptive(p) = self.policy else {
            return;
        };
        if tuples == 0 {
            return;
        }
        let measured = tuples as f64 / spent.as_secs_f64().max(1e-9);
        let estimate = match self.state.throughput() {
            Some(old) => p.alpha * measured + (1.0 - p.alpha) * old,
            None => measured,
        };
        self.state.set_throughput(estimate);
    }

    fn next_at(&mut self, now: Instant, remaining: Option<usize>) -> Option<usize> {
        let used = now.duration_since(self.task_start);
        if used >= self.t_max {
            return None;
        }
        let left = self.t_max - used;
        let limit = self.cap.map_or(left, |c| left.min(c));
        let tuples = match self.policy {
            MorselPolicy::Fixed(n) => *n,
            MorselPolicy::Adaptive(p) => {
                if self.startup {
                    match self.last {
                        None => p.initial_tuples,
                        // Double while the doubled morsel is expected to fit.
                        // (Never past what the source has left: a source
                        // whose morsels come short and fast would otherwise
                        // double the ask without bound.)
                        Some((size, t)) if t * 2 <= limit => {
                            let doubled = size.saturating_mul(2);
                            remaining.map_or(doubled, |r| doubled.min(r.max(1)))
                        }
                        Some((size, t)) => {
                            // Doubling stops: the last startup morsel gives the
                            // task set its first throughput estimate.
                            self.state
                                .set_throughput(size as f64 / t.as_secs_f64().max(1e-9));
                            return None;
                        }
                    }
                } else {
                    let throughput = self.state.throughput().unwrap_or(1e6);
                    let slice = self.t_max.as_secs_f64() / f64::from(p.morsels_per_task.max(1));
                    let mut duration = limit.as_secs_f64().min(slice);
                    if let Some(r) = remaining {
                        let rest = r as f64 / throughput;
                        if rest < self.workers as f64 * self.t_max.as_secs_f64() {
                            // Shutdown: aim for a photo finish of all workers.
                            let share =
                                (rest / self.workers as f64).max(p.min_duration.as_secs_f64());
                            duration = duration.min(share);
                        }
                    }
                    (throughput * duration).round() as usize
                }
            }
        };
        let tuples = tuples.max(1);
        self.current = Some((tuples, now));
        Some(tuples)
    }

    fn done_at(&mut self, now: Instant, tuples: usize) {
        let Some((asked, start)) = self.current.take() else {
            return;
        };
        let MorselPolicy::Adaptive(p) = self.policy else {
            return;
        };
        let t = now.saturating_duration_since(start);
        // A short morsel at the end of the source says nothing about throughput.
        if tuples == 0 || (tuples < asked && t < self.t_max / 8) {
            self.last = Some((asked, t));
            return;
        }
        let measured = tuples as f64 / t.as_secs_f64().max(1e-9);
        if self.startup {
            self.last = Some((tuples, t));
        } else {
            let old = self.state.throughput().unwrap_or(measured);
            self.state
                .set_throughput(p.alpha * measured + (1.0 - p.alpha) * old);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T_MAX: Duration = Duration::from_millis(2);

    /// Seed 001's sizing: one morsel of `T·t_max` per task.
    fn one_morsel_per_task() -> MorselPolicy {
        MorselPolicy::Adaptive(AdaptiveMorsels {
            morsels_per_task: 1,
            ..AdaptiveMorsels::default()
        })
    }

    /// Runs one task on a virtual clock where every tuple costs `ns_per_tuple`;
    /// returns the morsel sizes it took.
    fn task(
        policy: &MorselPolicy,
        state: &MorselState,
        workers: usize,
        ns_per_tuple: u64,
        mut remaining: usize,
    ) -> Vec<usize> {
        let start = Instant::now();
        let mut now = start;
        let mut sizer = MorselSizer::starting_at(policy, state, T_MAX, workers, start);
        let mut sizes = Vec::new();
        while let Some(n) = sizer.next_at(now, Some(remaining)) {
            if remaining == 0 {
                break;
            }
            let n = n.min(remaining);
            remaining -= n;
            now += Duration::from_nanos(ns_per_tuple * n as u64);
            sizer.done_at(now, n);
            sizes.push(n);
        }
        sizes
    }

    #[test]
    fn startup_doubles_from_c0_while_the_double_fits() {
        let policy = MorselPolicy::Adaptive(AdaptiveMorsels::default());
        let state = MorselState::default();
        // 100 ns per tuple: 16, 32, ... while 2·t_{i-1} ≤ t_max − Σt.
        let sizes = task(&policy, &state, 1, 100, 1 << 30);
        assert_eq!(sizes[0], 16);
        assert!(sizes.windows(2).all(|w| w[1] == 2 * w[0]), "{sizes:?}");
        let total_ns: u64 = sizes.iter().map(|&n| 100 * n as u64).sum();
        assert!(total_ns <= T_MAX.as_nanos() as u64);
        // The last startup morsel gives the estimate: 10 M tuples per second.
        let t = state.throughput().unwrap();
        assert!((t - 1e7).abs() < 1.0, "{t}");
    }

    #[test]
    fn startup_never_asks_past_what_the_source_has_left() {
        // A source that hands out 10-tuple pieces (whole spilled batches),
        // each in no time: the asks double, but never past the tuples left
        // (they once doubled until they overflowed).
        let policy = MorselPolicy::Adaptive(AdaptiveMorsels::default());
        let state = MorselState::default();
        let start = Instant::now();
        let mut sizer = MorselSizer::starting_at(&policy, &state, T_MAX, 1, start);
        let mut remaining = 100_000usize;
        let mut asks = 0;
        while let Some(n) = sizer.next_at(start, Some(remaining)) {
            assert!(n <= remaining.max(1), "asked {n} with {remaining} left");
            let got = n.min(10).min(remaining);
            remaining -= got;
            sizer.done_at(start, got);
            asks += 1;
            if remaining == 0 {
                break;
            }
        }
        assert_eq!(remaining, 0);
        assert_eq!(asks, 10_000);
    }

    #[test]
    fn default_state_takes_one_morsel_of_t_times_t_max() {
        let policy = one_morsel_per_task();
        let state = MorselState::default();
        state.set_throughput(1e7);
        let sizes = task(&policy, &state, 1, 100, 1 << 30);
        assert_eq!(sizes, vec![20_000]); // 1e7 tuples/s × 2 ms
    }

    #[test]
    fn default_state_splits_t_max_into_morsels_per_task() {
        let policy = MorselPolicy::Adaptive(AdaptiveMorsels::default());
        let state = MorselState::default();
        state.set_throughput(1e7);
        let sizes = task(&policy, &state, 1, 100, 1 << 30);
        // 4 morsels of T·t_max/4 = 5000 tuples: the task still fills t_max.
        assert_eq!(sizes, vec![5_000; 4]);
    }

    #[test]
    fn a_capped_task_runs_short_morsels_in_every_state() {
        let policy = MorselPolicy::Adaptive(AdaptiveMorsels::default());
        let cap = Duration::from_micros(100);
        let run = |state: &MorselState| {
            let start = Instant::now();
            let mut sizer = MorselSizer::starting_at(&policy, state, T_MAX, 1, start);
            sizer.cap(Some(cap));
            let (mut now, mut sizes) = (start, Vec::new());
            while let Some(n) = sizer.next_at(now, Some(1 << 30)) {
                // 100 ns per tuple.
                now += Duration::from_nanos(100 * n as u64);
                sizer.done_at(now, n);
                sizes.push(n);
            }
            sizes
        };
        // Default state at 1e7 tuples/s: 1000-tuple morsels (100 µs), not 5000.
        let state = MorselState::default();
        state.set_throughput(1e7);
        let sizes = run(&state);
        assert!(sizes.len() >= 19, "{sizes:?}");
        assert!(sizes.iter().all(|&n| n == 1000), "{sizes:?}");
        // Startup: doubling stops before a morsel would pass the cap.
        let sizes = run(&MorselState::default());
        assert!(sizes.iter().all(|&n| n <= 1000), "{sizes:?}");
    }

    #[test]
    fn default_state_tracks_a_changed_throughput_with_the_ewma() {
        let policy = MorselPolicy::Adaptive(AdaptiveMorsels::default());
        let state = MorselState::default();
        state.set_throughput(1e7);
        // The pipeline is 4x slower than estimated: the first morsel fills
        // t_max alone, the estimate moves by α = 0.8 towards the measurement.
        let sizes = task(&policy, &state, 1, 400, 1 << 30);
        assert_eq!(sizes, vec![5_000]);
        let t = state.throughput().unwrap();
        assert!((t - (0.8 * 2.5e6 + 0.2 * 1e7)).abs() < 1.0, "{t}");
    }

    #[test]
    fn a_resumed_morsel_moves_the_estimate_by_its_whole_time() {
        let policy = MorselPolicy::Adaptive(AdaptiveMorsels::default());
        // A morsel of 100 tuples that took 10 ms over the tasks that ran
        // it (1e4 tuples/s): the estimate moves by α = 0.8 towards that.
        let state = MorselState::default();
        state.set_throughput(1e7);
        let mut sizer = MorselSizer::new(&policy, &state, T_MAX, 1);
        sizer.resumed_done(100, Duration::from_millis(10));
        let t = state.throughput().unwrap();
        assert!((t - (0.8 * 1e4 + 0.2 * 1e7)).abs() < 1.0, "{t}");
        // Without an estimate yet, it becomes the estimate.
        let state = MorselState::default();
        let mut sizer = MorselSizer::new(&policy, &state, T_MAX, 1);
        sizer.resumed_done(100, Duration::from_millis(10));
        assert_eq!(state.throughput(), Some(1e4));
        // Fixed morsels keep no estimate.
        let fixed = MorselPolicy::Fixed(10);
        let state = MorselState::default();
        let mut sizer = MorselSizer::new(&fixed, &state, T_MAX, 1);
        sizer.resumed_done(100, Duration::from_millis(10));
        assert_eq!(state.throughput(), None);
    }

    #[test]
    fn shutdown_splits_the_rest_over_the_workers() {
        let policy = one_morsel_per_task();
        let state = MorselState::default();
        state.set_throughput(1e7);
        // 4 workers, 40 000 tuples left = 4 ms < W·t_max: morsels of 1 ms.
        let sizes = task(&policy, &state, 4, 100, 40_000);
        assert_eq!(sizes[0], 10_000);
    }

    #[test]
    fn fixed_morsels_fill_t_max() {
        let policy = MorselPolicy::Fixed(1000);
        let state = MorselState::default();
        // 100 µs per morsel: the task runs 20 of them before t_max is used up.
        let sizes = task(&policy, &state, 1, 100, 1 << 30);
        assert_eq!(sizes.len(), 20);
        assert!(sizes.iter().all(|&n| n == 1000));
    }
}

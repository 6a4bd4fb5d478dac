//! Temporal scheduling policies: which active resource group a worker serves next.
//!
//! * **FIFO** — the oldest group that can run a task (seed 001's baseline).
//! * **Fair** — stride scheduling with fixed priorities: every group has a
//!   *pass*; a worker serves the runnable group with the smallest pass and
//!   advances it by the CPU time the task used divided by the group's
//!   priority. Equal priorities share the workers equally.
//! * **Stride with decaying priorities** (seed 001 §3.2) — as fair, but a
//!   group starts at priority `p0` and, after `d_start` quanta of CPU time
//!   (one quantum = `t_max`), every further quantum multiplies its priority by
//!   `λ`, down to `p_min`. Short queries finish before long ones that arrived
//!   at the same time, and a newly arrived query overtakes long-running ones.
//!
//! New groups enter with the smallest pass among the active groups (the
//! scheduler's virtual time), so a newcomer neither starves nor is starved.
//! Pass arithmetic is in quanta, so priorities mean the same for any `t_max`.
//!
//! The state here is global and lives under the run-queue lock. The lock-free
//! core of seed 001 §2.3 keeps the same per-group numbers thread-local per
//! worker; the arithmetic in this module is what both use.

use std::time::Duration;

/// Parameters of decaying priorities (seed 001 §3.2 / §4).
#[derive(Debug, Clone, PartialEq)]
pub struct DecayParams {
    /// Initial priority `p0` (seed: 10^4).
    pub p0: f64,
    /// Priority floor `p_min` (seed: 100); guarantees progress.
    pub p_min: f64,
    /// Decay factor `λ` per quantum after the onset (seed's start value: 0.9).
    pub lambda: f64,
    /// Quanta of CPU time before the decay starts (`d_start`). Chosen by
    /// self-tuning in the seed; 5 quanta (10 ms at t_max = 2 ms) here.
    pub d_start: u32,
}

impl Default for DecayParams {
    fn default() -> Self {
        DecayParams {
            p0: 1e4,
            p_min: 100.0,
            lambda: 0.9,
            d_start: 5,
        }
    }
}

/// The scheduler's policy.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Policy {
    /// Oldest runnable group first.
    #[default]
    Fifo,
    /// Stride scheduling, every group at the same fixed priority.
    Fair,
    /// Stride scheduling with decaying priorities.
    Stride(DecayParams),
}

impl Policy {
    /// Parses a policy name as used by `--policy` and settings.
    pub fn parse(name: &str) -> Option<Policy> {
        match name.trim().to_ascii_lowercase().as_str() {
            "fifo" => Some(Policy::Fifo),
            "fair" => Some(Policy::Fair),
            "stride" | "decay" => Some(Policy::Stride(DecayParams::default())),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::Fair => "fair",
            Policy::Stride(_) => "stride",
        }
    }
}

/// What the submitter tells the scheduler about a query (resource group).
///
/// Everything here is optional knowledge: the default describes an ordinary
/// query of the default user about which nothing is known.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupFacts {
    /// Priority of the query's user (seed 001 §3.2, "custom priorities"):
    /// scales `p0` and `p_min` of decaying priorities and the fixed priority
    /// of the fair policy. 1.0 is the default user.
    pub user_priority: f64,
    /// A static priority for this query: it never decays (seed 001 §3.2 (1)).
    pub static_priority: bool,
    /// Estimated CPU work of each task set, when the engine has recorded it
    /// for this query before (SRPT / IF-SRPT); `None` when unknown.
    pub estimates: Option<Vec<TaskSetEstimate>>,
}

impl Default for GroupFacts {
    fn default() -> Self {
        GroupFacts {
            user_priority: 1.0,
            static_priority: false,
            estimates: None,
        }
    }
}

/// Recorded cost of one task set (pipeline) of a query.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSetEstimate {
    /// CPU time the task set took (summed over workers).
    pub work: Duration,
    /// Whether the task set can use every worker (seed 000: elastic) or only
    /// a few (inelastic, e.g. a single-morsel finalization-like pipeline).
    pub elastic: bool,
}

/// What a worker knows when ranking the active groups.
#[derive(Debug)]
pub struct RankContext<'a> {
    /// Active resource groups (occupied slots).
    pub active_groups: usize,
    /// Number of workers.
    pub workers: usize,
    /// The worker's own seeded random stream (lottery).
    pub rng: &'a mut Rng,
}

/// A small seeded xorshift64* generator; each worker owns one.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// Uniform in (0, 1].
    pub fn next_f64(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        let bits = x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        (bits as f64 + 1.0) / (1u64 << 53) as f64
    }
}

/// Per-group scheduling state as one worker sees it. The run queue (and the
/// lock-free core's thread-local view) stores one per active group and only
/// ever calls the methods below: policies differ only in this type's
/// arithmetic.
#[derive(Debug, Clone, Default)]
pub struct StrideState {
    /// Virtual time this group has consumed, in quanta / priority.
    pub pass: f64,
    /// Current priority.
    pub priority: f64,
    /// CPU time received, in quanta.
    pub quanta: f64,
    /// Admission order (smaller arrived earlier); FIFO ranks by it.
    pub arrival: u64,
}

impl StrideState {
    /// State of a group entering at virtual time `now_pass` as the
    /// `arrival`-th admitted group.
    pub fn enter(policy: &Policy, facts: &GroupFacts, arrival: u64, now_pass: f64) -> Self {
        let _ = facts;
        let priority = match policy {
            Policy::Stride(d) => d.p0,
            _ => 1e4,
        };
        StrideState {
            pass: now_pass,
            priority,
            quanta: 0.0,
            arrival,
        }
    }

    /// The group's next task set became active (seed 001 §2.3 event (3)):
    /// the pass restarts at the worker's virtual time, the priority is kept.
    pub fn task_set_activated(&mut self, policy: &Policy, task_set: usize, now_pass: f64) {
        let _ = (policy, task_set);
        self.pass = self.pass.max(now_pass);
    }

    /// Rank of the group: a worker serves the runnable group of smallest
    /// rank (ties: earlier arrival).
    pub fn rank(&self, policy: &Policy, ctx: &mut RankContext<'_>) -> f64 {
        let _ = ctx;
        match policy {
            Policy::Fifo => self.arrival as f64,
            Policy::Fair | Policy::Stride(_) => self.pass,
        }
    }

    /// Charges a task that ran for `ran` (with target duration `t_max`):
    /// advances the pass at the current priority, then applies the decay of
    /// equation (2) for every whole quantum completed past the onset.
    pub fn charge(&mut self, policy: &Policy, ran: Duration, t_max: Duration) {
        let q = ran.as_secs_f64() / t_max.as_secs_f64().max(1e-9);
        self.pass += q / self.priority.max(1e-9);
        let before = self.quanta;
        self.quanta += q;
        if let Policy::Stride(d) = policy {
            let onset = f64::from(d.d_start);
            let decayed_quanta = (self.quanta.floor() - before.floor().max(onset)).max(0.0);
            if decayed_quanta > 0.0 {
                self.priority = (self.priority * d.lambda.powf(decayed_quanta)).max(d.p_min);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: Duration = Duration::from_millis(2);

    #[test]
    fn priority_stays_at_p0_until_the_onset_then_decays_to_the_floor() {
        let policy = Policy::Stride(DecayParams::default());
        let mut s = StrideState::enter(&policy, &GroupFacts::default(), 0, 0.0);
        for _ in 0..5 {
            s.charge(&policy, Q, Q);
        }
        assert_eq!(s.priority, 1e4);
        s.charge(&policy, Q, Q);
        assert!((s.priority - 9e3).abs() < 1e-6, "{}", s.priority);
        for _ in 0..200 {
            s.charge(&policy, Q, Q);
        }
        assert_eq!(s.priority, 100.0);
    }

    #[test]
    fn fair_priorities_never_change_and_pass_grows_with_cpu_time() {
        let mut s = StrideState::enter(&Policy::Fair, &GroupFacts::default(), 0, 1.0);
        s.charge(&Policy::Fair, Q * 3, Q);
        assert_eq!(s.priority, 1e4);
        assert!((s.pass - (1.0 + 3.0 / 1e4)).abs() < 1e-12);
    }

    #[test]
    fn parse_names() {
        assert_eq!(Policy::parse("FIFO"), Some(Policy::Fifo));
        assert_eq!(Policy::parse("fair"), Some(Policy::Fair));
        assert!(matches!(Policy::parse("stride"), Some(Policy::Stride(_))));
        assert_eq!(Policy::parse("srpt-someday"), None);
    }
}

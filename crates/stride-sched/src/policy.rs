//! Temporal scheduling policies: which active resource group a worker serves next.
//!
//! Every policy is arithmetic on one per-group [`StrideState`]: the scheduler
//! core calls [`StrideState::enter`], [`StrideState::task_set_activated`],
//! [`StrideState::rank`] and [`StrideState::charge`] and serves the runnable
//! group of smallest rank (the earlier arrival on ties). The simulator
//! ([`crate::sim`]) drives the very same methods with a virtual clock.
//!
//! * **FIFO** — the oldest group that can run a task (seed 001's baseline).
//! * **Fair** — stride scheduling with fixed priorities: every group has a
//!   *pass*, advanced by the CPU time each of its tasks used divided by the
//!   group's priority (its *stride* per quantum); a worker serves the
//!   runnable group whose next quantum would end first in virtual time,
//!   `pass + 1/priority` — the order of Waldspurger's stride scheduling,
//!   whose pass already includes the next quantum, and of weighted fair
//!   queueing's virtual finish times. Equal priorities share the workers
//!   equally; at quantum granularity this is round-robin processor sharing
//!   (see [`crate::sim`]).
//! * **Stride with decaying priorities** (seed 001 §3.2) — as fair, but a
//!   group starts at priority `p0` and, after `d_start` quanta of CPU time
//!   (one quantum = `t_max`), every further quantum multiplies its priority by
//!   `λ`, down to `p_min`. Short queries finish before long ones that arrived
//!   at the same time, and a newly arrived query overtakes long-running ones.
//!   At the floor the decayed groups share the workers, as in the seed
//!   ([`FloorOrder::Share`]); the variant `stride-queue`
//!   ([`FloorOrder::Queue`]) has the decayed groups of one floor priority
//!   take, together, the share the seed gives them, but run in arrival
//!   order instead of sharing it among themselves.
//! * **Lottery** (Waldspurger and Weihl, mentioned by seed 001 §2) — every
//!   decision is a lottery in which a group holds as many tickets as it has
//!   priority (the fair policy's priority); the group holding the winning
//!   ticket runs. Implemented as an exponential race with the worker's seeded
//!   [`Rng`], so the expected share of decisions is proportional to tickets.
//! * **SRPT** (seed 000 §2.2.3, §3.2.1) — shortest remaining processing time:
//!   the rank is the group's estimated remaining CPU work, the sum of the
//!   recorded estimates ([`GroupFacts::estimates`]) of the active and later
//!   task sets minus the CPU time already charged to the active one (floored
//!   at 1 µs). Without estimates it ranks by the CPU time received so far
//!   (*least attained service*), which approximates SRPT when query sizes are
//!   heavy-tailed: a group that has run long is likely to run much longer.
//! * **IF-SRPT** (seed 000 §3.2.2) — inelastic first: groups whose active task
//!   set is inelastic ([`TaskSetEstimate::elastic`] false) are served before
//!   all groups with an elastic active task set; within each class by
//!   remaining work as SRPT. Elastic work is deferred because it can soak up
//!   whatever workers the inelastic work leaves idle. Without estimates the
//!   class is unknown and every group counts as elastic (IF-SRPT = SRPT).
//! * **THRESHOLD** (seed 000 §3.2.2) — IF-SRPT at low load, SRPT at high load.
//!   The seed switches to SRPT "when an excessive number of jobs are in the
//!   inelastic queue" and gives no number; a rank sees only the number of
//!   active groups and workers ([`RankContext`]), so Stride uses SRPT when
//!   `active_groups > load · workers` ([`ThresholdParams::load`], default 1):
//!   once there are more groups than workers, the inelastic ones alone can
//!   keep every worker busy and deferring elastic work gains nothing.
//!
//! **User priorities** (seed 001 §3.2, custom priorities): a group's
//! [`GroupFacts::user_priority`] `u` scales `p0` and `p_min` of decaying
//! priorities (2) and the fixed priority of fair and lottery (1); SRPT-family
//! ranks divide the remaining work by `u` (weighted SRPT). A group with
//! [`GroupFacts::static_priority`] keeps `p0·u` forever (1): it is always
//! treated like a query that has just arrived. FIFO ignores both.
//!
//! New groups enter with the smallest pass among the active groups (the
//! scheduler's virtual time), so a newcomer neither starves nor is starved.
//! Ranking by the end of the next quantum rather than by the pass itself
//! matters for decaying priorities: a newcomer at `p0` enters at the pass of
//! the decayed groups sitting at the virtual time, and ranked by pass it
//! would wait for one quantum of each of them (it loses the tie, then its
//! first quantum puts it behind them all); ranked by the end of its next
//! quantum (`1/p0` against their `1/p_min`) it runs first. In the simulator
//! that took the short class of seed 001's mix from a mean slowdown of 1.72
//! to 1.11 (`tests/slice_latency.rs`, modelled).
//! Pass arithmetic is in quanta, so priorities mean the same for any `t_max`.
//! Remaining-work arithmetic is in seconds of CPU time.
//!
//! The state is per group as one scheduler view sees it: under the run-queue
//! lock it is global; the lock-free core of seed 001 §2.3 keeps one per slot
//! per worker, charged only with that worker's own tasks. SRPT's "CPU charged
//! to the active task set" is then the worker's own share; the estimates are
//! whole-query CPU times, so a core with per-worker state should compare like
//! with like (e.g. scale estimates by `1/workers`, or ranks stay a consistent
//! over-estimate for all groups alike).

use std::sync::Arc;
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
    /// self-tuning in the seed ([`crate::tuning`]); 5 quanta (10 ms at
    /// t_max = 2 ms) until tuned.
    pub d_start: u32,
    /// How groups that have decayed to the floor share the workers.
    pub floor: FloorOrder,
}

/// How groups at the priority floor `p_min` are ordered among themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FloorOrder {
    /// As the seed: every decayed group keeps advancing its pass at `p_min`,
    /// so the decayed groups share the workers equally (processor sharing
    /// among the long queries). The default.
    #[default]
    Share,
    /// The decayed groups of one floor priority form a queue served in
    /// arrival order: a worker keeps their passes equal (a charge to one
    /// raises the others' to its pass), so they tie, and ties go to the
    /// earlier arrival. Against everyone else the queue's pass moves as the
    /// smallest pass of as many sharing decayed groups would, so groups
    /// above the floor (newcomers, static priorities) get the share they
    /// get under [`FloorOrder::Share`]. Fewer long queries are half done at any time:
    /// under bursts of long arrivals their mean latency falls (the first
    /// finishes at once instead of all at the end), and so does the memory
    /// they hold in flight. Groups of different user priorities have
    /// different floors and form separate queues, which share as the seed's
    /// decayed groups do. Policy name `stride-queue`; on the engine it
    /// measured no better than sharing (docs/experiments.md, "Decayed
    /// queries queue").
    Queue,
}

impl Default for DecayParams {
    fn default() -> Self {
        DecayParams {
            p0: 1e4,
            p_min: 100.0,
            lambda: 0.9,
            d_start: 5,
            floor: FloorOrder::default(),
        }
    }
}

/// Parameter of THRESHOLD (seed 000 §3.2.2).
#[derive(Debug, Clone, PartialEq)]
pub struct ThresholdParams {
    /// SRPT while `active_groups > load · workers`, IF-SRPT otherwise.
    pub load: f64,
}

impl Default for ThresholdParams {
    fn default() -> Self {
        ThresholdParams { load: 1.0 }
    }
}

/// The fixed priority of fair and lottery (and FIFO's unused one) for the
/// default user: the same as decaying priorities' `p0`.
pub const BASE_PRIORITY: f64 = 1e4;

/// Floor of SRPT's remaining-work estimate, in seconds (1 µs): a group whose
/// estimate ran out is still ranked by what follows it, never below zero.
pub const MIN_REMAINING: f64 = 1e-6;

/// Rank offset that puts every elastic group behind every inelastic one under
/// IF-SRPT (seconds; larger than any plausible remaining work).
const ELASTIC_OFFSET: f64 = 1e12;

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
    /// Lottery scheduling: tickets = fixed priority.
    Lottery,
    /// Shortest remaining processing time (least attained service without
    /// estimates).
    Srpt,
    /// Inelastic-first SRPT.
    IfSrpt,
    /// IF-SRPT at low load, SRPT at high load.
    Threshold(ThresholdParams),
    /// A policy defined outside this crate ([`RankRule`]): a new policy is
    /// one implementation of that trait, not an edit of this enum and of
    /// every match on it.
    Custom(CustomPolicy),
}

/// A scheduling policy as a rule over a group's [`StrideState`], for
/// policies beyond the built-in ones ([`Policy::Custom`]). The decision core
/// (`decision.rs`) and the simulator call it exactly where they call the
/// built-in policies' arithmetic; every method but [`RankRule::rank`] has
/// the default of a policy without priorities that change.
pub trait RankRule: Send + Sync {
    /// The name shown by `SHOW stride.policy` and in reports.
    fn name(&self) -> &'static str;

    /// A group's rank: a worker serves the runnable group of smallest rank
    /// (ties: the earlier arrival). Must be cheap: it runs on every
    /// decision when the rank is not stable, on every state change of the
    /// group when it is.
    fn rank(&self, state: &StrideState, ctx: &mut RankContext<'_>) -> f64;

    /// The priority a group enters with (its user priority already
    /// sanitized in `user_priority`).
    fn initial_priority(&self, user_priority: f64) -> f64 {
        BASE_PRIORITY * user_priority
    }

    /// Called after a task was charged: `quanta_before` is the group's
    /// quanta before the charge (priority decay, if the rule has one).
    fn charged(&self, state: &mut StrideState, quanta_before: f64) {
        let _ = (state, quanta_before);
    }

    /// Whether a group's rank changes only with its own state (and
    /// [`RankRule::high_load`]): then ranks are cached between changes.
    fn rank_is_stable(&self) -> bool {
        true
    }

    /// A load regime the rank depends on (as THRESHOLD's): when its value
    /// flips, every cached rank is recomputed.
    fn high_load(&self, active_groups: usize, workers: usize) -> bool {
        let _ = (active_groups, workers);
        false
    }
}

/// A [`RankRule`] as a policy value: cloned cheaply, equal only to itself.
#[derive(Clone)]
pub struct CustomPolicy(pub Arc<dyn RankRule>);

impl CustomPolicy {
    pub fn new(rule: impl RankRule + 'static) -> Self {
        CustomPolicy(Arc::new(rule))
    }
}

impl std::fmt::Debug for CustomPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CustomPolicy").field(&self.0.name()).finish()
    }
}

impl PartialEq for CustomPolicy {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Policy {
    /// Parses a policy name as used by `--policy` and settings:
    /// `fifo`, `fair`, `stride` (or `decay`; seed 001's decaying
    /// priorities), `stride-queue` (the same with [`FloorOrder::Queue`]), `lottery`,
    /// `srpt`, `if-srpt` (or `ifsrpt`, `if_srpt`), `threshold`.
    pub fn parse(name: &str) -> Option<Policy> {
        match name.trim().to_ascii_lowercase().as_str() {
            "fifo" | "fcfs" => Some(Policy::Fifo),
            "fair" => Some(Policy::Fair),
            "stride" | "decay" => Some(Policy::Stride(DecayParams::default())),
            "stride-queue" => Some(Policy::Stride(DecayParams {
                floor: FloorOrder::Queue,
                ..DecayParams::default()
            })),
            "lottery" => Some(Policy::Lottery),
            "srpt" => Some(Policy::Srpt),
            "if-srpt" | "ifsrpt" | "if_srpt" => Some(Policy::IfSrpt),
            "threshold" => Some(Policy::Threshold(ThresholdParams::default())),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::Fair => "fair",
            Policy::Stride(d) if d.floor == FloorOrder::Queue => "stride-queue",
            Policy::Stride(_) => "stride",
            Policy::Lottery => "lottery",
            Policy::Srpt => "srpt",
            Policy::IfSrpt => "if-srpt",
            Policy::Threshold(_) => "threshold",
            Policy::Custom(c) => c.0.name(),
        }
    }

    /// The decay parameters, for a decaying-priority policy.
    pub fn decay(&self) -> Option<&DecayParams> {
        match self {
            Policy::Stride(d) => Some(d),
            _ => None,
        }
    }

    /// Whether a group's [`StrideState::rank`] changes only when its own
    /// state does ([`StrideState::enter`], [`StrideState::task_set_activated`],
    /// [`StrideState::charge`]) or, for THRESHOLD, when the load regime
    /// ([`Policy::high_load`]) flips. Such ranks can be cached between those
    /// events (the worker's local view does). Lottery's ranks are fresh
    /// random draws per decision: not stable.
    pub fn rank_is_stable(&self) -> bool {
        match self {
            Policy::Lottery => false,
            Policy::Custom(c) => c.0.rank_is_stable(),
            _ => true,
        }
    }

    /// Whether the policy divides the machine among groups in proportion to
    /// their priorities (fair, stride, lottery): only such policies switch
    /// groups task by task when nothing new arrives, and only they are
    /// served in time slices ([`crate::SchedulerConfig::slice`]).
    pub fn shares_time(&self) -> bool {
        matches!(self, Policy::Fair | Policy::Stride(_) | Policy::Lottery)
    }

    /// THRESHOLD's load regime: `true` (rank as SRPT) while
    /// `active_groups > load · workers`, `false` (IF-SRPT) otherwise. Every
    /// other policy's ranks ignore the load: always `false`.
    pub fn high_load(&self, active_groups: usize, workers: usize) -> bool {
        match self {
            Policy::Threshold(t) => active_groups as f64 > t.load * workers.max(1) as f64,
            Policy::Custom(c) => c.0.high_load(active_groups, workers),
            _ => false,
        }
    }

    /// This policy with its decay parameters replaced by `params` (what
    /// self-tuning pushes into the scheduler); other policies are returned
    /// unchanged.
    pub fn with_decay(&self, params: DecayParams) -> Policy {
        match self {
            Policy::Stride(_) => Policy::Stride(params),
            other => other.clone(),
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

    /// Exponentially distributed with rate 1 (mean 1): `-ln U`, U in (0, 1].
    /// Divide by a rate for other means (Poisson inter-arrival times,
    /// lottery races).
    pub fn next_exp(&mut self) -> f64 {
        -self.next_f64().ln()
    }
}

/// A query's task-set estimates in the form ranks need: seconds of work per
/// task set, the work of all later task sets, and the elastic flag. Shared
/// (`Arc`) so that per-worker copies of a [`StrideState`] stay cheap.
#[derive(Debug, PartialEq)]
pub struct EstimateTable {
    /// Estimated CPU seconds of each task set.
    work: Vec<f64>,
    /// `later[i]`: estimated CPU seconds of task sets `i+1..`.
    later: Vec<f64>,
    elastic: Vec<bool>,
}

impl EstimateTable {
    pub fn new(estimates: &[TaskSetEstimate]) -> Self {
        let work: Vec<f64> = estimates.iter().map(|e| e.work.as_secs_f64()).collect();
        let mut later = vec![0.0; work.len()];
        for i in (0..work.len().saturating_sub(1)).rev() {
            later[i] = later[i + 1] + work[i + 1];
        }
        EstimateTable {
            work,
            later,
            elastic: estimates.iter().map(|e| e.elastic).collect(),
        }
    }

    /// Estimated remaining CPU seconds when task set `active` has received
    /// `charged` seconds: `max(work[active] − charged, 0) + later[active]`,
    /// at least [`MIN_REMAINING`]. Past the recorded task sets: the floor.
    pub fn remaining(&self, active: usize, charged: f64) -> f64 {
        match (self.work.get(active), self.later.get(active)) {
            (Some(w), Some(l)) => ((w - charged).max(0.0) + l).max(MIN_REMAINING),
            _ => MIN_REMAINING,
        }
    }

    /// Whether task set `active` is elastic (unrecorded ones count as elastic).
    pub fn elastic(&self, active: usize) -> bool {
        self.elastic.get(active).copied().unwrap_or(true)
    }
}

/// Per-group scheduling state as one worker sees it. Each worker's local
/// view of the lock-free core (`local.rs`) and the simulator store one per
/// active group and only ever call the methods below: policies differ only
/// in this type's arithmetic.
#[derive(Debug, Clone)]
pub struct StrideState {
    /// Virtual time this group has consumed, in quanta / priority.
    pub pass: f64,
    /// Current priority (lottery: tickets).
    pub priority: f64,
    /// CPU time received, in quanta.
    pub quanta: f64,
    /// Admission order (smaller arrived earlier); FIFO ranks by it.
    pub arrival: u64,
    /// The user's priority `u` (scales `p0`, `p_min`, fixed priorities and
    /// divides SRPT ranks).
    pub user_priority: f64,
    /// The priority never decays (seed 001 §3.2 (1)).
    pub static_priority: bool,
    /// Index of the group's active task set.
    pub task_set: usize,
    /// CPU seconds charged since the active task set was activated.
    pub task_set_cpu: f64,
    /// CPU seconds charged in total.
    pub cpu: f64,
    /// Recorded task-set estimates (SRPT family), if any.
    pub estimates: Option<Arc<EstimateTable>>,
}

impl Default for StrideState {
    fn default() -> Self {
        StrideState {
            pass: 0.0,
            priority: BASE_PRIORITY,
            quanta: 0.0,
            arrival: 0,
            user_priority: 1.0,
            static_priority: false,
            task_set: 0,
            task_set_cpu: 0.0,
            cpu: 0.0,
            estimates: None,
        }
    }
}

impl StrideState {
    /// State of a group entering at virtual time `now_pass` as the
    /// `arrival`-th admitted group.
    pub fn enter(policy: &Policy, facts: &GroupFacts, arrival: u64, now_pass: f64) -> Self {
        // A non-positive or non-finite user priority would stop the pass (or
        // make it run backwards); such a user is treated as the default one.
        let user_priority = if facts.user_priority.is_finite() && facts.user_priority > 0.0 {
            facts.user_priority
        } else {
            1.0
        };
        let priority = match policy {
            Policy::Stride(d) => d.p0 * user_priority,
            Policy::Custom(c) => c.0.initial_priority(user_priority),
            _ => BASE_PRIORITY * user_priority,
        };
        StrideState {
            pass: now_pass,
            priority,
            quanta: 0.0,
            arrival,
            user_priority,
            static_priority: facts.static_priority,
            task_set: 0,
            task_set_cpu: 0.0,
            cpu: 0.0,
            estimates: facts
                .estimates
                .as_deref()
                .map(|e| Arc::new(EstimateTable::new(e))),
        }
    }

    /// The group's next task set became active (seed 001 §2.3 event (3)):
    /// the pass restarts at the worker's virtual time, the priority is kept;
    /// SRPT's per-task-set accounting moves on to `task_set`.
    pub fn task_set_activated(&mut self, policy: &Policy, task_set: usize, now_pass: f64) {
        let _ = policy;
        self.pass = self.pass.max(now_pass);
        self.task_set = task_set;
        self.task_set_cpu = 0.0;
    }

    /// Estimated remaining CPU seconds (SRPT): from the estimates, or the
    /// attained service when there are none (least attained service).
    pub fn remaining_work(&self) -> f64 {
        match &self.estimates {
            Some(t) => t.remaining(self.task_set, self.task_set_cpu),
            None => self.cpu.max(MIN_REMAINING),
        }
    }

    /// Whether the active task set is known to be inelastic.
    pub fn inelastic(&self) -> bool {
        self.estimates
            .as_ref()
            .is_some_and(|t| !t.elastic(self.task_set))
    }

    fn srpt_rank(&self) -> f64 {
        self.remaining_work() / self.user_priority
    }

    fn if_srpt_rank(&self) -> f64 {
        let class = if self.inelastic() {
            0.0
        } else {
            ELASTIC_OFFSET
        };
        class + self.srpt_rank()
    }

    /// Rank of the group: a worker serves the runnable group of smallest
    /// rank (ties: earlier arrival).
    pub fn rank(&self, policy: &Policy, ctx: &mut RankContext<'_>) -> f64 {
        match policy {
            Policy::Fifo => self.arrival as f64,
            // The virtual time at which the group's next quantum would end.
            Policy::Fair | Policy::Stride(_) => self.pass + 1.0 / self.priority.max(1e-9),
            // Lottery as an exponential race: each runnable group draws
            // X = −ln(U)/tickets, an exponential variable with rate `tickets`,
            // and the smallest draw wins. For independent exponentials the
            // minimum is X_i with probability tickets_i / Σ tickets_j — the
            // same as drawing one ticket uniformly among all runnable groups'
            // tickets, i.e. lottery scheduling, with one fresh draw per group
            // per decision and no global ticket sum to maintain.
            Policy::Lottery => ctx.rng.next_exp() / self.priority.max(1e-9),
            Policy::Srpt => self.srpt_rank(),
            Policy::IfSrpt => self.if_srpt_rank(),
            Policy::Threshold(_) => {
                if policy.high_load(ctx.active_groups, ctx.workers) {
                    self.srpt_rank()
                } else {
                    self.if_srpt_rank()
                }
            }
            Policy::Custom(c) => c.0.rank(self, ctx),
        }
    }

    /// The floor priority `p_min·u` of the group when it has decayed to it
    /// and decayed groups queue ([`FloorOrder::Queue`]); `None` otherwise.
    /// Groups with the same floor form one queue: the decision core keeps
    /// their passes equal ([`crate::decision`]'s `charge`).
    pub fn queued_floor(&self, policy: &Policy) -> Option<f64> {
        match policy {
            Policy::Stride(d) if d.floor == FloorOrder::Queue && !self.static_priority => {
                let floor = d.p_min * self.user_priority;
                (self.priority <= floor).then_some(floor)
            }
            _ => None,
        }
    }

    /// Charges a task that ran for `ran` (with target duration `t_max`):
    /// advances the pass at the current priority, then applies the decay of
    /// equation (2) for every whole quantum completed past the onset (not for
    /// a static priority), never below `p_min·u`.
    pub fn charge(&mut self, policy: &Policy, ran: Duration, t_max: Duration) {
        let secs = ran.as_secs_f64();
        self.cpu += secs;
        self.task_set_cpu += secs;
        let q = secs / t_max.as_secs_f64().max(1e-9);
        self.pass += q / self.priority.max(1e-9);
        let before = self.quanta;
        self.quanta += q;
        if let Policy::Custom(c) = policy {
            c.0.charged(self, before);
            return;
        }
        if let Policy::Stride(d) = policy {
            if self.static_priority {
                return;
            }
            let onset = f64::from(d.d_start);
            let decayed_quanta = (self.quanta.floor() - before.floor().max(onset)).max(0.0);
            if decayed_quanta > 0.0 {
                let floor = d.p_min * self.user_priority;
                self.priority = (self.priority * d.lambda.powf(decayed_quanta)).max(floor);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: Duration = Duration::from_millis(2);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn facts_with(sets: &[(u64, bool)]) -> GroupFacts {
        GroupFacts {
            estimates: Some(
                sets.iter()
                    .map(|&(work, elastic)| TaskSetEstimate {
                        work: ms(work),
                        elastic,
                    })
                    .collect(),
            ),
            ..GroupFacts::default()
        }
    }

    fn rank_of(s: &StrideState, policy: &Policy, active_groups: usize, workers: usize) -> f64 {
        let mut rng = Rng::new(1);
        s.rank(
            policy,
            &mut RankContext {
                active_groups,
                workers,
                rng: &mut rng,
            },
        )
    }

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

    /// Charges `s` until its priority reaches the floor.
    fn decay_to_floor(s: &mut StrideState, policy: &Policy) {
        for _ in 0..100 {
            s.charge(policy, Q, Q);
        }
        assert_eq!(s.priority, 100.0);
    }

    #[test]
    fn only_a_decayed_group_under_the_queue_rule_is_queued_at_its_floor() {
        let policy = Policy::parse("stride-queue").unwrap();
        let mut s = StrideState::enter(&policy, &GroupFacts::default(), 0, 0.0);
        assert_eq!(s.queued_floor(&policy), None, "above the floor");
        decay_to_floor(&mut s, &policy);
        assert_eq!(s.queued_floor(&policy), Some(100.0));
        // A user of priority 2 has its own floor, so its own queue.
        let two = GroupFacts {
            user_priority: 2.0,
            ..GroupFacts::default()
        };
        let mut high = StrideState::enter(&policy, &two, 0, 0.0);
        for _ in 0..100 {
            high.charge(&policy, Q, Q);
        }
        assert_eq!(high.queued_floor(&policy), Some(200.0));
        let share = Policy::parse("stride").unwrap();
        assert_eq!(share, Policy::Stride(DecayParams::default()));
        assert_eq!(s.queued_floor(&share), None);
        assert_eq!(s.queued_floor(&Policy::Fair), None);
        let fixed = GroupFacts {
            static_priority: true,
            ..GroupFacts::default()
        };
        let mut never = StrideState::enter(&policy, &fixed, 0, 0.0);
        for _ in 0..100 {
            never.charge(&policy, Q, Q);
        }
        assert_eq!(never.queued_floor(&policy), None);
    }

    #[test]
    fn shared_at_the_floor_decayed_groups_take_turns() {
        let policy = Policy::parse("stride").unwrap();
        let mut first = StrideState::enter(&policy, &GroupFacts::default(), 0, 0.0);
        decay_to_floor(&mut first, &policy);
        let mut second = StrideState::enter(&policy, &GroupFacts::default(), 1, 0.0);
        decay_to_floor(&mut second, &policy);
        assert_eq!(first.pass, second.pass);
        // One quantum at p_min advances the pass by 1/p_min, and the
        // second group's turn comes.
        first.charge(&policy, Q, Q);
        assert!((first.pass - second.pass - 0.01).abs() < 1e-9);
        assert!(rank_of(&second, &policy, 2, 2) < rank_of(&first, &policy, 2, 2));
    }

    #[test]
    fn fair_priorities_never_change_and_pass_grows_with_cpu_time() {
        let mut s = StrideState::enter(&Policy::Fair, &GroupFacts::default(), 0, 1.0);
        s.charge(&Policy::Fair, Q * 3, Q);
        assert_eq!(s.priority, 1e4);
        assert!((s.pass - (1.0 + 3.0 / 1e4)).abs() < 1e-12);
    }

    #[test]
    fn user_priority_scales_p0_and_the_floor_and_the_fair_priority() {
        let policy = Policy::Stride(DecayParams::default());
        let facts = GroupFacts {
            user_priority: 2.0,
            ..GroupFacts::default()
        };
        let mut s = StrideState::enter(&policy, &facts, 0, 0.0);
        assert_eq!(s.priority, 2e4);
        for _ in 0..500 {
            s.charge(&policy, Q, Q);
        }
        assert_eq!(s.priority, 200.0);
        let fair = StrideState::enter(&Policy::Fair, &facts, 0, 0.0);
        assert_eq!(fair.priority, 2e4);
        // Nonsense user priorities fall back to the default user.
        let bad = GroupFacts {
            user_priority: -3.0,
            ..GroupFacts::default()
        };
        assert_eq!(
            StrideState::enter(&Policy::Fair, &bad, 0, 0.0).priority,
            1e4
        );
    }

    #[test]
    fn a_static_priority_never_decays() {
        let policy = Policy::Stride(DecayParams::default());
        let facts = GroupFacts {
            static_priority: true,
            user_priority: 3.0,
            ..GroupFacts::default()
        };
        let mut s = StrideState::enter(&policy, &facts, 0, 0.0);
        for _ in 0..100 {
            s.charge(&policy, Q, Q);
        }
        assert_eq!(s.priority, 3e4);
        assert!((s.pass - 100.0 / 3e4).abs() < 1e-12);
    }

    #[test]
    fn srpt_ranks_by_estimated_remaining_work_across_task_sets() {
        let policy = Policy::Srpt;
        let mut s = StrideState::enter(&policy, &facts_with(&[(10, true), (4, false)]), 0, 0.0);
        assert!((rank_of(&s, &policy, 1, 1) - 0.014).abs() < 1e-12);
        s.charge(&policy, ms(3), Q);
        assert!((rank_of(&s, &policy, 1, 1) - 0.011).abs() < 1e-12);
        // Running past the estimate leaves only the later task sets.
        s.charge(&policy, ms(20), Q);
        assert!((rank_of(&s, &policy, 1, 1) - 0.004).abs() < 1e-12);
        s.task_set_activated(&policy, 1, 0.0);
        s.charge(&policy, ms(1), Q);
        assert!((rank_of(&s, &policy, 1, 1) - 0.003).abs() < 1e-12);
        s.charge(&policy, ms(5), Q);
        assert_eq!(rank_of(&s, &policy, 1, 1), MIN_REMAINING);
        // Unrecorded task sets: the floor.
        s.task_set_activated(&policy, 7, 0.0);
        assert_eq!(rank_of(&s, &policy, 1, 1), MIN_REMAINING);
    }

    #[test]
    fn srpt_without_estimates_is_least_attained_service() {
        let policy = Policy::Srpt;
        let mut old = StrideState::enter(&policy, &GroupFacts::default(), 0, 0.0);
        let new = StrideState::enter(&policy, &GroupFacts::default(), 1, 0.0);
        old.charge(&policy, ms(8), Q);
        assert!(rank_of(&new, &policy, 2, 1) < rank_of(&old, &policy, 2, 1));
        assert!((rank_of(&old, &policy, 2, 1) - 0.008).abs() < 1e-12);
    }

    #[test]
    fn if_srpt_puts_inelastic_before_elastic_and_threshold_switches_on_load() {
        let big_inelastic =
            StrideState::enter(&Policy::IfSrpt, &facts_with(&[(100, false)]), 0, 0.0);
        let small_elastic = StrideState::enter(&Policy::IfSrpt, &facts_with(&[(1, true)]), 1, 0.0);
        assert!(
            rank_of(&big_inelastic, &Policy::IfSrpt, 2, 4)
                < rank_of(&small_elastic, &Policy::IfSrpt, 2, 4)
        );
        assert!(
            rank_of(&big_inelastic, &Policy::Srpt, 2, 4)
                > rank_of(&small_elastic, &Policy::Srpt, 2, 4)
        );
        let threshold = Policy::Threshold(ThresholdParams { load: 1.0 });
        // 2 groups on 4 workers: low load, IF-SRPT.
        assert!(
            rank_of(&big_inelastic, &threshold, 2, 4) < rank_of(&small_elastic, &threshold, 2, 4)
        );
        // 5 groups on 4 workers: high load, SRPT.
        assert!(
            rank_of(&big_inelastic, &threshold, 5, 4) > rank_of(&small_elastic, &threshold, 5, 4)
        );
    }

    #[test]
    fn weighted_srpt_divides_by_the_user_priority() {
        let mut facts = facts_with(&[(10, true)]);
        facts.user_priority = 2.0;
        let s = StrideState::enter(&Policy::Srpt, &facts, 0, 0.0);
        assert!((rank_of(&s, &Policy::Srpt, 1, 1) - 0.005).abs() < 1e-12);
    }

    #[test]
    fn lottery_ranks_are_random_and_scale_inversely_with_tickets() {
        let facts = GroupFacts {
            user_priority: 4.0,
            ..GroupFacts::default()
        };
        let rich = StrideState::enter(&Policy::Lottery, &facts, 0, 0.0);
        let poor = StrideState::enter(&Policy::Lottery, &GroupFacts::default(), 1, 0.0);
        // Same random draw: the rank scales with 1/tickets.
        assert!(
            (rank_of(&poor, &Policy::Lottery, 2, 1) / rank_of(&rich, &Policy::Lottery, 2, 1) - 4.0)
                .abs()
                < 1e-9
        );
        let mut rng = Rng::new(9);
        let mut ctx = RankContext {
            active_groups: 1,
            workers: 1,
            rng: &mut rng,
        };
        let a = poor.rank(&Policy::Lottery, &mut ctx);
        let b = poor.rank(&Policy::Lottery, &mut ctx);
        assert_ne!(a, b);
        assert!(a > 0.0 && b > 0.0);
    }

    #[test]
    fn exponential_samples_have_mean_one() {
        let mut rng = Rng::new(42);
        let n = 100_000;
        let mean = (0..n).map(|_| rng.next_exp()).sum::<f64>() / n as f64;
        assert!((mean - 1.0).abs() < 0.02, "{mean}");
    }

    #[test]
    fn parse_names() {
        assert_eq!(Policy::parse("FIFO"), Some(Policy::Fifo));
        assert_eq!(Policy::parse("fair"), Some(Policy::Fair));
        assert!(matches!(Policy::parse("stride"), Some(Policy::Stride(_))));
        assert_eq!(Policy::parse("srpt-someday"), None);
        for name in [
            "fifo",
            "fair",
            "stride",
            "stride-queue",
            "lottery",
            "srpt",
            "if-srpt",
            "threshold",
        ] {
            assert_eq!(Policy::parse(name).unwrap().name(), name);
        }
        assert_eq!(Policy::parse("IFSRPT"), Some(Policy::IfSrpt));
    }

    #[test]
    fn only_lottery_ranks_are_unstable_and_only_threshold_sees_the_load() {
        for name in ["fifo", "fair", "stride", "srpt", "if-srpt", "threshold"] {
            assert!(Policy::parse(name).unwrap().rank_is_stable(), "{name}");
        }
        assert!(!Policy::Lottery.rank_is_stable());
        let threshold = Policy::Threshold(ThresholdParams { load: 1.0 });
        assert!(!threshold.high_load(4, 4));
        assert!(threshold.high_load(5, 4));
        assert!(!Policy::Srpt.high_load(100, 1));
    }

    #[test]
    fn with_decay_replaces_only_stride_parameters() {
        let tuned = DecayParams {
            lambda: 0.5,
            d_start: 9,
            ..DecayParams::default()
        };
        let p = Policy::parse("stride").unwrap().with_decay(tuned.clone());
        assert_eq!(p.decay(), Some(&tuned));
        assert_eq!(Policy::Fair.with_decay(tuned), Policy::Fair);
    }
}

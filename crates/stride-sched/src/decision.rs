//! The decision core: one worker's scheduling state and the rules that turn
//! it into a choice (seed 001 §2.3, Figure 3).
//!
//! The core is driven by two callers through the same methods, in the same
//! order: the worker loop ([`crate::worker`], over the lock-free slots and
//! update masks, timing tasks with the wall clock) and the simulator
//! ([`crate::sim`], over a model of the slots, timing tasks with virtual
//! time). Neither makes a scheduling decision of its own: each reads slots
//! and hands what it read to [`DecisionCore::visit`] (a flagged slot) or
//! [`DecisionCore::confirm`] (the chosen slot), asks
//! [`DecisionCore::choose`], and reports what a task ran with
//! [`DecisionCore::charge`]. `tests/differential.rs` holds the two to the
//! same decisions on recorded workloads.
//!
//! Everything a scheduling decision reads lives here and is touched by the
//! owning worker only: the **activity mask** (one bit per slot whose task
//! set the worker believes runnable), per slot the group's [`StrideState`]
//! (pass, priority — the arithmetic is [`crate::policy`]'s), and the worker's
//! own **virtual time** (`max` of its previous value and the smallest pass
//! among its active slots, taken whenever a group enters or a task set is
//! activated: the pass a newcomer starts with).
//!
//! The local view may lag behind the global slots; it is corrected by:
//!
//! * the update masks: a pulled bit makes the worker *visit* the slot (pin,
//!   read, [`DecisionCore::visit`] with what it found, unpin), which enters a
//!   new group (event 2) or activates the next task set (event 3);
//! * picking: a slot found empty or tagged is deactivated (event 1); a slot
//!   found holding an entry other than the one the worker knows (a group or
//!   task set whose mask bit is not pulled yet) is learned first
//!   ([`DecisionCore::confirm`]).
//!
//! Groups are identified by their id (unique per scheduler), task sets by
//! their index; nothing here dereferences an entry — the caller describes
//! what it read as an [`EntryView`].
//!
//! **Cached ranks.** For policies whose ranks are stable between a group's
//! own state changes ([`Policy::rank_is_stable`]: all but lottery) the view
//! keeps each slot's `(rank, arrival)` in a tournament tree ([`RankTree`]):
//! a leaf is rewritten, and its path to the root replayed (`log2 slots`
//! comparisons), only when the slot's state changes — activation (enter or
//! next task set), charge, deactivation — and every leaf when the policy
//! changes or THRESHOLD's load regime ([`Policy::high_load`], a function of
//! the number of active slots) flips. A decision then reads the root: its
//! cost no longer grows with the number of active groups. Lottery draws
//! fresh ranks per decision and keeps the linear scan.
//!
//! **Cancellation.** A cancelled group is served first (so that its
//! finalizer runs promptly). Rather than loading every active group's flag
//! per decision, the worker compares the scheduler's cancel epoch (bumped by
//! every cancel) with the one it last saw and only then rescans the flags
//! ([`DecisionCore::note_cancellations`]); a slot seen cancelled gets a bit in
//! the `cancelled` mask, which the decision checks before the tree.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::affinity::{NodeAffinity, Reach};
use crate::masks::words_for;
use crate::policy::{GroupFacts, Policy, RankContext, Rng, StrideState};

/// What a caller read in a slot's entry: all the decision core needs of a
/// [`crate::group::TaskSetEntry`] (or of a simulated one).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryView<'a> {
    /// The group's id (unique per scheduler, never 0).
    pub(crate) group: u64,
    /// The planned task set (stage) the entry runs or follows up.
    pub(crate) stage: usize,
    /// The entry's position among its group's installed entries.
    pub(crate) seq: u64,
    /// The group's admission order.
    pub(crate) arrival: u64,
    /// What the policy is told about the group.
    pub(crate) facts: &'a GroupFacts,
    /// The group's cancel flag (the simulator cancels nothing).
    pub(crate) cancelled: Option<&'a Arc<AtomicBool>>,
}

/// What a caller found when it read (pinned) a slot.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SlotState<'a> {
    /// No entry: the group left.
    Empty,
    /// The entry's task set is exhausted (tagged): event 1.
    Exhausted,
    /// A live entry.
    Active(EntryView<'a>),
}

/// What the worker knows about one slot.
#[derive(Debug)]
struct LocalSlot {
    /// Id of the group last seen in the slot; 0: none (ids start at 1).
    group: u64,
    /// Stage (planned task set) of the entry last seen.
    stage: usize,
    /// [`TaskSetEntry::seq`] of the entry last seen.
    seq: u64,
    stride: StrideState,
    /// The group's cancel flag, kept while the slot is active so that a
    /// cancelled group is served (and so finalized) promptly.
    cancelled: Option<Arc<AtomicBool>>,
    /// What this worker may take of the entry ([`crate::affinity`]);
    /// back to `Local` whenever the worker learns a new entry.
    reach: Reach,
    /// The worker's decision count ([`DecisionCore::decisions`]) when the
    /// entry became runnable in this view: a slot with `since >=`
    /// [`Run::began`] became runnable during the running slice.
    since: u64,
}

/// `(tier, rank, arrival)` of a slot; smaller is served first. The tier is
/// the slot's [`Reach`]: a task set whose morsels on this worker's node are
/// used up comes after every one that still has local work.
type Key = (u8, f64, u64);

/// The key of an inactive (or parked) slot: behind every choosable one.
const IDLE_KEY: Key = (u8::MAX, f64::INFINITY, u64::MAX);

/// The order of a decision: lower tier, then smaller rank, ties to the
/// earlier arrival (and, in the tree and in the scan alike, to the smaller
/// slot index).
fn before(a: Key, b: Key) -> bool {
    a.0 < b.0 || (a.0 == b.0 && (a.1 < b.1 || (a.1 == b.1 && a.2 < b.2)))
}

/// A tournament tree over the slots: `winner[i]` is the slot of smallest
/// key below node `i` (node 1 is the root, nodes `leaves..2·leaves` are the
/// slots themselves, padded to a power of two with idle leaves).
#[derive(Debug)]
struct RankTree {
    leaves: usize,
    keys: Vec<Key>,
    winner: Vec<u32>,
}

impl RankTree {
    fn new(slots: usize) -> Self {
        let leaves = slots.max(1).next_power_of_two();
        let mut winner = vec![0u32; 2 * leaves];
        for k in 0..leaves {
            winner[leaves + k] = k as u32;
        }
        let mut tree = RankTree {
            leaves,
            keys: vec![IDLE_KEY; leaves],
            winner,
        };
        tree.rebuild();
        tree
    }

    fn play(&mut self, i: usize) {
        let (l, r) = (self.winner[2 * i], self.winner[2 * i + 1]);
        self.winner[i] = if before(self.keys[r as usize], self.keys[l as usize]) {
            r
        } else {
            l
        };
    }

    /// Sets slot `k`'s key and replays its path to the root.
    fn set(&mut self, k: usize, key: Key) {
        self.keys[k] = key;
        let mut i = (self.leaves + k) / 2;
        while i >= 1 {
            self.play(i);
            i /= 2;
        }
    }

    /// Replays every match (after many keys changed).
    fn rebuild(&mut self) {
        for i in (1..self.leaves).rev() {
            self.play(i);
        }
    }

    /// The slot of smallest key (idle if no slot is active).
    fn best(&self) -> usize {
        self.winner[1] as usize
    }
}

/// One worker's scheduling state.
#[derive(Debug)]
pub(crate) struct DecisionCore {
    slots: Vec<LocalSlot>,
    /// Activity mask: bit `k` set iff slot `k` is locally active.
    active: Vec<u64>,
    /// Bit `k`: slot `k`'s group was seen cancelled (cleared on deactivation).
    cancelled: Vec<u64>,
    active_count: usize,
    virtual_time: f64,
    policy: Policy,
    /// The policy epoch `policy` was read at.
    pub(crate) policy_epoch: u64,
    /// The scheduler's cancel epoch at the last flag scan.
    cancel_epoch: u64,
    rng: Rng,
    workers: usize,
    /// Cached keys of the active slots (valid iff `cached`).
    ranks: RankTree,
    /// `policy.rank_is_stable()`: the tree is maintained and decides.
    cached: bool,
    /// THRESHOLD's load regime the cached ranks were computed in.
    high_load: bool,
    /// A slot whose task set this worker saw exhausted while it was the
    /// worker's best choice: its group is between two task sets (its last
    /// tasks run elsewhere, or its finalization), and its next task set is
    /// expected. Cleared when the worker next learns or forgets the slot.
    handover: Option<usize>,
    /// Time slices of proportional-share policies ([`Policy::shares_time`];
    /// [`crate::SchedulerConfig::slice`]): how long the worker keeps running
    /// the slot it ran last before the policy ranks again, and that length
    /// in quanta (`t_max`), the most the policy's own choice may be owed
    /// while the slice goes on ([`Self::slice_continues`]). `None`: every
    /// decision is the policy's.
    slice: Option<(Duration, f64)>,
    /// The slot this worker ran last, its group, and for how long in a row.
    run: Option<Run>,
    /// Some slot other than the running one became runnable since the last
    /// decision (a group entered, a next task set was activated, a paused
    /// set resumed): if one that became runnable during the slice is now
    /// the policy's choice, the next decision is the policy's, not the
    /// slice's ([`Self::slice_continues`]).
    fresh: bool,
    /// Decisions taken so far ([`Self::choose`] calls).
    decisions: u64,
}

/// A run of consecutive tasks of one slot's group on this worker.
#[derive(Debug, Clone, Copy)]
struct Run {
    slot: usize,
    group: u64,
    ran: Duration,
    /// The decision that started the run ([`DecisionCore::decisions`]).
    began: u64,
}

impl DecisionCore {
    pub(crate) fn new(slots: usize, workers: usize, policy: Policy, worker: usize) -> Self {
        DecisionCore {
            slots: (0..slots)
                .map(|_| LocalSlot {
                    group: 0,
                    stage: 0,
                    seq: 0,
                    stride: StrideState::enter(&policy, &GroupFacts::default(), 0, 0.0),
                    cancelled: None,
                    reach: Reach::Local,
                    since: 0,
                })
                .collect(),
            active: vec![0; words_for(slots)],
            cancelled: vec![0; words_for(slots)],
            active_count: 0,
            virtual_time: 0.0,
            cached: policy.rank_is_stable(),
            high_load: policy.high_load(0, workers),
            policy,
            policy_epoch: 0,
            cancel_epoch: 0,
            rng: Rng::new(0x5EED ^ worker as u64),
            workers,
            ranks: RankTree::new(slots),
            handover: None,
            slice: None,
            run: None,
            fresh: false,
            decisions: 0,
        }
    }

    /// Sets the time slice of proportional-share policies (`None`: off);
    /// `t_max` is the quantum the worker charges tasks in.
    pub(crate) fn set_slice(&mut self, slice: Option<Duration>, t_max: Duration) {
        self.slice = slice
            .filter(|s| !s.is_zero())
            .map(|s| (s, s.as_secs_f64() / t_max.as_secs_f64().max(1e-9)));
    }

    /// Restarts the random stream (lottery draws) from `seed`.
    pub(crate) fn reseed(&mut self, seed: u64) {
        self.rng = Rng::new(seed);
    }

    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Follows a new policy (after `set_policy`): every cached rank is
    /// recomputed; passes and priorities are kept.
    pub(crate) fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
        self.cached = self.policy.rank_is_stable();
        self.high_load = self.policy.high_load(self.active_count, self.workers);
        if self.cached {
            self.refresh_all();
        }
    }

    /// The current priority of slot `k`'s group, as this worker sees it.
    pub(crate) fn priority(&self, k: usize) -> f64 {
        self.slots[k].stride.priority
    }

    fn key(&mut self, k: usize) -> Key {
        let Some(tier) = self.slots[k].reach.tier() else {
            return IDLE_KEY;
        };
        let mut ctx = RankContext {
            active_groups: self.active_count,
            workers: self.workers,
            rng: &mut self.rng,
        };
        let s = &self.slots[k].stride;
        (tier, s.rank(&self.policy, &mut ctx), s.arrival)
    }

    /// Recomputes the key of every slot (idle for inactive ones).
    fn refresh_all(&mut self) {
        for k in 0..self.slots.len() {
            let key = if self.is_active(k) {
                self.key(k)
            } else {
                IDLE_KEY
            };
            self.ranks.keys[k] = key;
        }
        self.ranks.rebuild();
    }

    /// Slot `k`'s state changed: its cached key follows.
    fn refresh(&mut self, k: usize) {
        if self.cached {
            let key = if self.is_active(k) {
                self.key(k)
            } else {
                IDLE_KEY
            };
            self.ranks.set(k, key);
        }
    }

    /// The number of active slots changed: THRESHOLD may switch regime.
    fn load_changed(&mut self) {
        let high = self.policy.high_load(self.active_count, self.workers);
        if high != self.high_load {
            self.high_load = high;
            if self.cached {
                self.refresh_all();
            }
        }
    }

    fn activate(&mut self, k: usize) {
        let (w, b) = (k / 64, 1u64 << (k % 64));
        if self.active[w] & b == 0 {
            self.active[w] |= b;
            self.active_count += 1;
            self.load_changed();
        }
        self.refresh(k);
    }

    pub(crate) fn is_active(&self, k: usize) -> bool {
        self.active[k / 64] & (1u64 << (k % 64)) != 0
    }

    /// Event 1 seen: the slot's task set is exhausted.
    pub(crate) fn deactivate(&mut self, k: usize) {
        let (w, b) = (k / 64, 1u64 << (k % 64));
        self.cancelled[w] &= !b;
        self.slots[k].cancelled = None;
        self.slots[k].reach = Reach::Local;
        if self.active[w] & b != 0 {
            self.active[w] &= !b;
            self.active_count -= 1;
            self.refresh(k);
            self.load_changed();
        }
    }

    /// Event 1 seen on the slot the worker would choose or has flagged:
    /// like [`Self::deactivate`], and when the slot was the best choice its
    /// group becomes the worker's pending hand-over ([`Self::handover_pending`]).
    /// Only for policies whose ranks are cached (all but lottery).
    pub(crate) fn exhausted(&mut self, k: usize) {
        let was_best = self.cached && self.is_active(k) && self.ranks.best() == k;
        self.deactivate(k);
        if was_best {
            self.handover = Some(k);
        }
    }

    /// Whether a task of slot `chosen` runs while a better-ranked group is
    /// between two task sets (the pending hand-over): then the worker should
    /// be ready to switch soon, and the task's morsels are kept short.
    pub(crate) fn handover_pending(&mut self, chosen: usize) -> bool {
        let Some(k) = self.handover else {
            return false;
        };
        if k == chosen || self.slots[k].group == 0 {
            return false;
        }
        let (waiting, running) = (self.key(k), self.key(chosen));
        before(waiting, running)
    }

    /// The slot is empty: its group left.
    pub(crate) fn forget(&mut self, k: usize) {
        self.deactivate(k);
        self.slots[k].group = 0;
        if self.handover == Some(k) {
            self.handover = None;
        }
    }

    /// Whether the worker's view of slot `k` is `entry`.
    fn knows(&self, k: usize, entry: &EntryView<'_>) -> bool {
        let s = &self.slots[k];
        s.group == entry.group && s.seq == entry.seq && self.is_active(k)
    }

    /// A flagged slot `k` was read: brings the view up to date with it.
    pub(crate) fn visit(&mut self, k: usize, read: SlotState<'_>) {
        match read {
            SlotState::Empty => self.forget(k),
            SlotState::Exhausted => self.exhausted(k),
            SlotState::Active(entry) => self.learn(k, &entry),
        }
    }

    /// The chosen slot `k` was read: whether to run a task of it now. `false`
    /// means the view was corrected (the slot was empty or exhausted, or held
    /// an entry not yet learned) and the caller decides again.
    pub(crate) fn confirm(&mut self, k: usize, read: SlotState<'_>) -> bool {
        match read {
            SlotState::Empty => self.forget(k),
            SlotState::Exhausted => self.exhausted(k),
            SlotState::Active(entry) if self.knows(k, &entry) => return true,
            SlotState::Active(entry) => self.learn(k, &entry),
        }
        false
    }

    /// The worker's virtual time: never decreases; at least the smallest pass
    /// among its active slots.
    fn now_pass(&mut self) -> f64 {
        let mut min: Option<f64> = None;
        self.for_each_active(|k, this| {
            let p = this.slots[k].stride.pass;
            min = Some(min.map_or(p, |m: f64| m.min(p)));
        });
        if let Some(m) = min {
            self.virtual_time = self.virtual_time.max(m);
        }
        self.virtual_time
    }

    fn for_each_active(&self, mut f: impl FnMut(usize, &Self)) {
        for (i, &word) in self.active.iter().enumerate() {
            for k in set_bits(i, word) {
                f(k, self);
            }
        }
    }

    /// Takes `entry`, found in slot `k`, into the local view: a group new to
    /// the slot enters (event 2), a next task set of the known group is
    /// activated (event 3: a follow-up of the same stage keeps the stage's
    /// accounting); either way the slot is active.
    fn learn(&mut self, k: usize, entry: &EntryView<'_>) {
        let runs_here = self
            .run
            .is_some_and(|r| r.slot == k && r.group == entry.group);
        let known = self.slots[k].group == entry.group
            && self.slots[k].seq == entry.seq
            && self.slots[k].reach != Reach::Paused
            && self.is_active(k);
        if !known && !runs_here {
            self.fresh = true;
            self.slots[k].since = self.decisions;
        }
        if self.slots[k].group != entry.group {
            self.deactivate(k);
            let now = self.now_pass();
            let stride = StrideState::enter(&self.policy, entry.facts, entry.arrival, now);
            let s = &mut self.slots[k];
            s.group = entry.group;
            s.stage = entry.stage;
            s.seq = entry.seq;
            s.stride = stride;
        } else if self.slots[k].seq == entry.seq && self.slots[k].reach == Reach::Paused {
            // A resume ([`crate::pause`]): the known entry is runnable again.
            self.slots[k].reach = Reach::Local;
        } else if self.slots[k].seq != entry.seq {
            self.deactivate(k);
            let now = self.now_pass();
            let s = &mut self.slots[k];
            s.seq = entry.seq;
            if s.stage != entry.stage {
                s.stage = entry.stage;
                s.stride.task_set_activated(&self.policy, entry.stage, now);
            }
        }
        if let Some(flag) = entry.cancelled {
            if flag.load(Ordering::Relaxed) {
                self.cancelled[k / 64] |= 1u64 << (k % 64);
            }
            self.slots[k].cancelled = Some(flag.clone());
        }
        self.activate(k);
        if self.handover == Some(k) {
            self.handover = None;
        }
    }

    /// `epoch` is the scheduler's cancel epoch (loaded Acquire, pairing
    /// with the Release bump after a group's flag was set): when it moved
    /// since the last call, every active slot's flag is checked once.
    pub(crate) fn note_cancellations(&mut self, epoch: u64) {
        if epoch == self.cancel_epoch {
            return;
        }
        self.cancel_epoch = epoch;
        let mut seen = Vec::new();
        self.for_each_active(|k, this| {
            if this.slots[k]
                .cancelled
                .as_ref()
                .is_some_and(|c| c.load(Ordering::Relaxed))
            {
                seen.push(k);
            }
        });
        for k in seen {
            self.cancelled[k / 64] |= 1u64 << (k % 64);
        }
    }

    /// The policy's choice among the active slots: the smallest rank, ties to
    /// the earlier arrival; a slot whose group was seen cancelled comes first.
    pub(crate) fn choose(&mut self) -> Option<usize> {
        for (i, (&a, &c)) in self.active.iter().zip(&self.cancelled).enumerate() {
            let bits = a & c;
            if bits != 0 {
                return Some(i * 64 + bits.trailing_zeros() as usize);
            }
        }
        self.decisions += 1;
        let continues = self.slice_continues();
        self.fresh = false;
        if continues.is_some() {
            return continues;
        }
        if self.cached {
            let k = self.ranks.best();
            return (k < self.slots.len() && self.is_active(k) && self.ranks.keys[k] != IDLE_KEY)
                .then_some(k);
        }
        let mut ctx = RankContext {
            active_groups: self.active_count,
            workers: self.workers,
            rng: &mut self.rng,
        };
        let mut best: Option<(Key, usize)> = None;
        for (i, &word) in self.active.iter().enumerate() {
            for k in set_bits(i, word) {
                let Some(tier) = self.slots[k].reach.tier() else {
                    continue;
                };
                let s = &self.slots[k].stride;
                let key = (tier, s.rank(&self.policy, &mut ctx), s.arrival);
                match best {
                    Some((b, _)) if !before(key, b) => {}
                    _ => best = Some((key, k)),
                }
            }
        }
        best.map(|(_, k)| k)
    }

    /// The slot whose run goes on: the policy shares time, the slot the
    /// worker ran last is still active with the same group and first-tier
    /// work, it has run less than a slice in a row, and neither of the two
    /// rules below ends it. Its pass keeps advancing with every charge, so
    /// when the slice ends the groups it ran ahead of catch up: each group's
    /// share over time is the policy's, served in slices rather than task
    /// by task. That keeps one query's working set (hash tables, partial
    /// aggregates) in the worker's caches for a slice instead of replacing
    /// it with every other group's at each task.
    ///
    /// With ranks cached (fair and stride), let `B` be the group the policy
    /// would choose now.
    ///
    /// * **Work that became runnable during the slice** (a group entered, a
    ///   next task set was activated, a paused set resumed) ends it when
    ///   `B` is such work: it outranks the running group. Work that became
    ///   runnable but ranks behind it (with many queries in flight, the
    ///   next task sets of queries that already had their turn) does not,
    ///   so such activations no longer cut every slice short. Without
    ///   cached ranks (lottery) any such work ends the slice.
    /// * **What a slice may owe.** If the running group's pass is ahead of
    ///   `B`'s by `Δ`, `B` would need `Δ · p_B` quanta at its own priority
    ///   `p_B` to catch up: that is what the slice owes it. The slice ends
    ///   once that exceeds the slice's length in quanta. Among groups of
    ///   equal priority this is the plain slice; a group of much higher
    ///   priority than the running one — a newcomer under decaying
    ///   priorities — is owed a slice after a fraction of a task and takes
    ///   over, instead of waiting for the whole slice of a long query that
    ///   has decayed to `p_min` (such waits doubled the short queries'
    ///   slowdown under stride scheduling, modelled:
    ///   `tests/slice_latency.rs`).
    ///
    /// Only the policy's choice is checked, so each rule costs one
    /// comparison with the tree's root; a group ranked behind `B` waits as
    /// it would for `B`.
    fn slice_continues(&self) -> Option<usize> {
        let (slice, slice_quanta) = self.slice.filter(|_| self.policy.shares_time())?;
        let run = self.run?;
        let k = run.slot;
        let s = &self.slots[k];
        let continues =
            run.ran < slice && self.is_active(k) && s.group == run.group && s.reach == Reach::Local;
        if !continues {
            return None;
        }
        if !self.cached {
            return (!self.fresh).then_some(k);
        }
        let b = self.ranks.best();
        if b != k && b < self.slots.len() && self.ranks.keys[b] != IDLE_KEY {
            let best = &self.slots[b];
            if self.fresh && best.since >= run.began {
                return None;
            }
            let owed = (s.stride.pass - best.stride.pass) * best.stride.priority;
            if owed > slice_quanta {
                return None;
            }
        }
        Some(k)
    }

    /// A task of slot `k` found the worker's node dry while other nodes
    /// still hold morsels ([`crate::TaskOutcome::NodeDry`]): the slot drops
    /// to the steal tier (soft affinity) or is parked (hard) until the
    /// worker learns the slot's next entry.
    pub(crate) fn node_dry(&mut self, k: usize, affinity: NodeAffinity) {
        if self.is_active(k) {
            self.slots[k].reach = Reach::after(affinity);
            self.refresh(k);
        }
    }

    /// A task of slot `k` found nothing to hand out while other tasks of
    /// the set hold work that may come back ([`crate::TaskOutcome::Held`]):
    /// the slot is parked until the worker learns its next entry, as after
    /// a hard [`crate::TaskOutcome::NodeDry`]; and when it was the worker's
    /// best choice, its group becomes the pending hand-over, as if the
    /// worker had found it exhausted ([`Self::exhausted`]) — its next task
    /// set is near.
    pub(crate) fn held(&mut self, k: usize) {
        let was_best = self.cached && self.is_active(k) && self.ranks.best() == k;
        self.node_dry(k, NodeAffinity::Hard);
        if was_best {
            self.handover = Some(k);
        }
    }

    /// A task of slot `k` returned [`crate::TaskOutcome::Paused`]: the slot
    /// is not chosen until a resume pushes its bit and the worker visits it
    /// with the same entry ([`Self::visit`]), or it holds another entry.
    pub(crate) fn paused(&mut self, k: usize) {
        if self.is_active(k) {
            self.slots[k].reach = Reach::Paused;
            self.refresh(k);
        }
    }

    /// Whether a task of slot `k` runs as a thief ([`crate::TaskContext::stealing`]).
    pub(crate) fn stealing(&self, k: usize) -> bool {
        self.slots[k].reach == Reach::Steal
    }

    /// Charges a task of slot `k` that ran for `ran`.
    pub(crate) fn charge(&mut self, k: usize, ran: Duration, t_max: Duration) {
        let group = self.slots[k].group;
        match &mut self.run {
            Some(r) if r.slot == k && r.group == group => r.ran += ran,
            _ => {
                self.run = Some(Run {
                    slot: k,
                    group,
                    ran,
                    began: self.decisions,
                })
            }
        }
        let before = self.slots[k].stride.pass;
        self.slots[k].stride.charge(&self.policy, ran, t_max);
        if let Some(floor) = self.slots[k].stride.queued_floor(&self.policy) {
            self.queue_at_floor(k, floor, before);
        }
        self.refresh(k);
    }

    /// Slot `k`'s group, at floor priority `floor`, was charged, its pass
    /// moving on from `before` ([`crate::FloorOrder::Queue`]). The active
    /// groups queued at that floor are one queue: they share the workers
    /// with everyone else as the seed's decayed groups do, and among
    /// themselves run in arrival order.
    ///
    /// * Against everyone else: under sharing, `m` decayed groups at equal
    ///   passes move their smallest pass (what newcomers enter at and what
    ///   others compare with) by one quantum's stride per `m` quanta run;
    ///   here the charge advances the queue's pass by `1/m` of the stride.
    /// * Among themselves: every member behind the new pass is raised to
    ///   it, so members tie and the earliest arrival runs. A group that
    ///   reaches the floor behind the queue's pass runs first until it has
    ///   caught up (what it is owed, as under sharing); one that reaches it
    ///   ahead keeps its pass until the queue catches up. Either way it
    ///   then takes its place in arrival order.
    ///
    /// Cost: two passes over the activity mask per charge of a decayed
    /// group; every raised slot's key is refreshed (the caller refreshes
    /// `k`'s), so the cached tree stays exact.
    fn queue_at_floor(&mut self, k: usize, floor: f64, before: f64) {
        let member =
            |this: &Self, j: usize| this.slots[j].stride.queued_floor(&this.policy) == Some(floor);
        let mut members = 0usize;
        self.for_each_active(|j, this| members += usize::from(j == k || member(this, j)));
        let stride = self.slots[k].stride.pass - before;
        let pass = before + stride / members.max(1) as f64;
        self.slots[k].stride.pass = pass;
        for w in 0..self.active.len() {
            for j in set_bits(w, self.active[w]) {
                if j != k && self.slots[j].stride.pass < pass && member(self, j) {
                    self.slots[j].stride.pass = pass;
                    self.refresh(j);
                }
            }
        }
    }
}

/// The slots whose bits are set in `word`, word `i` of a slot mask, in
/// increasing order. Owns its copy of the word, so the caller may change
/// the mask (or anything else) while it walks.
#[inline]
fn set_bits(i: usize, word: u64) -> impl Iterator<Item = usize> {
    let mut bits = word;
    std::iter::from_fn(move || {
        (bits != 0).then(|| {
            let k = i * 64 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            k
        })
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::group::{ResourceGroup, TaskSetEntry};

    /// A task set that is never run (the local view only reads entries).
    struct Idle;

    impl crate::TaskSetWork for Idle {
        fn name(&self) -> String {
            "idle".into()
        }

        fn run_task(
            &self,
            _: &mut crate::TaskContext<'_>,
        ) -> Result<crate::TaskOutcome, crate::TaskError> {
            Ok(crate::TaskOutcome::Exhausted)
        }
    }

    fn at(group: &Arc<ResourceGroup>, stage: usize, slot: usize, arrival: u64) -> TaskSetEntry {
        TaskSetEntry::new(group.clone(), Arc::new(Idle), stage, slot, arrival)
    }

    fn entry(id: u64, stage: usize, arrival: u64) -> TaskSetEntry {
        let group = Arc::new(ResourceGroup::new(id, Vec::new(), GroupFacts::default()));
        at(&group, stage, 0, arrival)
    }

    #[test]
    fn a_node_dry_slot_comes_after_local_work_or_is_parked_until_its_next_entry() {
        for policy in [Policy::Fifo, Policy::Lottery] {
            let mut l = DecisionCore::new(8, 2, policy, 0);
            let g = Arc::new(ResourceGroup::new(1, Vec::new(), GroupFacts::default()));
            l.learn(2, &at(&g, 0, 2, 0).view());
            l.learn(5, &entry(2, 0, 1).view());
            l.node_dry(2, NodeAffinity::Soft);
            assert_eq!(l.choose(), Some(5), "the local slot first");
            assert!(l.stealing(2) && !l.stealing(5));
            l.deactivate(5);
            assert_eq!(l.choose(), Some(2), "then the steal tier");
            l.node_dry(2, NodeAffinity::Hard);
            assert_eq!(l.choose(), None, "parked");
            assert!(l.is_active(2), "still the group's slot");
            l.learn(2, &at(&g, 1, 2, 0).view());
            assert_eq!(l.choose(), Some(2), "its next task set is local again");
            assert!(!l.stealing(2));
        }
    }

    #[test]
    fn a_paused_slot_is_not_chosen_until_a_resume_or_its_next_entry() {
        for policy in [Policy::Fifo, Policy::Fair, Policy::Lottery] {
            let mut l = DecisionCore::new(8, 2, policy, 0);
            let g = Arc::new(ResourceGroup::new(1, Vec::new(), GroupFacts::default()));
            let e = at(&g, 0, 2, 0);
            l.learn(2, &e.view());
            l.learn(5, &entry(2, 0, 1).view());
            l.paused(2);
            assert_eq!(l.choose(), Some(5), "the other slot only");
            l.deactivate(5);
            assert_eq!(l.choose(), None, "nothing choosable: the worker sleeps");
            assert!(l.is_active(2), "the group keeps its slot");
            // A resume: the worker visits the same entry again.
            l.visit(2, SlotState::Active(e.view()));
            assert_eq!(l.choose(), Some(2));
            // Paused again, then the slot's next task set arrives.
            l.paused(2);
            assert_eq!(l.choose(), None);
            let next = at(&g, 1, 2, 0);
            l.learn(2, &next.view());
            assert_eq!(l.choose(), Some(2), "a new entry is runnable");
            // A same-entry visit does not un-park a hard node-dry slot.
            l.node_dry(2, NodeAffinity::Hard);
            l.visit(2, SlotState::Active(next.view()));
            assert_eq!(l.choose(), None);
        }
    }

    #[test]
    fn a_slice_keeps_the_running_group_until_spent_or_outranked_by_work_that_became_runnable() {
        let t = Duration::from_millis(2);
        let run = |l: &mut DecisionCore, n: usize| -> Vec<usize> {
            (0..n)
                .map(|_| {
                    let k = l.choose().expect("work is runnable");
                    l.charge(k, t, t);
                    k
                })
                .collect()
        };
        for policy in [Policy::Fair, Policy::Stride(Default::default())] {
            let mut l = DecisionCore::new(8, 1, policy.clone(), 0);
            l.set_slice(Some(Duration::from_millis(10)), t);
            let (a, b) = (
                Arc::new(ResourceGroup::new(1, Vec::new(), GroupFacts::default())),
                Arc::new(ResourceGroup::new(2, Vec::new(), GroupFacts::default())),
            );
            l.learn(0, &at(&a, 0, 0, 0).view());
            l.learn(1, &at(&b, 0, 1, 1).view());
            // Five 2 ms tasks in a row each, then the other's turn.
            let turns = run(&mut l, 12);
            assert_eq!(turns, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0], "{policy:?}");
            // The running group's own next task set keeps its slice ...
            l.learn(0, &at(&a, 1, 0, 0).view());
            assert_eq!(run(&mut l, 1), [0], "{policy:?}");
            // ... a group entering mid-slice that ranks behind the policy's
            // choice (slot 1, behind since its turn) does not end it ...
            l.learn(2, &entry(3, 0, 2).view());
            assert_eq!(run(&mut l, 1), [0], "{policy:?}: a newcomer behind slot 1");
            // ... one that the policy would choose does: a newcomer of four
            // times the priority.
            let urgent = GroupFacts {
                user_priority: 4.0,
                ..GroupFacts::default()
            };
            let d = Arc::new(ResourceGroup::new(4, Vec::new(), urgent));
            l.learn(3, &at(&d, 0, 3, 3).view());
            let decided = l.choose();
            assert_eq!(decided, Some(3), "{policy:?}: the slice was not broken");
            l.set_slice(None, t);
            assert_eq!(l.choose(), decided, "{policy:?}: not the policy's choice");
        }
        // Policies that do not share time ignore the slice.
        let mut l = DecisionCore::new(8, 1, Policy::Srpt, 0);
        l.set_slice(Some(Duration::from_millis(10)), t);
        l.learn(0, &entry(1, 0, 0).view());
        l.learn(1, &entry(2, 0, 1).view());
        assert!(!Policy::Srpt.shares_time() && Policy::Fair.shares_time());
        assert_eq!(l.slice_continues(), None);
    }

    #[test]
    fn a_slice_ends_once_the_policys_choice_is_owed_more_than_a_slice() {
        let t = Duration::from_millis(2);
        let mut l = DecisionCore::new(8, 1, Policy::Stride(Default::default()), 0);
        l.set_slice(Some(Duration::from_millis(10)), t);
        l.learn(0, &entry(1, 0, 0).view());
        l.learn(1, &entry(2, 0, 1).view());
        assert_eq!(l.choose(), Some(0), "equal ranks: the earlier arrival");
        // Group 1 has had 40 quanta (decayed towards p_min), group 2 one.
        for _ in 0..40 {
            l.charge(0, t, t);
        }
        l.charge(1, t, t);
        // Group 1 starts a run: one task into its slice, not fresh ...
        l.charge(0, t, t);
        assert!(l.priority(0) < l.priority(1) / 10.0);
        // ... but group 2, the policy's choice, is owed far more than a
        // slice at its priority: the run ends.
        assert_eq!(l.choose(), Some(1));
        // Group 2's run goes on while it is the policy's choice.
        l.charge(1, t, t);
        assert_eq!(l.choose(), Some(1));
    }

    #[test]
    fn under_decaying_priorities_a_newcomer_is_ranked_by_the_end_of_its_next_quantum() {
        let t = Duration::from_millis(2);
        let mut l = DecisionCore::new(8, 1, Policy::Stride(Default::default()), 0);
        l.learn(0, &entry(1, 0, 0).view());
        for _ in 0..60 {
            let k = l.choose().expect("runnable");
            l.charge(k, t, t);
        }
        // The newcomer enters at the virtual time — the pass of the decayed
        // group — and runs first: its next quantum ends far earlier.
        l.learn(1, &entry(2, 0, 1).view());
        assert_eq!(l.choose(), Some(1));
        l.charge(1, t, t);
        assert_eq!(
            l.choose(),
            Some(1),
            "not one quantum of the old group first"
        );
    }

    #[test]
    fn decayed_groups_queue_in_arrival_order_behind_newcomers_and_static_priorities() {
        let t = Duration::from_millis(2);
        let mut l = DecisionCore::new(8, 1, Policy::parse("stride-queue").unwrap(), 0);
        // Three groups decay together: each decision charges the chosen one.
        for (slot, id) in [(0, 1), (1, 2), (2, 3)] {
            l.learn(slot, &entry(id, 0, id).view());
        }
        for _ in 0..400 {
            let k = l.choose().expect("runnable");
            l.charge(k, t, t);
        }
        assert!((0..3).all(|k| l.slots[k].stride.queued_floor(&l.policy).is_some()));
        // At the floor the earliest arrival runs, task after task.
        for _ in 0..50 {
            assert_eq!(l.choose(), Some(0));
            l.charge(0, t, t);
        }
        let queue_pass = l.slots[0].stride.pass;
        assert!((0..3).all(|k| l.slots[k].stride.pass == queue_pass));
        // A newcomer runs first; then, once decayed, it joins the queue
        // behind the earlier arrivals.
        l.learn(3, &entry(4, 0, 4).view());
        assert_eq!(l.choose(), Some(3));
        let mut newcomer_tasks = 0;
        while l.choose() == Some(3) {
            l.charge(3, t, t);
            newcomer_tasks += 1;
        }
        assert!(newcomer_tasks >= 5, "{newcomer_tasks}");
        assert_eq!(l.choose(), Some(0));
        // The head leaves. The newcomer shares with the queue until it has
        // decayed and caught up with the queue's pass; from then on it
        // waits behind the earlier arrivals.
        l.forget(0);
        let caught_up = |l: &DecisionCore| {
            l.slots[3].stride.queued_floor(&l.policy).is_some()
                && l.slots[3].stride.pass >= l.slots[1].stride.pass
        };
        let mut decisions = 0;
        while !caught_up(&l) {
            let k = l.choose().expect("runnable");
            l.charge(k, t, t);
            decisions += 1;
            assert!(decisions < 1000);
        }
        for _ in 0..200 {
            assert_eq!(l.choose(), Some(1), "the newcomer queues behind 2 and 3");
            l.charge(1, t, t);
        }
        // A static priority (always like a newcomer) keeps its share against
        // the queue: it is never starved by the head.
        let fixed = Arc::new(ResourceGroup::new(
            9,
            Vec::new(),
            GroupFacts {
                static_priority: true,
                ..GroupFacts::default()
            },
        ));
        l.learn(4, &at(&fixed, 0, 4, 9).view());
        let mut static_tasks = 0;
        for _ in 0..5000 {
            let k = l.choose().expect("runnable");
            static_tasks += usize::from(k == 4);
            l.charge(k, t, t);
        }
        // As under sharing: p0 against three decayed groups at p_min, about
        // 100 of its tasks to every 3 of the queue's (4854 of 5000).
        let expected = 5000.0 * 100.0 / 103.0;
        assert!(
            (static_tasks as f64 - expected).abs() < 0.01 * expected,
            "{static_tasks}"
        );
    }

    #[test]
    fn fifo_chooses_the_earliest_arrival_and_skips_inactive_slots() {
        let mut l = DecisionCore::new(130, 1, Policy::Fifo, 0);
        assert_eq!(l.choose(), None);
        l.learn(129, &entry(1, 0, 0).view());
        l.learn(3, &entry(2, 0, 1).view());
        assert_eq!(l.choose(), Some(129));
        l.deactivate(129);
        assert_eq!(l.choose(), Some(3));
        l.forget(3);
        assert_eq!(l.choose(), None);
    }

    #[test]
    fn fair_newcomer_enters_at_the_smallest_pass_and_keeps_its_state_on_return() {
        let t = Duration::from_millis(2);
        let mut l = DecisionCore::new(4, 1, Policy::Fair, 0);
        let old = entry(1, 0, 0);
        l.learn(0, &old.view());
        for _ in 0..10 {
            l.charge(0, t, t);
        }
        l.learn(1, &entry(2, 0, 1).view());
        assert_eq!(l.slots[1].stride.pass, l.slots[0].stride.pass);
        // Tie: the earlier arrival first; after one charge the newcomer.
        assert_eq!(l.choose(), Some(0));
        l.charge(0, t, t);
        assert_eq!(l.choose(), Some(1));
        // Event 3 for slot 0: same group, next task set; priority kept.
        let pass = l.slots[0].stride.pass;
        let next = at(&old.group, 1, 0, 0);
        l.deactivate(0);
        assert!(!l.knows(0, &next.view()));
        l.learn(0, &next.view());
        assert!(l.knows(0, &next.view()));
        assert!(l.slots[0].stride.pass >= pass);
        // A follow-up of the same stage is a new entry the worker must
        // learn, and it keeps the stage.
        let follow_up = at(&old.group, 1, 0, 0);
        l.deactivate(0);
        assert!(!l.knows(0, &follow_up.view()));
        l.learn(0, &follow_up.view());
        assert!(l.knows(0, &follow_up.view()) && l.slots[0].stage == 1);
    }

    #[test]
    fn a_best_group_between_task_sets_is_a_pending_handover() {
        let mut l = DecisionCore::new(8, 2, Policy::Fifo, 0);
        let first = entry(1, 0, 0);
        l.learn(2, &first.view());
        l.learn(5, &entry(2, 0, 1).view());
        assert_eq!(l.choose(), Some(2));
        assert!(!l.handover_pending(5), "nothing is between task sets");
        // The earlier arrival's task set runs dry: the later one fills in
        // while the earlier one waits for its next task set.
        l.exhausted(2);
        assert_eq!(l.choose(), Some(5));
        assert!(l.handover_pending(5));
        // Its next task set arrives: no hand-over pending any more.
        l.learn(2, &at(&first.group, 1, 0, 0).view());
        assert!(!l.handover_pending(5));
        // A slot that was not the best choice leaves no hand-over behind.
        l.exhausted(5);
        l.learn(5, &entry(3, 0, 2).view());
        assert!(!l.handover_pending(5));
        // Nor does a group that left.
        l.exhausted(2);
        l.forget(2);
        assert!(!l.handover_pending(5));
    }

    /// The decision by a full scan of fresh ranks (what the tree caches).
    fn reference_choice(l: &mut DecisionCore) -> Option<usize> {
        let mut best: Option<(Key, usize)> = None;
        for k in 0..l.slots.len() {
            if !l.is_active(k) {
                continue;
            }
            let key = l.key(k);
            if best.is_none_or(|(b, _)| before(key, b)) {
                best = Some((key, k));
            }
        }
        best.map(|(_, k)| k)
    }

    #[test]
    fn cached_ranks_decide_like_a_full_scan_under_every_stable_policy() {
        use crate::policy::{DecayParams, TaskSetEstimate, ThresholdParams};
        let policies = [
            Policy::Fifo,
            Policy::Fair,
            Policy::Stride(DecayParams {
                d_start: 2,
                ..DecayParams::default()
            }),
            Policy::Srpt,
            Policy::IfSrpt,
            // Two workers: the regime flips between 2 and 3 active slots.
            Policy::Threshold(ThresholdParams { load: 1.0 }),
        ];
        let t = Duration::from_millis(2);
        for policy in policies {
            // Few slots for THRESHOLD, so that the number of active ones
            // keeps crossing the threshold; two mask words otherwise.
            let n = if policy.name() == "threshold" { 5 } else { 70 };
            let mut l = DecisionCore::new(n, 2, policy.clone(), 0);
            let mut rng = Rng::new(7);
            let mut id = 0;
            for step in 0..3000 {
                let k = (rng.next_f64() * n as f64) as usize % n;
                match (rng.next_f64() * 4.0) as u32 {
                    0 => {
                        id += 1;
                        let facts = GroupFacts {
                            estimates: Some(vec![
                                TaskSetEstimate {
                                    work: Duration::from_micros(id % 7 * 900),
                                    elastic: id % 3 == 0,
                                };
                                2
                            ]),
                            ..GroupFacts::default()
                        };
                        let group = Arc::new(ResourceGroup::new(id, Vec::new(), facts));
                        l.learn(k, &at(&group, 0, k, id).view());
                    }
                    1 => l.deactivate(k),
                    _ => {
                        if let Some(c) = l.choose() {
                            let ran = Duration::from_micros((rng.next_f64() * 3000.0) as u64);
                            l.charge(c, ran, t);
                        }
                    }
                }
                if step == 1500 {
                    // A policy switch recomputes every cached rank.
                    l.set_policy(policy.clone());
                }
                assert_eq!(
                    l.choose(),
                    reference_choice(&mut l),
                    "{policy:?} step {step}"
                );
            }
        }
    }

    #[test]
    fn a_cancelled_group_is_chosen_first_once_the_epoch_moves() {
        let mut l = DecisionCore::new(4, 1, Policy::Fifo, 0);
        let first = entry(1, 0, 0);
        let second = entry(2, 0, 1);
        l.learn(0, &first.view());
        l.learn(2, &second.view());
        assert_eq!(l.choose(), Some(0));
        second.group.cancelled.store(true, Ordering::Relaxed);
        // Without a new epoch the flag is not rescanned ...
        l.note_cancellations(0);
        assert_eq!(l.choose(), Some(0));
        // ... with one it is.
        l.note_cancellations(1);
        assert_eq!(l.choose(), Some(2));
        l.deactivate(2);
        assert_eq!(l.choose(), Some(0));
        // A group learned while cancelled is first at once.
        let third = entry(3, 0, 2);
        third.group.cancelled.store(true, Ordering::Relaxed);
        l.learn(3, &third.view());
        assert_eq!(l.choose(), Some(3));
    }
}

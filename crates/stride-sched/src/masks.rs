//! Per-worker update masks (seed 001 §2.3, "Changing the Active Task Sets").
//!
//! Every worker owns two bitmasks of `ceil(slots / 64)` atomic words each:
//!
//! * the **change mask**: bit `k` set means "slot `k` received the first task
//!   set of a resource group that is new to the slot" (event 2);
//! * the **return mask**: bit `k` set means "slot `k` received the next task
//!   set of the group already bound to it" (event 3).
//!
//! Event 1 (a task set ran dry) needs no mask: the slot pointer is tagged
//! (see [`crate::slots`]) and each worker notices when it next picks the slot.
//!
//! **Pushing** (by whichever thread installed a task set into slot `k`):
//! `fetch_or(1 << (k % 64))` on word `k / 64` of the chosen mask of *every*
//! worker. **Pulling** (by the owning worker only, before each scheduling
//! decision): for each word, a Relaxed load and, only if it is non-zero, a
//! `swap(0)`; the set bits of the swapped-out value are then visited by
//! counting trailing zeros and clearing the lowest bit.
//!
//! *No update is lost*: all writes to a word are read-modify-writes, which are
//! totally ordered on that word. A pushed bit stays set until the owner's
//! `swap(0)` returns it, and the swap returns exactly the bits set since the
//! previous swap. Operations on different words need not be atomic together:
//! each bit lives in one word. The Relaxed pre-load may miss a bit that was
//! pushed concurrently; that bit is returned by a later pull. The idle
//! protocol ([`crate::idle`]) guarantees that a worker pulls once more after
//! the last push before it can fall asleep.
//!
//! *Orderings*: a push is `Release` and pairs with the owner's `Acquire` swap;
//! the pusher wrote the slot pointer before pushing, so a worker that pulled
//! bit `k` reads slot `k`'s new pointer (or a later one). Workers never rely
//! on that for memory safety — reading a slot always goes through the pin
//! protocol of [`crate::pins`] — only for promptness.

use crate::sync::{AtomicU64, Ordering, Padded};

/// Which of the two update masks a push goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskKind {
    /// Event 2: a new resource group was bound to the slot.
    Change,
    /// Event 3: the next task set of the slot's group was installed.
    Return,
}

/// Number of 64-bit words that hold one bit per slot.
pub fn words_for(slots: usize) -> usize {
    slots.div_ceil(64).max(1)
}

/// The update masks of one worker: change words followed by return words.
#[derive(Debug)]
struct WorkerMasks {
    /// `words` change words, then `words` return words. Written by pushers
    /// (`fetch_or`, Release) and by the owner (`swap(0)`, Acquire).
    bits: Box<[AtomicU64]>,
}

/// The change and return masks of all workers.
#[derive(Debug)]
pub struct UpdateMasks {
    words: usize,
    workers: Box<[Padded<WorkerMasks>]>,
}

impl UpdateMasks {
    pub fn new(workers: usize, slots: usize) -> Self {
        let words = words_for(slots);
        UpdateMasks {
            words,
            workers: (0..workers)
                .map(|_| {
                    Padded(WorkerMasks {
                        bits: (0..2 * words).map(|_| AtomicU64::new(0)).collect(),
                    })
                })
                .collect(),
        }
    }

    /// Number of words per mask.
    pub fn words(&self) -> usize {
        self.words
    }

    /// Sets bit `slot` in mask `kind` of every worker.
    pub fn push(&self, kind: MaskKind, slot: usize) {
        let word = self.word_of(kind, slot);
        let bit = 1u64 << (slot % 64);
        for worker in self.workers.iter() {
            worker.bits[word].fetch_or(bit, Ordering::Release);
        }
    }

    /// The index of `slot`'s word in a worker's masks.
    fn word_of(&self, kind: MaskKind, slot: usize) -> usize {
        slot / 64
            + match kind {
                MaskKind::Change => 0,
                MaskKind::Return => self.words,
            }
    }

    /// Sets bit `slot` in mask `kind` of `worker` only. The scheduler always
    /// tells every worker ([`Self::push`]); the simulator ([`crate::sim`])
    /// also tells one worker that a task set it found at its parallelism
    /// has a free place again.
    pub fn push_to(&self, worker: usize, kind: MaskKind, slot: usize) {
        let word = self.word_of(kind, slot);
        self.workers[worker].bits[word].fetch_or(1u64 << (slot % 64), Ordering::Release);
    }

    /// Whether `worker` has updates it has not pulled yet: a new group or a
    /// next task set that its current decision did not consider. Read by the
    /// worker itself between morsels of a running task (preemption points,
    /// [`crate::TaskContext::next_morsel`]), so a task yields early when the
    /// choice may have changed. Relaxed loads, a hint only: a bit missed here
    /// is seen at the next morsel or by the next `pull`, which orders it.
    pub fn pending(&self, worker: usize) -> bool {
        self.workers[worker]
            .bits
            .iter()
            .any(|w| w.load(Ordering::Relaxed) != 0)
    }

    /// Takes `worker`'s pending updates: calls `f(kind, slot)` once per bit
    /// that was set, change bits first. Returns whether any bit was set.
    /// Only the owning worker may pull its masks.
    pub fn pull(&self, worker: usize, mut f: impl FnMut(MaskKind, usize)) -> bool {
        let bits = &self.workers[worker].bits;
        let mut any = false;
        for (i, word) in bits.iter().enumerate() {
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut taken = word.swap(0, Ordering::Acquire);
            let (kind, base) = if i < self.words {
                (MaskKind::Change, i * 64)
            } else {
                (MaskKind::Return, (i - self.words) * 64)
            };
            while taken != 0 {
                any = true;
                let b = taken.trailing_zeros() as usize;
                taken &= taken - 1;
                f(kind, base + b);
            }
        }
        any
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bits_beyond_64_slots_reach_every_worker_once() {
        let m = UpdateMasks::new(3, 130);
        assert_eq!(m.words(), 3);
        m.push(MaskKind::Change, 0);
        m.push(MaskKind::Change, 129);
        m.push(MaskKind::Return, 64);
        m.push(MaskKind::Return, 64);
        for w in 0..3 {
            let mut seen = Vec::new();
            assert!(m.pull(w, |k, s| seen.push((k, s))));
            assert_eq!(
                seen,
                vec![
                    (MaskKind::Change, 0),
                    (MaskKind::Change, 129),
                    (MaskKind::Return, 64)
                ]
            );
            assert!(!m.pull(w, |_, _| panic!("pulled twice")));
        }
    }
}

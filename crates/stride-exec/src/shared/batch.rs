//! A batch: the members that share one pass over one table snapshot, and
//! where the pass stands (forming, running, done).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use stride_sched::{QueryError, QueryStats};
use stride_storage::Table;

use crate::error::ExecError;
use crate::placement::ScanPlacement;

use super::member::Member;

/// One batch of members over one table snapshot.
#[derive(Debug)]
pub(crate) struct Batch {
    pub(crate) id: u64,
    pub(crate) table: Arc<Table>,
    pub(crate) placement: ScanPlacement,
    /// When its first member attached (its cycle starts).
    pub(crate) opened: Instant,
    state: Mutex<BatchState>,
    /// Signalled when the phase changes, a member is cancelled, or the
    /// running batch ahead of a forming one ended (`kicks`).
    changed: Condvar,
}

#[derive(Debug)]
pub(crate) struct BatchState {
    pub(crate) phase: Phase,
    pub(crate) members: Vec<Arc<Member>>,
    /// Bumped by every [`Batch::kick`]: a waiter that read it before
    /// looking elsewhere (the hub) waits only if it is unchanged, so no
    /// wake-up is lost between the look and the wait.
    pub(crate) kicks: u64,
}

#[derive(Debug, Clone)]
pub(crate) enum Phase {
    /// Taking members; not yet submitted.
    Forming,
    /// Its pass runs as a resource group; the membership is fixed.
    Running { started: Instant, cycle: u64 },
    /// The pass ended: every task of it returned.
    Done(Arc<Outcome>),
}

/// How a batch's pass ended.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The pass group's accounting, or why it failed as a whole.
    pub(crate) result: Result<QueryStats, Failure>,
    pub(crate) started: Instant,
    /// Members at the start (the divisor of the common work).
    pub(crate) members: usize,
    /// The members' own operator time summed (the rest of the pass's CPU
    /// time is common work: cutting morsels, scheduling).
    pub(crate) members_time: Duration,
}

/// Why a pass failed as a whole (not one member's error).
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    Shutdown,
    Cancelled,
    Other(String),
}

impl Failure {
    pub(crate) fn from_query_error(e: QueryError) -> Self {
        match e {
            QueryError::Shutdown => Failure::Shutdown,
            QueryError::Cancelled => Failure::Cancelled,
            other => Failure::Other(other.to_string()),
        }
    }

    /// The error each member gets.
    pub(crate) fn to_exec_error(&self) -> ExecError {
        match self {
            Failure::Shutdown => ExecError::Query(QueryError::Shutdown),
            Failure::Cancelled => ExecError::Query(QueryError::Cancelled),
            Failure::Other(m) => ExecError::Internal(format!("shared scan failed: {m}")),
        }
    }
}

impl Batch {
    pub(crate) fn new(id: u64, table: Arc<Table>, placement: ScanPlacement) -> Self {
        Batch {
            id,
            table,
            placement,
            opened: Instant::now(),
            state: Mutex::new(BatchState {
                phase: Phase::Forming,
                members: Vec::new(),
                kicks: 0,
            }),
            changed: Condvar::new(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, BatchState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the batch's waiting members (a cancel, or the batch ahead
    /// ended).
    pub(crate) fn kick(&self) {
        let mut st = self.lock();
        st.kicks += 1;
        self.changed.notify_all();
    }

    /// Sets the phase and wakes every waiting member.
    pub(crate) fn set_phase(&self, st: &mut BatchState, phase: Phase) {
        st.phase = phase;
        st.kicks += 1;
        self.changed.notify_all();
    }

    /// Waits for a change (up to `timeout`, when given).
    pub(crate) fn wait<'a>(
        &self,
        st: MutexGuard<'a, BatchState>,
        timeout: Option<Duration>,
    ) -> MutexGuard<'a, BatchState> {
        match timeout {
            Some(t) => {
                self.changed
                    .wait_timeout(st, t)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
            None => self.changed.wait(st).unwrap_or_else(|p| p.into_inner()),
        }
    }
}

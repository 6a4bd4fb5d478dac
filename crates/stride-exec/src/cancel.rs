//! Cancelling a running query from another thread.
//!
//! A query runs as one resource group, or — when it shares a scan
//! ([`crate::shared`]) — in phases: its own group before the shared pass,
//! its membership in a batch during it, its own group after it. The
//! [`Canceller`] the executor publishes reaches whichever phase is running:
//! a group's cancel flag, or the member's own flag in its batch (which
//! detaches only that member; the batch goes on for the others).

use std::sync::Arc;

use crate::shared::Member;

/// Cancels one query (or one phase of it); idempotent, harmless after the
/// query completed.
#[derive(Clone, Debug)]
pub struct Canceller(Target);

#[derive(Clone, Debug)]
enum Target {
    Group(stride_sched::Canceller),
    Member(Arc<Member>),
}

impl Canceller {
    pub(crate) fn group(canceller: stride_sched::Canceller) -> Self {
        Canceller(Target::Group(canceller))
    }

    pub(crate) fn member(member: Arc<Member>) -> Self {
        Canceller(Target::Member(member))
    }

    pub fn cancel(&self) {
        match &self.0 {
            Target::Group(c) => c.cancel(),
            Target::Member(m) => m.request_cancel(),
        }
    }
}

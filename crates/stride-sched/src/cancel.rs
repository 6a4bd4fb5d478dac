//! Cancelling a query from a thread other than the one waiting for it.
//!
//! [`QueryHandle::wait`] consumes the handle, so the thread that waits cannot
//! also lend it to a thread that wants to cancel (a server connection whose
//! client sent a CancelRequest or went away). A [`Canceller`] is a cheap,
//! clonable second handle that can only cancel.

use std::sync::Arc;

use crate::group::{QueryHandle, ResourceGroup};

/// Cancels one query; see [`QueryHandle::cancel`].
#[derive(Clone)]
pub struct Canceller {
    group: Arc<ResourceGroup>,
}

impl Canceller {
    /// Same as [`QueryHandle::cancel`]: idempotent, and harmless after the
    /// query completed.
    pub fn cancel(&self) {
        QueryHandle {
            group: self.group.clone(),
        }
        .cancel();
    }
}

impl std::fmt::Debug for Canceller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canceller")
            .field("group", &self.group.id)
            .finish()
    }
}

impl QueryHandle {
    /// A handle that can cancel this query from another thread.
    pub fn canceller(&self) -> Canceller {
        Canceller {
            group: self.group.clone(),
        }
    }
}

//! One query attached to a batch: its shared pipeline (the operators and
//! sink it runs on every morsel of the pass), the gate that lets it leave
//! mid-pass, and what it cost.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;

use crate::error::{ExecError, Result};
use crate::pipeline::Pipeline;
use crate::seq::MorselSeq;
use crate::source::Morsel;

use super::batch::Batch;

/// A member of a batch ([`super`]).
pub struct Member {
    /// The member's pipeline over the shared table: its operators and
    /// sink run on each morsel; its own source is never read.
    pub(crate) pipeline: Arc<Pipeline>,
    /// The columns of the table the member reads, in its order.
    projection: Vec<usize>,
    /// Open while the member takes morsels. A task holds it shared while
    /// it pushes a morsel into the member (`try_read`: a worker never
    /// waits; a closing gate means the member is leaving, so the morsel is
    /// not its any more); the member's own thread closes it exclusively,
    /// which waits for the pushes in flight — after that no worker
    /// touches the member's operators or sink again.
    gate: RwLock<bool>,
    /// Its operators failed: no further morsel goes to it (Release when
    /// set after the error was stored; Acquire by the reader of the error).
    failed: AtomicBool,
    error: Mutex<Option<ExecError>>,
    /// A cancel was requested (Relaxed: its session thread re-reads it
    /// under the batch's lock after being woken; tasks read it as a hint
    /// to stop inside a morsel).
    cancel: AtomicBool,
    /// CPU time of this member's own operators over the pass, nanoseconds
    /// (Relaxed counter, read once the pass has ended).
    nanos: AtomicU64,
    /// The batch it is in, to be woken by a cancel (set once at attach).
    batch: OnceLock<Weak<Batch>>,
    /// When it attached.
    pub(crate) attached: Instant,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("pipeline", &self.pipeline.id)
            .field("cancel", &self.cancel.load(Ordering::Relaxed))
            .finish()
    }
}

impl Member {
    pub(crate) fn new(pipeline: Arc<Pipeline>, projection: Vec<usize>) -> Self {
        Member {
            pipeline,
            projection,
            gate: RwLock::new(true),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            cancel: AtomicBool::new(false),
            nanos: AtomicU64::new(0),
            batch: OnceLock::new(),
            attached: Instant::now(),
        }
    }

    pub(crate) fn join(&self, batch: &Arc<Batch>) {
        let _ = self.batch.set(Arc::downgrade(batch));
    }

    /// Runs the member's pipeline on one morsel of the pass (its slices
    /// over every column of the table). Returns whether the member still
    /// takes morsels. Its errors and panics stay its own.
    pub(crate) fn run(&self, slices: &[(MorselSeq, RecordBatch)], worker: usize) -> bool {
        let Ok(open) = self.gate.try_read() else {
            // Being closed: the member is leaving.
            return false;
        };
        if !*open || self.failed.load(Ordering::Acquire) || self.pipeline.sink.is_full() {
            return false;
        }
        let start = Instant::now();
        let stop = || self.cancel.load(Ordering::Relaxed);
        let ran = catch_unwind(AssertUnwindSafe(|| -> Result<bool> {
            let mut morsel = Morsel::default();
            for (seq, batch) in slices {
                morsel.slices.push((*seq, batch.project(&self.projection)?));
            }
            self.pipeline.process_morsel(morsel, worker, &stop)
        }));
        self.nanos
            .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        match ran {
            Ok(Ok(_)) => !stop(),
            Ok(Err(e)) => {
                self.fail(e);
                false
            }
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a shared-scan member panicked".to_string());
                self.fail(ExecError::Internal(format!("a task panicked: {message}")));
                false
            }
        }
    }

    fn fail(&self, e: ExecError) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
        self.failed.store(true, Ordering::Release);
    }

    /// The member's error, once (its operators failed during the pass).
    pub(crate) fn take_error(&self) -> Option<ExecError> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    pub(crate) fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Asks the member to leave: its session thread is woken, closes the
    /// gate and returns "cancelled"; the batch goes on for the others.
    pub(crate) fn request_cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(batch) = self.batch.get().and_then(Weak::upgrade) {
            batch.kick();
        }
    }

    pub(crate) fn cancel_requested(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Closes the gate: waits (on the member's session thread, never a
    /// worker) for the pushes in flight; afterwards no task touches the
    /// member again.
    pub(crate) fn detach(&self) {
        *self.gate.write().unwrap_or_else(|p| p.into_inner()) = false;
    }

    /// Whether the member left the batch (gate closed).
    pub(crate) fn detached(&self) -> bool {
        !*self.gate.read().unwrap_or_else(|p| p.into_inner())
    }

    /// CPU time of the member's own operators so far.
    pub(crate) fn own_time(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }
}

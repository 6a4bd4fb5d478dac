//! The shared pass: the one task set of a batch's resource group. Each
//! task cuts morsels of the table once and runs every attached member's
//! pipeline on each, while its rows are in cache.

use std::sync::Arc;
use std::time::Instant;

use stride_sched::{FinalizeContext, FollowUps, TaskContext, TaskError, TaskOutcome, TaskSetWork};

use crate::placed_source::{PlacedSource, ScanOrder};
use crate::source::{Source, Taken};

use super::batch::Batch;
use super::member::Member;

/// Fewest rows a morsel of a shared pass holds by default
/// ([`super::SharingConfig::min_morsel_rows`]). Each member's operators
/// cost a fixed amount per morsel beside their per-row work; morsels sized
/// for `t_max` over all members (the adaptive sizer starts at 16 rows and
/// grows only while a morsel stays short) would shrink as the batch grows,
/// so that the fixed costs grow with the square of its size (measured: a
/// pass of 63 TPC-H Q1/Q6 members at SF 0.1 took 48 s). The price: a
/// morsel of a batch of N members takes about N times a single query's
/// morsel of this size, which bounds how long a newly arrived query may
/// wait for a worker (`max_batch` bounds N).
pub const SHARED_MORSEL_MIN_ROWS: usize = 2048;

/// A batch's pass over its table.
#[derive(Debug)]
pub(crate) struct SharedPass {
    name: String,
    /// Every column of the table (members project their own).
    source: PlacedSource,
    /// The members at the start (fixed; a member that leaves closes its
    /// gate and is skipped).
    members: Vec<Arc<Member>>,
    /// Fewest rows per morsel.
    min_rows: usize,
}

impl SharedPass {
    pub(crate) fn new(batch: &Batch, members: Vec<Arc<Member>>, min_rows: usize) -> Self {
        let columns = (0..batch.table.schema().fields().len()).collect();
        SharedPass {
            name: format!(
                "shared scan {} (batch {}, {} members)",
                batch.table.name(),
                batch.id,
                members.len()
            ),
            source: PlacedSource::new(
                batch.table.name(),
                batch.table.blocks().clone(),
                columns,
                batch.placement.clone(),
                ScanOrder::Any,
            ),
            members,
            min_rows: min_rows.max(1),
        }
    }
}

impl TaskSetWork for SharedPass {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        let start = Instant::now();
        let outcome = loop {
            let Some(rows) = ctx.next_morsel(self.source.remaining_rows()) else {
                break Ok(TaskOutcome::Yielded);
            };
            let rows = rows.max(self.min_rows);
            let morsel = match self.source.take(rows, ctx) {
                Ok(Taken::Morsel(m)) => m,
                Ok(Taken::Dry) => break Ok(TaskOutcome::Exhausted),
                Ok(Taken::NodeDry(affinity)) => break Ok(TaskOutcome::NodeDry(affinity)),
                Err(e) => break Err(TaskError::new(e)),
            };
            let mut live = 0;
            for member in &self.members {
                live += usize::from(member.run(&morsel.slices, ctx.worker()));
            }
            ctx.morsel_done(morsel.rows());
            if live == 0 {
                // Every member left, failed or has all it needs.
                break Ok(TaskOutcome::Exhausted);
            }
        };
        self.source.task_ran(start.elapsed());
        outcome
    }

    fn finalize(&self, _cx: &FinalizeContext<'_>) -> Result<FollowUps, TaskError> {
        self.source.finish();
        Ok(FollowUps::new())
    }
}

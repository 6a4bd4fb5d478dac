//! Helpers shared by integration tests.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use stride_sched::{TaskContext, TaskOutcome};

/// Items handed out from one cursor, each counted when run.
pub struct Items {
    cursor: AtomicUsize,
    pub runs: Vec<AtomicU32>,
}

impl Items {
    pub fn new(items: usize) -> Self {
        Items {
            cursor: AtomicUsize::new(0),
            runs: (0..items).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// One task: morsels of the sizes `ctx` asks for until it says stop
    /// (`Yielded`) or the items run out (`Exhausted`); `after` sees the
    /// context after each morsel's items are counted.
    pub fn run_task(
        &self,
        ctx: &mut TaskContext<'_>,
        mut after: impl FnMut(&TaskContext<'_>),
    ) -> TaskOutcome {
        loop {
            let Some(n) = ctx.next_morsel(None) else {
                return TaskOutcome::Yielded;
            };
            let start = self.cursor.fetch_add(n, Ordering::Relaxed);
            if start >= self.runs.len() {
                return TaskOutcome::Exhausted;
            }
            let end = (start + n).min(self.runs.len());
            for run in &self.runs[start..end] {
                run.fetch_add(1, Ordering::Relaxed);
            }
            after(ctx);
            ctx.morsel_done(end - start);
        }
    }

    /// Every item ran exactly once.
    pub fn each_once(&self) -> bool {
        self.runs.iter().all(|r| r.load(Ordering::Relaxed) == 1)
    }
}

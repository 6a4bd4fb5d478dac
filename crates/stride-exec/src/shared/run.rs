//! A query that shares a scan, in phases on its session's thread: its own
//! pipelines before the shared one (a resource group), its membership in a
//! batch, then its own group again — the shared pipeline's finalization
//! followed by its remaining pipelines. The statistics of the phases are
//! joined into the query's own, its share of the pass apportioned.

use std::sync::Arc;
use std::time::{Duration, Instant};

use stride_sched::{FinalizeContext, FollowUps, GroupFacts, QueryStats, Scheduler};
use stride_sched::{TaskContext, TaskError, TaskOutcome, TaskSetWork};

use crate::alloc_guard::{Accounted, AllocAccount};
use crate::cancel::Canceller;
use crate::error::Result;
use crate::pipeline::Pipeline;
use crate::placed_source::ScanOrder;

use super::hub::SharedScans;

/// The pipeline a query shares, if any: the scan (in any order) of the
/// largest table among its pipelines, unless it is the last pipeline (its
/// sink is the result: a streamed result's consumer is not yet reading
/// while the batch runs). Ties go to the earlier pipeline.
pub(crate) fn shareable(pipelines: &[Pipeline]) -> Option<usize> {
    let last = pipelines.len().checked_sub(1)?;
    let mut best: Option<(usize, usize)> = None;
    for (i, p) in pipelines[..last].iter().enumerate() {
        let Some(scan) = &p.scan else { continue };
        if scan.order != ScanOrder::Any {
            continue;
        }
        let rows = scan.table.num_rows();
        if best.is_none_or(|(_, r)| rows > r) {
            best = Some((i, rows));
        }
    }
    best.map(|(i, _)| i)
}

/// What a sharing query runs as its own group, and what ran before.
pub(crate) struct Prepared {
    pub(crate) task_sets: Vec<Arc<dyn TaskSetWork>>,
    pub(crate) facts: GroupFacts,
    pub(crate) prelude: Option<Prelude>,
}

/// Runs the phases up to the shared pass (on the calling thread, which
/// waits); returns the query's last group to submit. A query with nothing
/// to share gets its pipelines back unchanged.
pub(crate) fn prepare(
    pipelines: Vec<Pipeline>,
    scheduler: &Scheduler,
    facts: GroupFacts,
    hub: &Arc<SharedScans>,
    account: &Arc<AllocAccount>,
    on_running: &mut dyn FnMut(Option<Canceller>),
) -> Result<Prepared> {
    let Some(k) = shareable(&pipelines) else {
        return Ok(Prepared {
            task_sets: task_sets(pipelines, account),
            facts,
            prelude: None,
        });
    };
    let started = Instant::now();
    let mut pre = pipelines;
    let rest = pre.split_off(k + 1);
    let shared = Arc::new(pre.pop().expect("the shared pipeline"));
    let (pre_estimates, post_estimates) = match &facts.estimates {
        Some(e) if e.len() > k => (Some(e[..k].to_vec()), Some(e[k..].to_vec())),
        _ => (None, None),
    };
    // Before: the member's own pipelines the shared one reads (build sides).
    let pre_stats = if pre.is_empty() {
        None
    } else {
        let handle = scheduler.submit_with(
            task_sets(pre, account),
            GroupFacts {
                estimates: pre_estimates,
                ..facts.clone()
            },
        );
        on_running(Some(Canceller::group(handle.canceller())));
        Some(handle.wait().map_err(crate::executor::unwrap_query_error)?)
    };
    // The shared pass.
    let scan = shared.scan.clone().expect("a shareable pipeline scans");
    let (batch, member) = hub.attach(scheduler, &scan, shared.clone());
    on_running(Some(Canceller::member(member.clone())));
    let outcome = hub.wait(scheduler, &batch, &member)?;
    if let Some(e) = member.take_error() {
        return Err(e);
    }
    let pass = outcome.result.as_ref().map_err(|f| f.to_exec_error())?;
    if member.cancel_requested() {
        return Err(crate::error::ExecError::Query(
            stride_sched::QueryError::Cancelled,
        ));
    }
    // Apportioning: the member's own operator time, plus an equal share of
    // the pass's common work (its CPU time not spent in any member's
    // operators) among the members at the start.
    let common = pass.cpu_time.saturating_sub(outcome.members_time);
    let share = Share {
        cpu: member.own_time() + common / outcome.members.max(1) as u32,
        morsels: pass.morsels,
        tuples: pass.tuples,
        queue_wait: outcome.started.saturating_duration_since(member.attached) + pass.queue_wait,
        histogram: pass.morsel_size_histogram.clone(),
        morsel_min: pass.morsel_tuples_min,
        morsel_max: pass.morsel_tuples_max,
    };
    // After: the shared pipeline's finalization, then the rest.
    let mut sets: Vec<Arc<dyn TaskSetWork>> =
        vec![Accounted::wrap(Arc::new(FinishShared(shared)), account)];
    sets.extend(task_sets(rest, account));
    Ok(Prepared {
        task_sets: sets,
        facts: GroupFacts {
            estimates: post_estimates,
            ..facts
        },
        prelude: Some(Prelude {
            started,
            pre: pre_stats,
            share,
        }),
    })
}

/// The member's own pipelines as task sets on its allocation account
/// ([`crate::alloc_guard`]).
fn task_sets(pipelines: Vec<Pipeline>, account: &Arc<AllocAccount>) -> Vec<Arc<dyn TaskSetWork>> {
    pipelines
        .into_iter()
        .map(|p| Accounted::wrap(Arc::new(p), account))
        .collect()
}

/// The shared pipeline's finalization (its sink's finish: a hash table laid
/// out, partial aggregates split into merge partitions, its operators'
/// deferred rows), run in the member's own group once the pass ended.
struct FinishShared(Arc<Pipeline>);

impl TaskSetWork for FinishShared {
    fn name(&self) -> String {
        format!("finish shared {}", self.0.describe())
    }

    fn run_task(&self, _ctx: &mut TaskContext<'_>) -> std::result::Result<TaskOutcome, TaskError> {
        // Every morsel was run in the batch's pass.
        Ok(TaskOutcome::Exhausted)
    }

    fn finalize(&self, cx: &FinalizeContext<'_>) -> std::result::Result<FollowUps, TaskError> {
        self.0.finalize(cx)
    }

    fn parallelism_hint(&self) -> Option<usize> {
        Some(1)
    }
}

/// A member's part of a pass.
#[derive(Debug)]
struct Share {
    cpu: Duration,
    morsels: u64,
    tuples: u64,
    queue_wait: Duration,
    histogram: Vec<(u64, u64)>,
    morsel_min: u64,
    morsel_max: u64,
}

/// What ran before a sharing query's last group.
#[derive(Debug)]
pub(crate) struct Prelude {
    started: Instant,
    pre: Option<QueryStats>,
    share: Share,
}

impl Prelude {
    /// The query's statistics: its last group's, with the group before the
    /// pass and its share of the pass added. The shared stage's CPU time
    /// (its share plus its finalization's) stands where the pipeline's
    /// own would, so that stages line up with the plan's pipelines.
    pub(crate) fn join(self, last: QueryStats) -> QueryStats {
        let Prelude {
            started,
            pre,
            share,
        } = self;
        let mut out = last;
        let pre = pre.unwrap_or_default();
        out.latency = started.elapsed();
        out.queue_wait = if pre.task_sets > 0 {
            pre.queue_wait
        } else {
            share.queue_wait
        };
        out.cpu_time += pre.cpu_time + share.cpu;
        out.finalize_time += pre.finalize_time;
        out.tasks += pre.tasks;
        out.suspended_morsels += pre.suspended_morsels;
        out.follow_ups += pre.follow_ups;
        out.task_sets += pre.task_sets;
        out.estimated_cpu = match (pre.task_sets, pre.estimated_cpu, out.estimated_cpu) {
            (0, _, e) => e,
            (_, Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        let mut cpu = pre.task_set_cpu;
        let mut morsels = pre.task_set_morsels;
        if let Some(first) = out.task_set_cpu.first_mut() {
            *first += share.cpu;
        }
        if let Some(first) = out.task_set_morsels.first_mut() {
            *first += share.morsels;
        }
        cpu.append(&mut out.task_set_cpu);
        morsels.append(&mut out.task_set_morsels);
        out.task_set_cpu = cpu;
        out.task_set_morsels = morsels;
        let sizes = [
            (pre.morsels, pre.morsel_tuples_min, pre.morsel_tuples_max),
            (share.morsels, share.morsel_min, share.morsel_max),
        ];
        for (n, min, max) in sizes {
            if n == 0 {
                continue;
            }
            out.morsel_tuples_min = if out.morsels == 0 {
                min
            } else {
                out.morsel_tuples_min.min(min)
            };
            out.morsel_tuples_max = out.morsel_tuples_max.max(max);
            out.morsels += n;
        }
        out.tuples += pre.tuples + share.tuples;
        for (bound, count) in pre.morsel_size_histogram.into_iter().chain(share.histogram) {
            match out
                .morsel_size_histogram
                .iter_mut()
                .find(|(b, _)| *b == bound)
            {
                Some(slot) => slot.1 += count,
                None => out.morsel_size_histogram.push((bound, count)),
            }
        }
        out.morsel_size_histogram.sort_unstable();
        out
    }
}

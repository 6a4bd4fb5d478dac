//! Recorded per-pipeline costs, the remaining-work estimates of SRPT and
//! IF-SRPT (seed 000 §3.2).
//!
//! After a query ran, the CPU time and morsel count of each of its task sets
//! (pipelines) are recorded under the query's *plan fingerprint*: a hash of
//! its physical plan as EXPLAIN prints it (operators, expressions and
//! literals, so different parameter values are different plans). The next
//! time the same plan runs, the scheduler gets these costs as
//! [`TaskSetEstimate`]s. A pipeline counts as *elastic* when it produced at
//! least two morsels per worker, i.e. every worker could take part; a
//! pipeline with fewer morsels cannot use the machine, the seeds' inelastic
//! job.
//!
//! Costs are smoothed over runs (an exponential moving average with weight
//! [`NEW_WEIGHT`] on the newest run). The map is bounded: when it holds
//! [`CAPACITY`] plans it is cleared (plans come back on their next run).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use stride_sched::{QueryStats, TaskSetEstimate};

/// Most plans remembered.
pub const CAPACITY: usize = 10_000;
/// Weight of the newest run in the moving average.
pub const NEW_WEIGHT: f64 = 0.5;

/// Plan fingerprint → recorded cost of each task set.
#[derive(Debug, Default)]
pub struct WorkHistory {
    plans: Mutex<HashMap<u64, Vec<TaskSetEstimate>>>,
}

/// The fingerprint of a physical plan.
pub fn fingerprint(plan: &stride_exec::PhysicalPlan) -> u64 {
    let mut h = DefaultHasher::new();
    plan.to_string().hash(&mut h);
    h.finish()
}

impl WorkHistory {
    /// The recorded costs of `plan`'s task sets, if it ran before.
    pub fn estimates(&self, plan: u64) -> Option<Vec<TaskSetEstimate>> {
        self.lock().get(&plan).cloned()
    }

    /// Records a completed run of `plan` on `workers` workers.
    pub fn record(&self, plan: u64, stats: &QueryStats, workers: usize) {
        if stats.task_set_cpu.is_empty() || stats.task_set_cpu.len() != stats.task_set_morsels.len()
        {
            return;
        }
        let run: Vec<TaskSetEstimate> = stats
            .task_set_cpu
            .iter()
            .zip(&stats.task_set_morsels)
            .map(|(&work, &morsels)| TaskSetEstimate {
                work,
                elastic: morsels >= 2 * workers as u64,
            })
            .collect();
        let mut plans = self.lock();
        if plans.len() >= CAPACITY && !plans.contains_key(&plan) {
            plans.clear();
        }
        match plans.get_mut(&plan) {
            Some(old) if old.len() == run.len() => {
                for (o, n) in old.iter_mut().zip(run) {
                    let w = o.work.as_secs_f64() * (1.0 - NEW_WEIGHT)
                        + n.work.as_secs_f64() * NEW_WEIGHT;
                    o.work = Duration::from_secs_f64(w);
                    o.elastic = n.elastic;
                }
            }
            _ => {
                plans.insert(plan, run);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Vec<TaskSetEstimate>>> {
        self.plans.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(cpu_ms: &[u64], morsels: &[u64]) -> QueryStats {
        QueryStats {
            task_set_cpu: cpu_ms.iter().map(|&m| Duration::from_millis(m)).collect(),
            task_set_morsels: morsels.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn records_smooths_and_classifies() {
        let h = WorkHistory::default();
        assert!(h.estimates(1).is_none());
        h.record(1, &stats(&[10, 2], &[40, 1]), 4);
        let e = h.estimates(1).unwrap();
        assert_eq!(e[0].work, Duration::from_millis(10));
        assert!(e[0].elastic);
        assert!(!e[1].elastic);
        h.record(1, &stats(&[20, 2], &[40, 1]), 4);
        let e = h.estimates(1).unwrap();
        assert_eq!(e[0].work, Duration::from_millis(15));
        // A run of a different shape replaces the record.
        h.record(1, &stats(&[7], &[1]), 4);
        assert_eq!(h.estimates(1).unwrap().len(), 1);
        // Stats without per-task-set costs are ignored.
        h.record(2, &QueryStats::default(), 4);
        assert!(h.estimates(2).is_none());
    }
}

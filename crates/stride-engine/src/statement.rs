//! `StatementStats`: the scheduler accounting of one statement, summed
//! over the queries it ran (its scalar subqueries first, its own query
//! last) — what the query log keeps of the statement.

use stride_sched::QueryStats;

/// The summed accounting of a running statement's queries.
#[derive(Debug, Default)]
pub struct StatementStats {
    sum: Option<QueryStats>,
}

impl StatementStats {
    /// Forgets what was summed (a new statement starts).
    pub fn clear(&mut self) {
        self.sum = None;
    }

    /// The sum so far (no query ran: all zero), leaving nothing behind.
    pub fn take(&mut self) -> QueryStats {
        self.sum.take().unwrap_or_default()
    }

    /// Adds a query's accounting; the statement's priority is its last
    /// query's (its own, which runs after its subqueries).
    pub fn add(&mut self, stats: &QueryStats) {
        let Some(a) = self.sum.as_mut() else {
            self.sum = Some(stats.clone());
            return;
        };
        let o = stats;
        a.cpu_time += o.cpu_time;
        a.finalize_time += o.finalize_time;
        a.tasks += o.tasks;
        a.suspended_morsels += o.suspended_morsels;
        a.memory_peak = a.memory_peak.max(o.memory_peak);
        a.spilled_bytes += o.spilled_bytes;
        a.morsels += o.morsels;
        a.tuples += o.tuples;
        a.task_sets += o.task_sets;
        a.latency += o.latency;
        a.estimated_cpu = a.estimated_cpu.zip(o.estimated_cpu).map(|(x, y)| x + y);
        a.task_set_cpu.extend_from_slice(&o.task_set_cpu);
        a.task_set_morsels.extend_from_slice(&o.task_set_morsels);
        if o.morsels > 0 {
            // `a.morsels` already includes `o`'s: equal means the earlier
            // queries ran no morsel.
            a.morsel_tuples_min = if a.morsels == o.morsels {
                o.morsel_tuples_min
            } else {
                a.morsel_tuples_min.min(o.morsel_tuples_min)
            };
            a.morsel_tuples_max = a.morsel_tuples_max.max(o.morsel_tuples_max);
        }
        for &(bound, count) in &o.morsel_size_histogram {
            match a
                .morsel_size_histogram
                .iter_mut()
                .find(|(b, _)| *b == bound)
            {
                Some(slot) => slot.1 += count,
                None => a.morsel_size_histogram.push((bound, count)),
            }
        }
        a.morsel_size_histogram.sort_unstable();
        a.priority_trace = o.priority_trace.clone();
        a.final_priority = o.final_priority;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_statement_sums_its_queries() {
        let mut s = StatementStats::default();
        assert_eq!(s.take().tasks, 0);
        let subquery = QueryStats {
            cpu_time: Duration::from_millis(3),
            tasks: 2,
            morsels: 4,
            morsel_tuples_min: 10,
            morsel_tuples_max: 40,
            memory_peak: 100,
            estimated_cpu: Some(Duration::from_millis(1)),
            task_set_cpu: vec![Duration::from_millis(3)],
            morsel_size_histogram: vec![(64, 4)],
            final_priority: 1.0,
            ..Default::default()
        };
        let own = QueryStats {
            cpu_time: Duration::from_millis(5),
            tasks: 3,
            morsels: 6,
            morsel_tuples_min: 5,
            morsel_tuples_max: 20,
            memory_peak: 50,
            estimated_cpu: Some(Duration::from_millis(2)),
            task_set_cpu: vec![Duration::from_millis(5)],
            morsel_size_histogram: vec![(32, 1), (64, 5)],
            final_priority: 7.0,
            ..Default::default()
        };
        s.add(&subquery);
        s.add(&own);
        let sum = s.take();
        assert_eq!(sum.cpu_time, Duration::from_millis(8));
        assert_eq!((sum.tasks, sum.morsels), (5, 10));
        assert_eq!((sum.morsel_tuples_min, sum.morsel_tuples_max), (5, 40));
        assert_eq!(sum.memory_peak, 100);
        assert_eq!(sum.estimated_cpu, Some(Duration::from_millis(3)));
        assert_eq!(sum.task_set_cpu.len(), 2);
        assert_eq!(sum.morsel_size_histogram, vec![(32, 1), (64, 9)]);
        assert_eq!(sum.final_priority, 7.0);
        // Taken: the next statement starts from nothing.
        assert_eq!(s.take().tasks, 0);
    }
}

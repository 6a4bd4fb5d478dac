//! Stopping a session's request from another thread: cancels, disconnects
//! and `statement_timeout`.
//!
//! ```text
//!   server (async)                    session thread
//!   arm(deadline) ──► requested=NONE   begin(): keeps what arm set
//!   cancel()/time_out() ─► requested   check() between phases and inside
//!                       └► Canceller   every analyzer/optimizer rule
//!                                      publish(Some(canceller)) while the
//!                                      query runs on the scheduler
//! ```
//!
//! Planning phases that DataFusion runs (analysis, optimization) cannot be
//! stopped from outside, so their rules are wrapped: a wrapped rule checks
//! the interrupt before it runs and fails the statement with its stop's
//! error. An optimizer rule that lets the optimizer recurse is checked at
//! every node it visits, so a large plan is stopped mid-rule.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use datafusion_common::config::ConfigOptions;
use datafusion_common::tree_node::Transformed;
use datafusion_common::DataFusionError;
use datafusion_expr::LogicalPlan;
use datafusion_optimizer::optimizer::ApplyOrder;
use datafusion_optimizer::{Analyzer, AnalyzerRule, Optimizer, OptimizerConfig, OptimizerRule};

use crate::error::{Result, SqlError};

/// Cancels a session's request from another thread (a client's
/// CancelRequest, a disconnect, the server's `statement_timeout` timer).
///
/// A *request* is one call of [`Session::execute_statements`],
/// [`Session::prepare`] or [`Session::execute_prepared`]. A cancel lands
/// wherever the request is: before it starts (the server [`arm`]s the
/// interrupt before handing the request to a thread, so a cancel that comes
/// while the request waits for one is kept, not cleared), between planning
/// phases (checked after parsing, binding, optimizing, each subquery and
/// lowering), inside the analyzer and optimizer (every rule is wrapped by
/// [`analyzer`] / [`optimizer`]: checked before each analyzer rule and
/// before each plan node an optimizer rule rewrites), waiting for admission
/// or running on the scheduler (the published [`stride_exec::Canceller`]).
///
/// [`arm`]: Interrupt::arm
#[derive(Default)]
pub struct Interrupt {
    /// Why the current request must stop: [`STOP_NONE`], [`STOP_USER`] or
    /// [`STOP_TIMEOUT`]; the first reason wins. SeqCst pairs the store with
    /// the load after `running` is published.
    requested: AtomicU8,
    /// Set by [`Interrupt::arm`]: the next request starts with whatever
    /// arrived since, instead of clearing it. SeqCst, like `requested`.
    armed: AtomicBool,
    /// The running request's deadline (its `statement_timeout`).
    deadline: Mutex<Option<Instant>>,
    /// Cancels the query on the scheduler, when one is running.
    running: Mutex<Option<stride_exec::Canceller>>,
}

const STOP_NONE: u8 = 0;
const STOP_USER: u8 = 1;
const STOP_TIMEOUT: u8 = 2;

impl Interrupt {
    /// Cancels the request running now (or, once armed, the next one).
    pub fn cancel(&self) {
        self.stop(STOP_USER);
    }

    /// Stops the request because it ran past its `statement_timeout`.
    pub fn time_out(&self) {
        self.stop(STOP_TIMEOUT);
    }

    fn stop(&self, why: u8) {
        let _ = self
            .requested
            .compare_exchange(STOP_NONE, why, Ordering::SeqCst, Ordering::SeqCst);
        if let Some(c) = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            c.cancel();
        }
    }

    /// Opens the window of the next request from outside the session, before
    /// the request reaches a thread: clears earlier cancels and sets the
    /// request's deadline. Cancels from now on stop that request.
    pub fn arm(&self, deadline: Option<Instant>) {
        self.requested.store(STOP_NONE, Ordering::SeqCst);
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = deadline;
        self.armed.store(true, Ordering::SeqCst);
    }

    /// A request starts: unless armed, earlier cancels are forgotten and the
    /// session's own `statement_timeout` sets the deadline.
    pub(crate) fn begin(&self, timeout: Option<Duration>) {
        if !self.armed.swap(false, Ordering::SeqCst) {
            self.requested.store(STOP_NONE, Ordering::SeqCst);
            *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) =
                timeout.map(|t| Instant::now() + t);
        }
    }

    /// The error of a stopped request.
    pub(crate) fn stopped(&self) -> SqlError {
        match self.requested.load(Ordering::SeqCst) {
            STOP_TIMEOUT => SqlError::Timeout,
            _ => SqlError::Cancelled,
        }
    }

    /// Fails with the stop's error once the request was cancelled or ran
    /// past its deadline.
    pub(crate) fn check(&self) -> Result<()> {
        if self.requested.load(Ordering::SeqCst) != STOP_NONE {
            return Err(self.stopped());
        }
        let deadline = *self.deadline.lock().unwrap_or_else(|e| e.into_inner());
        if deadline.is_some_and(|d| Instant::now() >= d) {
            self.time_out();
            return Err(self.stopped());
        }
        Ok(())
    }
}

impl Interrupt {
    /// Publishes the running query's canceller (`None` once it ended). A
    /// cancel that came before the canceller was published is applied here.
    pub(crate) fn publish(&self, canceller: Option<stride_exec::Canceller>) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        *running = canceller;
        if let Some(c) = running.as_ref() {
            if self.requested.load(Ordering::SeqCst) != STOP_NONE {
                c.cancel();
            }
        }
    }

    /// Stops the request at its deadline while the caller waits for a
    /// query on the scheduler, whoever runs the session (an in-process
    /// caller has no timer of its own): until the returned watch drops, a
    /// thread sleeps until the deadline and then times the request out,
    /// cancelling the running query. No deadline: no thread.
    pub(crate) fn watch_deadline(self: &Arc<Self>) -> DeadlineWatch {
        let Some(deadline) = *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) else {
            return DeadlineWatch { timer: None };
        };
        let ended: Arc<QueryEnded> = Arc::new((Mutex::new(false), Condvar::new()));
        let interrupt = self.clone();
        let watched = ended.clone();
        let spawned = std::thread::Builder::new()
            .name("stride-deadline".into())
            .spawn(move || {
                let (lock, wake) = &*watched;
                let mut ended = lock.lock().unwrap_or_else(|e| e.into_inner());
                while !*ended {
                    let now = Instant::now();
                    if now >= deadline {
                        drop(ended);
                        interrupt.time_out();
                        return;
                    }
                    ended = wake
                        .wait_timeout(ended, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            });
        match spawned {
            Ok(thread) => DeadlineWatch {
                timer: Some((ended, thread)),
            },
            // Without a thread the deadline still holds at every check
            // between phases and batches; the query runs to its end.
            Err(_) => DeadlineWatch { timer: None },
        }
    }

    /// The check as a DataFusion error, for rules running inside DataFusion;
    /// [`crate::engine`] unwraps it back to the [`SqlError`].
    fn check_in_datafusion(&self) -> datafusion_common::Result<()> {
        self.check()
            .map_err(|e| DataFusionError::External(Box::new(e)))
    }
}

/// The timer of [`Interrupt::watch_deadline`]: dropped when the query
/// ended, it wakes the timer's thread and waits for it to go.
pub(crate) struct DeadlineWatch {
    timer: Option<(Arc<QueryEnded>, std::thread::JoinHandle<()>)>,
}

/// Whether the watched query ended, and the timer's wake-up.
type QueryEnded = (Mutex<bool>, Condvar);

impl Drop for DeadlineWatch {
    fn drop(&mut self) {
        if let Some((ended, thread)) = self.timer.take() {
            let (lock, wake) = &*ended;
            *lock.lock().unwrap_or_else(|e| e.into_inner()) = true;
            wake.notify_one();
            // The thread only sleeps and cancels: it does not panic.
            let _ = thread.join();
        }
    }
}

/// DataFusion's analyzer with every rule checking `interrupt` first.
pub(crate) fn analyzer(interrupt: &Arc<Interrupt>) -> Analyzer {
    let analyzer = Analyzer::new();
    let rules = analyzer
        .rules
        .into_iter()
        .map(|inner| {
            Arc::new(CheckedAnalyzerRule {
                inner,
                interrupt: interrupt.clone(),
            }) as Arc<dyn AnalyzerRule + Send + Sync>
        })
        .collect();
    Analyzer::with_rules(rules)
}

/// DataFusion's optimizer with every rule checking `interrupt` before each
/// rewrite.
pub(crate) fn optimizer(interrupt: &Arc<Interrupt>) -> Optimizer {
    let rules = Optimizer::new()
        .rules
        .into_iter()
        .map(|inner| {
            Arc::new(CheckedRule {
                inner,
                interrupt: interrupt.clone(),
            }) as Arc<dyn OptimizerRule + Send + Sync>
        })
        .collect();
    Optimizer::with_rules(rules)
}

struct CheckedAnalyzerRule {
    inner: Arc<dyn AnalyzerRule + Send + Sync>,
    interrupt: Arc<Interrupt>,
}

impl std::fmt::Debug for CheckedAnalyzerRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CheckedAnalyzerRule")
            .field(&self.inner)
            .finish()
    }
}

impl AnalyzerRule for CheckedAnalyzerRule {
    fn analyze(
        &self,
        plan: LogicalPlan,
        config: &ConfigOptions,
    ) -> datafusion_common::Result<LogicalPlan> {
        self.interrupt.check_in_datafusion()?;
        self.inner.analyze(plan, config)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

struct CheckedRule {
    inner: Arc<dyn OptimizerRule + Send + Sync>,
    interrupt: Arc<Interrupt>,
}

impl std::fmt::Debug for CheckedRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CheckedRule").field(&self.inner).finish()
    }
}

impl OptimizerRule for CheckedRule {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        self.inner.apply_order()
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> datafusion_common::Result<Transformed<LogicalPlan>> {
        self.interrupt.check_in_datafusion()?;
        self.inner.rewrite(plan, config)
    }
}

#[cfg(test)]
mod tests {
    use datafusion_common::ScalarValue;
    use datafusion_expr::{col, lit, Expr, LogicalPlanBuilder};
    use datafusion_optimizer::OptimizerContext;

    use super::*;

    /// `select x from (values (1), (2)) where x > 1 + 1`: something for the
    /// optimizer to fold and push down.
    fn plan() -> LogicalPlan {
        let values = vec![
            vec![Expr::Literal(ScalarValue::Int64(Some(1)), None)],
            vec![Expr::Literal(ScalarValue::Int64(Some(2)), None)],
        ];
        LogicalPlanBuilder::values(values)
            .unwrap()
            .filter(col("column1").gt(lit(1i64) + lit(1i64)))
            .unwrap()
            .build()
            .unwrap()
    }

    fn optimize(interrupt: &Arc<Interrupt>) -> datafusion_common::Result<LogicalPlan> {
        let analyzed =
            analyzer(interrupt).execute_and_check(plan(), &ConfigOptions::default(), |_, _| {})?;
        optimizer(interrupt).optimize(analyzed, &OptimizerContext::new(), |_, _| {})
    }

    fn stop_of(e: DataFusionError) -> SqlError {
        let mut e = e;
        while let DataFusionError::Context(_, inner) = e {
            e = *inner;
        }
        match e {
            DataFusionError::External(inner) => *inner.downcast::<SqlError>().expect("a SqlError"),
            other => panic!("not a stop: {other}"),
        }
    }

    #[test]
    fn wrapped_rules_optimize_as_datafusions_own() {
        let interrupt = Arc::new(Interrupt::default());
        let ours = optimize(&interrupt).unwrap();
        let analyzed = Analyzer::new()
            .execute_and_check(plan(), &ConfigOptions::default(), |_, _| {})
            .unwrap();
        let theirs = Optimizer::new()
            .optimize(analyzed, &OptimizerContext::new(), |_, _| {})
            .unwrap();
        assert_eq!(ours, theirs);
        assert_ne!(ours, plan(), "the optimizer had work to do");
    }

    #[test]
    fn a_cancel_stops_the_analyzer_and_the_optimizer() {
        let interrupt = Arc::new(Interrupt::default());
        interrupt.arm(None);
        interrupt.cancel();
        let err = optimize(&interrupt).unwrap_err();
        assert!(matches!(stop_of(err), SqlError::Cancelled));

        // Past the deadline, inside the optimizer only: a timeout.
        let interrupt = Arc::new(Interrupt::default());
        let analyzed = analyzer(&interrupt)
            .execute_and_check(plan(), &ConfigOptions::default(), |_, _| {})
            .unwrap();
        interrupt.arm(Some(Instant::now()));
        let err = optimizer(&interrupt)
            .optimize(analyzed, &OptimizerContext::new(), |_, _| {})
            .unwrap_err();
        assert!(matches!(stop_of(err), SqlError::Timeout));
    }

    #[test]
    fn rules_keep_their_names_and_recursion() {
        let interrupt = Arc::new(Interrupt::default());
        let theirs = Optimizer::new();
        let ours = optimizer(&interrupt);
        assert_eq!(ours.rules.len(), theirs.rules.len());
        for (a, b) in ours.rules.iter().zip(&theirs.rules) {
            assert_eq!(a.name(), b.name());
            assert_eq!(
                format!("{:?}", a.apply_order()),
                format!("{:?}", b.apply_order())
            );
        }
        assert_eq!(
            analyzer(&interrupt).rules.len(),
            Analyzer::new().rules.len()
        );
    }
}

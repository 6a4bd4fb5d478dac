//! Pipelines: `source → operators… → sink`, each one task set.
//!
//! [`compile`] walks a [`PhysicalPlan`] bottom-up. Streaming operators (filter,
//! projection, hash-join probe) extend the pipeline of their input; breakers
//! end it with a sink and start a new pipeline reading the breaker's output.
//! Pipelines are emitted in an order in which every pipeline comes after the
//! pipelines whose results it reads, which is the order the scheduler runs the
//! task sets of the query's resource group.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use stride_sched::{FinalizeContext, FollowUps, TaskContext, TaskError, TaskOutcome, TaskSetWork};

use crate::buffer::Buffer;
use crate::error::{ExecError, Result};
use crate::memory::QueryMemory;
use crate::operator::aggregate::aggregate;
use crate::operator::filter::FilterOperator;
use crate::operator::grouping_sets::GroupingSetsOperator;
use crate::operator::limit::LimitSink;
use crate::operator::materialize::MaterializeSink;
use crate::operator::projection::ProjectionOperator;
use crate::operator::sort::SortSink;
use crate::operator::{Deferred, Demand, Operator, Resume, Sink};
use crate::placed_source::{PlacedSource, ScanOrder};
use crate::plan::PhysicalPlan;
use crate::seq::MorselSeq;
use crate::source::{BlockSource, Blocks, Morsel, Source, Taken};
use crate::step::StepTaskSet;
use crate::suspend::{after_chunk, suspendable, AtDry, Continuation, Driven, Frame, Suspended};

/// One pipeline, run as one task set.
#[derive(Debug)]
pub struct Pipeline {
    pub id: usize,
    pub source: Arc<dyn Source>,
    pub operators: Vec<Arc<dyn Operator>>,
    pub sink: Arc<dyn Sink>,
    /// The table scan its source reads, when it is one (what a shared
    /// scan, [`crate::shared`], may read in its place).
    pub scan: Option<ScanOrigin>,
    /// The branch of a UNION ALL this pipeline runs, when several feed its
    /// sink: its rows' [`MorselSeq::in_input`].
    input: Option<u32>,
    /// What its finalization does once the source finished.
    then: Then,
    /// Per operator: whether a task may stop inside a morsel after it
    /// emitted a chunk ([`crate::suspend`]).
    suspendable: Vec<bool>,
    /// Morsels tasks stopped inside, waiting for a later task.
    suspended: Suspended,
}

/// The table scan a pipeline's source was compiled from.
#[derive(Debug, Clone)]
pub struct ScanOrigin {
    pub table: Arc<stride_storage::Table>,
    /// Columns of the table the pipeline reads, in its order.
    pub projection: Vec<usize>,
    pub placement: crate::placement::ScanPlacement,
    pub order: ScanOrder,
}

/// What a pipeline's finalization does after its source's finish.
#[derive(Debug)]
enum Then {
    /// A compiled pipeline: its operators' deferred rows (in passes), then
    /// — if the pipeline is its sink's last input — the sink's finish.
    Drain(Finishing),
    /// A run of a pass other than its last: nothing (the next run follows).
    Nothing,
    /// A pass's last run: the deferral's next pass; after the last pass,
    /// the deferred rows of the operators after the deferring one (`rest`),
    /// then the sink's finish (as `finishing` says).
    NextPass {
        deferred: Arc<dyn Deferred>,
        rest: Vec<Arc<dyn Operator>>,
        finishing: Finishing,
    },
}

/// How much a pipeline's finalization finishes.
///
/// The branches of a UNION ALL run as pipelines of their own that share the
/// operators after the union and the sink (the union's rows are never
/// collected). Each branch but the last drains only the operators of its own
/// (those before the union); the last drains them, then the shared ones —
/// which by then have seen every branch's rows — and finishes the sink:
///
/// ```text
///   branch 0:  scan a ─► filter ─┐
///                                ├─► probe ─► aggregate sink
///   branch 1:  scan b ───────────┘
///   pipeline 0 (a, filter, probe → sink): drains filter          (Own(1))
///   pipeline 1 (b, probe → sink):         drains probe, finishes (All)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finishing {
    /// Every operator's deferred rows, then the sink's finish.
    All,
    /// Only the first `n` operators' deferred rows; the sink goes on.
    Own(usize),
}

impl Pipeline {
    /// Pushes `batch` through the operators from the `op`-th on into the
    /// sink — the `op`-th going on from `from` when it was suspended
    /// inside `batch`. An operator may emit several batches for one input
    /// (a join's bounded chunks); each goes on at once, so that only one
    /// chunk per operator is alive at a time. Between chunks the query's
    /// cancel flag is checked (`run.stop`): once set, every operator is
    /// told it has produced enough, so that a cancel lands inside a morsel
    /// whose rows each produce millions of rows. After a chunk of a
    /// suspendable operator the task may ask to stop (`run.suspend`): the
    /// operators stop where they are, their [`Frame`]s go to
    /// `run.recorded` (innermost first), and [`Demand::Suspend`] comes back.
    fn push(
        &self,
        run: &MorselRun<'_>,
        op: usize,
        seq: MorselSeq,
        batch: RecordBatch,
        from: Option<Resume>,
    ) -> Result<Demand> {
        if batch.num_rows() == 0 {
            return Ok(Demand::More);
        }
        match self.operators.get(op) {
            Some(operator) => {
                let suspendable = self.suspendable.get(op).copied().unwrap_or(false);
                let mut inner_suspended = false;
                let stopped = {
                    let mut emit = |out| {
                        if (run.stop)() {
                            return Ok(Demand::Enough);
                        }
                        let demand = self.push(run, op + 1, seq, out, None)?;
                        inner_suspended |= demand == Demand::Suspend;
                        Ok(after_chunk(demand, suspendable, run.suspend))
                    };
                    if suspendable {
                        operator
                            .process_resumable(&batch, from, run.worker, &mut emit)?
                            .map(|resume| (resume, batch))
                    } else {
                        operator.process(batch, run.worker, &mut emit)?;
                        None
                    }
                };
                if let Some((resume, batch)) = stopped {
                    run.recorded.borrow_mut().push_back(Frame {
                        op,
                        seq,
                        batch,
                        resume,
                    });
                    return Ok(Demand::Suspend);
                }
                if inner_suspended {
                    return Ok(Demand::Suspend);
                }
            }
            None => {
                // The sink sees a morsel's batches numbered in the order
                // they were produced.
                let chunk = run.chunks.get();
                run.chunks.set(chunk + 1);
                self.sink.consume(seq.chunk(chunk), batch, run.worker)?
            }
        }
        Ok(if self.sink.is_full() {
            Demand::Enough
        } else {
            Demand::More
        })
    }

    /// A compiled pipeline.
    pub fn new(
        id: usize,
        source: Arc<dyn Source>,
        operators: Vec<Arc<dyn Operator>>,
        sink: Arc<dyn Sink>,
    ) -> Self {
        let suspendable = suspendable(operators.iter().map(|o| o.output()));
        Pipeline {
            id,
            source,
            operators,
            sink,
            scan: None,
            input: None,
            then: Then::Drain(Finishing::All),
            suspendable,
            suspended: Suspended::default(),
        }
    }

    pub fn describe(&self) -> String {
        let mut parts = vec![self.source.name()];
        parts.extend(self.operators.iter().map(|o| o.name()));
        parts.push(self.sink.name());
        format!("pipeline {}: {}", self.id, parts.join(" → "))
    }
}

impl TaskSetWork for Pipeline {
    fn name(&self) -> String {
        self.describe()
    }

    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        let start = std::time::Instant::now();
        let outcome = self.run_morsels(ctx);
        self.source.task_ran(start.elapsed());
        outcome
    }

    fn finalize(&self, cx: &FinalizeContext<'_>) -> Result<FollowUps, TaskError> {
        if self.suspended.parked() > 0 && !self.sink.is_full() {
            return Err(TaskError::new(ExecError::Internal(format!(
                "{}: a suspended morsel was left unfinished",
                self.describe()
            ))));
        }
        // Every morsel was read: what the source held goes back first, so
        // that the sink's finish has the room.
        self.source.finish();
        Ok(match &self.then {
            Then::Drain(finishing) => drain(self.id, &self.operators, *finishing, &self.sink, cx)?,
            Then::Nothing => FollowUps::new(),
            Then::NextPass {
                deferred,
                rest,
                finishing,
            } => next_pass(self.id, deferred, rest.clone(), *finishing, &self.sink, cx)?,
        })
    }
}

impl Pipeline {
    /// One task's morsels (see [`TaskSetWork::run_task`]): morsels a task
    /// before it suspended first, then new ones from the source.
    fn run_morsels(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        // Only a pipeline with a resumable operator in a place where a task
        // may stop keeps count of its morsels in flight (crate::suspend).
        let counted = self.suspendable.contains(&true);
        let mut worked = false;
        loop {
            if self.sink.is_full() {
                self.suspended.close();
                return Ok(TaskOutcome::Exhausted);
            }
            // Between morsels, every row of the last one went through: the
            // sink's consumer may make the task set wait (backpressure).
            if self.sink.pause(&|| ctx.resumer()) {
                return Ok(TaskOutcome::Paused);
            }
            // A suspended morsel goes on first, at a preemption point as a
            // new morsel would be.
            if worked && counted && ctx.suspend_requested() {
                return Ok(TaskOutcome::Yielded);
            }
            let parked = if counted {
                self.suspended.take_or_begin()
            } else {
                None
            };
            let continuation = match parked {
                Some(c) => c,
                None => {
                    let Some(rows) = ctx.next_morsel(self.source.remaining_rows()) else {
                        if counted {
                            self.suspended.abandon();
                        }
                        return Ok(TaskOutcome::Yielded);
                    };
                    let rows = self
                        .sink
                        .morsel_rows_cap()
                        .map_or(rows, |cap| rows.min(cap));
                    match self.source.take(rows, ctx) {
                        Ok(Taken::Morsel(m)) => Continuation::new(m, self.input),
                        Ok(Taken::Dry) if counted => match self.suspended.dry() {
                            AtDry::Take(c) => c,
                            AtDry::Exhausted => return Ok(TaskOutcome::Exhausted),
                            AtDry::Held => return Ok(TaskOutcome::Held),
                        },
                        Ok(Taken::Dry) => return Ok(TaskOutcome::Exhausted),
                        Ok(Taken::NodeDry(affinity)) => {
                            if counted {
                                self.suspended.abandon();
                            }
                            return Ok(TaskOutcome::NodeDry(affinity));
                        }
                        Err(e) => {
                            if counted {
                                self.suspended.abandon();
                            }
                            return Err(e.into());
                        }
                    }
                }
            };
            worked = true;
            match self.run_continuation(continuation, ctx, counted)? {
                Ran::Done => {}
                Ran::Last => return Ok(TaskOutcome::Exhausted),
                Ran::Stop => return Ok(TaskOutcome::Yielded),
            }
        }
    }

    /// Drives `c` until it is done or the task stops inside it (then it is
    /// parked for a later task). `counted`: the pipeline counts its
    /// morsels in flight, and `c` is one of them.
    fn run_continuation(
        &self,
        mut c: Continuation,
        ctx: &mut TaskContext<'_>,
        counted: bool,
    ) -> Result<Ran, TaskError> {
        let resumed = c.parked;
        let worker = ctx.worker();
        let ctx = RefCell::new(ctx);
        let start = Instant::now();
        let stop = || ctx.borrow().stop_requested();
        let suspend = || ctx.borrow_mut().suspend_requested();
        let suspend: Option<&dyn Fn() -> bool> = counted.then_some(&suspend);
        let driven = self.drive(&mut c, worker, &stop, suspend);
        c.spent += start.elapsed();
        let mut ctx = ctx.borrow_mut();
        let finish = || counted && self.suspended.finish();
        match driven {
            Err(e) => {
                finish();
                Err(e.into())
            }
            Ok(Driven::Done) => {
                let last = finish();
                if resumed {
                    ctx.resumed_morsel_done(c.rows, c.spent);
                } else {
                    ctx.morsel_done(c.rows);
                }
                Ok(if last { Ran::Last } else { Ran::Done })
            }
            Ok(Driven::Stopped) => {
                // Cancelled mid-morsel: the rest of it goes with the query.
                finish();
                Ok(Ran::Stop)
            }
            Ok(Driven::Suspended) => {
                ctx.morsel_suspended();
                // Refused only once the sink is full: then the rest of the
                // morsel is not needed.
                if self.suspended.park(c).is_err() {
                    finish();
                }
                Ok(Ran::Stop)
            }
        }
    }
}

/// How a task's drive of one morsel ended.
enum Ran {
    /// The morsel is done; the task goes on.
    Done,
    /// The morsel is done and was the set's last: the task reports the set
    /// exhausted.
    Last,
    /// The task returns: it parked the rest of the morsel, or the query was
    /// cancelled.
    Stop,
}

/// What one task's drive of a morsel needs along the pipeline.
struct MorselRun<'a> {
    worker: usize,
    /// The query's cancel flag.
    stop: &'a dyn Fn() -> bool,
    /// Whether the task asks to stop inside the morsel; `None`: it never
    /// does ([`crate::suspend`]).
    suspend: Option<&'a dyn Fn() -> bool>,
    /// Batches of the slice being pushed that reached the sink so far.
    chunks: Cell<u32>,
    /// Frames of operators that stopped, innermost first.
    recorded: RefCell<VecDeque<Frame>>,
}

impl Pipeline {
    /// Pushes what is left of a morsel — suspended operators innermost
    /// first, then the slices not pushed yet — through the operators into
    /// the sink, and once all of it went through reports its runs of rows
    /// to the sink.
    fn drive(
        &self,
        c: &mut Continuation,
        worker: usize,
        stop: &dyn Fn() -> bool,
        suspend: Option<&dyn Fn() -> bool>,
    ) -> Result<Driven> {
        let run = MorselRun {
            worker,
            stop,
            suspend,
            chunks: Cell::new(c.chunks),
            recorded: RefCell::new(VecDeque::new()),
        };
        loop {
            let demand = if let Some(frame) = c.frames.pop_front() {
                self.push(&run, frame.op, frame.seq, frame.batch, Some(frame.resume))?
            } else if let Some((seq, batch)) = c.slices.pop_front() {
                run.chunks.set(0);
                self.push(&run, 0, seq, batch, None)?
            } else {
                break;
            };
            c.chunks = run.chunks.get();
            // Frames of operators that stopped now go before the older
            // ones (they are inside them).
            let mut recorded = run.recorded.take();
            if !recorded.is_empty() {
                recorded.extend(c.frames.drain(..));
                c.frames = recorded;
            }
            if demand == Demand::Suspend {
                return Ok(Driven::Suspended);
            }
        }
        if stop() {
            return Ok(Driven::Stopped);
        }
        for (seq, n) in c.covered.drain(..) {
            self.sink.morsel_done(seq, n);
        }
        Ok(Driven::Done)
    }

    /// Pushes one morsel's slices through the operators into the sink and
    /// reports its runs of rows to the sink; `false` when `stop` cut it
    /// short (the rest of the morsel is dropped with the query). A shared
    /// scan ([`crate::shared`]) calls it for each member on the one morsel
    /// it cut; it never stops inside the morsel.
    pub(crate) fn process_morsel(
        &self,
        morsel: Morsel,
        worker: usize,
        stop: &dyn Fn() -> bool,
    ) -> Result<bool> {
        let mut c = Continuation::new(morsel, self.input);
        match self.drive(&mut c, worker, stop, None)? {
            Driven::Done => Ok(true),
            Driven::Stopped => Ok(false),
            Driven::Suspended => Err(ExecError::Internal(
                "a morsel was suspended by a task that cannot suspend".into(),
            )),
        }
    }
}

/// What follows once every row reached `operators`: the first deferring
/// operator's passes, or — none deferring — the sink's finish (as far as
/// `finishing` reaches, [`Finishing`]).
fn drain(
    id: usize,
    operators: &[Arc<dyn Operator>],
    finishing: Finishing,
    sink: &Arc<dyn Sink>,
    cx: &FinalizeContext<'_>,
) -> Result<FollowUps> {
    let own = match finishing {
        Finishing::All => operators.len(),
        Finishing::Own(n) => n.min(operators.len()),
    };
    for (k, operator) in operators[..own].iter().enumerate() {
        if let Some(deferred) = operator.deferred()? {
            let after = match finishing {
                Finishing::All => Finishing::All,
                Finishing::Own(n) => Finishing::Own(n - k - 1),
            };
            return next_pass(id, &deferred, operators[k + 1..].to_vec(), after, sink, cx);
        }
    }
    Ok(match finishing {
        Finishing::All => StepTaskSet::follow_ups(sink.finish(cx)?),
        Finishing::Own(_) => FollowUps::new(),
    })
}

/// The task sets of `deferred`'s next pass: its steps, then one pipeline
/// per run, the last of which goes on to the pass after; after the last
/// pass (or at once, if the sink needs no more rows) [`drain`] of `rest`.
fn next_pass(
    id: usize,
    deferred: &Arc<dyn Deferred>,
    rest: Vec<Arc<dyn Operator>>,
    finishing: Finishing,
    sink: &Arc<dyn Sink>,
    cx: &FinalizeContext<'_>,
) -> Result<FollowUps> {
    loop {
        let pass = if sink.is_full() {
            None
        } else {
            deferred.next_pass()?
        };
        let Some(pass) = pass else {
            return drain(id, &rest, finishing, sink, cx);
        };
        if pass.runs.is_empty() {
            continue;
        }
        let mut follow_ups = StepTaskSet::follow_ups(pass.steps);
        let last = pass.runs.len() - 1;
        for (i, run) in pass.runs.into_iter().enumerate() {
            let operators = run
                .operator
                .into_iter()
                .chain(rest.iter().cloned())
                .collect();
            let mut pipeline = Pipeline::new(id, run.source, operators, sink.clone());
            pipeline.then = if i == last {
                Then::NextPass {
                    deferred: deferred.clone(),
                    rest: rest.clone(),
                    finishing,
                }
            } else {
                Then::Nothing
            };
            follow_ups.push(Arc::new(pipeline));
        }
        return Ok(follow_ups);
    }
}

/// A pipeline under construction: its source and operators so far.
///
/// Below a UNION ALL, several inputs feed the operators pushed after the
/// union: `branches` holds the earlier ones, each with the operators of its
/// own; `source` is the last input's, and `operators[..own]` are its own.
/// Closing it makes one pipeline per input, all into the one sink
/// ([`Finishing`]). Operators pushed onto `operators` go after every input.
pub(crate) struct Open {
    pub(crate) source: Arc<dyn Source>,
    pub(crate) operators: Vec<Arc<dyn Operator>>,
    branches: Vec<Branch>,
    own: usize,
}

/// An earlier input of a UNION ALL: its source and its own operators.
struct Branch {
    source: Arc<dyn Source>,
    operators: Vec<Arc<dyn Operator>>,
}

impl Open {
    /// A pipeline reading `source`, with no operators yet.
    pub(crate) fn new(source: Arc<dyn Source>) -> Open {
        Open {
            source,
            operators: Vec::new(),
            branches: Vec::new(),
            own: 0,
        }
    }

    /// Every input with all the operators its rows go through, in order.
    fn into_branches(self) -> Vec<Branch> {
        let shared = &self.operators[self.own.min(self.operators.len())..];
        let mut all: Vec<Branch> = self
            .branches
            .into_iter()
            .map(|b| Branch {
                source: b.source,
                operators: b
                    .operators
                    .into_iter()
                    .chain(shared.iter().cloned())
                    .collect(),
            })
            .collect();
        all.push(Branch {
            source: self.source,
            operators: self.operators,
        });
        all
    }
}

/// Cuts a plan into pipelines. Operator modules whose operator spans
/// several pipelines wire them themselves through `compile` (an input's
/// open pipeline), `close` (end a pipeline with a sink) and `read` (a new
/// pipeline over a buffer), e.g. `operator::hash_join::wire`.
pub(crate) struct Compiler {
    pub(crate) workers: usize,
    /// Whether the scans being compiled must hand out a prefix of their
    /// table (below a LIMIT, up to the next breaker).
    order: ScanOrder,
    pipelines: Vec<Pipeline>,
    /// The table scans compiled so far, by the source each became (a
    /// pipeline closed over one of these sources records its origin).
    scans: Vec<(Arc<dyn Source>, ScanOrigin)>,
    /// The query's memory account, charged by every breaker and buffer.
    pub(crate) memory: Arc<QueryMemory>,
}

impl Compiler {
    pub(crate) fn close(&mut self, open: Open, sink: Arc<dyn Sink>) {
        let Open {
            source,
            operators,
            branches,
            own,
        } = open;
        let inputs = branches.len();
        let shared = &operators[own.min(operators.len())..];
        for (i, branch) in branches.into_iter().enumerate() {
            let own = branch.operators.len();
            let all = branch
                .operators
                .into_iter()
                .chain(shared.iter().cloned())
                .collect();
            let then = Then::Drain(Finishing::Own(own));
            self.push_pipeline(branch.source, all, sink.clone(), Some(i as u32), then);
        }
        let input = (inputs > 0).then_some(inputs as u32);
        let then = Then::Drain(Finishing::All);
        self.push_pipeline(source, operators, sink, input, then);
    }

    fn push_pipeline(
        &mut self,
        source: Arc<dyn Source>,
        operators: Vec<Arc<dyn Operator>>,
        sink: Arc<dyn Sink>,
        input: Option<u32>,
        then: Then,
    ) {
        let id = self.pipelines.len();
        let scan = self
            .scans
            .iter()
            .find(|(s, _)| Arc::ptr_eq(s, &source))
            .map(|(_, origin)| origin.clone());
        let mut pipeline = Pipeline::new(id, source, operators, sink);
        pipeline.scan = scan;
        pipeline.input = input;
        pipeline.then = then;
        self.pipelines.push(pipeline);
    }

    pub(crate) fn read(buffer: Arc<Buffer>, name: &str) -> Open {
        Open::new(Arc::new(BlockSource::new(Blocks::Buffer {
            name: name.to_string(),
            buffer,
        })))
    }

    /// Compiles the input of a breaker whose own sink takes every row: its
    /// scans may hand out rows in any order.
    pub(crate) fn compile_any_order(&mut self, plan: &PhysicalPlan) -> Result<Open> {
        let outer = std::mem::replace(&mut self.order, ScanOrder::Any);
        let open = self.compile(plan);
        self.order = outer;
        open
    }

    pub(crate) fn compile(&mut self, plan: &PhysicalPlan) -> Result<Open> {
        Ok(match plan {
            PhysicalPlan::Scan {
                table,
                projection,
                placement,
                ..
            } => {
                let source: Arc<dyn Source> = Arc::new(PlacedSource::new(
                    table.name(),
                    table.blocks().clone(),
                    projection.clone(),
                    placement.clone(),
                    self.order,
                ));
                self.scans.push((
                    source.clone(),
                    ScanOrigin {
                        table: table.clone(),
                        projection: projection.clone(),
                        placement: placement.clone(),
                        order: self.order,
                    },
                ));
                Open::new(source)
            }
            PhysicalPlan::Values { batches, .. } => {
                Open::new(Arc::new(BlockSource::new(Blocks::Batches {
                    name: "values".to_string(),
                    batches: batches.clone().into(),
                })))
            }
            PhysicalPlan::Filter { input, predicate } => {
                let mut open = self.compile(input)?;
                open.operators
                    .push(Arc::new(FilterOperator::new(predicate.clone())));
                open
            }
            PhysicalPlan::Projection {
                input,
                exprs,
                schema,
            } => {
                let mut open = self.compile(input)?;
                open.operators.push(Arc::new(ProjectionOperator::new(
                    exprs.clone(),
                    schema.clone(),
                )));
                open
            }
            PhysicalPlan::Expand(e) => {
                let mut open = self.compile(&e.input)?;
                open.operators
                    .push(Arc::new(crate::operator::expand::ExpandOperator::new(
                        e.args.clone(),
                        e.function.clone(),
                        e.outer,
                        e.schema.clone(),
                    )));
                open
            }
            PhysicalPlan::GroupingSets {
                input,
                keys,
                sets,
                schema,
            } => {
                let id_type = schema.field(schema.fields().len() - 3).data_type().clone();
                let mut open = self.compile(input)?;
                open.operators.push(Arc::new(GroupingSetsOperator::new(
                    keys.clone(),
                    sets.clone(),
                    id_type,
                    schema.clone(),
                )?));
                open
            }
            PhysicalPlan::HashJoin(j) => crate::operator::hash_join::wire(self, j)?,
            PhysicalPlan::Window(w) => crate::operator::window::wire(self, w)?,
            PhysicalPlan::Aggregate {
                input,
                group_by,
                aggregates,
                schema,
            } => {
                let input_schema = input.schema();
                let group_types = group_by
                    .iter()
                    .map(|g| g.data_type(&input_schema))
                    .collect::<datafusion_common::Result<Vec<_>>>()?;
                let (sink, merge) = aggregate(
                    group_by.clone(),
                    group_types,
                    aggregates.clone(),
                    input_schema,
                    schema.clone(),
                    self.workers,
                    self.memory.clone(),
                )?;
                let open = self.compile_any_order(input)?;
                self.close(open, Arc::new(sink));
                Open::new(Arc::new(merge))
            }
            PhysicalPlan::Sort { input, keys, fetch } => {
                let buffer = Arc::new(Buffer::new(self.memory.clone(), "sorted rows"));
                let sink = SortSink::new(
                    keys.clone(),
                    *fetch,
                    input.schema(),
                    self.workers,
                    self.memory.clone(),
                    buffer.clone(),
                )?;
                let open = self.compile_any_order(input)?;
                self.close(open, Arc::new(sink));
                Self::read(buffer, "sorted rows")
            }
            PhysicalPlan::Limit { input, skip, fetch } => {
                let buffer = Arc::new(Buffer::new(self.memory.clone(), "limited rows"));
                let outer = std::mem::replace(&mut self.order, ScanOrder::Prefix);
                let open = self.compile(input);
                self.order = outer;
                let open = open?;
                self.close(
                    open,
                    Arc::new(LimitSink::new(
                        *skip,
                        *fetch,
                        self.memory.clone(),
                        buffer.clone(),
                    )),
                );
                Self::read(buffer, "limited rows")
            }
            // In any order the inputs' rows go on without being collected:
            // one pipeline per input, into what follows the union (see
            // `Open`).
            PhysicalPlan::Union { inputs, .. }
                if self.order == ScanOrder::Any && inputs.len() > 1 =>
            {
                let mut all = Vec::new();
                for input in inputs {
                    all.extend(self.compile(input)?.into_branches());
                }
                let Some(last) = all.pop() else {
                    return Err(ExecError::Internal("a union without inputs".into()));
                };
                Open {
                    source: last.source,
                    own: last.operators.len(),
                    operators: last.operators,
                    branches: all,
                }
            }
            // Below a LIMIT the union's rows are read in input order: each
            // input is collected in a buffer that keeps it.
            PhysicalPlan::Union { inputs, .. } => {
                let buffer = Arc::new(Buffer::new(self.memory.clone(), "union"));
                for (i, input) in inputs.iter().enumerate() {
                    let open = self.compile_any_order(input)?;
                    self.close(
                        open,
                        Arc::new(MaterializeSink::new(
                            buffer.clone(),
                            i as u32,
                            "materialize union input",
                        )),
                    );
                }
                Self::read(buffer, "union")
            }
        })
    }
}

/// Compiles `plan` into pipelines whose state is charged to `memory`; the
/// last one writes the result into `result`.
pub fn compile(
    plan: &PhysicalPlan,
    workers: usize,
    result: Arc<Buffer>,
    memory: &Arc<QueryMemory>,
) -> Result<Vec<Pipeline>> {
    let sink = Arc::new(MaterializeSink::new(result, 0, "result"));
    compile_into(plan, workers, sink, memory)
}

/// As [`compile`], the last pipeline ending in `result` (a streamed
/// result's sink, `crate::stream`).
pub fn compile_into(
    plan: &PhysicalPlan,
    workers: usize,
    result: Arc<dyn Sink>,
    memory: &Arc<QueryMemory>,
) -> Result<Vec<Pipeline>> {
    let mut c = Compiler {
        workers: workers.max(1),
        order: ScanOrder::Any,
        pipelines: Vec::new(),
        scans: Vec::new(),
        memory: memory.clone(),
    };
    let open = c.compile(plan)?;
    c.close(open, result);
    if c.pipelines.is_empty() {
        return Err(ExecError::Internal("plan compiled to no pipeline".into()));
    }
    Ok(c.pipelines)
}

//! The engine's shared scans: per table snapshot (and scan placement) the
//! batch that is forming and how many are running; the batching rule; the
//! record of finished batches (`stride.batches`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use arrow::array::RecordBatch;
use stride_sched::{GroupFacts, QueryError, QueryHandle, QueryStats, Scheduler, TaskSetWork};

use crate::error::{ExecError, Result};
use crate::pipeline::{Pipeline, ScanOrigin};
use crate::placement::ScanPlacement;

use super::batch::{Batch, Failure, Outcome, Phase};
use super::member::Member;
use super::pass::SharedPass;
use super::{SharingConfig, SharingMode};

/// How many finished batches `stride.batches` keeps.
pub const RECENT_BATCHES: usize = 1000;

/// One finished batch, as `stride.batches` shows it.
#[derive(Debug, Clone)]
pub struct BatchRecord {
    pub batch: u64,
    pub table: String,
    /// The how-manieth pass over this table snapshot (and placement) since
    /// its stream was last idle — no pass running, none forming (1-based).
    pub cycle: u64,
    pub members: usize,
    /// Members that left before the pass ended (cancelled).
    pub detached: usize,
    /// Members whose own operators failed.
    pub failed: usize,
    /// `done`, or why the pass itself failed.
    pub state: String,
    pub rows_read: u64,
    pub morsels: u64,
    /// CPU time of the pass (all members' operators and the common work).
    pub cpu: Duration,
    /// From the first member's arrival to the start of the pass.
    pub forming: Duration,
    /// From the start of the pass to its end.
    pub elapsed: Duration,
    pub ended_at: SystemTime,
}

/// The passes over one table snapshot under one scan placement.
#[derive(Debug)]
struct Stream {
    /// Kept so that the snapshot's address (the key) is not reused while
    /// the stream exists.
    blocks: Arc<[RecordBatch]>,
    placement: ScanPlacement,
    running: usize,
    /// Passes started so far.
    cycles: u64,
    forming: Option<Arc<Batch>>,
}

/// Shared scans of one engine (see the module docs of [`super`]).
#[derive(Debug)]
pub struct SharedScans {
    /// The mode of sessions that set none (`SharingMode` as u8; Relaxed:
    /// plain settings, read at each query).
    default_mode: AtomicU8,
    /// Cycle length, microseconds.
    cycle_us: AtomicU64,
    max_batch: AtomicUsize,
    min_morsel_rows: AtomicUsize,
    /// Source of batch ids (Relaxed: ids only need to be unique).
    next_batch: AtomicU64,
    /// Streams by the address of their snapshot's blocks.
    streams: Mutex<HashMap<usize, Vec<Stream>>>,
    recent: Mutex<VecDeque<BatchRecord>>,
}

/// What [`SharedScans::try_start`] found.
enum Start {
    /// This thread submitted the batch.
    Started,
    /// The batch is no longer forming (someone else started it).
    Gone,
    /// Not yet: wait up to the deadline (`None`: until a kick — a batch
    /// ahead of it is running).
    Later(Option<Instant>),
}

impl SharedScans {
    pub fn new(config: SharingConfig) -> Self {
        let hub = SharedScans {
            default_mode: AtomicU8::new(0),
            cycle_us: AtomicU64::new(0),
            max_batch: AtomicUsize::new(1),
            min_morsel_rows: AtomicUsize::new(1),
            next_batch: AtomicU64::new(0),
            streams: Mutex::new(HashMap::new()),
            recent: Mutex::new(VecDeque::new()),
        };
        hub.set_config(config);
        hub
    }

    pub fn config(&self) -> SharingConfig {
        SharingConfig {
            mode: SharingMode::from_u8(self.default_mode.load(Ordering::Relaxed)),
            cycle: Duration::from_micros(self.cycle_us.load(Ordering::Relaxed)),
            max_batch: self.max_batch.load(Ordering::Relaxed),
            min_morsel_rows: self.min_morsel_rows.load(Ordering::Relaxed),
        }
    }

    /// Changes the engine's default mode, cycle and maximum batch size
    /// (batches forming now follow the new values).
    pub fn set_config(&self, config: SharingConfig) {
        self.default_mode
            .store(config.mode as u8, Ordering::Relaxed);
        self.cycle_us.store(
            config.cycle.as_micros().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
        self.max_batch
            .store(config.max_batch.max(1), Ordering::Relaxed);
        self.min_morsel_rows
            .store(config.min_morsel_rows.max(1), Ordering::Relaxed);
    }

    /// Finished batches, newest first.
    pub fn recent_batches(&self) -> Vec<BatchRecord> {
        self.lock_recent().iter().rev().cloned().collect()
    }

    fn lock_streams(&self) -> MutexGuard<'_, HashMap<usize, Vec<Stream>>> {
        self.streams.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_recent(&self) -> MutexGuard<'_, VecDeque<BatchRecord>> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Attaches `pipeline` (whose source scans `scan`) to the forming batch
    /// of its table snapshot and placement, opening one if none forms;
    /// starts the batch when the batching rule says so.
    pub(crate) fn attach(
        self: &Arc<Self>,
        scheduler: &Scheduler,
        scan: &ScanOrigin,
        pipeline: Arc<Pipeline>,
    ) -> (Arc<Batch>, Arc<Member>) {
        let member = Arc::new(Member::new(pipeline, scan.projection.clone()));
        let blocks = scan.table.blocks();
        let key = Arc::as_ptr(blocks) as *const () as usize;
        let mut streams = self.lock_streams();
        let list = streams.entry(key).or_default();
        let index = match list
            .iter()
            .position(|s| Arc::ptr_eq(&s.blocks, blocks) && s.placement == scan.placement)
        {
            Some(i) => i,
            None => {
                list.push(Stream {
                    blocks: blocks.clone(),
                    placement: scan.placement.clone(),
                    running: 0,
                    cycles: 0,
                    forming: None,
                });
                list.len() - 1
            }
        };
        let stream = &mut list[index];
        let batch = stream
            .forming
            .get_or_insert_with(|| {
                Arc::new(Batch::new(
                    self.next_batch.fetch_add(1, Ordering::Relaxed) + 1,
                    scan.table.clone(),
                    scan.placement.clone(),
                ))
            })
            .clone();
        member.join(&batch);
        batch.lock().members.push(member.clone());
        let started = self.start_if_due(stream, &batch, scheduler);
        drop(streams);
        if let Some(handle) = started {
            self.watch(batch.clone(), handle);
        }
        (batch, member)
    }

    /// The batching rule, with the stream locked: a forming batch starts
    /// once it holds `max_batch` members, or once no pass over its stream
    /// is running and its cycle (from its first member's arrival) is over.
    /// With cycle 0 this is SharedDB's rule: the queries that arrive while
    /// a pass runs form the next one. Returns the started pass's handle.
    fn start_if_due(
        &self,
        stream: &mut Stream,
        batch: &Arc<Batch>,
        scheduler: &Scheduler,
    ) -> Option<QueryHandle> {
        let config = self.config();
        let mut st = batch.lock();
        if !matches!(st.phase, Phase::Forming) {
            return None;
        }
        let full = st.members.len() >= config.max_batch;
        let due = stream.running == 0 && batch.opened.elapsed() >= config.cycle;
        if !(full || due) {
            return None;
        }
        stream.forming = None;
        stream.running += 1;
        stream.cycles += 1;
        let pass = SharedPass::new(batch, st.members.clone(), config.min_morsel_rows);
        batch.set_phase(
            &mut st,
            Phase::Running {
                started: Instant::now(),
                cycle: stream.cycles,
            },
        );
        drop(st);
        // The batch is one resource group; the policy ranks it as a query
        // of the default user.
        let sets: Vec<Arc<dyn TaskSetWork>> = vec![Arc::new(pass)];
        Some(scheduler.submit_with(sets, GroupFacts::default()))
    }

    /// Starts `batch` if it still forms and is due.
    fn try_start(self: &Arc<Self>, scheduler: &Scheduler, batch: &Arc<Batch>) -> Start {
        let config = self.config();
        let mut streams = self.lock_streams();
        let key = Arc::as_ptr(batch.table.blocks()) as *const () as usize;
        let Some(stream) = streams.get_mut(&key).and_then(|list| {
            list.iter_mut()
                .find(|s| s.forming.as_ref().is_some_and(|f| Arc::ptr_eq(f, batch)))
        }) else {
            return Start::Gone;
        };
        match self.start_if_due(stream, batch, scheduler) {
            Some(handle) => {
                drop(streams);
                self.watch(batch.clone(), handle);
                Start::Started
            }
            None if stream.running > 0 => Start::Later(None),
            None => Start::Later(Some(batch.opened + config.cycle)),
        }
    }

    /// Waits for the started pass's group on a thread of its own (so that
    /// no member's thread is tied to it: each may leave when cancelled),
    /// then ends the batch.
    fn watch(self: &Arc<Self>, batch: Arc<Batch>, handle: QueryHandle) {
        type Watched = Mutex<Option<(Arc<Batch>, QueryHandle)>>;
        let watched: Arc<Watched> = Arc::new(Mutex::new(Some((batch, handle))));
        let take = |w: &Watched| w.lock().unwrap_or_else(|p| p.into_inner()).take();
        let spawned = std::thread::Builder::new()
            .name("stride-batch".into())
            .spawn({
                let hub = self.clone();
                let watched = watched.clone();
                move || {
                    if let Some((batch, handle)) = take(&watched) {
                        hub.finish(&batch, handle.wait());
                    }
                }
            });
        if spawned.is_err() {
            // No thread to be had: this member's thread waits instead.
            if let Some((batch, handle)) = take(&watched) {
                self.finish(&batch, handle.wait());
            }
        }
    }

    /// Ends `batch` with its pass's outcome: wakes its members and the
    /// batch forming behind it, records it.
    fn finish(&self, batch: &Arc<Batch>, result: std::result::Result<QueryStats, QueryError>) {
        let ended = Instant::now();
        let mut st = batch.lock();
        let (started, cycle) = match st.phase {
            Phase::Running { started, cycle } => (started, cycle),
            _ => (ended, 0),
        };
        let members_time = st.members.iter().map(|m| m.own_time()).sum();
        let outcome = Arc::new(Outcome {
            result: result.map_err(Failure::from_query_error),
            started,
            members: st.members.len(),
            members_time,
        });
        // Recorded before the members are woken: a member that returns
        // finds its batch in `stride.batches`.
        let members = &st.members;
        let (state, stats) = match &outcome.result {
            Ok(stats) => ("done".to_string(), stats.clone()),
            Err(f) => (
                format!("failed: {}", f.to_exec_error()),
                QueryStats::default(),
            ),
        };
        let record = BatchRecord {
            batch: batch.id,
            table: batch.table.name().to_string(),
            cycle,
            members: members.len(),
            detached: members.iter().filter(|m| m.detached()).count(),
            failed: members.iter().filter(|m| m.has_failed()).count(),
            state,
            rows_read: stats.tuples,
            morsels: stats.morsels,
            cpu: stats.cpu_time,
            forming: started.saturating_duration_since(batch.opened),
            elapsed: ended.saturating_duration_since(started),
            ended_at: SystemTime::now(),
        };
        {
            let mut recent = self.lock_recent();
            if recent.len() == RECENT_BATCHES {
                recent.pop_front();
            }
            recent.push_back(record);
        }
        batch.set_phase(&mut st, Phase::Done(outcome));
        drop(st);
        {
            let mut streams = self.lock_streams();
            let key = Arc::as_ptr(batch.table.blocks()) as *const () as usize;
            if let Some(list) = streams.get_mut(&key) {
                if let Some(stream) = list.iter_mut().find(|s| s.placement == batch.placement) {
                    stream.running = stream.running.saturating_sub(1);
                    if let Some(next) = &stream.forming {
                        next.kick();
                    }
                }
                list.retain(|s| s.running > 0 || s.forming.is_some());
                if list.is_empty() {
                    streams.remove(&key);
                }
            }
        }
    }

    /// A forming batch whose members all left is dropped from its stream
    /// (and the stream, if idle), so that it does not keep the snapshot.
    fn abandon_if_empty(&self, batch: &Arc<Batch>) {
        let mut streams = self.lock_streams();
        let key = Arc::as_ptr(batch.table.blocks()) as *const () as usize;
        let Some(list) = streams.get_mut(&key) else {
            return;
        };
        let Some(stream) = list
            .iter_mut()
            .find(|s| s.forming.as_ref().is_some_and(|f| Arc::ptr_eq(f, batch)))
        else {
            return;
        };
        let mut st = batch.lock();
        if !st.members.iter().all(|m| m.detached()) {
            return;
        }
        stream.forming = None;
        let outcome = Outcome {
            result: Err(Failure::Cancelled),
            started: Instant::now(),
            members: st.members.len(),
            members_time: Duration::ZERO,
        };
        batch.set_phase(&mut st, Phase::Done(Arc::new(outcome)));
        drop(st);
        list.retain(|s| s.running > 0 || s.forming.is_some());
        if list.is_empty() {
            streams.remove(&key);
        }
    }

    /// The member's side: waits until its batch's pass ended, starting the
    /// batch when it is due (a member's thread, never a worker, waits
    /// here). A cancel detaches the member and returns "cancelled".
    pub(crate) fn wait(
        self: &Arc<Self>,
        scheduler: &Scheduler,
        batch: &Arc<Batch>,
        member: &Arc<Member>,
    ) -> Result<Arc<Outcome>> {
        let mut st = batch.lock();
        loop {
            if member.cancel_requested() {
                let forming = matches!(st.phase, Phase::Forming);
                drop(st);
                member.detach();
                if forming {
                    self.abandon_if_empty(batch);
                }
                return Err(ExecError::Query(QueryError::Cancelled));
            }
            match &st.phase {
                Phase::Done(outcome) => return Ok(outcome.clone()),
                Phase::Running { .. } => st = batch.wait(st, None),
                Phase::Forming => {
                    let kicks = st.kicks;
                    drop(st);
                    let start = self.try_start(scheduler, batch);
                    st = batch.lock();
                    if let Start::Later(deadline) = start {
                        if st.kicks == kicks && !member.cancel_requested() {
                            let timeout =
                                deadline.map(|d| d.saturating_duration_since(Instant::now()));
                            st = batch.wait(st, timeout);
                        }
                    }
                }
            }
        }
    }
}

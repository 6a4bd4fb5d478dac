//! The allocation guard: every byte the process allocates is counted, and
//! a query whose task allocates while the process is past its allocation
//! limit fails with 53200 at its next task boundary.
//!
//! [`crate::memory`] accounts what operators *keep* (hash tables, sort runs,
//! buffered results), charged batch by batch before they keep it. What it
//! does not see — an expression's temporary arrays, an allocator's slack,
//! a string function's intermediate values — still comes from the same
//! memory, and Rust has no way to survive a failed allocation: the process
//! aborts and every connection goes with it. The guard closes that gap the
//! way PostgreSQL's backends meet a failed `malloc`: the query that
//! allocates past the line fails with "out of memory", the others go on.
//! "The query that allocates" is one that has itself grown by
//! [`GROWTH_MIN`] when it allocates past the limit: a short query whose
//! tasks allocate a few morsels' worth and free them is not blamed for
//! another's memory. A query's growth is what its tasks and finalizations
//! allocated and did not free themselves, on any worker; rows it handed to
//! a consumer that frees them on another thread (a streamed result) stay
//! counted, so a long streamed result looks larger to the guard than it is.
//! Rust cannot refuse an allocation without aborting, so the guard does not
//! refuse: the allocation succeeds, the query's [`AllocAccount`] is marked
//! *tripped*, and the query's task sets fail as soon as their running task
//! or finalization returns ([`Accounted`]). The limit must therefore sit
//! below what the machine can really give (its default, [`default_limit`],
//! leaves that room).
//!
//! ```text
//!   TrackingAllocator (the binary's #[global_allocator])
//!     alloc/dealloc → PENDING (thread-local, plain Cell)
//!       |PENDING| ≥ FLUSH → ALLOCATED += PENDING        (one atomic per FLUSH bytes)
//!                           ACCOUNT.net += PENDING (the running query's)
//!                           past LIMIT, net ≥ GROWTH_MIN → ACCOUNT.tripped
//!   Accounted<task set> (every task set of a query)
//!     run_task / finalize: ACCOUNT = the query's account, restored after;
//!                          tripped → the task set fails with 53200
//! ```
//!
//! Counting is per thread and flushed in steps of [`FLUSH`] bytes, so the
//! process-wide figure lags the truth by at most `FLUSH` bytes per thread;
//! the allocator's hot path touches no shared cache line. Nothing in the
//! allocator allocates, locks or panics.
//!
//! Where the allocator is not installed (a test binary, an embedding
//! program), [`allocated`] is `None`, nothing is counted and nothing trips.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};
use std::sync::Arc;

use stride_sched::{FinalizeContext, FollowUps, TaskContext, TaskError, TaskOutcome, TaskSetWork};

use crate::error::ExecError;

/// Bytes a thread allocates or frees before it reports them to the
/// process-wide count.
pub const FLUSH: isize = 256 << 10;

/// How much a query must have grown, net, before an allocation past the
/// limit stops it: a short query, whose tasks allocate a few morsels' worth
/// and free them, is not stopped because another query took the memory.
pub const GROWTH_MIN: isize = 16 << 20;

/// Net bytes all threads reported (Relaxed: a statistic compared with
/// [`LIMIT`]; no other memory is published through it).
static ALLOCATED: AtomicIsize = AtomicIsize::new(0);
/// The allocation limit in bytes; `usize::MAX`: none (Relaxed, a setting).
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Whether [`TrackingAllocator`] served any allocation (Relaxed: set once,
/// only ever read as a hint for views and tests).
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Accounts that tripped since start (Relaxed counter, for the view).
static TRIPS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Bytes this thread allocated (positive) or freed (negative) since it
    /// last reported them. `const`-initialized and without a destructor, so
    /// reading it inside the allocator neither allocates nor registers
    /// anything.
    static PENDING: Cell<isize> = const { Cell::new(0) };
    /// The account of the query whose task runs on this thread; null: none.
    /// Set only by [`enter`], which holds a strong count on it for as long
    /// as the pointer is here.
    static ACCOUNT: Cell<*const AllocAccount> = const { Cell::new(std::ptr::null()) };
}

/// The global allocator that counts: the allocations of `A` (the binary's
/// allocator of choice; [`System`] by default), reported to the guard. A
/// binary installs it with
/// `#[global_allocator] static A: TrackingAllocator<M> = TrackingAllocator(M);`.
#[derive(Debug, Default, Clone, Copy)]
pub struct TrackingAllocator<A = System>(pub A);

// SAFETY: every method forwards to `A` with the caller's layout and
// pointer unchanged, so `A`'s guarantees hold; the bookkeeping around it
// only updates thread-locals and atomics, never allocates and never
// unwinds (`note` uses `try_with`, which cannot panic).
unsafe impl<A: GlobalAlloc> GlobalAlloc for TrackingAllocator<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout (the caller upholds
        // `GlobalAlloc::alloc`'s contract).
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from `A`, with
        // `layout` (the caller's contract).
        unsafe { self.0.dealloc(ptr, layout) };
        note(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `dealloc`; `new_size` is the caller's.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Adds `bytes` to this thread's pending count and reports it once it
/// reaches [`FLUSH`] either way.
#[inline]
fn note(bytes: isize) {
    let _ = PENDING.try_with(|pending| {
        let now = pending.get() + bytes;
        if now.abs() < FLUSH {
            pending.set(now);
        } else {
            pending.set(0);
            report(now);
        }
    });
}

/// Reports `bytes` to the process-wide count and to the account of the
/// query whose task runs on this thread; trips that account where the
/// process is past its limit, the thread grows and the query has grown by
/// [`GROWTH_MIN`] or more.
#[cold]
fn report(bytes: isize) {
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
    let total = ALLOCATED.fetch_add(bytes, Ordering::Relaxed) + bytes;
    let _ = ACCOUNT.try_with(|account| {
        let account = account.get();
        if account.is_null() {
            return;
        }
        // SAFETY: `enter` put the pointer here from an `Arc` whose strong
        // count it holds until it takes the pointer out again, on this same
        // thread; so the account is alive.
        let account = unsafe { &*account };
        let net = account.net.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if bytes > 0
            && net >= GROWTH_MIN
            && total > 0
            && (total as usize) > LIMIT.load(Ordering::Relaxed)
            && !account.tripped.swap(true, Ordering::Relaxed)
        {
            account.tripped_at.store(total as usize, Ordering::Relaxed);
            TRIPS.fetch_add(1, Ordering::Relaxed);
        }
    });
}

/// What the guard knows of one query: whether it allocated while the
/// process was past its limit.
#[derive(Debug, Default)]
pub struct AllocAccount {
    /// Bytes the query's tasks allocated and did not free on their own
    /// threads, as reported (Relaxed: a statistic only ever compared with
    /// [`GROWTH_MIN`] on the reporting thread).
    net: AtomicIsize,
    /// Set by the allocator, on the thread of one of the query's tasks,
    /// when that task's allocation took the process past its limit
    /// (Relaxed: read only by the query's own task sets, which fail; no
    /// other data is published through it).
    tripped: AtomicBool,
    /// The process-wide count when it tripped (Relaxed, for the message).
    tripped_at: AtomicUsize,
}

impl AllocAccount {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Bytes the query's tasks allocated and did not free themselves.
    pub fn net(&self) -> isize {
        self.net.load(Ordering::Relaxed)
    }

    /// Whether one of the query's tasks allocated past the limit.
    pub fn tripped(&self) -> bool {
        self.tripped.load(Ordering::Relaxed)
    }

    /// The error the query fails with once tripped.
    pub fn error(&self) -> ExecError {
        ExecError::AllocationLimit {
            allocated: self.tripped_at.load(Ordering::Relaxed),
            limit: limit(),
        }
    }
}

/// While the returned guard lives, this thread's allocations are the
/// query's of `account` (the previous account comes back when it drops).
/// Reports the thread's pending bytes first, so that they go to whoever
/// allocated them.
pub fn enter(account: &Arc<AllocAccount>) -> Entered {
    flush();
    let raw = Arc::into_raw(account.clone());
    let previous = ACCOUNT.with(|a| a.replace(raw));
    Entered {
        raw,
        previous,
        _not_send: std::marker::PhantomData,
    }
}

/// The guard of [`enter`]; not `Send`, because it restores a thread-local.
#[derive(Debug)]
pub struct Entered {
    raw: *const AllocAccount,
    previous: *const AllocAccount,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        flush();
        ACCOUNT.with(|a| a.set(self.previous));
        // SAFETY: `raw` came from `Arc::into_raw` in `enter` and is given
        // back exactly once, here, after the thread-local stopped pointing
        // at it (dropping it may free the account, which allocates nothing
        // but calls `dealloc`, which then sees the previous account).
        drop(unsafe { Arc::from_raw(self.raw) });
    }
}

/// Reports this thread's pending bytes now.
fn flush() {
    let bytes = PENDING.with(|p| p.replace(0));
    if bytes != 0 {
        report(bytes);
    }
}

/// Bytes the process has allocated (within [`FLUSH`] per thread); `None`
/// where [`TrackingAllocator`] is not the global allocator.
pub fn allocated() -> Option<usize> {
    if !INSTALLED.load(Ordering::Relaxed) {
        // A block of one flush step reports itself if the tracking
        // allocator serves it (`black_box`: the allocation must happen).
        drop(std::hint::black_box(Vec::<u8>::with_capacity(
            FLUSH as usize,
        )));
    }
    INSTALLED
        .load(Ordering::Relaxed)
        .then(|| ALLOCATED.load(Ordering::Relaxed).max(0) as usize)
}

/// The allocation limit (`stride.allocation_limit`); `usize::MAX`: none.
pub fn limit() -> usize {
    LIMIT.load(Ordering::Relaxed)
}

/// Sets the allocation limit for the whole process.
pub fn set_limit(bytes: usize) {
    LIMIT.store(bytes, Ordering::Relaxed);
}

/// How many queries the guard stopped since start.
pub fn trips() -> usize {
    TRIPS.load(Ordering::Relaxed)
}

/// The default allocation limit: 90 % of the machine's or the cgroup's
/// memory, or 60 % of an address-space limit (`ulimit -v`), which also
/// counts thread stacks, the allocator's reserved arenas and freed memory
/// it keeps — whichever is least. Unlimited where none can be read.
pub fn default_limit() -> usize {
    let physical = crate::memory::ram_and_cgroup().map(|m| m / 10 * 9);
    let address = crate::memory::address_space_limit().map(|m| m / 10 * 6);
    [physical, address]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(usize::MAX)
}

/// A query's task set whose tasks and finalization allocate on the query's
/// account, and which fails once the account tripped; its follow-up task
/// sets are wrapped alike.
pub struct Accounted {
    inner: Arc<dyn TaskSetWork>,
    account: Arc<AllocAccount>,
}

impl Accounted {
    pub fn wrap(inner: Arc<dyn TaskSetWork>, account: &Arc<AllocAccount>) -> Arc<dyn TaskSetWork> {
        Arc::new(Accounted {
            inner,
            account: account.clone(),
        })
    }

    fn check(&self) -> Result<(), TaskError> {
        if self.account.tripped() {
            Err(TaskError::new(self.account.error()))
        } else {
            Ok(())
        }
    }
}

impl TaskSetWork for Accounted {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        self.check()?;
        let outcome = {
            let _entered = enter(&self.account);
            self.inner.run_task(ctx)
        };
        self.check()?;
        outcome
    }

    fn finalize(&self, cx: &FinalizeContext<'_>) -> Result<FollowUps, TaskError> {
        self.check()?;
        let follow_ups = {
            let _entered = enter(&self.account);
            self.inner.finalize(cx)
        };
        self.check()?;
        Ok(follow_ups?
            .into_iter()
            .map(|set| Accounted::wrap(set, &self.account))
            .collect())
    }

    fn parallelism_hint(&self) -> Option<usize> {
        self.inner.parallelism_hint()
    }
}

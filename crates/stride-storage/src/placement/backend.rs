//! Where pages live and how to move them: the kernel, a logical record, and
//! a front that uses the first and falls back to the second.
//!
//! * [`KernelBackend`] — Linux `move_pages(2)` (query and move) and
//!   `mbind(2)` (the policy of a fresh mapping), through `libc::syscall`.
//! * [`FakeBackend`] — a node per page kept in a map: fake topologies with
//!   more nodes than the machine has, and deterministic tests.
//! * [`PlacedMemory`] — what the rest of Stride uses: asks the kernel, and
//!   where the kernel refuses a request ([`PlacementError::is_refusal`]: a
//!   node this machine does not have, a call the sandbox forbids) records
//!   the placement logically instead. Pages with a logical record report
//!   their logical node. The first fallback is kept with its reason and the
//!   rest are counted ([`PlacedMemory::fallbacks`]); nothing is printed.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use super::error::PlacementError;
use super::memory::MemPolicy;
use super::nodes::{NodeId, NodeSet, MAX_NODES};

type Result<T, E = PlacementError> = std::result::Result<T, E>;

/// Where pages live, and the means to change it.
///
/// Addresses are virtual addresses of this process; `pages` are page-aligned.
/// None of the methods reads or writes the contents of memory: moving a page
/// keeps its contents, binding only sets where future faults allocate.
pub trait NodeBackend: Send + Sync {
    /// Bytes per page.
    fn page_size(&self) -> u64;

    /// The node of each page; `None` for a page not backed by memory yet
    /// (never touched) or not known to the backend.
    fn query(&self, pages: &[u64]) -> Result<Vec<Option<NodeId>>>;

    /// Moves `pages[i]` to `targets[i]` (the slices have equal lengths).
    /// Pages the kernel cannot move stay where they are; query to see.
    fn move_to(&self, pages: &[u64], targets: &[NodeId]) -> Result<()>;

    /// Sets the placement of the fresh mapping `[addr, addr + len)` before
    /// its pages are first touched.
    fn bind(&self, addr: u64, len: u64, placement: &MemPolicy) -> Result<()>;
}

// Linux memory policy modes and flags (<linux/mempolicy.h>); libc does not
// export them.
const MPOL_DEFAULT: libc::c_int = 0;
const MPOL_PREFERRED: libc::c_int = 1;
const MPOL_BIND: libc::c_int = 2;
const MPOL_INTERLEAVE: libc::c_int = 3;
const MPOL_MF_MOVE: libc::c_int = 1 << 1;

/// Pages per `move_pages` call, so that the argument arrays stay small.
const MOVE_PAGES_BATCH: usize = 16 * 1024;

/// `get_mempolicy` flag: return the nodes this process may allocate on.
const MPOL_F_MEMS_ALLOWED: libc::c_ulong = 1 << 2;

/// The Linux kernel's view: `move_pages(2)` and `mbind(2)`.
///
/// Requests naming a node outside the nodes this process may allocate on
/// fail with [`PlacementError::NodesUnavailable`] before any call: the
/// kernel itself would refuse a single such node but silently drop it from
/// a set (interleaving over {0, 1} on a one-node machine is interleaving
/// over {0}), and a placement must not change meaning unnoticed.
#[derive(Debug, Clone)]
pub struct KernelBackend {
    page_size: u64,
    /// `None` when the kernel does not say (then it alone decides).
    allowed: Option<NodeSet>,
}

impl KernelBackend {
    pub fn new() -> Self {
        KernelBackend {
            page_size: system_page_size(),
            allowed: allowed_nodes(),
        }
    }

    /// The nodes this process may allocate on, as far as the kernel says.
    pub fn allowed_nodes(&self) -> Option<NodeSet> {
        self.allowed
    }

    /// Fails when `requested` names a node outside the allowed ones.
    fn check_available(&self, call: &'static str, requested: NodeSet) -> Result<()> {
        match self.allowed {
            Some(available) if !requested.is_subset(&available) => {
                Err(PlacementError::NodesUnavailable {
                    call,
                    requested,
                    available,
                })
            }
            _ => Ok(()),
        }
    }

    /// One `move_pages` call over at most [`MOVE_PAGES_BATCH`] pages;
    /// `nodes` null queries, otherwise moves. Fills `status`.
    fn move_pages(
        &self,
        pages: &[u64],
        nodes: Option<&[libc::c_int]>,
        status: &mut [libc::c_int],
    ) -> Result<()> {
        debug_assert_eq!(pages.len(), status.len());
        let ptrs: Vec<*mut libc::c_void> = pages.iter().map(|&p| p as *mut libc::c_void).collect();
        let (nodes_ptr, flags) = match nodes {
            Some(n) => {
                debug_assert_eq!(n.len(), pages.len());
                (n.as_ptr(), MPOL_MF_MOVE)
            }
            None => (std::ptr::null(), 0),
        };
        // SAFETY: pid 0 is this process. `ptrs`, `status` and (when not
        // null) `nodes_ptr` point to arrays of `pages.len()` elements that
        // live across the call; the kernel reads the first two and writes
        // only `status`. The page addresses need not be mapped: the kernel
        // reports such pages in `status` (-EFAULT / -ENOENT) without
        // touching them, and migration preserves page contents.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_move_pages,
                0 as libc::c_long,
                pages.len() as libc::c_ulong,
                ptrs.as_ptr(),
                nodes_ptr,
                status.as_mut_ptr(),
                flags,
            )
        };
        if rc < 0 {
            return Err(PlacementError::last_os_error("move_pages"));
        }
        Ok(())
    }
}

/// `get_mempolicy(MPOL_F_MEMS_ALLOWED)`: the nodes of this process's
/// cpuset that have memory, the first [`MAX_NODES`] of them.
fn allowed_nodes() -> Option<NodeSet> {
    // Room for 1024 nodes, the largest node count Linux is configured for
    // (a smaller mask than the kernel's node count gives EINVAL).
    let mut mask = [0u64; 16];
    // SAFETY: with MPOL_F_MEMS_ALLOWED the kernel writes only the node
    // mask, at most `maxnode - 1` = 1024 bits, which `mask` holds; the mode
    // pointer is null (not wanted) and the address is ignored.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            std::ptr::null_mut::<libc::c_int>(),
            mask.as_mut_ptr(),
            (mask.len() * 64 + 1) as libc::c_ulong,
            std::ptr::null_mut::<libc::c_void>(),
            MPOL_F_MEMS_ALLOWED,
        )
    };
    (rc == 0).then(|| {
        (0..MAX_NODES)
            .filter(|&n| mask[n / 64] & (1 << (n % 64)) != 0)
            .map(|n| n as NodeId)
            .collect()
    })
}

impl Default for KernelBackend {
    fn default() -> Self {
        KernelBackend::new()
    }
}

/// The page size of this machine (4096 when `sysconf` cannot tell).
pub(crate) fn system_page_size() -> u64 {
    // SAFETY: sysconf reads a configuration value and has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as u64
    } else {
        4096
    }
}

impl NodeBackend for KernelBackend {
    fn page_size(&self) -> u64 {
        self.page_size
    }

    fn query(&self, pages: &[u64]) -> Result<Vec<Option<NodeId>>> {
        let mut nodes = Vec::with_capacity(pages.len());
        for chunk in pages.chunks(MOVE_PAGES_BATCH) {
            let mut status = vec![-libc::ENOENT; chunk.len()];
            self.move_pages(chunk, None, &mut status)?;
            nodes.extend(status.iter().map(|&s| {
                usize::try_from(s)
                    .ok()
                    .filter(|&n| n < MAX_NODES)
                    .map(|n| n as NodeId)
            }));
        }
        Ok(nodes)
    }

    fn move_to(&self, pages: &[u64], targets: &[NodeId]) -> Result<()> {
        self.check_available("move_pages", targets.iter().copied().collect())?;
        for (chunk, chunk_targets) in pages
            .chunks(MOVE_PAGES_BATCH)
            .zip(targets.chunks(MOVE_PAGES_BATCH))
        {
            let nodes: Vec<libc::c_int> = chunk_targets.iter().map(|&n| n.into()).collect();
            let mut status = vec![0; chunk.len()];
            self.move_pages(chunk, Some(&nodes), &mut status)?;
        }
        Ok(())
    }

    fn bind(&self, addr: u64, len: u64, placement: &MemPolicy) -> Result<()> {
        let (mode, mask) = match placement {
            MemPolicy::FirstTouch => (MPOL_DEFAULT, None),
            MemPolicy::OnNode(n) => (MPOL_BIND, Some(NodeSet::of([*n]))),
            MemPolicy::Preferred(n) => (MPOL_PREFERRED, Some(NodeSet::of([*n]))),
            MemPolicy::Interleave(set) => (MPOL_INTERLEAVE, Some(*set)),
        };
        if let Some(requested) = mask {
            self.check_available("mbind", requested)?;
        }
        let words = mask.map(|m| *m.words());
        let (mask_ptr, maxnode) = match &words {
            // The kernel reads `maxnode - 1` bits of the mask.
            Some(w) => (w.as_ptr(), MAX_NODES as libc::c_ulong + 1),
            None => (std::ptr::null(), 0),
        };
        // SAFETY: mbind only sets the memory policy of the address range (it
        // neither reads nor writes the memory; without MPOL_MF_MOVE it moves
        // nothing). `mask_ptr` is null or points to 4 words = 256 bits, which
        // is what `maxnode - 1` tells the kernel to read.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                addr as *mut libc::c_void,
                len as libc::c_ulong,
                mode,
                mask_ptr,
                maxnode,
                0 as libc::c_uint,
            )
        };
        if rc < 0 {
            return Err(PlacementError::last_os_error("mbind"));
        }
        Ok(())
    }
}

/// A logical node per page, for topologies the machine does not have.
///
/// Pages it holds no record of are unknown (`None`). Binding records every
/// page of the range at once, as if it had been touched: first touch goes
/// to `first_touch_node`, interleaving deals pages over the set in
/// ascending order from the lowest node.
#[derive(Debug)]
pub struct FakeBackend {
    page_size: u64,
    first_touch_node: NodeId,
    pages: Mutex<BTreeMap<u64, NodeId>>,
}

impl FakeBackend {
    /// An empty record over pages of `page_size` bytes (a power of two);
    /// first touch lands on node 0.
    pub fn new(page_size: u64) -> Self {
        assert!(
            page_size.is_power_of_two(),
            "page size must be a power of two"
        );
        FakeBackend {
            page_size,
            first_touch_node: 0,
            pages: Mutex::new(BTreeMap::new()),
        }
    }

    /// Drops the records of the pages in `[addr, addr + len)`.
    pub fn forget(&self, addr: u64, len: u64) {
        let mut pages = self.lock();
        let doomed: Vec<u64> = pages
            .range(addr..addr.saturating_add(len))
            .map(|(&p, _)| p)
            .collect();
        for p in doomed {
            pages.remove(&p);
        }
    }

    /// Drops the records of these pages.
    fn forget_pages(&self, pages: &[u64]) {
        let mut map = self.lock();
        for p in pages {
            map.remove(p);
        }
    }

    /// How many pages have a record.
    pub fn recorded_pages(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, NodeId>> {
        // A panic while holding the lock cannot leave the map half-updated
        // in a way that matters (each entry is one insert), so poison is
        // ignored.
        self.pages.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl NodeBackend for FakeBackend {
    fn page_size(&self) -> u64 {
        self.page_size
    }

    fn query(&self, pages: &[u64]) -> Result<Vec<Option<NodeId>>> {
        let map = self.lock();
        Ok(pages.iter().map(|p| map.get(p).copied()).collect())
    }

    fn move_to(&self, pages: &[u64], targets: &[NodeId]) -> Result<()> {
        let mut map = self.lock();
        for (&p, &n) in pages.iter().zip(targets) {
            map.insert(p, n);
        }
        Ok(())
    }

    fn bind(&self, addr: u64, len: u64, placement: &MemPolicy) -> Result<()> {
        placement.validate()?;
        let first = addr & !(self.page_size - 1);
        let count = (addr + len).div_ceil(self.page_size) - first / self.page_size;
        let mut map = self.lock();
        for i in 0..count {
            let node = match placement {
                MemPolicy::FirstTouch => self.first_touch_node,
                MemPolicy::OnNode(n) | MemPolicy::Preferred(n) => *n,
                MemPolicy::Interleave(set) => set.nth((i % set.len() as u64) as usize).unwrap_or(0),
            };
            map.insert(first + i * self.page_size, node);
        }
        Ok(())
    }
}

/// Which backends a [`PlacedMemory`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backing {
    /// The kernel, falling back to the logical record for each request the
    /// kernel refuses.
    #[default]
    KernelThenFake,
    /// Only the logical record (a fake topology; memory is still really
    /// mapped, but its nodes are logical).
    Fake,
}

/// How a [`PlacedMemory`] is set up.
#[derive(Debug, Clone, Default)]
pub struct PlacedMemoryConfig {
    pub backing: Backing,
}

/// A request the kernel refused and the logical record took instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    /// The system call refused (`mbind`, `move_pages`).
    pub call: &'static str,
    /// Why, as the error said it.
    pub reason: String,
}

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; placement recorded logically", self.reason)
    }
}

/// Fallbacks so far: how many, and the first with its reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FallbackReport {
    pub count: u64,
    pub first: Option<Fallback>,
}

/// Mappings a [`PlacedMemory`] holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    pub mappings: usize,
    pub bytes: usize,
}

/// The placement front: the kernel where it obliges, the logical record
/// where it refuses (see the module docs). Allocation is in
/// [`PlacedMemory::map`].
#[derive(Debug)]
pub struct PlacedMemory {
    config: PlacedMemoryConfig,
    kernel: KernelBackend,
    fake: FakeBackend,
    fallback_count: AtomicU64,
    first_fallback: OnceLock<Fallback>,
    pub(crate) live_mappings: AtomicUsize,
    pub(crate) live_bytes: AtomicUsize,
}

impl PlacedMemory {
    pub fn new(config: PlacedMemoryConfig) -> Self {
        let kernel = KernelBackend::new();
        let fake = FakeBackend::new(kernel.page_size());
        PlacedMemory {
            config,
            kernel,
            fake,
            fallback_count: AtomicU64::new(0),
            first_fallback: OnceLock::new(),
            live_mappings: AtomicUsize::new(0),
            live_bytes: AtomicUsize::new(0),
        }
    }

    pub fn config(&self) -> &PlacedMemoryConfig {
        &self.config
    }

    /// The requests the kernel refused so far.
    pub fn fallbacks(&self) -> FallbackReport {
        FallbackReport {
            count: self.fallback_count.load(Ordering::Relaxed),
            first: self.first_fallback.get().cloned(),
        }
    }

    /// The mappings made by [`PlacedMemory::map`] that are still alive.
    pub fn usage(&self) -> MemoryUsage {
        MemoryUsage {
            mappings: self.live_mappings.load(Ordering::Relaxed),
            bytes: self.live_bytes.load(Ordering::Relaxed),
        }
    }

    /// Drops the logical record of an unmapped range, so that a later
    /// mapping at the same address does not inherit it.
    pub(crate) fn forget(&self, addr: u64, len: u64) {
        self.fake.forget(addr, len);
    }

    fn uses_kernel(&self) -> bool {
        self.config.backing == Backing::KernelThenFake
    }

    /// Runs `kernel`; on success runs `on_success`, on a refusal notes the
    /// fallback and runs `fallback`; other errors are returned.
    fn try_kernel<T>(
        &self,
        kernel: impl FnOnce(&KernelBackend) -> Result<T>,
        on_success: impl FnOnce(&FakeBackend, T) -> Result<T>,
        fallback: impl FnOnce(&FakeBackend) -> Result<T>,
    ) -> Result<T> {
        if !self.uses_kernel() {
            return fallback(&self.fake);
        }
        match kernel(&self.kernel) {
            Ok(v) => on_success(&self.fake, v),
            Err(e) if e.is_refusal() => {
                self.fallback_count.fetch_add(1, Ordering::Relaxed);
                let _ = self.first_fallback.set(Fallback {
                    call: e.call().unwrap_or("placement"),
                    reason: e.to_string(),
                });
                fallback(&self.fake)
            }
            Err(e) => Err(e),
        }
    }
}

impl NodeBackend for PlacedMemory {
    fn page_size(&self) -> u64 {
        self.kernel.page_size()
    }

    fn query(&self, pages: &[u64]) -> Result<Vec<Option<NodeId>>> {
        let mut nodes = self.fake.query(pages)?;
        let unknown: Vec<u64> = pages
            .iter()
            .zip(&nodes)
            .filter(|(_, n)| n.is_none())
            .map(|(&p, _)| p)
            .collect();
        if unknown.is_empty() || !self.uses_kernel() {
            return Ok(nodes);
        }
        let real = self.try_kernel(
            |k| k.query(&unknown),
            |_, real| Ok(real),
            |_| Ok(vec![None; unknown.len()]),
        )?;
        let mut real = real.into_iter();
        for n in nodes.iter_mut().filter(|n| n.is_none()) {
            *n = real.next().flatten();
        }
        Ok(nodes)
    }

    fn move_to(&self, pages: &[u64], targets: &[NodeId]) -> Result<()> {
        self.try_kernel(
            |k| k.move_to(pages, targets),
            |fake, ()| {
                fake.forget_pages(pages);
                Ok(())
            },
            |fake| fake.move_to(pages, targets),
        )
    }

    fn bind(&self, addr: u64, len: u64, placement: &MemPolicy) -> Result<()> {
        placement.validate()?;
        self.try_kernel(
            |k| k.bind(addr, len, placement),
            |fake, ()| {
                fake.forget(addr, len);
                Ok(())
            },
            |fake| fake.bind(addr, len, placement),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A few touched pages of this process (a leaked Vec, page-aligned).
    fn touched_pages(count: usize, page: u64) -> Vec<u64> {
        let buf: &'static mut [u8] = vec![1u8; (count + 1) * page as usize].leak();
        let base = (buf.as_ptr() as u64).div_ceil(page) * page;
        (0..count as u64).map(|i| base + i * page).collect()
    }

    #[test]
    fn kernel_query_reports_touched_pages_on_an_existing_node() {
        let kernel = KernelBackend::new();
        let pages = touched_pages(4, kernel.page_size());
        match kernel.query(&pages) {
            Ok(nodes) => assert!(nodes.iter().all(|n| n.is_some()), "{nodes:?}"),
            // A sandbox may forbid move_pages; that is a refusal.
            Err(e) => assert!(e.is_refusal(), "{e}"),
        }
    }

    #[test]
    fn the_kernel_refuses_a_node_the_machine_lacks() {
        let kernel = KernelBackend::new();
        // A sandbox may hide the policy calls; then there is nothing to see.
        let Some(allowed) = kernel.allowed_nodes() else {
            return;
        };
        let present = allowed.nth(0).expect("some node has memory");
        let missing = (0..=255).find(|&n| !allowed.contains(n)).unwrap();
        let placer = std::sync::Arc::new(PlacedMemory::new(PlacedMemoryConfig {
            backing: Backing::Fake,
        }));
        let mapping = placer.map(4 * 4096, &MemPolicy::FirstTouch).unwrap();
        let (addr, len) = (mapping.addr(), mapping.len() as u64);
        // Checked before the call: a set with a missing node is refused.
        let both = MemPolicy::Interleave(NodeSet::of([present, missing]));
        let err = kernel.bind(addr, len, &both).unwrap_err();
        assert!(matches!(err, PlacementError::NodesUnavailable { .. }));
        assert!(err.is_refusal());
        // Asked unchecked, the kernel refuses the missing node itself.
        let unchecked = KernelBackend {
            allowed: None,
            ..kernel.clone()
        };
        let err = unchecked
            .bind(addr, len, &MemPolicy::OnNode(missing))
            .unwrap_err();
        assert!(
            matches!(err, PlacementError::Kernel { call: "mbind", errno } if errno == libc::EINVAL),
            "{err}"
        );
        assert!(err.is_refusal());
        kernel.bind(addr, len, &MemPolicy::OnNode(present)).unwrap();
    }

    #[test]
    fn moving_to_a_node_the_machine_lacks_falls_back_once_and_reports_logically() {
        let placed = PlacedMemory::new(PlacedMemoryConfig::default());
        let pages = touched_pages(3, placed.page_size());
        // Node 200 exists on no machine Stride runs on.
        placed.move_to(&pages, &[200, 200, 200]).unwrap();
        placed.move_to(&pages[..1], &[201]).unwrap();
        assert_eq!(
            placed.query(&pages).unwrap(),
            vec![Some(201), Some(200), Some(200)]
        );
        let report = placed.fallbacks();
        assert_eq!(report.count, 2);
        let first = report.first.unwrap();
        assert_eq!(first.call, "move_pages");
        assert!(first.to_string().contains("recorded logically"));
        placed.forget(pages[0], placed.page_size() * 3);
        assert!(placed
            .fake
            .query(&pages)
            .unwrap()
            .iter()
            .all(|n| n.is_none()));
    }

    #[test]
    fn fake_bind_deals_interleaved_pages_in_ascending_order() {
        let fake = FakeBackend::new(4096);
        fake.bind(
            0x1000,
            5 * 4096,
            &MemPolicy::Interleave(NodeSet::of([5, 2])),
        )
        .unwrap();
        let pages: Vec<u64> = (1..=5).map(|i| i * 0x1000).collect();
        let nodes: Vec<NodeId> = fake.query(&pages).unwrap().into_iter().flatten().collect();
        assert_eq!(nodes, vec![2, 5, 2, 5, 2]);
        assert!(fake
            .bind(0, 4096, &MemPolicy::Interleave(NodeSet::new()))
            .is_err());
        fake.forget(0x2000, 0x2000);
        assert_eq!(fake.recorded_pages(), 3);
    }
}

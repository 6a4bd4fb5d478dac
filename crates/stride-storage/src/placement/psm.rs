//! The Page-Socket Mapping (seed 002 §4.3, Fig. 5): which memory node holds
//! each page of a set of virtual address ranges.
//!
//! A [`PageSocketMapping`] keeps a vector of [`PageRange`]s sorted by their
//! first page, plus a summary of pages per node. It is built for reading:
//! [`lookup`](PageSocketMapping::lookup) is a binary search on the first
//! pages, then, for an interleaved range, a step along its pattern.
//! Changes split ranges at their boundaries, or append new ranges, sort
//! and merge neighbours that continue each other (`O(r log r)`).
//!
//! Ranges are found, not declared: [`add`](PageSocketMapping::add) asks a
//! [`NodeBackend`] where each untracked page lives (on Linux `move_pages`
//! with no target nodes) and encodes the answer, greedily from the lowest
//! page:
//!
//! * consecutive pages on one node become one plain range;
//! * a page followed by a page on another node starts a candidate
//!   interleave: the nodes up to the first node seen again form a cycle; if
//!   the cycle is the node set in ascending order (rotated — the order in
//!   which Linux interleaves) and recurs (the page after the cycle is the
//!   first node again), the range runs until a page breaks the cycle;
//! * anything else is a single-page range.
//!
//! Pages the backend does not know (never touched) are left out. The
//! encoding is not unique — two ranges may describe pages that one could —
//! but every operation keeps the page → node function exact, and adjacent
//! ranges that continue each other are merged.

use std::ops::Range;

use super::backend::NodeBackend;
use super::error::PlacementError;
use super::nodes::{NodeId, NodeSet, MAX_NODES};

type Result<T, E = PlacementError> = std::result::Result<T, E>;

/// The most pages one range holds: its count is 32 bits (16 TiB of 4 KiB
/// pages); longer runs are split.
pub const MAX_RANGE_PAGES: u64 = u32::MAX as u64;

/// Bits the seed's size model gives a range: a 64-bit page address, a
/// 32-bit page count, an 8-bit node and a 256-bit interleave pattern.
pub const RANGE_BITS: u64 = 64 + 32 + 8 + 256;

/// Bits the seed's size model gives the summary: 256 nodes × 32-bit counts.
pub const SUMMARY_BITS: u64 = MAX_NODES as u64 * 32;

/// Consecutive pages on one node, or interleaved over a set of nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRange {
    /// Virtual address of the first page.
    pub base: u64,
    /// Number of pages, `1..=MAX_RANGE_PAGES`.
    pub pages: u32,
    /// The node of every page, or of the first page when interleaved.
    pub node: NodeId,
    /// For an interleaved range the participating nodes: page `i` is on the
    /// node `i` steps after `node` in the set's ascending cycle.
    pub interleave: Option<NodeSet>,
}

impl PageRange {
    /// The node of page `index` of the range.
    pub fn node_of(&self, index: u64) -> NodeId {
        match &self.interleave {
            None => self.node,
            Some(set) => set.step(self.node, index),
        }
    }

    /// The address just past the last page.
    pub fn end(&self, page_size: u64) -> u64 {
        self.base + u64::from(self.pages) * page_size
    }

    /// Pages `from..from + count` of this range as a range of their own.
    fn slice(&self, from: u64, count: u64, page_size: u64) -> PageRange {
        debug_assert!(count > 0 && from + count <= u64::from(self.pages));
        PageRange {
            base: self.base + from * page_size,
            pages: count as u32,
            node: self.node_of(from),
            interleave: self.interleave,
        }
    }

    /// The part of this range inside `[start, end)` (page-aligned), if any.
    fn clip(&self, start: u64, end: u64, page_size: u64) -> Option<PageRange> {
        let s = start.max(self.base);
        let e = end.min(self.end(page_size));
        (s < e).then(|| self.slice((s - self.base) / page_size, (e - s) / page_size, page_size))
    }

    /// Calls `f(node, pages)` for each node the range has pages on.
    fn for_each_count(&self, mut f: impl FnMut(NodeId, u64)) {
        let pages = u64::from(self.pages);
        match &self.interleave {
            None => f(self.node, pages),
            Some(set) => {
                let m = set.len() as u64;
                let start = set.rank(self.node) as u64;
                for (rank, node) in set.iter().enumerate() {
                    // Steps from the first page to this node's first page.
                    let offset = (rank as u64 + m - start) % m;
                    if offset < pages {
                        f(node, (pages - offset).div_ceil(m));
                    }
                }
            }
        }
    }

    /// `next` continues this range: adjacent, same pattern, and its first
    /// node is the one this range would have next.
    fn continues_into(&self, next: &PageRange, page_size: u64) -> bool {
        self.end(page_size) == next.base
            && self.interleave == next.interleave
            && next.node == self.node_of(u64::from(self.pages))
            && u64::from(self.pages) + u64::from(next.pages) <= MAX_RANGE_PAGES
    }
}

/// What [`PageSocketMapping::add`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddReport {
    /// Pages newly tracked.
    pub added: u64,
    /// Untracked pages the backend knows no node of (never touched), left
    /// out.
    pub absent: u64,
}

/// Page ranges → memory node, with pages per node (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageSocketMapping {
    page_size: u64,
    /// Sorted by `base`, disjoint.
    ranges: Vec<PageRange>,
    /// Pages per node.
    summary: Box<[u64; MAX_NODES]>,
}

impl PageSocketMapping {
    /// An empty mapping over pages of `page_size` bytes (a power of two).
    pub fn new(page_size: u64) -> Self {
        assert!(
            page_size.is_power_of_two(),
            "page size must be a power of two"
        );
        PageSocketMapping {
            page_size,
            ranges: Vec::new(),
            summary: Box::new([0; MAX_NODES]),
        }
    }

    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// The ranges, sorted by first page.
    pub fn ranges(&self) -> &[PageRange] {
        &self.ranges
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Pages on `node`.
    pub fn pages_on(&self, node: NodeId) -> u64 {
        self.summary[usize::from(node)]
    }

    /// Pages per node, indexed by node.
    pub fn summary(&self) -> &[u64; MAX_NODES] {
        &self.summary
    }

    pub fn total_pages(&self) -> u64 {
        self.summary.iter().sum()
    }

    /// The node holding the most pages (the lowest such node on a tie);
    /// `None` when empty.
    pub fn majority_node(&self) -> Option<NodeId> {
        let mut best: Option<(NodeId, u64)> = None;
        for (node, &pages) in self.summary.iter().enumerate() {
            if pages > best.map_or(0, |(_, p)| p) {
                best = Some((node as NodeId, pages));
            }
        }
        best.map(|(node, _)| node)
    }

    /// The size of this mapping in seed 002's model, `360·r + 8192` bits for
    /// `r` ranges: each range a 64-bit page address, a 32-bit page count, an
    /// 8-bit node and a 256-bit pattern ([`RANGE_BITS`]); the summary 256
    /// nodes × 32 bits ([`SUMMARY_BITS`]). (The Rust value is laid out
    /// differently; the model is what the seed's sizes are stated in.)
    pub fn size_bits(&self) -> u64 {
        RANGE_BITS * self.ranges.len() as u64 + SUMMARY_BITS
    }

    /// The node of the page holding `addr`, `None` if it is not tracked.
    pub fn lookup(&self, addr: u64) -> Option<NodeId> {
        let i = self.locate(addr)?;
        let r = &self.ranges[i];
        Some(r.node_of((addr - r.base) / self.page_size))
    }

    /// Tracks the pages overlapping `[addr, addr + len)` that are not
    /// tracked yet, asking `backend` where they are.
    pub fn add(&mut self, addr: u64, len: u64, backend: &dyn NodeBackend) -> Result<AddReport> {
        self.check_page_size(backend.page_size())?;
        let mut report = AddReport::default();
        let mut found = Vec::new();
        for gap in self.gaps(self.bounds(addr, len)) {
            let pages: Vec<u64> = gap.step_by(self.page_size as usize).collect();
            let nodes = backend.query(&pages)?;
            report.absent += nodes.iter().filter(|n| n.is_none()).count() as u64;
            encode(&pages, &nodes, self.page_size, &mut found);
        }
        report.added = self.insert(found);
        Ok(report)
    }

    /// Stops tracking the pages overlapping `[addr, addr + len)`; returns
    /// how many were tracked.
    pub fn remove(&mut self, addr: u64, len: u64) -> u64 {
        let Range { start, end } = self.bounds(addr, len);
        if start >= end {
            return 0;
        }
        self.split_at(start);
        self.split_at(end);
        let lo = self.ranges.partition_point(|r| r.base < start);
        let hi = self.ranges.partition_point(|r| r.base < end);
        let removed: Vec<PageRange> = self.ranges.drain(lo..hi).collect();
        removed.iter().map(|r| self.count(r, Sign::Minus)).sum()
    }

    /// The pages overlapping `[addr, addr + len)` as a mapping of their own.
    pub fn subset(&self, addr: u64, len: u64) -> PageSocketMapping {
        let Range { start, end } = self.bounds(addr, len);
        let mut out = PageSocketMapping::new(self.page_size);
        let found = self
            .overlapping(start, end)
            .iter()
            .filter_map(|r| r.clip(start, end, self.page_size))
            .collect();
        out.insert(found);
        out
    }

    /// Adds `other`'s pages that this mapping does not track (where both
    /// track a page, this mapping's node stands).
    pub fn union(&mut self, other: &PageSocketMapping) -> Result<()> {
        self.check_page_size(other.page_size)?;
        let mut found = Vec::new();
        for r in &other.ranges {
            for gap in self.gaps(r.base..r.end(self.page_size)) {
                found.extend(r.clip(gap.start, gap.end, self.page_size));
            }
        }
        self.insert(found);
        Ok(())
    }

    /// Stops tracking every page `other` tracks.
    pub fn subtract(&mut self, other: &PageSocketMapping) -> Result<()> {
        self.check_page_size(other.page_size)?;
        for r in &other.ranges {
            self.remove(r.base, r.end(self.page_size) - r.base);
        }
        Ok(())
    }

    /// Moves every page overlapping `[addr, addr + len)` to `node` through
    /// `backend`, then tracks the range as the backend reports it.
    pub fn move_range(
        &mut self,
        addr: u64,
        len: u64,
        node: NodeId,
        backend: &dyn NodeBackend,
    ) -> Result<AddReport> {
        self.relocate(addr, len, backend, |_| node)
    }

    /// Interleaves the pages overlapping `[addr, addr + len)` over `nodes`
    /// (the first page on the lowest node) through `backend`, then tracks
    /// the range as the backend reports it.
    pub fn interleave_range(
        &mut self,
        addr: u64,
        len: u64,
        nodes: &NodeSet,
        backend: &dyn NodeBackend,
    ) -> Result<AddReport> {
        let Some(first) = nodes.nth(0) else {
            return Err(PlacementError::InvalidPlacement(
                "interleave over no node".into(),
            ));
        };
        self.relocate(addr, len, backend, |i| nodes.step(first, i))
    }

    fn relocate(
        &mut self,
        addr: u64,
        len: u64,
        backend: &dyn NodeBackend,
        target: impl Fn(u64) -> NodeId,
    ) -> Result<AddReport> {
        self.check_page_size(backend.page_size())?;
        let Range { start, end } = self.bounds(addr, len);
        let pages: Vec<u64> = (start..end).step_by(self.page_size as usize).collect();
        let targets: Vec<NodeId> = (0..pages.len() as u64).map(target).collect();
        backend.move_to(&pages, &targets)?;
        self.remove(start, end - start);
        self.add(start, end - start, backend)
    }

    /// Every tracked page and its node, in address order.
    pub fn pages(&self) -> impl Iterator<Item = (u64, NodeId)> + '_ {
        self.ranges.iter().flat_map(move |r| {
            (0..u64::from(r.pages)).map(move |i| (r.base + i * self.page_size, r.node_of(i)))
        })
    }

    fn check_page_size(&self, other: u64) -> Result<()> {
        if other != self.page_size {
            return Err(PlacementError::PageSizeMismatch(self.page_size, other));
        }
        Ok(())
    }

    /// `[addr, addr + len)` widened to page boundaries.
    fn bounds(&self, addr: u64, len: u64) -> Range<u64> {
        let mask = self.page_size - 1;
        let start = addr & !mask;
        let end = addr.saturating_add(len).saturating_add(mask) & !mask;
        start..end.max(start)
    }

    /// The index of the range holding `addr`.
    fn locate(&self, addr: u64) -> Option<usize> {
        let i = self
            .ranges
            .partition_point(|r| r.base <= addr)
            .checked_sub(1)?;
        (addr < self.ranges[i].end(self.page_size)).then_some(i)
    }

    /// The ranges overlapping `[start, end)`.
    fn overlapping(&self, start: u64, end: u64) -> &[PageRange] {
        let lo = self
            .ranges
            .partition_point(|r| r.end(self.page_size) <= start);
        let hi = self.ranges.partition_point(|r| r.base < end);
        &self.ranges[lo..hi.max(lo)]
    }

    /// The untracked parts of `range`.
    fn gaps(&self, range: Range<u64>) -> Vec<Range<u64>> {
        let mut gaps = Vec::new();
        let mut cur = range.start;
        for r in self.overlapping(range.start, range.end) {
            if r.base > cur {
                gaps.push(cur..r.base);
            }
            cur = cur.max(r.end(self.page_size));
        }
        if cur < range.end {
            gaps.push(cur..range.end);
        }
        gaps
    }

    /// Makes `addr` a range boundary: splits the range holding it.
    fn split_at(&mut self, addr: u64) {
        let Some(i) = self.locate(addr) else { return };
        let r = self.ranges[i];
        if r.base == addr {
            return;
        }
        let head = (addr - r.base) / self.page_size;
        let ps = self.page_size;
        self.ranges[i] = r.slice(0, head, ps);
        self.ranges
            .insert(i + 1, r.slice(head, u64::from(r.pages) - head, ps));
    }

    /// Inserts ranges disjoint from the tracked ones; returns their pages.
    fn insert(&mut self, found: Vec<PageRange>) -> u64 {
        if found.is_empty() {
            return 0;
        }
        let added = found.iter().map(|r| self.count(r, Sign::Plus)).sum();
        self.ranges.extend(found);
        self.ranges.sort_unstable_by_key(|r| r.base);
        let ps = self.page_size;
        let mut merged: Vec<PageRange> = Vec::with_capacity(self.ranges.len());
        for r in self.ranges.drain(..) {
            match merged.last_mut() {
                Some(last) if last.continues_into(&r, ps) => last.pages += r.pages,
                _ => merged.push(r),
            }
        }
        self.ranges = merged;
        added
    }

    /// Adds a range's pages to the summary or takes them off; returns them.
    fn count(&mut self, r: &PageRange, sign: Sign) -> u64 {
        r.for_each_count(|node, pages| {
            let slot = &mut self.summary[usize::from(node)];
            *slot = match sign {
                Sign::Plus => *slot + pages,
                Sign::Minus => *slot - pages,
            };
        });
        u64::from(r.pages)
    }
}

#[derive(Clone, Copy)]
enum Sign {
    Plus,
    Minus,
}

/// Encodes consecutive `pages` and their `nodes` into ranges (see the
/// module docs), appending them to `out`.
fn encode(pages: &[u64], nodes: &[Option<NodeId>], page_size: u64, out: &mut Vec<PageRange>) {
    let mut i = 0;
    while i < nodes.len() {
        let Some(node) = nodes[i] else {
            i += 1;
            continue;
        };
        let same = nodes[i..].iter().take_while(|&&n| n == Some(node)).count();
        let (len, interleave) = match same {
            1 => match interleave_run(&nodes[i..]) {
                Some((set, len)) => (len, Some(set)),
                None => (1, None),
            },
            _ => (same, None),
        };
        let run = PageRange {
            base: pages[i],
            pages: 0,
            node,
            interleave,
        };
        push_capped(out, run, len as u64, page_size);
        i += len;
    }
}

/// Appends `pages` pages starting as `run` (whose own count is ignored)
/// as ranges of at most [`MAX_RANGE_PAGES`] pages.
fn push_capped(out: &mut Vec<PageRange>, run: PageRange, pages: u64, page_size: u64) {
    let mut done = 0;
    while done < pages {
        let count = (pages - done).min(MAX_RANGE_PAGES);
        out.push(PageRange {
            base: run.base + done * page_size,
            pages: count as u32,
            node: run.node_of(done),
            interleave: run.interleave,
        });
        done += count;
    }
}

/// If `nodes` starts with an interleave pattern that recurs, its node set
/// and how many pages follow it.
fn interleave_run(nodes: &[Option<NodeId>]) -> Option<(NodeSet, usize)> {
    let first = nodes.first().copied().flatten()?;
    let mut set = NodeSet::of([first]);
    let mut cycle = vec![first];
    loop {
        let n = nodes.get(cycle.len()).copied().flatten()?;
        if n == first {
            break;
        }
        if set.contains(n) {
            return None;
        }
        set.insert(n);
        cycle.push(n);
    }
    let m = cycle.len();
    let descents = (0..m).filter(|&k| cycle[(k + 1) % m] < cycle[k]).count();
    if m < 2 || descents != 1 {
        return None;
    }
    let len = m + nodes[m..]
        .iter()
        .enumerate()
        .take_while(|&(k, &n)| n == Some(cycle[k % m]))
        .count();
    Some((set, len))
}

#[cfg(test)]
mod tests;

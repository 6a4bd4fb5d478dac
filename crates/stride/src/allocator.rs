//! The process's allocator: mimalloc, and how it hands freed memory back.
//!
//! mimalloc returns ("purges") memory that stayed free for a while
//! (`purge_delay`: 1 s in the mimalloc v3 that libmimalloc-sys builds, 10 ms
//! in v2) and by default does so by decommitting it
//! (`madvise(MADV_DONTNEED)`). The next allocation of that memory then
//! faults in fresh pages that the kernel must zero. Under a query mix that
//! is most of the cost of the largest unsplittable steps: a hash-join
//! build's concatenation or a partial aggregate's growth that takes 3–13 ms
//! alone took 20–85 ms in a busy Poisson run, page-faulting memory another
//! query had just given back (docs/experiments.md, "Allocator purging").
//!
//! Stride purges by *resetting* instead (`purge_decommits = 0`, which uses
//! `madvise(MADV_FREE)`): the kernel may still take the pages whenever it
//! needs memory, but until it does, reusing them costs no fault. The
//! resident-set size reported by the OS then stays near its peak although
//! the memory is reclaimable. A `MIMALLOC_PURGE_DECOMMITS` environment
//! variable, mimalloc's own setting, is left to win.
//!
//! **Who purges.** mimalloc purges from whichever thread frees or retires
//! a page once the delay has expired, and then purges every expired range
//! of the arena at once: one `madvise` per range, hundreds of them after a
//! query freed its hash tables. On a worker that is CPU time inside a task
//! or finalization the scheduler cannot split: TPC-H SF 1 traces showed
//! single steps of 10–26 ms CPU (a 0.08 ms top-100 finalization took
//! 21 ms) that vanished with purging off (docs/experiments.md, "Longest
//! unsplittable steps, part 2"). So the binary purges on a thread of its
//! own: a purger thread forces a purge every [`PURGE_INTERVAL`], and the
//! delay after which any thread would purge is raised to
//! [`PURGE_DELAY_MS`], ten intervals, which a purger that keeps up never
//! lets expire. Memory still goes back within about an interval of being
//! freed (the default delay was 1 s). A `MIMALLOC_PURGE_DELAY` in the
//! environment is left to win, and no purger runs then.
//!
//! **No transparent huge pages.** mimalloc v3 advises the kernel to back
//! its arenas with transparent huge pages (`MADV_HUGEPAGE`), so the first
//! touch of fresh heap memory zeroes a whole 2 MiB page, and a purge of
//! part of one splits it. Queries in flight take fresh memory for their
//! hash tables and partial states, more of it the more queries run at
//! once: in a Poisson run at α = 0.9 under stride scheduling the workers
//! spent a fifth of their time in the kernel (7.5 s of 36.6 s each),
//! against 1.6 s with huge pages off, while isolated TPC-H SF 1 queries ran
//! as fast without them (docs/experiments.md, "Transparent huge pages").
//! So the binary turns them off for the process (`PR_SET_THP_DISABLE`),
//! unless `MIMALLOC_ALLOW_THP`, mimalloc's own setting, is in the
//! environment.

use std::os::raw::{c_int, c_long};
use std::time::Duration;

// mimalloc's options are indices into `mi_option_e` (mimalloc.h); the
// libmimalloc-sys crate does not name every one of them. The same indices
// hold in mimalloc v2 and v3 (the tests check them against the defaults).
type MiOption = c_int;
/// `mi_option_purge_decommits`: purge by decommitting (1, default) or by
/// resetting (0).
const PURGE_DECOMMITS: MiOption = 5;
/// `mi_option_purge_delay`: milliseconds before freed memory is purged.
const PURGE_DELAY: MiOption = 15;

/// How often the purger thread purges what was freed meanwhile.
pub const PURGE_INTERVAL: Duration = Duration::from_secs(1);

/// mimalloc's purge delay while the purger runs: ten of its intervals.
pub const PURGE_DELAY_MS: c_long = 10 * PURGE_INTERVAL.as_millis() as c_long;

extern "C" {
    // Provided by the mimalloc library that libmimalloc-sys links (the
    // global allocator); declared here with mimalloc.h's signatures.
    fn mi_option_get(option: MiOption) -> c_long;
    fn mi_option_set(option: MiOption, value: c_long);
    fn mi_collect(force: bool);
}

/// Sets how freed memory goes back to the OS, turns transparent huge
/// pages off and starts the purger thread (see the module doc); call
/// before worker threads start.
pub fn configure() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() && !disable_huge_pages() {
        eprintln!(
            "stride: could not turn transparent huge pages off ({}); fresh heap memory may be zeroed 2 MiB at a time",
            std::io::Error::last_os_error()
        );
    }
    if std::env::var_os("MIMALLOC_PURGE_DECOMMITS").is_none() {
        // SAFETY: `mi_option_set` takes an option index and a value and
        // only stores the value; PURGE_DECOMMITS is a valid index (checked
        // by the tests), and mimalloc reads the option at each purge.
        unsafe { mi_option_set(PURGE_DECOMMITS, 0) };
    }
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        let own_delay = purge_delay_ms();
        // SAFETY: as above; PURGE_DELAY is a valid index (the tests read
        // its default through it).
        unsafe { mi_option_set(PURGE_DELAY, PURGE_DELAY_MS) };
        let spawned = std::thread::Builder::new()
            .name("stride-purger".into())
            .spawn(|| loop {
                std::thread::sleep(PURGE_INTERVAL);
                purge_now();
            });
        if spawned.is_err() {
            // No thread: mimalloc's own delay, as without the purger.
            // SAFETY: as above.
            unsafe { mi_option_set(PURGE_DELAY, own_delay) };
        }
    }
}

/// Turns transparent huge pages off for the whole process: the kernel
/// checks the flag at every fault, so it holds for memory mapped before
/// (mimalloc's first arena, already advised) and after. `false` if the
/// kernel refused.
fn disable_huge_pages() -> bool {
    // SAFETY: PR_SET_THP_DISABLE takes an integer flag and no pointers; the
    // unused arguments must be 0.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0 }
}

/// Whether transparent huge pages are off for the process.
pub fn huge_pages_disabled() -> bool {
    // SAFETY: PR_GET_THP_DISABLE takes no pointers; it returns the flag.
    unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) == 1 }
}

/// Purges every range freed so far, on the calling thread.
fn purge_now() {
    // SAFETY: `mi_collect` takes no pointers; a forced collect purges the
    // arenas' free ranges under mimalloc's own purge guard, safe from any
    // thread while others allocate.
    unsafe { mi_collect(true) };
}

/// mimalloc's purge delay in milliseconds now.
pub fn purge_delay_ms() -> c_long {
    // SAFETY: reads one option by a valid index.
    unsafe { mi_option_get(PURGE_DELAY) }
}

/// Whether freed memory is purged by decommitting it (mimalloc's default).
pub fn purge_decommits() -> bool {
    // SAFETY: reads one option by a valid index.
    unsafe { mi_option_get(PURGE_DECOMMITS) != 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_indices_match_mimalloc_and_configure_resets() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // The default of `purge_delay` (1000 ms in v3, 10 ms in v2) at
            // index 15 confirms that the indices match this mimalloc.
            // SAFETY: reads one option by a valid index.
            let delay = unsafe { mi_option_get(PURGE_DELAY) };
            assert!(matches!(delay, 10 | 1000), "purge_delay read as {delay}");
        }
        if std::env::var_os("MIMALLOC_PURGE_DECOMMITS").is_some() {
            return;
        }
        assert!(purge_decommits(), "mimalloc decommits by default");
        configure();
        assert!(!purge_decommits(), "configure() purges by resetting");
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
            assert!(huge_pages_disabled(), "configure() turns huge pages off");
        }
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(purge_delay_ms(), PURGE_DELAY_MS, "the purger's delay");
            // The purger runs on a thread of its own. A new thread names
            // itself once it runs (until then it shows its parent's name),
            // so the check waits for that, up to 5 s.
            let names = || -> Vec<String> {
                std::fs::read_dir("/proc/self/task")
                    .unwrap()
                    .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                    .collect()
            };
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while !names().iter().any(|n| n.trim() == "stride-purger")
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            let names = names();
            assert!(
                names.iter().any(|n| n.trim() == "stride-purger"),
                "{names:?}"
            );
        }
    }
}

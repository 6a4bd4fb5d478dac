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

use std::os::raw::{c_int, c_long};

// mimalloc's options are indices into `mi_option_e` (mimalloc.h); the
// libmimalloc-sys crate does not name every one of them. The same indices
// hold in mimalloc v2 and v3 (the tests check them against the defaults).
type MiOption = c_int;
/// `mi_option_purge_decommits`: purge by decommitting (1, default) or by
/// resetting (0).
const PURGE_DECOMMITS: MiOption = 5;
/// `mi_option_purge_delay`: milliseconds before freed memory is purged.
#[cfg(test)]
const PURGE_DELAY: MiOption = 15;

extern "C" {
    // Provided by the mimalloc library that libmimalloc-sys links (the
    // global allocator); declared here with mimalloc.h's signatures.
    fn mi_option_get(option: MiOption) -> c_long;
    fn mi_option_set(option: MiOption, value: c_long);
}

/// Sets how freed memory goes back to the OS (see the module doc); call
/// before worker threads start.
pub fn configure() {
    if std::env::var_os("MIMALLOC_PURGE_DECOMMITS").is_some() {
        return;
    }
    // SAFETY: `mi_option_set` takes an option index and a value and only
    // stores the value; PURGE_DECOMMITS is a valid index (checked by the
    // tests), and mimalloc reads the option at each purge.
    unsafe { mi_option_set(PURGE_DECOMMITS, 0) };
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
    }
}

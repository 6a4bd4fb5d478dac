//! The calling thread's CPU time, for traces.
//!
//! A trace's records are wall time: on a machine shared with other work,
//! a step the OS preempted looks as long as one that computed all along.
//! With a tracer configured, the worker loop also reads its thread's CPU
//! clock around every task and finalization ([`crate::TaskRecord::cpu_ns`]),
//! so that a long step can be told apart: CPU close to wall is work the
//! step did; CPU far below wall is time the OS gave to someone else. The
//! page faults the thread took in the step come with it: memory touched
//! for the first time (a fresh allocation the kernel must zero) costs CPU
//! that is not the operator's own work. A `clock_gettime` and a
//! `getrusage` on each side of a step, only while tracing.

use std::time::Duration;

/// What the calling thread has used so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ThreadUsage {
    /// CPU time, user and system.
    pub(crate) cpu: Duration,
    /// Page faults, minor and major.
    pub(crate) faults: u64,
}

/// What the calling thread has used so far; `None` where the platform has
/// no per-thread accounting.
#[cfg(target_os = "linux")]
pub(crate) fn now() -> Option<ThreadUsage> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration;
    // CLOCK_THREAD_CPUTIME_ID needs no other argument.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return None;
    }
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is valid and writable for the call; RUSAGE_THREAD
    // asks for the calling thread only.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
        return None;
    }
    Some(ThreadUsage {
        cpu: Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32),
        faults: (usage.ru_minflt + usage.ru_majflt) as u64,
    })
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn now() -> Option<ThreadUsage> {
    None
}

/// What the calling thread used since `start` (a reading of [`now`]).
pub(crate) fn since(start: Option<ThreadUsage>) -> Option<ThreadUsage> {
    let (start, end) = (start?, now()?);
    Some(ThreadUsage {
        cpu: end.cpu.saturating_sub(start.cpu),
        faults: end.faults.saturating_sub(start.faults),
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn spinning_counts_and_sleeping_does_not() {
        let start = now();
        assert!(start.is_some(), "Linux has per-thread accounting");
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let spun = since(start).unwrap().cpu;
        // Some of the 20 ms may go to other threads on a loaded machine.
        assert!(spun > Duration::from_millis(1), "{spun:?}");
        let before = now();
        std::thread::sleep(Duration::from_millis(30));
        let slept = since(before).unwrap().cpu;
        assert!(slept < Duration::from_millis(10), "{slept:?}");
    }

    #[test]
    fn touching_fresh_memory_counts_its_page_faults() {
        let before = now();
        // 16 MiB, written once: fresh pages, each faulted in on first
        // touch (at least one fault per 2 MiB even with huge pages).
        let mut v: Vec<u8> = Vec::with_capacity(16 << 20);
        for i in (0..v.capacity()).step_by(4096) {
            // SAFETY: `i` is below the capacity; the byte is written
            // before the length covers it.
            unsafe { v.as_mut_ptr().add(i).write(1) };
        }
        std::hint::black_box(&v);
        let faults = since(before).unwrap().faults;
        assert!(faults >= 8, "{faults} faults");
    }
}

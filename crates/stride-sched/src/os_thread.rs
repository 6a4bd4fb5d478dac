//! How a worker thread asks the operating system to treat it: pinned to its
//! cpu ([`crate::Topology`]), at a lower weight than the engine's other threads, and with a short
//! OS time slice.
//!
//! A worker never sleeps while there is work, so on a core it shares with a
//! session thread (parsing and planning the next query, waking up for a
//! finished query's result), a wire-protocol thread or an in-process client,
//! that thread runs only when the kernel preempts the worker. Two settings
//! decide how soon:
//!
//! * the **weight** (`nice`, [`WorkerOsPriority`]): how much CPU the worker
//!   gets against the others while both are runnable;
//! * the **slice** (`sched_attr.sched_runtime` on Linux ≥ 6.12, EEVDF's
//!   custom slices): the kernel protects a running task's slice from
//!   wake-up preemption (`RUN_TO_PARITY`), so a thread that wakes while a
//!   worker runs waits up to the rest of the worker's slice — about 1.5 ms by
//!   default on 2 cores, whatever the nice value. A worker that asks for a
//!   slice of 100 µs (the kernel's minimum) is preempted within that.
//!
//! Both are requests: without the privilege or on an older kernel the call
//! fails, the worker runs as created, and [`OsSetup`] says what took effect
//! (the slice as read back from the kernel). Nothing here is a correctness
//! matter.

use std::time::Duration;

use crate::scheduler::WorkerOsPriority;

/// What the kernel holds for one worker thread after its set-up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OsSetup {
    /// The thread is pinned to this core.
    pub core: Option<usize>,
    /// The thread's nice value, as read back (None: could not be read).
    pub nice: Option<i32>,
    /// The thread's custom OS time slice, as read back (None: none was
    /// asked for, or the kernel has no custom slices).
    pub slice: Option<Duration>,
}

/// Pins the calling thread to `cpu` when given (the worker's cpu in
/// [`crate::Topology`]), then applies `priority` and, where the kernel has
/// custom slices, `slice`. Failures are ignored (see the module docs); the
/// result says what holds.
pub(crate) fn setup_worker_thread(
    cpu: Option<usize>,
    priority: WorkerOsPriority,
    slice: Option<Duration>,
) -> OsSetup {
    let core = cpu.and_then(pin_to_cpu);
    let custom = set_priority(priority, slice);
    let (nice, read) = read_back();
    OsSetup {
        core,
        nice,
        slice: if custom { read } else { None },
    }
}

/// Pins the calling thread to `cpu`. Failure (a cpu outside the process's
/// cpuset, or beyond `CPU_SETSIZE`) is ignored: pinning is an optimisation,
/// not a contract.
fn pin_to_cpu(cpu: usize) -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        if cpu >= libc::CPU_SETSIZE as usize {
            return None;
        }
        // SAFETY: `cpu_set_t` is plain data, zero is a valid (empty) set, and
        // CPU_SET writes within it for `cpu` below CPU_SETSIZE (checked
        // above); the kernel only reads the set.
        let ok = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        };
        ok.then_some(cpu)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cpu;
        None
    }
}

/// `struct sched_attr` of `sched_setattr(2)`, in its first published size
/// (`SCHED_ATTR_SIZE_VER0`, 48 bytes), which every kernel since 3.14 accepts.
#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    /// For `SCHED_OTHER` on Linux ≥ 6.12: the requested slice in ns (0: the
    /// default); the kernel clamps it to 0.1–100 ms.
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

#[cfg(target_os = "linux")]
const SCHED_ATTR_SIZE_VER0: u32 = 48;

/// Applies `priority` and `slice`; true when a custom slice was set.
#[cfg(target_os = "linux")]
fn set_priority(priority: WorkerOsPriority, slice: Option<Duration>) -> bool {
    let nice = match priority {
        WorkerOsPriority::Idle => {
            // SAFETY: `param` is a valid, initialised `sched_param` that the
            // kernel only reads; pid 0 is the calling thread.
            unsafe {
                let param = libc::sched_param { sched_priority: 0 };
                let _ = libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
            }
            return false;
        }
        WorkerOsPriority::Normal => None,
        WorkerOsPriority::Nice(n) => Some(n.clamp(-20, 19)),
    };
    if let Some(slice) = slice.filter(|s| !s.is_zero()) {
        let attr = SchedAttr {
            size: SCHED_ATTR_SIZE_VER0,
            sched_policy: libc::SCHED_OTHER as u32,
            // Without SCHED_FLAG_KEEP_PARAMS the call sets the nice value too.
            sched_nice: nice.unwrap_or_else(current_nice),
            sched_runtime: slice.as_nanos().min(u64::MAX as u128) as u64,
            ..SchedAttr::default()
        };
        // SAFETY: `attr` is a valid, initialised `sched_attr` of the size its
        // `size` field states; the kernel only reads it; pid 0 is the calling
        // thread; flags must be 0.
        let ok = unsafe {
            libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0u32) == 0
        };
        if ok {
            return true;
        }
    }
    if let Some(n) = nice {
        // SAFETY: a plain system call on the calling thread's own id; no
        // memory is passed to the kernel.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            let _ = libc::setpriority(libc::PRIO_PROCESS, tid, n);
        }
    }
    false
}

#[cfg(target_os = "linux")]
fn current_nice() -> i32 {
    read_back().0.unwrap_or(0)
}

/// The calling thread's nice value and custom slice, from `sched_getattr`.
#[cfg(target_os = "linux")]
fn read_back() -> (Option<i32>, Option<Duration>) {
    let mut attr = SchedAttr::default();
    // SAFETY: `attr` is a writable `sched_attr` of SCHED_ATTR_SIZE_VER0
    // bytes, the size passed; the kernel writes at most that many; pid 0 is
    // the calling thread; flags must be 0.
    let ok = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            SCHED_ATTR_SIZE_VER0,
            0u32,
        ) == 0
    };
    if !ok {
        return (None, None);
    }
    // Kernels with custom slices report every fair-class thread's slice,
    // the default one included; older ones report 0.
    let slice = (attr.sched_policy == libc::SCHED_OTHER as u32 && attr.sched_runtime > 0)
        .then(|| Duration::from_nanos(attr.sched_runtime));
    (Some(attr.sched_nice), slice)
}

#[cfg(not(target_os = "linux"))]
fn set_priority(priority: WorkerOsPriority, slice: Option<Duration>) -> bool {
    let _ = (priority, slice);
    false
}

#[cfg(not(target_os = "linux"))]
fn read_back() -> (Option<i32>, Option<Duration>) {
    (None, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_reports_what_the_kernel_holds() {
        // On a fresh thread, so that the test runner's thread is untouched.
        let setup =
            std::thread::spawn(|| setup_worker_thread(None, WorkerOsPriority::Nice(3), None))
                .join()
                .unwrap();
        assert_eq!(setup.core, None);
        assert_eq!(setup.slice, None);
        if cfg!(target_os = "linux") {
            // Raising one's own nice value needs no privilege.
            assert_eq!(setup.nice, Some(3));
        }
    }

    #[test]
    fn a_custom_slice_is_read_back_where_the_kernel_has_them() {
        let setup = std::thread::spawn(|| {
            setup_worker_thread(
                Some(0),
                WorkerOsPriority::Nice(5),
                Some(Duration::from_micros(200)),
            )
        })
        .join()
        .unwrap();
        if cfg!(target_os = "linux") {
            assert_eq!(setup.nice, Some(5), "nice is set with or without slices");
            assert_eq!(setup.core, Some(0));
            // Older kernels ignore sched_runtime for SCHED_OTHER.
            if let Some(slice) = setup.slice {
                assert_eq!(slice, Duration::from_micros(200));
            }
        }
    }
}

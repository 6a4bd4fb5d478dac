//! How a benchmark used the machine during its stable window (issue 15
//! item 3: why a policy that shares the workers may complete fewer queries
//! than FIFO). Read from the scheduler's own counters — in-process from
//! [`stride_sched::Scheduler::worker_stats`], over the wire from a Stride
//! server's `stride.workers` view — at the window's two ends, plus samples
//! of the resource groups admitted, taken while the window runs.
//!
//! What each figure means:
//! * **busy share** — worker time spent in tasks and finalization steps over
//!   the window's wall time × workers. In a closed loop with at least as many
//!   clients as workers there is almost always a query waiting, so
//!   `1 − busy` is the share of worker time idle while queries were queued
//!   (client round trips and planning are the exceptions);
//! * **tasks/s** and **idle sleeps/s** — how often workers started a task
//!   and how often they found nothing runnable;
//! * **mean morsel** — tuples per morsel over the window's completed
//!   queries;
//! * **active groups** — resource groups admitted and not completed, the
//!   scheduler's "queries in flight" (mean and peak of the samples);
//! * **peak RSS** — the process's high-water mark (`VmHWM`), in-process only
//!   (a server's is not visible over the wire);
//! * **minor faults/s** — pages the process touched for the first time
//!   (fresh allocations the kernel zero-fills) per second of the window,
//!   from `/proc/self/stat`, in-process only;
//! * **host CPU** — how the whole machine's CPUs spent the window
//!   ([`HostCpu`], `/proc/stat`): user, kernel (system, irq, softirq), idle
//!   and *steal*, the time a virtual machine's CPUs were runnable but the
//!   hypervisor ran something else. On a shared VM steal takes capacity
//!   from a benchmark at random, and a run near saturation that lost some
//!   is not comparable with one that did not: every run reports it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::driver::Target;

/// Sums of the workers' counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WorkerCounters {
    pub tasks: u64,
    pub busy: Duration,
    pub idle_sleeps: u64,
    pub preemptions: u64,
    pub handover_tasks: u64,
}

impl WorkerCounters {
    /// The counters now: `None` for a server that is not Stride.
    pub fn read(target: &Target) -> Result<Option<(WorkerCounters, usize)>> {
        if let Some(engine) = target.engine() {
            let stats = engine.runtime().scheduler().worker_stats();
            let workers = stats.len();
            let sum = stats
                .iter()
                .fold(WorkerCounters::default(), |s, w| WorkerCounters {
                    tasks: s.tasks + w.tasks,
                    busy: s.busy + w.busy,
                    idle_sleeps: s.idle_sleeps + w.idle_sleeps,
                    preemptions: s.preemptions + w.preemptions,
                    handover_tasks: s.handover_tasks + w.handover_tasks,
                });
            return Ok(Some((sum, workers)));
        }
        if !target.is_stride_server() {
            return Ok(None);
        }
        let rows = target.query_text(
            "select count(*), sum(tasks), sum(busy_ms), sum(idle_sleeps), \
             sum(preemptions), sum(handover_tasks) from stride.workers",
        )?;
        let row = rows.first().context("stride.workers returned no row")?;
        let int = |i: usize| -> Result<u64> {
            row.get(i)
                .and_then(|v| v.as_deref())
                .context("stride.workers: a NULL sum")?
                .parse::<u64>()
                .context("stride.workers: not an integer")
        };
        let busy_ms: f64 = row
            .get(2)
            .and_then(|v| v.as_deref())
            .context("stride.workers: a NULL busy_ms")?
            .parse()
            .context("stride.workers: busy_ms")?;
        Ok(Some((
            WorkerCounters {
                tasks: int(1)?,
                busy: Duration::from_secs_f64(busy_ms / 1e3),
                idle_sleeps: int(3)?,
                preemptions: int(4)?,
                handover_tasks: int(5)?,
            },
            int(0)? as usize,
        )))
    }

    fn since(&self, earlier: &WorkerCounters) -> WorkerCounters {
        WorkerCounters {
            tasks: self.tasks - earlier.tasks,
            busy: self.busy.saturating_sub(earlier.busy),
            idle_sleeps: self.idle_sleeps - earlier.idle_sleeps,
            preemptions: self.preemptions - earlier.preemptions,
            handover_tasks: self.handover_tasks - earlier.handover_tasks,
        }
    }
}

/// Resource groups admitted, read in-process or from `stride.workers`.
fn active_groups(target: &Target) -> Result<Option<usize>> {
    if let Some(engine) = target.engine() {
        return Ok(Some(engine.runtime().scheduler().active_groups()));
    }
    if !target.is_stride_server() {
        return Ok(None);
    }
    let rows = target.query_text("select max(active_groups) from stride.workers")?;
    Ok(rows
        .first()
        .and_then(|r| r.first())
        .and_then(|v| v.as_deref())
        .and_then(|v| v.parse().ok()))
}

/// The process's minor page faults so far (field 10 of /proc/self/stat).
pub fn minor_faults() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces:
    // fields are counted after its closing one, which is field 2's end.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(7)?.parse().ok()
}

/// The process's peak resident set (`VmHWM` of /proc/self/status), bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The machine's CPU time so far, summed over its CPUs (the `cpu` line of
/// `/proc/stat`, in clock ticks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostCpu {
    pub user: u64,
    pub kernel: u64,
    pub idle: u64,
    pub steal: u64,
}

impl HostCpu {
    /// Now; `None` where `/proc/stat` cannot be read (not Linux).
    pub fn now() -> Option<HostCpu> {
        HostCpu::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The `cpu` line of `/proc/stat`: user, nice, system, idle, iowait,
    /// irq, softirq, steal (guest time is already counted in user).
    pub fn parse(stat: &str) -> Option<HostCpu> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        Some(HostCpu {
            user: at(0) + at(1),
            kernel: at(2) + at(5) + at(6),
            idle: at(3) + at(4),
            steal: at(7),
        })
    }

    /// Shares of the time between `earlier` and `self`.
    pub fn shares_since(&self, earlier: &HostCpu) -> HostShares {
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64;
        let user = d(self.user, earlier.user);
        let kernel = d(self.kernel, earlier.kernel);
        let idle = d(self.idle, earlier.idle);
        let steal = d(self.steal, earlier.steal);
        let total = (user + kernel + idle + steal).max(1.0);
        HostShares {
            user: user / total,
            kernel: kernel / total,
            idle: idle / total,
            steal: steal / total,
        }
    }
}

/// How the machine's CPUs spent a window ([`HostCpu::shares_since`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostShares {
    pub user: f64,
    pub kernel: f64,
    pub idle: f64,
    pub steal: f64,
}

impl HostShares {
    pub fn to_json(self) -> Value {
        json!({
            "user_share": self.user,
            "kernel_share": self.kernel,
            "idle_share": self.idle,
            "steal_share": self.steal,
        })
    }

    /// One line for a run's printed report.
    pub fn line(self) -> String {
        format!(
            "host CPUs: user {:.1} %, kernel {:.1} %, idle {:.1} %, steal {:.1} % (taken by the hypervisor)",
            100.0 * self.user,
            100.0 * self.kernel,
            100.0 * self.idle,
            100.0 * self.steal
        )
    }
}

/// What the window used.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineUse {
    pub window: Duration,
    pub workers: usize,
    pub counters: WorkerCounters,
    /// Tuples and morsels of the window's completed queries, when known.
    pub morsels: Option<(u64, u64)>,
    /// Mean and peak of the active-group samples.
    pub active_groups: Option<(f64, usize)>,
    pub peak_rss_bytes: Option<u64>,
    /// Minor page faults in the window (in-process only).
    pub minor_faults: Option<u64>,
    /// The whole machine's CPUs in the window.
    pub host: Option<HostShares>,
}

impl MachineUse {
    pub fn busy_share(&self) -> f64 {
        let capacity = self.window.as_secs_f64() * self.workers.max(1) as f64;
        self.counters.busy.as_secs_f64() / capacity
    }

    fn per_second(&self, n: u64) -> f64 {
        n as f64 / self.window.as_secs_f64()
    }

    pub fn mean_morsel_tuples(&self) -> Option<f64> {
        self.morsels
            .filter(|&(_, m)| m > 0)
            .map(|(t, m)| t as f64 / m as f64)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "window_s": self.window.as_secs_f64(),
            "workers": self.workers,
            "busy_share": self.busy_share(),
            "tasks_per_s": self.per_second(self.counters.tasks),
            "idle_sleeps_per_s": self.per_second(self.counters.idle_sleeps),
            "preemptions_per_s": self.per_second(self.counters.preemptions),
            "handover_tasks_per_s": self.per_second(self.counters.handover_tasks),
            "mean_morsel_tuples": self.mean_morsel_tuples(),
            "active_groups_mean": self.active_groups.map(|(m, _)| m),
            "active_groups_peak": self.active_groups.map(|(_, p)| p),
            "peak_rss_bytes": self.peak_rss_bytes,
            "minor_faults_per_s": self.minor_faults.map(|n| self.per_second(n)),
            "host_cpu": self.host.map(HostShares::to_json),
        })
    }

    /// One line for a run's printed report.
    pub fn line(&self) -> String {
        let mut s = format!(
            "machine: workers busy {:.1} % of {} × {:.1} s, {:.0} tasks/s, {:.1} idle sleeps/s, \
             {:.0} preemptions/s",
            100.0 * self.busy_share(),
            self.workers,
            self.window.as_secs_f64(),
            self.per_second(self.counters.tasks),
            self.per_second(self.counters.idle_sleeps),
            self.per_second(self.counters.preemptions),
        );
        if let Some(m) = self.mean_morsel_tuples() {
            s += &format!(", mean morsel {m:.0} tuples");
        }
        if let Some((mean, peak)) = self.active_groups {
            s += &format!(", active groups mean {mean:.1} peak {peak}");
        }
        if let Some(rss) = self.peak_rss_bytes {
            s += &format!(", peak RSS {:.2} GiB", rss as f64 / (1u64 << 30) as f64);
        }
        if let Some(n) = self.minor_faults {
            s += &format!(", {:.0} minor faults/s", self.per_second(n));
        }
        if let Some(h) = self.host {
            s += &format!("\n{}", h.line());
        }
        s
    }
}

/// Watches the stable window `[from, to)` after `t0` on a thread of its own:
/// counters at both ends, active groups every `sample_every` in between.
/// The thread ends at `t0 + to` whatever the benchmark does.
pub struct MachineProbe {
    thread: std::thread::JoinHandle<Result<Option<Window>>>,
}

/// What the probe saw; morsels are added by the benchmark, which knows its
/// completed queries.
pub struct Window {
    start: WorkerCounters,
    end: WorkerCounters,
    /// Minor faults at both ends (in-process: this process is the engine).
    faults: Option<(u64, u64)>,
    /// The machine's CPU time at both ends.
    host: Option<(HostCpu, HostCpu)>,
    workers: usize,
    elapsed: Duration,
    groups: Vec<usize>,
}

impl MachineProbe {
    pub fn start(
        target: Arc<Target>,
        t0: Instant,
        from: Duration,
        to: Duration,
        sample_every: Duration,
    ) -> Result<MachineProbe> {
        let thread = std::thread::Builder::new()
            .name("bench-machine".into())
            .spawn(move || -> Result<Option<Window>> {
                let wait_until = |at: Instant| {
                    let now = Instant::now();
                    if at > now {
                        std::thread::sleep(at - now);
                    }
                };
                wait_until(t0 + from);
                let Some((start, workers)) = WorkerCounters::read(&target)? else {
                    return Ok(None);
                };
                let in_process = target.engine().is_some();
                let faults_at_start = minor_faults().filter(|_| in_process);
                let host_at_start = HostCpu::now();
                let began = Instant::now();
                let mut groups = Vec::new();
                let mut next = began;
                while Instant::now() < t0 + to {
                    if let Some(g) = active_groups(&target)? {
                        groups.push(g);
                    }
                    next += sample_every;
                    wait_until(next.min(t0 + to));
                }
                let Some((end, _)) = WorkerCounters::read(&target)? else {
                    return Ok(None);
                };
                let faults = faults_at_start.zip(minor_faults());
                let host = host_at_start.zip(HostCpu::now());
                Ok(Some(Window {
                    start,
                    end,
                    workers,
                    elapsed: began.elapsed(),
                    groups,
                    faults,
                    host,
                }))
            })?;
        Ok(MachineProbe { thread })
    }

    /// Waits for the window's end and sums it up; `morsels` are the (tuples, morsels) of the window's
    /// completed queries where the benchmark knows them.
    pub fn finish(
        self,
        morsels: Option<(u64, u64)>,
        in_process: bool,
    ) -> Result<Option<MachineUse>> {
        let window = match self.thread.join() {
            Ok(w) => w?,
            Err(_) => anyhow::bail!("the machine probe panicked"),
        };
        Ok(window.map(|w| MachineUse {
            window: w.elapsed,
            workers: w.workers,
            counters: w.end.since(&w.start),
            morsels,
            active_groups: (!w.groups.is_empty()).then(|| {
                let mean = w.groups.iter().sum::<usize>() as f64 / w.groups.len() as f64;
                (mean, w.groups.iter().copied().max().unwrap_or(0))
            }),
            peak_rss_bytes: if in_process { peak_rss_bytes() } else { None },
            minor_faults: w.faults.map(|(a, b)| b.saturating_sub(a)),
            host: w.host.map(|(a, b)| b.shares_since(&a)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_cpu_shares_split_user_kernel_idle_and_steal() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let a = HostCpu::parse("cpu  100 10 50 800 20 5 5 10 0 0\ncpu0 1 2 3\n").unwrap();
        assert_eq!(
            a,
            HostCpu {
                user: 110,
                kernel: 60,
                idle: 820,
                steal: 10
            }
        );
        let b = HostCpu::parse("cpu  240 10 90 980 20 5 5 50 7 0\n").unwrap();
        let s = b.shares_since(&a);
        // 140 user, 40 kernel, 180 idle, 40 steal of 400 ticks.
        assert!((s.user - 0.35).abs() < 1e-12);
        assert!((s.kernel - 0.10).abs() < 1e-12);
        assert!((s.idle - 0.45).abs() < 1e-12);
        assert!((s.steal - 0.10).abs() < 1e-12);
        assert!(s.line().contains("steal 10.0 %"));
        assert_eq!(HostCpu::parse("intr 1 2 3\n"), None);
        assert_eq!(HostCpu::parse("cpu  1 x 3\n"), None);
        if std::path::Path::new("/proc/stat").exists() {
            assert!(HostCpu::now().is_some());
        }
    }

    #[test]
    fn shares_and_rates_come_from_the_window() {
        let m = MachineUse {
            window: Duration::from_secs(10),
            workers: 2,
            counters: WorkerCounters {
                tasks: 5000,
                busy: Duration::from_secs(15),
                idle_sleeps: 20,
                preemptions: 100,
                handover_tasks: 0,
            },
            morsels: Some((1_000_000, 250)),
            active_groups: Some((6.5, 8)),
            peak_rss_bytes: Some(3 << 30),
            minor_faults: Some(1000),
            host: None,
        };
        assert!((m.busy_share() - 0.75).abs() < 1e-12);
        assert_eq!(m.mean_morsel_tuples(), Some(4000.0));
        let j = m.to_json();
        assert_eq!(j["tasks_per_s"], 500.0);
        assert_eq!(j["idle_sleeps_per_s"], 2.0);
        assert!(m.line().contains("busy 75.0 %"), "{}", m.line());
        assert!(m.line().contains("peak RSS 3.00 GiB"), "{}", m.line());
        assert!(m.line().contains("100 minor faults/s"), "{}", m.line());
    }

    #[test]
    fn counters_subtract() {
        let a = WorkerCounters {
            tasks: 10,
            busy: Duration::from_millis(5),
            idle_sleeps: 1,
            preemptions: 2,
            handover_tasks: 3,
        };
        let b = WorkerCounters {
            tasks: 25,
            busy: Duration::from_millis(9),
            idle_sleeps: 4,
            preemptions: 2,
            handover_tasks: 7,
        };
        assert_eq!(
            b.since(&a),
            WorkerCounters {
                tasks: 15,
                busy: Duration::from_millis(4),
                idle_sleeps: 3,
                preemptions: 0,
                handover_tasks: 4,
            }
        );
    }

    #[test]
    fn minor_faults_grow_when_fresh_pages_are_touched() {
        let before = minor_faults().expect("/proc/self/stat");
        // 32 MiB of fresh pages (no test frees that much first), one byte per page.
        let mut v = vec![0u8; 32 << 20];
        for i in (0..v.len()).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&v);
        let after = minor_faults().expect("/proc/self/stat");
        assert!(after > before, "{before} -> {after}");
    }

    #[test]
    fn peak_rss_is_read_from_proc() {
        // Linux (the only platform Stride runs on) always has VmHWM.
        let rss = peak_rss_bytes().expect("VmHWM in /proc/self/status");
        assert!(rss > 1 << 20, "{rss}");
    }
}

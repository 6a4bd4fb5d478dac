//! Where the workers run: memory nodes, their cpus, the cpus' caches, and
//! which worker belongs to which node.
//!
//! A [`Topology`] comes from one of three places:
//!
//! * [`Topology::detect`]: the machine, from Linux sysfs
//!   (`/sys/devices/system/node/node*/{cpulist,meminfo}` and
//!   `/sys/devices/system/cpu/cpuN/cache/index*`), restricted to the cpus the
//!   process may run on (`sched_getaffinity`). Without a node directory (not
//!   Linux, no NUMA support compiled in) it is one node holding those cpus.
//! * [`Topology::synthetic`]: a described machine, `nodes=4,cores-per-node=8`
//!   (hwloc-style), whose virtual cores run on the real cpus round-robin. It
//!   may have more cores than the machine; it then says so
//!   ([`Topology::oversubscribed`]), and every report should repeat it.
//! * [`Topology::fake`]: `nodes × cores_per_node` real cpus split into
//!   disjoint groups that play the nodes — really pinned, so that two fake
//!   nodes never share a cpu (2 nodes × 1 core on a 2-core machine).
//!
//! **Workers to cores.** The topology's cores are dealt round-robin across
//! nodes: the first core of every node (in node order), then the second
//! core of every node, and so on, skipping nodes that have run out of cores
//! (or have none, like a memory-only node). Worker `i` takes the `i`-th core
//! of that order (modulo the number of cores), so fewer workers than cores
//! spread evenly over the nodes, and a topology's node sizes need not be
//! equal.
//!
//! Nothing here is a correctness matter for the scheduler: the node is a
//! placement hint handed to tasks ([`crate::TaskContext::node`]), the cpu
//! is where a worker asks to be pinned.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, OnceLock};

/// Largest cpu number accepted from sysfs or the affinity mask (beyond any
/// machine Linux runs on; bounds what a malformed cpu list can allocate).
const MAX_CPU: usize = 1 << 16;

/// Largest number of cores of a synthetic or fake topology.
const MAX_CORES: usize = 1 << 16;

/// One memory node and the cpus that belong to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The node's number: the kernel's for a detected topology (which may
    /// have gaps), `0..nodes` for synthetic and fake ones.
    pub id: usize,
    /// The real cpus of the node's cores, in core order. For a synthetic
    /// topology these are the cpus its virtual cores run on, and a cpu may
    /// repeat (in this node or another) when the topology is oversubscribed.
    /// Empty for a node with memory and no cpus.
    pub cpus: Vec<usize>,
    /// The node's memory (`MemTotal` of its sysfs `meminfo`); `None` when not
    /// known, and for synthetic and fake nodes.
    pub memory_bytes: Option<u64>,
}

/// One data or unified cache of a cpu (sysfs `cpuN/cache/indexM`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    /// 1, 2, 3, …
    pub level: u8,
    pub size_bytes: u64,
    /// The cpus sharing this cache (the cpu itself included).
    pub shared_with: Vec<usize>,
}

/// Where a topology came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyKind {
    /// The machine's own (sysfs, or one node of the usable cpus).
    Detected,
    /// Described by a spec; virtual cores on the real cpus round-robin.
    Synthetic,
    /// Disjoint groups of real cpus playing nodes.
    Fake,
}

/// The machine the workers run on, or the one they pretend to run on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    nodes: Vec<Node>,
    kind: TopologyKind,
    /// Number of distinct cpus the process may use (for `oversubscribed`).
    machine_cpus: usize,
    /// Caches per real cpu, for the cpus of `nodes` whose sysfs lists them.
    caches: BTreeMap<usize, Vec<Cache>>,
    /// The cores in worker order (see the module docs): (index into
    /// `nodes`, cpu). Never empty: every constructor gives at least one
    /// core.
    order: Vec<(usize, usize)>,
}

/// A `--topology` argument: `detect`, `nodes=N,cores-per-node=M`
/// (synthetic) or `fake:nodes=N,cores-per-node=M`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologySpec {
    Detect,
    Synthetic { nodes: usize, cores_per_node: usize },
    Fake { nodes: usize, cores_per_node: usize },
}

/// Why a topology spec was refused or a topology could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error(
        "topology \"{spec}\": {problem} (expected detect, nodes=N,cores-per-node=M \
         or fake:nodes=N,cores-per-node=M)"
    )]
    Spec { spec: String, problem: SpecProblem },
    #[error(
        "a fake topology of {nodes} nodes × {cores_per_node} cores needs {needed} cpus, \
         but this process may run on {available}"
    )]
    NotEnoughCpus {
        nodes: usize,
        cores_per_node: usize,
        needed: usize,
        available: usize,
    },
}

/// What is wrong with a topology spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecProblem {
    #[error("it is empty")]
    Empty,
    #[error("\"{0}\" is not key=value")]
    NotKeyValue(String),
    #[error("unknown key \"{0}\"")]
    UnknownKey(String),
    #[error("{key} is given twice")]
    Duplicate { key: &'static str },
    #[error("{key} is missing")]
    Missing { key: &'static str },
    #[error("{key}=\"{value}\" is not a whole number of at least 1")]
    NotPositive { key: &'static str, value: String },
    #[error("{nodes} × {cores_per_node} cores is more than {max}")]
    TooLarge {
        nodes: usize,
        cores_per_node: usize,
        max: usize,
    },
}

impl TopologySpec {
    /// Builds the topology the spec describes.
    pub fn build(self) -> Result<Topology, TopologyError> {
        match self {
            TopologySpec::Detect => Ok(Topology::detect()),
            TopologySpec::Synthetic {
                nodes,
                cores_per_node,
            } => Ok(Topology::synthetic_of(nodes, cores_per_node)),
            TopologySpec::Fake {
                nodes,
                cores_per_node,
            } => Topology::fake(nodes, cores_per_node),
        }
    }
}

impl FromStr for TopologySpec {
    type Err = TopologyError;

    fn from_str(spec: &str) -> Result<Self, TopologyError> {
        let trimmed = spec.trim();
        let refuse = |problem| TopologyError::Spec {
            spec: spec.to_string(),
            problem,
        };
        if trimmed.eq_ignore_ascii_case("detect") {
            return Ok(TopologySpec::Detect);
        }
        let (fake, shape) = match trimmed.strip_prefix("fake:") {
            Some(rest) => (true, rest),
            None => (false, trimmed),
        };
        let (nodes, cores_per_node) = parse_shape(shape).map_err(refuse)?;
        Ok(if fake {
            TopologySpec::Fake {
                nodes,
                cores_per_node,
            }
        } else {
            TopologySpec::Synthetic {
                nodes,
                cores_per_node,
            }
        })
    }
}

/// Parses `nodes=N,cores-per-node=M` (keys in any order, spaces allowed
/// around the parts).
fn parse_shape(shape: &str) -> Result<(usize, usize), SpecProblem> {
    if shape.trim().is_empty() {
        return Err(SpecProblem::Empty);
    }
    let mut nodes = None;
    let mut cores = None;
    for part in shape.split(',') {
        let part = part.trim();
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| SpecProblem::NotKeyValue(part.to_string()))?;
        let (key, slot): (&'static str, &mut Option<usize>) = match key.trim() {
            "nodes" => ("nodes", &mut nodes),
            "cores-per-node" => ("cores-per-node", &mut cores),
            other => return Err(SpecProblem::UnknownKey(other.to_string())),
        };
        if slot.is_some() {
            return Err(SpecProblem::Duplicate { key });
        }
        let value = value.trim();
        let n = value
            .parse::<usize>()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| SpecProblem::NotPositive {
                key,
                value: value.to_string(),
            })?;
        *slot = Some(n);
    }
    let nodes = nodes.ok_or(SpecProblem::Missing { key: "nodes" })?;
    let cores_per_node = cores.ok_or(SpecProblem::Missing {
        key: "cores-per-node",
    })?;
    match nodes.checked_mul(cores_per_node) {
        Some(total) if total <= MAX_CORES => Ok((nodes, cores_per_node)),
        _ => Err(SpecProblem::TooLarge {
            nodes,
            cores_per_node,
            max: MAX_CORES,
        }),
    }
}

impl Topology {
    /// The machine's topology, detected once per process and shared (the
    /// default of [`crate::SchedulerConfig::topology`]).
    pub fn machine() -> Arc<Topology> {
        static MACHINE: OnceLock<Arc<Topology>> = OnceLock::new();
        MACHINE.get_or_init(|| Arc::new(Topology::detect())).clone()
    }

    /// Reads the machine's topology from sysfs (see the module docs).
    pub fn detect() -> Topology {
        Topology::detect_in(Path::new("/sys"), Some(&usable_cpus()))
    }

    /// [`Topology::detect`] under `root` (a sysfs mount or a copy of one),
    /// keeping only the cpus in `usable` when given. Without a usable node
    /// directory: one node 0 of the `usable` cpus (or of
    /// `available_parallelism` cpus).
    pub fn detect_in(root: &Path, usable: Option<&[usize]>) -> Topology {
        let mut nodes = read_nodes(&root.join("devices/system/node")).unwrap_or_default();
        if let Some(usable) = usable {
            for node in &mut nodes {
                node.cpus.retain(|c| usable.contains(c));
            }
        }
        if nodes.iter().all(|n| n.cpus.is_empty()) {
            let cpus = match usable {
                Some(u) if !u.is_empty() => u.to_vec(),
                _ => (0..available_parallelism()).collect(),
            };
            let memory_bytes = nodes
                .iter()
                .find(|n| n.id == 0)
                .and_then(|n| n.memory_bytes);
            nodes = vec![Node {
                id: 0,
                cpus,
                memory_bytes,
            }];
        }
        let cpu_dir = root.join("devices/system/cpu");
        let caches = nodes
            .iter()
            .flat_map(|n| n.cpus.iter().copied())
            .filter_map(|cpu| {
                let caches = read_caches(&cpu_dir.join(format!("cpu{cpu}/cache")));
                (!caches.is_empty()).then_some((cpu, caches))
            })
            .collect();
        let machine_cpus = match usable {
            Some(u) if !u.is_empty() => u.len(),
            _ => distinct_cpus(&nodes),
        };
        Topology::assemble(nodes, TopologyKind::Detected, machine_cpus, caches)
    }

    /// A synthetic topology from `spec` (`nodes=N,cores-per-node=M`); its
    /// virtual cores run on this process's cpus round-robin.
    pub fn synthetic(spec: &str) -> Result<Topology, TopologyError> {
        let (nodes, cores_per_node) = parse_shape(spec).map_err(|problem| TopologyError::Spec {
            spec: spec.to_string(),
            problem,
        })?;
        Ok(Topology::synthetic_of(nodes, cores_per_node))
    }

    fn synthetic_of(nodes: usize, cores_per_node: usize) -> Topology {
        let machine = Topology::machine();
        let real = machine.distinct_cpus();
        let nodes: Vec<Node> = (0..nodes)
            .map(|n| Node {
                id: n,
                cpus: (0..cores_per_node)
                    .map(|c| real[(n * cores_per_node + c) % real.len()])
                    .collect(),
                memory_bytes: None,
            })
            .collect();
        let caches = machine.caches.clone();
        Topology::assemble(nodes, TopologyKind::Synthetic, real.len(), caches)
    }

    /// `nodes` fake nodes of `cores_per_node` real cpus each, disjoint: the
    /// process's usable cpus in ascending order, cut into consecutive groups.
    /// Fails when the process may use fewer than `nodes × cores_per_node`
    /// cpus (a fake topology is never oversubscribed).
    pub fn fake(nodes: usize, cores_per_node: usize) -> Result<Topology, TopologyError> {
        let machine = Topology::machine();
        Topology::fake_on(&machine, nodes, cores_per_node)
    }

    fn fake_on(
        machine: &Topology,
        nodes: usize,
        cores_per_node: usize,
    ) -> Result<Topology, TopologyError> {
        let real = machine.distinct_cpus();
        let needed = nodes
            .checked_mul(cores_per_node)
            .filter(|&n| n >= 1)
            .unwrap_or(usize::MAX);
        if needed > real.len() {
            return Err(TopologyError::NotEnoughCpus {
                nodes,
                cores_per_node,
                needed,
                available: real.len(),
            });
        }
        let nodes: Vec<Node> = real[..needed]
            .chunks(cores_per_node)
            .enumerate()
            .map(|(id, cpus)| Node {
                id,
                cpus: cpus.to_vec(),
                memory_bytes: None,
            })
            .collect();
        let caches = machine
            .caches
            .iter()
            .filter(|(cpu, _)| real[..needed].contains(cpu))
            .map(|(&cpu, c)| (cpu, c.clone()))
            .collect();
        Ok(Topology::assemble(
            nodes,
            TopologyKind::Fake,
            real.len(),
            caches,
        ))
    }

    /// Parses a `--topology` argument and builds it.
    pub fn from_spec(spec: &str) -> Result<Topology, TopologyError> {
        spec.parse::<TopologySpec>()?.build()
    }

    /// Computes the worker order; `nodes` has at least one cpu.
    fn assemble(
        nodes: Vec<Node>,
        kind: TopologyKind,
        machine_cpus: usize,
        caches: BTreeMap<usize, Vec<Cache>>,
    ) -> Topology {
        let rounds = nodes.iter().map(|n| n.cpus.len()).max().unwrap_or(0);
        let order: Vec<(usize, usize)> = (0..rounds)
            .flat_map(|r| {
                nodes
                    .iter()
                    .enumerate()
                    .filter_map(move |(i, n)| n.cpus.get(r).map(|&cpu| (i, cpu)))
            })
            .collect();
        assert!(!order.is_empty(), "a topology has at least one core");
        Topology {
            nodes,
            kind,
            machine_cpus,
            caches,
            order,
        }
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn kind(&self) -> TopologyKind {
        self.kind
    }

    /// Number of cores (of cpus for a detected topology, of virtual cores
    /// for a synthetic one).
    pub fn cores(&self) -> usize {
        self.order.len()
    }

    /// True for a synthetic topology with more cores than the process has
    /// cpus: its workers share cpus, so timings on it are not the described
    /// machine's.
    pub fn oversubscribed(&self) -> bool {
        self.cores() > self.machine_cpus
    }

    /// The node (its [`Node::id`]) that worker `worker` belongs to.
    pub fn worker_node(&self, worker: usize) -> usize {
        self.nodes[self.order[worker % self.order.len()].0].id
    }

    /// The real cpu worker `worker` is pinned to.
    pub fn cpu_of_worker(&self, worker: usize) -> usize {
        self.order[worker % self.order.len()].1
    }

    /// The workers, out of `workers`, that belong to node `node` (a
    /// [`Node::id`]), ascending.
    pub fn node_workers(&self, node: usize, workers: usize) -> Vec<usize> {
        (0..workers)
            .filter(|&w| self.worker_node(w) == node)
            .collect()
    }

    /// The data and unified caches of real cpu `cpu`, smallest level first
    /// (empty when sysfs does not list them).
    pub fn caches(&self, cpu: usize) -> &[Cache] {
        self.caches.get(&cpu).map_or(&[], Vec::as_slice)
    }

    /// The distinct real cpus of the topology, ascending.
    fn distinct_cpus(&self) -> Vec<usize> {
        let mut cpus: Vec<usize> = self.order.iter().map(|&(_, cpu)| cpu).collect();
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            TopologyKind::Detected => "detected",
            TopologyKind::Synthetic => "synthetic",
            TopologyKind::Fake => "fake",
        };
        write!(
            f,
            "{kind}, {} node{}, {} core{}",
            self.nodes.len(),
            if self.nodes.len() == 1 { "" } else { "s" },
            self.cores(),
            if self.cores() == 1 { "" } else { "s" },
        )?;
        if self.oversubscribed() {
            write!(
                f,
                " on {} cpu{} (OVERSUBSCRIBED: timings are not the described machine's)",
                self.machine_cpus,
                if self.machine_cpus == 1 { "" } else { "s" }
            )?;
        }
        for node in &self.nodes {
            write!(f, "; node {}: cpus ", node.id)?;
            if node.cpus.is_empty() {
                write!(f, "none")?;
            } else {
                write_cpu_list(f, &node.cpus)?;
            }
            if let Some(bytes) = node.memory_bytes {
                write!(f, ", {:.1} GiB", bytes as f64 / (1u64 << 30) as f64)?;
            }
        }
        if let Some(caches) = self.order.first().map(|&(_, cpu)| self.caches(cpu)) {
            for c in caches.iter().filter(|c| c.level >= 2) {
                write!(
                    f,
                    "; L{} {} KiB shared by {} cpu{}",
                    c.level,
                    c.size_bytes >> 10,
                    c.shared_with.len(),
                    if c.shared_with.len() == 1 { "" } else { "s" }
                )?;
            }
        }
        Ok(())
    }
}

/// Writes cpus as sysfs does (`0-3,8,10-11`) where they ascend, else as a
/// plain list.
fn write_cpu_list(f: &mut fmt::Formatter<'_>, cpus: &[usize]) -> fmt::Result {
    let mut i = 0;
    let mut first = true;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        if !first {
            write!(f, ",")?;
        }
        first = false;
        if j > i {
            write!(f, "{}-{}", cpus[i], cpus[j])?;
        } else {
            write!(f, "{}", cpus[i])?;
        }
        i = j + 1;
    }
    Ok(())
}

fn available_parallelism() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn distinct_cpus(nodes: &[Node]) -> usize {
    let mut cpus: Vec<usize> = nodes.iter().flat_map(|n| n.cpus.iter().copied()).collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus.len()
}

/// The cpus this process may run on, ascending (`sched_getaffinity`;
/// elsewhere, or if it fails, `0..available_parallelism`).
pub fn usable_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `cpu_set_t` is plain data and zero is a valid (empty) set;
        // the kernel writes at most `size_of::<cpu_set_t>()` bytes into it;
        // CPU_ISSET reads within it for every index below CPU_SETSIZE.
        let cpus: Vec<usize> = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
                (0..libc::CPU_SETSIZE as usize)
                    .filter(|&c| libc::CPU_ISSET(c, &set))
                    .collect()
            } else {
                Vec::new()
            }
        };
        if !cpus.is_empty() {
            return cpus;
        }
    }
    (0..available_parallelism()).collect()
}

/// Parses a sysfs cpu list (`0-3,8,10-11`; empty for none) into ascending,
/// distinct cpus; `None` when malformed.
pub fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list
        .trim()
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let (lo, hi): (usize, usize) = match part.split_once('-') {
            Some((lo, hi)) => (lo.trim().parse().ok()?, hi.trim().parse().ok()?),
            None => {
                let c = part.parse().ok()?;
                (c, c)
            }
        };
        if lo > hi || hi >= MAX_CPU {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// The nodes under `dir` (`node<N>/cpulist`, `node<N>/meminfo`), by id;
/// `None` when the directory is missing or a node's cpu list is unreadable.
fn read_nodes(dir: &Path) -> Option<Vec<Node>> {
    let mut nodes = Vec::new();
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        let name = entry.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix("node"))
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        let path = entry.path();
        let cpus = parse_cpu_list(&std::fs::read_to_string(path.join("cpulist")).ok()?)?;
        let memory_bytes = std::fs::read_to_string(path.join("meminfo"))
            .ok()
            .and_then(|m| parse_mem_total(&m));
        nodes.push(Node {
            id,
            cpus,
            memory_bytes,
        });
    }
    nodes.sort_by_key(|n| n.id);
    (!nodes.is_empty()).then_some(nodes)
}

/// `MemTotal` of a node's `meminfo` (`Node 0 MemTotal:  24684096 kB`).
fn parse_mem_total(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let (_, rest) = line.split_once("MemTotal:")?;
        let mut words = rest.split_whitespace();
        let n: u64 = words.next()?.parse().ok()?;
        match words.next() {
            Some("kB") | None => n.checked_mul(1024),
            Some(_) => None,
        }
    })
}

/// A sysfs cache size (`32K`, `1024K`, `32M`, `1G`, or bytes).
fn parse_cache_size(size: &str) -> Option<u64> {
    let size = size.trim();
    let (digits, shift) = match size.as_bytes().last()? {
        b'K' => (&size[..size.len() - 1], 10),
        b'M' => (&size[..size.len() - 1], 20),
        b'G' => (&size[..size.len() - 1], 30),
        _ => (size, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

/// The data and unified caches under a cpu's `cache` directory, by level.
fn read_caches(dir: &Path) -> Vec<Cache> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut caches: Vec<Cache> = entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            if !entry.file_name().to_str()?.starts_with("index") {
                return None;
            }
            let path = entry.path();
            let read = |file: &str| std::fs::read_to_string(path.join(file)).ok();
            if read("type")?.trim() == "Instruction" {
                return None;
            }
            Some(Cache {
                level: read("level")?.trim().parse().ok()?,
                size_bytes: parse_cache_size(&read("size")?)?,
                shared_with: parse_cpu_list(&read("shared_cpu_list")?)?,
            })
        })
        .collect();
    caches.sort_by_key(|c| c.level);
    caches
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A directory tree under the system's temporary directory, removed on
    /// drop.
    struct FakeSysfs(PathBuf);

    impl FakeSysfs {
        fn new(name: &str) -> FakeSysfs {
            let dir =
                std::env::temp_dir().join(format!("stride-topology-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            FakeSysfs(dir)
        }

        fn write(&self, path: &str, content: &str) {
            let path = self.0.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }

        fn cache(&self, cpu: usize, index: usize, level: u8, kind: &str, size: &str, shared: &str) {
            let dir = format!("devices/system/cpu/cpu{cpu}/cache/index{index}");
            self.write(&format!("{dir}/level"), &format!("{level}\n"));
            self.write(&format!("{dir}/type"), &format!("{kind}\n"));
            self.write(&format!("{dir}/size"), &format!("{size}\n"));
            self.write(&format!("{dir}/shared_cpu_list"), &format!("{shared}\n"));
        }
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn cpu_lists_parse_like_sysfs_writes_them() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list("\n"), Some(vec![]));
        assert_eq!(parse_cpu_list("3,1,1-2"), Some(vec![1, 2, 3]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a-b"), None);
        assert_eq!(parse_cpu_list("0-4000000000"), None);
    }

    #[test]
    fn sizes_and_meminfo_parse() {
        assert_eq!(parse_cache_size("32K\n"), Some(32 << 10));
        assert_eq!(parse_cache_size("32M"), Some(32 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("K"), None);
        let meminfo = "Node 1 MemTotal:       24684096 kB\nNode 1 MemFree:   1 kB\n";
        assert_eq!(parse_mem_total(meminfo), Some(24_684_096 * 1024));
        assert_eq!(parse_mem_total("Node 1 MemFree: 1 kB"), None);
    }

    #[test]
    fn detect_reads_nodes_memory_and_caches_from_sysfs() {
        let sys = FakeSysfs::new("two-nodes");
        sys.write("devices/system/node/node0/cpulist", "0-1,4\n");
        sys.write(
            "devices/system/node/node0/meminfo",
            "Node 0 MemTotal:       1048576 kB\n",
        );
        sys.write("devices/system/node/node2/cpulist", "2-3\n");
        // A memory-only node: no cpus, no workers.
        sys.write("devices/system/node/node3/cpulist", "\n");
        sys.write("devices/system/node/online", "0,2-3\n");
        sys.cache(0, 0, 1, "Data", "48K", "0");
        sys.cache(0, 1, 1, "Instruction", "32K", "0");
        sys.cache(0, 2, 3, "Unified", "32M", "0-1,4");
        sys.cache(0, 3, 2, "Unified", "2048K", "0");

        let t = Topology::detect_in(&sys.0, None);
        assert_eq!(t.kind(), TopologyKind::Detected);
        let ids: Vec<usize> = t.nodes().iter().map(|n| n.id).collect();
        assert_eq!(ids, [0, 2, 3]);
        assert_eq!(t.nodes()[0].cpus, [0, 1, 4]);
        assert_eq!(t.nodes()[0].memory_bytes, Some(1 << 30));
        assert_eq!(t.nodes()[1].cpus, [2, 3]);
        assert_eq!(t.nodes()[1].memory_bytes, None);
        assert!(t.nodes()[2].cpus.is_empty());
        assert_eq!(t.cores(), 5);
        assert!(!t.oversubscribed());
        // Round-robin over the nodes with cpus: 0, 2, 1, 3, 4.
        let cpus: Vec<usize> = (0..5).map(|w| t.cpu_of_worker(w)).collect();
        assert_eq!(cpus, [0, 2, 1, 3, 4]);
        let nodes: Vec<usize> = (0..6).map(|w| t.worker_node(w)).collect();
        assert_eq!(nodes, [0, 2, 0, 2, 0, 0]);
        assert!(t.node_workers(3, 8).is_empty());
        // Caches: instruction caches dropped, sorted by level.
        let levels: Vec<(u8, u64)> = t
            .caches(0)
            .iter()
            .map(|c| (c.level, c.size_bytes))
            .collect();
        assert_eq!(levels, [(1, 48 << 10), (2, 2 << 20), (3, 32 << 20)]);
        assert_eq!(t.caches(0)[2].shared_with, [0, 1, 4]);
        assert!(t.caches(2).is_empty());
        let text = t.to_string();
        assert!(text.starts_with("detected, 3 nodes, 5 cores"), "{text}");
        assert!(text.contains("node 0: cpus 0-1,4, 1.0 GiB"), "{text}");
        assert!(text.contains("node 3: cpus none"), "{text}");
    }

    #[test]
    fn detect_keeps_only_usable_cpus() {
        let sys = FakeSysfs::new("affinity");
        sys.write("devices/system/node/node0/cpulist", "0-3\n");
        sys.write("devices/system/node/node1/cpulist", "4-7\n");
        let t = Topology::detect_in(&sys.0, Some(&[1, 5, 6]));
        assert_eq!(t.nodes()[0].cpus, [1]);
        assert_eq!(t.nodes()[1].cpus, [5, 6]);
        assert_eq!(t.cores(), 3);
    }

    #[test]
    fn detect_without_a_node_directory_is_one_node_of_the_usable_cpus() {
        let sys = FakeSysfs::new("no-numa");
        let t = Topology::detect_in(&sys.0, Some(&[0, 2, 3]));
        assert_eq!(t.nodes().len(), 1);
        assert_eq!(t.nodes()[0].id, 0);
        assert_eq!(t.nodes()[0].cpus, [0, 2, 3]);
        let t = Topology::detect_in(&sys.0, None);
        assert_eq!(t.cores(), available_parallelism());
        // A node directory whose nodes share no cpu with the usable ones
        // falls back the same way.
        sys.write("devices/system/node/node0/cpulist", "8-9\n");
        let t = Topology::detect_in(&sys.0, Some(&[1]));
        assert_eq!(t.nodes()[0].cpus, [1]);
    }

    #[test]
    fn the_machine_is_detected() {
        let t = Topology::detect();
        assert!(t.cores() >= 1);
        assert!(!t.oversubscribed());
        for w in 0..t.cores() {
            assert!(usable_cpus().contains(&t.cpu_of_worker(w)));
        }
    }

    #[test]
    fn specs_parse() {
        let parse = |s: &str| s.parse::<TopologySpec>();
        assert_eq!(parse("detect"), Ok(TopologySpec::Detect));
        assert_eq!(
            parse("nodes=4,cores-per-node=8"),
            Ok(TopologySpec::Synthetic {
                nodes: 4,
                cores_per_node: 8
            })
        );
        assert_eq!(
            parse(" cores-per-node = 1 , nodes=2 "),
            Ok(TopologySpec::Synthetic {
                nodes: 2,
                cores_per_node: 1
            })
        );
        assert_eq!(
            parse("fake:nodes=2,cores-per-node=1"),
            Ok(TopologySpec::Fake {
                nodes: 2,
                cores_per_node: 1
            })
        );
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let problem = |s: &str| match s.parse::<TopologySpec>() {
            Err(TopologyError::Spec { spec, problem }) => {
                assert_eq!(spec, s);
                problem
            }
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(problem(""), SpecProblem::Empty);
        assert_eq!(problem("fake:"), SpecProblem::Empty);
        assert_eq!(problem("nodes"), SpecProblem::NotKeyValue("nodes".into()));
        assert_eq!(
            problem("nodes=2,sockets=1"),
            SpecProblem::UnknownKey("sockets".into())
        );
        assert_eq!(
            problem("nodes=2,nodes=3,cores-per-node=1"),
            SpecProblem::Duplicate { key: "nodes" }
        );
        assert_eq!(
            problem("nodes=2"),
            SpecProblem::Missing {
                key: "cores-per-node"
            }
        );
        assert_eq!(
            problem("nodes=0,cores-per-node=1"),
            SpecProblem::NotPositive {
                key: "nodes",
                value: "0".into()
            }
        );
        assert_eq!(
            problem("nodes=2,cores-per-node=-1"),
            SpecProblem::NotPositive {
                key: "cores-per-node",
                value: "-1".into()
            }
        );
        assert!(matches!(
            problem("nodes=100000,cores-per-node=100000"),
            SpecProblem::TooLarge { .. }
        ));
        let message = Topology::synthetic("nodes=2,cores=4")
            .unwrap_err()
            .to_string();
        assert!(message.contains("unknown key \"cores\""), "{message}");
        assert!(message.contains("nodes=N,cores-per-node=M"), "{message}");
    }

    #[test]
    fn synthetic_cores_run_on_the_real_cpus_round_robin() {
        let real = usable_cpus();
        let t = Topology::synthetic("nodes=4,cores-per-node=8").unwrap();
        assert_eq!(t.kind(), TopologyKind::Synthetic);
        assert_eq!(t.nodes().len(), 4);
        assert_eq!(t.cores(), 32);
        assert_eq!(t.oversubscribed(), real.len() < 32);
        for (n, node) in t.nodes().iter().enumerate() {
            assert_eq!(node.id, n);
            for (c, &cpu) in node.cpus.iter().enumerate() {
                assert_eq!(cpu, real[(n * 8 + c) % real.len()]);
            }
        }
        let small = Topology::synthetic("nodes=1,cores-per-node=1").unwrap();
        assert!(!small.oversubscribed());
        if t.oversubscribed() {
            assert!(t.to_string().contains("OVERSUBSCRIBED"), "{t}");
        }
    }

    /// A machine of `cpus` cpus on one node, for fake topologies that need
    /// more cpus than the test machine has.
    fn machine_of(cpus: usize) -> Topology {
        let usable: Vec<usize> = (0..cpus).collect();
        Topology::detect_in(Path::new("/nonexistent/sysfs"), Some(&usable))
    }

    #[test]
    fn fake_nodes_are_disjoint_sets_of_real_cpus() {
        let machine = machine_of(8);
        let t = Topology::fake_on(&machine, 3, 2).unwrap();
        assert_eq!(t.kind(), TopologyKind::Fake);
        assert_eq!(t.cores(), 6);
        assert!(!t.oversubscribed());
        let mut all: Vec<usize> = t.nodes().iter().flat_map(|n| n.cpus.clone()).collect();
        assert_eq!(all.len(), 6);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 6, "a cpu in two fake nodes: {t:?}");
        assert!(t.nodes().iter().all(|n| n.cpus.len() == 2));
        assert_eq!(
            Topology::fake_on(&machine, 3, 3),
            Err(TopologyError::NotEnoughCpus {
                nodes: 3,
                cores_per_node: 3,
                needed: 9,
                available: 8
            })
        );
        assert!(Topology::fake_on(&machine, usize::MAX, 2).is_err());
        // On this machine: 2 × 1 where it has two cpus.
        match Topology::fake(2, 1) {
            Ok(t) => assert_ne!(t.nodes()[0].cpus, t.nodes()[1].cpus),
            Err(e) => assert!(usable_cpus().len() < 2, "{e}"),
        }
    }

    #[test]
    fn fewer_workers_than_cores_spread_over_the_nodes() {
        let machine = machine_of(8);
        let t = Topology::fake_on(&machine, 4, 2).unwrap();
        // Worker i on node i mod 4 while there are fewer than 8 workers.
        let nodes: Vec<usize> = (0..6).map(|w| t.worker_node(w)).collect();
        assert_eq!(nodes, [0, 1, 2, 3, 0, 1]);
        assert_eq!(t.node_workers(1, 6), [1, 5]);
        assert_eq!(t.node_workers(3, 6), [3]);
        assert_eq!(t.node_workers(3, 3), Vec::<usize>::new());
        // Each worker pinned to a cpu of its own node, no cpu twice.
        let mut cpus = Vec::new();
        for w in 0..8 {
            let cpu = t.cpu_of_worker(w);
            assert!(t.nodes()[t.worker_node(w)].cpus.contains(&cpu));
            cpus.push(cpu);
        }
        cpus.sort_unstable();
        cpus.dedup();
        assert_eq!(cpus.len(), 8);
        // More workers than cores wrap around.
        assert_eq!(t.worker_node(8), 0);
        assert_eq!(t.cpu_of_worker(8), t.cpu_of_worker(0));
    }
}

//! Library side of the `stride` command: built-in workloads shared by the CLI,
//! the benchmarks and the tests.

pub mod workload;

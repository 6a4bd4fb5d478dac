//! Engine-wide settings: what one `SET` changes for every session
//! (superusers only; the SQL front end checks that), their values parsed
//! and shown as PostgreSQL parses and shows its own.
//!
//! | setting                      | values                                         |
//! |------------------------------|------------------------------------------------|
//! | `stride.policy`              | a policy name ([`Policy::parse`])              |
//! | `stride.decay_lambda`        | a number in [0, 1]: stride scheduling's decay factor λ |
//! | `stride.decay_start`         | an integer ≥ 0: tasks before the decay sets in (`d_start`) |
//! | `stride.workers`             | read-only                                      |
//! | `stride.memory_limit`        | a size (`4GB`): all queries together           |
//! | `stride.allocation_limit`    | a size, or `unlimited`: the whole process's allocations |
//! | `stride.sharing_cycle`       | a time (ms): how long a batch forms at least   |
//! | `stride.sharing_max_batch`   | an integer ≥ 1: most queries in one batch      |
//! | `stride.temp_directory`      | an existing directory: where queries spill     |
//! | `stride.checkpoint_log_size` | a size: log bytes that trigger a checkpoint    |
//! | `stride.bulk_write_size`     | a size: rows of one write kept out of the log  |
//! | `temp_file_limit`            | a size (no unit: kB), -1: spill files of one query |
//!
//! `stride.policy` is a property of the machine-wide scheduler: setting it
//! in one session switches the policy every worker follows from its next
//! decision on (there is one scheduler, and its policy is what the seeds'
//! experiments compare). Setting the policy already in force changes
//! nothing: under stride scheduling its self-tuned decay parameters stay.
//! `stride.decay_lambda` and `stride.decay_start` set seed 001's decay
//! parameters of the stride policy in force (refused under any other
//! policy); self-tuning, when on, starts its next search from them and
//! replaces them with what it finds.

use std::time::Duration;

use stride_sched::Policy;

use crate::error::{EngineError, Result, SettingKind};
use crate::Engine;

impl Engine {
    /// Applies `SET name = value` where `name` (lower case) is one of the
    /// engine-wide settings above; `Ok(false)`: it is none of them.
    pub fn set_setting(&self, name: &str, value: &str) -> Result<bool> {
        match name {
            "stride.policy" => {
                let policy = parse_policy(value)?;
                // Naming the policy in force keeps it as it is: stride
                // scheduling keeps the decay parameters self-tuning found
                // (a client that sets its policy on every connection must
                // not reset them to the untuned start values).
                if self.scheduler().policy().name() != policy.name() {
                    self.scheduler().set_policy(policy)
                }
            }
            "stride.decay_lambda" | "stride.decay_start" => {
                let mut params = self.decay_in_force(name)?;
                if name == "stride.decay_lambda" {
                    params.lambda = decay_lambda(value)?;
                } else {
                    params.d_start = decay_start(value)?;
                }
                self.scheduler().set_policy(Policy::Stride(params));
            }
            "stride.memory_limit" => self.set_memory_limit(memory_size(name, value)?),
            // One allocator per process: the limit is the process's, shared
            // by every engine in it.
            "stride.allocation_limit" => stride_exec::alloc_guard::set_limit(
                if value.trim().eq_ignore_ascii_case("unlimited") {
                    usize::MAX
                } else {
                    memory_size(name, value)?
                },
            ),
            "stride.sharing_cycle" => {
                let cycle = sharing_cycle(value)?;
                let sharing = self.sharing();
                sharing.set_config(stride_exec::SharingConfig {
                    cycle,
                    ..sharing.config()
                });
            }
            "stride.sharing_max_batch" => {
                let max_batch = max_batch(value)?;
                let sharing = self.sharing();
                sharing.set_config(stride_exec::SharingConfig {
                    max_batch,
                    ..sharing.config()
                });
            }
            "stride.temp_directory" => self.set_temp_directory(std::path::Path::new(value))?,
            "stride.checkpoint_log_size" => {
                let bytes = memory_size(name, value)?;
                match self.data_dir() {
                    Some(dir) => dir.set_checkpoint_log_bytes(bytes as u64),
                    None => return Err(no_data_dir(name)),
                }
            }
            "stride.bulk_write_size" => {
                let bytes = memory_size(name, value)?;
                match self.data_dir() {
                    Some(dir) => dir.set_bulk_write_bytes(bytes as u64),
                    None => return Err(no_data_dir(name)),
                }
            }
            "temp_file_limit" => self.spill_area().set_file_limit(temp_file_limit(value)?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The value of engine-wide setting `name` as `SHOW` gives it; `None`:
    /// not one of them.
    pub fn show_setting(&self, name: &str) -> Option<String> {
        Some(match name {
            "stride.policy" => self.scheduler().policy().name().to_string(),
            "stride.workers" => self.scheduler().config().workers.to_string(),
            "stride.decay_lambda" | "stride.decay_start" => {
                match self.scheduler().policy().decay() {
                    Some(d) if name == "stride.decay_lambda" => d.lambda.to_string(),
                    Some(d) => d.d_start.to_string(),
                    None => "none (stride.policy is not stride)".to_string(),
                }
            }
            "stride.memory_limit" => show_size(self.memory().limit()),
            "stride.allocation_limit" => match stride_exec::alloc_guard::limit() {
                usize::MAX => "unlimited".to_string(),
                bytes => show_size(bytes),
            },
            "stride.temp_directory" => self.temp_directory(),
            // Milliseconds, as `statement_timeout`.
            "stride.sharing_cycle" => {
                format!("{}ms", self.sharing().config().cycle.as_millis())
            }
            "stride.sharing_max_batch" => self.sharing().config().max_batch.to_string(),
            "stride.checkpoint_log_size" => self.data_dir().map_or_else(
                || "none (no data directory)".to_string(),
                |d| show_size(d.checkpoint_log_bytes() as usize),
            ),
            "stride.bulk_write_size" => self.data_dir().map_or_else(
                || "none (no data directory)".to_string(),
                |d| show_size(d.bulk_write_bytes() as usize),
            ),
            "temp_file_limit" => show_temp_file_limit(self.spill_area().file_limit()),
            _ => return None,
        })
    }

    /// The engine-wide settings `SHOW ALL` lists, with their values
    /// (`stride.checkpoint_log_size` and `stride.bulk_write_size` are shown
    /// by name only).
    pub fn all_settings(&self) -> Vec<(String, String)> {
        [
            "stride.policy",
            "stride.decay_lambda",
            "stride.decay_start",
            "stride.workers",
            "stride.memory_limit",
            "stride.allocation_limit",
            "stride.temp_directory",
            "stride.sharing_cycle",
            "stride.sharing_max_batch",
            "temp_file_limit",
        ]
        .into_iter()
        .filter_map(|name| Some((name.to_string(), self.show_setting(name)?)))
        .collect()
    }
}

impl Engine {
    /// The decay parameters of the stride policy in force, for a `SET` of
    /// `name`; refused under any other policy.
    fn decay_in_force(&self, name: &str) -> Result<stride_sched::DecayParams> {
        self.scheduler().policy().decay().cloned().ok_or_else(|| {
            EngineError::setting(
                SettingKind::ReadOnly,
                format!(
                    "{name} applies to stride scheduling; stride.policy is {}",
                    self.scheduler().policy().name()
                ),
            )
        })
    }
}

/// Parses `stride.decay_lambda`: a decay factor in [0, 1].
pub fn decay_lambda(value: &str) -> Result<f64> {
    match value.trim().parse::<f64>() {
        Ok(l) if (0.0..=1.0).contains(&l) => Ok(l),
        _ => Err(EngineError::setting(
            SettingKind::InvalidValue,
            format!(
                "invalid value for parameter \"stride.decay_lambda\": \"{value}\" (a number from 0 to 1)"
            ),
        )),
    }
}

/// Parses `stride.decay_start`: the tasks a group runs before its
/// priority decays.
pub fn decay_start(value: &str) -> Result<u32> {
    value.trim().parse::<u32>().map_err(|_| {
        EngineError::setting(
            SettingKind::InvalidValue,
            format!(
                "invalid value for parameter \"stride.decay_start\": \"{value}\" (an integer of at least 0)"
            ),
        )
    })
}

/// A data directory setting set without a data directory.
fn no_data_dir(name: &str) -> EngineError {
    EngineError::setting(
        SettingKind::ReadOnly,
        format!("{name} needs a data directory (the process runs --in-memory)"),
    )
}

/// A PostgreSQL time setting in milliseconds: a number with an optional
/// unit (`us`, `ms` — the default —, `s`, `min`, `h`, `d`), rounded to whole
/// milliseconds as PostgreSQL does; negative values are refused.
pub fn duration_ms(value: &str) -> Option<u64> {
    let (number, unit) = stride_exec::memory::split_quantity(value)?;
    let factor = match unit {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    let ms = (number * factor).round();
    (ms.is_finite() && (0.0..=i32::MAX as f64).contains(&ms)).then_some(ms as u64)
}

/// Parses a memory setting's value ([`stride_exec::memory::parse_size`]);
/// zero is refused (no query could run).
pub fn memory_size(name: &str, value: &str) -> Result<usize> {
    match stride_exec::memory::parse_size(value) {
        Some(bytes) if bytes > 0 => Ok(bytes),
        _ => Err(EngineError::setting(
            SettingKind::InvalidValue,
            format!(
                "invalid value for parameter \"{name}\": \"{value}\" (a size such as 512MB or 4GB)"
            ),
        )),
    }
}

/// Parses `temp_file_limit` as PostgreSQL does: a size (kilobytes without
/// a unit) or -1 for none.
pub fn temp_file_limit(value: &str) -> Result<Option<u64>> {
    if value.trim() == "-1" {
        return Ok(None);
    }
    match stride_exec::memory::parse_size(value) {
        Some(bytes) => Ok(Some(bytes as u64)),
        None => Err(EngineError::setting(
            SettingKind::InvalidValue,
            format!(
                "invalid value for parameter \"temp_file_limit\": \"{value}\" (a size such as 10GB, or -1)"
            ),
        )),
    }
}

/// `temp_file_limit` as SHOW gives it.
pub fn show_temp_file_limit(limit: Option<u64>) -> String {
    limit.map_or_else(|| "-1".to_string(), |b| show_size(b as usize))
}

/// A byte count as PostgreSQL shows a memory setting: in the largest unit
/// that divides it (`4GB`, `1536MB`, `100B`).
pub fn show_size(bytes: usize) -> String {
    for (shift, unit) in [(40, "TB"), (30, "GB"), (20, "MB"), (10, "kB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

/// Parses `stride.sharing_max_batch`: at least one query per batch.
pub fn max_batch(value: &str) -> Result<usize> {
    match value.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(EngineError::setting(
            SettingKind::InvalidValue,
            format!(
                "invalid value for parameter \"stride.sharing_max_batch\": \"{value}\" (an integer of at least 1)"
            ),
        )),
    }
}

/// Parses `stride.sharing_cycle` (a time, milliseconds without a unit).
pub fn sharing_cycle(value: &str) -> Result<Duration> {
    duration_ms(value).map(Duration::from_millis).ok_or_else(|| {
        EngineError::setting(
            SettingKind::InvalidValue,
            format!(
                "invalid value for parameter \"stride.sharing_cycle\": \"{value}\" (a time such as 0, 5ms or 1s)"
            ),
        )
    })
}

/// Parses a policy name for `SET stride.policy`.
pub fn parse_policy(value: &str) -> Result<Policy> {
    Policy::parse(value).ok_or_else(|| {
        EngineError::setting(
            SettingKind::InvalidValue,
            format!("unknown policy \"{value}\" (try fifo, fair, stride, stride-queue, lottery, srpt, if-srpt or threshold)"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_show_in_the_largest_dividing_unit() {
        assert_eq!(show_size(1536 << 20), "1536MB");
        assert_eq!(show_size(4 << 30), "4GB");
        assert_eq!(show_size(1000), "1000B");
        assert!(memory_size("stride.memory_limit", "0").is_err());
        assert_eq!(memory_size("stride.memory_limit", "1GB").unwrap(), 1 << 30);
        assert_eq!(temp_file_limit("-1").unwrap(), None);
        assert_eq!(show_temp_file_limit(Some(10 << 30)), "10GB");
    }

    #[test]
    fn sharing_values_are_validated() {
        assert_eq!(max_batch("64").unwrap(), 64);
        for bad in ["0", "-3", "many"] {
            assert!(max_batch(bad).is_err(), "{bad}");
        }
        assert_eq!(sharing_cycle("5ms").unwrap().as_millis(), 5);
        assert_eq!(sharing_cycle("1s").unwrap().as_millis(), 1000);
        assert!(sharing_cycle("-1").is_err());
    }

    #[test]
    fn times_take_postgresql_units() {
        for (given, ms) in [
            ("60s", 60_000),
            ("500", 500),
            ("1min", 60_000),
            ("250ms", 250),
            ("1500us", 2),
            ("1h", 3_600_000),
            ("0", 0),
        ] {
            assert_eq!(duration_ms(given), Some(ms), "{given}");
        }
        for bad in ["-1", "10 parsecs", "abc", ""] {
            assert_eq!(duration_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn engine_wide_settings_apply_to_the_runtime() {
        let engine = Engine::new(crate::EngineConfig {
            scheduler: stride_sched::SchedulerConfig {
                workers: 1,
                pin_workers: false,
                ..Default::default()
            },
            ..Default::default()
        });
        assert!(engine.set_setting("stride.policy", "fair").unwrap());
        assert_eq!(engine.show_setting("stride.policy").unwrap(), "fair");
        // Naming stride scheduling again keeps the parameters in force (as
        // self-tuning leaves them); another policy replaces them.
        assert!(engine.set_setting("stride.policy", "stride").unwrap());
        let tuned = stride_sched::DecayParams {
            lambda: 0.05,
            d_start: 1,
            ..Default::default()
        };
        engine.scheduler().set_policy(Policy::Stride(tuned.clone()));
        assert!(engine.set_setting("stride.policy", "stride").unwrap());
        assert_eq!(engine.scheduler().policy(), Policy::Stride(tuned));
        assert!(engine.set_setting("stride.policy", "stride-queue").unwrap());
        assert_eq!(
            engine.scheduler().policy().decay().map(|d| d.lambda),
            Some(stride_sched::DecayParams::default().lambda)
        );
        // The decay parameters of the stride policy in force, one at a
        // time; refused under another policy and for values out of range.
        assert!(engine.set_setting("stride.decay_lambda", "0.25").unwrap());
        assert!(engine.set_setting("stride.decay_start", "7").unwrap());
        let decay = engine.scheduler().policy().decay().cloned().unwrap();
        assert_eq!((decay.lambda, decay.d_start), (0.25, 7));
        assert_eq!(engine.scheduler().policy().name(), "stride-queue");
        assert_eq!(engine.show_setting("stride.decay_lambda").unwrap(), "0.25");
        assert_eq!(engine.show_setting("stride.decay_start").unwrap(), "7");
        for (name, bad) in [
            ("stride.decay_lambda", "1.5"),
            ("stride.decay_lambda", "fast"),
            ("stride.decay_start", "-1"),
        ] {
            let e = engine.set_setting(name, bad).unwrap_err();
            assert!(
                matches!(
                    e,
                    EngineError::Setting {
                        kind: SettingKind::InvalidValue,
                        ..
                    }
                ),
                "{name} = {bad}"
            );
        }
        assert_eq!(engine.scheduler().policy().decay(), Some(&decay));
        assert!(engine.set_setting("stride.policy", "fair").unwrap());
        let e = engine
            .set_setting("stride.decay_lambda", "0.5")
            .unwrap_err();
        assert!(matches!(
            e,
            EngineError::Setting {
                kind: SettingKind::ReadOnly,
                ..
            }
        ));
        assert_eq!(engine.scheduler().policy(), Policy::Fair);
        assert!(engine.set_setting("stride.memory_limit", "3GB").unwrap());
        assert_eq!(engine.memory().limit(), 3 << 30);
        assert!(engine.set_setting("stride.sharing_cycle", "1s").unwrap());
        assert_eq!(
            engine.show_setting("stride.sharing_cycle").unwrap(),
            "1000ms"
        );
        assert!(engine.set_setting("temp_file_limit", "-1").unwrap());
        assert_eq!(engine.show_setting("temp_file_limit").unwrap(), "-1");
        assert_eq!(engine.show_setting("stride.workers").unwrap(), "1");
        // Refused with a typed kind, the value unchanged.
        let e = engine
            .set_setting("stride.memory_limit", "lots")
            .unwrap_err();
        assert!(matches!(
            e,
            EngineError::Setting {
                kind: SettingKind::InvalidValue,
                ..
            }
        ));
        assert_eq!(engine.memory().limit(), 3 << 30);
        let e = engine
            .set_setting("stride.checkpoint_log_size", "1GB")
            .unwrap_err();
        assert!(matches!(
            e,
            EngineError::Setting {
                kind: SettingKind::ReadOnly,
                ..
            }
        ));
        let e = engine
            .set_setting("stride.bulk_write_size", "64MB")
            .unwrap_err();
        assert!(
            matches!(e, EngineError::Setting { kind: SettingKind::ReadOnly, ref message } if message.contains("--in-memory")),
            "{e}"
        );
        assert_eq!(
            engine.show_setting("stride.bulk_write_size").unwrap(),
            "none (no data directory)"
        );
        // Not the engine's: the session's to handle.
        assert!(!engine.set_setting("statement_timeout", "1s").unwrap());
        assert_eq!(engine.show_setting("statement_timeout"), None);
        assert_eq!(engine.all_settings().len(), 10);
        // The allocation limit is the process's (one allocator): shown and
        // refused here without moving it, since tests of this binary share it.
        let limit = engine.show_setting("stride.allocation_limit").unwrap();
        assert!(engine
            .set_setting("stride.allocation_limit", "lots")
            .is_err());
        assert_eq!(
            engine.show_setting("stride.allocation_limit").unwrap(),
            limit
        );
    }

    #[test]
    fn policies_by_name() {
        assert!(parse_policy("fifo").is_ok());
        let e = parse_policy("nope").unwrap_err();
        assert!(matches!(
            e,
            EngineError::Setting {
                kind: SettingKind::InvalidValue,
                ..
            }
        ));
    }
}

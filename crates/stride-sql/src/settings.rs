//! Session settings: Stride's own (`stride.*`) and the PostgreSQL ones that
//! clients set or query when they connect. The engine-wide ones are the
//! engine's (`stride_engine::settings`, which also parses sizes and
//! times); `SET` hands them there.
//!
//! | setting                      | scope   | values                                  |
//! |------------------------------|---------|-----------------------------------------|
//! | `stride.policy`              | engine  | a policy name (`Policy::parse`)          |
//! | `stride.user_priority`       | session | a number > 0 (scales p0 and p_min)       |
//! | `stride.static_priority`     | session | on / off: this session's queries never decay |
//! | `stride.decay_lambda`        | engine  | λ in [0, 1] of the stride policy in force |
//! | `stride.decay_start`         | engine  | `d_start` (tasks) of the stride policy in force |
//! | `stride.workers`             | engine  | read-only                               |
//! | `stride.memory_limit`        | engine  | a size (`4GB`): all queries together     |
//! | `stride.allocation_limit`    | engine  | a size, `unlimited`: the process's allocations |
//! | `stride.query_memory_limit`  | session | a size: one query of this session        |
//! | `stride.placement`           | session | first-touch, interleave, rr, pp, pax, default |
//! | `stride.affinity`            | session | os, target, bound, auto, default        |
//! | `stride.sharing`             | session | off, scans, default: share scans with concurrent queries |
//! | `stride.sharing_cycle`       | engine  | a time (ms): how long a batch forms at least |
//! | `stride.sharing_max_batch`   | engine  | an integer ≥ 1: most queries in one batch |
//! | `stride.temp_directory`      | engine  | an existing directory: where queries spill |
//! | `temp_file_limit`            | engine  | a size (no unit: kB), -1: spill files of one query |
//! | `stride.plan_cache_size`     | engine  | entries of the plan cache (default 512), 0: off |
//! | `search_path`                | session | an existing schema                      |
//! | PostgreSQL client settings   | session | see [`PG_SETTINGS`]                     |
//!
//! `stride.policy` is a property of the machine-wide scheduler: setting it in
//! one session switches the policy every worker follows from its next
//! decision on (there is one scheduler, and its policy is what the seeds'
//! experiments compare). Unknown settings are an error, not silently kept.

use std::collections::BTreeMap;

pub use stride_engine::settings::{duration_ms, memory_size, show_size};

use crate::error::{Result, SettingKind, SqlError};

/// The PostgreSQL version Stride's protocol and catalog answers follow.
pub const SERVER_VERSION: &str = "16.0";

/// PostgreSQL settings a client may read (and, where `settable`, write),
/// with their values. Values other than the listed ones are rejected where
/// Stride cannot honour them (e.g. a client encoding other than UTF8).
pub const PG_SETTINGS: &[(&str, &str, bool)] = &[
    ("server_version", SERVER_VERSION, false),
    ("server_version_num", "160000", false),
    ("server_encoding", "UTF8", false),
    ("client_encoding", "UTF8", true),
    ("datestyle", "ISO, MDY", true),
    ("timezone", "UTC", true),
    ("intervalstyle", "postgres", true),
    ("integer_datetimes", "on", false),
    ("standard_conforming_strings", "on", false),
    ("application_name", "", true),
    ("extra_float_digits", "1", true),
    ("transaction_isolation", "repeatable read", false),
    ("default_transaction_read_only", "off", true),
    ("is_superuser", "off", false),
    ("max_identifier_length", "63", false),
    ("statement_timeout", "0", true),
    ("lc_messages", "C", false),
];

/// The per-session values.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    /// Scales p0 and p_min of this session's queries (seed 001 §3.2).
    pub user_priority: f64,
    /// This session's queries keep their initial priority.
    pub static_priority: bool,
    /// Bytes one query of this session may hold; `None`: the engine's default.
    pub query_memory_limit: Option<usize>,
    /// How this session's scans place tables over memory nodes; `None`:
    /// the engine's default (`--placement`).
    pub placement: Option<stride_exec::placement::Placement>,
    /// How this session's scans treat that placement; `None`: the engine's
    /// default (`--affinity`).
    pub affinity: Option<stride_exec::placement::Affinity>,
    /// Whether this session's queries share scans; `None`: the engine's
    /// default (`--sharing`).
    pub sharing: Option<stride_exec::SharingMode>,
    /// PostgreSQL settings, lower-case names; shared until a `SET`
    /// changes one, so that copying the settings (each statement's
    /// catalog-function context takes a copy) allocates nothing.
    pg: std::sync::Arc<BTreeMap<String, String>>,
}

impl Default for SessionSettings {
    fn default() -> Self {
        SessionSettings {
            user_priority: 1.0,
            static_priority: false,
            query_memory_limit: None,
            placement: None,
            affinity: None,
            sharing: None,
            pg: std::sync::Arc::new(
                PG_SETTINGS
                    .iter()
                    .map(|(k, v, _)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
        }
    }
}

/// A session value that may be `default` (the engine's), or else a name
/// `T` parses.
fn parse_default_or<T>(name: &str, value: &str) -> Result<Option<T>>
where
    T: std::str::FromStr<Err = stride_exec::placement::UnknownName>,
{
    if value.eq_ignore_ascii_case("default") {
        return Ok(None);
    }
    value.parse().map(Some).map_err(|e| {
        SqlError::setting(
            SettingKind::InvalidValue,
            format!("invalid value for parameter \"{name}\": {e}"),
        )
    })
}

fn show_default_or<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "default".to_string(), |v| v.to_string())
}

/// Parses `on/off/true/false/1/0`.
fn parse_bool(name: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => Err(SqlError::setting(
            SettingKind::InvalidValue,
            format!("parameter \"{name}\" requires a Boolean value, got \"{value}\""),
        )),
    }
}

impl SessionSettings {
    /// Applies a session-scoped setting. Engine-scoped ones (`stride.policy`)
    /// are handled by the session; `name` is lower case.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        match name {
            "stride.user_priority" => {
                let p: f64 = value.parse().map_err(|_| {
                    SqlError::setting(
                        SettingKind::InvalidValue,
                        format!("stride.user_priority must be a number, got \"{value}\""),
                    )
                })?;
                if !(p.is_finite() && p > 0.0 && p <= 1e6) {
                    return Err(SqlError::setting(
                        SettingKind::InvalidValue,
                        format!("stride.user_priority must be in (0, 1e6], got {value}"),
                    ));
                }
                self.user_priority = p;
                Ok(())
            }
            "stride.static_priority" => {
                self.static_priority = parse_bool(name, value)?;
                Ok(())
            }
            "stride.query_memory_limit" => {
                self.query_memory_limit = if value.eq_ignore_ascii_case("default") {
                    None
                } else {
                    Some(memory_size(name, value)?)
                };
                Ok(())
            }
            "stride.placement" => {
                self.placement = parse_default_or(name, value)?;
                Ok(())
            }
            "stride.affinity" => {
                self.affinity = parse_default_or(name, value)?;
                Ok(())
            }
            "stride.sharing" => {
                self.sharing =
                    if value.eq_ignore_ascii_case("default") {
                        None
                    } else {
                        Some(value.parse().map_err(
                            |e: stride_exec::shared::UnknownSharingMode| {
                                SqlError::setting(
                                    SettingKind::InvalidValue,
                                    format!("invalid value for parameter \"{name}\": {e}"),
                                )
                            },
                        )?)
                    };
                Ok(())
            }
            "stride.workers" => Err(SqlError::setting(
                SettingKind::ReadOnly,
                "stride.workers is read-only (start the server with --workers)",
            )),
            _ => {
                let Some((_, _, settable)) = PG_SETTINGS.iter().find(|(k, _, _)| *k == name) else {
                    return Err(SqlError::setting(
                        SettingKind::Unrecognized,
                        format!("unrecognized configuration parameter \"{name}\""),
                    ));
                };
                if !settable {
                    return Err(SqlError::setting(
                        SettingKind::ReadOnly,
                        format!("parameter \"{name}\" cannot be changed"),
                    ));
                }
                let accepted = match name {
                    "client_encoding" => {
                        let v = value.to_ascii_uppercase().replace(['-', '_'], "");
                        (v == "UTF8" || v == "UNICODE").then(|| "UTF8".to_string())
                    }
                    "timezone" => matches!(
                        value.to_ascii_uppercase().as_str(),
                        "UTC" | "ETC/UTC" | "GMT" | "Z" | "UCT"
                    )
                    .then(|| "UTC".to_string()),
                    "datestyle" => value
                        .to_ascii_uppercase()
                        .contains("ISO")
                        .then(|| "ISO, MDY".to_string()),
                    "extra_float_digits" => value.parse::<i64>().ok().map(|_| value.to_string()),
                    "statement_timeout" => duration_ms(value).map(|ms| ms.to_string()),
                    _ => Some(value.to_string()),
                };
                match accepted {
                    Some(v) => {
                        std::sync::Arc::make_mut(&mut self.pg).insert(name.to_string(), v);
                        Ok(())
                    }
                    None => Err(SqlError::setting(
                        SettingKind::InvalidValue,
                        format!(
                            "invalid value for parameter \"{name}\": \"{value}\" (Stride supports only {})",
                            self.pg.get(name).map(String::as_str).unwrap_or("the default")
                        ),
                    )),
                }
            }
        }
    }

    /// The value of a session-scoped setting (`None`: not one of them).
    pub fn get(&self, name: &str) -> Option<String> {
        match name {
            "stride.user_priority" => Some(self.user_priority.to_string()),
            "stride.static_priority" => {
                Some(if self.static_priority { "on" } else { "off" }.to_string())
            }
            // The engine's default stands where the session set none.
            "stride.query_memory_limit" => Some(
                self.query_memory_limit
                    .map_or_else(|| "default".to_string(), show_size),
            ),
            "stride.placement" => Some(show_default_or(self.placement)),
            "stride.affinity" => Some(show_default_or(self.affinity)),
            "stride.sharing" => Some(show_default_or(self.sharing)),
            _ => self.pg.get(name).cloned(),
        }
    }

    /// Every session-scoped setting (for `SHOW ALL`).
    pub fn all(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .pg
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.push((
            "stride.user_priority".into(),
            self.user_priority.to_string(),
        ));
        out.push((
            "stride.static_priority".into(),
            if self.static_priority { "on" } else { "off" }.into(),
        ));
        out.push(("stride.placement".into(), show_default_or(self.placement)));
        out.push(("stride.affinity".into(), show_default_or(self.affinity)));
        out.push(("stride.sharing".into(), show_default_or(self.sharing)));
        out.sort();
        out
    }
}

/// Whether `SET name` changes only the session that runs it: `search_path`
/// and every setting [`SessionSettings`] holds (Stride's per-session ones,
/// the PostgreSQL client settings). Every other setting counts as
/// engine-wide — it changes every session — and only superusers may set it;
/// an engine-wide setting added later is covered without being listed.
pub fn is_session_scoped(settings: &SessionSettings, name: &str) -> bool {
    matches!(name, "search_path" | "schema" | "stride.workers") || settings.get(name).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_priority_is_validated() {
        let mut s = SessionSettings::default();
        s.set("stride.user_priority", "2.5").unwrap();
        assert_eq!(s.user_priority, 2.5);
        for bad in ["0", "-1", "abc", "inf", "NaN"] {
            assert!(s.set("stride.user_priority", bad).is_err(), "{bad}");
        }
        assert_eq!(s.user_priority, 2.5);
    }

    #[test]
    fn pg_settings_accept_what_stride_honours_only() {
        let mut s = SessionSettings::default();
        s.set("client_encoding", "utf-8").unwrap();
        assert_eq!(s.get("client_encoding").unwrap(), "UTF8");
        assert!(s.set("client_encoding", "LATIN1").is_err());
        s.set("application_name", "psql").unwrap();
        assert_eq!(s.get("application_name").unwrap(), "psql");
        assert!(s.set("server_version", "9.0").is_err());
        assert!(s.set("no_such_thing", "1").is_err());
        assert!(s.set("stride.workers", "4").is_err());
    }

    #[test]
    fn memory_settings_take_postgresql_sizes() {
        let mut s = SessionSettings::default();
        assert_eq!(s.get("stride.query_memory_limit").unwrap(), "default");
        s.set("stride.query_memory_limit", "1GB").unwrap();
        assert_eq!(s.query_memory_limit, Some(1 << 30));
        assert_eq!(s.get("stride.query_memory_limit").unwrap(), "1GB");
        for bad in ["0", "-1MB", "lots"] {
            assert!(s.set("stride.query_memory_limit", bad).is_err(), "{bad}");
        }
        s.set("stride.query_memory_limit", "DEFAULT").unwrap();
        assert_eq!(s.query_memory_limit, None);
        assert_eq!(show_size(1536 << 20), "1536MB");
        assert_eq!(show_size(4 << 30), "4GB");
        assert_eq!(show_size(1000), "1000B");
    }

    #[test]
    fn sharing_settings_are_validated() {
        let mut s = SessionSettings::default();
        assert_eq!(s.get("stride.sharing").unwrap(), "default");
        s.set("stride.sharing", "SCANS").unwrap();
        assert_eq!(s.sharing, Some(stride_exec::SharingMode::Scans));
        assert_eq!(s.get("stride.sharing").unwrap(), "scans");
        assert!(s.set("stride.sharing", "batches").is_err());
        assert_eq!(s.sharing, Some(stride_exec::SharingMode::Scans));
        s.set("stride.sharing", "default").unwrap();
        assert_eq!(s.sharing, None);
    }

    #[test]
    fn statement_timeout_takes_units() {
        let mut s = SessionSettings::default();
        for (given, ms) in [
            ("60s", "60000"),
            ("500", "500"),
            ("1min", "60000"),
            ("250ms", "250"),
            ("0", "0"),
        ] {
            s.set("statement_timeout", given).unwrap();
            assert_eq!(s.get("statement_timeout").unwrap(), ms, "{given}");
        }
        for bad in ["-1", "10 parsecs", "abc", ""] {
            assert!(s.set("statement_timeout", bad).is_err(), "{bad}");
        }
    }
}

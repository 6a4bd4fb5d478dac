//! `SET` and `SHOW` (transaction blocks are in `txn`).

use std::sync::Arc;
use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use stride_exec::QueryStats;

use super::{command, QueryOutput, Session, StatementOutput};
use crate::error::{Result, SettingKind, SqlError};

impl Session {
    pub(super) fn set(&mut self, variable: &str, value: &str) -> Result<StatementOutput> {
        let value = value.trim().trim_matches('\'').trim_matches('"');
        // Engine-wide settings change every session: superusers only. Fail
        // closed: whatever is not known to be session-scoped counts as
        // engine-wide.
        if !crate::settings::is_session_scoped(&self.settings, variable) {
            self.engine.roles.require_superuser(self.role, || {
                format!("permission denied to set parameter \"{variable}\"")
            })?;
        }
        match variable {
            "search_path" | "schema" => {
                let first = value.split(',').next().unwrap_or("").trim();
                self.set_default_schema(&first.to_lowercase())?;
            }
            "stride.policy" => {
                let policy = crate::settings::parse_policy(value)?;
                self.engine.scheduler.set_policy(policy);
            }
            "stride.memory_limit" => {
                let bytes = crate::settings::memory_size(variable, value)?;
                self.engine.set_memory_limit(bytes);
            }
            "stride.sharing_cycle" => {
                let cycle = crate::settings::sharing_cycle(value)?;
                let sharing = self.engine.sharing();
                sharing.set_config(stride_exec::SharingConfig {
                    cycle,
                    ..sharing.config()
                });
            }
            "stride.sharing_max_batch" => {
                let max_batch = crate::settings::max_batch(value)?;
                let sharing = self.engine.sharing();
                sharing.set_config(stride_exec::SharingConfig {
                    max_batch,
                    ..sharing.config()
                });
            }
            "stride.temp_directory" => {
                self.engine
                    .set_temp_directory(std::path::Path::new(value))?;
            }
            "stride.plan_cache_size" => {
                let entries = if value.eq_ignore_ascii_case("default") {
                    super::DEFAULT_PLAN_CACHE_SIZE
                } else {
                    value.parse::<usize>().map_err(|_| {
                        SqlError::setting(
                            SettingKind::InvalidValue,
                            format!(
                                "invalid value for parameter \"{variable}\": \"{value}\" (a number of entries, 0: off)"
                            ),
                        )
                    })?
                };
                self.engine.plan_cache().set_capacity(entries);
            }
            "stride.checkpoint_log_size" => {
                let bytes = crate::settings::memory_size(variable, value)?;
                match self.engine.data_dir() {
                    Some(dir) => dir.set_checkpoint_log_bytes(bytes as u64),
                    None => return Err(SqlError::setting(
                        SettingKind::ReadOnly,
                        "stride.checkpoint_log_size needs a data directory (stride --data-dir DIR)",
                    )),
                }
            }
            "temp_file_limit" => {
                let limit = crate::settings::temp_file_limit(value)?;
                self.engine.spill_area().set_file_limit(limit);
            }
            "stride.query_memory_limit" => {
                // A session may lower its share; only a superuser may take
                // more than the engine's default.
                let default = self.engine.query_memory_limit();
                if !value.eq_ignore_ascii_case("default")
                    && crate::settings::memory_size(variable, value)? > default
                {
                    self.engine.roles.require_superuser(self.role, || {
                        format!(
                            "permission denied to set parameter \"{variable}\" above {}",
                            crate::settings::show_size(default)
                        )
                    })?;
                }
                self.settings.set(variable, value)?;
            }
            other => self.settings.set(other, value)?,
        }
        Ok(command("SET"))
    }

    pub(super) fn show(&self, variable: &str) -> Result<StatementOutput> {
        let rows: Vec<(String, String)> = match variable {
            "all" => {
                let mut all = self.settings.all();
                all.retain(|(name, _)| name != "is_superuser");
                all.push((
                    "is_superuser".into(),
                    if self.is_superuser() { "on" } else { "off" }.into(),
                ));
                all.push(("search_path".into(), self.default_schema.clone()));
                all.push((
                    "stride.policy".into(),
                    self.engine.scheduler.policy().name().into(),
                ));
                all.push((
                    "stride.workers".into(),
                    self.engine.scheduler.config().workers.to_string(),
                ));
                all.push((
                    "stride.memory_limit".into(),
                    crate::settings::show_size(self.engine.memory.limit()),
                ));
                all.push((
                    "stride.query_memory_limit".into(),
                    crate::settings::show_size(self.query_memory_limit()),
                ));
                all.push(("stride.temp_directory".into(), self.engine.temp_directory()));
                all.push(("stride.sharing_cycle".into(), self.sharing_cycle()));
                all.push(("stride.sharing_max_batch".into(), self.sharing_max_batch()));
                all.push((
                    "stride.plan_cache_size".into(),
                    self.engine.plan_cache().capacity().to_string(),
                ));
                all.push((
                    "temp_file_limit".into(),
                    crate::settings::show_temp_file_limit(self.engine.spill_area().file_limit()),
                ));
                all.sort();
                all
            }
            "stride.memory_limit" => vec![(
                variable.into(),
                crate::settings::show_size(self.engine.memory.limit()),
            )],
            "stride.query_memory_limit" => vec![(
                variable.into(),
                crate::settings::show_size(self.query_memory_limit()),
            )],
            "stride.temp_directory" => vec![(variable.into(), self.engine.temp_directory())],
            "stride.plan_cache_size" => vec![(
                variable.into(),
                self.engine.plan_cache().capacity().to_string(),
            )],
            "stride.sharing_cycle" => vec![(variable.into(), self.sharing_cycle())],
            "stride.sharing_max_batch" => vec![(variable.into(), self.sharing_max_batch())],
            "stride.checkpoint_log_size" => vec![(
                variable.into(),
                self.engine.data_dir().map_or_else(
                    || "none (no data directory)".to_string(),
                    |d| crate::settings::show_size(d.checkpoint_log_bytes() as usize),
                ),
            )],
            "temp_file_limit" => vec![(
                variable.into(),
                crate::settings::show_temp_file_limit(self.engine.spill_area().file_limit()),
            )],
            "search_path" | "schema" => vec![(variable.into(), self.default_schema.clone())],
            "is_superuser" => vec![(
                variable.into(),
                if self.is_superuser() { "on" } else { "off" }.into(),
            )],
            "session_authorization" => vec![(variable.into(), self.current_user())],
            "stride.workers" => vec![(
                variable.into(),
                self.engine.scheduler.config().workers.to_string(),
            )],
            "stride.policy" => vec![(
                variable.into(),
                self.engine.scheduler.policy().name().to_string(),
            )],
            other => match self.settings.get(other) {
                Some(v) => vec![(variable.into(), v)],
                None => {
                    return Err(SqlError::setting(
                        SettingKind::Unrecognized,
                        format!("unrecognized configuration parameter \"{other}\""),
                    ))
                }
            },
        };
        let schema = show_schema(variable);
        let columns: Vec<arrow::array::ArrayRef> = if variable == "all" {
            vec![
                Arc::new(arrow::array::StringArray::from_iter_values(
                    rows.iter().map(|r| r.0.as_str()),
                )),
                Arc::new(arrow::array::StringArray::from_iter_values(
                    rows.iter().map(|r| r.1.as_str()),
                )),
            ]
        } else {
            vec![Arc::new(arrow::array::StringArray::from_iter_values(
                rows.iter().map(|r| r.1.as_str()),
            ))]
        };
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        Ok(StatementOutput::Query(QueryOutput {
            schema,
            batches: vec![batch],
            streamed: None,
            stats: QueryStats::default(),
            planning: Duration::ZERO,
            execution: Duration::ZERO,
        }))
    }
}

impl Session {
    /// `stride.sharing_cycle` as SHOW gives it (milliseconds, as
    /// `statement_timeout`).
    fn sharing_cycle(&self) -> String {
        format!("{}ms", self.engine.sharing().config().cycle.as_millis())
    }

    fn sharing_max_batch(&self) -> String {
        self.engine.sharing().config().max_batch.to_string()
    }

    /// Whether this session's queries may share scans: its
    /// `stride.sharing`, else the engine's default.
    pub(crate) fn sharing_mode(&self) -> stride_exec::SharingMode {
        self.settings
            .sharing
            .unwrap_or_else(|| self.engine.sharing().config().mode)
    }
}

/// Columns of `SHOW <variable>`.
pub(super) fn show_schema(variable: &str) -> SchemaRef {
    if variable == "all" {
        Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("setting", DataType::Utf8, false),
        ]))
    } else {
        Arc::new(Schema::new(vec![Field::new(
            variable,
            DataType::Utf8,
            false,
        )]))
    }
}

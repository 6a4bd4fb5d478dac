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
            "stride.query_memory_limit" => {
                // A session may lower its share; only a superuser may take
                // more than the engine's default.
                let default = self.engine.runtime().query_memory_limit();
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
            other => {
                // Engine-wide settings are the runtime's; the rest are
                // the session's own.
                if !self.engine.runtime().set_setting(other, value)? {
                    self.settings.set(other, value)?;
                }
            }
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
                all.extend(self.engine.runtime().all_settings());
                all.push((
                    "stride.query_memory_limit".into(),
                    crate::settings::show_size(self.query_memory_limit()),
                ));
                all.push((
                    "stride.plan_cache_size".into(),
                    self.engine.plan_cache().capacity().to_string(),
                ));
                all.sort();
                all
            }
            "stride.query_memory_limit" => vec![(
                variable.into(),
                crate::settings::show_size(self.query_memory_limit()),
            )],
            "stride.plan_cache_size" => vec![(
                variable.into(),
                self.engine.plan_cache().capacity().to_string(),
            )],
            "search_path" | "schema" => vec![(variable.into(), self.default_schema.clone())],
            "is_superuser" => vec![(
                variable.into(),
                if self.is_superuser() { "on" } else { "off" }.into(),
            )],
            "session_authorization" => vec![(variable.into(), self.current_user())],
            other => match self
                .engine
                .runtime()
                .show_setting(other)
                .or_else(|| self.settings.get(other))
            {
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
    /// Whether this session's queries may share scans: its
    /// `stride.sharing`, else the engine's default.
    pub(crate) fn sharing_mode(&self) -> stride_exec::SharingMode {
        self.settings
            .sharing
            .unwrap_or_else(|| self.engine.runtime().sharing().config().mode)
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

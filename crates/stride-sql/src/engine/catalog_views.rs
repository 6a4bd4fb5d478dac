//! The relations and functions of `pg_catalog` and `information_schema`
//! as one session sees them (see `crate::pg_catalog`): views are built
//! from the session's catalog — inside a transaction block its own view,
//! with its uncommitted tables — when a statement names them; the functions
//! hold a [`PgContext`] and read that catalog when they are evaluated.

use std::sync::Arc;

use stride_storage::Table;

use super::{Engine, Session};
use crate::error::Result;
use crate::pg_catalog::{self, CatalogState};
use crate::roles::RoleId;

/// What the catalog functions of one statement read: the engine, the
/// catalog as the session sees it (its transaction's view inside a block:
/// its own uncommitted tables included), the search path and role.
pub struct PgContext {
    pub(crate) engine: Arc<Engine>,
    catalog: Arc<stride_storage::Catalog>,
    pub search_path: String,
    pub role: RoleId,
    /// The session's settings (`current_setting`, `pg_settings`), listed
    /// only when a function reads them.
    settings: crate::settings::SessionSettings,
}

impl std::fmt::Debug for PgContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgContext({}, role {})", self.search_path, self.role)
    }
}

impl PgContext {
    /// The session's catalog and the engine's roles now.
    pub fn state(&self) -> CatalogState<'_> {
        state(
            &self.engine,
            &self.catalog,
            &self.search_path,
            self.role,
            Vec::new(),
        )
    }

    /// The value of setting `name` (any case) as `SHOW` gives it.
    pub fn setting(&self, name: &str) -> Option<String> {
        let name = name.to_ascii_lowercase();
        if name == "search_path" {
            return Some(self.search_path.clone());
        }
        self.settings
            .all()
            .into_iter()
            .find_map(|(n, v)| (n == name).then_some(v))
    }
}

fn state<'a>(
    engine: &'a Engine,
    catalog: &'a stride_storage::Catalog,
    search_path: &'a str,
    role: RoleId,
    settings: Vec<(String, String)>,
) -> CatalogState<'a> {
    let mut functions: Vec<(String, &'static str)> = engine
        .functions
        .scalar_names()
        .into_iter()
        .map(|n| (n, "f"))
        .chain(
            crate::pg_functions::NAMES
                .iter()
                .map(|n| (n.to_string(), "f")),
        )
        .chain(
            engine
                .functions
                .aggregate_names()
                .into_iter()
                .map(|n| (n, "a")),
        )
        .collect();
    functions.sort();
    functions.dedup_by(|a, b| a.0 == b.0);
    CatalogState {
        catalog,
        roles: &engine.roles,
        role,
        search_path,
        settings,
        functions,
    }
}

/// A session's settings with their values, `search_path` included, sorted.
fn listed_settings(
    settings: &crate::settings::SessionSettings,
    search_path: &str,
) -> Vec<(String, String)> {
    let mut out = settings.all();
    out.push(("search_path".into(), search_path.to_string()));
    out.sort();
    out
}

impl Session {
    /// The context the catalog functions of this session's next statement
    /// read.
    pub(crate) fn pg_context(&self) -> Arc<PgContext> {
        Arc::new(PgContext {
            engine: self.engine.clone(),
            catalog: self.catalog_view().clone(),
            search_path: self.default_schema.clone(),
            role: self.role,
            settings: self.settings.clone(),
        })
    }

    /// The view a statement names: `pg_catalog.<name>` and
    /// `information_schema.<name>` built from the session's catalog (its
    /// transaction's view inside a block), other
    /// names as the system views of schema `stride`.
    pub(super) fn view(&self, name: &str) -> Result<Option<Table>> {
        if let Some((schema, view)) = name.split_once('.') {
            if pg_catalog::is_catalog_schema(schema) {
                let catalog = self.catalog_view();
                return state(
                    &self.engine,
                    catalog,
                    &self.default_schema,
                    self.role,
                    listed_settings(&self.settings, &self.default_schema),
                )
                .view(schema, view);
            }
        }
        if name == "placement" {
            // The tables the session sees: its transaction's view in a block.
            return Ok(stride_engine::numa_view::placement_table(self.catalog_view()).map(Some)?);
        }
        self.engine.system_view(name, self.viewer())
    }
}

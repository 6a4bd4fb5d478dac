//! The catalog and function registry as DataFusion's planner sees them.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion_common::config::ConfigOptions;
use datafusion_common::ScalarValue;
use datafusion_common::{DataFusionError, TableReference};
use datafusion_expr::planner::{ContextProvider, ExprPlanner};
use datafusion_expr::{
    AggregateUDF, ColumnarValue, HigherOrderUDF, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, TableProviderFilterPushDown, TableSource, Volatility, WindowUDF,
};
use stride_storage::{Catalog, Table};

use crate::error::{SqlError, UndefinedKind};

/// A table snapshot handed to the planner. Lowering takes the snapshot back
/// out of the `TableScan`, so a query reads exactly the data it was planned on.
/// A prepared statement binds its scans to the current snapshots again before
/// each execution (by `origin`).
#[derive(Debug)]
pub struct StrideTableSource {
    pub table: Arc<Table>,
    /// Where the snapshot came from.
    pub origin: SourceOrigin,
    /// The columns' `DEFAULT` expressions, planned (what an `INSERT` that
    /// leaves a column out writes into it); empty for a source that is
    /// only scanned.
    pub defaults: HashMap<String, datafusion_expr::Expr>,
}

impl StrideTableSource {
    /// A source that is only scanned (no defaults planned).
    pub fn scanned(table: Arc<Table>, origin: SourceOrigin) -> Self {
        StrideTableSource {
            table,
            origin,
            defaults: HashMap::new(),
        }
    }
}

/// The catalog entry (or system view) a table snapshot was taken from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceOrigin {
    /// `schema.table` in the catalog.
    Catalog { schema: String, table: String },
    /// A view of schema `stride`, built anew per statement.
    System { view: String },
}

impl TableSource for StrideTableSource {
    fn schema(&self) -> SchemaRef {
        self.table.schema().clone()
    }

    fn get_column_default(&self, column: &str) -> Option<&datafusion_expr::Expr> {
        self.defaults.get(column)
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&datafusion_expr::Expr],
    ) -> datafusion_common::Result<Vec<TableProviderFilterPushDown>> {
        // Filters stay in Filter nodes, fused into the scan's pipeline.
        Ok(vec![
            TableProviderFilterPushDown::Unsupported;
            filters.len()
        ])
    }
}

/// Functions known to the planner; built once per engine.
pub struct FunctionRegistry {
    scalars: HashMap<String, Arc<ScalarUDF>>,
    aggregates: HashMap<String, Arc<AggregateUDF>>,
    windows: HashMap<String, Arc<WindowUDF>>,
    planners: Vec<Arc<dyn ExprPlanner>>,
}

impl FunctionRegistry {
    /// The names of the scalar functions (`pg_proc`).
    pub fn scalar_names(&self) -> Vec<String> {
        self.scalars.keys().cloned().collect()
    }

    /// Whether `name` is an aggregate function.
    pub fn is_aggregate(&self, name: &str) -> bool {
        self.aggregates.contains_key(name)
    }

    /// The names of the aggregate functions (`pg_proc`).
    pub fn aggregate_names(&self) -> Vec<String> {
        self.aggregates.keys().cloned().collect()
    }
}

impl std::fmt::Debug for FunctionRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FunctionRegistry({} scalar, {} aggregate)",
            self.scalars.len(),
            self.aggregates.len()
        )
    }
}

impl Default for FunctionRegistry {
    fn default() -> Self {
        let mut scalars = HashMap::new();
        for f in datafusion_functions::all_default_functions() {
            for alias in f.aliases() {
                scalars.insert(alias.clone(), f.clone());
            }
            scalars.insert(f.name().to_string(), f);
        }
        crate::functions::limit_value_sizes(&mut scalars);
        // `version()` names the PostgreSQL version Stride speaks (clients
        // parse its first two words) and Stride itself.
        scalars.insert(
            "version".to_string(),
            Arc::new(ScalarUDF::new_from_impl(SessionConstant {
                name: "version".to_string(),
                value: version_string(),
                signature: Signature::nullary(Volatility::Immutable),
            })),
        );
        let mut aggregates = HashMap::new();
        for f in datafusion_functions_aggregate::all_default_aggregate_functions() {
            for alias in f.aliases() {
                aggregates.insert(alias.clone(), f.clone());
            }
            aggregates.insert(f.name().to_string(), f);
        }
        aggregates.insert(
            crate::pg_functions::SINGLE_VALUE.to_string(),
            Arc::new(AggregateUDF::new_from_impl(
                crate::pg_functions::SingleValue::default(),
            )),
        );
        let planners: Vec<Arc<dyn ExprPlanner>> = vec![
            Arc::new(datafusion_functions::core::planner::CoreFunctionPlanner::default()),
            Arc::new(datafusion_functions::datetime::planner::DatetimeFunctionPlanner),
            Arc::new(datafusion_functions::unicode::planner::UnicodeFunctionPlanner),
            Arc::new(datafusion_functions_aggregate::planner::AggregateFunctionPlanner),
        ];
        FunctionRegistry {
            scalars,
            aggregates,
            windows: crate::window_functions::window_functions(),
            planners,
        }
    }
}

/// The value of `version()`: `PostgreSQL <server_version> (Stride <crate
/// version>) on <arch>-<os>, 64-bit`.
pub fn version_string() -> String {
    let server_version = crate::settings::SERVER_VERSION;
    format!(
        "PostgreSQL {server_version} (Stride {}) on {}-{}, {}-bit",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS,
        usize::BITS
    )
}

/// Functions whose value is the session's role (SQL's special functions,
/// written without parentheses).
const SESSION_FUNCTIONS: &[&str] = &["current_user", "session_user", "current_role"];

/// `current_user` and its kin, and `version()`: a constant of the
/// statement's session, so the optimizer folds it into a literal.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SessionConstant {
    name: String,
    value: String,
    signature: Signature,
}

impl ScalarUDFImpl for SessionConstant {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> datafusion_common::Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(
        &self,
        _args: ScalarFunctionArgs,
    ) -> datafusion_common::Result<ColumnarValue> {
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
            self.value.clone(),
        ))))
    }
}

/// Resolves names against the catalog for one statement.
pub struct PlannerContext<'a> {
    pub catalog: &'a Catalog,
    pub functions: &'a FunctionRegistry,
    pub default_schema: &'a str,
    pub options: &'a ConfigOptions,
    /// Builds the system views of schema `stride` (a snapshot per statement).
    pub system: &'a dyn Fn(&str) -> crate::error::Result<Option<stride_storage::Table>>,
    /// The session's role: the value of `current_user`, `session_user` and
    /// `current_role`.
    pub session_user: &'a str,
    /// Function names the planner looked up in vain (start with
    /// `Default::default()`).
    pub misses: FunctionMisses,
    /// What PostgreSQL's catalog functions (`crate::pg_functions`) read.
    pub pg: Arc<crate::engine::PgContext>,
}

/// What the planner failed to find among the functions while binding one
/// statement, so that a call of an unknown function is reported as such
/// (SQLSTATE 42883) from what the planner asked, not from its message.
///
/// DataFusion's planner looks a called name up as a scalar, higher-order and
/// aggregate function (and, for a call with OVER, a window function); when
/// none matches, and only then, it asks for the registered names to suggest
/// one (`suggest_valid_function`) and fails. The name of the last failed
/// lookup when that list is asked for is the unknown function.
#[derive(Debug, Default)]
pub struct FunctionMisses {
    last: RefCell<Option<String>>,
    unknown: RefCell<Option<String>>,
}

impl FunctionMisses {
    /// Notes a lookup of `name`; `found`: whether it resolved.
    fn looked_up(&self, name: &str, found: bool) {
        if !found {
            *self.last.borrow_mut() = Some(name.to_string());
        }
    }

    /// The planner asked for every function name: it found no function of
    /// the name it looked up last.
    fn listed(&self) {
        let last = self.last.borrow().clone();
        if last.is_some() {
            *self.unknown.borrow_mut() = last;
        }
    }

    /// The function the planner gave up on, if it gave up on one.
    pub fn unknown_function(&self) -> Option<String> {
        self.unknown.borrow().clone()
    }
}

impl PlannerContext<'_> {
    /// Splits a table reference into (schema, table), applying the default schema.
    pub fn resolve(&self, name: &TableReference) -> (String, String) {
        match name {
            TableReference::Bare { table } => (self.default_schema.to_string(), table.to_string()),
            TableReference::Partial { schema, table }
            | TableReference::Full { schema, table, .. } => (schema.to_string(), table.to_string()),
        }
    }

    /// The `DEFAULT` expressions of `table`'s columns, planned from the SQL
    /// text its schema keeps (`stride_storage::constraints::DEFAULT`).
    fn plan_defaults(
        &self,
        table: &Table,
    ) -> datafusion_common::Result<HashMap<String, datafusion_expr::Expr>> {
        use datafusion_sql::sqlparser::dialect::PostgreSqlDialect;
        use datafusion_sql::sqlparser::parser::Parser;
        let mut out = HashMap::new();
        for field in table.schema().fields() {
            let Some(sql) = stride_storage::constraints::default_text(field) else {
                continue;
            };
            let expr = Parser::new(&PostgreSqlDialect {})
                .try_with_sql(sql)
                .and_then(|mut p| p.parse_expr())
                .map_err(|e| DataFusionError::Plan(format!("DEFAULT of {}: {e}", field.name())))?;
            let planned = datafusion_sql::planner::SqlToRel::new(self).sql_to_expr(
                expr,
                &datafusion_common::DFSchema::empty(),
                &mut datafusion_sql::planner::PlannerContext::new(),
            )?;
            out.insert(field.name().clone(), planned);
        }
        Ok(out)
    }
}

impl ContextProvider for PlannerContext<'_> {
    fn get_table_source(
        &self,
        name: TableReference,
    ) -> datafusion_common::Result<Arc<dyn TableSource>> {
        let (schema, table) = self.resolve(&name);
        // `pg_catalog` and `information_schema` (unless the catalog holds
        // a schema of that name); a bare name of a `pg_catalog` relation
        // means it, as PostgreSQL searches `pg_catalog` first.
        let catalog_view = match &name {
            TableReference::Bare { .. } => {
                crate::pg_catalog::is_view(crate::pg_catalog::PG_CATALOG, &table)
                    .then_some(crate::pg_catalog::PG_CATALOG)
            }
            _ => (crate::pg_catalog::is_catalog_schema(&schema)
                && !self.catalog.schema_exists(&schema))
            .then_some(schema.as_str()),
        };
        if let Some(catalog_schema) = catalog_view {
            let qualified = format!("{catalog_schema}.{table}");
            let view =
                (self.system)(&qualified).map_err(|e| DataFusionError::External(Box::new(e)))?;
            if let Some(view) = view {
                return Ok(Arc::new(StrideTableSource::scanned(
                    Arc::new(view),
                    SourceOrigin::System { view: qualified },
                )));
            }
        }
        if schema == stride_engine::activity::SYSTEM_SCHEMA && !self.catalog.schema_exists(&schema)
        {
            let view = (self.system)(&table).map_err(|e| DataFusionError::External(Box::new(e)))?;
            if let Some(view) = view {
                return Ok(Arc::new(StrideTableSource::scanned(
                    Arc::new(view),
                    SourceOrigin::System { view: table },
                )));
            }
        }
        let snapshot = self
            .catalog
            .table(&schema, &table)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let defaults = self.plan_defaults(&snapshot)?;
        Ok(Arc::new(StrideTableSource {
            table: snapshot,
            origin: SourceOrigin::Catalog { schema, table },
            defaults,
        }))
    }

    fn get_table_function_source(
        &self,
        name: &str,
        args: Vec<datafusion_expr::Expr>,
    ) -> datafusion_common::Result<Arc<dyn TableSource>> {
        crate::table_functions::table_function(name, args)
            .map_err(|e| DataFusionError::External(Box::new(e)))
    }

    fn get_expr_planners(&self) -> &[Arc<dyn ExprPlanner>] {
        &self.functions.planners
    }

    fn get_function_meta(&self, name: &str) -> Option<Arc<ScalarUDF>> {
        if SESSION_FUNCTIONS.contains(&name) {
            return Some(Arc::new(ScalarUDF::new_from_impl(SessionConstant {
                name: name.to_string(),
                value: self.session_user.to_string(),
                signature: Signature::nullary(Volatility::Stable),
            })));
        }
        let name = name.strip_prefix("pg_catalog.").unwrap_or(name);
        if let Some(f) = crate::pg_functions::lookup(name, &self.pg) {
            return Some(f);
        }
        let found = self.functions.scalars.get(name).cloned();
        self.misses.looked_up(name, found.is_some());
        found
    }

    fn get_higher_order_meta(&self, name: &str) -> Option<Arc<HigherOrderUDF>> {
        self.misses.looked_up(name, false);
        None
    }

    fn get_aggregate_meta(&self, name: &str) -> Option<Arc<AggregateUDF>> {
        let found = self.functions.aggregates.get(name).cloned();
        self.misses.looked_up(name, found.is_some());
        found
    }

    fn get_window_meta(&self, name: &str) -> Option<Arc<WindowUDF>> {
        let found = self.functions.windows.get(name).cloned();
        self.misses.looked_up(name, found.is_some());
        found
    }

    fn get_variable_type(&self, _variable_names: &[String]) -> Option<DataType> {
        None
    }

    fn options(&self) -> &ConfigOptions {
        self.options
    }

    fn udf_names(&self) -> Vec<String> {
        self.misses.listed();
        self.functions.scalars.keys().cloned().collect()
    }

    fn udaf_names(&self) -> Vec<String> {
        self.misses.listed();
        self.functions.aggregates.keys().cloned().collect()
    }

    fn udwf_names(&self) -> Vec<String> {
        self.misses.listed();
        self.functions.windows.keys().cloned().collect()
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        Vec::new()
    }
}

impl datafusion_expr::registry::FunctionRegistry for FunctionRegistry {
    fn udfs(&self) -> std::collections::HashSet<String> {
        self.scalars.keys().cloned().collect()
    }

    fn higher_order_function_names(&self) -> std::collections::HashSet<String> {
        Default::default()
    }

    fn udafs(&self) -> std::collections::HashSet<String> {
        self.aggregates.keys().cloned().collect()
    }

    fn udwfs(&self) -> std::collections::HashSet<String> {
        self.windows.keys().cloned().collect()
    }

    fn udf(&self, name: &str) -> datafusion_common::Result<Arc<ScalarUDF>> {
        self.scalars
            .get(name)
            .cloned()
            .ok_or_else(|| undefined_function(name))
    }

    fn higher_order_function(&self, name: &str) -> datafusion_common::Result<Arc<HigherOrderUDF>> {
        Err(undefined_function(name))
    }

    fn udaf(&self, name: &str) -> datafusion_common::Result<Arc<AggregateUDF>> {
        self.aggregates
            .get(name)
            .cloned()
            .ok_or_else(|| undefined_function(name))
    }

    fn udwf(&self, name: &str) -> datafusion_common::Result<Arc<WindowUDF>> {
        self.windows
            .get(name)
            .cloned()
            .ok_or_else(|| undefined_function(name))
    }

    fn expr_planners(&self) -> Vec<Arc<dyn ExprPlanner>> {
        self.planners.clone()
    }
}

/// No function of that name, as the optimizer's registry reports it.
fn undefined_function(name: &str) -> DataFusionError {
    DataFusionError::External(Box::new(SqlError::undefined(
        UndefinedKind::Function,
        format!("function {name} does not exist"),
    )))
}

/// The optimizer's view of a statement: DataFusion's standalone context plus
/// Stride's function registry (some rewrites build new function calls).
pub struct OptimizerSettings<'a> {
    pub context: datafusion_optimizer::OptimizerContext,
    pub functions: &'a FunctionRegistry,
}

impl datafusion_optimizer::OptimizerConfig for OptimizerSettings<'_> {
    fn query_execution_start_time(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.context.query_execution_start_time()
    }

    fn alias_generator(&self) -> &Arc<datafusion_common::alias::AliasGenerator> {
        self.context.alias_generator()
    }

    fn options(&self) -> Arc<ConfigOptions> {
        self.context.options()
    }

    fn function_registry(&self) -> Option<&dyn datafusion_expr::registry::FunctionRegistry> {
        Some(self.functions)
    }
}

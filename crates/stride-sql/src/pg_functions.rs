//! PostgreSQL's catalog and session functions that clients call:
//! `current_schema()`, `current_database()`, `current_schemas(bool)`,
//! `format_type`, `pg_get_expr`, `pg_table_is_visible`, `pg_get_userbyid`,
//! `obj_description`, `pg_encoding_to_char`, `has_*_privilege`,
//! `to_regclass`, the `regclass`/`regtype`/`regnamespace`/`regproc`
//! conversions `pg_compat` rewrites casts into, sizes, and `array_to_string`
//! / subscripts over the catalogs' array columns.
//!
//! Every function reads the engine's live state when it is evaluated (the
//! catalog, the roles, the session's search path and role), through a
//! [`PgContext`] the planner hands it; none answers from a fixed table
//! except where PostgreSQL's own answer is fixed (built-in types,
//! encodings).

use std::sync::Arc;

use arrow::array::{new_empty_array, Array, AsArray};
use arrow::datatypes::{DataType, Field};
use datafusion_common::{DataFusionError, ScalarValue};
use datafusion_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

use crate::engine::PgContext;
use crate::error::{SqlError, UndefinedKind};
use crate::pg_catalog as cat;

type DfResult<T> = datafusion_common::Result<T>;
type Eval = fn(&PgContext, &[ScalarValue]) -> DfResult<ScalarValue>;
type Ret = fn(&[DataType]) -> DfResult<DataType>;

/// One function: its name, its result type from its argument types, and
/// its value for one row's arguments.
struct PgFunction {
    name: &'static str,
    signature: Signature,
    ret: Ret,
    eval: Eval,
    ctx: Arc<PgContext>,
}

impl std::fmt::Debug for PgFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgFunction({})", self.name)
    }
}

impl PartialEq for PgFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.ctx, &other.ctx)
    }
}
impl Eq for PgFunction {}
impl std::hash::Hash for PgFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl ScalarUDFImpl for PgFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        (self.ret)(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let ret = args.return_field.data_type().clone();
        if args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)))
        {
            let values: Vec<ScalarValue> = args
                .args
                .iter()
                .map(|a| match a {
                    ColumnarValue::Scalar(s) => s.clone(),
                    ColumnarValue::Array(_) => ScalarValue::Null,
                })
                .collect();
            let v = (self.eval)(&self.ctx, &values)?;
            return Ok(ColumnarValue::Scalar(conform(v, &ret)?));
        }
        let rows = args.number_rows;
        if rows == 0 {
            return Ok(ColumnarValue::Array(new_empty_array(&ret)));
        }
        let mut out = Vec::with_capacity(rows);
        for row in 0..rows {
            let values = args
                .args
                .iter()
                .map(|a| match a {
                    ColumnarValue::Scalar(s) => Ok(s.clone()),
                    ColumnarValue::Array(a) => ScalarValue::try_from_array(a, row),
                })
                .collect::<DfResult<Vec<_>>>()?;
            out.push(conform((self.eval)(&self.ctx, &values)?, &ret)?);
        }
        Ok(ColumnarValue::Array(ScalarValue::iter_to_array(out)?))
    }
}

/// A value as the declared result type (a NULL of it where untyped).
fn conform(v: ScalarValue, ret: &DataType) -> DfResult<ScalarValue> {
    if v.is_null() {
        ScalarValue::try_from(ret)
    } else if &v.data_type() == ret {
        Ok(v)
    } else {
        v.cast_to(ret)
    }
}

fn text(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Utf8)
}
fn boolean(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Boolean)
}
fn int8(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Int64)
}
fn text_list(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::List(Arc::new(Field::new_list_field(
        DataType::Utf8,
        true,
    ))))
}
/// `regclass` and its kin: an OID from a name, a name from an OID.
fn reg(args: &[DataType]) -> DfResult<DataType> {
    Ok(match args.first() {
        Some(t) if t.is_integer() => DataType::Utf8,
        _ => DataType::Int64,
    })
}
/// The element type of a list argument.
fn element(args: &[DataType]) -> DfResult<DataType> {
    match args.first() {
        Some(DataType::List(f) | DataType::LargeList(f)) => Ok(f.data_type().clone()),
        Some(DataType::Null | DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8) | None => {
            Ok(DataType::Utf8)
        }
        Some(other) => Err(DataFusionError::Plan(format!(
            "cannot subscript type {other} because it is not an array"
        ))),
    }
}

fn utf8(s: impl Into<String>) -> ScalarValue {
    ScalarValue::Utf8(Some(s.into()))
}

/// The integer value of an argument (integers, and numbers given as text).
fn int(v: &ScalarValue) -> Option<i64> {
    match v {
        ScalarValue::Int8(x) => x.map(i64::from),
        ScalarValue::Int16(x) => x.map(i64::from),
        ScalarValue::Int32(x) => x.map(i64::from),
        ScalarValue::Int64(x) => *x,
        ScalarValue::UInt8(x) => x.map(i64::from),
        ScalarValue::UInt16(x) => x.map(i64::from),
        ScalarValue::UInt32(x) => x.map(i64::from),
        ScalarValue::UInt64(x) => x.and_then(|x| i64::try_from(x).ok()),
        other => string(other).and_then(|s| s.trim().parse().ok()),
    }
}

fn string(v: &ScalarValue) -> Option<String> {
    match v {
        ScalarValue::Utf8(s) | ScalarValue::LargeUtf8(s) | ScalarValue::Utf8View(s) => s.clone(),
        _ => None,
    }
}

fn is_int(v: &ScalarValue) -> bool {
    v.data_type().is_integer()
}

fn external(e: SqlError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// The function named `name` (without `pg_catalog.`), if it is one of
/// these, bound to the session's `ctx`.
pub fn lookup(name: &str, ctx: &Arc<PgContext>) -> Option<Arc<ScalarUDF>> {
    let (ret, eval, min, max): (Ret, Eval, usize, usize) = match name {
        "current_schema" => (text, current_schema, 0, 0),
        "current_database" | "current_catalog" => (text, current_database, 0, 0),
        "current_schemas" => (text_list, current_schemas, 1, 1),
        "current_setting" => (text, current_setting, 1, 2),
        "format_type" => (text, format_type, 2, 2),
        "pg_typeof" => (text, pg_typeof, 1, 1),
        "pg_get_expr" => (text, pg_get_expr, 2, 3),
        "pg_table_is_visible" => (boolean, pg_table_is_visible, 1, 1),
        "pg_type_is_visible" => (boolean, pg_type_is_visible, 1, 1),
        "pg_collation_is_visible" => (boolean, pg_collation_is_visible, 1, 1),
        "json_build_object" => (text, json_build_object, 0, 32),
        "pg_function_is_visible" => (boolean, pg_function_is_visible, 1, 1),
        "pg_get_userbyid" => (text, pg_get_userbyid, 1, 1),
        "obj_description" | "shobj_description" => (text, no_description, 1, 2),
        "col_description" => (text, no_description, 2, 2),
        "pg_encoding_to_char" => (text, pg_encoding_to_char, 1, 1),
        "has_table_privilege" => (boolean, has_table_privilege, 2, 3),
        "has_schema_privilege" => (boolean, has_schema_privilege, 2, 3),
        "has_database_privilege" => (boolean, has_database_privilege, 2, 3),
        "to_regclass" => (int8, to_regclass, 1, 1),
        "to_regtype" => (int8, to_regtype, 1, 1),
        "to_regnamespace" => (int8, to_regnamespace, 1, 1),
        "regclass" => (reg, regclass, 1, 1),
        "regtype" => (reg, regtype, 1, 1),
        "regnamespace" => (reg, regnamespace, 1, 1),
        "regproc" | "regprocedure" => (reg, regproc, 1, 1),
        "regclassout" => (text, regclassout, 1, 1),
        "regtypeout" => (text, regtypeout, 1, 1),
        "regnamespaceout" => (text, regnamespaceout, 1, 1),
        "regprocout" => (text, regprocout, 1, 1),
        // Definitions of objects Stride has none of: PostgreSQL's answer
        // for an OID that names no such object is NULL.
        "pg_get_indexdef" => (text, pg_get_indexdef, 1, 3),
        "pg_get_constraintdef" => (text, pg_get_constraintdef, 1, 2),
        "pg_get_triggerdef"
        | "pg_get_viewdef"
        | "pg_get_ruledef"
        | "pg_get_statisticsobjdef_columns"
        | "pg_get_partkeydef"
        | "pg_get_serial_sequence"
        | "pg_get_function_result"
        | "pg_get_function_arguments"
        | "pg_get_function_identity_arguments" => (text, no_definition, 1, 3),
        "pg_relation_is_publishable" => (boolean, not_publishable, 1, 1),
        "pg_table_size" | "pg_relation_size" | "pg_total_relation_size" => {
            (int8, pg_table_size, 1, 2)
        }
        "pg_size_pretty" => (text, pg_size_pretty, 1, 1),
        "array_to_string" => (text, array_to_string, 2, 3),
        "array_element" => (element, array_element, 2, 2),
        "array_any_eq" => (boolean, array_any_eq, 2, 2),
        "array_upper" | "array_length" => (int8, array_upper, 2, 2),
        "version" => (text, version, 0, 0),
        _ => return None,
    };
    let mut signatures = Vec::new();
    if min == 0 {
        signatures.push(TypeSignature::Nullary);
    }
    for n in min.max(1)..=max {
        signatures.push(TypeSignature::Any(n));
    }
    let name: &'static str = NAMES.iter().find(|n| **n == name)?;
    Some(Arc::new(ScalarUDF::new_from_impl(PgFunction {
        name,
        signature: Signature::one_of(signatures, Volatility::Stable),
        ret,
        eval,
        ctx: ctx.clone(),
    })))
}

/// Every function [`lookup`] knows (`pg_proc` lists them too).
pub const NAMES: &[&str] = &[
    "current_schema",
    "current_database",
    "current_catalog",
    "current_schemas",
    "current_setting",
    "format_type",
    "pg_typeof",
    "pg_get_expr",
    "pg_table_is_visible",
    "pg_type_is_visible",
    "pg_collation_is_visible",
    "json_build_object",
    "pg_function_is_visible",
    "pg_get_userbyid",
    "obj_description",
    "shobj_description",
    "col_description",
    "pg_encoding_to_char",
    "has_table_privilege",
    "has_schema_privilege",
    "has_database_privilege",
    "to_regclass",
    "to_regtype",
    "to_regnamespace",
    "regclass",
    "regtype",
    "regnamespace",
    "regproc",
    "regprocedure",
    "regclassout",
    "regtypeout",
    "regnamespaceout",
    "regprocout",
    "pg_get_indexdef",
    "pg_get_constraintdef",
    "pg_get_triggerdef",
    "pg_get_viewdef",
    "pg_get_ruledef",
    "pg_get_statisticsobjdef_columns",
    "pg_get_partkeydef",
    "pg_get_serial_sequence",
    "pg_get_function_result",
    "pg_get_function_arguments",
    "pg_get_function_identity_arguments",
    "pg_relation_is_publishable",
    "pg_table_size",
    "pg_relation_size",
    "pg_total_relation_size",
    "pg_size_pretty",
    "array_to_string",
    "array_element",
    "array_any_eq",
    "array_upper",
    "array_length",
    "version",
];

fn version(_: &PgContext, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(utf8(crate::context::version_string()))
}

fn current_schema(ctx: &PgContext, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(utf8(ctx.search_path.clone()))
}

fn current_database(_: &PgContext, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(utf8(cat::DATABASE))
}

/// The session's value of a setting, as `SHOW` gives it; an unknown name
/// fails with 42704, or gives NULL with `missing_ok` true.
fn current_setting(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let Some(name) = string(&args[0]) else {
        return Ok(ScalarValue::Utf8(None));
    };
    let missing_ok = matches!(args.get(1), Some(ScalarValue::Boolean(Some(true))));
    match ctx.setting(name.trim()) {
        Some(v) => Ok(utf8(v)),
        None if missing_ok => Ok(ScalarValue::Utf8(None)),
        None => Err(external(SqlError::setting(
            crate::error::SettingKind::Unrecognized,
            format!("unrecognized configuration parameter \"{name}\""),
        ))),
    }
}

/// The schemas searched, in order; with `true`, the implicitly searched
/// `pg_catalog` first (as PostgreSQL).
fn current_schemas(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let implicit = match &args[0] {
        ScalarValue::Boolean(Some(b)) => *b,
        ScalarValue::Boolean(None) => return Ok(ScalarValue::Null),
        other => {
            return Err(DataFusionError::Plan(format!(
                "current_schemas takes a boolean, not {}",
                other.data_type()
            )))
        }
    };
    let mut schemas = Vec::new();
    if implicit {
        schemas.push(utf8(cat::PG_CATALOG));
    }
    schemas.push(utf8(ctx.search_path.clone()));
    Ok(ScalarValue::List(ScalarValue::new_list(
        &schemas,
        &DataType::Utf8,
        true,
    )))
}

fn format_type(_: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let Some(oid) = int(&args[0]) else {
        return Ok(ScalarValue::Null);
    };
    Ok(utf8(
        cat::format_type(oid, int(&args[1])).unwrap_or_else(|| "???".into()),
    ))
}

/// `pg_typeof(x)`: the name of the type `x` is described as on the wire
/// (without a type modifier, as PostgreSQL's `regtype` output); `unknown`
/// for an untyped NULL.
fn pg_typeof(_: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let t = args[0].data_type();
    if t == DataType::Null {
        return Ok(utf8("unknown"));
    }
    let (oid, _) = cat::pg_type_of(&t);
    Ok(utf8(
        cat::format_type(i64::from(oid), None).unwrap_or_else(|| "???".into()),
    ))
}

/// Stride keeps expressions (none yet: no column defaults) as their SQL
/// text, which is what `pg_get_expr` shows.
fn pg_get_expr(_: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(string(&args[0]).map_or(ScalarValue::Null, utf8))
}

fn pg_table_is_visible(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(match int(&args[0]) {
        Some(oid) => ScalarValue::Boolean(Some(ctx.state().table_is_visible(oid))),
        None => ScalarValue::Null,
    })
}

fn pg_type_is_visible(_: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(match int(&args[0]) {
        Some(oid) => ScalarValue::Boolean(Some(cat::format_type(oid, None).is_some())),
        None => ScalarValue::Null,
    })
}

/// The built-in collations (`default`, `C`, `POSIX`), all in
/// `pg_catalog`.
fn pg_collation_is_visible(_: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(match int(&args[0]) {
        Some(oid) => ScalarValue::Boolean(Some(matches!(oid, 100 | 950 | 951))),
        None => ScalarValue::Null,
    })
}

/// `json_build_object(k1, v1, ...)` as JSON text.
fn json_build_object(_: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    if !args.len().is_multiple_of(2) {
        return Err(DataFusionError::Plan(
            "argument list must have even number of elements".into(),
        ));
    }
    let mut out = String::from("{");
    for (i, pair) in args.chunks(2).enumerate() {
        if pair[0].is_null() {
            return Err(DataFusionError::Plan(
                "null value not allowed for object key".into(),
            ));
        }
        if i > 0 {
            out.push_str(", ");
        }
        json_value(&pair[0], true, &mut out);
        out.push_str(" : ");
        json_value(&pair[1], false, &mut out);
    }
    out.push('}');
    Ok(utf8(out))
}

fn json_value(v: &ScalarValue, as_key: bool, out: &mut String) {
    if v.is_null() {
        out.push_str("null");
        return;
    }
    let quoted = as_key || !(v.data_type().is_numeric() || matches!(v, ScalarValue::Boolean(_)));
    let text = string(v).unwrap_or_else(|| v.to_string());
    if !quoted {
        out.push_str(&text);
        return;
    }
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn pg_function_is_visible(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(match int(&args[0]) {
        Some(oid) => ScalarValue::Boolean(Some(
            ctx.state()
                .functions
                .iter()
                .any(|(name, _)| cat::function_oid(name) == oid),
        )),
        None => ScalarValue::Null,
    })
}

fn pg_get_userbyid(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(match int(&args[0]) {
        Some(oid) => utf8(ctx.state().user_name(oid)),
        None => ScalarValue::Null,
    })
}

/// Stride has no `COMMENT ON`: no object has a description.
fn no_description(_: &PgContext, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(ScalarValue::Utf8(None))
}

/// Stride has no indexes, constraints, triggers, views, rules, extended
/// statistics, partitioning, sequences or typed function signatures: the
/// definition of any OID asked for is NULL, as PostgreSQL answers for an
/// OID that names no such object.
/// The definition of a key's index (`CREATE UNIQUE INDEX …`); NULL for
/// an OID that names none. With a column number (`pg_get_indexdef(oid,
/// n, pretty)`, n > 0), that key column's name.
fn pg_get_indexdef(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let Some(oid) = int(&args[0]) else {
        return Ok(ScalarValue::Utf8(None));
    };
    let state = ctx.state();
    let text = match args.get(1).and_then(int) {
        Some(n) if n > 0 => state.index_column(oid, n as usize),
        _ => state.key_definition(oid, true),
    };
    Ok(text.map_or(ScalarValue::Utf8(None), utf8))
}

/// The definition of a key constraint (`PRIMARY KEY (a)`); NULL for an
/// OID that names none.
fn pg_get_constraintdef(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(int(&args[0])
        .and_then(|oid| ctx.state().key_definition(oid, false))
        .map_or(ScalarValue::Utf8(None), utf8))
}

fn no_definition(_: &PgContext, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(ScalarValue::Utf8(None))
}

/// Stride has no logical replication.
fn not_publishable(_: &PgContext, _: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(ScalarValue::Boolean(Some(false)))
}

fn pg_encoding_to_char(_: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(match int(&args[0]) {
        Some(cat::UTF8_ENCODING) => utf8("UTF8"),
        Some(0) => utf8("SQL_ASCII"),
        Some(_) => utf8(""),
        None => ScalarValue::Null,
    })
}

/// The role a `has_*_privilege` call asks about: the session's with two
/// arguments, else the first argument (a name or an OID).
fn privilege_role(
    ctx: &PgContext,
    args: &[ScalarValue],
) -> DfResult<(crate::roles::RoleId, usize)> {
    if args.len() == 2 {
        return Ok((ctx.role, 0));
    }
    let state = ctx.state();
    let role = if is_int(&args[0]) {
        int(&args[0]).and_then(|id| crate::roles::RoleId::try_from(id).ok())
    } else {
        string(&args[0]).and_then(|name| state.roles.by_name(&name).map(|r| r.id))
    };
    role.map(|r| (r, 1)).ok_or_else(|| {
        external(SqlError::UndefinedObject(format!(
            "role \"{}\" does not exist",
            args[0]
        )))
    })
}

/// The privileges a `has_*_privilege` call lists (`SELECT, INSERT`,
/// `USAGE WITH GRANT OPTION`), upper case.
fn privileges(v: &ScalarValue) -> Vec<String> {
    string(v)
        .unwrap_or_default()
        .split(',')
        .map(|p| {
            p.trim()
                .to_ascii_uppercase()
                .trim_end_matches(" WITH GRANT OPTION")
                .to_string()
        })
        .collect()
}

fn has_table_privilege(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    use crate::roles::TablePrivilege as P;
    let (role, at) = privilege_role(ctx, args)?;
    let state = ctx.state();
    let table = &args[at];
    let (schema, name) = if is_int(table) {
        let Some(oid) = int(table) else {
            return Ok(ScalarValue::Null);
        };
        match state.table_of(oid) {
            Some(t) => t,
            // Catalog views: readable by everyone.
            None if state.regclass_name(oid).is_some() => {
                return Ok(ScalarValue::Boolean(Some(true)))
            }
            None => return Ok(ScalarValue::Null),
        }
    } else {
        let Some(text) = string(table) else {
            return Ok(ScalarValue::Null);
        };
        let oid = state.regclass(&text).ok_or_else(|| {
            external(SqlError::undefined(
                UndefinedKind::Table,
                format!("relation \"{text}\" does not exist"),
            ))
        })?;
        match state.table_of(oid) {
            Some(t) => t,
            None => return Ok(ScalarValue::Boolean(Some(true))),
        }
    };
    let mut all = true;
    for p in privileges(&args[at + 1]) {
        let privilege = match p.as_str() {
            "SELECT" => P::Select,
            "INSERT" => P::Insert,
            "UPDATE" => P::Update,
            "DELETE" => P::Delete,
            // Stride has no TRUNCATE, REFERENCES or TRIGGER privilege:
            // only superusers may do these things.
            "TRUNCATE" | "REFERENCES" | "TRIGGER" => {
                all &= state.roles.is_superuser(role);
                continue;
            }
            other => {
                return Err(DataFusionError::Plan(format!(
                    "unrecognized privilege type: \"{other}\""
                )))
            }
        };
        all &= state
            .roles
            .check_table(role, &schema, &name, privilege)
            .is_ok();
    }
    Ok(ScalarValue::Boolean(Some(all)))
}

fn has_schema_privilege(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    use crate::roles::SchemaPrivilege as P;
    let (role, at) = privilege_role(ctx, args)?;
    let state = ctx.state();
    let schema = if is_int(&args[at]) {
        int(&args[at]).and_then(|oid| state.namespace_name(oid))
    } else {
        string(&args[at])
    };
    let Some(schema) = schema else {
        return Ok(ScalarValue::Null);
    };
    if cat::is_catalog_schema(&schema) {
        let usage_only = privileges(&args[at + 1]).iter().all(|p| p == "USAGE");
        return Ok(ScalarValue::Boolean(Some(
            usage_only || state.roles.is_superuser(role),
        )));
    }
    let mut all = true;
    for p in privileges(&args[at + 1]) {
        let privilege = match p.as_str() {
            "USAGE" => P::Usage,
            "CREATE" => P::Create,
            other => {
                return Err(DataFusionError::Plan(format!(
                    "unrecognized privilege type: \"{other}\""
                )))
            }
        };
        all &= state.roles.check_schema(role, &schema, privilege).is_ok();
    }
    Ok(ScalarValue::Boolean(Some(all)))
}

/// Every role may connect to Stride's database; creating schemas in it is
/// for superusers; Stride has no temporary tables.
fn has_database_privilege(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let (role, _) = privilege_role(ctx, args)?;
    let superuser = ctx.state().roles.is_superuser(role);
    let mut all = true;
    for p in privileges(&args[args.len() - 1]) {
        all &= match p.as_str() {
            "CONNECT" => true,
            "CREATE" => superuser,
            "TEMP" | "TEMPORARY" => false,
            other => {
                return Err(DataFusionError::Plan(format!(
                    "unrecognized privilege type: \"{other}\""
                )))
            }
        };
    }
    Ok(ScalarValue::Boolean(Some(all)))
}

fn oid_or_null(oid: Option<i64>) -> ScalarValue {
    ScalarValue::Int64(oid)
}

fn to_regclass(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(oid_or_null(
        string(&args[0]).and_then(|s| ctx.state().regclass(&s)),
    ))
}

fn to_regtype(_: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(oid_or_null(
        string(&args[0]).and_then(|s| cat::type_oid_by_name(&s)),
    ))
}

fn to_regnamespace(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    Ok(oid_or_null(string(&args[0]).and_then(|s| {
        let name = cat::split_name(&s).pop()?;
        ctx.state()
            .namespace_name(cat::namespace_oid(&name))
            .map(|_| cat::namespace_oid(&name))
    })))
}

/// `x::regclass`: a name to its OID (42P01 if none), an OID to the name
/// PostgreSQL prints (the number itself for an unknown OID).
fn regclass(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    if is_int(&args[0]) {
        return regclassout(ctx, args);
    }
    let Some(text) = string(&args[0]) else {
        return Ok(ScalarValue::Int64(None));
    };
    if let Ok(oid) = text.trim().parse::<i64>() {
        return Ok(ScalarValue::Int64(Some(oid)));
    }
    ctx.state()
        .regclass(&text)
        .map(|oid| ScalarValue::Int64(Some(oid)))
        .ok_or_else(|| {
            external(SqlError::undefined(
                UndefinedKind::Table,
                format!("relation \"{text}\" does not exist"),
            ))
        })
}

fn regclassout(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    if !is_int(&args[0]) {
        return Ok(match regclass(ctx, args)? {
            ScalarValue::Int64(Some(oid)) => regclass_text(ctx, oid),
            _ => ScalarValue::Utf8(None),
        });
    }
    Ok(int(&args[0]).map_or(ScalarValue::Utf8(None), |oid| regclass_text(ctx, oid)))
}

fn regclass_text(ctx: &PgContext, oid: i64) -> ScalarValue {
    utf8(
        ctx.state()
            .regclass_name(oid)
            .unwrap_or_else(|| oid.to_string()),
    )
}

fn regtype(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    if is_int(&args[0]) {
        return regtypeout(ctx, args);
    }
    let Some(text) = string(&args[0]) else {
        return Ok(ScalarValue::Int64(None));
    };
    if let Ok(oid) = text.trim().parse::<i64>() {
        return Ok(ScalarValue::Int64(Some(oid)));
    }
    cat::type_oid_by_name(&text)
        .map(|oid| ScalarValue::Int64(Some(oid)))
        .ok_or_else(|| {
            external(SqlError::UndefinedObject(format!(
                "type \"{text}\" does not exist"
            )))
        })
}

fn regtypeout(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let oid = if is_int(&args[0]) {
        int(&args[0])
    } else {
        match regtype(ctx, args)? {
            ScalarValue::Int64(oid) => oid,
            _ => None,
        }
    };
    Ok(oid.map_or(ScalarValue::Utf8(None), |oid| {
        utf8(cat::format_type(oid, None).unwrap_or_else(|| oid.to_string()))
    }))
}

fn regnamespace(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    if is_int(&args[0]) {
        return regnamespaceout(ctx, args);
    }
    let Some(text) = string(&args[0]) else {
        return Ok(ScalarValue::Int64(None));
    };
    match to_regnamespace(ctx, args)? {
        ScalarValue::Int64(Some(oid)) => Ok(ScalarValue::Int64(Some(oid))),
        _ => Err(external(SqlError::undefined(
            UndefinedKind::Schema,
            format!("schema \"{text}\" does not exist"),
        ))),
    }
}

fn regnamespaceout(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let oid = if is_int(&args[0]) {
        int(&args[0])
    } else {
        match regnamespace(ctx, args)? {
            ScalarValue::Int64(oid) => oid,
            _ => None,
        }
    };
    Ok(oid.map_or(ScalarValue::Utf8(None), |oid| {
        utf8(
            ctx.state()
                .namespace_name(oid)
                .map_or_else(|| oid.to_string(), |n| cat::quote_ident(&n)),
        )
    }))
}

fn regproc(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    if is_int(&args[0]) {
        return regprocout(ctx, args);
    }
    let Some(text) = string(&args[0]) else {
        return Ok(ScalarValue::Int64(None));
    };
    let name = cat::split_name(text.split('(').next().unwrap_or(&text))
        .pop()
        .unwrap_or_default();
    if ctx.state().functions.iter().any(|(n, _)| *n == name) {
        Ok(ScalarValue::Int64(Some(cat::function_oid(&name))))
    } else {
        Err(external(SqlError::undefined(
            UndefinedKind::Function,
            format!("function \"{text}\" does not exist"),
        )))
    }
}

fn regprocout(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let oid = if is_int(&args[0]) {
        int(&args[0])
    } else {
        match regproc(ctx, args)? {
            ScalarValue::Int64(oid) => oid,
            _ => None,
        }
    };
    Ok(oid.map_or(ScalarValue::Utf8(None), |oid| {
        let state = ctx.state();
        utf8(
            state
                .functions
                .iter()
                .find(|(n, _)| cat::function_oid(n) == oid)
                .map_or_else(|| oid.to_string(), |(n, _)| n.clone()),
        )
    }))
}

/// Bytes a table's snapshot holds in memory; 0 for a catalog view; NULL
/// for an OID that is no relation.
fn pg_table_size(ctx: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let state = ctx.state();
    let oid = if is_int(&args[0]) {
        int(&args[0])
    } else {
        string(&args[0]).and_then(|s| state.regclass(&s))
    };
    let Some(oid) = oid else {
        return Ok(ScalarValue::Int64(None));
    };
    Ok(ScalarValue::Int64(match state.table_of(oid) {
        Some((schema, table)) => state
            .catalog
            .table(&schema, &table)
            .ok()
            .map(|t| t.memory_size() as i64),
        None => state.regclass_name(oid).map(|_| 0),
    }))
}

/// PostgreSQL's `pg_size_pretty`: bytes below 10 kB, then the largest
/// unit that keeps the number below 10240, rounded half up.
fn pg_size_pretty(_: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let Some(mut size) = int(&args[0]) else {
        return Ok(ScalarValue::Utf8(None));
    };
    const LIMIT: i64 = 10 * 1024;
    if size.abs() < LIMIT {
        return Ok(utf8(format!("{size} bytes")));
    }
    // Half-units, rounded at the end.
    size /= 512;
    for unit in ["kB", "MB", "GB", "TB"] {
        if size.abs() < 2 * LIMIT {
            return Ok(utf8(format!("{} {unit}", (size + size.signum()) / 2)));
        }
        size /= 1024;
    }
    Ok(utf8(format!("{} PB", (size + size.signum()) / 2)))
}

/// The elements of an array argument: an Arrow list, or an array in
/// PostgreSQL's text form (the catalogs' array columns).
fn list_values(v: &ScalarValue) -> DfResult<Option<Vec<ScalarValue>>> {
    match v {
        ScalarValue::List(l) if !l.is_null(0) => {
            let values = l.value(0);
            (0..values.len())
                .map(|i| ScalarValue::try_from_array(&values, i))
                .collect::<DfResult<Vec<_>>>()
                .map(Some)
        }
        ScalarValue::Utf8(Some(text))
        | ScalarValue::Utf8View(Some(text))
        | ScalarValue::LargeUtf8(Some(text)) => match cat::parse_array(text) {
            Some(items) => Ok(Some(items.into_iter().map(ScalarValue::Utf8).collect())),
            None => Err(DataFusionError::Plan(format!(
                "malformed array literal: \"{text}\""
            ))),
        },
        _ => Ok(None),
    }
}

/// `x = ANY(array)`: true if an element equals `x`, NULL if none does but
/// one is NULL (or the array is NULL), false otherwise.
fn array_any_eq(_: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let (Some(values), x) = (list_values(&args[0])?, &args[1]) else {
        return Ok(ScalarValue::Boolean(None));
    };
    if x.is_null() {
        return Ok(ScalarValue::Boolean(None));
    }
    let mut unknown = false;
    for v in values {
        if v.is_null() {
            unknown = true;
        } else if v.cast_to(&x.data_type()).ok().as_ref() == Some(x) {
            return Ok(ScalarValue::Boolean(Some(true)));
        }
    }
    Ok(ScalarValue::Boolean((!unknown).then_some(false)))
}

fn array_to_string(_: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let Some(values) = list_values(&args[0])? else {
        return Ok(ScalarValue::Utf8(None));
    };
    let sep = string(&args[1]).unwrap_or_default();
    let null = args.get(2).and_then(string);
    let mut parts = Vec::new();
    for v in values {
        if v.is_null() {
            if let Some(n) = &null {
                parts.push(n.clone());
            }
        } else {
            parts.push(string(&v).unwrap_or_else(|| v.to_string()));
        }
    }
    Ok(utf8(parts.join(&sep)))
}

/// `a[i]`: the i-th element (from 1), NULL outside the array.
fn array_element(_: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let (Some(values), Some(i)) = (list_values(&args[0])?, int(&args[1])) else {
        return Ok(ScalarValue::Null);
    };
    if i >= 1 && (i as usize) <= values.len() {
        Ok(values[i as usize - 1].clone())
    } else {
        Ok(ScalarValue::Null)
    }
}

/// The upper bound of dimension 1 (Stride's arrays have one); NULL for an
/// empty array, as PostgreSQL.
fn array_upper(_: &PgContext, args: &[ScalarValue]) -> DfResult<ScalarValue> {
    let (Some(values), Some(1)) = (list_values(&args[0])?, int(&args[1])) else {
        return Ok(ScalarValue::Int64(None));
    };
    Ok(ScalarValue::Int64(
        (!values.is_empty()).then_some(values.len() as i64),
    ))
}

/// `single_value(x)`: the one value of its group, NULL for none, and an
/// error (21000) for more than one — PostgreSQL's meaning of a scalar
/// subquery. `pg_compat` wraps the output of correlated scalar subqueries
/// that aggregate nothing in it, so that DataFusion decorrelates them into
/// a join without changing what they mean.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SingleValue {
    signature: Signature,
}

impl Default for SingleValue {
    fn default() -> Self {
        SingleValue {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

/// The name `pg_compat` calls [`SingleValue`] by.
pub const SINGLE_VALUE: &str = "single_value";

impl datafusion_expr::AggregateUDFImpl for SingleValue {
    fn name(&self) -> &str {
        SINGLE_VALUE
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        Ok(args[0].clone())
    }

    fn accumulator(
        &self,
        args: datafusion_expr::function::AccumulatorArgs,
    ) -> DfResult<Box<dyn datafusion_expr::Accumulator>> {
        Ok(Box::new(SingleValueAccumulator {
            value: ScalarValue::try_from(args.return_field.data_type())?,
            rows: 0,
        }))
    }

    fn state_fields(
        &self,
        args: datafusion_expr::function::StateFieldsArgs,
    ) -> DfResult<Vec<arrow::datatypes::FieldRef>> {
        Ok(vec![
            Arc::new(Field::new("value", args.return_type().clone(), true)),
            Arc::new(Field::new("rows", DataType::Int64, true)),
        ])
    }
}

#[derive(Debug)]
struct SingleValueAccumulator {
    value: ScalarValue,
    rows: i64,
}

impl SingleValueAccumulator {
    fn add(&mut self, value: ScalarValue, rows: i64) -> DfResult<()> {
        if rows == 0 {
            return Ok(());
        }
        self.rows += rows;
        if self.rows > 1 {
            return Err(DataFusionError::External(Box::new(
                stride_exec::ExecError::CardinalityViolation(
                    "more than one row returned by a subquery used as an expression".into(),
                ),
            )));
        }
        self.value = value;
        Ok(())
    }
}

impl datafusion_expr::Accumulator for SingleValueAccumulator {
    fn update_batch(&mut self, values: &[arrow::array::ArrayRef]) -> DfResult<()> {
        let v = &values[0];
        for row in 0..v.len() {
            self.add(ScalarValue::try_from_array(v, row)?, 1)?;
        }
        Ok(())
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        Ok(self.value.clone())
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.value.size()
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(vec![
            self.value.clone(),
            ScalarValue::Int64(Some(self.rows)),
        ])
    }

    fn merge_batch(&mut self, states: &[arrow::array::ArrayRef]) -> DfResult<()> {
        let rows = states[1].as_primitive::<arrow::datatypes::Int64Type>();
        for row in 0..states[0].len() {
            if rows.is_valid(row) {
                self.add(
                    ScalarValue::try_from_array(&states[0], row)?,
                    rows.value(row),
                )?;
            }
        }
        Ok(())
    }
}

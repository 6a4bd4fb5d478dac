//! PostgreSQL's system catalogs (`pg_catalog`) and the SQL standard's
//! `information_schema`, as views over Stride's live catalog and roles.
//!
//! Clients (psql's `\d` family, SQLAlchemy's reflection, pgjdbc's
//! `DatabaseMetaData`, BI tools) learn what exists by querying these
//! relations. Each view is built as a table snapshot when a statement names
//! it (like the `stride.*` system views), from the catalog, the roles and
//! the session at that moment; nothing is cached.
//!
//! Object identifiers are stable: schemas, tables and functions get an OID
//! hashed from their kind and name ([`object_oid`], FNV-1a into PostgreSQL's
//! range of user OIDs from 16384), so an OID read in one statement names the
//! same object in the next one and after a restart; built-in types and the
//! `pg_catalog` namespace keep PostgreSQL's own OIDs; roles use their role
//! ids (the bootstrap superuser is 10, as in PostgreSQL).
//!
//! Types follow the wire protocol's mapping ([`pg_type_of`], which the
//! server uses for result columns too). Relations Stride has no instances
//! of (indexes, constraints, defaults, descriptions, triggers, policies,
//! publications, sequences, inheritance, access methods, role memberships)
//! are present with PostgreSQL's columns and no rows, which is the true
//! answer for Stride.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float32Array, Int16Array, Int32Array, Int64Array, RecordBatch,
    StringArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use stride_storage::constraints::{default_text, max_chars, KeyConstraint};
use stride_storage::Table;

use crate::error::{Result, SqlError};
use crate::roles::RoleId;

/// The schema of PostgreSQL's system catalogs.
pub const PG_CATALOG: &str = "pg_catalog";
/// The SQL standard's catalog views.
pub const INFORMATION_SCHEMA: &str = "information_schema";
/// The name of Stride's one database (`current_database()`, `pg_database`).
pub const DATABASE: &str = "stride";

/// OID of the `pg_catalog` namespace (PostgreSQL's).
pub const PG_CATALOG_OID: i64 = 11;
/// OID of the `public` namespace (PostgreSQL's).
pub const PUBLIC_OID: i64 = 2200;
/// The `default` collation's OID (PostgreSQL's).
const DEFAULT_COLLATION: i64 = 100;
/// Encoding id of UTF8 in `pg_database.encoding`.
pub const UTF8_ENCODING: i64 = 6;

/// A built-in type: (oid, name, length, category, array type oid, element
/// type oid (0 unless an array), collation).
struct BuiltinType {
    oid: i64,
    name: &'static str,
    len: i16,
    category: &'static str,
    array: i64,
    elem: i64,
}

const fn ty(
    oid: i64,
    name: &'static str,
    len: i16,
    category: &'static str,
    array: i64,
    elem: i64,
) -> BuiltinType {
    BuiltinType {
        oid,
        name,
        len,
        category,
        array,
        elem,
    }
}

/// PostgreSQL's built-in types that Stride's values and catalogs are sent
/// as, and their array types.
const TYPES: &[BuiltinType] = &[
    ty(16, "bool", 1, "B", 1000, 0),
    ty(17, "bytea", -1, "U", 1001, 0),
    ty(18, "char", 1, "Z", 1002, 0),
    ty(19, "name", 64, "S", 1003, 0),
    ty(20, "int8", 8, "N", 1016, 0),
    ty(21, "int2", 2, "N", 1005, 0),
    ty(23, "int4", 4, "N", 1007, 0),
    ty(25, "text", -1, "S", 1009, 0),
    ty(26, "oid", 4, "N", 1028, 0),
    ty(700, "float4", 4, "N", 1021, 0),
    ty(701, "float8", 8, "N", 1022, 0),
    ty(705, "unknown", -2, "X", 0, 0),
    ty(1042, "bpchar", -1, "S", 1014, 0),
    ty(1043, "varchar", -1, "S", 1015, 0),
    ty(1082, "date", 4, "D", 1182, 0),
    ty(1083, "time", 8, "D", 1183, 0),
    ty(1114, "timestamp", 8, "D", 1115, 0),
    ty(1184, "timestamptz", 8, "D", 1185, 0),
    ty(1186, "interval", 16, "T", 1187, 0),
    ty(1700, "numeric", -1, "N", 1231, 0),
    ty(1000, "_bool", -1, "A", 0, 16),
    ty(1001, "_bytea", -1, "A", 0, 17),
    ty(1002, "_char", -1, "A", 0, 18),
    ty(1003, "_name", -1, "A", 0, 19),
    ty(1005, "_int2", -1, "A", 0, 21),
    ty(1007, "_int4", -1, "A", 0, 23),
    ty(1009, "_text", -1, "A", 0, 25),
    ty(1014, "_bpchar", -1, "A", 0, 1042),
    ty(1015, "_varchar", -1, "A", 0, 1043),
    ty(1016, "_int8", -1, "A", 0, 20),
    ty(1021, "_float4", -1, "A", 0, 700),
    ty(1022, "_float8", -1, "A", 0, 701),
    ty(1028, "_oid", -1, "A", 0, 26),
    ty(1115, "_timestamp", -1, "A", 0, 1114),
    ty(1182, "_date", -1, "A", 0, 1082),
    ty(1183, "_time", -1, "A", 0, 1083),
    ty(1185, "_timestamptz", -1, "A", 0, 1184),
    ty(1187, "_interval", -1, "A", 0, 1186),
    ty(1231, "_numeric", -1, "A", 0, 1700),
];

/// The PostgreSQL type (oid, length) a value of Arrow type `t` is sent as
/// over the wire and described as in the catalogs.
pub fn pg_type_of(t: &DataType) -> (u32, i16) {
    match t {
        DataType::Boolean => (16, 1),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => (21, 2),
        DataType::Int32 | DataType::UInt16 => (23, 4),
        DataType::Int64 | DataType::UInt32 => (20, 8),
        DataType::UInt64 | DataType::Decimal128(_, _) => (1700, -1),
        DataType::Float16 | DataType::Float32 => (700, 4),
        DataType::Float64 => (701, 8),
        DataType::Date32 => (1082, 4),
        DataType::Timestamp(_, None) => (1114, 8),
        DataType::Timestamp(_, Some(_)) => (1184, 8),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => (17, -1),
        DataType::Time32(_) | DataType::Time64(_) => (1083, 8),
        DataType::Interval(_) => (1186, 16),
        // A list is its element type's array type (`int4[]`, `text[]`).
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            let (elem, _) = pg_type_of(f.data_type());
            let array = TYPES
                .iter()
                .find(|t| t.oid == i64::from(elem))
                .map_or(0, |t| t.array);
            (if array > 0 { array as u32 } else { 1009 }, -1)
        }
        _ => (25, -1),
    }
}

/// The type modifier PostgreSQL would record for a column of Arrow type
/// `t` (`numeric(p,s)`: `(p << 16 | s) + 4`), -1 for none.
pub fn pg_typmod_of(t: &DataType) -> i32 {
    match t {
        DataType::Decimal128(p, s) if *s >= 0 => ((i32::from(*p) << 16) | i32::from(*s as u8)) + 4,
        _ => -1,
    }
}

/// `format_type(oid, typmod)`: the SQL name of a type; `None` for an OID
/// that is no type.
pub fn format_type(oid: i64, typmod: Option<i64>) -> Option<String> {
    let t = TYPES.iter().find(|t| t.oid == oid)?;
    let base = |oid: i64| -> String {
        match oid {
            16 => "boolean".into(),
            18 => "\"char\"".into(),
            20 => "bigint".into(),
            21 => "smallint".into(),
            23 => "integer".into(),
            700 => "real".into(),
            701 => "double precision".into(),
            1042 => "character".into(),
            1043 => "character varying".into(),
            1083 => "time without time zone".into(),
            1114 => "timestamp without time zone".into(),
            1184 => "timestamp with time zone".into(),
            other => TYPES
                .iter()
                .find(|t| t.oid == other)
                .map_or_else(|| "???".into(), |t| t.name.to_string()),
        }
    };
    if t.elem != 0 {
        return Some(format!("{}[]", base(t.elem)));
    }
    let name = base(oid);
    match (oid, typmod) {
        (1700, Some(m)) if m >= 4 => {
            let m = m - 4;
            Some(format!("numeric({},{})", (m >> 16) & 0xffff, m & 0xffff))
        }
        (1042 | 1043, Some(m)) if m >= 4 => Some(format!("{name}({})", m - 4)),
        _ => Some(name),
    }
}

/// The OID of a built-in type by name (`int4`, `integer`, `text`, ...).
pub fn type_oid_by_name(name: &str) -> Option<i64> {
    let name = name.trim().to_ascii_lowercase();
    let name = name.strip_prefix("pg_catalog.").unwrap_or(&name);
    let alias = match name {
        "boolean" => "bool",
        "integer" | "int" => "int4",
        "smallint" => "int2",
        "bigint" => "int8",
        "real" => "float4",
        "double precision" => "float8",
        "character varying" => "varchar",
        "character" | "char" => "bpchar",
        "\"char\"" => "char",
        "decimal" => "numeric",
        "timestamp without time zone" => "timestamp",
        "timestamp with time zone" => "timestamptz",
        other => other,
    };
    if let Some(elem) = alias.strip_suffix("[]") {
        let e = type_oid_by_name(elem)?;
        return TYPES.iter().find(|t| t.elem == e).map(|t| t.oid);
    }
    TYPES.iter().find(|t| t.name == alias).map(|t| t.oid)
}

/// A stable OID for a catalog object of `kind` named `name`: FNV-1a of
/// both, into [16384, 2^31).
pub fn object_oid(kind: &str, name: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in kind.bytes().chain([0u8]).chain(name.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    16384 + (h % ((1u64 << 31) - 16384)) as i64
}

/// The OID of schema `name`.
pub fn namespace_oid(name: &str) -> i64 {
    match name {
        PG_CATALOG => PG_CATALOG_OID,
        "public" => PUBLIC_OID,
        other => object_oid("namespace", other),
    }
}

/// The OID of relation `schema.name` (a table, or a catalog view).
pub fn relation_oid(schema: &str, name: &str) -> i64 {
    object_oid("relation", &format!("{schema}.{name}"))
}

/// PostgreSQL's OID of the btree access method (`pg_am`).
const BTREE_AM: i64 = 403;

/// The OID of key constraint `name` of table `schema.table` (its index
/// is the relation `schema.name`).
pub fn constraint_oid(schema: &str, table: &str, name: &str) -> i64 {
    object_oid("constraint", &format!("{schema}.{table}.{name}"))
}

/// The OID of the database.
pub fn database_oid() -> i64 {
    object_oid("database", DATABASE)
}

/// The OID of built-in function `name`.
pub fn function_oid(name: &str) -> i64 {
    object_oid("function", name)
}

/// A column kind of a catalog view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum K {
    /// `oid`, `xid`, `regproc` as numbers: int8 on the wire.
    Oid,
    I16,
    I32,
    F32,
    Bool,
    /// `text`, `name`, `"char"`, `pg_node_tree`.
    Text,
    /// `text[]`, `aclitem[]`: PostgreSQL's array text (`{a,b}`), which
    /// `array_to_string`, `= ANY` and subscripts read
    /// (`crate::pg_functions`).
    TextList,
    /// `int2vector`, `oidvector`: numbers separated by spaces (`1 2`), as
    /// PostgreSQL prints them and clients split them; the array functions
    /// read this form too ([`parse_array`]).
    Vector,
}

/// A value of a catalog view's row.
#[derive(Debug, Clone)]
enum V {
    I(i64),
    F(f64),
    B(bool),
    T(String),
    L(Vec<String>),
    N,
}

impl From<i64> for V {
    fn from(v: i64) -> V {
        V::I(v)
    }
}
impl From<i32> for V {
    fn from(v: i32) -> V {
        V::I(i64::from(v))
    }
}
impl From<bool> for V {
    fn from(v: bool) -> V {
        V::B(v)
    }
}
impl From<&str> for V {
    fn from(v: &str) -> V {
        V::T(v.to_string())
    }
}
impl From<String> for V {
    fn from(v: String) -> V {
        V::T(v)
    }
}
impl From<Option<String>> for V {
    fn from(v: Option<String>) -> V {
        v.map_or(V::N, V::T)
    }
}

type Columns = &'static [(&'static str, K)];

/// A catalog view: its schema, name and columns.
struct ViewDef {
    schema: &'static str,
    name: &'static str,
    columns: Columns,
}

use K::{Bool, Oid, Text, TextList, Vector, F32, I16, I32};

const PG_NAMESPACE: Columns = &[
    ("oid", Oid),
    ("nspname", Text),
    ("nspowner", Oid),
    ("nspacl", TextList),
];
const PG_CLASS: Columns = &[
    ("oid", Oid),
    ("relname", Text),
    ("relnamespace", Oid),
    ("reltype", Oid),
    ("reloftype", Oid),
    ("relowner", Oid),
    ("relam", Oid),
    ("relfilenode", Oid),
    ("reltablespace", Oid),
    ("relpages", I32),
    ("reltuples", F32),
    ("relallvisible", I32),
    ("reltoastrelid", Oid),
    ("relhasindex", Bool),
    ("relisshared", Bool),
    ("relpersistence", Text),
    ("relkind", Text),
    ("relnatts", I16),
    ("relchecks", I16),
    ("relhasrules", Bool),
    ("relhastriggers", Bool),
    ("relhassubclass", Bool),
    ("relrowsecurity", Bool),
    ("relforcerowsecurity", Bool),
    ("relispopulated", Bool),
    ("relreplident", Text),
    ("relispartition", Bool),
    ("relrewrite", Oid),
    ("relfrozenxid", Oid),
    ("relminmxid", Oid),
    ("relacl", TextList),
    ("reloptions", TextList),
    ("relpartbound", Text),
];
const PG_ATTRIBUTE: Columns = &[
    ("attrelid", Oid),
    ("attname", Text),
    ("atttypid", Oid),
    ("attstattarget", I16),
    ("attlen", I16),
    ("attnum", I16),
    ("attndims", I16),
    ("attcacheoff", I32),
    ("atttypmod", I32),
    ("attbyval", Bool),
    ("attalign", Text),
    ("attstorage", Text),
    ("attcompression", Text),
    ("attnotnull", Bool),
    ("atthasdef", Bool),
    ("atthasmissing", Bool),
    ("attidentity", Text),
    ("attgenerated", Text),
    ("attisdropped", Bool),
    ("attislocal", Bool),
    ("attinhcount", I16),
    ("attcollation", Oid),
    ("attacl", TextList),
    ("attoptions", TextList),
    ("attfdwoptions", TextList),
    ("attmissingval", TextList),
];
const PG_TYPE: Columns = &[
    ("oid", Oid),
    ("typname", Text),
    ("typnamespace", Oid),
    ("typowner", Oid),
    ("typlen", I16),
    ("typbyval", Bool),
    ("typtype", Text),
    ("typcategory", Text),
    ("typispreferred", Bool),
    ("typisdefined", Bool),
    ("typdelim", Text),
    ("typrelid", Oid),
    ("typsubscript", Text),
    ("typelem", Oid),
    ("typarray", Oid),
    ("typinput", Text),
    ("typoutput", Text),
    ("typreceive", Text),
    ("typsend", Text),
    ("typmodin", Text),
    ("typmodout", Text),
    ("typanalyze", Text),
    ("typalign", Text),
    ("typstorage", Text),
    ("typnotnull", Bool),
    ("typbasetype", Oid),
    ("typtypmod", I32),
    ("typndims", I32),
    ("typcollation", Oid),
    ("typdefaultbin", Text),
    ("typdefault", Text),
    ("typacl", TextList),
];
const PG_DATABASE: Columns = &[
    ("oid", Oid),
    ("datname", Text),
    ("datdba", Oid),
    ("encoding", I32),
    ("datlocprovider", Text),
    ("datistemplate", Bool),
    ("datallowconn", Bool),
    ("datconnlimit", I32),
    ("datfrozenxid", Oid),
    ("datminmxid", Oid),
    ("dattablespace", Oid),
    ("datcollate", Text),
    ("datctype", Text),
    ("daticulocale", Text),
    ("daticurules", Text),
    ("datcollversion", Text),
    ("datacl", TextList),
];
const PG_ROLES: Columns = &[
    ("rolname", Text),
    ("rolsuper", Bool),
    ("rolinherit", Bool),
    ("rolcreaterole", Bool),
    ("rolcreatedb", Bool),
    ("rolcanlogin", Bool),
    ("rolreplication", Bool),
    ("rolconnlimit", I32),
    ("rolpassword", Text),
    ("rolvaliduntil", Text),
    ("rolbypassrls", Bool),
    ("rolconfig", TextList),
    ("oid", Oid),
];
const PG_USER: Columns = &[
    ("usename", Text),
    ("usesysid", Oid),
    ("usecreatedb", Bool),
    ("usesuper", Bool),
    ("userepl", Bool),
    ("usebypassrls", Bool),
    ("passwd", Text),
    ("valuntil", Text),
    ("useconfig", TextList),
];
const PG_AUTH_MEMBERS: Columns = &[
    ("oid", Oid),
    ("roleid", Oid),
    ("member", Oid),
    ("grantor", Oid),
    ("admin_option", Bool),
    ("inherit_option", Bool),
    ("set_option", Bool),
];
const PG_INDEX: Columns = &[
    ("indexrelid", Oid),
    ("indrelid", Oid),
    ("indnatts", I16),
    ("indnkeyatts", I16),
    ("indisunique", Bool),
    ("indnullsnotdistinct", Bool),
    ("indisprimary", Bool),
    ("indisexclusion", Bool),
    ("indimmediate", Bool),
    ("indisclustered", Bool),
    ("indisvalid", Bool),
    ("indcheckxmin", Bool),
    ("indisready", Bool),
    ("indislive", Bool),
    ("indisreplident", Bool),
    ("indkey", Vector),
    ("indcollation", Vector),
    ("indclass", Vector),
    ("indoption", Vector),
    ("indexprs", Text),
    ("indpred", Text),
];
const PG_PROC: Columns = &[
    ("oid", Oid),
    ("proname", Text),
    ("pronamespace", Oid),
    ("proowner", Oid),
    ("prolang", Oid),
    ("procost", F32),
    ("prorows", F32),
    ("provariadic", Oid),
    ("prosupport", Text),
    ("prokind", Text),
    ("prosecdef", Bool),
    ("proleakproof", Bool),
    ("proisstrict", Bool),
    ("proretset", Bool),
    ("provolatile", Text),
    ("proparallel", Text),
    ("pronargs", I16),
    ("pronargdefaults", I16),
    ("prorettype", Oid),
    ("proargtypes", Vector),
    ("proallargtypes", TextList),
    ("proargmodes", TextList),
    ("proargnames", TextList),
    ("proargdefaults", Text),
    ("protrftypes", TextList),
    ("prosrc", Text),
    ("probin", Text),
    ("prosqlbody", Text),
    ("proconfig", TextList),
    ("proacl", TextList),
];
const PG_DESCRIPTION: Columns = &[
    ("objoid", Oid),
    ("classoid", Oid),
    ("objsubid", I32),
    ("description", Text),
];
const PG_SHDESCRIPTION: Columns = &[("objoid", Oid), ("classoid", Oid), ("description", Text)];
const PG_OPCLASS: Columns = &[
    ("oid", Oid),
    ("opcmethod", Oid),
    ("opcname", Text),
    ("opcnamespace", Oid),
    ("opcowner", Oid),
    ("opcfamily", Oid),
    ("opcintype", Oid),
    ("opcdefault", Bool),
    ("opckeytype", Oid),
];
const PG_AM: Columns = &[
    ("oid", Oid),
    ("amname", Text),
    ("amhandler", Text),
    ("amtype", Text),
];
const PG_SETTINGS: Columns = &[
    ("name", Text),
    ("setting", Text),
    ("unit", Text),
    ("category", Text),
    ("short_desc", Text),
    ("extra_desc", Text),
    ("context", Text),
    ("vartype", Text),
    ("source", Text),
    ("min_val", Text),
    ("max_val", Text),
    ("enumvals", TextList),
    ("boot_val", Text),
    ("reset_val", Text),
    ("sourcefile", Text),
    ("sourceline", I32),
    ("pending_restart", Bool),
];
const PG_TABLES: Columns = &[
    ("schemaname", Text),
    ("tablename", Text),
    ("tableowner", Text),
    ("tablespace", Text),
    ("hasindexes", Bool),
    ("hasrules", Bool),
    ("hastriggers", Bool),
    ("rowsecurity", Bool),
];
const PG_VIEWS: Columns = &[
    ("schemaname", Text),
    ("viewname", Text),
    ("viewowner", Text),
    ("definition", Text),
];
const PG_MATVIEWS: Columns = &[
    ("schemaname", Text),
    ("matviewname", Text),
    ("matviewowner", Text),
    ("tablespace", Text),
    ("hasindexes", Bool),
    ("ispopulated", Bool),
    ("definition", Text),
];
const PG_ATTRDEF: Columns = &[
    ("oid", Oid),
    ("adrelid", Oid),
    ("adnum", I16),
    ("adbin", Text),
];
const PG_COLLATION: Columns = &[
    ("oid", Oid),
    ("collname", Text),
    ("collnamespace", Oid),
    ("collowner", Oid),
    ("collprovider", Text),
    ("collisdeterministic", Bool),
    ("collencoding", I32),
    ("collcollate", Text),
    ("collctype", Text),
    ("colliculocale", Text),
    ("collicurules", Text),
    ("collversion", Text),
];
const PG_CONSTRAINT: Columns = &[
    ("oid", Oid),
    ("conname", Text),
    ("connamespace", Oid),
    ("contype", Text),
    ("condeferrable", Bool),
    ("condeferred", Bool),
    ("convalidated", Bool),
    ("conrelid", Oid),
    ("contypid", Oid),
    ("conindid", Oid),
    ("conparentid", Oid),
    ("confrelid", Oid),
    ("confupdtype", Text),
    ("confdeltype", Text),
    ("confmatchtype", Text),
    ("conislocal", Bool),
    ("coninhcount", I16),
    ("connoinherit", Bool),
    ("conkey", TextList),
    ("confkey", TextList),
    ("conpfeqop", TextList),
    ("conppeqop", TextList),
    ("conffeqop", TextList),
    ("confdelsetcols", TextList),
    ("conexclop", TextList),
    ("conbin", Text),
];
const PG_INHERITS: Columns = &[
    ("inhrelid", Oid),
    ("inhparent", Oid),
    ("inhseqno", I32),
    ("inhdetachpending", Bool),
];
const PG_POLICY: Columns = &[
    ("oid", Oid),
    ("polname", Text),
    ("polrelid", Oid),
    ("polcmd", Text),
    ("polpermissive", Bool),
    ("polroles", TextList),
    ("polqual", Text),
    ("polwithcheck", Text),
];
const PG_STATISTIC_EXT: Columns = &[
    ("oid", Oid),
    ("stxrelid", Oid),
    ("stxname", Text),
    ("stxnamespace", Oid),
    ("stxowner", Oid),
    ("stxstattarget", I32),
    ("stxkeys", Vector),
    ("stxkind", TextList),
    ("stxexprs", Text),
];
const PG_PUBLICATION: Columns = &[
    ("oid", Oid),
    ("pubname", Text),
    ("pubowner", Oid),
    ("puballtables", Bool),
    ("pubinsert", Bool),
    ("pubupdate", Bool),
    ("pubdelete", Bool),
    ("pubtruncate", Bool),
    ("pubviaroot", Bool),
];
const PG_PUBLICATION_REL: Columns = &[
    ("oid", Oid),
    ("prpubid", Oid),
    ("prrelid", Oid),
    ("prqual", Text),
    ("prattrs", TextList),
];
const PG_PUBLICATION_NAMESPACE: Columns = &[("oid", Oid), ("pnpubid", Oid), ("pnnspid", Oid)];
const PG_TRIGGER: Columns = &[
    ("oid", Oid),
    ("tgrelid", Oid),
    ("tgparentid", Oid),
    ("tgname", Text),
    ("tgfoid", Oid),
    ("tgtype", I16),
    ("tgenabled", Text),
    ("tgisinternal", Bool),
    ("tgconstrrelid", Oid),
    ("tgconstrindid", Oid),
    ("tgconstraint", Oid),
    ("tgdeferrable", Bool),
    ("tginitdeferred", Bool),
    ("tgnargs", I16),
    ("tgattr", Vector),
    ("tgqual", Text),
];
const PG_SEQUENCE: Columns = &[
    ("seqrelid", Oid),
    ("seqtypid", Oid),
    ("seqstart", Oid),
    ("seqincrement", Oid),
    ("seqmax", Oid),
    ("seqmin", Oid),
    ("seqcache", Oid),
    ("seqcycle", Bool),
];
const PG_ENUM: Columns = &[
    ("oid", Oid),
    ("enumtypid", Oid),
    ("enumsortorder", F32),
    ("enumlabel", Text),
];
const PG_TABLESPACE: Columns = &[
    ("oid", Oid),
    ("spcname", Text),
    ("spcowner", Oid),
    ("spcacl", TextList),
    ("spcoptions", TextList),
];
const PG_EXTENSION: Columns = &[
    ("oid", Oid),
    ("extname", Text),
    ("extowner", Oid),
    ("extnamespace", Oid),
    ("extrelocatable", Bool),
    ("extversion", Text),
    ("extconfig", TextList),
    ("extcondition", TextList),
];
const PG_FOREIGN_TABLE: Columns = &[("ftrelid", Oid), ("ftserver", Oid), ("ftoptions", TextList)];
const PG_PARTITIONED_TABLE: Columns = &[
    ("partrelid", Oid),
    ("partstrat", Text),
    ("partnatts", I16),
    ("partdefid", Oid),
    ("partattrs", Vector),
    ("partclass", Vector),
    ("partcollation", Vector),
    ("partexprs", Text),
];
const PG_REWRITE: Columns = &[
    ("oid", Oid),
    ("rulename", Text),
    ("ev_class", Oid),
    ("ev_type", Text),
    ("ev_enabled", Text),
    ("is_instead", Bool),
    ("ev_qual", Text),
    ("ev_action", Text),
];
const PG_DEPEND: Columns = &[
    ("classid", Oid),
    ("objid", Oid),
    ("objsubid", I32),
    ("refclassid", Oid),
    ("refobjid", Oid),
    ("refobjsubid", I32),
    ("deptype", Text),
];

const IS_SCHEMATA: Columns = &[
    ("catalog_name", Text),
    ("schema_name", Text),
    ("schema_owner", Text),
    ("default_character_set_catalog", Text),
    ("default_character_set_schema", Text),
    ("default_character_set_name", Text),
    ("sql_path", Text),
];
const IS_TABLES: Columns = &[
    ("table_catalog", Text),
    ("table_schema", Text),
    ("table_name", Text),
    ("table_type", Text),
    ("self_referencing_column_name", Text),
    ("reference_generation", Text),
    ("user_defined_type_catalog", Text),
    ("user_defined_type_schema", Text),
    ("user_defined_type_name", Text),
    ("is_insertable_into", Text),
    ("is_typed", Text),
    ("commit_action", Text),
];
const IS_COLUMNS: Columns = &[
    ("table_catalog", Text),
    ("table_schema", Text),
    ("table_name", Text),
    ("column_name", Text),
    ("ordinal_position", I32),
    ("column_default", Text),
    ("is_nullable", Text),
    ("data_type", Text),
    ("character_maximum_length", I32),
    ("character_octet_length", I32),
    ("numeric_precision", I32),
    ("numeric_precision_radix", I32),
    ("numeric_scale", I32),
    ("datetime_precision", I32),
    ("interval_type", Text),
    ("interval_precision", I32),
    ("character_set_catalog", Text),
    ("character_set_schema", Text),
    ("character_set_name", Text),
    ("collation_catalog", Text),
    ("collation_schema", Text),
    ("collation_name", Text),
    ("domain_catalog", Text),
    ("domain_schema", Text),
    ("domain_name", Text),
    ("udt_catalog", Text),
    ("udt_schema", Text),
    ("udt_name", Text),
    ("scope_catalog", Text),
    ("scope_schema", Text),
    ("scope_name", Text),
    ("maximum_cardinality", I32),
    ("dtd_identifier", Text),
    ("is_self_referencing", Text),
    ("is_identity", Text),
    ("identity_generation", Text),
    ("identity_start", Text),
    ("identity_increment", Text),
    ("identity_maximum", Text),
    ("identity_minimum", Text),
    ("identity_cycle", Text),
    ("is_generated", Text),
    ("generation_expression", Text),
    ("is_updatable", Text),
];
const IS_VIEWS: Columns = &[
    ("table_catalog", Text),
    ("table_schema", Text),
    ("table_name", Text),
    ("view_definition", Text),
    ("check_option", Text),
    ("is_updatable", Text),
    ("is_insertable_into", Text),
    ("is_trigger_updatable", Text),
    ("is_trigger_deletable", Text),
    ("is_trigger_insertable_into", Text),
];

const IS_TABLE_CONSTRAINTS: Columns = &[
    ("constraint_catalog", Text),
    ("constraint_schema", Text),
    ("constraint_name", Text),
    ("table_catalog", Text),
    ("table_schema", Text),
    ("table_name", Text),
    ("constraint_type", Text),
    ("is_deferrable", Text),
    ("initially_deferred", Text),
    ("enforced", Text),
    ("nulls_distinct", Text),
];
const IS_KEY_COLUMN_USAGE: Columns = &[
    ("constraint_catalog", Text),
    ("constraint_schema", Text),
    ("constraint_name", Text),
    ("table_catalog", Text),
    ("table_schema", Text),
    ("table_name", Text),
    ("column_name", Text),
    ("ordinal_position", I32),
    ("position_in_unique_constraint", I32),
];

const fn def(schema: &'static str, name: &'static str, columns: Columns) -> ViewDef {
    ViewDef {
        schema,
        name,
        columns,
    }
}

/// Every catalog view.
const VIEWS: &[ViewDef] = &[
    def(PG_CATALOG, "pg_namespace", PG_NAMESPACE),
    def(PG_CATALOG, "pg_class", PG_CLASS),
    def(PG_CATALOG, "pg_attribute", PG_ATTRIBUTE),
    def(PG_CATALOG, "pg_type", PG_TYPE),
    def(PG_CATALOG, "pg_database", PG_DATABASE),
    def(PG_CATALOG, "pg_roles", PG_ROLES),
    def(PG_CATALOG, "pg_user", PG_USER),
    def(PG_CATALOG, "pg_auth_members", PG_AUTH_MEMBERS),
    def(PG_CATALOG, "pg_index", PG_INDEX),
    def(PG_CATALOG, "pg_proc", PG_PROC),
    def(PG_CATALOG, "pg_description", PG_DESCRIPTION),
    def(PG_CATALOG, "pg_shdescription", PG_SHDESCRIPTION),
    def(PG_CATALOG, "pg_am", PG_AM),
    def(PG_CATALOG, "pg_opclass", PG_OPCLASS),
    def(PG_CATALOG, "pg_settings", PG_SETTINGS),
    def(PG_CATALOG, "pg_tables", PG_TABLES),
    def(PG_CATALOG, "pg_views", PG_VIEWS),
    def(PG_CATALOG, "pg_matviews", PG_MATVIEWS),
    def(PG_CATALOG, "pg_attrdef", PG_ATTRDEF),
    def(PG_CATALOG, "pg_collation", PG_COLLATION),
    def(PG_CATALOG, "pg_constraint", PG_CONSTRAINT),
    def(PG_CATALOG, "pg_inherits", PG_INHERITS),
    def(PG_CATALOG, "pg_policy", PG_POLICY),
    def(PG_CATALOG, "pg_statistic_ext", PG_STATISTIC_EXT),
    def(PG_CATALOG, "pg_publication", PG_PUBLICATION),
    def(PG_CATALOG, "pg_publication_rel", PG_PUBLICATION_REL),
    def(
        PG_CATALOG,
        "pg_publication_namespace",
        PG_PUBLICATION_NAMESPACE,
    ),
    def(PG_CATALOG, "pg_trigger", PG_TRIGGER),
    def(PG_CATALOG, "pg_sequence", PG_SEQUENCE),
    def(PG_CATALOG, "pg_enum", PG_ENUM),
    def(PG_CATALOG, "pg_tablespace", PG_TABLESPACE),
    def(PG_CATALOG, "pg_extension", PG_EXTENSION),
    def(PG_CATALOG, "pg_foreign_table", PG_FOREIGN_TABLE),
    def(PG_CATALOG, "pg_partitioned_table", PG_PARTITIONED_TABLE),
    def(PG_CATALOG, "pg_rewrite", PG_REWRITE),
    def(PG_CATALOG, "pg_depend", PG_DEPEND),
    def(INFORMATION_SCHEMA, "schemata", IS_SCHEMATA),
    def(INFORMATION_SCHEMA, "tables", IS_TABLES),
    def(INFORMATION_SCHEMA, "columns", IS_COLUMNS),
    def(INFORMATION_SCHEMA, "views", IS_VIEWS),
    def(
        INFORMATION_SCHEMA,
        "table_constraints",
        IS_TABLE_CONSTRAINTS,
    ),
    def(INFORMATION_SCHEMA, "key_column_usage", IS_KEY_COLUMN_USAGE),
];

/// Whether `schema.name` is a catalog view.
pub fn is_view(schema: &str, name: &str) -> bool {
    VIEWS.iter().any(|v| v.schema == schema && v.name == name)
}

/// Whether `schema` holds catalog views (`pg_catalog`,
/// `information_schema`).
pub fn is_catalog_schema(schema: &str) -> bool {
    schema == PG_CATALOG || schema == INFORMATION_SCHEMA
}

/// What the views are built from: the engine's live state as one session
/// sees it.
pub struct CatalogState<'a> {
    pub catalog: &'a stride_storage::Catalog,
    pub roles: &'a crate::roles::Roles,
    /// The reading session's role (information_schema lists only what it
    /// may use).
    pub role: RoleId,
    /// The session's schema search path (`search_path`).
    pub search_path: &'a str,
    /// The session's settings with their values (`pg_settings`).
    pub settings: Vec<(String, String)>,
    /// Built-in function names with their kind (`f`: scalar, `a`:
    /// aggregate) for `pg_proc`.
    pub functions: Vec<(String, &'static str)>,
}

/// A user table in the catalog: schema, name, snapshot.
struct UserTable {
    schema: String,
    table: Arc<Table>,
}

impl CatalogState<'_> {
    fn schemas(&self) -> Vec<String> {
        let mut names = self.catalog.schema_names();
        for s in [PG_CATALOG, INFORMATION_SCHEMA] {
            if !names.iter().any(|n| n == s) {
                names.push(s.to_string());
            }
        }
        names.sort();
        names
    }

    fn tables(&self) -> Vec<UserTable> {
        let mut out = Vec::new();
        for schema in self.catalog.schema_names() {
            for name in self.catalog.table_names(&schema).unwrap_or_default() {
                if let Ok(table) = self.catalog.table(&schema, &name) {
                    out.push(UserTable {
                        schema: schema.clone(),
                        table,
                    });
                }
            }
        }
        out
    }

    fn role_name(&self, id: RoleId) -> String {
        self.roles
            .get(id)
            .map_or_else(|| format!("unknown (OID={id})"), |r| r.name)
    }

    /// Builds view `schema.name`; `None`: no such view.
    pub fn view(&self, schema: &str, name: &str) -> Result<Option<Table>> {
        let Some(def) = VIEWS.iter().find(|v| v.schema == schema && v.name == name) else {
            return Ok(None);
        };
        let rows = match (schema, name) {
            (PG_CATALOG, "pg_namespace") => self.pg_namespace(),
            (PG_CATALOG, "pg_class") => self.pg_class(),
            (PG_CATALOG, "pg_attribute") => self.pg_attribute(),
            (PG_CATALOG, "pg_type") => pg_type_rows(),
            (PG_CATALOG, "pg_database") => vec![vec![
                database_oid().into(),
                DATABASE.into(),
                i64::from(crate::roles::BOOTSTRAP_ROLE_ID).into(),
                UTF8_ENCODING.into(),
                "c".into(),
                false.into(),
                true.into(),
                (-1i64).into(),
                0i64.into(),
                0i64.into(),
                1663i64.into(),
                "C".into(),
                "C".into(),
                V::N,
                V::N,
                V::N,
                V::N,
            ]],
            (PG_CATALOG, "pg_roles") => self.pg_roles(),
            (PG_CATALOG, "pg_user") => self.pg_user(),
            (PG_CATALOG, "pg_proc") => self.pg_proc(),
            (PG_CATALOG, "pg_settings") => self.pg_settings(),
            (PG_CATALOG, "pg_tables") => self
                .tables()
                .iter()
                .map(|t| {
                    let owner = self.roles.owner(&t.schema, t.table.name());
                    vec![
                        t.schema.clone().into(),
                        t.table.name().into(),
                        self.role_name(owner).into(),
                        V::N,
                        false.into(),
                        false.into(),
                        false.into(),
                        false.into(),
                    ]
                })
                .collect(),
            (PG_CATALOG, "pg_collation") => [
                (DEFAULT_COLLATION, "default", "d"),
                (950, "C", "c"),
                (951, "POSIX", "c"),
            ]
            .into_iter()
            .map(|(oid, name, provider)| {
                let locale = if provider == "d" { V::N } else { name.into() };
                vec![
                    oid.into(),
                    name.into(),
                    PG_CATALOG_OID.into(),
                    i64::from(crate::roles::BOOTSTRAP_ROLE_ID).into(),
                    provider.into(),
                    true.into(),
                    (-1i64).into(),
                    locale.clone(),
                    locale,
                    V::N,
                    V::N,
                    V::N,
                ]
            })
            .collect(),
            (PG_CATALOG, "pg_tablespace") => [(1663i64, "pg_default"), (1664, "pg_global")]
                .into_iter()
                .map(|(oid, name)| {
                    vec![
                        oid.into(),
                        name.into(),
                        i64::from(crate::roles::BOOTSTRAP_ROLE_ID).into(),
                        V::N,
                        V::N,
                    ]
                })
                .collect(),
            (PG_CATALOG, "pg_am") => vec![
                vec![
                    BTREE_AM.into(),
                    "btree".into(),
                    "bthandler".into(),
                    "i".into(),
                ],
                vec![
                    2i64.into(),
                    "heap".into(),
                    "heap_tableam_handler".into(),
                    "t".into(),
                ],
            ],
            (INFORMATION_SCHEMA, "schemata") => self.is_schemata(),
            (INFORMATION_SCHEMA, "tables") => self.is_tables(),
            (INFORMATION_SCHEMA, "columns") => self.is_columns(),
            (PG_CATALOG, "pg_constraint") => self.pg_constraint(),
            (PG_CATALOG, "pg_attrdef") => self.pg_attrdef(),
            (PG_CATALOG, "pg_index") => self.pg_index(),
            (INFORMATION_SCHEMA, "table_constraints") => self.is_table_constraints(),
            (INFORMATION_SCHEMA, "key_column_usage") => self.is_key_column_usage(),
            // Relations of objects Stride has none of.
            _ => Vec::new(),
        };
        build(def.name, def.columns, rows).map(Some)
    }

    /// One row per column `DEFAULT`; `adbin` holds the expression's SQL
    /// text, which `pg_get_expr` gives back as it is.
    fn pg_attrdef(&self) -> Vec<Vec<V>> {
        let mut rows = Vec::new();
        for t in self.tables() {
            let rel = relation_oid(&t.schema, t.table.name());
            for (i, f) in t.table.schema().fields().iter().enumerate() {
                if let Some(sql) = default_text(f) {
                    rows.push(vec![
                        object_oid("attrdef", &format!("{rel}.{}", i + 1)).into(),
                        rel.into(),
                        ((i + 1) as i64).into(),
                        sql.into(),
                    ]);
                }
            }
        }
        rows
    }

    /// Every declared key of every table: (schema, table, key).
    fn keys(&self) -> Vec<(String, Arc<Table>, KeyConstraint)> {
        let mut out = Vec::new();
        for t in self.tables() {
            for k in t.table.keys() {
                out.push((t.schema.clone(), t.table.clone(), k.clone()));
            }
        }
        out
    }

    /// One row per key: `p` primary, `u` unique, backed by the index of
    /// the key's name, its columns' numbers in `conkey`.
    fn pg_constraint(&self) -> Vec<Vec<V>> {
        self.keys()
            .into_iter()
            .map(|(schema, table, key)| {
                let columns: Vec<String> =
                    key.columns.iter().map(|c| (c + 1).to_string()).collect();
                let mut row: Vec<V> = vec![
                    constraint_oid(&schema, table.name(), &key.name).into(),
                    key.name.clone().into(),
                    namespace_oid(&schema).into(),
                    if key.primary { "p" } else { "u" }.into(),
                    false.into(),
                    false.into(),
                    true.into(),
                    relation_oid(&schema, table.name()).into(),
                    0i64.into(),
                    relation_oid(&schema, &key.name).into(),
                    0i64.into(),
                    0i64.into(),
                    " ".into(),
                    " ".into(),
                    " ".into(),
                    true.into(),
                    0i64.into(),
                    true.into(),
                    V::L(columns),
                ];
                row.extend(std::iter::repeat_n(V::N, PG_CONSTRAINT.len() - row.len()));
                row
            })
            .collect()
    }

    /// One row per key's index (unique; primary for a primary key).
    fn pg_index(&self) -> Vec<Vec<V>> {
        self.keys()
            .into_iter()
            .map(|(schema, table, key)| {
                let n = key.columns.len() as i64;
                let columns: Vec<String> =
                    key.columns.iter().map(|c| (c + 1).to_string()).collect();
                let zeros = vec!["0".to_string(); key.columns.len()];
                vec![
                    relation_oid(&schema, &key.name).into(),
                    relation_oid(&schema, table.name()).into(),
                    n.into(),
                    n.into(),
                    true.into(),
                    false.into(),
                    key.primary.into(),
                    false.into(),
                    true.into(),
                    false.into(),
                    true.into(),
                    false.into(),
                    true.into(),
                    true.into(),
                    false.into(),
                    V::L(columns),
                    V::L(zeros.clone()),
                    V::L(zeros.clone()),
                    V::L(zeros),
                    V::N,
                    V::N,
                ]
            })
            .collect()
    }

    fn is_table_constraints(&self) -> Vec<Vec<V>> {
        self.keys()
            .into_iter()
            .filter(|(schema, table, _)| self.may_use(schema, table.name()))
            .map(|(schema, table, key)| {
                vec![
                    DATABASE.into(),
                    schema.clone().into(),
                    key.name.clone().into(),
                    DATABASE.into(),
                    schema.into(),
                    table.name().into(),
                    if key.primary { "PRIMARY KEY" } else { "UNIQUE" }.into(),
                    "NO".into(),
                    "NO".into(),
                    "YES".into(),
                    "YES".into(),
                ]
            })
            .collect()
    }

    fn is_key_column_usage(&self) -> Vec<Vec<V>> {
        let mut rows = Vec::new();
        for (schema, table, key) in self.keys() {
            if !self.may_use(&schema, table.name()) {
                continue;
            }
            for (i, &c) in key.columns.iter().enumerate() {
                rows.push(vec![
                    DATABASE.into(),
                    schema.clone().into(),
                    key.name.clone().into(),
                    DATABASE.into(),
                    schema.clone().into(),
                    table.name().into(),
                    table.schema().field(c).name().clone().into(),
                    ((i + 1) as i64).into(),
                    V::N,
                ]);
            }
        }
        rows
    }

    fn pg_namespace(&self) -> Vec<Vec<V>> {
        self.schemas()
            .into_iter()
            .map(|s| {
                vec![
                    namespace_oid(&s).into(),
                    s.into(),
                    i64::from(crate::roles::BOOTSTRAP_ROLE_ID).into(),
                    V::N,
                ]
            })
            .collect()
    }

    fn pg_class(&self) -> Vec<Vec<V>> {
        let class_row = |schema: &str,
                         name: &str,
                         kind: &str,
                         owner: RoleId,
                         columns: usize,
                         rows: f64,
                         has_index: bool|
         -> Vec<V> {
            vec![
                relation_oid(schema, name).into(),
                name.into(),
                namespace_oid(schema).into(),
                0i64.into(),
                0i64.into(),
                i64::from(owner).into(),
                // relam: a key's index is shown as a btree (the access
                // method PostgreSQL would use; Stride checks keys in a hash
                // set), tables and views have none.
                if kind == "i" { BTREE_AM } else { 0 }.into(),
                0i64.into(),
                0i64.into(),
                0i64.into(),
                V::F(rows),
                0i64.into(),
                0i64.into(),
                has_index.into(),
                false.into(),
                "p".into(),
                kind.into(),
                (columns as i64).into(),
                0i64.into(),
                false.into(),
                false.into(),
                false.into(),
                false.into(),
                false.into(),
                true.into(),
                // Tables have the default replica identity (their primary
                // key: none), views none, as in PostgreSQL.
                if kind == "r" { "d" } else { "n" }.into(),
                false.into(),
                0i64.into(),
                0i64.into(),
                0i64.into(),
                V::N,
                V::N,
                V::N,
            ]
        };
        let mut rows: Vec<Vec<V>> = self
            .tables()
            .iter()
            .map(|t| {
                class_row(
                    &t.schema,
                    t.table.name(),
                    "r",
                    self.roles.owner(&t.schema, t.table.name()),
                    t.table.schema().fields().len(),
                    t.table.num_rows() as f64,
                    !t.table.keys().is_empty(),
                )
            })
            .collect();
        for (schema, table, key) in self.keys() {
            rows.push(class_row(
                &schema,
                &key.name,
                "i",
                self.roles.owner(&schema, table.name()),
                key.columns.len(),
                table.num_rows() as f64,
                false,
            ));
        }
        for v in VIEWS {
            rows.push(class_row(
                v.schema,
                v.name,
                "v",
                crate::roles::BOOTSTRAP_ROLE_ID,
                v.columns.len(),
                -1.0,
                false,
            ));
        }
        rows
    }

    fn pg_attribute(&self) -> Vec<Vec<V>> {
        let attr_row = |rel: i64,
                        name: &str,
                        num: usize,
                        t: &DataType,
                        nullable: bool,
                        chars: Option<usize>,
                        has_default: bool| {
            // A `varchar(n)` column is `character varying` with typmod n + 4.
            let (oid, len) = match chars {
                Some(_) => (1043, -1),
                None => pg_type_of(t),
            };
            let typmod = chars.map_or_else(|| pg_typmod_of(t), |n| n as i32 + 4);
            let collation = if oid == 25 || oid == 1043 {
                DEFAULT_COLLATION
            } else {
                0
            };
            vec![
                rel.into(),
                name.into(),
                i64::from(oid).into(),
                (-1i64).into(),
                i64::from(len).into(),
                (num as i64).into(),
                0i64.into(),
                (-1i64).into(),
                i64::from(typmod).into(),
                (len > 0 && len <= 8).into(),
                "i".into(),
                if len > 0 { "p" } else { "x" }.into(),
                "".into(),
                (!nullable).into(),
                has_default.into(),
                false.into(),
                "".into(),
                "".into(),
                false.into(),
                true.into(),
                0i64.into(),
                collation.into(),
                V::N,
                V::N,
                V::N,
                V::N,
            ]
        };
        let mut rows = Vec::new();
        for t in self.tables() {
            let rel = relation_oid(&t.schema, t.table.name());
            for (i, f) in t.table.schema().fields().iter().enumerate() {
                rows.push(attr_row(
                    rel,
                    f.name(),
                    i + 1,
                    f.data_type(),
                    f.is_nullable(),
                    max_chars(f),
                    default_text(f).is_some(),
                ));
            }
        }
        for v in VIEWS {
            let rel = relation_oid(v.schema, v.name);
            for (i, (name, kind)) in v.columns.iter().enumerate() {
                rows.push(attr_row(
                    rel,
                    name,
                    i + 1,
                    &arrow_type(*kind),
                    true,
                    None,
                    false,
                ));
            }
        }
        rows
    }

    fn pg_roles(&self) -> Vec<Vec<V>> {
        self.roles
            .list()
            .into_iter()
            .map(|r| {
                vec![
                    r.name.clone().into(),
                    r.superuser.into(),
                    true.into(),
                    r.superuser.into(),
                    r.superuser.into(),
                    r.login.into(),
                    false.into(),
                    (-1i64).into(),
                    "********".into(),
                    V::N,
                    r.superuser.into(),
                    V::N,
                    i64::from(r.id).into(),
                ]
            })
            .collect()
    }

    fn pg_user(&self) -> Vec<Vec<V>> {
        self.roles
            .list()
            .into_iter()
            .filter(|r| r.login)
            .map(|r| {
                vec![
                    r.name.clone().into(),
                    i64::from(r.id).into(),
                    r.superuser.into(),
                    r.superuser.into(),
                    false.into(),
                    r.superuser.into(),
                    "********".into(),
                    V::N,
                    V::N,
                ]
            })
            .collect()
    }

    fn pg_proc(&self) -> Vec<Vec<V>> {
        self.functions
            .iter()
            .map(|(name, kind)| {
                vec![
                    function_oid(name).into(),
                    name.clone().into(),
                    PG_CATALOG_OID.into(),
                    i64::from(crate::roles::BOOTSTRAP_ROLE_ID).into(),
                    12i64.into(),
                    V::F(1.0),
                    V::F(0.0),
                    0i64.into(),
                    "-".into(),
                    (*kind).into(),
                    false.into(),
                    false.into(),
                    false.into(),
                    false.into(),
                    "i".into(),
                    "s".into(),
                    0i64.into(),
                    0i64.into(),
                    0i64.into(),
                    V::L(Vec::new()),
                    V::N,
                    V::N,
                    V::N,
                    V::N,
                    V::N,
                    name.clone().into(),
                    V::N,
                    V::N,
                    V::N,
                    V::N,
                ]
            })
            .collect()
    }

    fn pg_settings(&self) -> Vec<Vec<V>> {
        self.settings
            .iter()
            .map(|(name, value)| {
                let (unit, vartype) = match name.as_str() {
                    "statement_timeout" => (V::from("ms"), "integer"),
                    _ => (V::N, "string"),
                };
                vec![
                    name.clone().into(),
                    value.clone().into(),
                    unit,
                    if name.starts_with("stride.") {
                        "Stride"
                    } else {
                        "Client Connection Defaults"
                    }
                    .into(),
                    V::N,
                    V::N,
                    "user".into(),
                    vartype.into(),
                    "session".into(),
                    V::N,
                    V::N,
                    V::N,
                    V::N,
                    V::N,
                    V::N,
                    V::N,
                    false.into(),
                ]
            })
            .collect()
    }

    fn may_use(&self, schema: &str, table: &str) -> bool {
        use crate::roles::TablePrivilege::*;
        [Select, Insert, Update, Delete]
            .into_iter()
            .any(|p| self.roles.check_table(self.role, schema, table, p).is_ok())
    }

    fn is_schemata(&self) -> Vec<Vec<V>> {
        self.schemas()
            .into_iter()
            .map(|s| {
                vec![
                    DATABASE.into(),
                    s.into(),
                    crate::roles::BOOTSTRAP_ROLE.into(),
                    V::N,
                    V::N,
                    V::N,
                    V::N,
                ]
            })
            .collect()
    }

    fn is_tables(&self) -> Vec<Vec<V>> {
        let row = |schema: &str, name: &str, kind: &str, insertable: bool| -> Vec<V> {
            vec![
                DATABASE.into(),
                schema.into(),
                name.into(),
                kind.into(),
                V::N,
                V::N,
                V::N,
                V::N,
                V::N,
                if insertable { "YES" } else { "NO" }.into(),
                "NO".into(),
                V::N,
            ]
        };
        let mut rows: Vec<Vec<V>> = self
            .tables()
            .iter()
            .filter(|t| self.may_use(&t.schema, t.table.name()))
            .map(|t| row(&t.schema, t.table.name(), "BASE TABLE", true))
            .collect();
        for v in VIEWS {
            rows.push(row(v.schema, v.name, "VIEW", false));
        }
        rows
    }

    fn is_columns(&self) -> Vec<Vec<V>> {
        let mut rows = Vec::new();
        let mut add = |schema: &str,
                       table: &str,
                       pos: usize,
                       name: &str,
                       t: &DataType,
                       nullable,
                       chars: Option<usize>,
                       default: Option<&str>| {
            let oid = if chars.is_some() {
                1043
            } else {
                pg_type_of(t).0
            };
            let udt = TYPES
                .iter()
                .find(|x| x.oid == i64::from(oid))
                .map_or("text", |x| x.name);
            let data_type = match oid {
                25 => "text".to_string(),
                1700 => "numeric".to_string(),
                _ => format_type(i64::from(oid), None).unwrap_or_else(|| udt.to_string()),
            };
            let (precision, radix, scale): (V, V, V) = match t {
                DataType::Int8 | DataType::Int16 | DataType::UInt8 => {
                    (16.into(), 2.into(), 0.into())
                }
                DataType::Int32 | DataType::UInt16 => (32.into(), 2.into(), 0.into()),
                DataType::Int64 | DataType::UInt32 => (64.into(), 2.into(), 0.into()),
                DataType::Float16 | DataType::Float32 => (24.into(), 2.into(), V::N),
                DataType::Float64 => (53.into(), 2.into(), V::N),
                DataType::Decimal128(p, s) => {
                    (i64::from(*p).into(), 10.into(), i64::from(*s).into())
                }
                _ => (V::N, V::N, V::N),
            };
            let datetime = match t {
                DataType::Date32 => V::I(0),
                DataType::Timestamp(unit, _) => V::I(match unit {
                    TimeUnit::Second => 0,
                    TimeUnit::Millisecond => 3,
                    _ => 6,
                }),
                _ => V::N,
            };
            // character_maximum_length, and octets as PostgreSQL's
            // UTF-8 server counts them (4 per character, at most 1 GiB).
            let (length, octet) = match chars {
                Some(n) => (V::I(n as i64), V::I((4 * n as i64).min(1 << 30))),
                None if oid == 25 => (V::N, V::I(1 << 30)),
                None => (V::N, V::N),
            };
            let mut row: Vec<V> = vec![
                DATABASE.into(),
                schema.into(),
                table.into(),
                name.into(),
                (pos as i64).into(),
                default.map_or(V::N, V::from),
                if nullable { "YES" } else { "NO" }.into(),
                data_type.into(),
                length,
                octet,
                precision,
                radix,
                scale,
                datetime,
                V::N,
                V::N,
            ];
            row.extend(std::iter::repeat_n(V::N, 3));
            let collation = if oid == 25 || oid == 1043 {
                V::from("default")
            } else {
                V::N
            };
            row.extend([V::N, V::N, collation]);
            row.extend(std::iter::repeat_n(V::N, 3));
            row.extend([DATABASE.into(), PG_CATALOG.into(), udt.into()]);
            row.extend(std::iter::repeat_n(V::N, 4));
            row.push((pos as i64).to_string().into());
            row.extend(["NO".into(), "NO".into()]);
            row.extend(std::iter::repeat_n(V::N, 5));
            row.extend(["NO".into(), "NEVER".into(), V::N, "YES".into()]);
            rows.push(row);
        };
        for t in self.tables() {
            if !self.may_use(&t.schema, t.table.name()) {
                continue;
            }
            for (i, f) in t.table.schema().fields().iter().enumerate() {
                add(
                    &t.schema,
                    t.table.name(),
                    i + 1,
                    f.name(),
                    f.data_type(),
                    f.is_nullable(),
                    max_chars(f),
                    default_text(f),
                );
            }
        }
        for v in VIEWS {
            for (i, (name, kind)) in v.columns.iter().enumerate() {
                add(
                    v.schema,
                    v.name,
                    i + 1,
                    name,
                    &arrow_type(*kind),
                    true,
                    None,
                    None,
                );
            }
        }
        rows
    }

    /// The OID of the relation a `regclass` text names (`name`,
    /// `schema.name`, quoted parts), searched as PostgreSQL does: catalog
    /// views first, then the search path.
    pub fn regclass(&self, text: &str) -> Option<i64> {
        let parts = split_name(text);
        match parts.as_slice() {
            [name] => {
                if is_view(PG_CATALOG, name) {
                    return Some(relation_oid(PG_CATALOG, name));
                }
                let schema = self.search_path;
                self.catalog
                    .table(schema, name)
                    .ok()
                    .map(|_| relation_oid(schema, name))
            }
            [schema, name] => (is_view(schema, name) || self.catalog.table(schema, name).is_ok())
                .then(|| relation_oid(schema, name)),
            _ => None,
        }
    }

    /// The name of relation `oid` as `regclass` prints it (qualified
    /// unless visible); `None` for an unknown OID.
    pub fn regclass_name(&self, oid: i64) -> Option<String> {
        for t in self.tables() {
            if relation_oid(&t.schema, t.table.name()) == oid {
                let name = quote_ident(t.table.name());
                return Some(if t.schema == self.search_path {
                    name
                } else {
                    format!("{}.{name}", quote_ident(&t.schema))
                });
            }
        }
        VIEWS
            .iter()
            .find(|v| relation_oid(v.schema, v.name) == oid)
            .map(|v| {
                if v.schema == PG_CATALOG {
                    v.name.to_string()
                } else {
                    format!("{}.{}", v.schema, v.name)
                }
            })
    }

    /// Whether relation `oid` is visible by its bare name: in
    /// `pg_catalog`, or in the search path's schema and not hidden by a
    /// catalog view of the same name.
    pub fn table_is_visible(&self, oid: i64) -> bool {
        if VIEWS
            .iter()
            .any(|v| v.schema == PG_CATALOG && relation_oid(v.schema, v.name) == oid)
        {
            return true;
        }
        let schema = self.search_path;
        self.catalog
            .table_names(schema)
            .unwrap_or_default()
            .iter()
            .any(|name| relation_oid(schema, name) == oid && !is_view(PG_CATALOG, name))
    }

    /// The schema and table of relation `oid`, if it is a user table.
    pub fn table_of(&self, oid: i64) -> Option<(String, String)> {
        self.tables()
            .into_iter()
            .find(|t| relation_oid(&t.schema, t.table.name()) == oid)
            .map(|t| (t.schema, t.table.name().to_string()))
    }

    /// `pg_get_constraintdef` of a key constraint (`PRIMARY KEY (a, b)`),
    /// or `pg_get_indexdef` of its index (`CREATE UNIQUE INDEX …`): by the
    /// constraint's OID or the index's. `None` for any other OID.
    pub fn key_definition(&self, oid: i64, index: bool) -> Option<String> {
        let (schema, table, key) = self.key_by_oid(oid, index)?;
        let columns: Vec<String> = key
            .columns
            .iter()
            .map(|&c| quote_ident(table.schema().field(c).name()))
            .collect();
        let columns = columns.join(", ");
        Some(if index {
            format!(
                "CREATE UNIQUE INDEX {} ON {}.{} USING btree ({columns})",
                quote_ident(&key.name),
                quote_ident(&schema),
                quote_ident(table.name())
            )
        } else if key.primary {
            format!("PRIMARY KEY ({columns})")
        } else {
            format!("UNIQUE ({columns})")
        })
    }

    /// The name of column `n` (from 1) of the key whose index is `oid`.
    pub fn index_column(&self, oid: i64, n: usize) -> Option<String> {
        let (_, table, key) = self.key_by_oid(oid, true)?;
        let column = *key.columns.get(n.checked_sub(1)?)?;
        Some(quote_ident(table.schema().field(column).name()))
    }

    /// The key whose constraint (or, with `index`, whose index) is `oid`.
    fn key_by_oid(&self, oid: i64, index: bool) -> Option<(String, Arc<Table>, KeyConstraint)> {
        self.keys().into_iter().find(|(schema, table, key)| {
            if index {
                relation_oid(schema, &key.name) == oid
            } else {
                constraint_oid(schema, table.name(), &key.name) == oid
            }
        })
    }

    /// The schema named by namespace `oid`.
    pub fn namespace_name(&self, oid: i64) -> Option<String> {
        self.schemas().into_iter().find(|s| namespace_oid(s) == oid)
    }

    /// The role name `pg_get_userbyid` gives for `oid`.
    pub fn user_name(&self, oid: i64) -> String {
        match RoleId::try_from(oid) {
            Ok(id) => self.role_name(id),
            Err(_) => format!("unknown (OID={oid})"),
        }
    }
}

/// PostgreSQL's text form of a one-dimensional array of text: `{a,"b c"}`.
pub fn format_array(items: &[String]) -> String {
    format_array_of(items.iter().map(|s| Some(s.as_str())))
}

/// PostgreSQL's text form of a one-dimensional array whose elements are
/// given in their text form (`None`: NULL): `{a,"b c",NULL}`. An element is
/// double-quoted (with `"` and `\` escaped) where it is empty, is `NULL`
/// spelled as a string, or holds a brace, comma, quote, backslash or white
/// space.
pub fn format_array_of<'a>(items: impl IntoIterator<Item = Option<&'a str>>) -> String {
    let quoted: Vec<String> = items
        .into_iter()
        .map(|item| {
            let Some(s) = item else {
                return "NULL".to_string();
            };
            let plain = !s.is_empty()
                && !s.eq_ignore_ascii_case("null")
                && !s.contains(|c: char| {
                    matches!(c, '{' | '}' | ',' | '"' | '\\') || c.is_whitespace()
                });
            if plain {
                s.to_string()
            } else {
                format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
            }
        })
        .collect();
    format!("{{{}}}", quoted.join(","))
}

/// The elements of a one-dimensional array in PostgreSQL's text form
/// (`NULL` elements as `None`); `None` if `text` is no such array.
pub fn parse_array(text: &str) -> Option<Vec<Option<String>>> {
    let trimmed = text.trim();
    // `int2vector` / `oidvector` text: integers separated by spaces.
    if !trimmed.starts_with('{') && trimmed.split_whitespace().all(|n| n.parse::<i64>().is_ok()) {
        return Some(
            trimmed
                .split_whitespace()
                .map(|n| Some(n.to_string()))
                .collect(),
        );
    }
    let inner = trimmed.strip_prefix('{')?.strip_suffix('}')?;
    let mut out = Vec::new();
    if inner.trim().is_empty() {
        return Some(out);
    }
    let mut chars = inner.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut item = String::new();
        let quoted = chars.peek() == Some(&'"');
        if quoted {
            chars.next();
            loop {
                match chars.next()? {
                    '\\' => item.push(chars.next()?),
                    '"' => break,
                    c => item.push(c),
                }
            }
            while chars.peek().is_some_and(|c| c.is_whitespace()) {
                chars.next();
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                item.push(c);
                chars.next();
            }
            item = item.trim().to_string();
        }
        out.push((quoted || !item.eq_ignore_ascii_case("null")).then_some(item));
        match chars.next() {
            None => return Some(out),
            Some(',') => {}
            Some(_) => return None,
        }
    }
}

/// `"name"` where PostgreSQL would quote it.
pub fn quote_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// Splits a possibly qualified, possibly quoted name into its parts;
/// unquoted parts are folded to lower case.
pub fn split_name(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = text.trim().chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                current.push('"');
            }
            '"' => quoted = !quoted,
            '.' if !quoted => parts.push(std::mem::take(&mut current)),
            c if quoted => current.push(c),
            c => current.push(c.to_ascii_lowercase()),
        }
    }
    parts.push(current);
    parts
}

fn pg_type_rows() -> Vec<Vec<V>> {
    TYPES
        .iter()
        .map(|t| {
            let (io, align) = if t.elem != 0 {
                ("array".to_string(), "i")
            } else {
                (t.name.to_string(), if t.len == 8 { "d" } else { "i" })
            };
            let collation = if matches!(t.oid, 25 | 1042 | 1043 | 1009 | 1014 | 1015) {
                DEFAULT_COLLATION
            } else {
                0
            };
            vec![
                t.oid.into(),
                t.name.into(),
                PG_CATALOG_OID.into(),
                i64::from(crate::roles::BOOTSTRAP_ROLE_ID).into(),
                i64::from(t.len).into(),
                (t.len > 0 && t.len <= 8).into(),
                if t.oid == 705 { "p" } else { "b" }.into(),
                t.category.into(),
                matches!(t.oid, 16 | 25 | 701 | 1184).into(),
                true.into(),
                ",".into(),
                0i64.into(),
                if t.elem != 0 {
                    "array_subscript_handler"
                } else {
                    "-"
                }
                .into(),
                t.elem.into(),
                t.array.into(),
                format!("{io}_in").into(),
                format!("{io}_out").into(),
                format!("{io}_recv").into(),
                format!("{io}_send").into(),
                "-".into(),
                "-".into(),
                "-".into(),
                align.into(),
                if t.len > 0 { "p" } else { "x" }.into(),
                false.into(),
                0i64.into(),
                (-1i64).into(),
                0i64.into(),
                collation.into(),
                V::N,
                V::N,
                V::N,
            ]
        })
        .collect()
}

fn arrow_type(kind: K) -> DataType {
    match kind {
        K::Oid => DataType::Int64,
        K::I16 => DataType::Int16,
        K::I32 => DataType::Int32,
        K::F32 => DataType::Float32,
        K::Bool => DataType::Boolean,
        K::Text => DataType::Utf8,
        K::TextList | K::Vector => DataType::Utf8,
    }
}

/// Makes the snapshot of a view from its rows.
fn build(name: &str, columns: Columns, rows: Vec<Vec<V>>) -> Result<Table> {
    let schema: SchemaRef = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(n, k)| Field::new(*n, arrow_type(*k), true))
            .collect::<Vec<_>>(),
    ));
    if let Some(bad) = rows.iter().find(|r| r.len() != columns.len()) {
        return Err(SqlError::Internal(format!(
            "catalog view {name}: a row of {} values for {} columns",
            bad.len(),
            columns.len()
        )));
    }
    let int = |v: &V| match v {
        V::I(i) => Some(*i),
        V::F(f) => Some(*f as i64),
        _ => None,
    };
    let arrays: Vec<ArrayRef> = columns
        .iter()
        .enumerate()
        .map(|(i, (_, kind))| -> ArrayRef {
            let values = rows.iter().map(|r| &r[i]);
            match kind {
                K::Oid => Arc::new(values.map(int).collect::<Int64Array>()),
                K::I16 => Arc::new(
                    values
                        .map(|v| int(v).map(|x| x as i16))
                        .collect::<Int16Array>(),
                ),
                K::I32 => Arc::new(
                    values
                        .map(|v| int(v).map(|x| x as i32))
                        .collect::<Int32Array>(),
                ),
                K::F32 => Arc::new(
                    values
                        .map(|v| match v {
                            V::F(f) => Some(*f as f32),
                            V::I(i) => Some(*i as f32),
                            _ => None,
                        })
                        .collect::<Float32Array>(),
                ),
                K::Bool => Arc::new(
                    values
                        .map(|v| match v {
                            V::B(b) => Some(*b),
                            _ => None,
                        })
                        .collect::<BooleanArray>(),
                ),
                K::Text => Arc::new(
                    values
                        .map(|v| match v {
                            V::T(s) => Some(s.as_str()),
                            _ => None,
                        })
                        .collect::<StringArray>(),
                ),
                K::TextList => Arc::new(
                    values
                        .map(|v| match v {
                            V::L(items) => Some(format_array(items)),
                            _ => None,
                        })
                        .collect::<StringArray>(),
                ),
                K::Vector => Arc::new(
                    values
                        .map(|v| match v {
                            V::L(items) => Some(items.join(" ")),
                            _ => None,
                        })
                        .collect::<StringArray>(),
                ),
            }
        })
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), arrays)?;
    Ok(Table::new(name.to_string(), schema, vec![batch])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oids_are_stable_and_in_the_user_range() {
        let a = relation_oid("public", "t");
        assert_eq!(a, relation_oid("public", "t"));
        assert_ne!(a, relation_oid("public", "u"));
        assert_ne!(a, relation_oid("other", "t"));
        assert!((16384..(1 << 31)).contains(&a));
        assert_eq!(namespace_oid("pg_catalog"), 11);
        assert_eq!(namespace_oid("public"), 2200);
    }

    #[test]
    fn format_type_names_types_as_postgresql() {
        assert_eq!(format_type(23, Some(-1)).unwrap(), "integer");
        assert_eq!(
            format_type(1700, Some((10 << 16 | 2) + 4)).unwrap(),
            "numeric(10,2)"
        );
        assert_eq!(
            format_type(1043, Some(14)).unwrap(),
            "character varying(10)"
        );
        assert_eq!(format_type(1009, None).unwrap(), "text[]");
        assert_eq!(format_type(12345, None), None);
        let t = DataType::Decimal128(15, 2);
        assert_eq!(
            format_type(
                i64::from(pg_type_of(&t).0),
                Some(i64::from(pg_typmod_of(&t)))
            )
            .unwrap(),
            "numeric(15,2)"
        );
        assert_eq!(type_oid_by_name("integer"), Some(23));
        assert_eq!(type_oid_by_name("pg_catalog.text[]"), Some(1009));
        assert_eq!(type_oid_by_name("hstore"), None);
    }

    #[test]
    fn arrays_have_postgresql_text_form() {
        let items = vec!["a".to_string(), "b c".to_string(), "q\"".to_string()];
        let text = format_array(&items);
        assert_eq!(text, "{a,\"b c\",\"q\\\"\"}");
        assert_eq!(
            parse_array(&text).unwrap(),
            items.into_iter().map(Some).collect::<Vec<_>>()
        );
        assert_eq!(parse_array("{1,NULL}").unwrap(), [Some("1".into()), None]);
        assert_eq!(parse_array("{}").unwrap(), Vec::<Option<String>>::new());
        assert_eq!(parse_array("nope"), None);
        assert_eq!(
            parse_array("1 -2").unwrap(),
            [Some("1".into()), Some("-2".into())]
        );
        assert_eq!(parse_array("").unwrap(), Vec::<Option<String>>::new());
    }

    #[test]
    fn names_split_and_quote_as_postgresql() {
        assert_eq!(split_name("Public.T"), ["public", "t"]);
        assert_eq!(split_name("\"My \"\"T\"\"\""), ["My \"T\""]);
        assert_eq!(quote_ident("t_1"), "t_1");
        assert_eq!(quote_ident("My T"), "\"My T\"");
    }

    #[test]
    fn every_view_builds_with_its_columns() {
        let catalog = stride_storage::Catalog::new();
        let roles = crate::roles::Roles::new();
        let state = CatalogState {
            catalog: &catalog,
            roles: &roles,
            role: crate::roles::BOOTSTRAP_ROLE_ID,
            search_path: "public",
            settings: vec![("statement_timeout".into(), "0".into())],
            functions: vec![("abs".into(), "f")],
        };
        for v in VIEWS {
            let t = state.view(v.schema, v.name).unwrap().unwrap();
            assert_eq!(t.schema().fields().len(), v.columns.len(), "{}", v.name);
        }
    }
}

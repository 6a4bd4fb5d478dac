//! Roles and privileges, as PostgreSQL has them (the part an analytical
//! engine needs).
//!
//! * **Roles** have a name, `LOGIN`, `SUPERUSER` and a SCRAM-SHA-256
//!   [`Verifier`] (never the password). The *bootstrap superuser*
//!   [`BOOTSTRAP_ROLE`] (id [`BOOTSTRAP_ROLE_ID`], PostgreSQL's
//!   `BOOTSTRAP_SUPERUSERID`) always exists: [`crate::Engine::session`]
//!   runs as it, and `stride serve` gives it the password of
//!   `--password-file` / `STRIDE_PASSWORD`. Roles are referred to by id, so
//!   a dropped and re-created name gets none of the old role's tables or
//!   grants.
//! * **Tables** have an owner: the role that created them; tables loaded
//!   outside SQL (generated at startup) belong to the bootstrap superuser.
//!   Privileges `SELECT`, `INSERT`, `UPDATE`, `DELETE` are granted per table
//!   to roles or to `PUBLIC`; the owner and superusers always have all of
//!   them; `DROP TABLE` (and `CREATE OR REPLACE` of an existing table) needs
//!   ownership.
//! * **Schemas** have privileges `CREATE` (make tables in it) and `USAGE`
//!   (reach its tables at all). As in PostgreSQL up to version 14, `PUBLIC`
//!   has both on the default schema `public`; other schemas grant nothing
//!   until a superuser does. Only superusers create and drop schemas
//!   (Stride has no database-level `CREATE` privilege), so schemas belong to
//!   the bootstrap superuser.
//! * **Superusers** bypass every check. Only they create, alter and drop
//!   roles (a role may change its own password), change engine-wide
//!   settings and read server-side files.
//!
//! [`RoleStatement`] is the parsed form of `CREATE ROLE` / `CREATE USER`,
//! `ALTER ROLE`, `DROP ROLE`, `GRANT` and `REVOKE`; [`Roles::execute`] runs
//! one. The session checks every statement's table access against its role
//! before running it (`Session::authorize` in `engine/mod.rs`).
//!
//! With a data directory the whole catalog is logged after every statement
//! that changed it and restored at recovery (`persist.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use arrow::array::{ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion_sql::sqlparser::ast::{
    self as sql, AlterRoleOperation, GrantObjects, Ident, ObjectName, ObjectType, Privileges,
    RoleOption, Statement as SqlStatement,
};
use stride_storage::{Catalog, Table};

use crate::error::{Result, SqlError, UndefinedKind};
use crate::scram::Verifier;

mod persist;

/// A role's id (PostgreSQL: its OID).
pub type RoleId = stride_engine::activity::RoleId;
/// The bootstrap superuser's id (PostgreSQL's `BOOTSTRAP_SUPERUSERID`).
pub const BOOTSTRAP_ROLE_ID: RoleId = 10;
/// The bootstrap superuser's name.
pub const BOOTSTRAP_ROLE: &str = "stride";
/// The id of no role: a session for a name that is not a role (as one of a
/// role dropped meanwhile) has no privileges at all.
pub const NO_ROLE: RoleId = 0;
/// Ids of roles made by `CREATE ROLE` start here (PostgreSQL's
/// `FirstNormalObjectId`).
const FIRST_ROLE_ID: RoleId = 16384;
/// The schema whose `CREATE` and `USAGE` every role has by default.
pub const PUBLIC_SCHEMA: &str = stride_storage::catalog::DEFAULT_SCHEMA;

/// A privilege on a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TablePrivilege {
    Select,
    Insert,
    Update,
    Delete,
}

impl TablePrivilege {
    const ALL: [TablePrivilege; 4] = [
        TablePrivilege::Select,
        TablePrivilege::Insert,
        TablePrivilege::Update,
        TablePrivilege::Delete,
    ];

    fn bit(self) -> u8 {
        1 << self as u8
    }

    pub fn name(self) -> &'static str {
        match self {
            TablePrivilege::Select => "SELECT",
            TablePrivilege::Insert => "INSERT",
            TablePrivilege::Update => "UPDATE",
            TablePrivilege::Delete => "DELETE",
        }
    }
}

/// A privilege on a schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaPrivilege {
    Create,
    Usage,
}

impl SchemaPrivilege {
    fn bit(self) -> u8 {
        1 << self as u8
    }
}

const ALL_TABLE_PRIVILEGES: u8 = 0b1111;
const ALL_SCHEMA_PRIVILEGES: u8 = 0b11;

/// Who a privilege is granted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Grantee {
    /// Every role, present and future.
    Public,
    Role(RoleId),
}

/// One role.
#[derive(Debug, Clone)]
pub struct Role {
    pub id: RoleId,
    pub name: String,
    /// May connect (`LOGIN`).
    pub login: bool,
    /// Bypasses every privilege check (`SUPERUSER`).
    pub superuser: bool,
    /// The SCRAM-SHA-256 verifier of its password; `None`: no password, so
    /// it cannot authenticate by password.
    pub password: Option<Verifier>,
}

/// `(schema, table)`.
type TableKey = (String, String);

#[derive(Debug)]
struct State {
    next_id: RoleId,
    roles: BTreeMap<RoleId, Role>,
    /// Owners of tables made by SQL; a table not listed belongs to the
    /// bootstrap superuser.
    owners: HashMap<TableKey, RoleId>,
    table_grants: HashMap<TableKey, BTreeMap<Grantee, u8>>,
    schema_grants: HashMap<String, BTreeMap<Grantee, u8>>,
}

impl State {
    fn by_name(&self, name: &str) -> Option<&Role> {
        self.roles.values().find(|r| r.name == name)
    }

    fn superuser(&self, id: RoleId) -> bool {
        self.roles.get(&id).is_some_and(|r| r.superuser)
    }

    fn owner(&self, schema: &str, table: &str) -> RoleId {
        self.owners
            .get(&(schema.to_string(), table.to_string()))
            .copied()
            .unwrap_or(BOOTSTRAP_ROLE_ID)
    }

    fn granted(grants: Option<&BTreeMap<Grantee, u8>>, id: RoleId, bit: u8) -> bool {
        grants.is_some_and(|g| {
            [Grantee::Public, Grantee::Role(id)]
                .iter()
                .any(|who| g.get(who).is_some_and(|b| b & bit != 0))
        })
    }

    /// A role that no longer exists (or never did) has no privileges, not
    /// even `PUBLIC`'s.
    fn exists(&self, id: RoleId) -> bool {
        self.roles.contains_key(&id)
    }

    fn has_schema(&self, id: RoleId, schema: &str, privilege: SchemaPrivilege) -> bool {
        self.superuser(id)
            || (self.exists(id)
                && State::granted(self.schema_grants.get(schema), id, privilege.bit()))
    }

    fn check_schema(&self, id: RoleId, schema: &str, privilege: SchemaPrivilege) -> Result<()> {
        if self.has_schema(id, schema, privilege) {
            Ok(())
        } else {
            Err(SqlError::InsufficientPrivilege(format!(
                "permission denied for schema {schema}"
            )))
        }
    }

    fn check_table(
        &self,
        id: RoleId,
        schema: &str,
        table: &str,
        privilege: TablePrivilege,
    ) -> Result<()> {
        if self.superuser(id) {
            return Ok(());
        }
        self.check_schema(id, schema, SchemaPrivilege::Usage)?;
        let key = (schema.to_string(), table.to_string());
        if self.owner(schema, table) == id
            || State::granted(self.table_grants.get(&key), id, privilege.bit())
        {
            Ok(())
        } else {
            Err(SqlError::InsufficientPrivilege(format!(
                "permission denied for table {table}"
            )))
        }
    }

    fn check_owner(&self, id: RoleId, schema: &str, table: &str) -> Result<()> {
        if self.superuser(id) {
            return Ok(());
        }
        self.check_schema(id, schema, SchemaPrivilege::Usage)?;
        if self.owner(schema, table) == id {
            Ok(())
        } else {
            Err(SqlError::InsufficientPrivilege(format!(
                "must be owner of table {table}"
            )))
        }
    }

    fn role_named(&self, name: &str) -> Result<&Role> {
        self.by_name(name)
            .ok_or_else(|| SqlError::UndefinedObject(format!("role \"{name}\" does not exist")))
    }
}

/// The engine's roles, table owners and grants.
#[derive(Debug)]
pub struct Roles {
    state: RwLock<State>,
    /// Bumped by every write access to `state` (before the guard is handed
    /// out): a persisted copy taken at generation `g` is current while the
    /// generation is still `g` (`persist.rs`).
    generation: AtomicU64,
}

impl Default for Roles {
    fn default() -> Self {
        Roles::new()
    }
}

/// A statement on roles or privileges, parsed from SQL
/// ([`RoleStatement::from_sql`]).
#[derive(Debug, Clone)]
pub enum RoleStatement {
    Create {
        names: Vec<String>,
        if_not_exists: bool,
        options: RoleOptions,
    },
    Alter {
        name: String,
        options: RoleOptions,
    },
    Rename {
        name: String,
        to: String,
    },
    Drop {
        names: Vec<String>,
        if_exists: bool,
    },
    /// `GRANT` / `REVOKE` (`revoke`) of table privileges (a bit set).
    Tables {
        revoke: bool,
        privileges: u8,
        tables: TableTarget,
        grantees: Vec<GranteeName>,
    },
    /// `GRANT` / `REVOKE` of schema privileges.
    Schemas {
        revoke: bool,
        privileges: u8,
        schemas: Vec<String>,
        grantees: Vec<GranteeName>,
    },
}

/// The tables of a `GRANT`.
#[derive(Debug, Clone)]
pub enum TableTarget {
    /// `ON [TABLE] t, s.u`: resolved against the session's default schema.
    Tables(Vec<(String, String)>),
    /// `ON ALL TABLES IN SCHEMA s`: the tables there now.
    AllIn(Vec<String>),
}

/// A grantee as named in SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GranteeName {
    Public,
    Role(String),
}

/// Role attributes given in `CREATE ROLE` / `ALTER ROLE`; `None`: not given.
#[derive(Debug, Clone, Default)]
pub struct RoleOptions {
    pub login: Option<bool>,
    pub superuser: Option<bool>,
    /// `PASSWORD 'x'` (`Some(Some)`), `PASSWORD NULL` (`Some(None)`).
    pub password: Option<Option<Verifier>>,
}

impl RoleStatement {
    /// The command tag PostgreSQL answers with.
    pub fn tag(&self) -> &'static str {
        match self {
            RoleStatement::Create { .. } => "CREATE ROLE",
            RoleStatement::Alter { .. } | RoleStatement::Rename { .. } => "ALTER ROLE",
            RoleStatement::Drop { .. } => "DROP ROLE",
            RoleStatement::Tables { revoke: false, .. }
            | RoleStatement::Schemas { revoke: false, .. } => "GRANT",
            RoleStatement::Tables { revoke: true, .. }
            | RoleStatement::Schemas { revoke: true, .. } => "REVOKE",
        }
    }

    /// The statement if `stmt` is a role or privilege statement (`None`
    /// otherwise); names of tables resolve in `default_schema`.
    pub fn from_sql(stmt: &SqlStatement, default_schema: &str) -> Option<Result<RoleStatement>> {
        let parsed = match stmt {
            SqlStatement::CreateRole(c) => create_role(c),
            SqlStatement::AlterRole { name, operation } => alter_role(name, operation),
            SqlStatement::Drop {
                object_type: ObjectType::Role | ObjectType::User,
                if_exists,
                names,
                ..
            } => names
                .iter()
                .map(object_ident)
                .collect::<Result<Vec<_>>>()
                .map(|names| RoleStatement::Drop {
                    names,
                    if_exists: *if_exists,
                }),
            SqlStatement::Grant(g) => {
                if g.with_grant_option {
                    return Some(Err(SqlError::Unsupported("WITH GRANT OPTION".into())));
                }
                if g.as_grantor.is_some() || g.granted_by.is_some() {
                    return Some(Err(SqlError::Unsupported("GRANTED BY".into())));
                }
                privileges_statement(
                    false,
                    &g.privileges,
                    g.objects.as_ref(),
                    &g.grantees,
                    default_schema,
                )
            }
            SqlStatement::Revoke(r) => {
                if r.granted_by.is_some() {
                    return Some(Err(SqlError::Unsupported("GRANTED BY".into())));
                }
                privileges_statement(
                    true,
                    &r.privileges,
                    r.objects.as_ref(),
                    &r.grantees,
                    default_schema,
                )
            }
            _ => return None,
        };
        Some(parsed)
    }
}

/// An identifier as PostgreSQL folds it: unquoted names in lower case.
fn ident(i: &Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

fn idents(name: &ObjectName) -> Result<Vec<String>> {
    name.0
        .iter()
        .map(|part| {
            part.as_ident()
                .map(ident)
                .ok_or_else(|| SqlError::Syntax(format!("not a name: {part}")))
        })
        .collect()
}

/// A one-part name (a role, a schema).
fn object_ident(name: &ObjectName) -> Result<String> {
    match idents(name)?.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(SqlError::Syntax(format!("not a simple name: {name}"))),
    }
}

fn password(p: &sql::Password) -> Result<Option<Verifier>> {
    use sql::{Expr, Value};
    let text = match p {
        sql::Password::NullPassword => return Ok(None),
        sql::Password::Password(Expr::Value(v)) => match &v.value {
            Value::SingleQuotedString(s) | Value::EscapedStringLiteral(s) => s.clone(),
            Value::DollarQuotedString(d) => d.value.clone(),
            Value::Null => return Ok(None),
            _ => return Err(SqlError::Syntax("a password must be a string".into())),
        },
        sql::Password::Password(_) => {
            return Err(SqlError::Syntax("a password must be a string".into()))
        }
    };
    // PostgreSQL: "empty string is not a valid password, clearing password".
    if text.is_empty() {
        return Ok(None);
    }
    if let Some(v) = Verifier::parse(&text) {
        return Ok(Some(v));
    }
    if text.starts_with("SCRAM-SHA-256$") {
        return Err(SqlError::Syntax(
            "malformed SCRAM-SHA-256 verifier (expected SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>)"
                .into(),
        ));
    }
    if text.len() == 35
        && text.starts_with("md5")
        && text[3..].bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Err(SqlError::Unsupported(
            "MD5 password hashes (Stride keeps SCRAM-SHA-256 verifiers only)".into(),
        ));
    }
    Ok(Some(Verifier::new(&text)))
}

fn unsupported_if(given: bool, what: &str) -> Result<()> {
    if given {
        Err(SqlError::Unsupported(format!("role attribute {what}")))
    } else {
        Ok(())
    }
}

fn create_role(c: &sql::CreateRole) -> Result<RoleStatement> {
    unsupported_if(c.bypassrls == Some(true), "BYPASSRLS")?;
    unsupported_if(c.create_db == Some(true), "CREATEDB")?;
    unsupported_if(c.create_role == Some(true), "CREATEROLE")?;
    unsupported_if(c.replication == Some(true), "REPLICATION")?;
    unsupported_if(c.connection_limit.is_some(), "CONNECTION LIMIT")?;
    unsupported_if(c.valid_until.is_some(), "VALID UNTIL")?;
    let members = [&c.in_role, &c.in_group, &c.role, &c.user, &c.admin];
    if members.iter().any(|m| !m.is_empty()) {
        return Err(SqlError::Unsupported("role membership".into()));
    }
    if c.authorization_owner.is_some() {
        return Err(SqlError::Unsupported(
            "CREATE ROLE ... AUTHORIZATION".into(),
        ));
    }
    // INHERIT / NOINHERIT concern membership, which Stride does not have:
    // either is accepted and changes nothing.
    Ok(RoleStatement::Create {
        names: c.names.iter().map(object_ident).collect::<Result<_>>()?,
        if_not_exists: c.if_not_exists,
        options: RoleOptions {
            login: c.login,
            superuser: c.superuser,
            password: c.password.as_ref().map(password).transpose()?,
        },
    })
}

fn alter_role(name: &Ident, operation: &AlterRoleOperation) -> Result<RoleStatement> {
    let name = ident(name);
    match operation {
        AlterRoleOperation::RenameRole { role_name } => Ok(RoleStatement::Rename {
            name,
            to: ident(role_name),
        }),
        AlterRoleOperation::WithOptions { options } => {
            let mut out = RoleOptions::default();
            for o in options {
                match o {
                    RoleOption::Login(b) => out.login = Some(*b),
                    RoleOption::SuperUser(b) => out.superuser = Some(*b),
                    RoleOption::Password(p) => out.password = Some(password(p)?),
                    RoleOption::Inherit(_) => {}
                    RoleOption::BypassRLS(b) => unsupported_if(*b, "BYPASSRLS")?,
                    RoleOption::CreateDB(b) => unsupported_if(*b, "CREATEDB")?,
                    RoleOption::CreateRole(b) => unsupported_if(*b, "CREATEROLE")?,
                    RoleOption::Replication(b) => unsupported_if(*b, "REPLICATION")?,
                    RoleOption::ConnectionLimit(_) => unsupported_if(true, "CONNECTION LIMIT")?,
                    RoleOption::ValidUntil(_) => unsupported_if(true, "VALID UNTIL")?,
                }
            }
            Ok(RoleStatement::Alter { name, options: out })
        }
        other => Err(SqlError::Unsupported(format!("ALTER ROLE {other}"))),
    }
}

fn grantees(list: &[sql::Grantee]) -> Result<Vec<GranteeName>> {
    list.iter()
        .map(|g| match (&g.grantee_type, &g.name) {
            (sql::GranteesType::Public, _) => Ok(GranteeName::Public),
            (
                sql::GranteesType::None
                | sql::GranteesType::Role
                | sql::GranteesType::User
                | sql::GranteesType::Group,
                Some(sql::GranteeName::ObjectName(name)),
            ) => {
                let unquoted_public = matches!(name.0.as_slice(), [part]
                    if part.as_ident().is_some_and(|i| i.quote_style.is_none()
                        && i.value.eq_ignore_ascii_case("public")));
                if unquoted_public {
                    Ok(GranteeName::Public)
                } else {
                    object_ident(name).map(GranteeName::Role)
                }
            }
            _ => Err(SqlError::Unsupported(format!("grantee {g}"))),
        })
        .collect()
}

fn privileges_statement(
    revoke: bool,
    privileges: &Privileges,
    objects: Option<&GrantObjects>,
    to: &[sql::Grantee],
    default_schema: &str,
) -> Result<RoleStatement> {
    let grantees = grantees(to)?;
    let verb = if revoke { "REVOKE" } else { "GRANT" };
    let Some(objects) = objects else {
        return Err(SqlError::Unsupported(format!("{verb} of role membership")));
    };
    let actions: &[sql::Action] = match privileges {
        Privileges::All { .. } => &[],
        Privileges::Actions(a) => a,
    };
    let all = matches!(privileges, Privileges::All { .. });
    let on_schemas = matches!(objects, GrantObjects::Schemas(_));
    let object_kind = if on_schemas { "schema" } else { "table" };
    let mut bits = 0u8;
    for action in actions {
        let columns = |c: &Option<Vec<Ident>>| -> Result<()> {
            match c {
                Some(_) => Err(SqlError::Unsupported("column privileges".into())),
                None => Ok(()),
            }
        };
        let bit = match (action, on_schemas) {
            (sql::Action::Select { columns: c }, false) => {
                columns(c)?;
                TablePrivilege::Select.bit()
            }
            (sql::Action::Insert { columns: c }, false) => {
                columns(c)?;
                TablePrivilege::Insert.bit()
            }
            (sql::Action::Update { columns: c }, false) => {
                columns(c)?;
                TablePrivilege::Update.bit()
            }
            (sql::Action::Delete, false) => TablePrivilege::Delete.bit(),
            (sql::Action::Create { obj_type: None }, true) => SchemaPrivilege::Create.bit(),
            (sql::Action::Usage, true) => SchemaPrivilege::Usage.bit(),
            (
                sql::Action::Truncate | sql::Action::References { .. } | sql::Action::Trigger,
                false,
            ) => {
                return Err(SqlError::Unsupported(format!(
                "the {action} privilege (Stride has SELECT, INSERT, UPDATE and DELETE on tables)"
            )))
            }
            (other, _) => {
                return Err(SqlError::InvalidGrant(format!(
                    "invalid privilege type {other} for {object_kind}"
                )))
            }
        };
        bits |= bit;
    }
    match objects {
        GrantObjects::Schemas(names) => Ok(RoleStatement::Schemas {
            revoke,
            privileges: if all { ALL_SCHEMA_PRIVILEGES } else { bits },
            schemas: names.iter().map(object_ident).collect::<Result<_>>()?,
            grantees,
        }),
        GrantObjects::Tables(names) => {
            let tables = names
                .iter()
                .map(|n| match idents(n)?.as_slice() {
                    [t] => Ok((default_schema.to_string(), t.clone())),
                    [s, t] | [_, s, t] => Ok((s.clone(), t.clone())),
                    _ => Err(SqlError::Syntax(format!("improper relation name: {n}"))),
                })
                .collect::<Result<_>>()?;
            Ok(RoleStatement::Tables {
                revoke,
                privileges: if all { ALL_TABLE_PRIVILEGES } else { bits },
                tables: TableTarget::Tables(tables),
                grantees,
            })
        }
        GrantObjects::AllTablesInSchema { schemas } => Ok(RoleStatement::Tables {
            revoke,
            privileges: if all { ALL_TABLE_PRIVILEGES } else { bits },
            tables: TableTarget::AllIn(schemas.iter().map(object_ident).collect::<Result<_>>()?),
            grantees,
        }),
        other => Err(SqlError::Unsupported(format!(
            "{verb} ON {other} (Stride has privileges on tables and schemas)"
        ))),
    }
}

/// Names `CREATE ROLE` and `ALTER ROLE ... RENAME` refuse.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(SqlError::Syntax("a role name may not be empty".into()));
    }
    if matches!(
        name,
        "public" | "none" | "current_user" | "current_role" | "session_user"
    ) {
        return Err(SqlError::ReservedName(format!(
            "role name \"{name}\" is reserved"
        )));
    }
    if name.starts_with("pg_") {
        return Err(SqlError::ReservedName(format!(
            "role name \"{name}\" is reserved: names starting with \"pg_\" are"
        )));
    }
    Ok(())
}

impl Roles {
    /// The bootstrap superuser alone (LOGIN, no password); `PUBLIC` has
    /// `CREATE` and `USAGE` on schema `public`.
    pub fn new() -> Roles {
        let mut roles = BTreeMap::new();
        roles.insert(
            BOOTSTRAP_ROLE_ID,
            Role {
                id: BOOTSTRAP_ROLE_ID,
                name: BOOTSTRAP_ROLE.to_string(),
                login: true,
                superuser: true,
                password: None,
            },
        );
        let mut schema_grants = HashMap::new();
        schema_grants.insert(
            PUBLIC_SCHEMA.to_string(),
            BTreeMap::from([(Grantee::Public, ALL_SCHEMA_PRIVILEGES)]),
        );
        Roles {
            state: RwLock::new(State {
                next_id: FIRST_ROLE_ID,
                roles,
                owners: HashMap::new(),
                table_grants: HashMap::new(),
                schema_grants,
            }),
            generation: AtomicU64::new(0),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        let guard = self.state.write().unwrap_or_else(|e| e.into_inner());
        // Under the write lock: a reader that encodes under the read lock
        // sees the generation of the state it encodes.
        self.generation.fetch_add(1, Ordering::Relaxed);
        guard
    }

    /// Changes so far (see [`Roles::encode`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// The role named `name` (names are case-sensitive, as in PostgreSQL).
    pub fn by_name(&self, name: &str) -> Option<Role> {
        self.read().by_name(name).cloned()
    }

    /// The role with id `id`, if it still exists.
    pub fn get(&self, id: RoleId) -> Option<Role> {
        self.read().roles.get(&id).cloned()
    }

    /// Every role, by id.
    pub fn list(&self) -> Vec<Role> {
        self.read().roles.values().cloned().collect()
    }

    pub fn is_superuser(&self, id: RoleId) -> bool {
        self.read().superuser(id)
    }

    /// Sets (or, with `None`, clears) a role's password verifier.
    pub fn set_password(&self, id: RoleId, verifier: Option<Verifier>) -> Result<()> {
        let mut st = self.write();
        let role = st
            .roles
            .get_mut(&id)
            .ok_or_else(|| SqlError::UndefinedObject(format!("role {id} does not exist")))?;
        role.password = verifier;
        Ok(())
    }

    /// The owner of `schema.table`.
    pub fn owner(&self, schema: &str, table: &str) -> RoleId {
        self.read().owner(schema, table)
    }

    /// A table was created by `owner`: it owns it, and grants left from an
    /// earlier table of the same name are gone.
    pub fn table_created(&self, schema: &str, table: &str, owner: RoleId) {
        let key = (schema.to_string(), table.to_string());
        {
            // Nothing to change (the usual case for the bootstrap role):
            // no write, so nothing to persist either.
            let st = self.read();
            let owned = st.owners.get(&key).copied().unwrap_or(BOOTSTRAP_ROLE_ID);
            if owned == owner && !st.table_grants.contains_key(&key) {
                return;
            }
        }
        let mut st = self.write();
        st.table_grants.remove(&key);
        if owner == BOOTSTRAP_ROLE_ID {
            st.owners.remove(&key);
        } else {
            st.owners.insert(key, owner);
        }
    }

    /// A table was dropped (or replaced outside SQL): its owner and grants go.
    pub fn table_dropped(&self, schema: &str, table: &str) {
        let key = (schema.to_string(), table.to_string());
        {
            let st = self.read();
            if !st.owners.contains_key(&key) && !st.table_grants.contains_key(&key) {
                return;
            }
        }
        let mut st = self.write();
        st.owners.remove(&key);
        st.table_grants.remove(&key);
    }

    /// A schema was dropped: the owners and grants of its tables and its own
    /// grants go.
    pub fn schema_dropped(&self, schema: &str) {
        {
            let st = self.read();
            let mentioned = st.owners.keys().any(|(s, _)| s == schema)
                || st.table_grants.keys().any(|(s, _)| s == schema)
                || st.schema_grants.contains_key(schema);
            if !mentioned {
                return;
            }
        }
        let mut st = self.write();
        st.owners.retain(|(s, _), _| s != schema);
        st.table_grants.retain(|(s, _), _| s != schema);
        st.schema_grants.remove(schema);
    }

    /// Fails with 42501 unless `id` is a superuser; `what` is the message.
    pub fn require_superuser(&self, id: RoleId, what: impl FnOnce() -> String) -> Result<()> {
        if self.is_superuser(id) {
            Ok(())
        } else {
            Err(SqlError::InsufficientPrivilege(what()))
        }
    }

    /// Whether `id` may use `privilege` on `schema.table` (42501 if not):
    /// superusers always, others with `USAGE` on the schema and either
    /// ownership or a grant to them or to `PUBLIC`.
    pub fn check_table(
        &self,
        id: RoleId,
        schema: &str,
        table: &str,
        privilege: TablePrivilege,
    ) -> Result<()> {
        self.read().check_table(id, schema, table, privilege)
    }

    /// Whether `id` has `privilege` on `schema` (42501 if not).
    pub fn check_schema(&self, id: RoleId, schema: &str, privilege: SchemaPrivilege) -> Result<()> {
        self.read().check_schema(id, schema, privilege)
    }

    /// Whether `id` owns `schema.table` (or is a superuser); 42501 if not.
    pub fn check_owner(&self, id: RoleId, schema: &str, table: &str) -> Result<()> {
        self.read().check_owner(id, schema, table)
    }

    /// Runs a role statement as role `actor`; returns its command tag.
    /// Tables and schemas are looked up in `catalog` under the role
    /// catalog's lock, so a grant never lands on a table dropped meanwhile.
    pub fn execute(
        &self,
        actor: RoleId,
        stmt: &RoleStatement,
        catalog: &Catalog,
    ) -> Result<&'static str> {
        let mut st = self.write();
        match stmt {
            RoleStatement::Create {
                names,
                if_not_exists,
                options,
            } => {
                if !st.superuser(actor) {
                    return Err(SqlError::InsufficientPrivilege(
                        "permission denied to create role: only superusers may create roles".into(),
                    ));
                }
                for name in names {
                    check_name(name)?;
                    if st.by_name(name).is_some() {
                        if *if_not_exists {
                            continue;
                        }
                        return Err(SqlError::DuplicateObject(format!(
                            "role \"{name}\" already exists"
                        )));
                    }
                    let id = st.next_id;
                    st.next_id += 1;
                    st.roles.insert(
                        id,
                        Role {
                            id,
                            name: name.clone(),
                            login: options.login.unwrap_or(false),
                            superuser: options.superuser.unwrap_or(false),
                            password: options.password.clone().flatten(),
                        },
                    );
                }
            }
            RoleStatement::Alter { name, options } => {
                let target = st.role_named(name)?.id;
                let only_password = options.login.is_none() && options.superuser.is_none();
                let own_password = target == actor && only_password;
                if !(st.superuser(actor) || own_password) {
                    return Err(SqlError::InsufficientPrivilege(format!(
                        "permission denied to alter role \"{name}\": only superusers may \
                         (a role may change its own password)"
                    )));
                }
                if target == BOOTSTRAP_ROLE_ID
                    && (options.superuser == Some(false) || options.login == Some(false))
                {
                    return Err(SqlError::InsufficientPrivilege(format!(
                        "permission denied to alter role \"{name}\": the bootstrap superuser \
                         must keep SUPERUSER and LOGIN"
                    )));
                }
                let role = st
                    .roles
                    .get_mut(&target)
                    .ok_or_else(|| SqlError::Internal("role vanished under its lock".into()))?;
                if let Some(login) = options.login {
                    role.login = login;
                }
                if let Some(superuser) = options.superuser {
                    role.superuser = superuser;
                }
                if let Some(password) = &options.password {
                    role.password = password.clone();
                }
            }
            RoleStatement::Rename { name, to } => {
                if !st.superuser(actor) {
                    return Err(SqlError::InsufficientPrivilege(format!(
                        "permission denied to rename role \"{name}\": only superusers may"
                    )));
                }
                let target = st.role_named(name)?.id;
                if target == actor {
                    return Err(SqlError::Unsupported(
                        "renaming the session's own role".into(),
                    ));
                }
                check_name(to)?;
                if st.by_name(to).is_some() {
                    return Err(SqlError::DuplicateObject(format!(
                        "role \"{to}\" already exists"
                    )));
                }
                if let Some(role) = st.roles.get_mut(&target) {
                    role.name = to.clone();
                }
            }
            RoleStatement::Drop { names, if_exists } => {
                if !st.superuser(actor) {
                    return Err(SqlError::InsufficientPrivilege(
                        "permission denied to drop role: only superusers may drop roles".into(),
                    ));
                }
                let mut doomed = Vec::new();
                for name in names {
                    let Some(role) = st.by_name(name) else {
                        if *if_exists {
                            continue;
                        }
                        return Err(SqlError::UndefinedObject(format!(
                            "role \"{name}\" does not exist"
                        )));
                    };
                    if role.id == actor {
                        return Err(SqlError::ObjectInUse(
                            "current user cannot be dropped".into(),
                        ));
                    }
                    if role.id == BOOTSTRAP_ROLE_ID {
                        return Err(SqlError::DependentObjects(format!(
                            "cannot drop role {name} because it is required by the database system"
                        )));
                    }
                    let mut owned: Vec<String> = st
                        .owners
                        .iter()
                        .filter(|(_, o)| **o == role.id)
                        .map(|((s, t), _)| format!("{s}.{t}"))
                        .collect();
                    if !owned.is_empty() {
                        owned.sort();
                        return Err(SqlError::DependentObjects(format!(
                            "role \"{name}\" cannot be dropped because some objects depend on it: \
                             owner of table {}",
                            owned.join(", ")
                        )));
                    }
                    doomed.push(role.id);
                }
                for id in doomed {
                    st.roles.remove(&id);
                    for grants in st.table_grants.values_mut() {
                        grants.remove(&Grantee::Role(id));
                    }
                    for grants in st.schema_grants.values_mut() {
                        grants.remove(&Grantee::Role(id));
                    }
                }
            }
            RoleStatement::Tables {
                revoke,
                privileges,
                tables,
                grantees,
            } => {
                let who = resolve_grantees(&st, grantees)?;
                let keys: Vec<TableKey> = match tables {
                    TableTarget::Tables(list) => {
                        for (schema, table) in list {
                            if !catalog.schema_exists(schema) {
                                return Err(SqlError::undefined(
                                    UndefinedKind::Schema,
                                    format!("schema \"{schema}\" does not exist"),
                                ));
                            }
                            if catalog.table(schema, table).is_err() {
                                return Err(SqlError::undefined(
                                    UndefinedKind::Table,
                                    format!("relation \"{schema}.{table}\" does not exist"),
                                ));
                            }
                        }
                        list.clone()
                    }
                    TableTarget::AllIn(schemas) => {
                        let mut keys = Vec::new();
                        for schema in schemas {
                            let names = catalog.table_names(schema).map_err(|_| {
                                SqlError::undefined(
                                    UndefinedKind::Schema,
                                    format!("schema \"{schema}\" does not exist"),
                                )
                            })?;
                            keys.extend(names.into_iter().map(|t| (schema.clone(), t)));
                        }
                        keys
                    }
                };
                // Only the owner (or a superuser) grants on a table.
                for (schema, table) in &keys {
                    st.check_owner(actor, schema, table).map_err(|_| {
                        SqlError::InsufficientPrivilege(format!(
                            "permission denied for table {table}"
                        ))
                    })?;
                }
                for key in keys {
                    let grants = st.table_grants.entry(key.clone()).or_default();
                    apply(grants, &who, *privileges, *revoke);
                    if grants.is_empty() {
                        st.table_grants.remove(&key);
                    }
                }
            }
            RoleStatement::Schemas {
                revoke,
                privileges,
                schemas,
                grantees,
            } => {
                let who = resolve_grantees(&st, grantees)?;
                for schema in schemas {
                    if !catalog.schema_exists(schema) {
                        return Err(SqlError::undefined(
                            UndefinedKind::Schema,
                            format!("schema \"{schema}\" does not exist"),
                        ));
                    }
                }
                // Schemas belong to the bootstrap superuser: superusers grant.
                if !st.superuser(actor) {
                    let first = schemas.first().map(String::as_str).unwrap_or("");
                    return Err(SqlError::InsufficientPrivilege(format!(
                        "permission denied for schema {first}"
                    )));
                }
                for schema in schemas {
                    let grants = st.schema_grants.entry(schema.clone()).or_default();
                    apply(grants, &who, *privileges, *revoke);
                }
            }
        }
        Ok(stmt.tag())
    }

    /// The system view `stride.roles` (PostgreSQL's `pg_roles`): one row per
    /// role; `rolpassword` is `********` where a password is set.
    pub fn roles_table(&self) -> Result<Table> {
        let roles = self.list();
        let schema = Arc::new(Schema::new(vec![
            Field::new("oid", DataType::Int64, false),
            Field::new("rolname", DataType::Utf8, false),
            Field::new("rolsuper", DataType::Boolean, false),
            Field::new("rolcanlogin", DataType::Boolean, false),
            Field::new("rolpassword", DataType::Utf8, true),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(
                roles.iter().map(|r| i64::from(r.id)),
            )),
            Arc::new(StringArray::from_iter_values(
                roles.iter().map(|r| r.name.as_str()),
            )),
            Arc::new(BooleanArray::from_iter(
                roles.iter().map(|r| Some(r.superuser)),
            )),
            Arc::new(BooleanArray::from_iter(roles.iter().map(|r| Some(r.login)))),
            Arc::new(StringArray::from_iter(
                roles
                    .iter()
                    .map(|r| r.password.as_ref().map(|_| "********")),
            )),
        ];
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        Ok(Table::new("roles".to_string(), schema, vec![batch])?)
    }

    /// The system view `stride.table_privileges`: per table of `catalog`
    /// its owner, and one row per privilege granted (`grantee` and
    /// `privilege_type` NULL for a table with no grants).
    pub fn table_privileges_table(&self, catalog: &Catalog) -> Result<Table> {
        let st = self.read();
        let name_of = |id: RoleId| {
            st.roles
                .get(&id)
                .map(|r| r.name.clone())
                .unwrap_or_else(|| id.to_string())
        };
        let mut rows: Vec<[Option<String>; 5]> = Vec::new();
        for schema in catalog.schema_names() {
            for table in catalog.table_names(&schema).unwrap_or_default() {
                let owner = name_of(st.owner(&schema, &table));
                let key = (schema.clone(), table.clone());
                let mut any = false;
                for (grantee, bits) in st.table_grants.get(&key).into_iter().flatten() {
                    let grantee = match grantee {
                        Grantee::Public => "PUBLIC".to_string(),
                        Grantee::Role(id) => name_of(*id),
                    };
                    for p in TablePrivilege::ALL {
                        if bits & p.bit() != 0 {
                            any = true;
                            rows.push([
                                Some(schema.clone()),
                                Some(table.clone()),
                                Some(owner.clone()),
                                Some(grantee.clone()),
                                Some(p.name().to_string()),
                            ]);
                        }
                    }
                }
                if !any {
                    rows.push([Some(schema.clone()), Some(table), Some(owner), None, None]);
                }
            }
        }
        let names = [
            "table_schema",
            "table_name",
            "owner",
            "grantee",
            "privilege_type",
        ];
        let schema = Arc::new(Schema::new(
            names
                .iter()
                .enumerate()
                .map(|(i, n)| Field::new(*n, DataType::Utf8, i >= 3))
                .collect::<Vec<_>>(),
        ));
        let columns: Vec<ArrayRef> = (0..names.len())
            .map(|i| {
                Arc::new(StringArray::from_iter(rows.iter().map(|r| r[i].as_deref()))) as ArrayRef
            })
            .collect();
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        Ok(Table::new(
            "table_privileges".to_string(),
            schema,
            vec![batch],
        )?)
    }
}

fn resolve_grantees(st: &State, names: &[GranteeName]) -> Result<Vec<Grantee>> {
    names
        .iter()
        .map(|g| match g {
            GranteeName::Public => Ok(Grantee::Public),
            GranteeName::Role(name) => st.role_named(name).map(|r| Grantee::Role(r.id)),
        })
        .collect()
}

fn apply(grants: &mut BTreeMap<Grantee, u8>, who: &[Grantee], bits: u8, revoke: bool) {
    for g in who {
        let entry = grants.entry(*g).or_insert(0);
        if revoke {
            *entry &= !bits;
        } else {
            *entry |= bits;
        }
        if *entry == 0 {
            grants.remove(g);
        }
    }
}

// ---- parsing --------------------------------------------------------------

/// A piece of a request's text: statements for DataFusion's parser, or one
/// role statement for PostgreSQL's dialect.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    Plain(&'a str),
    /// The statement's text (`USER` rewritten to `ROLE`); `create_user`:
    /// it was `CREATE USER`, whose roles have `LOGIN` unless told otherwise.
    Role {
        text: String,
        create_user: bool,
    },
}

/// Cuts `sql` into [`Piece`]s if it holds a role statement (`CREATE` /
/// `ALTER` / `DROP` `ROLE` or `USER`, `GRANT`, `REVOKE`); `None` if it holds
/// none (or does not tokenize: DataFusion's parser reports that).
///
/// DataFusion parses with sqlparser's generic dialect, which has no role
/// options (`LOGIN`, `PASSWORD` …) and no `ALTER ROLE`; those statements
/// parse in sqlparser's PostgreSQL dialect. sqlparser reads `CREATE USER` /
/// `ALTER USER` as Snowflake's, so they become `CREATE ROLE` / `ALTER ROLE`
/// first, as they are in PostgreSQL.
pub(crate) fn split_role_statements(sql: &str) -> Option<Vec<Piece<'_>>> {
    use datafusion_sql::sqlparser::dialect::GenericDialect;
    use datafusion_sql::sqlparser::keywords::Keyword;
    use datafusion_sql::sqlparser::tokenizer::{Location, Token, Tokenizer};
    let lower = sql.to_ascii_lowercase();
    if !["role", "user", "grant", "revoke"]
        .iter()
        .any(|w| lower.contains(w))
    {
        return None;
    }
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize_with_location()
        .ok()?;
    let mut line_starts = vec![0usize];
    line_starts.extend(sql.match_indices('\n').map(|(i, _)| i + 1));
    // The byte offset of a location (1-based line and character column).
    // Locations are asked for in increasing order, so a cursor moves
    // forward through the text: a long line is walked once, not once per
    // statement on it.
    let mut cursor = (1u64, 1u64, 0usize); // (line, column, byte)
    let mut offset = |l: Location| -> usize {
        if (l.line, l.column) < (cursor.0, cursor.1) {
            cursor = (1, 1, 0);
        }
        if l.line > cursor.0 {
            let Some(&start) = usize::try_from(l.line)
                .ok()
                .and_then(|line| line.checked_sub(1))
                .and_then(|i| line_starts.get(i))
            else {
                return sql.len();
            };
            cursor = (l.line, 1, start);
        }
        let skip = usize::try_from(l.column.saturating_sub(cursor.1)).unwrap_or(usize::MAX);
        match sql[cursor.2..].char_indices().nth(skip) {
            Some((i, _)) => {
                cursor = (l.line, l.column, cursor.2 + i);
                cursor.2
            }
            None => sql.len(),
        }
    };
    // (segment start, segment end, first two words with their byte ranges)
    type Word = (Keyword, usize, usize);
    let mut segments: Vec<(usize, usize, Vec<Word>)> = Vec::new();
    let mut start = 0usize;
    let mut words: Vec<Word> = Vec::new();
    for t in &tokens {
        match &t.token {
            Token::SemiColon => {
                let end = offset(t.span.start);
                segments.push((start, end, std::mem::take(&mut words)));
                start = offset(t.span.end);
            }
            Token::Whitespace(_) => {}
            Token::Word(w) if words.len() < 2 => {
                let kw = if w.quote_style.is_none() {
                    w.keyword
                } else {
                    Keyword::NoKeyword
                };
                words.push((kw, offset(t.span.start), offset(t.span.end)));
            }
            _ if words.len() < 2 => words.push((Keyword::NoKeyword, 0, 0)),
            _ => {}
        }
    }
    segments.push((start, sql.len(), words));
    let mut any = false;
    let pieces = segments
        .into_iter()
        .map(|(start, end, words)| {
            let first = words.first().map(|w| w.0);
            let second = words.get(1).copied();
            match (first, second) {
                (
                    Some(verb @ (Keyword::CREATE | Keyword::ALTER | Keyword::DROP)),
                    Some((Keyword::ROLE | Keyword::USER, from, to)),
                ) => {
                    any = true;
                    Piece::Role {
                        text: format!("{}ROLE{}", &sql[start..from], &sql[to..end]),
                        create_user: verb == Keyword::CREATE
                            && sql[from..to].eq_ignore_ascii_case("user"),
                    }
                }
                (Some(Keyword::GRANT | Keyword::REVOKE), _) => {
                    any = true;
                    Piece::Role {
                        text: sql[start..end].to_string(),
                        create_user: false,
                    }
                }
                _ => Piece::Plain(&sql[start..end]),
            }
        })
        .collect();
    any.then_some(pieces)
}

/// Parses one role statement's text (from [`split_role_statements`]) with
/// sqlparser's PostgreSQL dialect.
pub(crate) fn parse_role_statement(
    text: &str,
    create_user: bool,
    recursion_limit: usize,
) -> std::result::Result<SqlStatement, datafusion_sql::sqlparser::parser::ParserError> {
    use datafusion_sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion_sql::sqlparser::parser::{Parser, ParserError};
    let dialect = PostgreSqlDialect {};
    let mut statements = Parser::new(&dialect)
        .with_recursion_limit(recursion_limit)
        .try_with_sql(text)?
        .parse_statements()?;
    if statements.len() != 1 {
        return Err(ParserError::ParserError(
            "expected one statement".to_string(),
        ));
    }
    let mut stmt = statements.remove(0);
    if let (SqlStatement::CreateRole(c), true) = (&mut stmt, create_user) {
        c.login.get_or_insert(true);
    }
    Ok(stmt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sql: &str) -> RoleStatement {
        let pieces = split_role_statements(sql).expect("a role statement");
        let [Piece::Role { text, create_user }] = pieces.as_slice() else {
            panic!("{pieces:?}");
        };
        let stmt = parse_role_statement(text, *create_user, 100).unwrap();
        RoleStatement::from_sql(&stmt, "public")
            .expect("a role statement")
            .unwrap()
    }

    fn run(roles: &Roles, catalog: &Catalog, actor: RoleId, sql: &str) -> Result<&'static str> {
        roles.execute(actor, &parse(sql), catalog)
    }

    fn catalog_with_table() -> Catalog {
        let catalog = Catalog::new();
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        catalog
            .put_table(
                "public",
                Table::new("t", schema, Vec::new()).unwrap(),
                false,
            )
            .unwrap();
        catalog
    }

    #[test]
    fn requests_are_cut_at_role_statements_only() {
        assert_eq!(
            split_role_statements("select 1; select usename from x"),
            None
        );
        let pieces = split_role_statements(
            "select ';'; create user \"Bob\" password 'a;b'; grant select on t to bob",
        )
        .unwrap();
        assert_eq!(
            pieces,
            vec![
                Piece::Plain("select ';'"),
                Piece::Role {
                    text: " create ROLE \"Bob\" password 'a;b'".into(),
                    create_user: true
                },
                Piece::Role {
                    text: " grant select on t to bob".into(),
                    create_user: false
                },
            ]
        );
        // Multi-byte characters before a statement keep the offsets right.
        let pieces = split_role_statements("select 'é'; alter user x nologin").unwrap();
        assert_eq!(
            pieces[1],
            Piece::Role {
                text: " alter ROLE x nologin".into(),
                create_user: false
            }
        );
        // Many statements on one line, across lines, with multi-byte text:
        // every piece is cut where its statement is.
        let mut sql = "select 'ü';".repeat(2000);
        sql.push_str("\nselect 1; grant select on t to bob;");
        sql.push_str(&"select 'é';".repeat(2000));
        sql.push_str("drop user y");
        let pieces = split_role_statements(&sql).unwrap();
        assert_eq!(pieces.len(), 4003);
        assert_eq!(pieces[0], Piece::Plain("select 'ü'"));
        assert_eq!(pieces[2000], Piece::Plain("\nselect 1"));
        assert_eq!(
            pieces[2001],
            Piece::Role {
                text: " grant select on t to bob".into(),
                create_user: false
            }
        );
        assert_eq!(pieces[4001], Piece::Plain("select 'é'"));
        assert_eq!(
            pieces[4002],
            Piece::Role {
                text: "drop ROLE y".into(),
                create_user: false
            }
        );
    }

    #[test]
    fn statements_parse_to_what_postgres_means() {
        let RoleStatement::Create { names, options, .. } =
            parse("create user Alice with password 'pw'")
        else {
            panic!()
        };
        assert_eq!(names, ["alice"]);
        assert_eq!(options.login, Some(true), "CREATE USER implies LOGIN");
        assert!(matches!(options.password, Some(Some(_))));
        let RoleStatement::Create { options, .. } = parse("create role r") else {
            panic!()
        };
        assert_eq!(options.login, None, "CREATE ROLE implies NOLOGIN");
        let RoleStatement::Tables {
            privileges, tables, ..
        } = parse("grant all on all tables in schema s to public")
        else {
            panic!()
        };
        assert_eq!(privileges, ALL_TABLE_PRIVILEGES);
        assert!(matches!(tables, TableTarget::AllIn(s) if s == ["s"]));
        assert!(matches!(
            parse("revoke create on schema public from public"),
            RoleStatement::Schemas {
                revoke: true,
                privileges: 1,
                ..
            }
        ));
        let stmt = parse_role_statement("grant insert on schema s to x", false, 100).unwrap();
        assert!(matches!(
            RoleStatement::from_sql(&stmt, "public"),
            Some(Err(SqlError::InvalidGrant(_)))
        ));
    }

    #[test]
    fn privileges_follow_grants_ownership_and_superuser() {
        let roles = Roles::new();
        let catalog = catalog_with_table();
        let boot = BOOTSTRAP_ROLE_ID;
        run(
            &roles,
            &catalog,
            boot,
            "create role alice login password 'a'",
        )
        .unwrap();
        run(&roles, &catalog, boot, "create role bob login").unwrap();
        let alice = roles.by_name("alice").unwrap().id;
        let bob = roles.by_name("bob").unwrap().id;
        let select = |id| roles.check_table(id, "public", "t", TablePrivilege::Select);
        // Owned by the bootstrap superuser: nobody else reads it.
        assert!(select(boot).is_ok());
        assert!(matches!(
            select(alice),
            Err(SqlError::InsufficientPrivilege(_))
        ));
        run(&roles, &catalog, boot, "grant select on t to alice").unwrap();
        assert!(select(alice).is_ok());
        assert!(select(bob).is_err());
        assert!(roles
            .check_table(alice, "public", "t", TablePrivilege::Insert)
            .is_err());
        // Grants to PUBLIC reach every role; revoking alice's leaves those.
        run(&roles, &catalog, boot, "grant select on public.t to public").unwrap();
        assert!(select(bob).is_ok());
        run(&roles, &catalog, boot, "revoke all on t from alice, public").unwrap();
        assert!(select(alice).is_err() && select(bob).is_err());
        // Only the owner grants; alice owns nothing here.
        assert!(matches!(
            run(&roles, &catalog, alice, "grant select on t to bob"),
            Err(SqlError::InsufficientPrivilege(_))
        ));
        // An owner may do anything with its table, a superuser too.
        roles.table_created("public", "t", alice);
        assert!(select(alice).is_ok() && roles.check_owner(alice, "public", "t").is_ok());
        assert!(roles.check_owner(bob, "public", "t").is_err());
        run(&roles, &catalog, alice, "grant insert on t to bob").unwrap();
        assert!(roles
            .check_table(bob, "public", "t", TablePrivilege::Insert)
            .is_ok());
        // USAGE on the schema is needed as well.
        run(
            &roles,
            &catalog,
            boot,
            "revoke usage on schema public from public",
        )
        .unwrap();
        assert!(roles
            .check_table(bob, "public", "t", TablePrivilege::Insert)
            .is_err());
        // CREATE on public is PUBLIC's by default.
        assert!(roles
            .check_schema(bob, "public", SchemaPrivilege::Create)
            .is_ok());
        // A table created anew forgets the old one's grants.
        roles.table_created("public", "t", boot);
        run(
            &roles,
            &catalog,
            boot,
            "grant usage on schema public to public",
        )
        .unwrap();
        assert!(roles
            .check_table(bob, "public", "t", TablePrivilege::Insert)
            .is_err());
    }

    #[test]
    fn role_statements_check_their_errors() {
        let roles = Roles::new();
        let catalog = catalog_with_table();
        let boot = BOOTSTRAP_ROLE_ID;
        run(&roles, &catalog, boot, "create role alice login").unwrap();
        let alice = roles.by_name("alice").unwrap().id;
        let err = |actor, sql| run(&roles, &catalog, actor, sql).unwrap_err();
        assert!(matches!(
            err(boot, "create role alice"),
            SqlError::DuplicateObject(_)
        ));
        run(&roles, &catalog, boot, "create role if not exists alice").unwrap();
        assert!(matches!(
            err(boot, "drop role nobody"),
            SqlError::UndefinedObject(_)
        ));
        run(&roles, &catalog, boot, "drop role if exists nobody").unwrap();
        assert!(matches!(
            err(boot, "alter role nobody login"),
            SqlError::UndefinedObject(_)
        ));
        assert!(matches!(
            err(boot, "grant select on t to nobody"),
            SqlError::UndefinedObject(_)
        ));
        assert!(matches!(
            err(boot, "grant select on nope to alice"),
            SqlError::Undefined {
                kind: UndefinedKind::Table,
                ..
            }
        ));
        assert!(matches!(
            err(boot, "create role public"),
            SqlError::ReservedName(_)
        ));
        assert!(matches!(
            err(boot, "create role pg_x"),
            SqlError::ReservedName(_)
        ));
        // Non-superusers manage no roles, but may change their own password.
        for sql in [
            "create role x",
            "drop role alice",
            "alter role alice superuser",
            "alter role stride password 'p'",
            "grant usage on schema public to alice",
        ] {
            assert!(
                matches!(err(alice, sql), SqlError::InsufficientPrivilege(_)),
                "{sql}"
            );
        }
        run(&roles, &catalog, alice, "alter role alice password 'new'").unwrap();
        assert!(roles.get(alice).unwrap().password.is_some());
        // The bootstrap superuser stays; a role owning a table stays.
        assert!(matches!(
            err(boot, "drop role stride"),
            SqlError::ObjectInUse(_)
        ));
        run(&roles, &catalog, boot, "create role admin superuser").unwrap();
        let admin = roles.by_name("admin").unwrap().id;
        assert!(matches!(
            err(admin, "drop role stride"),
            SqlError::DependentObjects(_)
        ));
        assert!(matches!(
            err(admin, "alter role stride nosuperuser"),
            SqlError::InsufficientPrivilege(_)
        ));
        roles.table_created("public", "t", alice);
        assert!(matches!(
            err(boot, "drop role alice"),
            SqlError::DependentObjects(_)
        ));
        roles.table_dropped("public", "t");
        run(&roles, &catalog, boot, "drop role alice").unwrap();
        assert!(roles.get(alice).is_none());
        // A new role of the same name is a new role.
        run(&roles, &catalog, boot, "create role alice").unwrap();
        assert_ne!(roles.by_name("alice").unwrap().id, alice);
    }

    /// The session's check of every statement, in-process.
    #[test]
    fn sessions_are_checked_before_statements_run() {
        let engine = crate::Engine::new(crate::EngineConfig {
            scheduler: stride_sched::SchedulerConfig {
                workers: 1,
                pin_workers: false,
                ..Default::default()
            },
            ..Default::default()
        });
        engine.runtime().set_file_access(crate::FileAccess::Any);
        let mut admin = engine.session();
        assert!(admin.is_superuser());
        admin
            .execute(
                "create table t (a bigint); insert into t values (1), (2); \
                 create role alice login password 'pw'",
            )
            .unwrap();
        let mut alice = engine.session_for("alice");
        assert!(!alice.is_superuser());
        let denied = |s: &mut crate::Session, sql: &str| match s.execute(sql) {
            Err(SqlError::InsufficientPrivilege(_)) => true,
            other => panic!("{sql}: {other:?}"),
        };
        let count = |s: &mut crate::Session, sql: &str| -> i64 {
            let out = s.query(sql).unwrap();
            let col = out.batches[0].column(0);
            arrow::array::cast::as_primitive_array::<arrow::datatypes::Int64Type>(col).value(0)
        };
        let who = alice.query("select current_user, session_user").unwrap();
        let batch = &who.batches[0];
        let names: Vec<String> = batch
            .columns()
            .iter()
            .map(|c| arrow::array::cast::as_string_array(c).value(0).to_string())
            .collect();
        assert_eq!(names, ["alice", "alice"]);
        // Reads: scans and subqueries' scans, also through EXPLAIN.
        for sql in [
            "select * from t",
            "select (select count(*) from t)",
            "select 1 from (select a from t) x",
            "explain select * from t",
            "insert into t values (3)",
            "create table copy as select * from t",
        ] {
            assert!(denied(&mut alice, sql));
        }
        // A prepared statement is checked at every execution.
        let prepared = alice.prepare("select count(*) from t").unwrap();
        assert!(matches!(
            alice.execute_prepared(&prepared, Vec::new()),
            Err(SqlError::InsufficientPrivilege(_))
        ));
        admin.execute("grant select on t to alice").unwrap();
        assert!(alice.execute_prepared(&prepared, Vec::new()).is_ok());
        assert_eq!(count(&mut alice, "select count(*) from t"), 2);
        assert!(denied(&mut alice, "insert into t values (3)"));
        admin.execute("revoke select on t from alice").unwrap();
        assert!(matches!(
            alice.execute_prepared(&prepared, Vec::new()),
            Err(SqlError::InsufficientPrivilege(_))
        ));
        // Engine-wide settings, server files, schemas, others' tables.
        for sql in [
            "set stride.policy = 'fifo'",
            "create external table f stored as csv location '/etc/passwd'",
            "create schema s",
            "drop table t",
        ] {
            assert!(denied(&mut alice, sql));
        }
        alice.execute("set stride.user_priority = 2").unwrap();
        // Her own table: everything.
        alice
            .execute("create table mine (x bigint); insert into mine values (1)")
            .unwrap();
        assert_eq!(count(&mut alice, "select count(*) from mine"), 1);
        assert_eq!(
            engine.roles().owner("public", "mine"),
            engine.roles().by_name("alice").unwrap().id
        );
        alice.execute("drop table mine").unwrap();
        // Superusers may do all of it.
        admin
            .execute("set stride.policy = 'fifo'; drop table t")
            .unwrap();
    }
}

//! The security catalog's bytes in the data directory.
//!
//! Roles (with their SCRAM verifiers), table owners and grants are written
//! whole, as one [`stride_storage::CatalogOp::PutSecurity`] record, after
//! every statement that changed them (`Engine::persist_security`), and come
//! back at recovery ([`Roles::restore`]). They are small — a few entries per
//! role and per granted table — so a change rewrites them all rather than
//! logging deltas.
//!
//! Format (little-endian; strings and verifiers are a `u32` length and
//! UTF-8 bytes; a verifier is PostgreSQL's `SCRAM-SHA-256$…` text):
//!
//! ```text
//! "stride-roles" version:u8=1 next_id:u32
//! roles:u32         { id:u32 name login:u8 superuser:u8 has_password:u8 [verifier] }
//! owners:u32        { schema table owner:u32 }
//! table_grants:u32  { schema table grantees }
//! schema_grants:u32 { schema grantees }
//! grantees = n:u32 { kind:u8 (0 PUBLIC, 1 role) [id:u32] privileges:u8 }
//! ```
//!
//! Maps are written in key order, so equal catalogs encode to equal bytes.

use std::collections::{BTreeMap, HashMap};

use super::{Grantee, Role, RoleId, Roles, State};
use crate::error::{Result, SqlError};
use crate::scram::Verifier;

const MAGIC: &[u8] = b"stride-roles";
const VERSION: u8 = 1;

impl Roles {
    /// The catalog's bytes and the generation they were taken at.
    pub fn encode(&self) -> (u64, Vec<u8>) {
        let st = self.read();
        let generation = self.generation();
        let mut w = Writer(Vec::new());
        w.0.extend_from_slice(MAGIC);
        w.0.push(VERSION);
        w.u32(st.next_id);
        w.u32(st.roles.len() as u32);
        for role in st.roles.values() {
            w.u32(role.id);
            w.str(&role.name);
            w.0.push(u8::from(role.login));
            w.0.push(u8::from(role.superuser));
            match &role.password {
                Some(v) => {
                    w.0.push(1);
                    w.str(&v.to_pg_text());
                }
                None => w.0.push(0),
            }
        }
        let owners: BTreeMap<_, _> = st.owners.iter().collect();
        w.u32(owners.len() as u32);
        for ((schema, table), owner) in owners {
            w.str(schema);
            w.str(table);
            w.u32(*owner);
        }
        let table_grants: BTreeMap<_, _> = st.table_grants.iter().collect();
        w.u32(table_grants.len() as u32);
        for ((schema, table), grants) in table_grants {
            w.str(schema);
            w.str(table);
            w.grantees(grants);
        }
        let schema_grants: BTreeMap<_, _> = st.schema_grants.iter().collect();
        w.u32(schema_grants.len() as u32);
        for (schema, grants) in schema_grants {
            w.str(schema);
            w.grantees(grants);
        }
        (generation, w.0)
    }

    /// Replaces the whole catalog with one [`Roles::encode`] wrote. Fails
    /// (and changes nothing) on bytes it cannot read with certainty.
    pub fn restore(&self, bytes: &[u8]) -> Result<()> {
        let state = decode(bytes).map_err(|why| {
            SqlError::Internal(format!(
                "the data directory's security catalog cannot be read: {why}"
            ))
        })?;
        *self.write() = state;
        Ok(())
    }
}

fn decode(bytes: &[u8]) -> std::result::Result<State, String> {
    let mut r = Reader(bytes);
    if r.take(MAGIC.len())? != MAGIC {
        return Err("not a security catalog".into());
    }
    let version = r.u8()?;
    if version != VERSION {
        return Err(format!("unknown version {version}"));
    }
    let next_id = r.u32()?;
    let mut roles = BTreeMap::new();
    for _ in 0..r.u32()? {
        let id = r.u32()?;
        let name = r.str()?;
        let login = r.bool()?;
        let superuser = r.bool()?;
        let password = if r.bool()? {
            let text = r.str()?;
            Some(Verifier::parse(&text).ok_or("a malformed password verifier")?)
        } else {
            None
        };
        roles.insert(
            id,
            Role {
                id,
                name,
                login,
                superuser,
                password,
            },
        );
    }
    let mut owners = HashMap::new();
    for _ in 0..r.u32()? {
        let key = (r.str()?, r.str()?);
        owners.insert(key, r.u32()?);
    }
    let mut table_grants = HashMap::new();
    for _ in 0..r.u32()? {
        let key = (r.str()?, r.str()?);
        table_grants.insert(key, r.grantees()?);
    }
    let mut schema_grants = HashMap::new();
    for _ in 0..r.u32()? {
        let schema = r.str()?;
        schema_grants.insert(schema, r.grantees()?);
    }
    if !r.0.is_empty() {
        return Err("bytes after the end".into());
    }
    if !roles.values().any(|role: &Role| role.superuser) {
        return Err("no superuser role".into());
    }
    Ok(State {
        next_id,
        roles,
        owners,
        table_grants,
        schema_grants,
    })
}

struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }

    fn grantees(&mut self, grants: &BTreeMap<Grantee, u8>) {
        self.u32(grants.len() as u32);
        for (who, bits) in grants {
            match who {
                Grantee::Public => self.0.push(0),
                Grantee::Role(id) => {
                    self.0.push(1);
                    self.u32(*id);
                }
            }
            self.0.push(*bits);
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("it ends early".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> std::result::Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn bool(&mut self) -> std::result::Result<bool, String> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("a flag of value {other}")),
        }
    }

    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn str(&mut self) -> std::result::Result<String, String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "a name is not UTF-8".into())
    }

    fn grantees(&mut self) -> std::result::Result<BTreeMap<Grantee, u8>, String> {
        let mut grants = BTreeMap::new();
        for _ in 0..self.u32()? {
            let who = match self.u8()? {
                0 => Grantee::Public,
                1 => Grantee::Role(self.u32()? as RoleId),
                other => return Err(format!("a grantee of kind {other}")),
            };
            grants.insert(who, self.u8()?);
        }
        Ok(grants)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::BOOTSTRAP_ROLE_ID;

    #[test]
    fn a_catalog_comes_back_equal_and_bad_bytes_are_refused() {
        let roles = Roles::new();
        {
            let mut st = roles.write();
            st.roles.insert(
                16384,
                Role {
                    id: 16384,
                    name: "we\"ird\tname".into(),
                    login: true,
                    superuser: false,
                    password: Some(Verifier::with_salt("pw", b"0123456789abcdef", 4096)),
                },
            );
            st.next_id = 16385;
            st.owners.insert(("public".into(), "t".into()), 16384);
            st.table_grants.insert(
                ("public".into(), "t".into()),
                BTreeMap::from([(Grantee::Public, 1), (Grantee::Role(16384), 0b1111)]),
            );
        }
        let (generation, bytes) = roles.encode();
        assert_eq!(generation, roles.generation());
        let back = Roles::default();
        back.restore(&bytes).unwrap();
        assert_eq!(back.encode().1, bytes, "equal catalogs encode equally");
        let role = back.by_name("we\"ird\tname").unwrap();
        assert!(role.login && !role.superuser);
        let verifier = role.password.unwrap();
        assert_eq!(verifier.iterations(), 4096);
        assert_eq!(back.owner("public", "t"), 16384);
        assert!(back.is_superuser(BOOTSTRAP_ROLE_ID));
        // Truncated, trailing bytes, another version: refused, and the
        // catalog is left as it was.
        for bad in [
            &bytes[..bytes.len() - 1],
            &[bytes.as_slice(), b"x"].concat()[..],
            &[MAGIC, &[2u8][..]].concat()[..],
        ] {
            assert!(back.restore(bad).is_err());
            assert_eq!(back.encode().1, bytes);
        }
    }
}

//! Transactions: `BEGIN` / `COMMIT` / `ROLLBACK` with snapshot isolation on
//! Stride's immutable table snapshots, and the commit of every write.
//!
//! ```text
//!            BEGIN                    error                ROLLBACK / COMMIT (= ROLLBACK)
//!  idle ───────────────► in block ───────────► aborted ─────────────────────────► idle
//!   ▲  (a write outside     │  COMMIT: validate, log, fsync, publish    (25P02 for
//!   │   a block is its own  │  ROLLBACK: discard                         every other
//!   └── transaction)  ◄─────┘                                            statement)
//! ```
//!
//! A transaction works on a private copy of the catalog (its *view*, taken
//! at its first statement: `Catalog::snapshot` shares every table snapshot)
//! and records what it changed as `CatalogOp`s. Its statements read the
//! view — the tables as they were when it started, plus its own writes.
//! `COMMIT` applies the operations to the engine's catalog in one
//! `Catalog::commit` (all or none), first checking, for every table it
//! wrote, that no other transaction committed a conflicting change since it
//! read it (first committer wins, SQLSTATE 40001):
//!
//! * a table it created, replaced or dropped must be exactly the snapshot
//!   it started from (or still absent);
//! * a table it only appended to must be the same incarnation
//!   (`Table::id`): appends of concurrent transactions commute, as
//!   concurrent `INSERT`s do in PostgreSQL — the appended rows are added to
//!   the table's current snapshot.
//!
//! With a data directory the operations (those outside transient schemas)
//! become one log record, appended under the catalog's writer lock — log
//! order is commit order — and the statement is acknowledged only after the
//! group-commit fsync covered it (`stride_storage::durable`). Later commits
//! validate against the new state at once, but readers (and new
//! transactions' snapshots) see it only once its record is durable
//! (`Catalog::publish`): nobody reads what a crash could still take back.
//! When the log has passed the checkpoint size, the committing
//! session writes the checkpoint after its commit is durable (the
//! statement returns after it).
//!
//! A write outside a block is a transaction of its own (the same path, one
//! statement long). Session settings changed in a block are restored by
//! `ROLLBACK`; role statements (which change no catalog snapshot and could
//! not be undone) are refused inside a block.
//!
//! Savepoints (`SAVEPOINT`, `ROLLBACK TO [SAVEPOINT]`, `RELEASE
//! [SAVEPOINT]`) keep a copy of the view (sharing every table snapshot, as
//! the view shares the catalog's), the number of operations recorded, what
//! was touched, the role effects and the settings. `ROLLBACK TO` puts them
//! back — a failed block is usable again, as in PostgreSQL — and keeps the
//! savepoint; `RELEASE` forgets it and every later one. The newest
//! savepoint of a name is the one named. Cursors are left as they are.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion_sql::sqlparser::ast::{
    TransactionAccessMode, TransactionIsolationLevel, TransactionMode,
};
use stride_engine::commit::Touched;
use stride_storage::catalog::CatalogOp;
use stride_storage::Catalog;

use super::{command, Engine, Session, StatementOutput};
use crate::error::{PlanKind, Result, SqlError};
use crate::settings::SessionSettings;

/// A transaction-control statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum TxnOp {
    /// `BEGIN` / `START TRANSACTION`; `read_only`: its access mode if given.
    Begin {
        read_only: Option<bool>,
    },
    Commit,
    Rollback,
    /// `SET TRANSACTION`; `read_only`: its access mode if given.
    SetTransaction {
        read_only: Option<bool>,
    },
    /// `SAVEPOINT name` (the name folded as identifiers are).
    Savepoint(String),
    /// `ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name`.
    RollbackTo(String),
    /// `RELEASE [SAVEPOINT] name`.
    Release(String),
}

impl TxnOp {
    /// `BEGIN`'s or `SET TRANSACTION`'s access mode; refuses `SERIALIZABLE`,
    /// which snapshot isolation does not give. `READ COMMITTED` and `READ
    /// UNCOMMITTED` get snapshot isolation, which is stronger.
    pub(super) fn access_mode(modes: &[TransactionMode]) -> Result<Option<bool>> {
        let mut read_only = None;
        for mode in modes {
            match mode {
                TransactionMode::AccessMode(TransactionAccessMode::ReadOnly) => {
                    read_only = Some(true)
                }
                TransactionMode::AccessMode(TransactionAccessMode::ReadWrite) => {
                    read_only = Some(false)
                }
                TransactionMode::IsolationLevel(TransactionIsolationLevel::Serializable)
                | TransactionMode::IsolationLevel(TransactionIsolationLevel::Snapshot) => {
                    return Err(SqlError::Unsupported(
                        "isolation level SERIALIZABLE (Stride gives snapshot isolation: \
                         REPEATABLE READ)"
                            .into(),
                    ))
                }
                TransactionMode::IsolationLevel(_) => {}
            }
        }
        Ok(read_only)
    }
}

/// Ownership bookkeeping a transaction's DDL implies, applied in order at
/// commit (a creation also at once, so that the creator may use its table
/// within the block; undone by a rollback).
#[derive(Debug, Clone)]
enum RoleEffect {
    TableCreated {
        schema: String,
        table: String,
        owner: crate::roles::RoleId,
    },
    TableDropped {
        schema: String,
        table: String,
    },
    SchemaDropped(String),
}

/// The session's transaction.
#[derive(Debug, Default)]
pub(super) struct TransactionState {
    /// Inside `BEGIN` … `COMMIT` / `ROLLBACK`.
    pub(super) open: bool,
    /// A statement of the block failed: 25P02 until it ends.
    pub(super) aborted: bool,
    /// Writes fail with 25006.
    read_only: bool,
    /// The private catalog: the snapshot at the first statement plus the
    /// transaction's writes. `None` before the first statement.
    view: Option<Arc<Catalog>>,
    ops: Vec<CatalogOp>,
    touched: BTreeMap<(String, String), Touched>,
    roles: Vec<RoleEffect>,
    /// Settings and search path at `BEGIN`, restored by `ROLLBACK`.
    saved: Option<(SessionSettings, String)>,
    /// Savepoints, oldest first.
    savepoints: Vec<Savepoint>,
}

/// What `ROLLBACK TO` a savepoint puts back.
#[derive(Debug)]
struct Savepoint {
    name: String,
    /// A copy of the view when the savepoint was set; never written (a
    /// rollback installs a copy of it, so that it can be rolled back to
    /// again).
    view: Arc<Catalog>,
    ops: usize,
    touched: BTreeMap<(String, String), Touched>,
    roles: usize,
    read_only: bool,
    settings: (SessionSettings, String),
}

impl Session {
    /// The catalog this session's statements read: its transaction's view,
    /// or the engine's catalog outside a transaction.
    pub(super) fn catalog_view(&self) -> &Arc<Catalog> {
        self.transaction
            .view
            .as_ref()
            .unwrap_or(self.engine.runtime.catalog())
    }

    /// Takes the block's snapshot at its first statement.
    pub(super) fn take_snapshot(&mut self) {
        if self.transaction.open && self.transaction.view.is_none() {
            self.transaction.view = Some(Arc::new(self.engine.runtime.catalog().snapshot()));
        }
    }

    /// Whether the session's block failed (reported to clients as the
    /// transaction status `E`).
    pub fn in_failed_transaction(&self) -> bool {
        self.transaction.open && self.transaction.aborted
    }

    /// A statement failed where the session did not see it (the protocol
    /// layer refused a message of it): inside a block, the block is aborted.
    pub fn fail_statement(&mut self) {
        self.statement_failed();
    }

    /// A statement failed: inside a block, the block is aborted; outside
    /// one, what the statement's own transaction left (should it have
    /// panicked past [`Session::writing`]) is discarded.
    pub(super) fn statement_failed(&mut self) {
        if self.transaction.open {
            self.transaction.aborted = true;
        } else if self.transaction.view.is_some() {
            let state = std::mem::take(&mut self.transaction);
            self.discard(state);
        }
    }

    /// Refuses every statement but `COMMIT` / `ROLLBACK` in a failed block.
    pub(super) fn check_not_aborted(&self) -> Result<()> {
        if self.in_failed_transaction() {
            Err(SqlError::InFailedTransaction)
        } else {
            Ok(())
        }
    }

    fn default_read_only(&self) -> bool {
        self.settings
            .get("default_transaction_read_only")
            .is_some_and(|v| matches!(v.as_str(), "on" | "true" | "1" | "yes"))
    }

    pub(super) fn transaction_control(&mut self, op: TxnOp) -> Result<StatementOutput> {
        match op {
            TxnOp::Begin { read_only } => {
                if !self.transaction.open {
                    self.transaction = TransactionState {
                        open: true,
                        read_only: read_only.unwrap_or_else(|| self.default_read_only()),
                        saved: Some((self.settings.clone(), self.default_schema.clone())),
                        ..Default::default()
                    };
                }
                // PostgreSQL: BEGIN inside a block warns and changes nothing.
                Ok(command("BEGIN"))
            }
            TxnOp::SetTransaction { read_only } => {
                if let (true, Some(ro)) = (self.transaction.open, read_only) {
                    if !ro && self.transaction.read_only && self.transaction.view.is_some() {
                        return Err(SqlError::plan(
                            PlanKind::InTransactionBlock,
                            "transaction read-write mode must be set before any query",
                        ));
                    }
                    self.transaction.read_only = ro;
                }
                // Outside a block PostgreSQL warns that it has no effect.
                Ok(command("SET"))
            }
            TxnOp::Savepoint(name) => {
                self.in_block_for("SAVEPOINT")?;
                self.take_snapshot();
                let view = self.catalog_view().snapshot();
                let settings = (self.settings.clone(), self.default_schema.clone());
                let txn = &mut self.transaction;
                txn.savepoints.push(Savepoint {
                    name,
                    view: Arc::new(view),
                    ops: txn.ops.len(),
                    touched: txn.touched.clone(),
                    roles: txn.roles.len(),
                    read_only: txn.read_only,
                    settings,
                });
                Ok(command("SAVEPOINT"))
            }
            TxnOp::RollbackTo(name) => {
                self.in_block_for("ROLLBACK TO SAVEPOINT")?;
                let at = self.savepoint_named(&name)?;
                let txn = &mut self.transaction;
                txn.savepoints.truncate(at + 1);
                let point = &txn.savepoints[at];
                txn.view = Some(Arc::new(point.view.snapshot()));
                txn.ops.truncate(point.ops);
                txn.touched = point.touched.clone();
                txn.read_only = point.read_only;
                txn.aborted = false;
                let undone = txn.roles.split_off(point.roles);
                let (settings, schema) = point.settings.clone();
                self.settings = settings;
                self.default_schema = schema;
                self.undo_role_effects(&undone);
                Ok(command("ROLLBACK"))
            }
            TxnOp::Release(name) => {
                self.in_block_for("RELEASE SAVEPOINT")?;
                let at = self.savepoint_named(&name)?;
                self.transaction.savepoints.truncate(at);
                Ok(command("RELEASE"))
            }
            TxnOp::Rollback => {
                let state = std::mem::take(&mut self.transaction);
                self.discard(state);
                Ok(command("ROLLBACK"))
            }
            TxnOp::Commit => {
                let state = std::mem::take(&mut self.transaction);
                if state.aborted {
                    self.discard(state);
                    return Ok(command("ROLLBACK"));
                }
                self.commit(state)?;
                Ok(command("COMMIT"))
            }
        }
    }

    /// Runs a statement that changes the catalog: in a block, into the
    /// block's view; otherwise as a transaction of its own, committed when
    /// the statement succeeds. `what` names it for the read-only refusal.
    pub(super) fn writing(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut Self) -> Result<StatementOutput>,
    ) -> Result<StatementOutput> {
        let read_only = if self.transaction.open {
            self.transaction.read_only
        } else {
            self.default_read_only()
        };
        if read_only {
            return Err(SqlError::ReadOnlyTransaction(format!(
                "cannot execute {what} in a read-only transaction"
            )));
        }
        if self.transaction.open {
            self.take_snapshot();
            return f(self);
        }
        self.transaction.view = Some(Arc::new(self.engine.runtime.catalog().snapshot()));
        let result = f(self);
        let state = std::mem::take(&mut self.transaction);
        match result {
            Ok(out) => {
                self.commit(state)?;
                Ok(out)
            }
            Err(e) => {
                self.discard(state);
                Err(e)
            }
        }
    }

    /// Applies `op` to the transaction's view and records it.
    pub(super) fn write_op(&mut self, op: CatalogOp) -> Result<()> {
        self.take_snapshot();
        let txn = &mut self.transaction;
        let view = txn
            .view
            .clone()
            .ok_or_else(|| SqlError::Internal("a write outside a transaction".into()))?;
        let key = match &op {
            CatalogOp::PutTable { schema, table } => {
                Some((schema.clone(), table.name().to_string(), true))
            }
            CatalogOp::Append { schema, table, .. } => Some((schema.clone(), table.clone(), false)),
            CatalogOp::DropTable { schema, table } => Some((schema.clone(), table.clone(), true)),
            CatalogOp::CreateSchema(_) | CatalogOp::DropSchema(_) | CatalogOp::PutSecurity(_) => {
                None
            }
        };
        let before = key.as_ref().and_then(|(s, t, _)| view.table(s, t).ok());
        // The log and the commit get an append's blocks as the table stores
        // them (cast to its column types; the table may merge them into its
        // last block, so they are not read back from it).
        let op = match op {
            CatalogOp::Append {
                schema,
                table,
                blocks,
            } => {
                let target = view.table(&schema, &table)?;
                let blocks = target.conform_blocks(blocks)?;
                if blocks.is_empty() {
                    return Ok(());
                }
                CatalogOp::Append {
                    schema,
                    table,
                    blocks,
                }
            }
            other => other,
        };
        view.apply(&op)?;
        if let Some((s, t, rewritten)) = key {
            let entry = txn.touched.entry((s, t)).or_insert(Touched {
                base: before,
                rewritten: false,
            });
            entry.rewritten |= rewritten;
        }
        txn.ops.push(op);
        Ok(())
    }

    /// Notes that the transaction created `schema.table` (owned by the
    /// session's role from now on).
    pub(super) fn table_created(&mut self, schema: &str, table: &str) {
        self.engine.roles.table_created(schema, table, self.role);
        self.transaction.roles.push(RoleEffect::TableCreated {
            schema: schema.to_string(),
            table: table.to_string(),
            owner: self.role,
        });
    }

    /// Notes that the transaction dropped `schema.table` (its owner and
    /// grants go at commit).
    pub(super) fn table_dropped(&mut self, schema: &str, table: &str) {
        self.transaction.roles.push(RoleEffect::TableDropped {
            schema: schema.to_string(),
            table: table.to_string(),
        });
    }

    /// Notes that the transaction dropped `schema`.
    pub(super) fn schema_dropped(&mut self, schema: &str) {
        self.transaction
            .roles
            .push(RoleEffect::SchemaDropped(schema.to_string()));
    }

    /// Refuses a savepoint statement outside a transaction block (25P01).
    fn in_block_for(&self, what: &str) -> Result<()> {
        if self.transaction.open {
            Ok(())
        } else {
            Err(SqlError::plan(
                PlanKind::NoActiveTransaction,
                format!("{what} can only be used in transaction blocks"),
            ))
        }
    }

    /// The newest savepoint named `name` (3B001 if there is none).
    fn savepoint_named(&self, name: &str) -> Result<usize> {
        self.transaction
            .savepoints
            .iter()
            .rposition(|p| p.name == name)
            .ok_or_else(|| {
                SqlError::UndefinedSavepoint(format!("savepoint \"{name}\" does not exist"))
            })
    }

    /// Undoes the ownership a rolled-back creation gave at once.
    fn undo_role_effects(&self, effects: &[RoleEffect]) {
        for effect in effects {
            if let RoleEffect::TableCreated { schema, table, .. } = effect {
                if self.engine.runtime.catalog().table(schema, table).is_err() {
                    self.engine.roles.table_dropped(schema, table);
                }
            }
        }
    }

    /// Ends a transaction without applying it.
    fn discard(&mut self, state: TransactionState) {
        self.undo_role_effects(&state.roles);
        if let Some((settings, schema)) = state.saved {
            self.settings = settings;
            self.default_schema = schema;
        }
    }

    /// Commits a transaction's writes (nothing to do for a reader).
    fn commit(&mut self, state: TransactionState) -> Result<()> {
        if state.ops.is_empty() {
            return Ok(());
        }
        let outcome = self
            .engine
            .runtime
            .commit(&state.ops, &state.touched)
            .map_err(SqlError::from);
        if outcome.is_err() {
            self.discard(state);
            return outcome;
        }
        for effect in state.roles {
            match effect {
                RoleEffect::TableCreated {
                    schema,
                    table,
                    owner,
                } => self.engine.roles.table_created(&schema, &table, owner),
                RoleEffect::TableDropped { schema, table } => {
                    self.engine.roles.table_dropped(&schema, &table)
                }
                RoleEffect::SchemaDropped(schema) => self.engine.roles.schema_dropped(&schema),
            }
        }
        self.engine.persist_security()?;
        if self
            .catalog_view()
            .schema_exists(&self.default_schema.clone())
        {
            return Ok(());
        }
        // The block dropped the schema the session resolves names in.
        self.default_schema = stride_storage::catalog::DEFAULT_SCHEMA.to_string();
        Ok(())
    }
}

impl Engine {
    /// Writes the roles, table owners and grants to the data directory if
    /// they changed since they were last written (nothing without a data
    /// directory). Called after every statement that may change them,
    /// before it is acknowledged.
    pub fn persist_security(&self) -> Result<()> {
        if self.runtime.data_dir().is_none() {
            return Ok(());
        }
        let mut persisted = self
            .security_persisted
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if *persisted == self.roles.generation() {
            return Ok(());
        }
        let (generation, bytes) = self.roles.encode();
        let op = CatalogOp::PutSecurity(Arc::new(bytes));
        self.runtime
            .commit(std::slice::from_ref(&op), &Default::default())?;
        *persisted = generation;
        Ok(())
    }
}

//! The quota service's tables (`quota_policies`, `quota_assignments`, `quota_settings`) and
//! their migrations, owned here beside the ledger's own (`audit.rs`) since they live in the
//! ledger's database. Each migration runs once, in order; `quota_schema.version` counts the
//! ones applied (the count databases made by the service's earlier Python migrations hold).

use super::quota_db::QuotaDb;
use super::sql::{Dialect, SqlValue};
use super::LedgerError;

/// The quota tables' migrations, in order: each a list of statements; `{id}` is the
/// dialect's auto-increment key.
pub(crate) const QUOTA_MIGRATIONS: &[&[&str]] = &[
    &[
        "CREATE TABLE IF NOT EXISTS quota_policies ( \
         id {id}, name TEXT NOT NULL UNIQUE, description TEXT NOT NULL DEFAULT '', \
         limits TEXT NOT NULL, created_by TEXT, created_at BIGINT NOT NULL, \
         updated_at BIGINT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS quota_assignments ( \
         id {id}, policy_id BIGINT NOT NULL REFERENCES quota_policies(id), \
         subject_type TEXT NOT NULL CHECK (subject_type IN ('team', 'user', 'role')), \
         subject_id TEXT NOT NULL, effective_from BIGINT NOT NULL DEFAULT 0, \
         UNIQUE (subject_type, subject_id))",
    ],
    &["CREATE TABLE IF NOT EXISTS quota_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)"],
];

impl QuotaDb {
    /// Creates the quota tables, or runs the migrations an older database lacks, in one
    /// transaction: a failed migration leaves nothing half-applied. Tried twice: two
    /// processes creating the tables at the same instant can collide, and the second try
    /// sees the other's tables.
    pub fn migrate(&mut self) -> Result<(), LedgerError> {
        match self.migrate_once() {
            Ok(()) => Ok(()),
            Err(_) => self.migrate_once(),
        }
    }

    fn migrate_once(&mut self) -> Result<(), LedgerError> {
        let dialect = self.sql();
        self.execute(dialect.begin(), &[])?;
        match self.migrate_in(dialect) {
            Ok(()) => self.execute("COMMIT", &[]).map(drop),
            Err(e) => {
                // The connection may be gone; the migration's error is the one to report.
                let _ = self.execute("ROLLBACK", &[]);
                Err(e)
            }
        }
    }

    /// The migrations not yet applied, inside the caller's transaction.
    fn migrate_in(&mut self, dialect: Dialect) -> Result<(), LedgerError> {
        self.execute(
            "CREATE TABLE IF NOT EXISTS quota_schema (version BIGINT NOT NULL)",
            &[],
        )?;
        let rows = self.execute("SELECT version FROM quota_schema", &[])?;
        let applied = match rows.first().and_then(|r| r.first()) {
            Some(SqlValue::Int(v)) => usize::try_from(*v).unwrap_or(0),
            Some(other) => {
                return Err(LedgerError(format!(
                    "quota_schema.version: {other:?} is not a count of migrations"
                )))
            }
            None => {
                self.execute("INSERT INTO quota_schema (version) VALUES (0)", &[])?;
                0
            }
        };
        for statements in QUOTA_MIGRATIONS.iter().skip(applied) {
            for statement in statements.iter() {
                self.execute(&statement.replace("{id}", dialect.auto_id()), &[])?;
            }
        }
        let count = i64::try_from(QUOTA_MIGRATIONS.len()).unwrap_or(i64::MAX);
        let update = format!(
            "UPDATE quota_schema SET version = {}",
            dialect.placeholder(1)
        );
        self.execute(&update, &[SqlValue::Int(count)])?;
        Ok(())
    }
}

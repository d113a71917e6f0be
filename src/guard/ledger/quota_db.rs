//! The connection the quota service's tables (`quota_policies`, `quota_assignments`) use: the
//! ledger's database (SQLite file or PostgreSQL), on a connection of its own so that policy
//! changes never wait behind the ledger's writer. The tables are created and migrated here
//! (`QuotaDb::migrate`, `quota_schema.rs`); the service (Python, `quota/store.py`) sends its
//! statements and transactions (`BEGIN` … `COMMIT`) through [`QuotaDb::execute`]; a lost
//! connection is opened again at the next statement.

use super::sql::{Dialect, SqlValue};
use super::LedgerError;

/// Where the quota tables live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaDbAt {
    /// A SQLite file (`:memory:`: a database of this connection only).
    Sqlite(String),
    /// A PostgreSQL URL.
    Postgres(String),
}

enum Conn {
    #[cfg(feature = "sqlite")]
    Sqlite(rusqlite::Connection),
    #[cfg(feature = "postgres")]
    Postgres(postgres::Client),
}

/// One connection to the quota tables' database.
pub struct QuotaDb {
    at: QuotaDbAt,
    conn: Option<Conn>,
}

impl std::fmt::Debug for QuotaDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaDb")
            .field("dialect", &self.dialect())
            .finish()
    }
}

fn err(e: impl std::fmt::Display) -> LedgerError {
    LedgerError(e.to_string())
}

impl QuotaDb {
    /// A connection to `at`, opened at the first statement.
    pub fn new(at: QuotaDbAt) -> Self {
        QuotaDb { at, conn: None }
    }

    /// `sqlite` or `postgres`: the SQL dialect statements must be written in.
    pub fn dialect(&self) -> &'static str {
        match self.at {
            QuotaDbAt::Sqlite(_) => "sqlite",
            QuotaDbAt::Postgres(_) => "postgres",
        }
    }

    /// The SQL text this database takes.
    pub(crate) fn sql(&self) -> Dialect {
        match self.at {
            QuotaDbAt::Sqlite(_) => Dialect::Sqlite,
            QuotaDbAt::Postgres(_) => Dialect::Postgres,
        }
    }

    fn open(&self) -> Result<Conn, LedgerError> {
        match &self.at {
            #[cfg(feature = "sqlite")]
            QuotaDbAt::Sqlite(path) => {
                let conn = if path == ":memory:" {
                    rusqlite::Connection::open_in_memory()
                } else {
                    rusqlite::Connection::open(path)
                }
                .map_err(|e| err(format!("cannot open the quota tables in {path:?}: {e}")))?;
                conn.busy_timeout(std::time::Duration::from_secs(10))
                    .map_err(err)?;
                conn.execute_batch("PRAGMA foreign_keys = ON")
                    .map_err(err)?;
                Ok(Conn::Sqlite(conn))
            }
            #[cfg(feature = "postgres")]
            QuotaDbAt::Postgres(url) => postgres::Client::connect(url, postgres::NoTls)
                .map(Conn::Postgres)
                .map_err(|e| err(format!("cannot connect to the quota tables' database: {e}"))),
            #[allow(unreachable_patterns)]
            _ => Err(err(format!(
                "this build has no {} support (cargo feature)",
                self.dialect()
            ))),
        }
    }

    /// Runs one statement (placeholders `?` for SQLite, `$1`… for PostgreSQL) and returns
    /// its rows. `BEGIN` / `COMMIT` / `ROLLBACK` make transactions.
    pub fn execute(
        &mut self,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Vec<Vec<SqlValue>>, LedgerError> {
        if self.conn.is_none() {
            self.conn = Some(self.open()?);
        }
        let result = match self.conn.as_mut() {
            #[cfg(feature = "sqlite")]
            Some(Conn::Sqlite(c)) => super::sqlite::rows(c, sql, params).map_err(err),
            #[cfg(feature = "postgres")]
            Some(Conn::Postgres(c)) => {
                super::postgres::rows(c, sql, params).map_err(|e| match e.as_db_error() {
                    Some(db) => err(db.message()),
                    None => err(e),
                })
            }
            #[allow(unreachable_patterns)]
            _ => Err(err("no connection")),
        };
        #[cfg(feature = "postgres")]
        if let Some(Conn::Postgres(c)) = &self.conn {
            if c.is_closed() {
                self.conn = None;
            }
        }
        result
    }
}

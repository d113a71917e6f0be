//! The SQLite ledger: the embedded default, in a file or in memory. What SQLite brings to
//! the generic [`SqlLedger`]: opening a file (WAL, waiting out other processes opening it),
//! binding and reading values, the multi-row insert.

use std::time::{Duration, Instant};

use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{params_from_iter, Connection, ToSql};

use super::audit_db;
use super::sql::{self, Dialect, SqlValue};
use super::sql_ledger::{self, SqlDialect, SqlLedger};
use super::{LedgerError, LedgerRow};

/// SQLite, as a [`SqlLedger`]'s database.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sqlite;

/// A ledger in a SQLite file (or in memory with `":memory:"`); the table is created on open.
/// A `kill -9` loses at most about the last 250 ms of billed rows; a durable ledger none.
pub type SqliteLedger = SqlLedger<Sqlite>;

impl ToSql for SqlValue {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            SqlValue::Null => ToSqlOutput::Owned(Value::Null),
            SqlValue::Int(i) => ToSqlOutput::Owned(Value::Integer(*i)),
            SqlValue::Real(r) => ToSqlOutput::Owned(Value::Real(*r)),
            SqlValue::Text(t) => ToSqlOutput::Borrowed(ValueRef::Text(t.as_bytes())),
        })
    }
}

fn text(e: rusqlite::Error) -> String {
    e.to_string()
}

/// How long a first open waits out the other processes opening (creating, migrating) the
/// same file at the same instant.
const OPEN_WAIT: Duration = Duration::from_secs(10);

/// Whether an error is another connection holding the file for a moment: SQLite answers
/// some of these at once, without calling the busy handler (switching the file to WAL, a
/// `CREATE TABLE` whose snapshot another process's `CREATE` made stale), so the open tries
/// again.
fn busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Opens `path`, creating and migrating the tables, trying again while another process
/// opening the same file at the same instant holds it (at most `OPEN_WAIT`).
fn open(path: &str, durable: bool) -> Result<Connection, String> {
    let deadline = Instant::now() + OPEN_WAIT;
    let mut pause = Duration::from_millis(2);
    loop {
        match try_open(path, durable) {
            Err((e, _)) if busy(&e) && Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err((e, doing)) => return Err(format!("{doing} the SQLite ledger {path:?}: {e}")),
            Ok(conn) => return Ok(conn),
        }
    }
}

/// One try at `open`; an error says what was being done.
fn try_open(path: &str, durable: bool) -> Result<Connection, (rusqlite::Error, &'static str)> {
    let mut conn = if path == ":memory:" {
        Connection::open_in_memory()
    } else {
        Connection::open(path)
    }
    .map_err(|e| (e, "cannot open"))?;
    let setting = |e| (e, "cannot set up");
    conn.busy_timeout(Duration::from_secs(10))
        .map_err(setting)?;
    if path != ":memory:" {
        // WAL lets readers in other processes work while this one writes.
        let _: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(setting)?;
        // In WAL mode, NORMAL skips the fsync of each commit (the WAL is synced at
        // checkpoints): a committed row survives the process being killed (it is in the
        // OS's cache), only a power loss or OS crash can lose the last commits. Durable
        // ledgers sync every commit (FULL).
        let sync = if durable { "FULL" } else { "NORMAL" };
        conn.execute_batch(&format!("PRAGMA synchronous={sync}"))
            .map_err(setting)?;
    }
    // A multi-row insert keeps a statement journal (to undo its own rows alone); on disk it
    // is a new temporary file per statement and a write of every page the statement changes,
    // as many writes as the WAL's. In memory it costs neither, and it never outlives the
    // statement, so a crash cannot need it.
    conn.execute_batch("PRAGMA temp_store=MEMORY")
        .map_err(setting)?;
    conn.execute_batch(sql::SCHEMA)
        .map_err(|e| (e, "cannot create the ledger table in"))?;
    audit_db::sqlite_migrate(&mut conn).map_err(|e| (e, "cannot migrate"))?;
    Ok(conn)
}

/// The rows `sql` selects (text and blobs read as text).
pub(crate) fn rows(
    conn: &Connection,
    sql: &str,
    params: &[SqlValue],
) -> rusqlite::Result<Vec<Vec<SqlValue>>> {
    let mut stmt = conn.prepare(sql)?;
    let columns = stmt.column_count();
    let mut rows = stmt.query(params_from_iter(params))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let mut values = Vec::with_capacity(columns);
        for i in 0..columns {
            values.push(match row.get_ref(i)? {
                ValueRef::Null => SqlValue::Null,
                ValueRef::Integer(v) => SqlValue::Int(v),
                ValueRef::Real(v) => SqlValue::Real(v),
                ValueRef::Text(v) | ValueRef::Blob(v) => {
                    SqlValue::Text(String::from_utf8_lossy(v).into_owned())
                }
            });
        }
        out.push(values);
    }
    Ok(out)
}

impl SqlDialect for Sqlite {
    const NAME: &'static str = "sqlite";
    const SQL: Dialect = Dialect::Sqlite;
    type Conn = Connection;

    fn open(at: &str, durable: bool) -> Result<Connection, String> {
        open(at, durable)
    }

    fn insert(conn: &mut Connection, rows: &[LedgerRow]) -> Result<(), String> {
        let tx = immediate(conn)?;
        let mut left = rows;
        while !left.is_empty() {
            let most = left.len().min(sql::chunk_rows(Dialect::Sqlite));
            let n = INSERT_ROWS.into_iter().find(|n| *n <= most).unwrap_or(1);
            let (chunk, rest) = left.split_at(n);
            left = rest;
            let mut insert = INSERTS
                .with(|texts| {
                    let mut texts = texts.borrow_mut();
                    let text = texts
                        .entry(n)
                        .or_insert_with(|| sql::insert_sql(Dialect::Sqlite, n));
                    tx.prepare_cached(text)
                })
                .map_err(text)?;
            insert
                .execute(params_from_iter(sql::insert_all_params(chunk)))
                .map_err(text)?;
        }
        tx.commit().map_err(text)
    }

    fn execute_each(
        conn: &mut Connection,
        sql: &str,
        each: &[Vec<SqlValue>],
    ) -> Result<(), String> {
        let tx = immediate(conn)?;
        {
            let mut statement = tx.prepare_cached(sql).map_err(text)?;
            for params in each {
                statement.execute(params_from_iter(params)).map_err(text)?;
            }
        }
        tx.commit().map_err(text)
    }

    fn select(
        conn: &mut Connection,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Vec<Vec<SqlValue>>, String> {
        rows(conn, sql, params).map_err(text)
    }
}

/// The rows of one insert statement: a transaction's rows go in statements of these sizes,
/// largest first, so four statements are ever prepared (parsing a multi-row insert costs
/// more than running it; one per count of rows would be parsed again at nearly every
/// commit of a few rows, the statement cache holding 16). Each fits SQLite's bound on
/// parameters (`sql::chunk_rows`).
const INSERT_ROWS: [usize; 4] = [512, 64, 8, 1];

thread_local! {
    /// The text of each insert of `INSERT_ROWS` (its placeholders formatted once).
    static INSERTS: std::cell::RefCell<std::collections::HashMap<usize, String>> =
        std::cell::RefCell::default();
}

/// A write transaction that takes the write lock first (waiting out other writers, such as
/// other processes on the same file) before anything is read, so no other commit can make
/// its snapshot stale ("database is locked" at once, no waiting).
fn immediate(conn: &mut Connection) -> Result<rusqlite::Transaction<'_>, String> {
    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(text)
}

impl SqlLedger<Sqlite> {
    /// Opens (creating if needed) the ledger at `path`, or an in-memory one for `":memory:"`.
    /// Rows are committed within about 250 ms of being recorded (WAL, `synchronous=NORMAL`).
    pub fn open(path: &str) -> Result<Self, LedgerError> {
        sql_ledger::start(path, path.to_string(), false)
    }

    /// `open`, but `record` (and so `Ticket::bill`) returns only once the row is committed
    /// and synced (`synchronous=FULL`); concurrent billers share one commit.
    pub fn open_durable(path: &str) -> Result<Self, LedgerError> {
        sql_ledger::start(path, path.to_string(), true)
    }

    /// The file path (or `":memory:"`).
    pub fn path(&self) -> &str {
        self.at()
    }
}

#[cfg(test)]
mod tests {
    /// A ledger's connection keeps SQLite's statement journal in memory (`temp_store` 2),
    /// in a file as in memory: no temporary file per multi-row insert (docs/ledger.md).
    #[test]
    fn the_statement_journal_is_kept_in_memory() {
        let file =
            std::env::temp_dir().join(format!("ug-temp-store-{}.sqlite", std::process::id()));
        for at in [file.display().to_string(), ":memory:".to_string()] {
            let conn = super::try_open(&at, false)
                .map_err(|(e, _)| e)
                .expect("opens");
            let store: i64 = conn
                .query_row("PRAGMA temp_store", [], |r| r.get(0))
                .expect("reads");
            assert_eq!(store, 2, "temp_store of {at}");
        }
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
        }
    }
}

//! The SQLite ledger: the embedded default, in a file or in memory.

use std::time::{Duration, Instant};

use rusqlite::types::{ToSqlOutput, Value};
use rusqlite::{params_from_iter, Connection, ToSql};

use super::audit_db;
use super::sql::{self, Dialect, Param};
use super::writer::{Backend, Writer};
use super::{
    AuditQuery, AuditRow, GroupBy, Ledger, LedgerError, LedgerRow, SumFilter, UsageGroup,
    UsageQuery,
};
use crate::guard::domain::rule::Metric;

impl ToSql for Param {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Owned(match self {
            Param::Text(s) => Value::Text(s.clone()),
            Param::OptText(Some(s)) => Value::Text(s.clone()),
            Param::OptText(None) => Value::Null,
            Param::Int(i) => Value::Integer(*i),
        }))
    }
}

struct SqliteBackend {
    conn: Connection,
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

impl SqliteBackend {
    /// Opens `path`, creating and migrating the tables, trying again while another process
    /// opening the same file at the same instant holds it (at most `OPEN_WAIT`).
    fn open(path: &str, durable: bool) -> Result<Self, String> {
        let deadline = Instant::now() + OPEN_WAIT;
        let mut pause = Duration::from_millis(2);
        loop {
            match Self::try_open(path, durable) {
                Err((e, _)) if busy(&e) && Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err((e, doing)) => return Err(format!("{doing} the SQLite ledger {path:?}: {e}")),
                Ok(backend) => return Ok(backend),
            }
        }
    }

    /// One try at `open`; an error says what was being done.
    fn try_open(path: &str, durable: bool) -> Result<Self, (rusqlite::Error, &'static str)> {
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
        conn.execute_batch(sql::SCHEMA)
            .map_err(|e| (e, "cannot create the ledger table in"))?;
        audit_db::sqlite_migrate(&mut conn).map_err(|e| (e, "cannot migrate"))?;
        Ok(SqliteBackend { conn })
    }
}

/// A whole number from a BIGINT column (negative never happens; read as 0).
fn whole(row: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<u64> {
    Ok(row.get::<_, i64>(i)?.max(0) as u64)
}

impl Backend for SqliteBackend {
    fn write(&mut self, rows: &[LedgerRow]) -> Result<(), String> {
        // Immediate: the write lock is taken (waiting out other writers, such as other
        // processes on the same file) before anything is read, so no other commit can make
        // the transaction's snapshot stale ("database is locked" at once, no waiting).
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(text)?;
        for chunk in rows.chunks(sql::chunk_rows(Dialect::Sqlite)) {
            let mut insert = tx
                .prepare_cached(&sql::insert_sql(Dialect::Sqlite, chunk.len()))
                .map_err(text)?;
            insert
                .execute(params_from_iter(sql::insert_all_params(chunk)))
                .map_err(text)?;
        }
        tx.commit().map_err(text)
    }

    fn sum(&mut self, filter: &SumFilter, metric: Metric) -> Result<u64, String> {
        let (q, params) = sql::sum_sql(Dialect::Sqlite, filter, metric);
        self.conn
            .query_row(&q, params_from_iter(params), |r| whole(r, 0))
            .map_err(text)
    }

    fn query(&mut self, query: &UsageQuery) -> Result<Vec<UsageGroup>, String> {
        let (q, params) = sql::query_sql(Dialect::Sqlite, query);
        let mut stmt = self.conn.prepare(&q).map_err(text)?;
        let groups: &[GroupBy] = &query.group_by;
        let rows = stmt
            .query_map(params_from_iter(params), |r| {
                let n = groups.len();
                let mut keys = Vec::with_capacity(n);
                for (i, g) in groups.iter().enumerate() {
                    keys.push((*g, r.get::<_, Option<String>>(i)?));
                }
                Ok(UsageGroup {
                    keys,
                    requests: whole(r, n)?,
                    input_tokens: whole(r, n + 1)?,
                    cached_input_tokens: whole(r, n + 2)?,
                    output_tokens: whole(r, n + 3)?,
                    reasoning_tokens: whole(r, n + 4)?,
                    cost_micros: whole(r, n + 5)?,
                    compute_ms: whole(r, n + 6)?,
                })
            })
            .map_err(text)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(text)
    }

    fn write_audit(&mut self, rows: &[AuditRow]) -> Result<(), String> {
        audit_db::sqlite_write(&mut self.conn, rows)
    }

    fn audit(&mut self, query: &AuditQuery) -> Result<Vec<AuditRow>, String> {
        audit_db::sqlite_read(&self.conn, query)
    }
}

/// A ledger in a SQLite file (or in memory with `":memory:"`); the table is created on open.
/// A `kill -9` loses at most about the last 250 ms of billed rows; a durable ledger none.
#[derive(Debug)]
pub struct SqliteLedger {
    path: String,
    writer: Writer,
}

impl SqliteLedger {
    /// Opens (creating if needed) the ledger at `path`, or an in-memory one for `":memory:"`.
    /// Rows are committed within about 250 ms of being recorded (WAL, `synchronous=NORMAL`).
    pub fn open(path: &str) -> Result<Self, LedgerError> {
        Self::open_with(path, false)
    }

    /// `open`, but `record` (and so `Ticket::bill`) returns only once the row is committed
    /// and synced (`synchronous=FULL`); concurrent billers share one commit.
    pub fn open_durable(path: &str) -> Result<Self, LedgerError> {
        Self::open_with(path, true)
    }

    fn open_with(path: &str, durable: bool) -> Result<Self, LedgerError> {
        let owned = path.to_string();
        let writer = Writer::start("sqlite", durable, move || {
            SqliteBackend::open(&owned, durable)
        })?;
        Ok(SqliteLedger {
            path: path.to_string(),
            writer,
        })
    }

    /// The file path (or `":memory:"`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The most rows recorded and not yet written at any time (`pending().0` never exceeds it).
    pub fn queue_bound(&self) -> usize {
        super::queue::MAX_ROWS
    }
}

impl Ledger for SqliteLedger {
    fn record(&self, row: LedgerRow) {
        self.writer.record(row)
    }

    fn flush(&self) -> Result<(), LedgerError> {
        self.writer.flush()
    }

    fn close(&self) -> Result<(), LedgerError> {
        self.writer.close()
    }

    fn sum(&self, filter: &SumFilter, metric: Metric) -> Result<u64, LedgerError> {
        self.writer.sum(filter, metric)
    }

    fn query(&self, query: &UsageQuery) -> Result<Vec<UsageGroup>, LedgerError> {
        self.writer.query(query)
    }

    fn pending(&self) -> (usize, u64) {
        self.writer.pending()
    }

    fn record_event(&self, row: AuditRow) {
        self.writer.record_audit(row)
    }

    fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRow>, LedgerError> {
        self.writer.audit(query)
    }
}

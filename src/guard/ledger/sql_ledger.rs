//! One ledger for every SQL database: [`SqlLedger`], generic over what a database brings
//! ([`SqlDialect`]: its SQL text's dialect, its connection, how statements run on it). The
//! writer thread, the sums, the grouped queries and the audit log are written here once;
//! `sqlite.rs` and `postgres.rs` only open connections and bind and read values.

use std::marker::PhantomData;

use super::audit::{self, AuditQuery, AuditRow};
use super::audit_db;
use super::sql::{self, Dialect, SqlValue};
use super::writer::{Backend, Writer};
use super::{Ledger, LedgerError, LedgerRow, SumFilter, UsageGroup, UsageQuery};
use crate::guard::domain::rule::Metric;

/// What one SQL database brings to [`SqlLedger`]. Every call runs on the writer thread, which
/// owns the connection.
pub(crate) trait SqlDialect: std::fmt::Debug + Send + Sync + 'static {
    /// `sqlite` or `postgres` (names the writer thread).
    const NAME: &'static str;
    /// The SQL text the database takes (placeholders, JSON and time functions, types).
    const SQL: Dialect;
    /// An open connection.
    type Conn: Send + 'static;
    /// Opens `at` (a path or a URL), creating the tables and running the ledger's
    /// migrations. With `durable`, every commit is synced.
    fn open(at: &str, durable: bool) -> Result<Self::Conn, String>;
    /// Inserts `rows` in one transaction, skipping ticket ids already present (the fastest
    /// many-row insert the database has).
    fn insert(conn: &mut Self::Conn, rows: &[LedgerRow]) -> Result<(), String>;
    /// Runs `sql` once per parameter list, all in one transaction.
    fn execute_each(conn: &mut Self::Conn, sql: &str, each: &[Vec<SqlValue>])
        -> Result<(), String>;
    /// The rows `sql` selects.
    fn select(
        conn: &mut Self::Conn,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Vec<Vec<SqlValue>>, String>;
}

/// A ledger in a SQL database (`SqliteLedger`, `PostgresLedger`): rows are queued and
/// written by a background writer thread, idempotent by ticket id. A `kill -9` loses at most
/// about the last 250 ms of billed rows; a durable ledger none.
#[derive(Debug)]
pub struct SqlLedger<D> {
    /// Where the database is, as messages show it (a URL's password hidden).
    at: String,
    writer: Writer,
    dialect: PhantomData<fn() -> D>,
}

/// Starts a ledger's writer thread on a connection to `at` (opened in the thread); fails
/// when it cannot be opened. `shown` is `at` as messages may show it.
pub(crate) fn start<D: SqlDialect>(
    at: &str,
    shown: String,
    durable: bool,
) -> Result<SqlLedger<D>, LedgerError> {
    let owned = at.to_string();
    let writer = Writer::start(D::NAME, durable, move || {
        D::open(&owned, durable).map(|conn| SqlBackend::<D> { conn })
    })?;
    Ok(SqlLedger {
        at: shown,
        writer,
        dialect: PhantomData,
    })
}

impl<D> SqlLedger<D> {
    /// Where the database is (a path, or a URL with its password hidden).
    pub(crate) fn at(&self) -> &str {
        &self.at
    }

    /// The most rows recorded and not yet written at any time (`pending().0` never exceeds it).
    pub fn queue_bound(&self) -> usize {
        super::write_queue::MAX_ROWS
    }
}

impl<D: std::fmt::Debug + Send + Sync> Ledger for SqlLedger<D> {
    fn record(&self, row: LedgerRow) {
        self.writer.record(Box::new(move || row))
    }

    fn record_made(&self, make: super::RowMaker) {
        self.writer.record(make)
    }

    fn flush(&self) -> Result<(), LedgerError> {
        self.writer.flush()
    }

    fn close(&self) -> Result<(), LedgerError> {
        self.writer.close()
    }

    fn flush_within(&self, wait: std::time::Duration) -> Result<(), LedgerError> {
        self.writer.flush_within(wait)
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

/// The writer thread's side: the connection, and the SQL of every operation.
struct SqlBackend<D: SqlDialect> {
    conn: D::Conn,
}

/// A whole number from a BIGINT column (negative never happens; read as 0).
fn whole(v: Option<&SqlValue>) -> Result<u64, String> {
    match v {
        Some(SqlValue::Int(i)) => Ok((*i).max(0) as u64),
        other => Err(format!("expected a whole number, read {other:?}")),
    }
}

/// A text column that may be NULL.
fn opt_text(v: Option<&SqlValue>) -> Result<Option<String>, String> {
    match v {
        Some(SqlValue::Null) => Ok(None),
        Some(SqlValue::Text(t)) => Ok(Some(t.clone())),
        other => Err(format!("expected text, read {other:?}")),
    }
}

fn text(v: Option<&SqlValue>) -> Result<String, String> {
    opt_text(v)?.ok_or_else(|| "expected text, read NULL".to_string())
}

/// A usage group from a row of `sql::query_sql`: the group keys, then requests and sums.
fn usage_group(query: &UsageQuery, row: &[SqlValue]) -> Result<UsageGroup, String> {
    let n = query.group_by.len();
    let mut keys = Vec::with_capacity(n);
    for (i, g) in query.group_by.iter().enumerate() {
        keys.push((*g, opt_text(row.get(i))?));
    }
    Ok(UsageGroup {
        keys,
        requests: whole(row.get(n))?,
        input_tokens: whole(row.get(n + 1))?,
        cached_input_tokens: whole(row.get(n + 2))?,
        output_tokens: whole(row.get(n + 3))?,
        reasoning_tokens: whole(row.get(n + 4))?,
        cost_micros: whole(row.get(n + 5))?,
        compute_ms: whole(row.get(n + 6))?,
    })
}

/// An audit row from a row of `audit_db::select_sql` (its nine columns in `AuditRow` order).
fn audit_row(row: &[SqlValue]) -> Result<AuditRow, String> {
    let threshold = match row.get(5) {
        Some(SqlValue::Real(f)) => *f,
        Some(SqlValue::Int(i)) => *i as f64,
        other => return Err(format!("expected a number, read {other:?}")),
    };
    let at_ms = match row.get(1) {
        Some(SqlValue::Int(i)) => *i,
        other => return Err(format!("expected an instant, read {other:?}")),
    };
    Ok(AuditRow {
        event_id: text(row.first())?,
        at_ms,
        kind: text(row.get(2))?,
        rule: text(row.get(3))?,
        counter_key: text(row.get(4))?,
        threshold,
        principal: opt_text(row.get(6))?,
        model: opt_text(row.get(7))?,
        detail: audit::detail_of(&text(row.get(8))?),
    })
}

/// An audit row's parameters for `audit_db::insert_sql`, in `AuditRow` order.
fn audit_params(r: &AuditRow) -> Vec<SqlValue> {
    let opt = |v: &Option<String>| v.clone().map_or(SqlValue::Null, SqlValue::Text);
    vec![
        SqlValue::Text(r.event_id.clone()),
        SqlValue::Int(r.at_ms),
        SqlValue::Text(r.kind.clone()),
        SqlValue::Text(r.rule.clone()),
        SqlValue::Text(r.counter_key.clone()),
        SqlValue::Real(r.threshold),
        opt(&r.principal),
        opt(&r.model),
        SqlValue::Text(r.detail.to_string()),
    ]
}

impl<D: SqlDialect> Backend for SqlBackend<D> {
    fn write(&mut self, rows: &[LedgerRow]) -> Result<(), String> {
        D::insert(&mut self.conn, rows)
    }

    fn sum(&mut self, filter: &SumFilter, metric: Metric) -> Result<u64, String> {
        let (q, params) = sql::sum_sql(D::SQL, filter, metric);
        let rows = D::select(&mut self.conn, &q, &params)?;
        whole(rows.first().and_then(|r| r.first()))
    }

    fn query(&mut self, query: &UsageQuery) -> Result<Vec<UsageGroup>, String> {
        let (q, params) = sql::query_sql(D::SQL, query);
        let rows = D::select(&mut self.conn, &q, &params)?;
        rows.iter().map(|r| usage_group(query, r)).collect()
    }

    fn write_audit(&mut self, rows: &[AuditRow]) -> Result<(), String> {
        let insert = audit_db::insert_sql(D::SQL);
        let each: Vec<Vec<SqlValue>> = rows.iter().map(audit_params).collect();
        D::execute_each(&mut self.conn, &insert, &each)
    }

    fn audit(&mut self, query: &AuditQuery) -> Result<Vec<AuditRow>, String> {
        let (q, params) = audit_db::select_sql(D::SQL, query);
        let rows = D::select(&mut self.conn, &q, &params)?;
        let rows = rows
            .iter()
            .map(|r| audit_row(r))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(audit::in_order(rows, query))
    }
}

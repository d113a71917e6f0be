//! The PostgreSQL ledger: a URL; the table is created on first use, and a lost connection is
//! opened again at the next operation.

use postgres::types::ToSql;
use postgres::{Client, NoTls, Statement};

use super::sql::{self, ColumnParam, Dialect, Param};
use super::writer::{Backend, Writer};
use super::{audit, audit_db};
use super::{
    AuditQuery, AuditRow, Ledger, LedgerError, LedgerRow, SumFilter, UsageGroup, UsageQuery,
};
use crate::guard::domain::rule::Metric;

/// The advisory lock key that serializes creating the tables ("ug_ledgr").
const SCHEMA_LOCK: i64 = 0x7567_5f6c_6564_6772;

struct PostgresBackend {
    url: String,
    durable: bool,
    client: Option<Client>,
    /// The insert, prepared on the current connection.
    insert: Option<Statement>,
}

type Boxed = Box<dyn ToSql + Sync>;

fn boxed(params: Vec<Param>) -> Vec<Boxed> {
    params
        .into_iter()
        .map(|p| -> Boxed {
            match p {
                Param::Text(s) => Box::new(s),
                Param::OptText(s) => Box::new(s),
                Param::Int(i) => Box::new(i),
            }
        })
        .collect()
}

fn column_boxed(columns: Vec<ColumnParam>) -> Vec<Boxed> {
    columns
        .into_iter()
        .map(|c| -> Boxed {
            match c {
                ColumnParam::Text(v) => Box::new(v),
                ColumnParam::Int(v) => Box::new(v),
            }
        })
        .collect()
}

fn refs(params: &[Boxed]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|b| b.as_ref()).collect()
}

fn whole(row: &postgres::Row, i: usize) -> Result<u64, String> {
    row.try_get::<_, i64>(i)
        .map(|v| v.max(0) as u64)
        .map_err(|e| e.to_string())
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &creds[..c], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

impl PostgresBackend {
    fn connect(url: &str, durable: bool) -> Result<Client, String> {
        let mut client = Client::connect(url, NoTls).map_err(|e| {
            format!(
                "cannot connect to the PostgreSQL ledger {}: {e}",
                redact(url)
            )
        })?;
        // One transaction under an advisory lock: processes opening a new database at the
        // same instant create the tables one after the other (two concurrent `CREATE TABLE IF
        // NOT EXISTS` collide on PostgreSQL's catalog: a unique violation, not a wait).
        // The promise is about this process dying, not the server: a commit need not wait
        // for the server's WAL flush (the server still never corrupts). Sent with the schema:
        // one round trip.
        let setup = format!(
            "BEGIN; SELECT pg_advisory_xact_lock({SCHEMA_LOCK}); {}; {}; COMMIT;{}",
            sql::SCHEMA.trim_end().trim_end_matches(';'),
            audit::MIGRATIONS_TABLE,
            if durable {
                ""
            } else {
                " SET synchronous_commit = off;"
            }
        );
        client
            .batch_execute(&setup)
            .map_err(|e| format!("cannot create the ledger table: {e}"))?;
        audit_db::pg_migrate(&mut client)?;
        Ok(client)
    }

    fn client(&mut self) -> Result<&mut Client, String> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(Self::connect(&self.url, self.durable)?);
            self.insert = None;
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    /// Runs `op`; a failure drops the connection when it was lost, so the next call reconnects.
    fn with<T>(&mut self, op: impl FnOnce(&mut Client) -> Result<T, String>) -> Result<T, String> {
        let result = op(self.client()?);
        if result.is_err() && self.client.as_ref().is_some_and(Client::is_closed) {
            self.client = None;
        }
        result
    }
}

impl Backend for PostgresBackend {
    fn write(&mut self, rows: &[LedgerRow]) -> Result<(), String> {
        // Reconnect first when the connection was lost: that forgets the statement.
        self.client()?;
        let mut insert = self.insert.take();
        let result = self.with(|client| {
            let statement = match insert.take() {
                Some(s) => s,
                None => client
                    .prepare(&sql::unnest_insert_sql())
                    .map_err(|e| e.to_string())?,
            };
            let mut tx = client.transaction().map_err(|e| e.to_string())?;
            for chunk in rows.chunks(sql::chunk_rows(Dialect::Postgres)) {
                let params = column_boxed(sql::column_params(chunk));
                tx.execute(&statement, &refs(&params))
                    .map_err(|e| e.to_string())?;
            }
            tx.commit().map_err(|e| e.to_string())?;
            insert = Some(statement);
            Ok(())
        });
        if self.client.is_some() {
            self.insert = insert;
        }
        result
    }

    fn sum(&mut self, filter: &SumFilter, metric: Metric) -> Result<u64, String> {
        let (q, params) = sql::sum_sql(Dialect::Postgres, filter, metric);
        let params = boxed(params);
        self.with(|client| {
            let row = client
                .query_one(&q, &refs(&params))
                .map_err(|e| e.to_string())?;
            whole(&row, 0)
        })
    }

    fn query(&mut self, query: &UsageQuery) -> Result<Vec<UsageGroup>, String> {
        let (q, params) = sql::query_sql(Dialect::Postgres, query);
        let params = boxed(params);
        let groups = query.group_by.clone();
        self.with(|client| {
            let rows = client
                .query(&q, &refs(&params))
                .map_err(|e| e.to_string())?;
            let n = groups.len();
            rows.iter()
                .map(|r| {
                    let mut keys = Vec::with_capacity(n);
                    for (i, g) in groups.iter().enumerate() {
                        let key: Option<String> = r.try_get(i).map_err(|e| e.to_string())?;
                        keys.push((*g, key));
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
                .collect()
        })
    }

    fn write_audit(&mut self, rows: &[AuditRow]) -> Result<(), String> {
        self.with(|client| audit_db::pg_write(client, rows))
    }

    fn audit(&mut self, query: &AuditQuery) -> Result<Vec<AuditRow>, String> {
        self.with(|client| audit_db::pg_read(client, query))
    }
}

/// A ledger in PostgreSQL at `url` (`postgres://user@host:port/db`); no TLS. A `kill -9`
/// loses at most about the last 250 ms of billed rows; a durable ledger none.
#[derive(Debug)]
pub struct PostgresLedger {
    url: String,
    writer: Writer,
}

impl PostgresLedger {
    /// Connects and creates the table if needed; fails when the server cannot be reached.
    /// Rows are committed within about 250 ms of being recorded.
    pub fn connect(url: &str) -> Result<Self, LedgerError> {
        Self::connect_with(url, false)
    }

    /// `connect`, but `record` (and so `Ticket::bill`) returns only once the row is
    /// committed; concurrent billers share one commit.
    pub fn connect_durable(url: &str) -> Result<Self, LedgerError> {
        Self::connect_with(url, true)
    }

    fn connect_with(url: &str, durable: bool) -> Result<Self, LedgerError> {
        let owned = url.to_string();
        let writer = Writer::start("postgres", durable, move || {
            let client = PostgresBackend::connect(&owned, durable)?;
            Ok(PostgresBackend {
                url: owned.clone(),
                durable,
                client: Some(client),
                insert: None,
            })
        })?;
        Ok(PostgresLedger {
            url: redact(url),
            writer,
        })
    }

    /// The URL, password hidden.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The most rows recorded and not yet written at any time (`pending().0` never exceeds it).
    pub fn queue_bound(&self) -> usize {
        super::queue::MAX_ROWS
    }
}

impl Ledger for PostgresLedger {
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

//! The PostgreSQL ledger: a URL; the table is created on first use, and a lost connection is
//! opened again at the next operation. What PostgreSQL brings to the generic [`SqlLedger`]:
//! the connection (tables created under an advisory lock, reconnected when lost), binding
//! and reading values, the insert of typed column arrays.

use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls, Statement};

use crate::error::url_without_password;

use super::sql::{self, ColumnParam, Dialect, SqlValue};
use super::sql_ledger::{self, SqlDialect, SqlLedger};
use super::{audit, audit_db};
use super::{LedgerError, LedgerRow};

/// The advisory lock key that serializes creating the tables ("ug_ledgr").
const SCHEMA_LOCK: i64 = 0x7567_5f6c_6564_6772;

/// PostgreSQL, as a [`SqlLedger`]'s database.
#[derive(Debug, Clone, Copy, Default)]
pub struct Postgres;

/// A ledger in PostgreSQL at `url` (`postgres://user@host:port/db`); no TLS. A `kill -9`
/// loses at most about the last 250 ms of billed rows; a durable ledger none.
pub type PostgresLedger = SqlLedger<Postgres>;

/// The writer thread's connection: opened again at the next operation once lost.
pub(crate) struct PgConn {
    url: String,
    durable: bool,
    client: Option<Client>,
    /// The insert, prepared on the current connection.
    insert: Option<Statement>,
}

type Boxed = Box<dyn ToSql + Sync>;

/// Values as PostgreSQL parameters (NULL as a text NULL).
pub(crate) fn boxed(params: &[SqlValue]) -> Vec<Boxed> {
    params
        .iter()
        .map(|p| -> Boxed {
            match p {
                SqlValue::Null => Box::new(None::<String>),
                SqlValue::Int(i) => Box::new(*i),
                SqlValue::Real(r) => Box::new(*r),
                SqlValue::Text(t) => Box::new(t.clone()),
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

/// The rows `sql` selects: integers, floats and booleans (as 0/1) read as numbers, every
/// other type as text.
pub(crate) fn rows(
    client: &mut Client,
    sql: &str,
    params: &[SqlValue],
) -> Result<Vec<Vec<SqlValue>>, postgres::Error> {
    let params = boxed(params);
    let rows = client.query(sql, &refs(&params))?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let mut values = Vec::with_capacity(row.len());
        for (i, column) in row.columns().iter().enumerate() {
            let t = column.type_();
            let v = if *t == Type::INT8 {
                row.try_get::<_, Option<i64>>(i)?.map(SqlValue::Int)
            } else if *t == Type::INT4 {
                row.try_get::<_, Option<i32>>(i)?
                    .map(|v| SqlValue::Int(v.into()))
            } else if *t == Type::FLOAT8 {
                row.try_get::<_, Option<f64>>(i)?.map(SqlValue::Real)
            } else if *t == Type::BOOL {
                row.try_get::<_, Option<bool>>(i)?
                    .map(|b| SqlValue::Int(b.into()))
            } else {
                row.try_get::<_, Option<String>>(i)?.map(SqlValue::Text)
            };
            values.push(v.unwrap_or(SqlValue::Null));
        }
        out.push(values);
    }
    Ok(out)
}

fn text(e: postgres::Error) -> String {
    e.to_string()
}

impl PgConn {
    fn connect(url: &str, durable: bool) -> Result<Client, String> {
        let mut client = Client::connect(url, NoTls).map_err(|e| {
            format!(
                "cannot connect to the PostgreSQL ledger {}: {e}",
                url_without_password(url)
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

impl SqlDialect for Postgres {
    const NAME: &'static str = "postgres";
    const SQL: Dialect = Dialect::Postgres;
    type Conn = PgConn;

    fn open(at: &str, durable: bool) -> Result<PgConn, String> {
        Ok(PgConn {
            url: at.to_string(),
            durable,
            client: Some(PgConn::connect(at, durable)?),
            insert: None,
        })
    }

    fn insert(conn: &mut PgConn, rows: &[LedgerRow]) -> Result<(), String> {
        // Reconnect first when the connection was lost: that forgets the statement.
        conn.client()?;
        let mut insert = conn.insert.take();
        let result = conn.with(|client| {
            let statement = match insert.take() {
                Some(s) => s,
                None => client.prepare(&sql::unnest_insert_sql()).map_err(text)?,
            };
            let mut tx = client.transaction().map_err(text)?;
            for chunk in rows.chunks(sql::chunk_rows(Dialect::Postgres)) {
                let params = column_boxed(sql::column_params(chunk));
                tx.execute(&statement, &refs(&params)).map_err(text)?;
            }
            tx.commit().map_err(text)?;
            insert = Some(statement);
            Ok(())
        });
        if conn.client.is_some() {
            conn.insert = insert;
        }
        result
    }

    fn execute_each(conn: &mut PgConn, sql: &str, each: &[Vec<SqlValue>]) -> Result<(), String> {
        conn.with(|client| {
            let mut tx = client.transaction().map_err(text)?;
            let statement = tx.prepare(sql).map_err(text)?;
            for params in each {
                tx.execute(&statement, &refs(&boxed(params)))
                    .map_err(text)?;
            }
            tx.commit().map_err(text)
        })
    }

    fn select(
        conn: &mut PgConn,
        sql: &str,
        params: &[SqlValue],
    ) -> Result<Vec<Vec<SqlValue>>, String> {
        conn.with(|client| rows(client, sql, params).map_err(text))
    }
}

impl SqlLedger<Postgres> {
    /// Connects and creates the table if needed; fails when the server cannot be reached.
    /// Rows are committed within about 250 ms of being recorded.
    pub fn connect(url: &str) -> Result<Self, LedgerError> {
        sql_ledger::start(url, url_without_password(url), false)
    }

    /// `connect`, but `record` (and so `Ticket::bill`) returns only once the row is
    /// committed; concurrent billers share one commit.
    pub fn connect_durable(url: &str) -> Result<Self, LedgerError> {
        sql_ledger::start(url, url_without_password(url), true)
    }

    /// The URL, password hidden.
    pub fn url(&self) -> &str {
        self.at()
    }
}

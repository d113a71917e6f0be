//! The connection the quota service's tables (`quota_policies`, `quota_assignments`) use: the
//! ledger's database (SQLite file or PostgreSQL), on a connection of its own so that policy
//! changes never wait behind the ledger's writer. The service (Python, `quota_store`) sends
//! its statements and transactions (`BEGIN` … `COMMIT`) through [`QuotaDb::execute`]; a lost
//! connection is opened again at the next statement.

use super::LedgerError;

/// A value bound to a statement or read from a row.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

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
            Some(Conn::Sqlite(c)) => sqlite_execute(c, sql, params),
            #[cfg(feature = "postgres")]
            Some(Conn::Postgres(c)) => postgres_execute(c, sql, params),
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

#[cfg(feature = "sqlite")]
fn sqlite_execute(
    conn: &rusqlite::Connection,
    sql: &str,
    params: &[SqlValue],
) -> Result<Vec<Vec<SqlValue>>, LedgerError> {
    use rusqlite::types::{Value, ValueRef};
    let values: Vec<Value> = params
        .iter()
        .map(|p| match p {
            SqlValue::Null => Value::Null,
            SqlValue::Int(i) => Value::Integer(*i),
            SqlValue::Real(r) => Value::Real(*r),
            SqlValue::Text(t) => Value::Text(t.clone()),
        })
        .collect();
    let mut stmt = conn.prepare(sql).map_err(err)?;
    let columns = stmt.column_count();
    let mut rows = stmt
        .query(rusqlite::params_from_iter(values))
        .map_err(err)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(err)? {
        let mut values = Vec::with_capacity(columns);
        for i in 0..columns {
            values.push(match row.get_ref(i).map_err(err)? {
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

#[cfg(feature = "postgres")]
fn postgres_execute(
    client: &mut postgres::Client,
    sql: &str,
    params: &[SqlValue],
) -> Result<Vec<Vec<SqlValue>>, LedgerError> {
    use postgres::types::{ToSql, Type};
    let boxed: Vec<Box<dyn ToSql + Sync>> = params
        .iter()
        .map(|p| -> Box<dyn ToSql + Sync> {
            match p {
                SqlValue::Null => Box::new(None::<String>),
                SqlValue::Int(i) => Box::new(*i),
                SqlValue::Real(r) => Box::new(*r),
                SqlValue::Text(t) => Box::new(t.clone()),
            }
        })
        .collect();
    let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| &**b).collect();
    let rows = client
        .query(sql, &refs)
        .map_err(|e| match e.as_db_error() {
            Some(db) => err(db.message()),
            None => err(e),
        })?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let mut values = Vec::with_capacity(row.len());
        for (i, column) in row.columns().iter().enumerate() {
            let t = column.type_();
            let v = if *t == Type::INT8 {
                row.try_get::<_, Option<i64>>(i)
                    .map(|v| v.map(SqlValue::Int))
            } else if *t == Type::INT4 {
                let v = row.try_get::<_, Option<i32>>(i);
                v.map(|v| v.map(|v| SqlValue::Int(v.into())))
            } else if *t == Type::FLOAT8 {
                row.try_get::<_, Option<f64>>(i)
                    .map(|v| v.map(SqlValue::Real))
            } else if *t == Type::BOOL {
                let v = row.try_get::<_, Option<bool>>(i);
                v.map(|v| v.map(|b| SqlValue::Int(b.into())))
            } else {
                row.try_get::<_, Option<String>>(i)
                    .map(|v| v.map(SqlValue::Text))
            };
            values.push(v.map_err(err)?.unwrap_or(SqlValue::Null));
        }
        out.push(values);
    }
    Ok(out)
}

//! The audit log's SQL: the insert and the select in a dialect, and the ledger's migrations
//! on each database (each in one transaction, recorded in `usage_guard_migrations`,
//! serialized across processes). The writer thread runs them on the connection it owns.

use super::audit::{self, AuditQuery, MIGRATIONS, MIGRATIONS_TABLE};
use super::sql::{Dialect, SqlValue};

/// The insert of one row (nine parameters, in `AuditRow` order); an event id already
/// there is skipped.
pub(crate) fn insert_sql(dialect: Dialect) -> String {
    let values: Vec<String> = (1..=9).map(|n| dialect.placeholder(n)).collect();
    format!(
        "INSERT INTO audit_log (event_id, at_ms, kind, rule, counter_key, threshold, \
         principal, model, detail) VALUES ({}) ON CONFLICT (event_id) DO NOTHING",
        values.join(", ")
    )
}

/// The select of `query`: the nine columns in `AuditRow` order, newest first when limited.
pub(crate) fn select_sql(dialect: Dialect, query: &AuditQuery) -> (String, Vec<SqlValue>) {
    let mut clauses = Vec::new();
    let mut params = Vec::new();
    let mut add = |clause: &str, param: SqlValue| {
        params.push(param);
        clauses.push(format!("{clause} {}", dialect.placeholder(params.len())));
    };
    if let Some(since) = query.since {
        add("at_ms >=", SqlValue::Int(since));
    }
    if let Some(until) = query.until {
        add("at_ms <", SqlValue::Int(until));
    }
    if let Some(kind) = &query.kind {
        add("kind =", SqlValue::Text(kind.clone()));
    }
    if let Some(rule) = &query.rule {
        add("rule =", SqlValue::Text(rule.clone()));
    }
    let mut sql = "SELECT event_id, at_ms, kind, rule, counter_key, threshold, principal, \
                   model, detail FROM audit_log"
        .to_string();
    if !clauses.is_empty() {
        sql.push_str(&format!(" WHERE {}", clauses.join(" AND ")));
    }
    match query.limit {
        Some(n) => {
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            sql.push_str(&format!(" ORDER BY at_ms DESC, event_id DESC LIMIT {n}"));
        }
        None => sql.push_str(" ORDER BY at_ms, event_id"),
    }
    (sql, params)
}

#[cfg(feature = "sqlite")]
/// SQLite: runs the ledger migrations not yet applied (an immediate transaction each: a
/// second process waits for the first, then sees its migration applied). A database whose
/// migrations all ran is only read (opening it never waits for another writer). A busy
/// database is the caller's to try again (the ledger's open does).
pub(crate) fn sqlite_migrate(conn: &mut rusqlite::Connection) -> rusqlite::Result<()> {
    use rusqlite::TransactionBehavior;
    conn.execute_batch(MIGRATIONS_TABLE)?;
    for m in MIGRATIONS {
        let done: i64 = conn.query_row(
            "SELECT COUNT(*) FROM usage_guard_migrations WHERE name = ?1",
            [m.name],
            |r| r.get(0),
        )?;
        if done > 0 {
            continue;
        }
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let applied: i64 = tx.query_row(
            "SELECT COUNT(*) FROM usage_guard_migrations WHERE name = ?1",
            [m.name],
            |r| r.get(0),
        )?;
        if applied == 0 {
            tx.execute_batch(m.sql)?;
            tx.execute(
                "INSERT INTO usage_guard_migrations (name, applied_at_ms) VALUES (?1, ?2) \
                 ON CONFLICT (name) DO NOTHING",
                rusqlite::params![m.name, audit::wall_ms()],
            )?;
        }
        tx.commit()?;
    }
    Ok(())
}

#[cfg(feature = "postgres")]
/// PostgreSQL: runs the ledger migrations not yet applied, each in a transaction that locks
/// `usage_guard_migrations` (concurrent processes take turns). Tried twice: two processes
/// creating the migrations table at once can collide.
pub(crate) fn pg_migrate(client: &mut postgres::Client) -> Result<(), String> {
    match pg_migrate_once(client) {
        Ok(()) => Ok(()),
        Err(_) => pg_migrate_once(client).map_err(|e| format!("ledger migration: {e}")),
    }
}

#[cfg(feature = "postgres")]
fn pg_migrate_once(client: &mut postgres::Client) -> Result<(), postgres::Error> {
    // One round trip for a database whose migrations all ran: the table, then every name.
    let applied: Vec<String> = client
        .simple_query(&format!(
            "{MIGRATIONS_TABLE}; SELECT name FROM usage_guard_migrations"
        ))?
        .into_iter()
        .filter_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        })
        .collect();
    for m in MIGRATIONS {
        if applied.iter().any(|name| name == m.name) {
            continue;
        }
        let mut tx = client.transaction()?;
        tx.batch_execute("LOCK TABLE usage_guard_migrations IN EXCLUSIVE MODE")?;
        let already: i64 = tx
            .query_one(
                "SELECT COUNT(*) FROM usage_guard_migrations WHERE name = $1",
                &[&m.name],
            )?
            .get(0);
        if already == 0 {
            tx.batch_execute(m.sql)?;
            tx.execute(
                "INSERT INTO usage_guard_migrations (name, applied_at_ms) VALUES ($1, $2) \
                 ON CONFLICT (name) DO NOTHING",
                &[&m.name, &audit::wall_ms()],
            )?;
        }
        tx.commit()?;
    }
    Ok(())
}

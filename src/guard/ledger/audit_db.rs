//! The audit log on each database: its migrations (each in one transaction, recorded in
//! `usage_guard_migrations`, serialized across processes), the insert and the select. The
//! writer thread calls these on the connection it owns.

use super::audit::{self, AuditParam, AuditQuery, AuditRow, MIGRATIONS, MIGRATIONS_TABLE};

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

#[cfg(feature = "sqlite")]
/// SQLite: writes `rows` in one transaction.
pub(crate) fn sqlite_write(
    conn: &mut rusqlite::Connection,
    rows: &[AuditRow],
) -> Result<(), String> {
    let text = |e: rusqlite::Error| e.to_string();
    // Immediate, as the ledger's rows (sqlite.rs): another writer never makes it fail at once.
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(text)?;
    {
        let mut insert = tx.prepare_cached(&audit::insert_sql(false)).map_err(text)?;
        for r in rows {
            insert
                .execute(rusqlite::params![
                    r.event_id,
                    r.at_ms,
                    r.kind,
                    r.rule,
                    r.counter_key,
                    r.threshold,
                    r.principal,
                    r.model,
                    r.detail.to_string(),
                ])
                .map_err(text)?;
        }
    }
    tx.commit().map_err(text)
}

#[cfg(feature = "sqlite")]
/// SQLite: the rows `query` selects, oldest first.
pub(crate) fn sqlite_read(
    conn: &rusqlite::Connection,
    query: &AuditQuery,
) -> Result<Vec<AuditRow>, String> {
    use rusqlite::types::Value;
    let text = |e: rusqlite::Error| e.to_string();
    let (sql, params) = audit::select_sql(false, query);
    let params = params.into_iter().map(|p| match p {
        AuditParam::Int(i) => Value::Integer(i),
        AuditParam::Text(t) => Value::Text(t),
    });
    let mut stmt = conn.prepare(&sql).map_err(text)?;
    let rows = stmt
        .query_map(rusqlite::params_from_iter(params), |r| {
            Ok(AuditRow {
                event_id: r.get(0)?,
                at_ms: r.get(1)?,
                kind: r.get(2)?,
                rule: r.get(3)?,
                counter_key: r.get(4)?,
                threshold: r.get(5)?,
                principal: r.get(6)?,
                model: r.get(7)?,
                detail: audit::detail_of(&r.get::<_, String>(8)?),
            })
        })
        .map_err(text)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(text)?;
    Ok(audit::in_order(rows, query))
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

#[cfg(feature = "postgres")]
/// PostgreSQL: writes `rows` in one transaction.
pub(crate) fn pg_write(client: &mut postgres::Client, rows: &[AuditRow]) -> Result<(), String> {
    let text = |e: postgres::Error| e.to_string();
    let mut tx = client.transaction().map_err(text)?;
    let insert = tx.prepare(&audit::insert_sql(true)).map_err(text)?;
    for r in rows {
        let detail = r.detail.to_string();
        tx.execute(
            &insert,
            &[
                &r.event_id,
                &r.at_ms,
                &r.kind,
                &r.rule,
                &r.counter_key,
                &r.threshold,
                &r.principal,
                &r.model,
                &detail,
            ],
        )
        .map_err(text)?;
    }
    tx.commit().map_err(text)
}

#[cfg(feature = "postgres")]
/// PostgreSQL: the rows `query` selects, oldest first.
pub(crate) fn pg_read(
    client: &mut postgres::Client,
    query: &AuditQuery,
) -> Result<Vec<AuditRow>, String> {
    use postgres::types::ToSql;
    let text = |e: postgres::Error| e.to_string();
    let (sql, params) = audit::select_sql(true, query);
    let boxed: Vec<Box<dyn ToSql + Sync>> = params
        .into_iter()
        .map(|p| -> Box<dyn ToSql + Sync> {
            match p {
                AuditParam::Int(i) => Box::new(i),
                AuditParam::Text(t) => Box::new(t),
            }
        })
        .collect();
    let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| b.as_ref()).collect();
    let rows = client.query(&sql, &refs).map_err(text)?;
    let rows = rows
        .iter()
        .map(|r| {
            Ok(AuditRow {
                event_id: r.try_get(0)?,
                at_ms: r.try_get(1)?,
                kind: r.try_get(2)?,
                rule: r.try_get(3)?,
                counter_key: r.try_get(4)?,
                threshold: r.try_get(5)?,
                principal: r.try_get(6)?,
                model: r.try_get(7)?,
                detail: audit::detail_of(&r.try_get::<_, String>(8)?),
            })
        })
        .collect::<Result<Vec<_>, postgres::Error>>()
        .map_err(text)?;
    Ok(audit::in_order(rows, query))
}

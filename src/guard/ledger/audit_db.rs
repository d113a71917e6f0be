//! The ledger's migrations on each database (each in one transaction, recorded in
//! `usage_guard_migrations`, serialized across processes). The writer thread runs them on
//! the connection it opens.

use super::audit::{self, MIGRATIONS, MIGRATIONS_TABLE};

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

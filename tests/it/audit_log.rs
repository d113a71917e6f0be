//! The audit log (issue 13.4): every event a guard sends is one `audit_log` row in its
//! ledger, on SQLite and PostgreSQL, read back by `Ledger::audit`; the table's migration
//! runs once per database.
#![cfg(feature = "sqlite")]

use crate::common;

use std::sync::Arc;

use common::events::{alice, call, drain, policy, NOW};
use common::{at, reached, setup};
use usage_guard::{AuditQuery, AuditRow, Ledger, SqliteLedger};

/// Events of a guard on `ledger` land in its audit log, one row each, whatever wrote them.
fn audit_round_trip(ledger: Arc<dyn Ledger>) {
    let s = setup(&policy(), NOW);
    let guard = s.guard.clone().with_ledger(ledger.clone());
    let stream = guard.events(100);
    let _held: Vec<_> = (0..3)
        .map(|_| guard.admit_blocking(alice("a")).unwrap())
        .collect();
    s.clock.set(at("2026-12-02T10:00:30Z"));
    let sess = || call(None, &[("session", "s9")]);
    let _calls: Vec<_> = (0..2)
        .map(|_| guard.admit_blocking(sess()).unwrap())
        .collect();
    reached(guard.admit_blocking(sess()));
    guard.close().unwrap();
    let sent = drain(&stream);
    let rows = ledger.audit(&AuditQuery::default()).unwrap();
    assert_eq!(rows, sent.iter().map(AuditRow::of).collect::<Vec<_>>());
    let kinds: Vec<&str> = rows.iter().map(|r| r.kind.as_str()).collect();
    let expected = ["soft_threshold"; 3].into_iter().chain(["halt_session"]);
    assert_eq!(kinds, expected.collect::<Vec<_>>());
    let first = &rows[0];
    assert_eq!(
        (first.rule.as_str(), first.threshold, first.at_ms),
        ("soft", 0.1, at(NOW))
    );
    assert_eq!(
        (first.principal.as_deref(), first.model.as_deref()),
        (Some("alice"), Some("gpt-5"))
    );
    assert_eq!(first.counter_key, sent[0].key.render());
    assert_eq!(
        first.detail,
        serde_json::json!({"amount": "requests", "unit": "requests", "used": 1, "budget": 10,
                           "action": "block", "would_refuse": false})
    );
    // The halted call had no user.
    assert_eq!(rows[3].principal, None);
    // Filters: a kind, an instant, the latest N.
    let halts = AuditQuery {
        kind: Some("halt_session".into()),
        ..AuditQuery::default()
    };
    assert_eq!(ledger.audit(&halts).unwrap(), vec![rows[3].clone()]);
    let since = AuditQuery {
        since: Some(at("2026-12-02T10:00:30Z")),
        ..AuditQuery::default()
    };
    assert_eq!(ledger.audit(&since).unwrap().len(), 1);
    let latest = AuditQuery {
        limit: Some(2),
        ..AuditQuery::default()
    };
    assert_eq!(ledger.audit(&latest).unwrap(), rows[2..].to_vec());
    // An event recorded twice (the same id) is one row.
    ledger.record_event(rows[0].clone());
    assert_eq!(ledger.audit(&AuditQuery::default()).unwrap().len(), 4);
}

#[test]
fn sqlite_keeps_one_audit_row_per_event_and_migrates_once() {
    let path = common::tempdir("audit").join("ledger.db");
    let path = path.to_str().unwrap().to_string();
    audit_round_trip(Arc::new(SqliteLedger::open(&path).unwrap()));
    // Opened again: the migration does not run twice, the rows are there.
    let again = SqliteLedger::open(&path).unwrap();
    assert_eq!(again.audit(&AuditQuery::default()).unwrap().len(), 4);
    let db = rusqlite::Connection::open(&path).unwrap();
    let applied: Vec<String> = db
        .prepare("SELECT name FROM usage_guard_migrations")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(applied, vec!["audit_log/1", "usage_ledger/attributes"]);
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_keeps_one_audit_row_per_event() {
    let Some(pg) = common::pg::Pg::start() else {
        panic!("no PostgreSQL: initdb/pg_ctl not found and nothing on 127.0.0.1:5432");
    };
    let url = pg.fresh_url();
    audit_round_trip(Arc::new(
        usage_guard::PostgresLedger::connect(&url).unwrap(),
    ));
    // Two more ledgers on the same database at once: the migration runs once, no error.
    let (a, b) = (url.clone(), url.clone());
    let opened =
        [a, b].map(|u| std::thread::spawn(move || usage_guard::PostgresLedger::connect(&u)));
    for o in opened {
        let ledger = o.join().unwrap().unwrap();
        assert_eq!(ledger.audit(&AuditQuery::default()).unwrap().len(), 4);
    }
}

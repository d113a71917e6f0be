//! The ledger: one row per billed call, written off the admission path, idempotent by ticket
//! id, flushed by `close`, queried grouped by user, team, model and day. SQLite always;
//! PostgreSQL against a server the test starts (or the machine's).
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::common;

use std::sync::Arc;

use common::pg::Pg;
use common::*;
use usage_guard::{
    BillInfo, GroupBy, Guard, Ledger, LedgerRow, ManualClock, MemoryStore, PostgresLedger,
    SqliteLedger, SumFilter, Usage, UsageQuery,
};

pub fn policy_text() -> String {
    format!(
        r#"{GPT5}
[teams.research]
members = ["alice", "bob"]

[[limits.direct]]
user = "alice"
model = "gpt-5"
rules = [{{ metric = "tokens", amount = 100000, window = "day" }}]

[[limits.team]]
team = "research"
model = "gpt-5"
shared = [{{ metric = "tokens", amount = 1000000, window = "day" }}]
"#
    )
}

fn guard_on(ledger: Arc<dyn Ledger>, now: &str) -> (Guard, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(at(now)));
    let guard = Guard::new(
        policy(&policy_text()),
        Arc::new(MemoryStore::new()),
        clock.clone(),
    )
    .with_ledger(ledger);
    (guard, clock)
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        compute_ms: Some(10),
        ..Usage::default()
    }
}

fn bill(guard: &Guard, user: &str, input: u64, output: u64) {
    let t = guard
        .admit_blocking(call(user, "gpt-5", input, output))
        .unwrap();
    t.bill_blocking(usage(input, output)).unwrap().unwrap();
}

/// Bills alice three times on day 1 and once on day 2, bob once (billed to research), and
/// checks every grouping and filter.
fn grouped_usage(ledger: Arc<dyn Ledger>) {
    let (guard, clock) = guard_on(ledger.clone(), "2026-11-30T10:00:00Z");
    for _ in 0..3 {
        bill(&guard, "alice", 1000, 200);
    }
    bill(&guard, "bob", 500, 100);
    clock.set(at("2026-12-01T09:00:00Z"));
    bill(&guard, "alice", 10, 5);
    guard.close().unwrap();

    let by_user = ledger
        .query(&UsageQuery {
            group_by: vec![GroupBy::User],
            ..UsageQuery::default()
        })
        .unwrap();
    assert_eq!(by_user.len(), 2);
    assert_eq!(by_user[0].keys, vec![(GroupBy::User, Some("alice".into()))]);
    assert_eq!(by_user[0].requests, 4);
    assert_eq!(by_user[0].tokens(), 3 * 1200 + 15);
    assert_eq!(by_user[0].compute_ms, 40);
    assert_eq!(by_user[1].requests, 1);
    // GPT-5: $1.25 / M input, $10 / M output.
    assert_eq!(by_user[1].cost_micros, 500 * 125 / 100 + 100 * 10);

    let by_team = ledger
        .query(&UsageQuery {
            team: Some("research".into()),
            group_by: vec![GroupBy::Team, GroupBy::User],
            ..UsageQuery::default()
        })
        .unwrap();
    assert_eq!(by_team.len(), 1, "{by_team:?}");
    assert_eq!(
        by_team[0].keys,
        vec![
            (GroupBy::Team, Some("research".into())),
            (GroupBy::User, Some("bob".into()))
        ]
    );

    let alice_days = ledger
        .query(&UsageQuery {
            user: Some("alice".into()),
            group_by: vec![GroupBy::Model, GroupBy::Day],
            ..UsageQuery::default()
        })
        .unwrap();
    let days: Vec<_> = alice_days
        .iter()
        .map(|g| (g.keys[1].1.clone().unwrap(), g.requests))
        .collect();
    assert_eq!(
        days,
        vec![("2026-11-30".to_string(), 3), ("2026-12-01".to_string(), 1)]
    );

    let since = ledger
        .query(&UsageQuery {
            since: Some(at("2026-12-01T00:00:00Z")),
            ..UsageQuery::default()
        })
        .unwrap();
    assert_eq!(since.len(), 1);
    assert_eq!(since[0].requests, 1);
    assert_eq!(since[0].input_tokens, 10);

    let day1 = SumFilter {
        user: Some("alice".into()),
        model: Some("gpt-5".into()),
        since: at("2026-11-30T00:00:00Z"),
        until: at("2026-12-01T00:00:00Z"),
        ..SumFilter::default()
    };
    assert_eq!(
        ledger.sum(&day1, usage_guard::Metric::Tokens).unwrap(),
        3600
    );
    assert_eq!(ledger.sum(&day1, usage_guard::Metric::Requests).unwrap(), 3);
}

fn row(id: &str) -> LedgerRow {
    LedgerRow {
        ticket_id: id.into(),
        at_ms: at("2026-11-30T10:00:00Z"),
        user: Some("carol".into()),
        teams: vec![],
        source_type: "public".into(),
        source_id: "gpt-5".into(),
        model: "gpt-5".into(),
        input_tokens: 7,
        cached_input_tokens: 0,
        output_tokens: 3,
        reasoning_tokens: 0,
        cost_micros: 1,
        compute_ms: 0,
        request_id: None,
        metadata: None,
        attributes: None,
    }
}

/// A row recorded twice (a retried write, a second server) is one row.
fn idempotent(ledger: Arc<dyn Ledger>) {
    ledger.record(row("t-1"));
    ledger.record(row("t-1"));
    ledger.flush().unwrap();
    ledger.record(row("t-1"));
    ledger.record(row("t-2"));
    ledger.flush().unwrap();
    let all = ledger.query(&UsageQuery::default()).unwrap();
    assert_eq!(all[0].requests, 2);
    assert_eq!(all[0].tokens(), 20);
    assert_eq!(ledger.pending(), (0, 0));
}

#[test]
fn sqlite_in_memory_groups_usage() {
    grouped_usage(Arc::new(SqliteLedger::open(":memory:").unwrap()));
}

#[test]
fn sqlite_rows_are_idempotent_by_ticket_id() {
    idempotent(Arc::new(SqliteLedger::open(":memory:").unwrap()));
}

#[test]
fn sqlite_row_holds_every_field() {
    let dir = tempdir("fields");
    let file = dir.join("ledger.db");
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(file.to_str().unwrap()).unwrap());
    let (guard, _clock) = guard_on(ledger.clone(), "2026-11-30T10:00:00Z");
    let t = guard.admit_blocking(call("bob", "gpt-5", 100, 50)).unwrap();
    let info = BillInfo {
        request_id: Some("req-42".into()),
        metadata: Some(serde_json::json!({"app": "notebook", "n": 3})),
    };
    let usage = Usage {
        input_tokens: 100,
        cached_input_tokens: 40,
        output_tokens: 50,
        reasoning_tokens: 20,
        cost_micros: None,
        compute_ms: Some(950),
    };
    t.bill_with_blocking(usage, info).unwrap().unwrap();
    guard.close().unwrap();
    let conn = rusqlite::Connection::open(&file).unwrap();
    let got: (
        String,
        String,
        String,
        String,
        String,
        i64,
        i64,
        i64,
        i64,
        i64,
        String,
        String,
    ) = conn
        .query_row(
            "SELECT ticket_id, user_id, teams, source_type, source_id, input_tokens, \
             cached_input_tokens, reasoning_tokens, cost_micros, compute_ms, request_id, metadata \
             FROM usage_ledger",
            [],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                    r.get(9)?,
                    r.get(10)?,
                    r.get(11)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(got.0, t.id());
    assert_eq!(got.1, "bob");
    assert_eq!(got.2, r#"["research"]"#);
    assert_eq!((got.3.as_str(), got.4.as_str()), ("team", "research"));
    assert_eq!((got.5, got.6, got.7), (100, 40, 20));
    // 60 × 1.25 + 40 × 0.125 + 50 × 10 micro-dollars.
    assert_eq!(got.8, 75 + 5 + 500);
    assert_eq!(got.9, 950);
    assert_eq!(got.10, "req-42");
    let meta: serde_json::Value = serde_json::from_str(&got.11).unwrap();
    assert_eq!(meta["app"], "notebook");
}

#[test]
fn a_clean_shutdown_loses_no_row() {
    let dir = tempdir("shutdown");
    let file = dir.join("ledger.db");
    let path = file.to_str().unwrap().to_string();
    {
        let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(&path).unwrap());
        let (guard, _clock) = guard_on(ledger.clone(), "2026-11-30T10:00:00Z");
        std::thread::scope(|s| {
            for user in ["bob", "alice", "carol", "dave"] {
                let guard = guard.clone();
                s.spawn(move || {
                    for _ in 0..500 {
                        bill(&guard, user, 10, 10);
                    }
                });
            }
        });
        ledger.close().unwrap();
        // Closed: later rows are counted as dropped, never lost silently.
        ledger.record(row("late"));
        assert_eq!(ledger.pending().1, 1);
    }
    let reopened = SqliteLedger::open(&path).unwrap();
    let all = reopened.query(&UsageQuery::default()).unwrap();
    assert_eq!(all[0].requests, 2000);
}

#[test]
fn sqlite_refuses_a_path_it_cannot_open() {
    let err = SqliteLedger::open("/nonexistent-dir/x/ledger.db").unwrap_err();
    assert!(err.to_string().contains("cannot open"), "{err}");
}

#[test]
fn postgres_groups_usage_and_is_idempotent() {
    let Some(pg) = Pg::start() else {
        panic!("no PostgreSQL: initdb/pg_ctl not found and nothing on 127.0.0.1:5432");
    };
    grouped_usage(Arc::new(PostgresLedger::connect(&pg.fresh_url()).unwrap()));
    idempotent(Arc::new(PostgresLedger::connect(&pg.fresh_url()).unwrap()));
}

#[test]
fn postgres_unreachable_is_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = PostgresLedger::connect(&format!("postgres://u:secret@127.0.0.1:{port}/x"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot connect"), "{err}");
    assert!(!err.contains("secret"), "the password leaks: {err}");
}

#[test]
fn a_ledger_that_is_down_never_blocks_admission_or_billing() {
    let Some(pg) = Pg::start() else {
        panic!("no PostgreSQL: initdb/pg_ctl not found and nothing on 127.0.0.1:5432");
    };
    if pg.is_machine_server() {
        return; // the machine's server is not ours to stop
    }
    let ledger: Arc<dyn Ledger> = Arc::new(PostgresLedger::connect(&pg.fresh_url()).unwrap());
    let (guard, _clock) = guard_on(ledger.clone(), "2026-11-30T10:00:00Z");
    bill(&guard, "alice", 100, 10);
    guard.close().unwrap();
    pg.stop();
    // Admission (whose fill cannot read the ledger) and billing go on; the rows wait.
    for _ in 0..5 {
        bill(&guard, "bob", 100, 10);
    }
    let fresh = Guard::new(
        policy(&policy_text()),
        Arc::new(MemoryStore::new()),
        Arc::new(ManualClock::new(at("2026-11-30T11:00:00Z"))),
    )
    .with_ledger(ledger.clone());
    bill(&fresh, "alice", 100, 10);
    assert!(fresh.fill_counts().1 >= 1, "the fill saw the ledger down");
    assert!(guard.close().is_err());
    assert_eq!(ledger.pending(), (6, 0));
}

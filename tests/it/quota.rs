//! The quota service's engine side: rules added to a policy (`Policy::with_rules`), reading
//! their counters without reserving, recording use once per request id (with its ledger
//! row), and the quota tables' connection (`QuotaDb`) on SQLite.
#![cfg(feature = "sqlite")]

use crate::common;

use std::sync::Arc;

use common::{at, refusal, setup, GPT5};
use usage_guard::internals::{QuotaDb, QuotaDbAt, QuotaRecord, SqlValue};
use usage_guard::{AdmitRequest, Error, Ledger, LimitType, Metric, SqliteLedger, UsageQuery};

const NOW: &str = "2026-12-02T10:00:00Z";

fn team_rule(budget: u64) -> serde_json::Value {
    serde_json::json!([{
        "name": "quota ai.tokens.total team:research",
        "applies_when": {"team": "research"},
        "amount": "tokens",
        "budget": budget,
        "window": "month",
    }])
}

fn record(amount: u64, request_id: &str) -> QuotaRecord {
    QuotaRecord {
        user: Some("alice".into()),
        attributes: vec![("team".into(), "research".into())],
        prefix: "quota ai.tokens.total ".into(),
        metric: Metric::Tokens,
        amount,
        request_id: request_id.into(),
        dimension: "ai.tokens.total".into(),
        model: None,
        executor: Some("sandbox".into()),
        meta: None,
    }
}

#[test]
fn with_rules_adds_after_the_policy_and_refuses_a_taken_name() {
    let base = common::policy(&format!(
        "{GPT5}\n[[rules]]\nname = \"own\"\namount = \"requests\"\nbudget = 5\nwindow = \"day\"\n"
    ));
    let added = base.with_rules(&team_rule(10)).unwrap();
    let names: Vec<&str> = added.rules.iter().map(|r| &*r.name).collect();
    assert_eq!(names, ["own", "quota ai.tokens.total team:research"]);
    let taken =
        serde_json::json!([{"name": "own", "amount": "requests", "budget": 1, "window": "day"}]);
    match base.with_rules(&taken) {
        Err(Error::Policy(errors)) => {
            assert!(
                errors[0].to_string().contains("rules[0].name"),
                "{}",
                errors[0]
            );
            assert!(errors[0]
                .to_string()
                .contains("is the name of a rule of the policy"));
        }
        other => panic!("expected a policy error, got {other:?}"),
    }
}

#[test]
fn counters_read_without_reserving_and_record_counts_once() {
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(":memory:").unwrap());
    let s = setup(GPT5, NOW);
    let guard = s.guard.with_ledger(ledger.clone());
    guard.set_policy(guard.policy().with_rules(&team_rule(1000)).unwrap());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let attrs = vec![("team".to_string(), "research".to_string())];
    let read = |guard: &usage_guard::Guard| {
        rt.block_on(guard.rule_counters(None, &attrs, "quota ai.tokens.total "))
            .unwrap()
    };
    assert_eq!(read(&guard)[0].left, 1000);
    assert!(rt.block_on(guard.record_rules(&record(900, "r1"))).unwrap());
    assert!(!rt.block_on(guard.record_rules(&record(900, "r1"))).unwrap());
    let c = &read(&guard)[0];
    assert_eq!(
        (c.used, c.left, c.resets_at),
        (900, 100, Some(at("2027-01-01T00:00:00Z")))
    );
    // Admission counts the same counter.
    let mut call = common::call("bob", "gpt-5", 150, 10);
    call.attributes = attrs.clone();
    let refused = refusal(guard.admit_blocking(AdmitRequest { ..call }));
    assert_eq!(
        refused.limit_type,
        Some(LimitType::Rule),
        "{}",
        refused.message
    );
    ledger.flush().unwrap();
    let rows = ledger.query(&UsageQuery::default()).unwrap();
    assert_eq!((rows[0].requests, rows[0].input_tokens), (1, 900));
    // Concurrency counts calls while they run: a record of it is refused, nothing counted.
    let running = QuotaRecord {
        metric: Metric::Concurrency,
        dimension: "ai.concurrency".into(),
        ..record(1, "r2")
    };
    let refused = rt.block_on(guard.record_rules(&running)).unwrap_err();
    assert!(
        refused.to_string().contains("cannot be recorded"),
        "{refused}"
    );
}

#[test]
fn quota_db_runs_transactions_on_sqlite() {
    let dir = common::tempdir("quota-db");
    let path = dir.join("q.db").display().to_string();
    let mut db = QuotaDb::new(QuotaDbAt::Sqlite(path.clone()));
    assert_eq!(db.dialect(), "sqlite");
    db.execute("CREATE TABLE t (a INTEGER, b TEXT, c REAL)", &[])
        .unwrap();
    db.execute("BEGIN IMMEDIATE", &[]).unwrap();
    let row = [
        SqlValue::Int(1),
        SqlValue::Text("x".into()),
        SqlValue::Real(0.5),
    ];
    db.execute("INSERT INTO t VALUES (?, ?, ?)", &row).unwrap();
    db.execute("ROLLBACK", &[]).unwrap();
    assert!(db.execute("SELECT * FROM t", &[]).unwrap().is_empty());
    db.execute("INSERT INTO t VALUES (?, ?, NULL)", &row[..2])
        .unwrap();
    let mut other = QuotaDb::new(QuotaDbAt::Sqlite(path));
    let rows = other.execute("SELECT a, b, c FROM t", &[]).unwrap();
    assert_eq!(
        rows,
        vec![vec![row[0].clone(), row[1].clone(), SqlValue::Null]]
    );
    assert!(db.execute("SELEC nonsense", &[]).is_err());
}

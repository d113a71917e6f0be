//! Sums filtered on the call attributes a ledger row records (what refills a generic rule's
//! counter), on SQLite and PostgreSQL: a value, any item of a list, a negated condition, the
//! user and model columns, and rows recorded without attributes (matching no attribute).
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::common;

use std::sync::Arc;

use common::pg::Pg;
use common::*;
use serde_json::json;
use usage_guard::SumFilter;
use usage_guard::{
    Ledger, LedgerRow, Metric, PostgresLedger, RowCondition, RowField, SqliteLedger,
};

fn row(id: &str, user: &str, attributes: Option<serde_json::Value>) -> LedgerRow {
    LedgerRow {
        ticket_id: id.into(),
        at_ms: at("2026-11-30T10:00:00Z"),
        user: Some(user.into()),
        source_type: "direct".into(),
        source_id: user.into(),
        model: "gpt-5".into(),
        input_tokens: 10,
        attributes,
        ..LedgerRow::default()
    }
}

fn cond(field: RowField, values: &[&str], negate: bool) -> RowCondition {
    RowCondition {
        field,
        values: values.iter().map(|v| v.to_string()).collect(),
        negate,
    }
}

fn requests(ledger: &dyn Ledger, conditions: Vec<RowCondition>) -> u64 {
    let filter = SumFilter {
        since: at("2026-11-30T00:00:00Z"),
        until: at("2026-12-01T00:00:00Z"),
        attributes: conditions,
        ..SumFilter::default()
    };
    ledger.sum(&filter, Metric::Requests).unwrap()
}

fn attribute_sums(ledger: Arc<dyn Ledger>) {
    let k1 = json!({"credential": "k1", "scope": "eng", "scopes": ["eng", "acme"]});
    let k2 =
        json!({"credential": "k2", "scope": "other", "scopes": ["other"], "teams": ["a", "b"]});
    ledger.record(row("1", "alice", Some(k1.clone())));
    ledger.record(row("2", "alice", Some(k1)));
    ledger.record(row("3", "bob", Some(k2)));
    ledger.record(row("4", "alice", None)); // recorded before the column existed
    ledger.flush().unwrap();
    let l = ledger.as_ref();
    assert_eq!(requests(l, vec![]), 4);
    assert_eq!(
        requests(l, vec![cond(RowField::Key("credential"), &["k1"], false)]),
        2
    );
    assert_eq!(
        requests(
            l,
            vec![cond(RowField::Key("credential"), &["k1", "k2"], false)]
        ),
        3
    );
    // A scope's rule counts its descendants' calls; a team's rule any of the call's teams.
    assert_eq!(
        requests(l, vec![cond(RowField::AnyOf("scopes"), &["acme"], false)]),
        2
    );
    assert_eq!(
        requests(l, vec![cond(RowField::AnyOf("teams"), &["b", "z"], false)]),
        1
    );
    assert_eq!(
        requests(l, vec![cond(RowField::AnyOf("teams"), &["z"], false)]),
        0
    );
    // applies_unless: a row without the attribute is not excluded.
    assert_eq!(
        requests(l, vec![cond(RowField::Key("credential"), &["k1"], true)]),
        2
    );
    assert_eq!(
        requests(l, vec![cond(RowField::AnyOf("scopes"), &["acme"], true)]),
        2
    );
    let alice_k1 = vec![
        cond(RowField::User, &["alice"], false),
        cond(RowField::Model, &["gpt-5"], false),
        cond(RowField::Key("credential"), &["k1"], false),
    ];
    assert_eq!(requests(l, alice_k1), 2);
    // A value with quotes and SQL in it is a bound parameter, never SQL.
    let hostile = cond(RowField::Key("credential"), &["k1' OR '1'='1"], false);
    assert_eq!(requests(l, vec![hostile]), 0);
}

#[test]
fn sqlite_sums_filter_on_recorded_attributes() {
    attribute_sums(Arc::new(SqliteLedger::open(":memory:").unwrap()));
}

#[test]
fn postgres_sums_filter_on_recorded_attributes() {
    let Some(pg) = Pg::start() else {
        panic!("no PostgreSQL: initdb/pg_ctl not found and nothing on 127.0.0.1:5432");
    };
    attribute_sums(Arc::new(PostgresLedger::connect(&pg.fresh_url()).unwrap()));
}

#[test]
fn an_old_sqlite_ledger_gets_the_column_on_open() {
    let path = common::tempdir("old-ledger").join("old.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE usage_ledger (ticket_id TEXT PRIMARY KEY, at_ms BIGINT NOT NULL,
         day TEXT NOT NULL, user_id TEXT, teams TEXT NOT NULL, source_type TEXT NOT NULL,
         source_id TEXT NOT NULL, team_id TEXT, model TEXT NOT NULL,
         input_tokens BIGINT NOT NULL, cached_input_tokens BIGINT NOT NULL,
         output_tokens BIGINT NOT NULL, reasoning_tokens BIGINT NOT NULL,
         cost_micros BIGINT NOT NULL, compute_ms BIGINT NOT NULL, request_id TEXT,
         metadata TEXT);",
    )
    .unwrap();
    drop(conn);
    let ledger = SqliteLedger::open(path.to_str().unwrap()).unwrap();
    let row = row("1", "alice", Some(json!({"credential": "k1"})));
    ledger.record(row);
    ledger.flush().unwrap();
    let k1 = vec![cond(RowField::Key("credential"), &["k1"], false)];
    assert_eq!(requests(&ledger, k1), 1);
    ledger.close().unwrap();
    // Opened again: the migration is not run twice.
    let again = SqliteLedger::open(path.to_str().unwrap()).unwrap();
    assert_eq!(requests(&again, vec![]), 1);
}

#[test]
fn an_old_postgres_ledger_gets_the_column_on_connect() {
    let Some(pg) = Pg::start() else {
        panic!("no PostgreSQL: initdb/pg_ctl not found and nothing on 127.0.0.1:5432");
    };
    let url = pg.fresh_url();
    let mut old = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    old.batch_execute(
        "CREATE TABLE usage_ledger (ticket_id TEXT PRIMARY KEY, at_ms BIGINT NOT NULL,
         day TEXT NOT NULL, user_id TEXT, teams TEXT NOT NULL, source_type TEXT NOT NULL,
         source_id TEXT NOT NULL, team_id TEXT, model TEXT NOT NULL,
         input_tokens BIGINT NOT NULL, cached_input_tokens BIGINT NOT NULL,
         output_tokens BIGINT NOT NULL, reasoning_tokens BIGINT NOT NULL,
         cost_micros BIGINT NOT NULL, compute_ms BIGINT NOT NULL, request_id TEXT,
         metadata TEXT);
         INSERT INTO usage_ledger VALUES ('old', 1796032800000, '2026-11-30', 'alice', '[]',
         'direct', 'alice', NULL, 'gpt-5', 10, 0, 0, 0, 0, 0, NULL, NULL);",
    )
    .unwrap();
    let ledger = PostgresLedger::connect(&url).unwrap();
    ledger.record(row("1", "alice", Some(json!({"credential": "k1"}))));
    ledger.flush().unwrap();
    assert_eq!(requests(&ledger, vec![]), 2);
    let k1 = vec![cond(RowField::Key("credential"), &["k1"], false)];
    assert_eq!(requests(&ledger, k1), 1); // the old row has none
    let unless = vec![cond(RowField::Key("credential"), &["k1"], true)];
    assert_eq!(requests(&ledger, unless), 1);
}

//! The ledger's queue: rows are committed within the loss window without any flush, a durable
//! ledger has committed a row when `record` returns, multi-row inserts stay idempotent across
//! statements, and a locked database never grows the queue past its bound (rows beyond it
//! are dropped and counted, after a bounded wait).
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::pg::Pg;
use common::tempdir;
use usage_guard::{Ledger, LedgerRow, PostgresLedger, SqliteLedger, UsageQuery};

fn row(id: &str) -> LedgerRow {
    LedgerRow {
        ticket_id: id.to_string(),
        at_ms: 1_764_496_800_000,
        user: Some("alice".into()),
        teams: vec!["research".into()],
        source_type: "direct".into(),
        source_id: "alice".into(),
        model: "gpt-5".into(),
        input_tokens: 10,
        cached_input_tokens: 0,
        output_tokens: 5,
        reasoning_tokens: 0,
        cost_micros: 1,
        compute_ms: 1,
        request_id: None,
        metadata: None,
        attributes: None,
    }
}

/// Rows in the file, read by another connection (what a crash would leave).
fn rows_on_disk(path: &std::path::Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn.query_row("SELECT COUNT(*) FROM usage_ledger", [], |r| r.get(0))
        .unwrap()
}

fn requests(ledger: &dyn Ledger) -> u64 {
    ledger
        .query(&UsageQuery::default())
        .unwrap()
        .first()
        .map_or(0, |g| g.requests)
}

#[test]
fn rows_are_committed_within_the_window_without_a_flush() {
    let dir = tempdir("window");
    let path = dir.join("ledger.db");
    let ledger = SqliteLedger::open(path.to_str().unwrap()).unwrap();
    for i in 0..3_000 {
        ledger.record(row(&format!("w{i}")));
    }
    let start = Instant::now();
    while rows_on_disk(&path) < 3_000 {
        assert!(
            start.elapsed() < Duration::from_millis(250),
            "rows not committed within 250 ms"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The writer counts a transaction's rows off the queue just after its commit, which
    // another connection may see first.
    while ledger.pending() != (0, 0) && start.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(ledger.pending(), (0, 0));
}

#[test]
fn a_durable_ledger_has_committed_each_row_when_record_returns() {
    let dir = tempdir("durable");
    let path = dir.join("ledger.db");
    let ledger = Arc::new(SqliteLedger::open_durable(path.to_str().unwrap()).unwrap());
    ledger.record(row("first"));
    assert_eq!(rows_on_disk(&path), 1, "record returned before its commit");
    std::thread::scope(|s| {
        for t in 0..4 {
            let ledger = ledger.clone();
            s.spawn(move || {
                for i in 0..250 {
                    ledger.record(row(&format!("d{t}-{i}")));
                }
            });
        }
    });
    assert_eq!(rows_on_disk(&path), 1_001);
    assert_eq!(ledger.pending(), (0, 0));
}

#[test]
fn multi_row_inserts_skip_ids_already_present_across_statements() {
    let ledger = SqliteLedger::open(":memory:").unwrap();
    for i in 0..2_500 {
        ledger.record(row(&format!("m{i}")));
    }
    ledger.flush().unwrap();
    // Again, interleaved with new ids, so one statement mixes both.
    for i in 1_500..4_000 {
        ledger.record(row(&format!("m{i}")));
    }
    ledger.flush().unwrap();
    assert_eq!(requests(&ledger), 4_000);
}

#[test]
fn a_locked_database_keeps_the_queue_bounded_and_drops_what_does_not_fit() {
    let dir = tempdir("locked");
    let path = dir.join("ledger.db");
    let ledger = Arc::new(SqliteLedger::open(path.to_str().unwrap()).unwrap());
    let bound = ledger.queue_bound();
    let lock = rusqlite::Connection::open(&path).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (ledger, done, most) = (ledger.clone(), done.clone(), most.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                most.fetch_max(ledger.pending().0, Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let total = bound + 10_000;
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..4 {
            let ledger = ledger.clone();
            s.spawn(move || {
                for i in 0..total / 4 {
                    ledger.record(row(&format!("l{t}-{i}")));
                }
            });
        }
    });
    let took = start.elapsed();
    done.store(true, Ordering::SeqCst);
    watcher.join().unwrap();

    let (pending, dropped) = ledger.pending();
    assert!(
        most.load(Ordering::SeqCst) <= bound,
        "the queue passed its bound"
    );
    assert!(pending <= bound, "{pending} rows pending");
    assert!(dropped >= 10_000, "only {dropped} rows dropped");
    assert!(took < Duration::from_secs(8), "callers blocked {took:?}");

    lock.execute_batch("COMMIT").unwrap();
    ledger.flush().unwrap();
    assert_eq!(
        rows_on_disk(&path) as u64,
        total as u64 - dropped,
        "every row not dropped is written once the lock is gone"
    );
    assert_eq!(ledger.pending().0, 0);
}

#[test]
fn postgres_durable_and_batched_rows_all_arrive() {
    let Some(pg) = Pg::start() else {
        panic!("no PostgreSQL: initdb/pg_ctl not found and nothing on 127.0.0.1:5432");
    };
    let url = pg.fresh_url();
    let durable = Arc::new(PostgresLedger::connect_durable(&url).unwrap());
    let reader = PostgresLedger::connect(&url).unwrap();
    durable.record(row("first"));
    assert_eq!(requests(&reader), 1, "record returned before its commit");
    std::thread::scope(|s| {
        for t in 0..4 {
            let durable = durable.clone();
            s.spawn(move || {
                for i in 0..250 {
                    durable.record(row(&format!("d{t}-{i}")));
                }
            });
        }
    });
    assert_eq!(requests(&reader), 1_001);
    // A batch past one statement's rows, with every id already present among them.
    for i in 0..5_000 {
        reader.record(row(&format!("b{i}")));
    }
    for t in 0..4 {
        reader.record(row(&format!("d{t}-0")));
    }
    reader.flush().unwrap();
    assert_eq!(requests(&reader), 6_001);
}

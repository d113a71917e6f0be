//! The writer across a `fork()`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::{Backend, Writer};
use crate::guard::domain::rule::Metric;
use crate::guard::ledger::{AuditQuery, AuditRow, LedgerRow, SumFilter, UsageGroup, UsageQuery};

/// Rows written by `count` in this process.
static WRITTEN: AtomicUsize = AtomicUsize::new(0);

/// A database whose writes do what its function does; it answers every read empty (a sum
/// with the rows `count` wrote).
struct Fake(fn(&[LedgerRow]) -> Result<(), String>);

impl Backend for Fake {
    fn write(&mut self, rows: &[LedgerRow]) -> Result<(), String> {
        (self.0)(rows)
    }
    fn sum(&mut self, _: &SumFilter, _: Metric) -> Result<u64, String> {
        Ok(WRITTEN.load(Ordering::SeqCst) as u64)
    }
    fn query(&mut self, _: &UsageQuery) -> Result<Vec<UsageGroup>, String> {
        Ok(Vec::new())
    }
    fn write_audit(&mut self, _: &[AuditRow]) -> Result<(), String> {
        Ok(())
    }
    fn audit(&mut self, _: &AuditQuery) -> Result<Vec<AuditRow>, String> {
        Ok(Vec::new())
    }
}

/// Counts the rows written (`WRITTEN`).
fn count(rows: &[LedgerRow]) -> Result<(), String> {
    WRITTEN.fetch_add(rows.len(), Ordering::SeqCst);
    Ok(())
}

fn row(id: &str) -> crate::guard::ledger::RowMaker {
    let row = LedgerRow {
        ticket_id: id.into(),
        ..LedgerRow::default()
    };
    Box::new(move || row)
}

/// A parent thread inside the writer handle in the instant of a fork (it holds the lock
/// for ever in the child): the child starts its own thread and writes its rows.
#[test]
fn a_child_never_waits_on_the_writer_a_parent_thread_held() {
    let writer = Writer::start("test", false, || Ok(Fake(count))).expect("starts");
    writer.record(row("parent"));
    writer.flush().expect("the parent's row is written");
    let before = WRITTEN.load(Ordering::SeqCst);
    let held = writer.live.get().lock();
    let code = crate::fork::in_child(Duration::from_secs(20), || {
        writer.record(row("child"));
        let flushed = writer.flush().is_ok();
        i32::from(!(flushed && WRITTEN.load(Ordering::SeqCst) == before + 1))
    });
    drop(held);
    assert_eq!(code, Some(0), "the child hung or lost its row");
    writer.record(row("parent again"));
    writer.flush().expect("the parent keeps writing");
    assert_eq!(WRITTEN.load(Ordering::SeqCst), before + 1);
    writer.close().expect("closes");
}

/// The flush at exit of a forked child that never used the ledger (every child of a pool
/// flushes every ledger) starts no writer thread and opens no connection.
#[test]
fn a_flush_in_a_child_that_never_used_the_ledger_starts_nothing() {
    let opened = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = opened.clone();
    let writer = Writer::start("test", false, move || {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(Fake(count))
    })
    .expect("starts");
    let code = crate::fork::in_child(Duration::from_secs(20), || {
        let flushed = writer.flush().is_ok();
        let started = writer.live.get().lock().started;
        i32::from(!(flushed && !started && opened.load(Ordering::SeqCst) == 1))
    });
    assert_eq!(code, Some(0), "the child's flush started a writer");
    writer.close().expect("closes");
}

/// Records a row about every millisecond for `ms` milliseconds; returns how many.
fn feed(writer: &Writer, ms: u64, prefix: &str) -> usize {
    let start = std::time::Instant::now();
    let mut rows = 0;
    while start.elapsed() < Duration::from_millis(ms) {
        writer.record(row(&format!("{prefix}{rows}")));
        rows += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    rows
}

/// Commits by `slow` in this process.
static COMMITS: AtomicUsize = AtomicUsize::new(0);

/// A commit that takes 10 ms (counted in `COMMITS`).
fn slow(_: &[LedgerRow]) -> Result<(), String> {
    std::thread::sleep(Duration::from_millis(10));
    COMMITS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// A writer busy with a commit while rows keep coming gathers the next commit too: a row
/// every millisecond for 400 ms makes a commit per ~50 ms, not one per 10 ms commit (a
/// slower caller only spaces the commits further apart).
#[test]
fn a_busy_writer_still_gathers_its_next_commit() {
    let writer = Writer::start("test", false, || Ok(Fake(slow))).expect("starts");
    let rows = feed(&writer, 400, "r");
    writer.close().expect("closes");
    let commits = COMMITS.load(Ordering::SeqCst);
    assert!(rows > 50, "only {rows} rows recorded");
    assert!(
        commits <= 400 / 50 + 3,
        "{commits} commits for {rows} rows in 400 ms"
    );
}

/// Writes tried by `refuse` in this process.
static TRIED: AtomicUsize = AtomicUsize::new(0);

/// A write refused at once, as by a server that is down (counted in `TRIED`).
fn refuse(_: &[LedgerRow]) -> Result<(), String> {
    TRIED.fetch_add(1, Ordering::SeqCst);
    Err("down".into())
}

/// A writer whose database refuses at once does not try again for every row that comes:
/// a row every millisecond for 300 ms makes a try per ~50 ms.
#[test]
fn a_failing_writer_does_not_try_again_for_every_row() {
    let writer = Writer::start("test", false, || Ok(Fake(refuse))).expect("starts");
    let rows = feed(&writer, 300, "f");
    let tried = TRIED.load(Ordering::SeqCst);
    assert!(rows > 50, "only {rows} rows recorded");
    assert!(
        tried <= 300 / 50 + 3,
        "{tried} tries for {rows} rows in 300 ms"
    );
    assert!(writer.close().is_err(), "the rows were never written");
}

/// A database that holds every write up (a lock another session holds).
fn held_up(_: &[LedgerRow]) -> Result<(), String> {
    std::thread::sleep(Duration::from_secs(60));
    Ok(())
}

/// A writer held up by its database answers a sum (an admission's fill) and a bounded flush
/// (the exit's) with an error in their time, not when the database lets go.
#[test]
fn a_held_up_database_holds_a_sum_or_an_exit_flush_for_their_bound_only() {
    let writer = Writer::start("test", false, || Ok(Fake(held_up))).expect("starts");
    writer.record(row("stuck"));
    let start = std::time::Instant::now();
    let flushed = writer.flush_within(Duration::from_millis(200));
    assert!(flushed
        .unwrap_err()
        .0
        .contains("did not answer within 0.2 s"));
    let filter = SumFilter::default();
    assert!(writer.sum(&filter, Metric::Tokens).is_err());
    let took = start.elapsed();
    // (Its bound, not the database's 30 s.)
    assert!(took < super::SUM_WAIT + Duration::from_secs(10), "{took:?}");
    std::mem::forget(writer); // its thread sleeps on: dropping would wait for it
}

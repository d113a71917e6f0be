//! Filling counters from the ledger: day-or-longer windows (and sliding windows of an hour
//! or more) take the ledger's sum the first time they are read; shorter windows start at 0;
//! two guards fill once; a ledger that cannot be read is tried again after a minute.
#![cfg(feature = "sqlite")]

use crate::common;

use std::sync::{Arc, Barrier};

use common::*;
use usage_guard::UsageView;
use usage_guard::{Guard, Ledger, ManualClock, MemoryStore, Metric, SqliteLedger, Usage, Window};

fn policy_text() -> String {
    format!(
        r#"{GPT5}
[[limits.direct]]
user = "alice"
model = "gpt-5"
rules = [
  {{ metric = "tokens", amount = 10000, window = "day" }},
  {{ metric = "cost", amount = 100.0, window = "month" }},
  {{ metric = "tokens", amount = 50000, window = "2 hours" }},
]

[limits.platform]
rules = [{{ metric = "requests", amount = 50, window = "10 minutes" }}]
"#
    )
}

fn guard(store: Arc<MemoryStore>, clock: Arc<ManualClock>, ledger: Arc<dyn Ledger>) -> Guard {
    Guard::new(policy(&policy_text()), store, clock).with_ledger(ledger)
}

fn spend(guard: &Guard, calls: u64, input: u64, output: u64) {
    for _ in 0..calls {
        let t = guard
            .admit_blocking(call("alice", "gpt-5", input, output))
            .unwrap();
        let usage = Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        };
        t.bill_blocking(usage).unwrap().unwrap();
    }
}

fn used(view: &UsageView, metric: Metric, window: &str) -> u64 {
    view.rules
        .iter()
        .chain(view.ceilings.iter())
        .find(|r| r.metric == metric && r.window == window.parse::<Window>().unwrap())
        .unwrap_or_else(|| panic!("no {metric:?} {window} rule in {view:?}"))
        .used
}

fn view(guard: &Guard) -> UsageView {
    futures::executor::block_on(guard.usage(Some("alice"), "gpt-5")).unwrap()
}

#[test]
fn a_fresh_guard_sees_the_day_and_the_month_but_not_ten_minutes() {
    let clock = Arc::new(ManualClock::new(at("2026-11-30T10:00:00Z")));
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(":memory:").unwrap());
    let first = guard(Arc::new(MemoryStore::new()), clock.clone(), ledger.clone());
    spend(&first, 8, 1000, 100);
    first.close().unwrap();

    clock.advance(60_000);
    let fresh = guard(Arc::new(MemoryStore::new()), clock.clone(), ledger.clone());
    let v = view(&fresh);
    assert_eq!(used(&v, Metric::Tokens, "day"), 8800);
    assert_eq!(used(&v, Metric::Tokens, "2 hours"), 8800);
    // 8 × (1000 × 1.25 + 100 × 10) micro-dollars.
    assert_eq!(used(&v, Metric::Cost, "month"), 8 * 2250);
    assert_eq!(used(&v, Metric::Requests, "10 minutes"), 0);
    // The day is kept: a call that needs more than is left no longer fits.
    let r = refusal(fresh.admit_blocking(call("alice", "gpt-5", 1500, 100)));
    assert_eq!(r.metric, Some(Metric::Tokens));
    // And the counters are filled once: a second look reads the store only.
    let filled = fresh.fill_counts().0;
    assert!(filled >= 3, "{filled}");
    view(&fresh);
    assert_eq!(fresh.fill_counts().0, filled);
}

#[test]
fn a_counter_keeps_the_larger_of_its_own_count_and_the_ledgers() {
    let clock = Arc::new(ManualClock::new(at("2026-11-30T10:00:00Z")));
    let store = Arc::new(MemoryStore::new());
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(":memory:").unwrap());
    // Without a ledger the store counts 3000; the ledger holds only 1100 of another guard.
    let plain = Guard::new(policy(&policy_text()), store.clone(), clock.clone());
    spend(&plain, 3, 900, 100);
    let other = guard(Arc::new(MemoryStore::new()), clock.clone(), ledger.clone());
    spend(&other, 1, 1000, 100);
    other.close().unwrap();
    let filled = guard(store, clock, ledger);
    assert_eq!(used(&view(&filled), Metric::Tokens, "day"), 3000);
}

#[test]
fn two_guards_filling_at_once_fill_once() {
    for round in 0..20 {
        let clock = Arc::new(ManualClock::new(at("2026-11-30T10:00:00Z")));
        let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(":memory:").unwrap());
        let writer = guard(Arc::new(MemoryStore::new()), clock.clone(), ledger.clone());
        spend(&writer, 2, 1000, 500);
        writer.close().unwrap();

        let store = Arc::new(MemoryStore::new());
        let guards: Vec<Guard> = (0..2)
            .map(|_| guard(store.clone(), clock.clone(), ledger.clone()))
            .collect();
        let barrier = Barrier::new(guards.len());
        let views: Vec<UsageView> = std::thread::scope(|s| {
            let handles: Vec<_> = guards
                .iter()
                .map(|g| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        view(g)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let filled: u64 = guards.iter().map(|g| g.fill_counts().0).sum();
        // day tokens, month cost, 2-hour tokens (current and previous bucket): 4 counters.
        assert_eq!(filled, 4, "round {round}");
        for v in &views {
            assert_eq!(used(v, Metric::Tokens, "day"), 3000, "round {round}");
        }
    }
}

#[test]
fn an_unreadable_ledger_does_not_block_calls_and_is_tried_again_after_a_minute() {
    let dir = tempdir("fill-retry");
    let path = dir.join("ledger.db");
    let path = path.to_str().unwrap();
    let clock = Arc::new(ManualClock::new(at("2026-11-30T10:00:00Z")));
    let first_ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(path).unwrap());
    let first = guard(Arc::new(MemoryStore::new()), clock.clone(), first_ledger);
    spend(&first, 9, 1000, 0);
    first.close().unwrap();

    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(path).unwrap());
    let outside = rusqlite::Connection::open(path).unwrap();
    outside
        .execute_batch("ALTER TABLE usage_ledger RENAME TO hidden")
        .unwrap();
    let fresh = guard(Arc::new(MemoryStore::new()), clock.clone(), ledger);
    // The ledger cannot be read: the call goes on with what the counter holds (0).
    let t = fresh
        .admit_blocking(call("alice", "gpt-5", 2000, 0))
        .unwrap();
    t.release_blocking();
    let errors = fresh.fill_counts().1;
    assert!(errors >= 1);
    assert_eq!(used(&view(&fresh), Metric::Tokens, "day"), 0);
    // Within the minute it is not tried again.
    clock.advance(59_000);
    fresh
        .admit_blocking(call("alice", "gpt-5", 10, 0))
        .unwrap()
        .release_blocking();
    assert_eq!(fresh.fill_counts().1, errors);
    // The ledger is back; a minute after the failure the fill runs.
    outside
        .execute_batch("ALTER TABLE hidden RENAME TO usage_ledger")
        .unwrap();
    clock.advance(1_000);
    assert_eq!(used(&view(&fresh), Metric::Tokens, "day"), 9000);
    let r = refusal(fresh.admit_blocking(call("alice", "gpt-5", 2000, 0)));
    assert_eq!(r.metric, Some(Metric::Tokens));
}

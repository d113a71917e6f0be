//! Concurrency: many threads on one small budget never overspend, a lost race is retried,
//! and a ticket settled from two threads at once settles once.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use common::*;
use usage_guard::internals::{
    CounterRead, HoldRef, ReserveItem, ReserveOutcome, Settle, SettleOutcome, StoreFuture, UsageAdd,
};
use usage_guard::CounterStore;
use usage_guard::{Error, Guard, ManualClock, MemoryStore, Reason, Usage};

const BUDGET: &str = r#"
[[limits.direct]]
user = "alice"
model = "gpt-5"
rules = [{ metric = "tokens", amount = 10000, window = "day" }, { metric = "requests", amount = 400, window = "hour" }]
"#;

#[test]
fn eight_threads_never_hold_and_use_more_than_the_amount() {
    let s = setup(&format!("{GPT5}{BUDGET}"), "2026-11-30T10:00:00Z");
    let guard = s.guard.clone();
    let path = guard.path(Some("alice"), "gpt-5").unwrap();
    let tokens_id = path
        .counters
        .iter()
        .find(|c| c.metric == usage_guard::Metric::Tokens)
        .unwrap()
        .clone();
    let key = usage_guard::internals::CounterKey {
        bucket: tokens_id.window.bucket_start(at("2026-11-30T10:00:00Z")),
        id: tokens_id,
    };
    let done = Arc::new(AtomicBool::new(false));
    let billed_total = Arc::new(AtomicU64::new(0));
    let settled_twice = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (store, done, key) = (s.store.clone(), done.clone(), key.clone());
        thread::spawn(move || {
            let mut samples = 0;
            while !done.load(Ordering::SeqCst) {
                let read =
                    store.read_now(std::slice::from_ref(&key), at("2026-11-30T10:00:00Z"))[0];
                assert!(read.used + read.held <= 10_000, "overspent: {read:?}");
                samples += 1;
            }
            samples
        })
    };
    let barrier = Arc::new(Barrier::new(8));
    let workers: Vec<_> = (0..8u64)
        .map(|w| {
            let (guard, barrier, billed_total, settled_twice) = (
                guard.clone(),
                barrier.clone(),
                billed_total.clone(),
                settled_twice.clone(),
            );
            thread::spawn(move || {
                barrier.wait();
                let (mut admitted, mut refused) = (0, 0);
                for i in 0..50u64 {
                    let max_out = 50 + (w * 37 + i * 91) % 400;
                    match guard.admit_blocking(call("alice", "gpt-5", 20, max_out)) {
                        Ok(t) => {
                            admitted += 1;
                            let ceiling = t.ceiling().tokens.unwrap();
                            let out = (ceiling - 20).min(max_out) * (1 + i % 3) / 3;
                            let billed = t
                                .bill_blocking(Usage {
                                    input_tokens: 20,
                                    output_tokens: out,
                                    ..Usage::default()
                                })
                                .unwrap();
                            billed_total.fetch_add(20 + out, Ordering::SeqCst);
                            assert!(billed.is_some());
                            if t.bill_blocking(Usage::default()).unwrap().is_some()
                                || t.release_blocking()
                            {
                                settled_twice.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Err(Error::Refused(r)) => {
                            assert_ne!(r.reason, Reason::Unavailable);
                            refused += 1;
                        }
                        Err(other) => panic!("unexpected error {other}"),
                    }
                }
                (admitted, refused)
            })
        })
        .collect();
    let results: Vec<(u32, u32)> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    done.store(true, Ordering::SeqCst);
    let samples = sampler.join().unwrap();
    assert!(samples > 0);
    assert_eq!(settled_twice.load(Ordering::SeqCst), 0);
    let read = s.store.read_now(&[key], at("2026-11-30T10:00:00Z"))[0];
    assert_eq!(read.held, 0, "every ticket settled");
    assert_eq!(read.used, billed_total.load(Ordering::SeqCst));
    assert!(read.used <= 10_000);
    let refused: u32 = results.iter().map(|r| r.1).sum();
    assert!(refused > 0, "the budget was meant to run out: {results:?}");
}

/// A real memory store with a rival call in front of every reserve: the rival holds what is
/// left just as our reserve runs, then gives it back. Deterministic lost races.
#[derive(Debug)]
struct RivalStore {
    inner: MemoryStore,
    races: AtomicUsize,
}

impl CounterStore for RivalStore {
    fn read(
        &self,
        keys: Vec<usage_guard::internals::CounterKey>,
        now: i64,
    ) -> StoreFuture<'_, Vec<CounterRead>> {
        self.inner.read(keys, now)
    }

    fn reserve(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        minute: i64,
        now: i64,
    ) -> StoreFuture<'_, ReserveOutcome> {
        StoreFuture::boxed(async move {
            if self.races.load(Ordering::SeqCst) == 0 {
                return self.inner.reserve(ticket, items, minute, now).await;
            }
            let race = self.races.fetch_sub(1, Ordering::SeqCst);
            let item = items.iter().find(|i| i.limit.is_some()).unwrap().clone();
            let read = self.inner.read(vec![item.key.clone()], now).await?[0];
            let rival = item.limit.unwrap() - read.total() - item.carried;
            let rival_item = ReserveItem {
                hold: rival,
                limit: None,
                ..item.clone()
            };
            let rival_id = format!("rival-{race}");
            assert_eq!(
                self.inner
                    .reserve(rival_id.clone(), vec![rival_item], minute, now)
                    .await?,
                ReserveOutcome::Reserved
            );
            let outcome = self.inner.reserve(ticket, items, minute, now).await?;
            let hold = HoldRef {
                key: item.key,
                amount: rival,
            };
            let settle = Settle {
                id: rival_id.clone(),
                ticket: rival_id,
                holds: vec![hold],
                expiry_minute: minute,
                adds: Vec::<UsageAdd>::new(),
                settled_until: now + 3_600_000,
            };
            self.inner.settle(&settle, now).await?;
            Ok(outcome)
        })
    }

    fn settle(&self, settle: &Settle, now: i64) -> StoreFuture<'_, SettleOutcome> {
        self.inner.settle(settle, now)
    }
}

fn rival_guard(races: usize) -> (Guard, Arc<RivalStore>) {
    let store = Arc::new(RivalStore {
        inner: MemoryStore::new(),
        races: AtomicUsize::new(races),
    });
    let clock = Arc::new(ManualClock::new(at("2026-11-30T10:00:00Z")));
    (
        Guard::new(policy(&format!("{GPT5}{BUDGET}")), store.clone(), clock),
        store,
    )
}

#[test]
fn a_lost_race_is_read_again_and_retried() {
    let (guard, _) = rival_guard(2);
    let t = guard
        .admit_blocking(call("alice", "gpt-5", 100, 900))
        .unwrap();
    assert_eq!(t.ceiling().tokens, Some(1000));
    assert_eq!(guard.stats().reserve_retries.load(Ordering::SeqCst), 2);
}

#[test]
fn after_three_lost_races_the_call_does_not_fit() {
    let (guard, store) = rival_guard(10);
    match guard.admit_blocking(call("alice", "gpt-5", 100, 900)) {
        Err(Error::Refused(r)) => {
            assert_eq!(r.reason, Reason::DoesNotFit);
            assert!(r.message.contains("10,000 tokens a day"), "{}", r.message);
        }
        other => panic!("expected does-not-fit, got {other:?}"),
    }
    assert_eq!(
        store.races.load(Ordering::SeqCst),
        6,
        "one read and three more"
    );
    assert_eq!(guard.stats().reserve_retries.load(Ordering::SeqCst), 4);
}

#[test]
fn bill_and_release_from_two_threads_settle_once() {
    let s = setup(&format!("{GPT5}{BUDGET}"), "2026-11-30T10:00:00Z");
    for _ in 0..200 {
        let t = s
            .guard
            .admit_blocking(call("alice", "gpt-5", 1, 1))
            .unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let (t1, b1) = (t.clone(), barrier.clone());
        let biller = thread::spawn(move || {
            b1.wait();
            t1.bill_blocking(Usage {
                input_tokens: 1,
                output_tokens: 1,
                ..Usage::default()
            })
            .unwrap()
            .is_some()
        });
        barrier.wait();
        let released = t.release_blocking();
        let billed = biller.join().unwrap();
        assert!(billed ^ released, "exactly one of bill and release wins");
    }
    let view = futures::executor::block_on(s.guard.usage(Some("alice"), "gpt-5")).unwrap();
    assert_eq!(view.rules.iter().map(|r| r.reserved).sum::<u64>(), 0);
}

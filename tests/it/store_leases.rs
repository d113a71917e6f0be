//! Leased shared counters (`LeasedStore`, docs/redis.md "Leases") over the memory store:
//! threads sharing one small Model Total never hold and use more than its amount, every bill
//! reaches the counter once, and nothing stays held once the leases are given back.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use common::*;
use usage_guard::internals::{
    CounterKey, HoldRef, ReserveItem, ReserveOutcome, Settle, SettleOutcome, UsageAdd,
};
use usage_guard::CounterStore;
use usage_guard::{Error, Guard, LeaseOptions, LeasedStore, ManualClock, MemoryStore, Usage};

const NOW: &str = "2026-11-30T10:00:00Z";
const AMOUNT: u64 = 20_000;

fn model_total_policy() -> String {
    format!(
        "{GPT5}
[[limits.public]]
model = \"gpt-5\"
each_person = [{{ metric = \"tokens\", amount = 1000000, window = \"day\" }}]

[[limits.model_total]]
model = \"gpt-5\"
rules = [{{ metric = \"tokens\", amount = {AMOUNT}, window = \"day\" }}]
"
    )
}

/// A memory store, the same store leasing from the first call, and a guard on the latter.
fn leasing_guard() -> (Arc<MemoryStore>, LeasedStore, Guard) {
    let inner = Arc::new(MemoryStore::new());
    let options = LeaseOptions {
        above_per_second: 0.0,
        ..LeaseOptions::default()
    };
    let leased = LeasedStore::new(inner.clone(), options);
    let clock = Arc::new(ManualClock::new(at(NOW)));
    let guard = Guard::new(
        policy(&model_total_policy()),
        Arc::new(leased.clone()),
        clock,
    );
    (inner, leased, guard)
}

/// The Model Total's key in the store inside.
fn model_key(guard: &Guard) -> CounterKey {
    let path = guard.path(Some("u0"), "gpt-5").unwrap();
    let id = path
        .counters
        .iter()
        .find(|c| c.scope == usage_guard::Scope::ModelTotal)
        .unwrap()
        .clone();
    CounterKey {
        bucket: id.window.bucket_start(at(NOW)),
        id,
    }
}

#[test]
fn threads_leasing_a_model_total_never_hold_and_use_more_than_its_amount() {
    let (inner, leased, guard) = leasing_guard();
    let key = model_key(&guard);
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (inner, done, key) = (inner.clone(), done.clone(), key.clone());
        thread::spawn(move || {
            let mut most_leases = 0;
            while !done.load(Ordering::SeqCst) {
                let read = inner.read_now(std::slice::from_ref(&key), at(NOW))[0];
                assert!(read.used + read.held <= AMOUNT, "overspent: {read:?}");
                most_leases = most_leases.max(1);
            }
            most_leases
        })
    };
    let billed_total = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(8));
    let workers: Vec<_> = (0..8u64)
        .map(|w| {
            let (guard, barrier, billed_total) =
                (guard.clone(), barrier.clone(), billed_total.clone());
            let leased = leased.clone();
            thread::spawn(move || {
                barrier.wait();
                let (mut refused, mut leases_seen) = (0, 0);
                for i in 0..120u64 {
                    let user = format!("u{}", (w * 7 + i) % 13);
                    let max_out = 20 + (w * 37 + i * 91) % 200;
                    match guard.admit_blocking(call(&user, "gpt-5", 20, max_out)) {
                        Ok(t) => {
                            leases_seen = leases_seen.max(leased.leases());
                            let out = t.ceiling().tokens.unwrap().saturating_sub(20) / 2;
                            let usage = Usage {
                                input_tokens: 20,
                                output_tokens: out,
                                ..Usage::default()
                            };
                            assert!(t.bill_blocking(usage).unwrap().is_some());
                            billed_total.fetch_add(20 + out, Ordering::SeqCst);
                        }
                        Err(Error::Refused(_)) => refused += 1,
                        Err(other) => panic!("unexpected error {other}"),
                    }
                }
                (refused, leases_seen)
            })
        })
        .collect();
    let results: Vec<(u32, usize)> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    guard.close().unwrap();
    done.store(true, Ordering::SeqCst);
    assert!(sampler.join().unwrap() > 0);
    assert!(
        results.iter().map(|r| r.0).sum::<u32>() > 0,
        "the amount was meant to run out"
    );
    assert!(
        results.iter().any(|r| r.1 > 0),
        "no call was admitted on a lease"
    );
    assert_eq!(leased.leases(), 0);
    let read = inner.read_now(&[key], at(NOW))[0];
    assert_eq!(read.held, 0, "every lease and call given back");
    assert_eq!(read.used, billed_total.load(Ordering::SeqCst));
    assert!(read.used <= AMOUNT);
}

#[test]
fn a_settle_retried_after_its_lease_ended_counts_once() {
    let (inner, leased, guard) = leasing_guard();
    let (key, now) = (model_key(&guard), at(NOW));
    let minute = usage_guard::internals::expiry_minute(now, 15 * 60_000);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let item = ReserveItem {
            key: key.clone(),
            hold: 100,
            limit: Some(AMOUNT),
            carried: 0,
            retain_until: now + 86_400_000,
        };
        let reserved = leased.reserve("t1".into(), vec![item], minute, now).await;
        assert_eq!(reserved.unwrap(), ReserveOutcome::Reserved);
        assert_eq!(leased.leases(), 1, "the call was taken from a lease");
        let settle = Settle {
            id: "t1".into(),
            ticket: "t1".into(),
            holds: vec![HoldRef {
                key: key.clone(),
                amount: 100,
            }],
            expiry_minute: minute,
            adds: vec![UsageAdd {
                key: key.clone(),
                amount: 50,
                retain_until: now + 86_400_000,
            }],
            settled_until: now + 300_000,
        };
        assert_eq!(
            leased.settle(&settle, now).await.unwrap(),
            SettleOutcome::Settled
        );
        assert_eq!(leased.give_back().await, 0);
        assert_eq!(leased.leases(), 0);
        // The same settle again (a retry whose first answer was lost): neither its use nor
        // its hold reaches the store a second time.
        leased.settle(&settle, now).await.unwrap();
    });
    let read = inner.read_now(&[key], now)[0];
    assert_eq!((read.used, read.held), (50, 0));
}

#[test]
fn a_call_reserved_in_the_store_bills_there_even_while_a_lease_exists() {
    let (inner, leased, guard) = leasing_guard();
    let (key, now) = (model_key(&guard), at(NOW));
    let call_minute = usage_guard::internals::expiry_minute(now, 15 * 60_000);
    // A batch's reservation (held 25 h) never takes from a lease: it is the store's.
    let batch_minute = usage_guard::internals::expiry_minute(now, 25 * 3_600_000);
    let item = |hold| ReserveItem {
        key: key.clone(),
        hold,
        limit: Some(AMOUNT),
        carried: 0,
        retain_until: now + 86_400_000,
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let leased_call = leased.reserve("t1".into(), vec![item(100)], call_minute, now);
        assert_eq!(leased_call.await.unwrap(), ReserveOutcome::Reserved);
        assert_eq!(leased.leases(), 1);
        let held_with_lease = inner.read_now(std::slice::from_ref(&key), now)[0].held;
        let batch = leased.reserve("b1".into(), vec![item(300)], batch_minute, now);
        assert_eq!(batch.await.unwrap(), ReserveOutcome::Reserved);
        let read = inner.read_now(std::slice::from_ref(&key), now)[0];
        assert_eq!(
            read.held,
            held_with_lease + 300,
            "the batch holds in the store"
        );
        let settle = Settle {
            id: "b1".into(),
            ticket: "b1".into(),
            holds: vec![HoldRef {
                key: key.clone(),
                amount: 300,
            }],
            expiry_minute: batch_minute,
            adds: vec![UsageAdd {
                key: key.clone(),
                amount: 70,
                retain_until: now + 86_400_000,
            }],
            settled_until: now + 300_000,
        };
        leased.settle(&settle, now).await.unwrap();
        // Its use is the store's at once, and the lease's hold is untouched: were it added
        // to the lease's use, a flush would give it back from the lease's hold a second
        // time (the counter would count low).
        let read = inner.read_now(std::slice::from_ref(&key), now)[0];
        assert_eq!((read.used, read.held), (70, held_with_lease));
    });
    guard.close().unwrap();
    let read = inner.read_now(&[key], now)[0];
    assert_eq!(read.used, 70);
}

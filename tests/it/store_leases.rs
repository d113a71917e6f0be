//! Leased shared counters (`LeasedStore`, docs/redis.md "Leases") over the memory store:
//! threads sharing one small Model Total never hold and use more than its amount, every bill
//! reaches the counter once, and nothing stays held once the leases are given back.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use super::store_leases_support::*;
use common::*;
use usage_guard::internals::{ReserveOutcome, SettleOutcome};
use usage_guard::CounterStore;
use usage_guard::{Error, Usage};

const AMOUNT: u64 = 20_000;

#[test]
fn threads_leasing_a_model_total_never_hold_and_use_more_than_its_amount() {
    let (inner, leased, guard) = leasing_guard(AMOUNT);
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
    let (inner, leased, guard) = leasing_guard(AMOUNT);
    let (key, now) = (model_key(&guard), at(NOW));
    let minute = usage_guard::internals::expiry_minute(now, 15 * 60_000);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let reserved = leased.reserve("t1".into(), vec![item(&key, 100, AMOUNT)], minute, now);
        let reserved = reserved.await;
        assert_eq!(reserved.unwrap(), ReserveOutcome::Reserved);
        assert_eq!(leased.leases(), 1, "the call was taken from a lease");
        let settle = whole_settle("t1", &key, 100, 50, minute);
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
    let (inner, leased, guard) = leasing_guard(AMOUNT);
    let (key, now) = (model_key(&guard), at(NOW));
    let call_minute = usage_guard::internals::expiry_minute(now, 15 * 60_000);
    // A batch's reservation (held 25 h) never takes from a lease: it is the store's.
    let batch_minute = usage_guard::internals::expiry_minute(now, 25 * 3_600_000);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let leased_call =
            leased.reserve("t1".into(), vec![item(&key, 100, AMOUNT)], call_minute, now);
        assert_eq!(leased_call.await.unwrap(), ReserveOutcome::Reserved);
        assert_eq!(leased.leases(), 1);
        let held_with_lease = inner.read_now(std::slice::from_ref(&key), now)[0].held;
        let batch = leased.reserve(
            "b1".into(),
            vec![item(&key, 300, AMOUNT)],
            batch_minute,
            now,
        );
        assert_eq!(batch.await.unwrap(), ReserveOutcome::Reserved);
        let read = inner.read_now(std::slice::from_ref(&key), now)[0];
        assert_eq!(
            read.held,
            held_with_lease + 300,
            "the batch holds in the store"
        );
        let settle = whole_settle("b1", &key, 300, 70, batch_minute);
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

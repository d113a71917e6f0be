//! Leased shared counters with a store step interleaved by hand: a store inside that runs a
//! hook while a lease is renewed, to place a bill exactly in the renewal's window, or that
//! answers a lease's reservation with an error after placing it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::store_leases_support::{item, model_total_key, whole_settle, Hooked, NOW};
use crate::common::at;
use usage_guard::internals::{expiry_minute, ReserveOutcome};
use usage_guard::{CounterStore, LeaseOptions, LeasedStore, MemoryStore};

const AMOUNT: u64 = 1_000;

#[test]
fn a_bill_landing_while_its_lease_is_renewed_never_leaves_the_counter_past_its_amount() {
    let hooked = Arc::new(Hooked::<MemoryStore>::default());
    let options = LeaseOptions {
        above_per_second: 0.0,
        share: 1.0,
        ..LeaseOptions::default()
    };
    let leased = LeasedStore::new(hooked.clone(), options);
    let (key, now) = (model_total_key(AMOUNT), at(NOW));
    let minute = expiry_minute(now, 15 * 60_000);
    let item = item(&key, 100, AMOUNT);
    let bill = |ticket: &str| whole_settle(ticket, &key, 100, 100, minute);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let calls = runtime.block_on(async {
        // Calls of 100 fill the first slice.
        let mut calls = 0;
        while calls == 0 || leased.unused() >= 100 {
            let reserved = leased.reserve(format!("t{calls}"), vec![item.clone()], minute, now);
            assert_eq!(reserved.await.unwrap(), ReserveOutcome::Reserved);
            calls += 1;
        }
        assert_eq!(leased.leases(), 1);
        // The next renews the lease; call t0 bills while the renewal reads the counter.
        let (during, settle) = (leased.clone(), bill("t0"));
        hooked.on_read.set(move || {
            // The strip happens at the call (no await needed: all of it is the lease's).
            drop(during.settle(&settle, now));
        });
        // (Refused: the counter is full, 100 used and the other calls open.)
        let reserved = leased.reserve(format!("t{calls}"), vec![item.clone()], minute, now);
        assert!(matches!(
            reserved.await.unwrap(),
            ReserveOutcome::Conflict { .. }
        ));
        let read = hooked.inner.read_now(std::slice::from_ref(&key), now)[0];
        assert!(
            read.used + read.held <= AMOUNT,
            "the store counts {read:?} on an amount of {AMOUNT} ({calls} calls open, 100 billed)"
        );
        for t in 1..calls {
            leased.settle(&bill(&format!("t{t}")), now).await.unwrap();
        }
        assert_eq!(leased.give_back().await, 0);
        calls
    });
    let read = hooked.inner.read_now(&[key], now)[0];
    assert_eq!((read.used, read.held), (100 * calls, 0));
}

#[test]
fn a_lease_placed_by_a_reservation_that_answered_an_error_is_given_back() {
    // The store placed the lease's hold and the answer was lost (a connection reset): the
    // process never learns of that hold. Before, it stayed until it expired (2-3 min), out of
    // every guard's reach; now it is given back by the lease's id at once.
    let hooked = Arc::new(Hooked::<MemoryStore>::default());
    let options = LeaseOptions {
        above_per_second: 0.0,
        ..LeaseOptions::default()
    };
    let leased = LeasedStore::new(hooked.clone(), options);
    let (key, now) = (model_total_key(AMOUNT), at(NOW));
    let minute = expiry_minute(now, 15 * 60_000);
    let item = item(&key, 100, AMOUNT);
    let release = whole_settle("t0", &key, 100, 0, minute);
    hooked.fail_leases.store(true, Ordering::SeqCst);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // Whatever the call comes to (an error, or reserved in the store), it is released.
        let _ = leased.reserve("t0".into(), vec![item], minute, now).await;
        leased.settle(&release, now).await.unwrap();
        assert_eq!(leased.leases(), 0, "no lease is known here");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let held = || hooked.inner.read_now(std::slice::from_ref(&key), now)[0].held;
        while held() > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
    let read = hooked.inner.read_now(&[key], now)[0];
    assert_eq!((read.used, read.held), (0, 0), "a lease's hold is left");
}

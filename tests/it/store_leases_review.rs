//! Leased shared counters under adversarial orderings (a review of `LeasedStore`): what a
//! lease answers must keep the store contract (`CounterStore`, src/guard/store/mod.rs) and
//! the guarantees of docs/redis.md "Leases" — every bill counted once, no hold left, never
//! past the amount.

use crate::common;

use std::sync::Arc;

use super::store_leases_support::*;
use common::*;
use usage_guard::internals::ReserveOutcome;
use usage_guard::CounterStore;
use usage_guard::{Guard, ManualClock, MemoryStore};

#[test]
fn bills_on_a_lease_reach_the_store_when_the_guard_is_dropped_without_close() {
    let (inner, leased, guard) = leasing_guard(20_000);
    let key = model_key(&guard);
    let ticket = guard.admit_blocking(call("u1", "gpt-5", 20, 200)).unwrap();
    assert_eq!(leased.leases(), 1, "the call was taken from a lease");
    assert!(ticket.bill_blocking(usage(20, 100)).unwrap().is_some());
    // The guard and its store go away here, no `close()` (a script's function returning, a
    // gateway's worker replaced): the bill was answered.
    drop((ticket, guard, leased));
    std::thread::sleep(std::time::Duration::from_millis(600));
    let read = inner.read_now(&[key], at(NOW))[0];
    assert_eq!(
        read.used, 120,
        "a bill the guard answered is missing: {read:?}"
    );
}

#[test]
fn a_call_billed_after_close_reaches_the_store() {
    let (inner, leased, guard) = leasing_guard(20_000);
    let key = model_key(&guard);
    let ticket = guard.admit_blocking(call("u1", "gpt-5", 20, 200)).unwrap();
    assert_eq!(leased.leases(), 1);
    guard.close().unwrap();
    // The open call ends after close(): its bill is answered...
    let billed = ticket.bill_blocking(usage(20, 100));
    assert!(billed.is_ok(), "{billed:?}");
    drop((ticket, guard, leased));
    std::thread::sleep(std::time::Duration::from_millis(600));
    // ... so it is counted, and nothing stays held.
    let read = inner.read_now(&[key], at(NOW))[0];
    assert_eq!(read.used, 120, "{read:?}");
    assert_eq!(read.held, 0, "{read:?}");
}

#[test]
fn a_reservation_landing_after_its_ticket_settled_takes_nothing_from_a_lease() {
    let (inner, leased, guard) = leasing_guard(20_000);
    let (key, now) = (model_key(&guard), at(NOW));
    let minute = usage_guard::internals::expiry_minute(now, 15 * 60_000);
    let item = item(&key, 100, 20_000);
    let give_up = |ticket: &str| whole_settle(ticket, &key, 100, 0, minute);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        // A lease exists (another call).
        let first = leased
            .reserve("t0".into(), vec![item.clone()], minute, now)
            .await;
        assert_eq!(first.unwrap(), ReserveOutcome::Reserved);
        leased.settle(&give_up("t0"), now).await.unwrap();
        // A call given up before its reservation landed (the store contract: a reservation
        // that lands after its ticket settled places nothing).
        leased.settle(&give_up("t1"), now).await.unwrap();
        let late = leased
            .reserve("t1".into(), vec![item.clone()], minute, now)
            .await;
        assert_ne!(
            late.unwrap(),
            ReserveOutcome::Reserved,
            "placed after its settle"
        );
        assert_eq!(leased.give_back().await, 0);
    });
    let read = inner.read_now(&[key], now)[0];
    assert_eq!(
        read.held, 0,
        "a hold stays after every lease was given back"
    );
    assert_eq!(leased.leases(), 0);
}

#[test]
fn a_lowered_amount_is_not_passed_on_a_slice_leased_under_the_old_one() {
    let inner = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(at(NOW)));
    let leased = leasing(&inner);
    let a = Guard::new(
        policy(&model_total_policy(20_000)),
        Arc::new(leased.clone()),
        clock.clone(),
    );
    let b = Guard::new(policy(&model_total_policy(20_000)), inner.clone(), clock);
    let key = model_key(&a);
    let first = a.admit_blocking(call("u1", "gpt-5", 20, 200)).unwrap();
    assert_eq!(leased.leases(), 1);
    first.bill_blocking(usage(20, 100)).unwrap();
    // Another process bills 5,000 meanwhile (this one sees it at its next renewal).
    for i in 0..25 {
        let t = b
            .admit_blocking(call(&format!("b{i}"), "gpt-5", 20, 180))
            .unwrap();
        t.bill_blocking(usage(20, 180)).unwrap();
    }
    // The amount is lowered under the live lease, below what the store counts already.
    for guard in [&a, &b] {
        guard.set_policy(policy(&model_total_policy(5_500)));
    }
    let mut admitted = 0;
    for i in 0..10 {
        if let Ok(t) = a.admit_blocking(call(&format!("a{i}"), "gpt-5", 20, 200)) {
            t.bill_blocking(usage(20, 200)).unwrap();
            admitted += 1;
        }
    }
    a.close().unwrap();
    let read = inner.read_now(&[key], at(NOW))[0];
    assert!(
        read.used <= 5_500,
        "{admitted} calls admitted from the old slice: {read:?} on an amount of 5,500"
    );
}

#[test]
fn a_lease_live_across_a_day_boundary_counts_each_day_once() {
    let inner = Arc::new(MemoryStore::new());
    let clock = Arc::new(ManualClock::new(at("2026-11-30T23:59:59Z")));
    let leased = leasing(&inner);
    let guard = Guard::new(
        policy(&model_total_policy(20_000)),
        Arc::new(leased.clone()),
        clock.clone(),
    );
    let day_key = |now: i64| {
        let mut key = model_key(&guard);
        key.bucket = key.id.window.bucket_start(now);
        key
    };
    let (before, after) = (at("2026-11-30T23:59:59Z"), at("2026-12-01T00:00:01Z"));
    // Calls open on each side of midnight, billed on the other side or the same.
    let open_before = guard.admit_blocking(call("u1", "gpt-5", 20, 200)).unwrap();
    let t = guard.admit_blocking(call("u2", "gpt-5", 20, 200)).unwrap();
    t.bill_blocking(usage(20, 80)).unwrap();
    assert_eq!(leased.leases(), 1);
    clock.set(after);
    open_before.bill_blocking(usage(20, 30)).unwrap();
    for i in 0..5 {
        let t = guard
            .admit_blocking(call(&format!("v{i}"), "gpt-5", 20, 200))
            .unwrap();
        t.bill_blocking(usage(20, 100)).unwrap();
    }
    guard.close().unwrap();
    let yesterday = inner.read_now(&[day_key(before)], before)[0];
    let today = inner.read_now(&[day_key(after)], after)[0];
    assert_eq!(yesterday.used, 100, "{yesterday:?}");
    assert_eq!(today.used, 50 + 5 * 120, "{today:?}");
    assert_eq!(today.held, 0, "{today:?}");
}

#[test]
fn a_bill_sent_three_times_counts_once() {
    let (inner, leased, guard) = leasing_guard(20_000);
    let (key, now) = (model_key(&guard), at(NOW));
    let minute = usage_guard::internals::expiry_minute(now, 15 * 60_000);
    let item = item(&key, 100, 20_000);
    let bill = whole_settle("t1", &key, 100, 50, minute);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let reserved = leased.reserve("t1".into(), vec![item], minute, now).await;
        assert_eq!(reserved.unwrap(), ReserveOutcome::Reserved);
        // The bill, then two retries (a carrying step dropped twice): the second retry
        // must find what the first attempt answered here, as the first retry did.
        for _ in 0..3 {
            leased.settle(&bill, now).await.unwrap();
        }
        assert_eq!(leased.give_back().await, 0);
    });
    let read = inner.read_now(&[key], now)[0];
    assert_eq!((read.used, read.held), (50, 0));
}

#[test]
fn a_take_never_settled_here_is_put_back_when_its_hold_expires() {
    // A ticket admitted here and billed elsewhere (a forked child), or never settled: the
    // store drops its hold at its expiry; so does the lease, which is then idle and given
    // back. Before, the take stayed, and the lease was renewed for as long as the process
    // lived, holding a slice of the Model Total from every other guard.
    let (inner, leased, guard) = leasing_guard(20_000);
    let (key, now) = (model_key(&guard), at(NOW));
    let minute = usage_guard::internals::expiry_minute(now, 15 * 60_000);
    let later = now + 20 * 60_000;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let placed = leased
            .reserve("t1".into(), vec![item(&key, 100, 20_000)], minute, now)
            .await;
        assert_eq!(placed.unwrap(), ReserveOutcome::Reserved);
        assert_eq!(leased.leases(), 1);
        // Time goes on past the hold's expiry (the store's clock is the calls' `now`).
        leased.read(vec![key.clone()], later).await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        while leased.leases() > 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(leased.leases(), 0, "the lease of an expired take is kept");
        // Its late bill, taking nothing from a lease, counts in the store, once.
        let bill = whole_settle("t1", &key, 100, 60, minute);
        leased.settle(&bill, later).await.unwrap();
        leased.settle(&bill, later).await.unwrap();
    });
    let read = inner.read_now(&[key], later)[0];
    assert_eq!((read.used, read.held), (60, 0), "{read:?}");
}

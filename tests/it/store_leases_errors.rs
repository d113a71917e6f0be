//! A call that took from a lease and whose reservation in the store answered an error (a
//! time-out after it landed), on a real Redis: its give-back must give back in the store only
//! the holds the store placed for it.

#![cfg(feature = "redis")]

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::store_leases_support::{item, model_total_key, whole_settle, Hooked, NOW};
use crate::common::at;
use crate::common::redis_server::RedisServer;
use usage_guard::internals::{expiry_minute, CounterKey, ReserveOutcome};
use usage_guard::{CounterId, CounterStore, LeaseOptions, LeasedStore, RedisStore, Scope};

const AMOUNT: u64 = 1_000;

#[test]
fn a_call_whose_reservation_answered_an_error_gives_back_nothing_it_took_from_a_lease() {
    // The call's Model Total hold came from its lease, its person's hold went to the store,
    // which placed it and answered an error. Before, the error put the call's take back to
    // the slice at once, so the call's give-back no longer knew that hold was the lease's and
    // gave it back in the store too: Redis keeps a counter's holds as one sum per minute, so
    // that took an open call's hold off the counter, which then admitted past its amount.
    let server = RedisServer::start();
    let store = Arc::new(Hooked::new(
        RedisStore::connect(&server.url(), "ug").unwrap(),
    ));
    let options = LeaseOptions {
        above_per_second: 0.0,
        ..LeaseOptions::default()
    };
    let leased = LeasedStore::new(store.clone(), options);
    let (key, now) = (model_total_key(AMOUNT), at(NOW));
    let id = &key.id;
    let person = CounterKey {
        id: Arc::new(CounterId::new(
            Scope::PersonModel,
            Some("alice".into()),
            None,
            id.model.clone(),
            id.metric,
            id.window,
        )),
        ..key.clone()
    };
    let minute = expiry_minute(now, 15 * 60_000);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let read = runtime.block_on(async {
        // Another guard's call holds 420 of the Model Total in the store.
        let open = store
            .inner
            .reserve("w".into(), vec![item(&key, 420, AMOUNT)], minute, now);
        assert_eq!(open.await.unwrap(), ReserveOutcome::Reserved);
        // This process leases (a slice of 58 here); then a call of 40 on both counters, its
        // Model Total hold taken from the slice, lands and answers an error.
        let first = leased.reserve("t0".into(), vec![item(&key, 10, AMOUNT)], minute, now);
        assert_eq!(first.await.unwrap(), ReserveOutcome::Reserved);
        assert_eq!(leased.leases(), 1);
        store.fail_calls.store(true, Ordering::SeqCst);
        let items = vec![item(&person, 40, AMOUNT), item(&key, 40, AMOUNT)];
        assert!(leased
            .reserve("t1".into(), items, minute, now)
            .await
            .is_err());
        store.fail_calls.store(false, Ordering::SeqCst);
        // The engine gives the call up: both its holds are given back.
        let mut release = whole_settle("t1", &person, 100, 0, minute);
        release
            .holds
            .extend(whole_settle("t1", &key, 100, 0, minute).holds);
        leased.settle(&release, now).await.unwrap();
        let t0 = whole_settle("t0", &key, 10, 0, minute);
        leased.settle(&t0, now).await.unwrap();
        assert_eq!(leased.give_back().await, 0);
        store.inner.read(vec![key, person], now).await.unwrap()
    });
    assert_eq!(
        (read[0].held, read[1].held),
        (420, 0),
        "the open call's 420 must stay held on the Model Total, and nothing on the person's"
    );
}

//! `reserve_known` on a real redis-server (docs/redis-internals.md, "One round trip to admit"): the
//! script checks what a decision from known values rested on, places nothing when a condition
//! fails, and answers the fresh values either way.
#![cfg(feature = "redis")]

use crate::common;

use common::redis_server::RedisServer;
use std::time::Duration;

use futures::executor::block_on;
use usage_guard::internals::{
    expiry_minute, CounterKey, CounterRead, Fence, KnownOutcome, KnownReserve, ReserveFromKnown,
    ReserveItem, ReserveOutcome, Settle, UsageAdd,
};
use usage_guard::{CounterStore, Millis, RedisStore};

/// 2026-01-01T00:00:30Z.
const T0: Millis = 1_767_225_630_000;
const DAY_START: Millis = T0 - 30_000;

fn key(user: &str, window: &str, bucket: Millis) -> CounterKey {
    common::tokens_key_in(user, window, bucket)
}

/// Adds `amount` of use to `key` (a bill of a ticket that never reserved).
fn bill(store: &RedisStore, id: &str, key: &CounterKey, amount: u64) {
    let settle = Settle {
        id: id.into(),
        ticket: id.into(),
        holds: Vec::new(),
        expiry_minute: expiry_minute(T0, 60_000),
        adds: vec![UsageAdd {
            key: key.clone(),
            amount,
            retain_until: T0 + 2 * 86_400_000,
        }],
        settled_until: T0 + 300_000,
    };
    block_on(store.settle(&settle, T0)).unwrap();
}

/// A reservation of `hold` on counter 0 (limit 1000), with `skipped` the rules of one source
/// passed over (counter 1, its amount) and, when given, counter 0's previous bucket with the
/// use the decision assumed there.
fn reserve(
    ticket: &str,
    skipped: Option<u64>,
    previous: Option<(&CounterKey, u64)>,
) -> KnownReserve {
    let chosen = key("alice", "day", DAY_START);
    let other = key("team", "day", DAY_START);
    KnownReserve {
        ticket: ticket.into(),
        counters: vec![chosen.clone(), other],
        previous: previous.iter().map(|(k, _)| ((*k).clone(), 0)).collect(),
        items: vec![ReserveItem {
            key: chosen,
            hold: 100,
            limit: Some(1_000),
            carried: 0,
            retain_until: T0 + 2 * 86_400_000,
        }],
        item_counters: vec![0],
        item_previous: vec![previous.map(|(_, assumed)| (0, assumed))],
        skipped: skipped
            .map(|amount| vec![vec![(1, amount, 0)]])
            .unwrap_or_default(),
        expiry_minute: expiry_minute(T0, 15 * 60_000),
    }
}

/// A store in the shared layout, or with slot groups (`grouped`).
fn store(server: &RedisServer, grouped: bool) -> RedisStore {
    match grouped {
        true => RedisStore::connect_grouped(&server.url(), "known", Duration::from_secs(1)),
        false => RedisStore::connect(&server.url(), "known"),
    }
    .unwrap()
}

fn a_reserve_answers_the_fresh_values_including_its_holds(grouped: bool) {
    let server = RedisServer::start();
    let store = store(&server, grouped);
    bill(&store, "b1", &key("alice", "day", DAY_START), 40);
    let answer = block_on(store.reserve_known(reserve("t1", None, None), T0, Fence::default()));
    let answer = answer.unwrap();
    assert_eq!(
        answer.outcome,
        KnownOutcome::Reserve(ReserveOutcome::Reserved)
    );
    assert_eq!(
        answer.counters,
        vec![
            CounterRead {
                used: 40,
                held: 100
            },
            CounterRead::default()
        ]
    );
    // The same ticket again places nothing and answers the same values.
    let again = block_on(store.reserve_known(reserve("t1", None, None), T0, Fence::default()));
    assert_eq!(
        again.unwrap().counters[0],
        CounterRead {
            used: 40,
            held: 100
        }
    );
}

fn a_conflict_places_nothing_and_answers_what_is_there(grouped: bool) {
    let server = RedisServer::start();
    let store = store(&server, grouped);
    bill(&store, "b1", &key("alice", "day", DAY_START), 950);
    let answer = block_on(store.reserve_known(reserve("t1", None, None), T0, Fence::default()));
    let answer = answer.unwrap();
    assert_eq!(
        answer.outcome,
        KnownOutcome::Reserve(ReserveOutcome::Conflict { item: 0 })
    );
    assert_eq!(answer.counters[0], CounterRead { used: 950, held: 0 });
}

fn a_source_passed_over_that_has_room_now_moves_the_decision(grouped: bool) {
    let server = RedisServer::start();
    let store = store(&server, grouped);
    // The team's rule (amount 500) has nothing used: it has room, so passing it over no
    // longer holds.
    let answer =
        block_on(store.reserve_known(reserve("t1", Some(500), None), T0, Fence::default()));
    let answer = answer.unwrap();
    assert_eq!(answer.outcome, KnownOutcome::Moved);
    assert_eq!(answer.counters[0], CounterRead::default(), "nothing placed");
    // Once the team's rule is used up, passing it over holds again.
    bill(&store, "b1", &key("team", "day", DAY_START), 500);
    let answer =
        block_on(store.reserve_known(reserve("t2", Some(500), None), T0, Fence::default()));
    let answer = answer.unwrap();
    assert_eq!(
        answer.outcome,
        KnownOutcome::Reserve(ReserveOutcome::Reserved)
    );
    assert_eq!(answer.counters[1], CounterRead { used: 500, held: 0 });
}

fn a_previous_bucket_that_grew_moves_the_decision(grouped: bool) {
    let server = RedisServer::start();
    let store = store(&server, grouped);
    let previous = key("alice", "10 minutes", T0 - 30_000 - 600_000);
    bill(&store, "b1", &previous, 300);
    let stale = reserve("t1", None, Some((&previous, 200)));
    let answer = block_on(store.reserve_known(stale, T0, Fence::default())).unwrap();
    assert_eq!(answer.outcome, KnownOutcome::Moved);
    assert_eq!(answer.previous, vec![300]);
    let fresh = reserve("t2", None, Some((&previous, 300)));
    let answer = block_on(store.reserve_known(fresh, T0, Fence::default())).unwrap();
    assert_eq!(
        answer.outcome,
        KnownOutcome::Reserve(ReserveOutcome::Reserved)
    );
}

/// Every case in both layouts.
macro_rules! layouts {
    ($($layout:ident: $grouped:expr),*) => {$(
    mod $layout {
        #[test]
        fn a_reserve_answers_the_fresh_values_including_its_holds() {
            super::super::a_reserve_answers_the_fresh_values_including_its_holds($grouped)
        }
        #[test]
        fn a_conflict_places_nothing_and_answers_what_is_there() {
            super::super::a_conflict_places_nothing_and_answers_what_is_there($grouped)
        }
        #[test]
        fn a_source_passed_over_that_has_room_now_moves_the_decision() {
            super::super::a_source_passed_over_that_has_room_now_moves_the_decision($grouped)
        }
        #[test]
        fn a_previous_bucket_that_grew_moves_the_decision() {
            super::super::a_previous_bucket_that_grew_moves_the_decision($grouped)
        }
    }
    )*};
}

mod layouts {
    layouts!(shared: false, grouped: true);
}

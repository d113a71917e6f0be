//! `reserve_known_carrying` on a real redis-server (docs/redis-internals.md,
//! "Settles ride with the next reservation"): queued settles and the next reservation in one
//! script. Each settle lands once by id, before the reservation (which counts what they gave back
//! and added), whatever the reservation's outcome.
#![cfg(feature = "redis")]

use crate::common;

use common::redis_server::RedisServer;
use std::time::Duration;

use futures::executor::block_on;
use usage_guard::internals::{
    expiry_minute, CounterKey, CounterRead, Fence, HoldRef, KnownOutcome, KnownReserve,
    ReserveFromKnown, ReserveItem, ReserveOutcome, Settle, SettleOutcome, UsageAdd,
};
use usage_guard::{CounterStore, Millis, RedisStore};

/// 2026-01-01T00:00:30Z.
const T0: Millis = 1_767_225_630_000;
const DAY_START: Millis = T0 - 30_000;

fn counter() -> CounterKey {
    common::tokens_key_in("alice", "day", DAY_START)
}

fn minute() -> i64 {
    expiry_minute(T0, 15 * 60_000)
}

/// A reservation of `hold` on the counter, limit 1,000.
fn reserve(ticket: &str, hold: u64) -> KnownReserve {
    KnownReserve {
        ticket: ticket.into(),
        counters: vec![counter()],
        previous: Vec::new(),
        items: vec![ReserveItem {
            key: counter(),
            hold,
            limit: Some(1_000),
            carried: 0,
            retain_until: T0 + 2 * 86_400_000,
        }],
        item_counters: vec![0],
        item_previous: vec![None],
        skipped: Vec::new(),
        expiry_minute: minute(),
    }
}

/// The bill of ticket `id`: gives back its hold of `held`, adds `used`.
fn bill(id: &str, held: u64, used: u64) -> Settle {
    Settle {
        id: id.into(),
        ticket: id.into(),
        holds: vec![HoldRef {
            key: counter(),
            amount: held,
        }],
        expiry_minute: minute(),
        adds: vec![UsageAdd {
            key: counter(),
            amount: used,
            retain_until: T0 + 2 * 86_400_000,
        }],
        settled_until: T0 + 300_000,
    }
}

/// A store in the shared layout, or with slot groups (`grouped`).
fn store(server: &RedisServer, grouped: bool) -> RedisStore {
    match grouped {
        true => RedisStore::connect_grouped(&server.url(), "carry", Duration::from_secs(1)),
        false => RedisStore::connect(&server.url(), "carry"),
    }
    .unwrap()
}

fn carrying(
    store: &RedisStore,
    reserve: KnownReserve,
    settles: &[Settle],
) -> (KnownOutcome, CounterRead, Vec<SettleOutcome>) {
    let (answer, settled) =
        block_on(store.reserve_known_carrying(reserve, settles, T0, Fence::default())).unwrap();
    let settled = settled.into_iter().map(Result::unwrap).collect();
    (answer.outcome, answer.counters[0], settled)
}

/// Reserves `hold` for `ticket` alone (nothing carried); it must be placed.
fn placed(store: &RedisStore, ticket: &str, hold: u64) {
    let answer = block_on(store.reserve_known(reserve(ticket, hold), T0, Fence::default()));
    assert_eq!(
        answer.unwrap().outcome,
        KnownOutcome::Reserve(ReserveOutcome::Reserved)
    );
}

fn a_carried_bill_lands_before_the_reservation_and_only_once(grouped: bool) {
    let server = RedisServer::start();
    let store = store(&server, grouped);
    placed(&store, "t1", 300);
    let (outcome, read, settled) = carrying(&store, reserve("t2", 200), &[bill("t1", 300, 120)]);
    assert_eq!(outcome, KnownOutcome::Reserve(ReserveOutcome::Reserved));
    assert_eq!(settled, vec![SettleOutcome::Settled]);
    // t1's hold is back and its use in; t2's hold is placed.
    assert_eq!(
        read,
        CounterRead {
            used: 120,
            held: 200
        }
    );
    // The same bill carried again (a retry) does nothing.
    let (_, read, settled) = carrying(&store, reserve("t3", 100), &[bill("t1", 300, 120)]);
    assert_eq!(settled, vec![SettleOutcome::AlreadySettled]);
    assert_eq!(
        read,
        CounterRead {
            used: 120,
            held: 300
        }
    );
}

fn a_reservation_that_does_not_fit_still_lands_its_carried_bills_in_order(grouped: bool) {
    let server = RedisServer::start();
    let store = store(&server, grouped);
    for ticket in ["a", "b"] {
        placed(&store, ticket, 400);
    }
    // A settle with nothing to do sits between the two: it answers in its place.
    let nothing = Settle {
        holds: Vec::new(),
        adds: Vec::new(),
        ..bill("c", 0, 0)
    };
    let bills = [bill("a", 400, 500), nothing, bill("b", 400, 450)];
    // 950 used after the bills: a hold of 100 no longer fits.
    let (outcome, read, settled) = carrying(&store, reserve("t", 100), &bills);
    assert_eq!(
        outcome,
        KnownOutcome::Reserve(ReserveOutcome::Conflict { item: 0 })
    );
    assert_eq!(settled, vec![SettleOutcome::Settled; 3]);
    assert_eq!(read, CounterRead { used: 950, held: 0 });
    // The same reservation with nothing carried answers the same values.
    let again = block_on(store.reserve_known(reserve("t", 100), T0, Fence::default())).unwrap();
    assert_eq!(again.counters[0], CounterRead { used: 950, held: 0 });
}

/// The fields of the counter's holds hash (the store's only `:h:` key), sorted, as
/// `name=value`.
fn holds_fields(server: &RedisServer) -> Vec<String> {
    let keys = server.cli(&["--scan", "--pattern", "*:h:*"]);
    let keys: Vec<&str> = keys.lines().collect();
    assert_eq!(keys.len(), 1, "one holds hash: {keys:?}");
    let flat = server.cli(&["HGETALL", keys[0]]);
    let flat: Vec<&str> = flat.lines().collect();
    let mut fields: Vec<String> = flat
        .chunks(2)
        .map(|f| format!("{}={}", f[0], f[1]))
        .collect();
    fields.sort();
    fields
}

/// A steady stream of calls leaves a holds field per minute its holds expire in, each given
/// back to zero. A zero of the reading call's own minute stays (its next hold there needs no
/// new time to live); a zero of another minute is deleted by the next reservation that reads
/// it, so it is not read by every call until its minute is over. Nothing counted changes.
fn a_hold_given_back_to_zero_goes_when_a_call_holds_in_another_minute(grouped: bool) {
    let server = RedisServer::start();
    let store = store(&server, grouped);
    placed(&store, "t1", 300);
    let settled = block_on(store.settle(&bill("t1", 300, 120), T0)).unwrap();
    assert_eq!(settled, SettleOutcome::Settled);
    let m1 = minute();
    assert_eq!(holds_fields(&server), vec![format!("r{m1}=0")]);
    // The same minute: its zero stays and takes the next hold.
    let same = block_on(store.reserve_known(reserve("t2", 50), T0, Fence::default())).unwrap();
    assert_eq!(
        same.counters[0],
        CounterRead {
            used: 120,
            held: 50
        }
    );
    assert_eq!(holds_fields(&server), vec![format!("r{m1}=50")]);
    let settled = block_on(store.settle(&bill("t2", 50, 10), T0)).unwrap();
    assert_eq!(settled, SettleOutcome::Settled);
    // Two minutes later a call holds in a later minute: the zero of m1 is gone.
    let later = T0 + 120_000;
    let m2 = expiry_minute(later, 15 * 60_000);
    assert_ne!(m1, m2);
    let third = KnownReserve {
        expiry_minute: m2,
        ..reserve("t3", 70)
    };
    let read = block_on(store.reserve_known(third, later, Fence::default())).unwrap();
    assert_eq!(
        read.counters[0],
        CounterRead {
            used: 130,
            held: 70
        }
    );
    assert_eq!(holds_fields(&server), vec![format!("r{m2}=70")]);
}

/// A carried bill gives its holds back as the bill sent alone would: a give-back larger than
/// the field (here cut to 100 under a hold of 300, as a partial loss would) takes it below
/// zero, so it goes before the reservation's hold is added (the 100 is not counted twice),
/// and the bill of a counter the reservation does not read gives its hold back all the same.
fn carried_give_backs_write_what_bills_sent_alone_write(grouped: bool) {
    let server = RedisServer::start();
    let store = store(&server, grouped);
    let bob = common::tokens_key_in("bob", "day", DAY_START);
    let bobs = KnownReserve {
        counters: vec![bob.clone()],
        items: vec![ReserveItem {
            key: bob.clone(),
            ..reserve("b1", 80).items[0].clone()
        }],
        ..reserve("b1", 80)
    };
    let answer = block_on(store.reserve_known(bobs, T0, Fence::default())).unwrap();
    assert_eq!(answer.counters[0], CounterRead { used: 0, held: 80 });
    placed(&store, "t1", 300);
    let field = format!("r{}", minute());
    let alices = server.cli(&["--scan", "--pattern", "*:h:*alice*"]);
    assert_eq!(server.cli(&["HSET", &alices, &field, "100"]), "0");
    let bobs_bill = Settle {
        holds: vec![HoldRef {
            key: bob.clone(),
            amount: 80,
        }],
        adds: vec![UsageAdd {
            key: bob.clone(),
            amount: 30,
            retain_until: T0 + 2 * 86_400_000,
        }],
        ..bill("b1", 0, 0)
    };
    let (outcome, read, settled) = carrying(
        &store,
        reserve("t2", 200),
        &[bill("t1", 300, 120), bobs_bill],
    );
    assert_eq!(outcome, KnownOutcome::Reserve(ReserveOutcome::Reserved));
    assert_eq!(settled, vec![SettleOutcome::Settled; 2]);
    assert_eq!(
        read,
        CounterRead {
            used: 120,
            held: 200
        }
    );
    assert_eq!(server.cli(&["HGET", &alices, &field]), "200");
    let bob_now = block_on(store.read(vec![bob], T0)).unwrap();
    assert_eq!(bob_now[0], CounterRead { used: 30, held: 0 });
    let bobs_holds = server.cli(&["--scan", "--pattern", "*:h:*bob*"]);
    assert_eq!(server.cli(&["HGET", &bobs_holds, &field]), "0");
}

/// Every case in both layouts.
macro_rules! layouts {
    ($($layout:ident: $grouped:expr),*) => {$(
    mod $layout {
        #[test]
        fn a_carried_bill_lands_before_the_reservation_and_only_once() {
            super::super::a_carried_bill_lands_before_the_reservation_and_only_once($grouped)
        }
        #[test]
        fn a_hold_given_back_to_zero_goes_when_a_call_holds_in_another_minute() {
            super::super::a_hold_given_back_to_zero_goes_when_a_call_holds_in_another_minute($grouped)
        }
        #[test]
        fn carried_give_backs_write_what_bills_sent_alone_write() {
            super::super::carried_give_backs_write_what_bills_sent_alone_write($grouped)
        }
        #[test]
        fn a_reservation_that_does_not_fit_still_lands_its_carried_bills_in_order() {
            super::super::a_reservation_that_does_not_fit_still_lands_its_carried_bills_in_order($grouped)
        }
    }
    )*};
}

mod layouts {
    layouts!(shared: false, grouped: true);
}

//! The cases of the store suite (see store_redis.rs); each takes the store kind to run on.

#![allow(dead_code)]

use std::sync::Arc;

use std::sync::atomic::{AtomicU64, Ordering};

use futures::executor::block_on;
use usage_guard::internals::{
    expiry_minute, CounterKey, CounterRead, HoldRef, ReserveItem, ReserveOutcome, Settle,
    SettleOutcome, UsageAdd,
};
use usage_guard::{CounterId, Scope};
use usage_guard::{Metric, Millis, Window};

use super::{fixture, Kind};

/// 2026-01-01T00:00:30Z.
pub const T0: Millis = 1_767_225_630_000;
pub const HOLD_MS: i64 = 15 * 60_000;

pub fn counter(user: &str, window: Window, bucket: Millis) -> CounterKey {
    crate::common::tokens_key(user, window, bucket)
}

pub fn day(user: &str) -> CounterKey {
    counter(user, "day".parse::<Window>().unwrap(), T0 - 30_000)
}

pub fn item(key: &CounterKey, hold: u64, limit: Option<u64>, carried: u64) -> ReserveItem {
    ReserveItem {
        key: key.clone(),
        hold,
        limit,
        carried,
        retain_until: T0 + 2 * 86_400_000,
    }
}

pub fn add(key: &CounterKey, amount: u64) -> UsageAdd {
    UsageAdd {
        key: key.clone(),
        amount,
        retain_until: T0 + 2 * 86_400_000,
    }
}

/// A ticket id not used before in this process.
pub fn tid() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("t-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A whole settle of ticket `id`: gives back `holds` (under minute `m`) and adds `adds`.
pub fn whole(id: &str, holds: Vec<HoldRef>, m: i64, adds: Vec<UsageAdd>) -> Settle {
    Settle {
        id: id.to_string(),
        ticket: id.to_string(),
        holds,
        expiry_minute: m,
        adds,
        settled_until: m * 60_000 + HOLD_MS,
    }
}

/// A settle that only adds use, under a new ticket id.
pub fn adds_only(m: i64, adds: Vec<UsageAdd>) -> Settle {
    whole(&tid(), Vec::new(), m, adds)
}

pub fn hold(key: &CounterKey, amount: u64) -> HoldRef {
    HoldRef {
        key: key.clone(),
        amount,
    }
}

pub fn read(
    store: &dyn usage_guard::CounterStore,
    keys: &[CounterKey],
    now: Millis,
) -> Vec<CounterRead> {
    block_on(store.read(keys.to_vec(), now)).expect("read")
}

pub fn rd(used: u64, held: u64) -> CounterRead {
    CounterRead { used, held }
}

pub fn reserve_is_all_or_none(kind: Kind) {
    let fx = fixture(kind, "all-or-none");
    let (a, b) = (day("a"), day("b"));
    let m = expiry_minute(T0, HOLD_MS);
    let s = fx.store.as_ref();
    let out = block_on(s.reserve(
        tid(),
        vec![item(&a, 60, Some(100), 0), item(&b, 60, Some(50), 0)],
        m,
        T0,
    ));
    assert_eq!(out.unwrap(), ReserveOutcome::Conflict { item: 1 });
    assert_eq!(
        read(s, &[a.clone(), b.clone()], T0),
        vec![rd(0, 0), rd(0, 0)]
    );
    let out = block_on(s.reserve(
        tid(),
        vec![item(&a, 60, Some(100), 0), item(&b, 40, None, 0)],
        m,
        T0,
    ));
    assert_eq!(out.unwrap(), ReserveOutcome::Reserved);
    assert_eq!(
        read(s, &[a.clone(), b.clone()], T0),
        vec![rd(0, 60), rd(0, 40)]
    );
    // The first item now conflicts; the second (which fits) is not placed either.
    let out = block_on(s.reserve(
        tid(),
        vec![item(&a, 41, Some(100), 0), item(&b, 1, Some(50), 0)],
        m,
        T0,
    ));
    assert_eq!(out.unwrap(), ReserveOutcome::Conflict { item: 0 });
    assert_eq!(read(s, &[a, b], T0), vec![rd(0, 60), rd(0, 40)]);
}

pub fn limits_are_checked_at_their_edges(kind: Kind) {
    let fx = fixture(kind, "edges");
    let a = day("edge");
    let m = expiry_minute(T0, HOLD_MS);
    let s = fx.store.as_ref();
    block_on(s.settle(&adds_only(m, vec![add(&a, 30)]), T0)).unwrap();
    let r = |hold| block_on(s.reserve(tid(), vec![item(&a, hold, Some(100), 0)], m, T0)).unwrap();
    assert_eq!(r(71), ReserveOutcome::Conflict { item: 0 });
    assert_eq!(
        r(70),
        ReserveOutcome::Reserved,
        "counted + hold == limit fits"
    );
    assert_eq!(
        r(0),
        ReserveOutcome::Conflict { item: 0 },
        "nothing left refuses even 0"
    );
    assert_eq!(read(s, &[a], T0), vec![rd(30, 70)]);
}

pub fn carried_counts_against_the_limit(kind: Kind) {
    let fx = fixture(kind, "carried");
    let minute = "hour".parse::<Window>().unwrap();
    let cur = counter("slide", minute, T0 - 30_000);
    let m = expiry_minute(T0, HOLD_MS);
    let s = fx.store.as_ref();
    block_on(s.settle(&adds_only(m, vec![add(&cur, 10)]), T0)).unwrap();
    let r = |hold, carried| {
        block_on(s.reserve(tid(), vec![item(&cur, hold, Some(100), carried)], m, T0)).unwrap()
    };
    assert_eq!(r(31, 60), ReserveOutcome::Conflict { item: 0 });
    assert_eq!(r(1, 90), ReserveOutcome::Conflict { item: 0 });
    assert_eq!(r(30, 60), ReserveOutcome::Reserved);
    assert_eq!(
        read(s, &[cur], T0),
        vec![rd(10, 30)],
        "carried is never stored"
    );
}

pub fn holds_expire_by_minute(kind: Kind) {
    let fx = fixture(kind, "expiry");
    let a = day("exp");
    let s = fx.store.as_ref();
    let m1 = expiry_minute(T0, HOLD_MS);
    let later = T0 + 5 * 60_000;
    let m2 = expiry_minute(later, HOLD_MS);
    assert!(m2 > m1);
    block_on(s.reserve(tid(), vec![item(&a, 40, Some(100), 0)], m1, T0)).unwrap();
    block_on(s.reserve(tid(), vec![item(&a, 50, Some(100), 0)], m2, later)).unwrap();
    assert_eq!(
        read(s, std::slice::from_ref(&a), m1 * 60_000 - 1),
        vec![rd(0, 90)]
    );
    assert_eq!(
        read(s, std::slice::from_ref(&a), m1 * 60_000),
        vec![rd(0, 50)],
        "first minute expired"
    );
    let out = block_on(s.reserve(tid(), vec![item(&a, 50, Some(100), 0)], m2, m1 * 60_000));
    assert_eq!(
        out.unwrap(),
        ReserveOutcome::Reserved,
        "expired holds do not count"
    );
    assert_eq!(
        read(s, std::slice::from_ref(&a), m2 * 60_000),
        vec![rd(0, 0)]
    );
}

pub fn settle_gives_back_and_never_goes_negative(kind: Kind) {
    let fx = fixture(kind, "settle");
    let (a, b) = (day("s1"), day("s2"));
    let s = fx.store.as_ref();
    let m = expiry_minute(T0, HOLD_MS);
    let t = tid();
    block_on(s.reserve(
        t.clone(),
        vec![item(&a, 50, Some(100), 0), item(&b, 50, None, 0)],
        m,
        T0,
    ))
    .unwrap();
    let holds = vec![hold(&a, 50), hold(&b, 50)];
    let adds = vec![add(&a, 30), add(&b, 30)];
    let out = block_on(s.settle(&whole(&t, holds.clone(), m, adds.clone()), T0 + 1));
    assert_eq!(out.unwrap(), SettleOutcome::Settled);
    assert_eq!(
        read(s, &[a.clone(), b.clone()], T0 + 1),
        vec![rd(30, 0), rd(30, 0)]
    );
    // Settling the same ticket again does nothing: use is added once.
    let out = block_on(s.settle(&whole(&t, holds, m, adds), T0 + 2));
    assert_eq!(out.unwrap(), SettleOutcome::AlreadySettled);
    assert_eq!(
        read(s, &[a.clone(), b.clone()], T0 + 2),
        vec![rd(30, 0), rd(30, 0)]
    );
    // A hold bigger than what is held in its minute empties it, no further.
    let t2 = tid();
    block_on(s.reserve(t2.clone(), vec![item(&a, 20, None, 0)], m, T0 + 3)).unwrap();
    block_on(s.settle(&whole(&t2, vec![hold(&a, 1_000)], m, vec![]), T0 + 4)).unwrap();
    assert_eq!(read(s, std::slice::from_ref(&a), T0 + 4), vec![rd(30, 0)]);
    // A hold in another minute is untouched by settling this one.
    let t3 = tid();
    block_on(s.reserve(t3.clone(), vec![item(&a, 20, None, 0)], m + 1, T0 + 5)).unwrap();
    block_on(s.settle(&whole(&t3, vec![hold(&a, 20)], m, vec![]), T0 + 6)).unwrap();
    assert_eq!(read(s, &[a], T0 + 6), vec![rd(30, 20)]);
}

pub fn settle_after_expiry_only_adds(kind: Kind) {
    let fx = fixture(kind, "late-settle");
    let a = day("late");
    let s = fx.store.as_ref();
    let m = expiry_minute(T0, HOLD_MS);
    let t = tid();
    block_on(s.reserve(t.clone(), vec![item(&a, 50, Some(100), 0)], m, T0)).unwrap();
    let late = m * 60_000 + 5_000;
    let m_late = expiry_minute(late, HOLD_MS);
    block_on(s.reserve(tid(), vec![item(&a, 25, None, 0)], m_late, late)).unwrap();
    block_on(s.settle(&whole(&t, vec![hold(&a, 50)], m, vec![add(&a, 45)]), late)).unwrap();
    assert_eq!(
        read(s, &[a], late),
        vec![rd(45, 25)],
        "a newer minute's hold is kept"
    );
}

/// Releasing a ticket whose reservation never landed gives back nothing (another ticket's
/// holds stay), and its reservation landing afterwards places nothing.
pub fn release_of_a_reserve_that_never_landed_is_a_no_op(kind: Kind) {
    let fx = fixture(kind, "never-landed");
    let a = day("nl");
    let s = fx.store.as_ref();
    let m = expiry_minute(T0, HOLD_MS);
    block_on(s.reserve(tid(), vec![item(&a, 30, Some(100), 0)], m, T0)).unwrap();
    let lost = tid();
    let out = block_on(s.settle(&whole(&lost, vec![hold(&a, 30)], m, vec![]), T0 + 1));
    assert_eq!(out.unwrap(), SettleOutcome::Settled);
    assert_eq!(read(s, std::slice::from_ref(&a), T0 + 1), vec![rd(0, 30)]);
    let late = block_on(s.reserve(lost, vec![item(&a, 30, Some(100), 0)], m, T0 + 2));
    assert_eq!(late.unwrap(), ReserveOutcome::Settled);
    assert_eq!(read(s, &[a], T0 + 2), vec![rd(0, 30)], "nothing placed");
}

/// A reservation arriving after its ticket was billed places nothing; one arriving twice
/// places its holds once.
pub fn reserve_after_settle_places_nothing(kind: Kind) {
    let fx = fixture(kind, "after-settle");
    let a = day("as");
    let s = fx.store.as_ref();
    let m = expiry_minute(T0, HOLD_MS);
    let t = tid();
    let r = |now| block_on(s.reserve(t.clone(), vec![item(&a, 40, Some(100), 0)], m, now));
    assert_eq!(r(T0).unwrap(), ReserveOutcome::Reserved);
    assert_eq!(
        r(T0 + 1).unwrap(),
        ReserveOutcome::Reserved,
        "not placed twice"
    );
    assert_eq!(read(s, std::slice::from_ref(&a), T0 + 1), vec![rd(0, 40)]);
    block_on(s.settle(&whole(&t, vec![hold(&a, 40)], m, vec![add(&a, 10)]), T0 + 2)).unwrap();
    assert_eq!(r(T0 + 3).unwrap(), ReserveOutcome::Settled);
    assert_eq!(read(s, &[a], T0 + 3), vec![rd(10, 0)]);
}

/// A bill retried (its first answer lost) counts once, also when the retry comes after the
/// holds expired; the settled mark outlives the holds.
pub fn bill_twice_counts_once(kind: Kind) {
    let fx = fixture(kind, "twice");
    let a = day("tw");
    let s = fx.store.as_ref();
    let m = expiry_minute(T0, HOLD_MS);
    let t = tid();
    block_on(s.reserve(t.clone(), vec![item(&a, 40, Some(100), 0)], m, T0)).unwrap();
    let bill = whole(&t, vec![hold(&a, 40)], m, vec![add(&a, 25)]);
    let first = block_on(s.settle(&bill, T0 + 1)).unwrap();
    let again = block_on(s.settle(&bill, T0 + 2)).unwrap();
    let past_hold = m * 60_000 + 60_000;
    let late = block_on(s.settle(&bill, past_hold)).unwrap();
    assert_eq!(first, SettleOutcome::Settled);
    assert_eq!(
        (again, late),
        (SettleOutcome::AlreadySettled, SettleOutcome::AlreadySettled)
    );
    assert_eq!(read(s, &[a], past_hold), vec![rd(25, 0)]);
}

/// A hold counts in every bucket of its counter until it is settled or expires: the next
/// buckets (sliding minutes, the next calendar day) read it in full.
pub fn holds_count_across_buckets(kind: Kind) {
    let fx = fixture(kind, "buckets");
    let s = fx.store.as_ref();
    let minute = "minute".parse::<Window>().unwrap();
    let start = T0 - 30_000;
    let at = |offset: i64| counter("bk", minute, start + offset);
    let m = expiry_minute(T0, HOLD_MS);
    let t = tid();
    block_on(s.reserve(t.clone(), vec![item(&at(0), 7, Some(10), 0)], m, T0)).unwrap();
    for n in [1, 2, 5, 14] {
        let now = start + n * 60_000;
        assert_eq!(
            read(s, &[at(n * 60_000)], now),
            vec![rd(0, 7)],
            "minute {n}"
        );
        let out = block_on(s.reserve(tid(), vec![item(&at(n * 60_000), 4, Some(10), 0)], m, now));
        assert_eq!(
            out.unwrap(),
            ReserveOutcome::Conflict { item: 0 },
            "minute {n}"
        );
    }
    let now = start + 20 * 60_000;
    assert_eq!(read(s, &[at(20 * 60_000)], now), vec![rd(0, 0)], "expired");
    // A day counter: a hold placed just before midnight counts the next day.
    let day_window = "day".parse::<Window>().unwrap();
    let midnight = (T0 / 86_400_000 + 1) * 86_400_000;
    let today = counter("edge", day_window, midnight - 86_400_000);
    let tomorrow = counter("edge", day_window, midnight);
    let late = midnight - 1_000;
    let m = expiry_minute(late, HOLD_MS);
    block_on(s.reserve(tid(), vec![item(&today, 9, Some(10), 0)], m, late)).unwrap();
    assert_eq!(
        read(s, std::slice::from_ref(&tomorrow), midnight + 1_000),
        vec![rd(0, 9)]
    );
    let out = block_on(s.reserve(
        tid(),
        vec![item(&tomorrow, 2, Some(10), 0)],
        m,
        midnight + 1_000,
    ));
    assert_eq!(out.unwrap(), ReserveOutcome::Conflict { item: 0 });
}

pub fn counters_are_gone_after_retention(kind: Kind) {
    let fx = fixture(kind, "retention");
    let (a, other) = (day("ret"), day("other"));
    let s = fx.store.as_ref();
    let m = expiry_minute(T0, HOLD_MS);
    let keep = T0 + 3_600_000;
    let usage = UsageAdd {
        key: a.clone(),
        amount: 7,
        retain_until: keep,
    };
    block_on(s.settle(&adds_only(m, vec![usage]), T0)).unwrap();
    assert_eq!(read(s, std::slice::from_ref(&a), keep - 1), vec![rd(7, 0)]);
    let after = keep + 120_000;
    // Any write lets a store sweep what it no longer keeps.
    block_on(s.settle(&adds_only(m, vec![add(&other, 1)]), after)).unwrap();
    block_on(s.reserve(
        tid(),
        vec![item(&other, 1, None, 0)],
        expiry_minute(after, HOLD_MS),
        after,
    ))
    .unwrap();
    assert_eq!(read(s, std::slice::from_ref(&a), after), vec![rd(0, 0)]);
    if let Some(redis) = &fx.redis {
        // The key itself is gone from Redis, and the live one expires by itself.
        let port = match (&fx.server, &fx.cluster) {
            (Some(server), _) => server.port,
            (None, Some(cluster)) => cluster_port_of(cluster, &redis.redis_key(&other)),
            _ => unreachable!(),
        };
        let exists = crate::common::redis_server::cli(port, &["EXISTS", &redis.redis_key(&a)]);
        assert_eq!(exists, "0");
        let pttl: i64 = crate::common::redis_server::cli(port, &["PTTL", &redis.redis_key(&other)])
            .parse()
            .unwrap();
        let expected = 2 * 86_400_000 + T0 - after;
        assert!(
            pttl > expected - 60_000 && pttl <= expected,
            "pttl {pttl} vs {expected}"
        );
    }
}

fn cluster_port_of(cluster: &crate::common::redis_server::RedisCluster, key: &str) -> u16 {
    cluster
        .nodes
        .iter()
        .find(|n| crate::common::redis_server::cli(n.port, &["EXISTS", key]) == "1")
        .map(|n| n.port)
        .expect("some node holds the key")
}

pub fn weird_ids_never_collide(kind: Kind) {
    let fx = fixture(kind, "weird");
    let s = fx.store.as_ref();
    let long = "x".repeat(10_000);
    let ids = [
        "a:b",
        "a%3Ab",
        "a",
        "b",
        "{x}",
        "}",
        "{",
        "a b",
        "a_b",
        "ü",
        "%C3%BC",
        "",
        "-",
        "%",
        "%2D",
        "ug}:c:pm",
        "{t-weird}:c:pm",
        "\n",
        "\u{1F600}",
        long.as_str(),
    ];
    let keys: Vec<CounterKey> = ids.iter().map(|id| day(id)).collect();
    let m = expiry_minute(T0, HOLD_MS);
    let adds = keys
        .iter()
        .enumerate()
        .map(|(i, k)| add(k, i as u64 + 1))
        .collect();
    block_on(s.settle(&adds_only(m, adds), T0)).unwrap();
    let expected: Vec<CounterRead> = (0..ids.len()).map(|i| rd(i as u64 + 1, 0)).collect();
    assert_eq!(read(s, &keys, T0), expected);
    let team = CounterKey {
        id: Arc::new(CounterId::new(
            Scope::PersonModel,
            None,
            Some(Arc::from("a")),
            Some(Arc::from("gpt-5")),
            Metric::Tokens,
            keys[2].id.window,
        )),
        bucket: keys[2].bucket,
    };
    assert_eq!(
        read(s, &[team], T0),
        vec![rd(0, 0)],
        "user a and team a differ"
    );
    if let Some(redis) = &fx.redis {
        let grouped = matches!(kind, Kind::GroupedRedis | Kind::GroupedCluster);
        let mut tags = std::collections::HashSet::new();
        for key in &keys {
            let k = redis.redis_key(key);
            let head = if grouped {
                "{t-weird:2:u:"
            } else {
                "{t-weird}:c:"
            };
            assert!(k.starts_with(head), "{k}");
            assert!(!k[1..].contains('{') && k.matches('}').count() == 1, "{k}");
            tags.insert(k[..=k.find('}').unwrap()].to_string());
        }
        // With slot groups each user is a group of its own; else one tag for all.
        assert_eq!(tags.len(), if grouped { ids.len() } else { 1 });
    }
}

pub fn concurrent_reservations_never_exceed_the_limit(kind: Kind) {
    let fx = fixture(kind, "concurrent");
    let a = day("race");
    let m = expiry_minute(T0, HOLD_MS);
    let store = fx.store.clone();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            let a = a.clone();
            std::thread::spawn(move || {
                (0..40)
                    .filter(|_| {
                        let out =
                            block_on(store.reserve(tid(), vec![item(&a, 3, Some(100), 0)], m, T0));
                        out.unwrap() == ReserveOutcome::Reserved
                    })
                    .count()
            })
        })
        .collect();
    let won: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(won, 33, "exactly floor(100 / 3) holds fit");
    assert_eq!(read(store.as_ref(), &[a], T0), vec![rd(0, 99)]);
}

pub fn empty_operations_are_no_ops(kind: Kind) {
    let fx = fixture(kind, "empty");
    let s = fx.store.as_ref();
    assert_eq!(read(s, &[], T0), vec![]);
    assert_eq!(
        block_on(s.reserve(tid(), vec![], 1, T0)).unwrap(),
        ReserveOutcome::Reserved
    );
    block_on(s.settle(&adds_only(1, vec![]), T0)).unwrap();
    assert_eq!(read(s, &[day("none")], T0), vec![rd(0, 0)]);
}

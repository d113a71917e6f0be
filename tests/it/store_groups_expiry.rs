//! Slot groups that come and go (docs/redis.md, "Slot groups", "How long a group is kept"):
//! a group's entry in the store's list and its copy of the epoch last as long as its calls
//! need, so a churning user base does not grow them for ever, and the fence's promise holds
//! meanwhile: a copy lost while its entry lasts is a loss; a copy gone after it is a new
//! group.
#![cfg(feature = "redis")]

use futures::executor::block_on;
use usage_guard::internals::{
    expiry_minute, CounterKey, Fence, FenceAnswer, Fencing, ReserveItem, ReserveOutcome,
    StoreFuture,
};
use usage_guard::{Millis, RedisStore};

use crate::common::redis_server::{cli, RedisCluster};
use crate::common::tokens_key_in;
use crate::store_groups::{master_of, store, HOLD_MS, T0};

const DAY: Millis = 86_400_000;
/// The start of T0's day (2026-01-01).
const B0: Millis = T0 - 30_000;

/// `user`'s daily tokens counter in the bucket of `day` days after T0's.
fn day_of(user: &str, day: i64) -> CounterKey {
    tokens_key_in(user, "day", B0 + day * DAY)
}

/// A fenced reservation of `hold` on each of `keys` (limit `limit`) under `generation` at
/// `now`, each kept as a daily counter is (a day past its bucket's end).
pub(crate) fn fenced_at<'a>(
    store: &'a RedisStore,
    ticket: &str,
    keys: &[&CounterKey],
    (hold, limit): (u64, u64),
    generation: &str,
    now: Millis,
) -> StoreFuture<'a, ReserveOutcome> {
    let items: Vec<ReserveItem> = keys
        .iter()
        .map(|k| ReserveItem {
            key: (*k).clone(),
            hold,
            limit: Some(limit),
            carried: 0,
            retain_until: k.bucket + 2 * DAY,
        })
        .collect();
    let fence = Fence {
        generation: generation.into(),
        fenced: vec![true; items.len()],
    };
    let m = expiry_minute(now, HOLD_MS);
    store.reserve_fenced(ticket.into(), items, m, now, fence)
}

/// A group's tag, its copy of the epoch and the store's list of groups.
struct Places {
    tag: String,
    copy: String,
    list: String,
}

fn places(s: &RedisStore, prefix: &str, key: &CounterKey) -> Places {
    let counter = s.redis_key(key);
    let tag = counter[..=counter.find('}').unwrap()].to_string();
    Places {
        copy: format!("{tag}:epoch"),
        tag,
        list: format!("{{{prefix}:2}}:groups"),
    }
}

/// The group's entry in the list: its body and until when it lasts (None: no entry).
fn entry(cluster: &RedisCluster, p: &Places) -> Option<(String, Millis)> {
    let raw = cli(master_of(cluster, &p.list), &["HGET", &p.list, &p.tag]);
    let raw = raw.trim();
    let (body, until) = raw.split_once('@')?;
    Some((body.to_string(), until.parse().unwrap()))
}

/// The copy's `h` and how long Redis keeps it (ms).
fn copy(cluster: &RedisCluster, p: &Places) -> (Option<Millis>, i64) {
    let master = master_of(cluster, &p.copy);
    let h = cli(master, &["HGET", &p.copy, "h"]).trim().parse().ok();
    let ttl = cli(master, &["PTTL", &p.copy]).trim().parse().unwrap();
    (h, ttl)
}

/// A reservation lists its group until past the retain-until of the bucket after its own
/// and a day more; the group's copy of the epoch keeps that time as `h` and lasts half a day
/// longer in Redis (so a copy never expires before its entry).
#[test]
fn a_groups_entry_lasts_past_what_its_calls_need_and_its_copy_outlasts_the_entry() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "exp-need");
    assert!(block_on(s.set_epoch("g1".into(), T0, None, true, 0)).unwrap());
    let key = day_of("alice", 0);
    let outcome = block_on(fenced_at(&s, "t1", &[&key], (1, 1_000), "g1", T0)).unwrap();
    assert_eq!(outcome, ReserveOutcome::Reserved);
    let p = places(&s, "exp-need", &key);
    // kept until B0 + 2 days, a span of 2 days from the bucket's start: what the call needs
    // is twice that from now and 4 days of slack; renewed 2 days past it
    let (body, until) = entry(&cluster, &p).expect("listed with a time");
    assert_eq!((body.as_str(), until), ("g1", T0 + 10 * DAY));
    let (h, ttl) = copy(&cluster, &p);
    assert_eq!(h, Some(until));
    let grace = DAY / 2;
    let lasts = until + grace - T0;
    assert!(
        ttl <= lasts && ttl > lasts - 60_000,
        "PTTL {ttl}, expected about {lasts}"
    );
}

/// While the entry lasts, a copy that is gone is a loss (the guard recovers); once its time
/// is over, the group's counters are past their retention too, and a copy gone (as Redis
/// expires it half a day later) is a new group: joined, not a recovery.
#[test]
fn a_copy_gone_is_a_loss_while_its_entry_lasts_and_a_new_group_after() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "exp-end");
    assert!(block_on(s.set_epoch("g1".into(), T0, None, true, 0)).unwrap());
    let key = day_of("bob", 0);
    let outcome = block_on(fenced_at(&s, "t1", &[&key], (1, 1_000), "g1", T0)).unwrap();
    assert_eq!(outcome, ReserveOutcome::Reserved);
    let p = places(&s, "exp-end", &key);
    let (_, until) = entry(&cluster, &p).unwrap();
    let master = master_of(&cluster, &p.copy);
    cli(master, &["DEL", &p.copy]);
    // a minute before the entry ends: lost (the counters of the day after are kept till then)
    let before = until - 60_000;
    let late = day_of("bob", (before - B0) / DAY);
    let outcome = block_on(fenced_at(&s, "t2", &[&late], (1, 1_000), "g1", before)).unwrap();
    assert_eq!(outcome, ReserveOutcome::Fenced(FenceAnswer::Untrusted));
    // a minute after: a new group, joined and listed again
    let after = until + 60_000;
    let late = day_of("bob", (after - B0) / DAY);
    let outcome = block_on(fenced_at(&s, "t3", &[&late], (1, 1_000), "g1", after)).unwrap();
    assert_eq!(outcome, ReserveOutcome::Reserved);
    let (body, again) = entry(&cluster, &p).unwrap();
    assert_eq!(body, "g1");
    assert!(again > after, "listed until {again}, at {after}");
    assert_eq!(copy(&cluster, &p).0, Some(again));
}

/// A group in use is renewed before its entry ends: when what a call needs passes the copy's
/// `h`, the reserve answers -8 and the guard extends the entry, then the copy, and reserves
/// again (one answer to the caller: reserved).
#[test]
fn a_group_in_use_is_renewed_before_its_entry_ends() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "exp-renew");
    assert!(block_on(s.set_epoch("g1".into(), T0, None, true, 0)).unwrap());
    let p = places(&s, "exp-renew", &day_of("carol", 0));
    let mut untils = Vec::new();
    for d in 0..8 {
        let key = day_of("carol", d);
        let now = T0 + d * DAY;
        let ticket = format!("t{d}");
        let outcome = block_on(fenced_at(&s, &ticket, &[&key], (1, 1_000), "g1", now)).unwrap();
        assert_eq!(outcome, ReserveOutcome::Reserved, "day {d}");
        let (body, until) = entry(&cluster, &p).unwrap();
        assert_eq!(body, "g1");
        // never short of what this day's calls need (the next bucket's retention and a day)
        assert!(until >= B0 + (d + 5) * DAY, "day {d}: until {until}");
        assert_eq!(copy(&cluster, &p).0, Some(until), "day {d}");
        untils.push((until - B0) / DAY);
    }
    // renewed when the need (moving with time) passes the entry's time: every third call a
    // day apart, not at every call
    assert_eq!(untils, [10, 10, 10, 13, 13, 13, 16, 16]);
}

/// Entries whose time is over are dropped by later listings (a few at each), so the list of
/// a churning user base stays the size of the groups in use.
#[test]
fn entries_whose_time_is_over_are_dropped_by_later_listings() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "exp-prune");
    assert!(block_on(s.set_epoch("g1".into(), T0, None, true, 0)).unwrap());
    let list = "{exp-prune:2}:groups";
    let size = || -> usize {
        let n = cli(master_of(&cluster, list), &["HLEN", list]);
        n.trim().parse().unwrap()
    };
    for i in 0..40 {
        let key = day_of(&format!("old-{i}"), 0);
        let outcome = block_on(fenced_at(
            &s,
            &format!("o{i}"),
            &[&key],
            (1, 1_000),
            "g1",
            T0,
        ));
        assert_eq!(outcome.unwrap(), ReserveOutcome::Reserved);
    }
    assert_eq!(size(), 40);
    // Eleven days on, new people come: each listing drops the old entries it passes over.
    let later = T0 + 11 * DAY;
    for i in 0..10 {
        let key = day_of(&format!("new-{i}"), 11);
        let ticket = format!("n{i}");
        let outcome = block_on(fenced_at(&s, &ticket, &[&key], (1, 1_000), "g1", later));
        assert_eq!(outcome.unwrap(), ReserveOutcome::Reserved);
    }
    assert_eq!(size(), 10, "only the new people's entries are left");
}

/// A recovery looks only at the entries that last: a group whose time is over is neither
/// looked at nor marked (its counters are past their retention; a copy of it lost later is a
/// new group), while a group in use is marked as before.
#[test]
fn a_recovery_marks_no_group_whose_time_is_over() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "exp-marks");
    assert!(block_on(s.set_epoch("g1".into(), T0, None, true, 0)).unwrap());
    let (idle, busy) = (day_of("idle", 0), day_of("busy", 11));
    let outcome = block_on(fenced_at(&s, "i", &[&idle], (1, 1_000), "g1", T0)).unwrap();
    assert_eq!(outcome, ReserveOutcome::Reserved);
    let later = T0 + 11 * DAY;
    let outcome = block_on(fenced_at(&s, "b", &[&busy], (1, 1_000), "g1", later)).unwrap();
    assert_eq!(outcome, ReserveOutcome::Reserved);
    let (p_idle, p_busy) = (
        places(&s, "exp-marks", &idle),
        places(&s, "exp-marks", &busy),
    );
    // (the busy person's listing may have pruned the idle one's entry: put it back as it was)
    let idle_until = T0 + 10 * DAY;
    let list = &p_idle.list;
    let was = format!("g1@{idle_until}");
    cli(
        master_of(&cluster, list),
        &["HSET", list, &p_idle.tag, &was],
    );
    assert!(block_on(s.set_epoch("g2".into(), later, None, false, 0)).unwrap());
    assert_eq!(entry(&cluster, &p_idle), Some(("g1".into(), idle_until)));
    let (body, _) = entry(&cluster, &p_busy).unwrap();
    assert_eq!(body, "~g2|g1");
}

/// A recovery's marks write back no entry dropped between its look and its marks (the entry's
/// time was over: a mark without a time would last for ever, and read the group's expired
/// copy as a loss), and keep the time of those still there.
#[test]
fn a_recovery_writes_back_no_entry_dropped_since_its_look() {
    let server = crate::common::redis_server::RedisServer::start();
    let script = include_str!("../../src/guard/store/lua/groups.lua");
    let (epoch, list, lock) = ("{m:2}:epoch", "{m:2}:groups", "{m:2}:epoch:lock");
    server.cli(&["HSET", epoch, "g", "g1"]);
    server.cli(&["HSET", list, "{m:2:u:here}", "g1@999"]);
    let marked = server.cli(&[
        "EVAL",
        script,
        "3",
        epoch,
        list,
        lock,
        "held",
        "g2",
        "",
        "{m:2:u:gone}",
        "{m:2:u:here}",
    ]);
    assert_eq!(marked.trim(), "1");
    assert_eq!(
        server.cli(&["HGET", list, "{m:2:u:here}"]).trim(),
        "~g2|g1@999"
    );
    assert_eq!(server.cli(&["HEXISTS", list, "{m:2:u:gone}"]).trim(), "0");
}

/// A renewal between a recovery's marks and its new epoch keeps the mark (it only raises the
/// time): the group's copy lost after that recovery is still a loss under its generation.
#[test]
fn a_renewal_keeps_a_recoverys_mark() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "exp-keep-mark");
    assert!(block_on(s.set_epoch("g1".into(), T0, None, true, 0)).unwrap());
    let key = day_of("dora", 0);
    let outcome = block_on(fenced_at(&s, "t1", &[&key], (1, 1_000), "g1", T0)).unwrap();
    assert_eq!(outcome, ReserveOutcome::Reserved);
    let p = places(&s, "exp-keep-mark", &key);
    let (_, until) = entry(&cluster, &p).unwrap();
    // a recovery about to write g2 marked the group (the store's epoch is still g1)
    let mark = format!("~g2|g1@{until}");
    cli(
        master_of(&cluster, &p.list),
        &["HSET", &p.list, &p.tag, &mark],
    );
    // three days on the group renews (under g1) before that recovery writes g2
    let later = T0 + 3 * DAY;
    let key = day_of("dora", 3);
    let outcome = block_on(fenced_at(&s, "t2", &[&key], (1, 1_000), "g1", later)).unwrap();
    assert_eq!(outcome, ReserveOutcome::Reserved);
    let (body, renewed) = entry(&cluster, &p).unwrap();
    assert_eq!(body, "~g2|g1", "the mark stays");
    assert!(renewed > until, "renewed to {renewed}, was {until}");
    // g2 written; the group's master loses it: a loss under g2, not a new group
    assert!(block_on(s.set_epoch("g2".into(), later, None, false, 0)).unwrap());
    cli(master_of(&cluster, &p.copy), &["DEL", &p.copy]);
    let outcome = block_on(fenced_at(&s, "t3", &[&key], (1, 1_000), "g2", later)).unwrap();
    assert_eq!(outcome, ReserveOutcome::Fenced(FenceAnswer::Untrusted));
}

/// `groups.lua list`: a renewal writes nothing where the entry is gone or its time is over
/// (its copy may have expired with it: the group joins again, copy first), a join lists it
/// whatever was there; either keeps the later of two times.
#[test]
fn a_renewal_brings_back_no_entry_whose_time_is_over() {
    let server = crate::common::redis_server::RedisServer::start();
    let script = include_str!("../../src/guard/store/lua/groups.lua");
    let (epoch, list, at) = ("{l:2}:epoch", "{l:2}:groups", "{l:2}:groups:pruned");
    server.cli(&["HSET", epoch, "g", "g1"]);
    let list_op = |tag: &str, now: &str, until: &str, mode: &str| {
        let args = [
            "EVAL", script, "3", epoch, list, at, "list", tag, "g1", now, until, mode,
        ];
        server.cli(&args).trim().to_string()
    };
    let get = |tag: &str| server.cli(&["HGET", list, tag]).trim().to_string();
    server.cli(&["HSET", list, "{l:2:u:old}", "g1@100"]);
    assert_eq!(list_op("{l:2:u:old}", "200", "500", "renew"), "-1");
    assert_eq!(list_op("{l:2:u:none}", "200", "500", "renew"), "-1");
    assert_eq!(server.cli(&["HEXISTS", list, "{l:2:u:none}"]).trim(), "0");
    assert_eq!(list_op("{l:2:u:old}", "200", "500", "join"), "500");
    assert_eq!(get("{l:2:u:old}"), "g1@500");
    assert_eq!(list_op("{l:2:u:old}", "300", "400", "renew"), "500");
    assert_eq!(list_op("{l:2:u:old}", "300", "900", "renew"), "900");
    assert_eq!(get("{l:2:u:old}"), "g1@900");
}

/// A guard killed between a renewal's two steps (the entry extended, the copy not) or between
/// a join's (the copy written, not listed): the first reservation that needs more than the
/// copy's time (a copy without one: the next) renews it, joining again where there is no
/// entry, and the entry and the copy agree again. Nothing reads as lost, nothing is refused.
#[test]
fn a_guard_killed_between_the_steps_of_a_renewal_or_a_join_leaves_nothing_stuck() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "exp-crash");
    assert!(block_on(s.set_epoch("g1".into(), T0, None, true, 0)).unwrap());
    let (renewed, joined) = (day_of("erin", 0), day_of("fred", 0));
    for (ticket, key) in [("r0", &renewed), ("j0", &joined)] {
        let outcome = block_on(fenced_at(&s, ticket, &[key], (1, 1_000), "g1", T0)).unwrap();
        assert_eq!(outcome, ReserveOutcome::Reserved);
    }
    let (pr, pj) = (
        places(&s, "exp-crash", &renewed),
        places(&s, "exp-crash", &joined),
    );
    let (_, until) = entry(&cluster, &pr).unwrap();
    // the renewal's first step only: the entry three days longer, the copy as it was
    let longer = format!("g1@{}", until + 3 * DAY);
    cli(
        master_of(&cluster, &pr.list),
        &["HSET", &pr.list, &pr.tag, &longer],
    );
    // the join's first step only: a copy without its time, no entry
    cli(master_of(&cluster, &pj.list), &["HDEL", &pj.list, &pj.tag]);
    cli(master_of(&cluster, &pj.copy), &["HDEL", &pj.copy, "h"]);
    // three days on, what a call needs passes the copy's time (T0 + 10 days)
    let later = T0 + 3 * DAY;
    for (ticket, user, p) in [("r1", "erin", &pr), ("j1", "fred", &pj)] {
        let key = day_of(user, 3);
        let outcome = block_on(fenced_at(&s, ticket, &[&key], (1, 1_000), "g1", later)).unwrap();
        assert_eq!(outcome, ReserveOutcome::Reserved, "{user}");
        let (body, until) = entry(&cluster, p).expect("listed");
        assert_eq!(body, "g1");
        assert_eq!(
            copy(&cluster, p).0,
            Some(until),
            "{user}: the copy keeps the entry's time"
        );
    }
}

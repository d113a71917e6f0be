//! Slot groups under the conditions a review looked for (docs/redis.md, "Slot groups"): guards
//! joining one new group at once, a group that loses its keys after a recovery but before it
//! joined the recovery's generation (and what the recovery marks), and the upgrade copy over use the new layout counted
//! first.
#![cfg(feature = "redis")]

use futures::executor::block_on;
use futures::future::join_all;
use usage_guard::internals::{CounterKey, FenceAnswer, Fencing, ReserveOutcome, StoreFuture};
use usage_guard::{CounterStore, RedisStore};

use crate::common::redis_server::{cli, RedisCluster, RedisServer};
use crate::store_groups::{bill, day, master_of, read, store, T0};
use crate::store_groups_expiry::fenced_at;

/// A fenced reservation of `hold` on each of `keys` (limit `limit`) under `generation`.
fn fenced_of<'a>(
    store: &'a RedisStore,
    ticket: &str,
    keys: &[&CounterKey],
    hold: u64,
    limit: u64,
    generation: &str,
) -> StoreFuture<'a, ReserveOutcome> {
    fenced_at(store, ticket, keys, (hold, limit), generation, T0)
}

/// Two guards whose first calls on a new person (a group never listed) arrive together: both
/// find the group without a copy of the epoch, and both join it. Neither may read the other's
/// join as the group's master having lost it (that answers `Untrusted`, and a guard with a
/// ledger then recovers: a new generation, every guard's fenced calls wait the hold-again
/// time).
#[test]
fn guards_joining_one_new_group_at_once_never_read_it_as_lost() {
    let cluster = RedisCluster::shared();
    let (one, two) = (store(&cluster, "join-race"), store(&cluster, "join-race"));
    assert!(block_on(one.set_epoch("g1".into(), T0, None, true, 0)).unwrap());
    let mut outcomes = Vec::new();
    for person in 0..20 {
        let key = day(&format!("race-{person}"));
        let calls = (0..4).map(|i| {
            let guard = if i % 2 == 0 { &one } else { &two };
            fenced_of(guard, &format!("t{person}-{i}"), &[&key], 1, 1_000, "g1")
        });
        outcomes.extend(block_on(join_all(calls)).into_iter().map(Result::unwrap));
    }
    let fenced: Vec<&ReserveOutcome> = outcomes
        .iter()
        .filter(|o| **o != ReserveOutcome::Reserved)
        .collect();
    assert!(
        fenced.is_empty(),
        "{} of 80 fenced: {fenced:?}",
        fenced.len()
    );
}

/// A group that joined generation g1, then a recovery writes g2 (another group's master was
/// lost), then this group's master restarts empty before any fenced call touched it under
/// g2: its counters are gone. The next fenced reserve must not trust the empty group as new
/// (the shared layout's fence answers `Untrusted` for the same loss).
#[test]
fn a_group_lost_after_a_recovery_it_has_not_joined_yet_is_not_trusted() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "old-gen");
    assert!(block_on(s.set_epoch("g1".into(), T0, None, true, 0)).unwrap());
    let home = "{old-gen:2}:epoch";
    let home_master = master_of(&cluster, home);
    // A person whose group is on another master than the store's own keys, with 900 used.
    let key = (0..)
        .map(|i| day(&format!("og-{i}")))
        .find(|k| {
            block_on(s.settle(&bill(&format!("b-{}", k.id.render()), k, 900), T0)).unwrap();
            master_of(&cluster, &s.redis_key(k)) != home_master
        })
        .unwrap();
    assert_eq!(
        block_on(fenced_of(&s, "t1", &[&key], 1, 1_000, "g1")).unwrap(),
        ReserveOutcome::Reserved
    );
    assert_eq!(
        block_on(s.read(vec![key.clone()], T0)).unwrap(),
        vec![read(900, 1)]
    );
    // A recovery (another group's loss) writes g2.
    assert!(block_on(s.set_epoch("g2".into(), T0, None, false, 0)).unwrap());
    // The group's master restarts empty: every key under the group's tag is gone.
    let counter = s.redis_key(&key);
    let tag = &counter[..=counter.find('}').unwrap()];
    let master = master_of(&cluster, &counter);
    let pattern = format!("{}*", tag.replace('{', "\\{").replace('}', "\\}"));
    let keys = cli(master, &["--scan", "--pattern", &pattern]);
    assert!(keys.lines().count() >= 3, "{keys}");
    for k in keys.lines() {
        cli(master, &["DEL", k]);
    }
    // 900 of 1,000 were used before the loss: 500 more must not be reserved as if nothing was.
    let outcome = block_on(fenced_of(&s, "t2", &[&key], 500, 1_000, "g2")).unwrap();
    assert_eq!(outcome, ReserveOutcome::Fenced(FenceAnswer::Untrusted));
    // The recovery that loss asks for finds the group's copy missing (lost before it): the
    // group joins g3 and is fenced no more (not a recovery after every recovery).
    assert!(block_on(s.set_epoch("g3".into(), T0, None, false, 0)).unwrap());
    let outcome = block_on(fenced_of(&s, "t3", &[&key], 500, 1_000, "g3")).unwrap();
    assert_eq!(outcome, ReserveOutcome::Reserved);
}

/// A group whose copy of the epoch was missing when a recovery looked (lost before it), or
/// was written by a process no master runs now (a copy a restarted master loaded from its
/// file), is not marked: it joins the recovery's generation, once; a group whose copy was
/// there and of a master's process is marked and keeps answering `Reserved` while its copy
/// stays. On a cluster (each copy asked of its master) and on one node (one pipeline).
#[test]
fn a_recovery_marks_only_the_groups_whose_copy_it_found() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "marks");
    let master = |key: &str| master_of(&cluster, key);
    let another = |key: &str| {
        let mine = master_of(&cluster, key);
        cluster
            .nodes
            .iter()
            .map(|n| n.port)
            .find(|p| *p != mine)
            .unwrap()
    };
    marks_only_the_groups_found(&s, "marks", &master, Some(&another));
    let server = RedisServer::start();
    let timeout = std::time::Duration::from_secs(1);
    let s = RedisStore::connect_grouped(&server.url(), "marks1", timeout).unwrap();
    let port = server.port;
    marks_only_the_groups_found(&s, "marks1", &|_| port, None);
}

/// `another`: on a cluster, a master other than a key's own: a copy written by that master's
/// process (as after resharding) counts as there, so it is marked (the safe side).
fn marks_only_the_groups_found(
    s: &RedisStore,
    prefix: &str,
    master: &dyn Fn(&str) -> u16,
    another: Option<&dyn Fn(&str) -> u16>,
) {
    assert!(block_on(s.set_epoch("g1".into(), T0, None, true, 0)).unwrap());
    let (kept, lost) = (day("marks-kept"), day("marks-lost"));
    let (foreign, moved) = (day("marks-foreign"), day("marks-moved"));
    for (i, key) in [&kept, &lost, &foreign, &moved].into_iter().enumerate() {
        let outcome = block_on(fenced_of(s, &format!("j{i}"), &[key], 1, 1_000, "g1"));
        assert_eq!(outcome.unwrap(), ReserveOutcome::Reserved);
    }
    let copy_of = |key: &CounterKey| {
        let counter = s.redis_key(key);
        format!("{}:epoch", &counter[..=counter.find('}').unwrap()])
    };
    let lost_copy = copy_of(&lost);
    cli(master(&lost_copy), &["DEL", &lost_copy]);
    let foreign_copy = copy_of(&foreign);
    let no_process = "0".repeat(40);
    cli(
        master(&foreign_copy),
        &["HSET", &foreign_copy, "r", &no_process],
    );
    let moved_copy = copy_of(&moved);
    if let Some(another) = another {
        let info = cli(another(&moved_copy), &["INFO", "server"]);
        let at = info.find("run_id:").unwrap() + "run_id:".len();
        let theirs = &info[at..at + 40];
        cli(master(&moved_copy), &["HSET", &moved_copy, "r", theirs]);
    }
    assert!(block_on(s.set_epoch("g2".into(), T0, None, false, 0)).unwrap());
    let list = format!("{{{prefix}:2}}:groups");
    let entry = |key: &CounterKey| {
        let copy = copy_of(key);
        let tag = &copy[..copy.len() - ":epoch".len()];
        cli(master(&list), &["HGET", &list, tag]).trim().to_string()
    };
    // (an entry is `<generation or mark>@<until when it lasts>`: a mark keeps the time)
    let listed = |key: &CounterKey| entry(key).split('@').next().unwrap().to_string();
    let until = |key: &CounterKey| entry(key).split('@').nth(1).map(str::to_string);
    let kept_until = until(&kept);
    assert!(kept_until.is_some(), "{}", entry(&kept));
    assert_eq!(listed(&kept), "~g2|g1");
    assert_eq!(until(&kept), kept_until);
    assert_eq!(listed(&lost), "g1");
    assert_eq!(listed(&foreign), "g1");
    assert_eq!(listed(&moved), "~g2|g1");
    // Each joins g2 (a mark naming g2 stays: a listing never lifts it)
    for (i, key) in [&kept, &lost, &foreign].into_iter().enumerate() {
        let outcome = block_on(fenced_of(s, &format!("r{i}"), &[key], 1, 1_000, "g2"));
        assert_eq!(outcome.unwrap(), ReserveOutcome::Reserved, "{key:?}");
        let joined = if key == &kept { "~g2|g1" } else { "g2" };
        assert_eq!(listed(key), joined);
    }
}

/// The upgrade copy run after guards of the new layout already counted use on a counter: the
/// shared layout's use and the new layout's are use of different calls, so the counter holds
/// their sum (docs/redis.md: "running it twice, or after guards of the new layout counted use,
/// loses and doubles nothing"), unless the bucket was filled from the ledger, whose sum
/// counts the old use already; a second run adds nothing more.
#[test]
fn the_upgrade_copy_after_new_use_keeps_both_uses() {
    let cluster = RedisCluster::shared();
    let shared = RedisStore::cluster(&cluster.urls(), "mig-late").unwrap();
    let grouped = store(&cluster, "mig-late");
    let (bob, carol) = (day("mig-late-b"), day("mig-late-c"));
    block_on(shared.settle(&bill("old", &bob, 7), T0)).unwrap();
    block_on(grouped.settle(&bill("new", &bob, 3), T0)).unwrap();
    // carol's bucket was filled from the ledger in the new layout (the ledger's 7 is the old
    // layout's use), then billed 3: the copy must not add the 7 a second time.
    block_on(shared.settle(&bill("old-c", &carol, 7), T0)).unwrap();
    assert!(block_on(grouped.fill(carol.clone(), 7, T0 + 86_400_000, T0)).unwrap());
    block_on(grouped.settle(&bill("new-c", &carol, 3), T0)).unwrap();
    for run in 0..2 {
        let done = block_on(grouped.migrate_from_shared()).unwrap();
        assert_eq!(
            block_on(grouped.read(vec![bob.clone(), carol.clone()], T0)).unwrap(),
            vec![read(10, 0), read(10, 0)]
        );
        // Reported: bob's bucket added to on the first run only; carol's found filled (its
        // larger use kept, which was the new layout's) on both.
        assert_eq!(
            (done.read, done.counters, done.filled),
            (2, if run == 0 { 1 } else { 0 }, 1),
            "run {run}"
        );
    }
}

/// A recovery whose lock is not (or no longer) its own marks nothing, as it writes nothing.
#[test]
fn a_recovery_without_its_lock_marks_no_group() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "marks-lock");
    assert!(block_on(s.set_epoch("g1".into(), T0, None, true, 0)).unwrap());
    let key = day("marks-lock-a");
    let outcome = block_on(fenced_of(&s, "j", &[&key], 1, 1_000, "g1"));
    assert_eq!(outcome.unwrap(), ReserveOutcome::Reserved);
    assert!(block_on(s.epoch_lock("another".into(), 10_000)).unwrap());
    let mine = Some("mine".to_string());
    assert!(!block_on(s.set_epoch("g2".into(), T0, mine, false, 0)).unwrap());
    let list = "{marks-lock:2}:groups";
    let counter = s.redis_key(&key);
    let tag = &counter[..=counter.find('}').unwrap()];
    let listed = || {
        let entry = cli(master_of(&cluster, list), &["HGET", list, tag]);
        entry.trim().split('@').next().unwrap().to_string()
    };
    assert_eq!(listed(), "g1");
    let theirs = Some("another".to_string());
    assert!(block_on(s.set_epoch("g2".into(), T0, theirs, false, 0)).unwrap());
    assert_eq!(listed(), "~g2|g1");
}

//! Slot groups on a real 3-master Redis Cluster (docs/redis.md, "Slot groups"): a store's
//! groups spread over the masters; a group that refuses leaves no hold in the others; the
//! epoch fence runs per group, so a group whose copy of the epoch is lost fences the calls
//! that touch it until a recovery, and only those.
#![cfg(feature = "redis")]

use std::collections::HashMap;
use std::time::Duration;

use futures::executor::block_on;
use usage_guard::internals::{
    expiry_minute, CounterKey, CounterRead, Fence, FenceAnswer, Fencing, HoldRef, KnownOutcome,
    KnownReserve, ReserveFromKnown, ReserveItem, ReserveOutcome, Settle, SettleOutcome, UsageAdd,
};
use usage_guard::{CounterStore, Millis, RedisStore};

use crate::common::redis_server::{cli, RedisCluster};
use crate::common::tokens_key_in;

/// 2026-01-01T00:00:30Z.
pub(crate) const T0: Millis = 1_767_225_630_000;
pub(crate) const HOLD_MS: i64 = 15 * 60_000;

pub(crate) fn store(cluster: &RedisCluster, prefix: &str) -> RedisStore {
    RedisStore::cluster_grouped(&cluster.urls(), prefix, Duration::from_secs(1)).unwrap()
}

pub(crate) fn day(user: &str) -> CounterKey {
    tokens_key_in(user, "day", T0 - 30_000)
}

pub(crate) fn item(key: &CounterKey, hold: u64, limit: Option<u64>) -> ReserveItem {
    ReserveItem {
        key: key.clone(),
        hold,
        limit,
        carried: 0,
        retain_until: T0 + 2 * 86_400_000,
    }
}

pub(crate) fn bill(id: &str, key: &CounterKey, amount: u64) -> Settle {
    Settle {
        id: id.into(),
        ticket: id.into(),
        holds: Vec::new(),
        expiry_minute: expiry_minute(T0, HOLD_MS),
        adds: vec![UsageAdd {
            key: key.clone(),
            amount,
            retain_until: T0 + 2 * 86_400_000,
        }],
        settled_until: T0 + HOLD_MS,
    }
}

/// The port of the master that holds `key`.
pub(crate) fn master_of(cluster: &RedisCluster, key: &str) -> u16 {
    let slot = cli(cluster.nodes[0].port, &["CLUSTER", "KEYSLOT", key]);
    let slot: u16 = slot.parse().unwrap();
    let owner = cluster.nodes.iter().find(|n| {
        let here = cli(n.port, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]);
        here.parse::<u64>().unwrap_or(0) > 0
    });
    owner.expect("a master holds the key").port
}

#[test]
fn a_stores_groups_spread_over_every_master() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "spread");
    let users: Vec<String> = (0..60).map(|i| format!("user-{i}")).collect();
    for (i, user) in users.iter().enumerate() {
        block_on(s.settle(&bill(&format!("b{i}"), &day(user), 1), T0)).unwrap();
    }
    let mut per_master: HashMap<u16, usize> = HashMap::new();
    for user in &users {
        *per_master
            .entry(master_of(&cluster, &s.redis_key(&day(user))))
            .or_default() += 1;
    }
    // 60 groups over 3 masters: each master holds some (the shared layout puts all on one).
    assert_eq!(per_master.len(), 3, "{per_master:?}");
    assert!(per_master.values().all(|&n| n >= 8), "{per_master:?}");
}

#[test]
fn a_group_that_refuses_leaves_no_hold_in_the_others() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "give-back");
    let (a, b, c) = (day("gb-a"), day("gb-b"), day("gb-c"));
    let m = expiry_minute(T0, HOLD_MS);
    block_on(s.settle(&bill("used", &b, 9), T0)).unwrap();
    let items = vec![
        item(&a, 5, Some(100)),
        item(&c, 4, None),
        item(&b, 5, Some(10)),
    ];
    let out = block_on(s.reserve("t1".into(), items, m, T0)).unwrap();
    assert_eq!(out, ReserveOutcome::Conflict { item: 2 });
    let reads = block_on(s.read(vec![a.clone(), b.clone(), c.clone()], T0)).unwrap();
    let held: Vec<u64> = reads.iter().map(|r| r.held).collect();
    assert_eq!(held, [0, 0, 0], "the holds a and c placed were given back");
    // The ticket may reserve again (its records were dropped, not marked settled).
    let again = vec![item(&a, 5, Some(100)), item(&c, 4, None)];
    let out = block_on(s.reserve("t1".into(), again, m, T0)).unwrap();
    assert_eq!(out, ReserveOutcome::Reserved);
    let reads = block_on(s.read(vec![a.clone(), c.clone()], T0)).unwrap();
    assert_eq!((reads[0].held, reads[1].held), (5, 4));
    // Its settle gives back in each group once, and a second settle does nothing.
    let settle = Settle {
        holds: vec![
            HoldRef {
                key: a.clone(),
                amount: 5,
            },
            HoldRef {
                key: c.clone(),
                amount: 4,
            },
        ],
        adds: vec![UsageAdd {
            key: a.clone(),
            amount: 3,
            retain_until: T0 + 86_400_000,
        }],
        ..bill("t1", &a, 0)
    };
    for _ in 0..2 {
        block_on(s.settle(&settle, T0)).unwrap();
    }
    let reads = block_on(s.read(vec![a, c], T0)).unwrap();
    assert_eq!((reads[0].used, reads[0].held, reads[1].held), (3, 0, 0));
}

pub(crate) fn fenced(
    store: &RedisStore,
    ticket: &str,
    keys: &[&CounterKey],
    generation: &str,
) -> ReserveOutcome {
    let items: Vec<ReserveItem> = keys.iter().map(|k| item(k, 1, Some(1_000))).collect();
    let fence = Fence {
        generation: generation.into(),
        fenced: vec![true; items.len()],
    };
    let m = expiry_minute(T0, HOLD_MS);
    block_on(store.reserve_fenced(ticket.into(), items, m, T0, fence)).unwrap()
}

#[test]
fn a_group_that_lost_its_epoch_fences_only_the_calls_that_touch_it() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "fence");
    let (a, b) = (day("fence-a"), day("fence-b"));
    assert!(block_on(s.set_epoch("g1".into(), T0, None, true, 0)).unwrap());
    // Each group joins the store's epoch at its first fenced reserve.
    assert_eq!(fenced(&s, "t1", &[&a, &b], "g1"), ReserveOutcome::Reserved);
    let copy_of = |key: &CounterKey| {
        let k = s.redis_key(key);
        format!("{}:epoch", &k[..=k.find('}').unwrap()])
    };
    for key in [&a, &b] {
        let copy = copy_of(key);
        assert_eq!(cli(master_of(&cluster, &copy), &["HGET", &copy, "g"]), "g1");
    }
    // a's master loses a's copy (as a restart would): calls on a are fenced, calls on b not.
    let copy = copy_of(&a);
    cli(master_of(&cluster, &copy), &["DEL", &copy]);
    let lost = fenced(&s, "t2", &[&a, &b], "g1");
    assert_eq!(lost, ReserveOutcome::Fenced(FenceAnswer::Untrusted));
    let read = block_on(s.read(vec![b.clone()], T0)).unwrap();
    assert_eq!(
        read[0].held, 1,
        "t2's hold on b was given back (t1's stays)"
    );
    assert_eq!(fenced(&s, "t3", &[&b], "g1"), ReserveOutcome::Reserved);
    // A recovery writes a new generation: a guard still on g1 hears stale, and on g2 every
    // group joins again, a included.
    assert!(block_on(s.set_epoch("g2".into(), T0, None, false, 0)).unwrap());
    assert_eq!(
        fenced(&s, "t4", &[&a], "g1"),
        ReserveOutcome::Fenced(FenceAnswer::Stale)
    );
    assert_eq!(fenced(&s, "t5", &[&a, &b], "g2"), ReserveOutcome::Reserved);
    for key in [&a, &b] {
        let copy = copy_of(key);
        assert_eq!(cli(master_of(&cluster, &copy), &["HGET", &copy, "g"]), "g2");
    }
    let reads = block_on(s.read(vec![a, b], T0)).unwrap();
    assert_eq!(
        (reads[0].held, reads[1].held),
        (2, 3),
        "t1 and t5 on a; t1, t3, t5 on b"
    );
}

#[test]
fn shared_and_grouped_stores_of_one_prefix_never_share_a_key() {
    let cluster = RedisCluster::shared();
    let grouped = store(&cluster, "both");
    let shared = RedisStore::cluster(&cluster.urls(), "both").unwrap();
    let key = day("both-a");
    block_on(shared.settle(&bill("s1", &key, 7), T0)).unwrap();
    assert_ne!(shared.redis_key(&key), grouped.redis_key(&key));
    assert_eq!(
        block_on(grouped.read(vec![key.clone()], T0)).unwrap()[0].used,
        0
    );
}

/// A reservation from known values on alice's and the model's groups, with `hold` on each.
fn known_on_two_groups(
    ticket: &str,
    alice: &CounterKey,
    model: &CounterKey,
    hold: u64,
) -> KnownReserve {
    KnownReserve {
        ticket: ticket.into(),
        counters: vec![alice.clone(), model.clone()],
        previous: Vec::new(),
        items: vec![
            item(alice, hold, Some(1_000)),
            item(model, hold, Some(1_000)),
        ],
        item_counters: vec![0, 1],
        item_previous: vec![None, None],
        skipped: Vec::new(),
        expiry_minute: expiry_minute(T0, HOLD_MS),
    }
}

#[test]
fn bills_carried_by_a_reservation_land_in_each_group_before_it_once() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "carry");
    let (alice, bob) = (day("carry-a"), day("carry-b"));
    let model = model_total();
    let first = known_on_two_groups("t1", &alice, &model, 300);
    let answer = block_on(s.reserve_known(first, T0, Fence::default())).unwrap();
    assert_eq!(
        answer.outcome,
        KnownOutcome::Reserve(ReserveOutcome::Reserved)
    );
    // t1's bill spans both groups (carried in each); bob's is in a group the next
    // reservation does not touch (sent beside it).
    let t1 = Settle {
        holds: vec![
            HoldRef {
                key: alice.clone(),
                amount: 300,
            },
            HoldRef {
                key: model.clone(),
                amount: 300,
            },
        ],
        adds: vec![add(&alice, 120), add(&model, 120)],
        ..bill("t1", &alice, 0)
    };
    let bills = [t1, bill("b1", &bob, 7)];
    for round in 0..2 {
        let next = known_on_two_groups(&format!("t2-{round}"), &alice, &model, 200);
        let (answer, settled) =
            block_on(s.reserve_known_carrying(next, &bills, T0, Fence::default())).unwrap();
        assert_eq!(
            answer.outcome,
            KnownOutcome::Reserve(ReserveOutcome::Reserved)
        );
        let settled: Vec<SettleOutcome> = settled.into_iter().map(Result::unwrap).collect();
        let expected = if round == 0 {
            SettleOutcome::Settled
        } else {
            SettleOutcome::AlreadySettled
        };
        assert_eq!(settled, vec![expected; 2], "round {round}");
        // The reservation counted t1's bill, landed before it in each group.
        let held = 200 * (round + 1);
        assert_eq!(answer.counters, vec![read(120, held); 2], "round {round}");
    }
    assert_eq!(block_on(s.read(vec![bob], T0)).unwrap(), vec![read(7, 0)]);
}

/// A refused reservation from known values gives back what the other group placed, and the
/// values it answers leave those holds out.
#[test]
fn a_known_reservation_refused_in_one_group_answers_without_the_others_holds() {
    let cluster = RedisCluster::shared();
    let s = store(&cluster, "known-refused");
    let (alice, model) = (day("kr-a"), model_total());
    block_on(s.settle(&bill("used", &model, 950), T0)).unwrap();
    let answer = block_on(s.reserve_known(
        known_on_two_groups("t1", &alice, &model, 100),
        T0,
        Fence::default(),
    ));
    let answer = answer.unwrap();
    assert_eq!(
        answer.outcome,
        KnownOutcome::Reserve(ReserveOutcome::Conflict { item: 1 })
    );
    assert_eq!(answer.counters, vec![read(0, 0), read(950, 0)]);
    assert_eq!(
        block_on(s.read(vec![alice.clone()], T0)).unwrap(),
        vec![read(0, 0)]
    );
    // The ticket reserves again once it fits.
    let fits = known_on_two_groups("t1", &alice, &model, 50);
    let answer = block_on(s.reserve_known(fits, T0, Fence::default())).unwrap();
    assert_eq!(
        answer.outcome,
        KnownOutcome::Reserve(ReserveOutcome::Reserved)
    );
    assert_eq!(answer.counters, vec![read(0, 50), read(950, 50)]);
}

pub(crate) fn model_total() -> CounterKey {
    use usage_guard::{CounterId, Metric, Scope, Window};
    let window: Window = "day".parse().unwrap();
    let id = CounterId::new(
        Scope::ModelTotal,
        None,
        None,
        Some("gpt-5".into()),
        Metric::Tokens,
        window,
    );
    CounterKey {
        id: std::sync::Arc::new(id),
        bucket: T0 - 30_000,
    }
}

fn add(key: &CounterKey, amount: u64) -> UsageAdd {
    UsageAdd {
        key: key.clone(),
        amount,
        retain_until: T0 + 2 * 86_400_000,
    }
}

pub(crate) fn read(used: u64, held: u64) -> CounterRead {
    CounterRead { used, held }
}

#[test]
fn a_shared_stores_counters_and_holds_move_into_their_groups_once() {
    let cluster = RedisCluster::shared();
    let shared = RedisStore::cluster(&cluster.urls(), "mig").unwrap();
    let grouped = store(&cluster, "mig");
    let (alice, bob, model) = (day("mig-a"), day("mig-b"), model_total());
    block_on(shared.settle(&bill("b1", &alice, 40), T0)).unwrap();
    block_on(shared.settle(&bill("b2", &bob, 7), T0)).unwrap();
    block_on(shared.settle(&bill("b3", &model, 47), T0)).unwrap();
    let m = expiry_minute(T0, HOLD_MS);
    let open = vec![item(&alice, 5, Some(1_000)), item(&model, 5, None)];
    assert_eq!(
        block_on(shared.reserve("open".into(), open, m, T0)).unwrap(),
        ReserveOutcome::Reserved
    );
    let all = vec![alice.clone(), bob.clone(), model.clone()];
    let expected = vec![read(40, 5), read(7, 0), read(47, 5)];
    assert_eq!(block_on(shared.read(all.clone(), T0)).unwrap(), expected);
    assert_eq!(
        block_on(grouped.read(all.clone(), T0)).unwrap(),
        vec![read(0, 0); 3]
    );
    let moved = block_on(grouped.migrate_from_shared()).unwrap();
    assert_eq!((moved.read, moved.counters, moved.holds), (5, 3, 2));
    assert_eq!((moved.filled, moved.skipped), (0, 0));
    assert_eq!(block_on(grouped.read(all.clone(), T0)).unwrap(), expected);
    // The copies keep the time to live of what they copy.
    let copy = grouped.redis_key(&alice);
    let ttl: i64 = cli(master_of(&cluster, &copy), &["PTTL", &copy])
        .parse()
        .unwrap();
    let original = shared.redis_key(&alice);
    let was: i64 = cli(master_of(&cluster, &original), &["PTTL", &original])
        .parse()
        .unwrap();
    assert!(ttl > 0 && (was - ttl).abs() < 5_000, "{ttl} vs {was}");
    // Use counted in the new layout meanwhile, then a second run: nothing twice, nothing lost.
    block_on(grouped.settle(&bill("b4", &bob, 3), T0)).unwrap();
    // Keys of another type under the store's names are skipped, not a failure.
    let stray = shared.redis_key(&alice).replace("mig-a", "mig-stray");
    cli(master_of(&cluster, &stray), &["SET", &stray, "x"]);
    let again = block_on(grouped.migrate_from_shared()).unwrap();
    assert_eq!((again.read, again.counters, again.holds), (5, 0, 0));
    assert_eq!(again.skipped, 1);
    let after = vec![read(40, 5), read(10, 0), read(47, 5)];
    assert_eq!(block_on(grouped.read(all, T0)).unwrap(), after);
    // Only a store with slot groups migrates.
    assert!(block_on(shared.migrate_from_shared()).is_err());
}

/// A migration is as long as the store is large: only each answer is bounded by the store's
/// timeout, not the whole run (which failed every migration past a size, and one of a few
/// keys on a loaded CI machine).
#[test]
fn a_migration_longer_than_the_operation_timeout_completes() {
    let cluster = RedisCluster::shared();
    let shared = RedisStore::cluster(&cluster.urls(), "migbig").unwrap();
    // Enough groups that Redis alone needs longer than an operation may take (~15 µs of
    // script a group), even with the writes of a page pipelined.
    let users = 30_000;
    let keys: Vec<CounterKey> = (0..users).map(|i| day(&format!("mb{i}"))).collect();
    for (n, chunk) in keys.chunks(500).enumerate() {
        let mut many = bill(&format!("mb{n}"), &keys[0], 1);
        many.adds = chunk.iter().map(|k| add(k, 3)).collect();
        block_on(shared.settle(&many, T0)).unwrap();
    }
    let timeout = Duration::from_millis(100);
    let grouped = RedisStore::cluster_grouped(&cluster.urls(), "migbig", timeout).unwrap();
    let started = std::time::Instant::now();
    let moved = block_on(grouped.migrate_from_shared()).unwrap();
    let took = started.elapsed();
    assert_eq!(
        (moved.read, moved.counters, moved.holds),
        (users as u64, users as u64, 0)
    );
    eprintln!("migrated {users} groups in {took:?}");
    // The premise: longer than an operation may take (2.5 timeouts).
    assert!(
        took > timeout * 5 / 2,
        "the migration took only {took:?}: no proof"
    );
    let sample = vec![
        keys[0].clone(),
        keys[users / 2].clone(),
        keys[users - 1].clone(),
    ];
    assert_eq!(
        block_on(grouped.read(sample, T0)).unwrap(),
        vec![read(3, 0); 3]
    );
}

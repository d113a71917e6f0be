//! One sequence of reservations and bills, replayed three ways on a manual clock: on Redis
//! with each step's bills carried by its reservation (one script: `carry.lua`, whose
//! per-script bucket cache, `BUCKETS` in `common.lua`, answers the reservation's reads of the
//! buckets the bills just wrote), on Redis with the bills settled first and the reservation
//! sent after them (scripts of their own, every bucket read from Redis), and on the memory
//! store. The three must answer alike at every step: the same settle outcomes, the same
//! reservation outcome, the same use and holds of the current bucket and the same use of the
//! previous one. Each sequence runs twice: plain, and with the epoch fence on (the Redis
//! stores adopt an epoch and the counter is fenced, so `fence.lua` checks and lists every key
//! the scripts touch; nothing is lost, so nothing may be refused for it).
//!
//! Bills add to the bucket their call was admitted in and keep it one minute past its end, so
//! a clock that moves on lets a bill land on a bucket already past its retention: the bill
//! deletes it and makes it again, and the next reservation reads it as its previous bucket.
//! The clock moves in steps of 30 s, so what Redis keeps by its own (real-time) expiry is
//! either already past its retention on the manual clock or kept for 30 s more at least: no
//! real second that the test takes can expire a key the manual clock still keeps.
#![cfg(feature = "redis")]

use crate::common;

use common::redis_server::RedisServer;
use futures::executor::block_on;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use usage_guard::internals::{
    expiry_minute, BackgroundSettling, CounterKey, CounterRead, Fence, Fencing, HoldRef,
    KnownOutcome, KnownReserve, ReserveFromKnown, ReserveItem, Settle, UsageAdd,
};
use usage_guard::{CounterStore, MemoryStore, Millis, RedisStore};

/// 2026-01-01T00:00:00Z: buckets are minutes from here.
const BASE: Millis = 1_767_225_600_000;
const BUCKET_MS: Millis = 60_000;
const STEP_MS: Millis = 30_000;
const LIMIT: u64 = 1_000;

fn key(bucket: i64) -> CounterKey {
    common::tokens_key_in("alice", "minute", BASE + bucket * BUCKET_MS)
}

/// Kept one minute past the bucket's end.
fn retain_until(bucket: i64) -> Millis {
    BASE + (bucket + 2) * BUCKET_MS
}

/// One step: the clock moves `advance` steps of 30 s; the open calls picked by `bills` (bit i:
/// the i-th open call) are billed, each adding `used` (at most what it held); then a call
/// asks to hold `hold` in the current bucket.
#[derive(Debug, Clone)]
struct Step {
    advance: i64,
    bills: u8,
    used: u64,
    hold: u64,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (
        prop_oneof![0i64..3, 0i64..50],
        any::<u8>(),
        0u64..600,
        0u64..700,
    )
        .prop_map(|(advance, bills, used, hold)| Step {
            advance,
            bills,
            used,
            hold,
        });
    prop::collection::vec(step, 1..14)
}

/// An admitted call not billed yet.
struct Open {
    id: String,
    bucket: i64,
    hold: u64,
    minute: i64,
}

fn bill(call: &Open, used: u64, now: Millis) -> Settle {
    Settle {
        id: call.id.clone(),
        ticket: call.id.clone(),
        holds: vec![HoldRef {
            key: key(call.bucket),
            amount: call.hold,
        }],
        expiry_minute: call.minute,
        adds: vec![UsageAdd {
            key: key(call.bucket),
            amount: used.min(call.hold),
            retain_until: retain_until(call.bucket),
        }],
        settled_until: now + 300_000,
    }
}

fn reservation(id: &str, bucket: i64, hold: u64, minute: i64) -> KnownReserve {
    KnownReserve {
        ticket: id.into(),
        counters: vec![key(bucket)],
        previous: vec![(key(bucket - 1), 0)],
        items: vec![ReserveItem {
            key: key(bucket),
            hold,
            limit: Some(LIMIT),
            carried: 0,
            retain_until: retain_until(bucket),
        }],
        item_counters: vec![0],
        // A use assumed far above any reached: the reservation never answers `Moved`.
        item_previous: vec![Some((0, 1 << 50))],
        skipped: Vec::new(),
        expiry_minute: minute,
    }
}

/// The holds hashes of the stores with prefixes `a` and `b`, each as sorted lines of
/// `<key without its prefix> <field>=<value>`, read in one step.
fn holds_hashes(server: &RedisServer, a: &str, b: &str) -> (String, String) {
    const DUMP: &str = "local out = {} \
        for i, prefix in ipairs(ARGV) do \
          local lines = {} \
          for _, key in ipairs(redis.call('KEYS', '{' .. prefix .. '}:h:*')) do \
            local flat = redis.call('HGETALL', key) \
            for j = 1, #flat, 2 do \
              lines[#lines + 1] = string.sub(key, #prefix + 3) .. ' ' .. flat[j] .. '=' .. flat[j + 1] \
            end \
          end \
          table.sort(lines) \
          out[i] = table.concat(lines, ';') \
        end \
        return out";
    let both = server.cli(&["EVAL", DUMP, "0", a, b]);
    let mut lines = both.lines().map(str::to_owned);
    (
        lines.next().unwrap_or_default(),
        lines.next().unwrap_or_default(),
    )
}

/// Replays `steps` on the three stores; `Err` names the first step where they disagree.
/// `fenced`: the Redis stores get an epoch and the counter is fenced (fence.lua checks and
/// lists every key the scripts touch; nothing is lost, so nothing may be refused for it).
fn replay(
    server: &RedisServer,
    case: u64,
    steps: &[Step],
    fenced: bool,
) -> Result<(), TestCaseError> {
    let (carried_prefix, plain_prefix) = (format!("c{case}-{fenced}"), format!("p{case}-{fenced}"));
    let carried = RedisStore::connect(&server.url(), &carried_prefix).unwrap();
    let plain = RedisStore::connect(&server.url(), &plain_prefix).unwrap();
    let memory = MemoryStore::new();
    let mut now = BASE + 5 * BUCKET_MS;
    let fence = if fenced {
        for store in [&carried, &plain] {
            let adopted = block_on(store.set_epoch("g1".into(), now, None, true, 0)).unwrap();
            assert!(adopted, "a new prefix has no epoch");
        }
        Fence {
            generation: "g1".into(),
            fenced: vec![true],
        }
    } else {
        Fence::default()
    };
    let mut open: Vec<Open> = Vec::new();
    for (n, step) in steps.iter().enumerate() {
        now += step.advance * STEP_MS;
        let mut settles = Vec::new();
        let mut i = 0;
        open.retain(|call| {
            let billed = i < 8 && step.bills & (1 << i) != 0;
            i += 1;
            if billed {
                settles.push(bill(call, step.used, now));
            }
            !billed
        });
        let bucket = (now - BASE).div_euclid(BUCKET_MS);
        let minute = expiry_minute(now, 15 * 60_000);
        let id = format!("t{n}");
        let reserve = reservation(&id, bucket, step.hold, minute);

        let (one, settled_one) =
            block_on(carried.reserve_known_carrying(reserve.clone(), &settles, now, fence.clone()))
                .unwrap();
        let settled_two = block_on(plain.settle_many(&settles, now)).unwrap();
        let two = block_on(plain.reserve_known(reserve.clone(), now, fence.clone())).unwrap();
        let mut settled_memory = Vec::new();
        for settle in &settles {
            settled_memory.push(block_on(memory.settle(settle, now)));
        }
        let placed =
            block_on(memory.reserve(id.clone(), reserve.items.clone(), minute, now)).unwrap();
        let read = block_on(memory.read(vec![key(bucket), key(bucket - 1)], now)).unwrap();

        let at = format!("step {n} at +{} s, bucket {bucket}", (now - BASE) / 1000);
        prop_assert_eq!(&settled_one, &settled_two, "settles, {}", at);
        prop_assert_eq!(&settled_one, &settled_memory, "settles, {}", at);
        prop_assert_eq!(&one, &two, "carried and plain reservations, {}", at);
        prop_assert_eq!(
            one.outcome,
            KnownOutcome::Reserve(placed),
            "outcome, {}",
            at
        );
        prop_assert_eq!(one.counters[0], read[0], "current bucket, {}", at);
        prop_assert_eq!(one.previous[0], read[1].used, "previous bucket, {}", at);
        prop_assert!(read[0].total() <= LIMIT, "over the limit, {}", at);
        // Field for field, not only in sum: the carried bills and the reservation wrote the
        // holds hash exactly as the bills sent alone and the reservation after them did.
        let (carried_holds, plain_holds) = holds_hashes(server, &carried_prefix, &plain_prefix);
        prop_assert_eq!(carried_holds, plain_holds, "holds hashes, {}", at);
        if one.outcome == KnownOutcome::Reserve(usage_guard::internals::ReserveOutcome::Reserved) {
            open.push(Open {
                id,
                bucket,
                hold: step.hold,
                minute,
            });
        }
    }
    // What each store holds at the end, read alike.
    let keys: Vec<CounterKey> = (0..=(now - BASE) / BUCKET_MS).map(key).collect();
    let reads: Vec<Vec<CounterRead>> = [&carried as &dyn CounterStore, &plain, &memory]
        .iter()
        .map(|store| block_on(store.read(keys.clone(), now)).unwrap())
        .collect();
    prop_assert_eq!(&reads[0], &reads[1], "final reads, carried and plain");
    prop_assert_eq!(&reads[0], &reads[2], "final reads, Redis and memory");
    Ok(())
}

/// Runs 48 random sequences (each on keys of its own, so one that shrinks replays on a
/// clean store).
fn run_cases(fenced: bool) {
    let server = RedisServer::start();
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&steps(), |steps| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            replay(&server, n, &steps, fenced)
        })
        .unwrap();
}

#[test]
fn carried_bills_answer_as_bills_sent_alone_and_as_the_memory_store() {
    run_cases(false);
}

#[test]
fn so_they_do_with_the_epoch_fence_on() {
    run_cases(true);
}

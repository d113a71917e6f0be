//! The guard on a real redis-server, driven by a manual clock: admission, billing, guards
//! sharing one budget, sliding windows, and what happens while Redis is down.
#![cfg(feature = "redis")]

use crate::common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::redis_server::{RedisCluster, RedisServer};
use usage_guard::Reason;
use usage_guard::{AdmitRequest, Error, Guard, ManualClock, Policy, RedisStore, Usage};

/// 2026-01-01T10:20:00Z.
const T0: i64 = 1_767_262_800_000;

fn policy(extra: &str) -> Policy {
    Policy::from_toml(&format!(
        r#"
[models.gpt-5]
display_name = "GPT-5"
provider = "openai"
max_output_tokens = 1000

[[limits.direct]]
user = "alice"
model = "gpt-5"
rules = [{{ metric = "tokens", amount = 1000, window = "day" }}]
{extra}
"#
    ))
    .expect("valid policy")
}

fn guard(store: &RedisStore, clock: &Arc<ManualClock>, policy: Policy) -> Guard {
    Guard::new(policy, Arc::new(store.clone()), clock.clone())
}

/// Two guards of `policy("")` on one store of `server`, on one manual clock at T0.
fn two_guards(server: &RedisServer) -> (Arc<ManualClock>, Guard, Guard) {
    let store = RedisStore::connect(&server.url(), "ug").unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (a, b) = (
        guard(&store, &clock, policy("")),
        guard(&store, &clock, policy("")),
    );
    (clock, a, b)
}

fn ask(user: &str, max_tokens: u64) -> AdmitRequest {
    AdmitRequest {
        user: Some(user.into()),
        model: "gpt-5".into(),
        prompt_tokens: Some(100),
        prompt_is_estimate: false,
        max_output_tokens: Some(max_tokens),
        ..AdmitRequest::default()
    }
}

fn used(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

fn refusal(result: usage_guard::Result<usage_guard::Ticket>) -> Box<usage_guard::Refusal> {
    match result {
        Err(Error::Refused(r)) => r,
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, got a ticket"),
    }
}

#[test]
fn two_guards_share_one_budget_on_redis() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), "ug").unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let a = guard(&store, &clock, policy(""));
    let b = guard(&store, &clock, policy(""));
    let t1 = a.admit_blocking(ask("alice", 500)).unwrap();
    assert_eq!(
        t1.ceiling().tokens,
        Some(600),
        "prompt 100 + output 500 fits in 1000"
    );
    // b sees a's hold of 600: only 400 is left.
    let t2 = b.admit_blocking(ask("alice", 500)).unwrap();
    assert_eq!(t2.ceiling().tokens, Some(400));
    // Nothing used yet: the two calls in progress hold it all, and the refusal says so.
    let r = refusal(a.admit_blocking(ask("alice", 10)));
    assert_eq!(r.reason, Reason::HeldByCalls);
    t1.bill_blocking(used(100, 200)).unwrap().unwrap();
    t2.release_blocking();
    let view = futures::executor::block_on(b.usage(Some("alice"), "gpt-5")).unwrap();
    assert_eq!(view.rules[0].used, 300);
    // The next day starts empty.
    clock.advance(86_400_000);
    let t3 = b.admit_blocking(ask("alice", 1000)).unwrap();
    assert_eq!(t3.ceiling().tokens, Some(1000));
}

#[test]
fn sliding_window_on_redis_follows_the_manual_clock() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), "ug").unwrap();
    let clock = Arc::new(ManualClock::new(T0 - 40 * 60_000)); // 09:40
    let extra = r#"
[[limits.direct]]
user = "bob"
model = "gpt-5"
rules = [{ metric = "tokens", amount = 2000, window = "hour" }]
"#;
    let g = guard(&store, &clock, policy(extra));
    let t = g.admit_blocking(ask("bob", 1000)).unwrap();
    t.bill_blocking(used(400, 1000)).unwrap().unwrap();
    // At 10:20, 40 of the previous bucket's 60 minutes are still inside the window:
    // 1400 * 40 / 60 = 933.3 carries, rounded up.
    clock.set(T0);
    let t = g.admit_blocking(ask("bob", 1000)).unwrap();
    assert_eq!(t.ceiling().tokens, Some(2000 - 934));
}

#[test]
fn redis_down_refuses_as_unavailable_then_recovers_by_itself() {
    let mut server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), "ug").unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let g = guard(&store, &clock, policy(""));
    let held = g.admit_blocking(ask("alice", 100)).unwrap();
    server.kill();
    let started = Instant::now();
    let r = refusal(g.admit_blocking(ask("alice", 100)));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r.reason, Reason::Unavailable);
    assert_eq!(r.message, "Usage limits cannot be checked right now");
    let http = r.to_http(usage_guard::HttpShape::OpenAi);
    assert_eq!(http.status, 503);
    // A bill that cannot reach Redis is not an error: it is counted, reported as pending
    // (it may still land) and retried in the background by ticket id.
    let billed = held.bill_blocking(used(10, 10)).unwrap().unwrap();
    assert_eq!(billed.recorded, usage_guard::Recorded::Pending);
    assert!(
        g.stats()
            .settle_failures
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match g.admit_blocking(ask("alice", 100)) {
            Ok(t) => {
                assert_eq!(t.ceiling().tokens, Some(200));
                break;
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("no recovery within 10 s: {e}"),
        }
    }
}

#[test]
fn a_guard_starts_while_redis_is_down() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.kill();
    let store = RedisStore::connect(&url, "ug").unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let g = guard(&store, &clock, policy(""));
    assert_eq!(
        refusal(g.admit_blocking(ask("alice", 100))).reason,
        Reason::Unavailable
    );
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while g.admit_blocking(ask("alice", 100)).is_err() {
        assert!(Instant::now() < deadline, "no recovery within 10 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn fail_open_rules_run_uncounted_while_redis_is_down() {
    let mut server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), "ug").unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let p = Policy::from_toml(
        r#"
[settings]
fail_open = ["requests"]

[models.gpt-5]
provider = "openai"

[[limits.direct]]
user = "carol"
model = "gpt-5"
rules = [{ metric = "requests", amount = 10, window = "minute" }]
"#,
    )
    .unwrap();
    let g = guard(&store, &clock, p);
    server.kill();
    let t = g.admit_blocking(ask("carol", 100)).unwrap();
    assert!(t.is_uncounted());
    assert!(t.bill_blocking(used(1, 1)).unwrap().is_some());
    let stats = g.stats().snapshot();
    let uncounted = stats.iter().find(|(k, _)| *k == "uncounted").unwrap().1;
    assert_eq!(uncounted, 1);
}

#[test]
fn guard_on_a_cluster_admits_and_bills() {
    let cluster = RedisCluster::shared();
    let store = RedisStore::cluster(&cluster.urls(), "ug-guard").unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let g = guard(&store, &clock, policy(""));
    let t = g.admit_blocking(ask("alice", 500)).unwrap();
    t.bill_blocking(used(100, 300)).unwrap().unwrap();
    let t = g.admit_blocking(ask("alice", 1000)).unwrap();
    assert_eq!(t.ceiling().tokens, Some(600));
}

/// Scripts run since the last `CONFIG RESETSTAT`: by SHA or as functions.
fn evalsha_calls(server: &RedisServer) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    let calls = |head: &str| -> u64 {
        stats
            .lines()
            .find(|l| l.starts_with(head))
            .and_then(|l| l.split("calls=").nth(1))
            .and_then(|rest| rest.split(',').next())
            .map(|n| n.parse().unwrap())
            .unwrap_or(0)
    };
    calls("cmdstat_evalsha:") + calls("cmdstat_fcall:")
}

#[test]
fn one_round_trip_per_admission_from_known_values_and_one_per_bill() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), "ug").unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let g = guard(&store, &clock, policy(""));
    // Warm up: the first call of each script loads it (NOSCRIPT, SCRIPT LOAD, EVALSHA), the
    // settle's and the one that carries settles with a reservation.
    for _ in 0..3 {
        let t = g.admit_blocking(ask("alice", 10)).unwrap();
        t.bill_blocking(used(1, 1)).unwrap();
    }
    g.admit_blocking(ask("alice", 10))
        .unwrap()
        .bill_with_options_blocking(used(1, 1), Default::default(), true)
        .unwrap();
    assert!(futures::executor::block_on(g.flush(None)));
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]), "OK");
    let t = g.admit_blocking(ask("alice", 10)).unwrap();
    assert_eq!(evalsha_calls(&server), 1, "reserve from the values known");
    t.bill_with_options_blocking(used(1, 1), Default::default(), true)
        .unwrap();
    assert_eq!(evalsha_calls(&server), 2, "one settle");
    let t = g.admit_blocking(ask("alice", 10)).unwrap();
    assert!(t.release_blocking());
    assert_eq!(evalsha_calls(&server), 4, "reserve + one settle");
    // A queued bill rides with the next reservation (one script for both), unless the drain
    // sent it first: either way one script per step.
    let carried = |g: &Guard| g.stats().settles_carried.load(Ordering::Relaxed);
    let before = carried(&g);
    let t = g.admit_blocking(ask("alice", 10)).unwrap();
    t.bill_blocking(used(1, 1)).unwrap();
    let _t = g.admit_blocking(ask("alice", 10)).unwrap();
    assert!(futures::executor::block_on(g.flush(None)));
    let rode = carried(&g) - before;
    assert_eq!(evalsha_calls(&server), 4 + 3 - rode, "carried: {rode}");
    assert!(
        t.bill_blocking(used(1, 1)).unwrap().is_none(),
        "billed once"
    );
    // Known values decide however old they are (the script checks them): still one script.
    clock.advance(600_000);
    let before = evalsha_calls(&server);
    let _open = g.admit_blocking(ask("alice", 10)).unwrap();
    assert_eq!(
        evalsha_calls(&server),
        before + 1,
        "reserve from 10-minute-old values"
    );
}

/// A decision from known values that rests on what is left (here an output maximum lowered
/// to fit) is made again from a read: another guard's hold given back since leaves room the
/// known values do not show, and the call gets its full output maximum.
#[test]
fn a_ceiling_lowered_from_known_values_is_decided_again_from_a_read() {
    let server = RedisServer::start();
    let (clock, a, b) = two_guards(&server);
    // B holds 800 of alice's 1,000 tokens; A learns it (its own 110 held on top), and gives
    // its hold back.
    let open = b.admit_blocking(ask("alice", 700)).unwrap();
    assert!(a
        .admit_blocking(ask("alice", 10))
        .unwrap()
        .release_blocking());
    assert!(open.release_blocking());
    clock.advance(5_000);
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]), "OK");
    // From what A knows (910 held), 500 would be lowered to fit; from the read, nothing is
    // held and 500 fits whole.
    let t = a.admit_blocking(ask("alice", 500)).unwrap();
    assert_eq!(t.ceiling().max_output_tokens, 500);
    assert_eq!(evalsha_calls(&server), 2, "read + reserve");
    assert!(t.release_blocking());
    // Values the call's own reserve answered are known now: the next call, far from the
    // limit, reserves at once.
    clock.advance(5_000);
    let before = evalsha_calls(&server);
    let t = a.admit_blocking(ask("alice", 10)).unwrap();
    assert_eq!(t.ceiling().max_output_tokens, 10);
    assert_eq!(evalsha_calls(&server), before + 1, "reserve alone");
}

#[test]
fn stale_known_values_retry_from_the_values_the_reserve_answered() {
    let server = RedisServer::start();
    let (_clock, a, b) = two_guards(&server);
    // A learns the counter (nothing used), then B uses 950 of the 1000 behind A's back.
    assert!(a
        .admit_blocking(ask("alice", 10))
        .unwrap()
        .release_blocking());
    let t = b.admit_blocking(ask("alice", 900)).unwrap();
    t.bill_blocking(used(100, 850)).unwrap();
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]), "OK");
    // A decides from what it knows (room), the script finds 950 used: nothing placed, and A
    // refuses from the values the script answered, with no read of its own.
    let r = refusal(a.admit_blocking(ask("alice", 10)));
    assert_eq!(r.reason, Reason::DoesNotFit);
    assert_eq!(evalsha_calls(&server), 1, "one reserve, no read");
    let stats = a.stats();
    assert_eq!(
        stats
            .reserve_retries
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let view = futures::executor::block_on(b.usage(Some("alice"), "gpt-5")).unwrap();
    assert_eq!((view.rules[0].used, view.rules[0].reserved), (950, 0));
}

#[test]
fn scripts_are_loaded_again_after_script_flush() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), "ug").unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let g = guard(&store, &clock, policy(""));
    g.admit_blocking(ask("alice", 100))
        .unwrap()
        .bill_blocking(used(100, 100))
        .unwrap();
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    let t = g.admit_blocking(ask("alice", 1000)).unwrap();
    assert_eq!(t.ceiling().tokens, Some(800));
    assert_eq!(
        g.stats()
            .store_errors
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[test]
fn cluster_store_recovers_when_its_master_comes_back() {
    let mut cluster = RedisCluster::start();
    let store = RedisStore::cluster(&cluster.urls(), "ug-fail").unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let g = guard(&store, &clock, policy(""));
    g.admit_blocking(ask("alice", 100)).unwrap();
    let owner = cluster
        .nodes
        .iter()
        .position(|n| !n.cli(&["KEYS", "*"]).is_empty())
        .expect("some master holds the store's slot");
    cluster.nodes[owner].kill();
    assert_eq!(
        refusal(g.admit_blocking(ask("alice", 100))).reason,
        Reason::Unavailable
    );
    cluster.nodes[owner].restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    while let Err(e) = g.admit_blocking(ask("alice", 100)) {
        assert!(Instant::now() < deadline, "no recovery within 15 s: {e}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn batch_results_are_billed_once_across_guards_on_redis() {
    use usage_guard::{BatchRequest, BillInfo, Metric};
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(T0));
    let extra = r#"
[[limits.direct]]
user = "dora"
model = "gpt-5"
rules = [{ metric = "tokens", amount = 1000000, window = "day" }]
"#;
    let guards: Vec<Guard> = (0..3)
        .map(|_| {
            let store = RedisStore::connect(&server.url(), "ug").unwrap();
            guard(&store, &clock, policy(extra))
        })
        .collect();
    let requests = (0..20)
        .map(|i| BatchRequest {
            id: format!("r{i}"),
            prompt_tokens: 100,
            max_output_tokens: Some(100),
        })
        .collect();
    let batch =
        futures::executor::block_on(guards[0].admit_batch("dora", "gpt-5", requests)).unwrap();
    assert_eq!(batch.reserved(), vec![(Metric::Tokens, 4_000)]);
    let state = batch.state();
    let billed: usize = std::thread::scope(|s| {
        let handles: Vec<_> = guards
            .iter()
            .map(|g| {
                let state = &state;
                s.spawn(move || {
                    let mine = g.resume_batch(state).unwrap();
                    (0..20)
                        .filter(|i| {
                            let rid = format!("r{i}");
                            let part = mine.bill_part(&rid, used(100, 30), BillInfo::default());
                            futures::executor::block_on(part).unwrap().is_some()
                        })
                        .count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(billed, 20, "each result billed once across three guards");
    let view = futures::executor::block_on(guards[1].usage(Some("dora"), "gpt-5")).unwrap();
    assert_eq!((view.rules[0].used, view.rules[0].reserved), (20 * 130, 0));
}

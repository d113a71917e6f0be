//! The Redis store's scripts as one function library (docs/redis.md, "Scripts and
//! functions"): loaded once per server and called with `FCALL`, loaded again when the server
//! lost it, and left for `EVALSHA` where the server will not run functions; the process check
//! of the epoch fence reads `INFO` once per Lua state, never a state of another process.
#![cfg(feature = "redis")]

use crate::common;

use common::redis_server::RedisServer;

use futures::executor::block_on;
use usage_guard::internals::{
    expiry_minute, CounterKey, Fence, FenceAnswer, HoldRef, ReserveItem, ReserveOutcome, Settle,
    UsageAdd,
};
use usage_guard::{CounterStore, Millis, RedisStore, StoreError};

/// 2026-01-01T00:00:30Z.
const T0: Millis = 1_767_225_630_000;

fn counter() -> CounterKey {
    common::tokens_key_in("alice", "day", T0 - 30_000)
}

fn item(hold: u64) -> ReserveItem {
    ReserveItem {
        key: counter(),
        hold,
        limit: Some(1_000_000),
        carried: 0,
        retain_until: T0 + 2 * 86_400_000,
    }
}

fn minute() -> i64 {
    expiry_minute(T0, 15 * 60_000)
}

/// The bill of ticket `id`: gives back its hold of 10, adds 7.
fn bill(id: &str) -> Settle {
    Settle {
        id: id.into(),
        ticket: id.into(),
        holds: vec![HoldRef {
            key: counter(),
            amount: 10,
        }],
        expiry_minute: minute(),
        adds: vec![UsageAdd {
            key: counter(),
            amount: 7,
            retain_until: T0 + 2 * 86_400_000,
        }],
        settled_until: T0 + 300_000,
    }
}

/// A fenced reservation of 10 under generation "g".
fn reserve_fenced(store: &RedisStore, ticket: &str) -> ReserveOutcome {
    let store: &dyn CounterStore = store;
    let fence = Fence {
        generation: "g".into(),
        fenced: vec![true],
    };
    block_on(store.reserve_fenced(ticket.into(), vec![item(10)], minute(), T0, fence)).unwrap()
}

/// A reservation of 10 without the fence (no epoch needed).
fn reserve_unfenced(store: &RedisStore, ticket: &str) -> Result<ReserveOutcome, StoreError> {
    let store: &dyn CounterStore = store;
    block_on(store.reserve(ticket.into(), vec![item(10)], minute(), T0))
}

/// Reserves and bills `n` tickets named `<name>-<i>`, the bills in one pipeline.
fn reserve_and_bill(store: &RedisStore, name: &str, n: usize) {
    let tickets: Vec<String> = (0..n).map(|i| format!("{name}-{i}")).collect();
    for ticket in &tickets {
        assert_eq!(reserve_fenced(store, ticket), ReserveOutcome::Reserved);
    }
    let settles: Vec<Settle> = tickets.iter().map(|t| bill(t)).collect();
    let background = store
        .background_settling()
        .expect("a Redis store settles in batches");
    for outcome in block_on(background.settle_many(&settles, T0)).unwrap() {
        outcome.unwrap();
    }
}

/// The calls of `command` that ran without an error, in `stats` (`INFO commandstats`: calls
/// less failed_calls; a script not loaded yet fails and is sent again).
fn calls(stats: &str, command: &str) -> u64 {
    let head = format!("cmdstat_{command}:");
    let Some(line) = stats.lines().find_map(|line| line.strip_prefix(&head)) else {
        return 0;
    };
    let field = |name: &str| -> u64 {
        line.split(',')
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .unwrap()
            .parse()
            .unwrap()
    };
    field("calls") - field("failed_calls")
}

fn used(store: &RedisStore) -> u64 {
    let store: &dyn CounterStore = store;
    block_on(store.read(vec![counter()], T0)).unwrap()[0].used
}

/// A store at `url` with an epoch of generation "g" written by this process.
fn fenced_store(url: &str) -> RedisStore {
    let store = RedisStore::connect(url, "fn").unwrap();
    let fencing: &dyn CounterStore = &store;
    assert!(block_on(fencing.set_epoch("g".into(), T0, None, false, 0)).unwrap());
    store
}

/// After one fenced reserve and bill, 20 more, as functions or by SHA: the server's
/// commandstats of those 20 (what the store used, and the `INFO`s they asked).
fn twenty_fenced_calls(functions: bool) -> (RedisServer, String) {
    let server = RedisServer::start();
    let store = fenced_store(&server.url());
    if !functions {
        store.without_functions();
    }
    reserve_and_bill(&store, "a", 1);
    server.cli(&["CONFIG", "RESETSTAT"]);
    reserve_and_bill(&store, "b", 20);
    let stats = server.cli(&["INFO", "commandstats"]);
    assert_eq!(store.uses_functions(), functions);
    assert_eq!(used(&store), 21 * 7);
    let library = server.cli(&["FUNCTION", "LIST"]).contains("usage_guard_");
    assert_eq!(library, functions, "a library only when calling functions");
    (server, stats)
}

#[test]
fn fenced_calls_run_as_functions_and_read_the_process_once() {
    let (_server, stats) = twenty_fenced_calls(true);
    assert_eq!(calls(&stats, "evalsha"), 0, "no script by SHA");
    assert_eq!(calls(&stats, "fcall"), 20 + 20, "20 reserves, 20 bills");
    // The first fenced reserve asked which process this is; the library's Lua state kept
    // the answer for the next 20.
    assert_eq!(calls(&stats, "info"), 0);
}

#[test]
fn by_sha_every_fenced_call_reads_the_process() {
    let (_server, stats) = twenty_fenced_calls(false);
    assert_eq!(calls(&stats, "fcall"), 0);
    assert_eq!(calls(&stats, "evalsha"), 20 + 20);
    assert_eq!(calls(&stats, "info"), 20);
}

#[test]
fn a_library_lost_is_loaded_again_for_single_calls_and_pipelines() {
    let server = RedisServer::start();
    let store = fenced_store(&server.url());
    reserve_and_bill(&store, "a", 3);
    server.cli(&["FUNCTION", "FLUSH"]);
    // The next reserve finds no function, loads the library and runs.
    assert_eq!(reserve_fenced(&store, "b"), ReserveOutcome::Reserved);
    server.cli(&["FUNCTION", "FLUSH"]);
    // So does a pipeline of bills: sent again whole, each bill lands once.
    let background = store.background_settling().unwrap();
    let settles = [bill("b"), bill("b"), bill("a-0")];
    let outcomes = block_on(background.settle_many(&settles, T0)).unwrap();
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    assert!(store.uses_functions());
    assert_eq!(used(&store), 4 * 7, "three bills of a, one of b");
}

#[test]
fn a_user_who_may_not_call_functions_gets_the_scripts_by_sha() {
    let server = RedisServer::start();
    let acl = ["~*", "&*", "+@all", "-fcall", "-function"];
    server.cli(&[&["ACL", "SETUSER", "plain", "on", ">pw"][..], &acl[..]].concat());
    let url = server.url().replace("redis://", "redis://plain:pw@");
    let store = fenced_store(&url);
    reserve_and_bill(&store, "a", 5);
    assert!(!store.uses_functions());
    assert_eq!(used(&store), 5 * 7);
    // Nothing was half-loaded: the server holds no library.
    assert!(!server.cli(&["FUNCTION", "LIST"]).contains("usage_guard_"));
}

#[test]
fn another_process_is_fenced_though_it_loaded_the_same_library_from_disk() {
    let mut server = RedisServer::start();
    let store = fenced_store(&server.url());
    assert_eq!(reserve_fenced(&store, "a"), ReserveOutcome::Reserved);
    // The epoch, the counters and the library come back from the RDB; the Lua state, and
    // so the run_id it read, do not.
    assert_eq!(server.cli(&["SAVE"]), "OK");
    server.restart();
    assert!(server.cli(&["FUNCTION", "LIST"]).contains("usage_guard_"));
    assert_eq!(
        reserve_fenced(&store, "b"),
        ReserveOutcome::Fenced(FenceAnswer::Untrusted)
    );
}

#[test]
fn a_library_of_the_same_name_without_the_functions_falls_back_to_sha() {
    let server = RedisServer::start();
    let store = fenced_store(&server.url());
    reserve_and_bill(&store, "a", 1);
    // Another library now holds the name (a broken deploy, a hand-made one): loading ours
    // answers "already exists", and calling ours, "Function not found".
    let listing = server.cli(&["FUNCTION", "LIST"]);
    let name = listing
        .lines()
        .find(|line| line.starts_with("usage_guard_"))
        .expect("the library's name")
        .to_string();
    server.cli(&["FUNCTION", "DELETE", &name]);
    let other = format!(
        "#!lua name={name}\nredis.register_function('{name}_other', function() return 1 end)"
    );
    assert_eq!(server.cli(&["FUNCTION", "LOAD", &other]), name);
    reserve_and_bill(&store, "b", 3);
    assert!(!store.uses_functions());
    assert_eq!(used(&store), 4 * 7);
}

#[test]
fn a_server_out_of_memory_fails_the_call_and_keeps_the_library_for_later() {
    let server = RedisServer::start();
    let store = fenced_store(&server.url());
    // Full: the library cannot be loaded now (OOM), which says nothing of later.
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    assert!(reserve_unfenced(&store, "a").is_err());
    assert!(store.uses_functions());
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    reserve_and_bill(&store, "b", 2);
    // Full again, with the library loaded: a reservation is refused, a read answers (`read`
    // is registered allow-oom, as a script by SHA would run it).
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    assert!(reserve_unfenced(&store, "c").is_err());
    assert_eq!(used(&store), 2 * 7);
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    assert!(store.uses_functions());
    assert!(server.cli(&["FUNCTION", "LIST"]).contains("usage_guard_"));
    assert_eq!(used(&store), 2 * 7);
}

#[test]
fn a_replica_keeps_the_library_for_after_its_promotion() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    let port = primary
        .url()
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    replica.cli(&["REPLICAOF", "127.0.0.1", &port]);
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let store = RedisStore::connect(&replica.url(), "fn").unwrap();
    // A replica refuses the load (READONLY) as it refuses the call's writes: the call fails,
    // and says nothing of the server the replica becomes.
    assert!(reserve_unfenced(&store, "a").is_err());
    assert!(store.uses_functions());
    replica.cli(&["REPLICAOF", "NO", "ONE"]);
    let fencing: &dyn CounterStore = &store;
    assert!(block_on(fencing.set_epoch("g".into(), T0, None, false, 0)).unwrap());
    reserve_and_bill(&store, "b", 2);
    assert!(store.uses_functions());
    assert_eq!(used(&store), 2 * 7);
}

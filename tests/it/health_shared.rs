//! Provider health shared through the store: the notes `raise_until` writes (a later end is
//! kept, an ended one reads as none), and two guards on one store, where a breaker one opens
//! or a cooldown one starts is seen by the other once it reads the notes again (within
//! 500 ms of guard time). On the memory store and on a real redis-server.

use std::sync::Arc;

use futures::executor::block_on;
use usage_guard::{
    CounterStore, Guard, ManualClock, MemoryStore, Outcome, Policy, UnavailableReason,
};

/// 2026-01-01T00:00:30Z.
const T0: i64 = 1_767_225_630_000;

fn notes_keep_the_later_end(store: &dyn CounterStore) {
    block_on(store.raise_until("a".into(), T0 + 5_000, "open".into(), T0)).unwrap();
    block_on(store.raise_until("a".into(), T0 + 2_000, "shorter".into(), T0)).unwrap();
    block_on(store.raise_until("b:with|bar".into(), T0 + 1_000, "x|y".into(), T0)).unwrap();
    let keys = vec![
        "a".to_string(),
        "b:with|bar".to_string(),
        "none".to_string(),
    ];
    let read = block_on(store.read_until(keys.clone(), T0 + 1)).unwrap();
    assert_eq!(
        read,
        vec![
            Some((T0 + 5_000, "open".to_string())),
            Some((T0 + 1_000, "x|y".to_string())),
            None
        ]
    );
    // Past its end a note reads as none (guard time, not the store's).
    let read = block_on(store.read_until(keys, T0 + 1_000)).unwrap();
    assert_eq!(read[1], None);
    assert!(read[0].is_some());
}

fn two_guards(store: Arc<dyn CounterStore>) -> (Guard, Guard, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    let policy = || Policy::from_toml("").unwrap();
    let a = Guard::new(policy(), store.clone(), clock.clone());
    let b = Guard::new(policy(), store, clock.clone());
    (a, b, clock)
}

fn one_opens_the_other_sees(store: Arc<dyn CounterStore>) {
    let (a, b, clock) = two_guards(store);
    // B looks first: closed, and it trusts that for 500 ms.
    assert!(block_on(b.health().available("openai", "K")).is_ok());
    for i in 0..5 {
        // Two callers: one caller's failures alone never open a breaker.
        let caller = ["key-a", "key-b"][i % 2];
        block_on(
            a.health()
                .record("openai", "K", caller, Outcome::Retryable, &[]),
        );
    }
    assert!(block_on(a.health().available("openai", "K")).is_err());
    assert!(block_on(b.health().available("openai", "K")).is_ok());
    clock.advance(500);
    let seen = block_on(b.health().available("openai", "K")).unwrap_err();
    assert_eq!(seen.reason, UnavailableReason::BreakerOpen);
    assert_eq!(seen.until, T0 + 10_000);
    // B half-opens on its own at the shared end, with its own probes.
    clock.set(T0 + 10_000);
    assert!(block_on(b.health().take("openai", "K")).is_ok());
    // A cooldown is shared too, for its credential only.
    let headers = vec![("retry-after".to_string(), "30".to_string())];
    block_on(
        a.health()
            .record("anthropic", "K1", "key-a", Outcome::RateLimited, &headers),
    );
    clock.advance(500);
    let cooled = block_on(b.health().available("anthropic", "K1")).unwrap_err();
    assert_eq!(cooled.reason, UnavailableReason::RateLimited);
    assert_eq!(cooled.until, a.clock().now_ms() - 500 + 30_000);
    assert!(block_on(b.health().available("anthropic", "K2")).is_ok());
}

#[test]
fn memory_notes_keep_the_later_end() {
    notes_keep_the_later_end(&MemoryStore::new());
}

#[test]
fn memory_guards_share_health() {
    one_opens_the_other_sees(Arc::new(MemoryStore::new()));
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use crate::common::redis_server::RedisServer;
    use usage_guard::RedisStore;

    #[test]
    fn redis_notes_keep_the_later_end() {
        let server = RedisServer::start();
        notes_keep_the_later_end(&RedisStore::connect(&server.url(), "health").unwrap());
    }

    #[test]
    fn redis_guards_share_health() {
        let server = RedisServer::start();
        let store = RedisStore::connect(&server.url(), "health").unwrap();
        one_opens_the_other_sees(Arc::new(store));
    }
}

//! What the lease tests share: a Model Total policy, a memory store leasing from the first
//! call, the Model Total's key, and a call's reserve item and whole settle on it.

use std::sync::Arc;

use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::{at, policy, OnceHook, GPT5};
use usage_guard::internals::{
    CounterKey, CounterRead, HoldRef, PartsSettle, ReserveItem, ReserveOutcome, Settle,
    SettleOutcome, StoreFuture, UsageAdd,
};
use usage_guard::{
    CounterStore, Guard, LeaseOptions, LeasedStore, ManualClock, MemoryStore, StoreError, Usage,
};

pub const NOW: &str = "2026-11-30T10:00:00Z";
const DAY_MS: i64 = 86_400_000;

/// gpt-5 with people's budgets that never bind and a Model Total of `amount` tokens a day.
pub fn model_total_policy(amount: u64) -> String {
    format!(
        "{GPT5}
[[limits.public]]
model = \"gpt-5\"
each_person = [{{ metric = \"tokens\", amount = 1000000, window = \"day\" }}]

[[limits.model_total]]
model = \"gpt-5\"
rules = [{{ metric = \"tokens\", amount = {amount}, window = \"day\" }}]
"
    )
}

/// `inner`, leasing its shared counters from the first call.
pub fn leasing(inner: &Arc<MemoryStore>) -> LeasedStore {
    let options = LeaseOptions {
        above_per_second: 0.0,
        ..LeaseOptions::default()
    };
    LeasedStore::new(inner.clone(), options)
}

/// A memory store, the same store leasing, and a guard on the latter with a Model Total of
/// `amount` (a manual clock at `NOW`).
pub fn leasing_guard(amount: u64) -> (Arc<MemoryStore>, LeasedStore, Guard) {
    let inner = Arc::new(MemoryStore::new());
    let leased = leasing(&inner);
    let clock = Arc::new(ManualClock::new(at(NOW)));
    let guard = Guard::new(
        policy(&model_total_policy(amount)),
        Arc::new(leased.clone()),
        clock,
    );
    (inner, leased, guard)
}

/// The Model Total's key (today's bucket at `NOW`).
pub fn model_key(guard: &Guard) -> CounterKey {
    let path = guard.path(Some("u0"), "gpt-5").unwrap();
    let id = path
        .counters
        .iter()
        .find(|c| c.scope == usage_guard::Scope::ModelTotal)
        .unwrap()
        .clone();
    CounterKey {
        bucket: id.window.bucket_start(at(NOW)),
        id,
    }
}

/// The Model Total's key (of `amount`), from a guard on a plain memory store.
pub fn model_total_key(amount: u64) -> CounterKey {
    let policy = policy(&model_total_policy(amount));
    let clock = Arc::new(ManualClock::new(at(NOW)));
    model_key(&Guard::new(policy, Arc::new(MemoryStore::new()), clock))
}

/// A call's hold of `hold` on `key`, checked against `limit`.
pub fn item(key: &CounterKey, hold: u64, limit: u64) -> ReserveItem {
    ReserveItem {
        key: key.clone(),
        hold,
        limit: Some(limit),
        carried: 0,
        retain_until: at(NOW) + DAY_MS,
    }
}

/// The whole settle of ticket `id`: its hold of `hold` on `key` (placed under `minute`)
/// given back, `used` added (none: a release).
pub fn whole_settle(id: &str, key: &CounterKey, hold: u64, used: u64, minute: i64) -> Settle {
    let now = at(NOW);
    Settle {
        id: id.into(),
        ticket: id.into(),
        holds: vec![HoldRef {
            key: key.clone(),
            amount: hold,
        }],
        expiry_minute: minute,
        adds: (used > 0)
            .then(|| UsageAdd {
                key: key.clone(),
                amount: used,
                retain_until: now + DAY_MS,
            })
            .into_iter()
            .collect(),
        settled_until: now + 300_000,
    }
}

/// Usage of `input` prompt and `output` answer tokens.
pub fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

/// A store inside (`inner`) whose next `read` first runs a hook (a renewal reads the counter
/// first), and which places a reservation and answers an error: a lease's while
/// `fail_leases`, a call's while `fail_calls` (a time-out after the request was sent).
#[derive(Default)]
pub struct Hooked<S> {
    pub inner: S,
    pub on_read: OnceHook,
    pub fail_leases: AtomicBool,
    pub fail_calls: AtomicBool,
}

impl<S> Hooked<S> {
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // (a Redis store's tests use it)
    pub fn new(inner: S) -> Self {
        Hooked {
            inner,
            on_read: OnceHook::default(),
            fail_leases: AtomicBool::new(false),
            fail_calls: AtomicBool::new(false),
        }
    }
}

impl<S> std::fmt::Debug for Hooked<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hooked")
    }
}

impl<S: CounterStore> CounterStore for Hooked<S> {
    fn read(&self, keys: Vec<CounterKey>, now: i64) -> StoreFuture<'_, Vec<CounterRead>> {
        self.on_read.run();
        self.inner.read(keys, now)
    }

    fn reserve(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: i64,
    ) -> StoreFuture<'_, ReserveOutcome> {
        let fail = match ticket.starts_with("lease-") {
            true => &self.fail_leases,
            false => &self.fail_calls,
        };
        if fail.load(Ordering::SeqCst) {
            return StoreFuture::boxed(async move {
                let placed = self.inner.reserve(ticket, items, expiry_minute, now).await;
                assert_eq!(placed.unwrap(), ReserveOutcome::Reserved);
                Err(StoreError(
                    "the connection reset after the request was sent".into(),
                ))
            });
        }
        self.inner.reserve(ticket, items, expiry_minute, now)
    }

    fn settle(&self, settle: &Settle, now: i64) -> StoreFuture<'_, SettleOutcome> {
        self.inner.settle(settle, now)
    }

    fn settle_parts(&self, settle: &PartsSettle, now: i64) -> StoreFuture<'_, Vec<SettleOutcome>> {
        self.inner.settle_parts(settle, now)
    }
}

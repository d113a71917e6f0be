//! Counter stores: where counters live. A store only reads counters and applies holds and
//! usage atomically; it never decides. The same decision code serves every store.

mod memory;
mod redis;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use memory::MemoryStore;
pub use redis::{RedisStore, REDIS_TIMEOUT};

use super::clock::Millis;
use super::rule::CounterId;

/// One counter in one time bucket.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CounterKey {
    pub id: Arc<CounterId>,
    /// The bucket's start (0 for concurrency counters).
    pub bucket: Millis,
}

impl CounterKey {
    /// A stable text form, `<counter>:<bucket start in seconds>`, for stores keyed by text.
    pub fn render(&self) -> String {
        format!("{}:{}", self.id.render(), self.bucket.div_euclid(1000))
    }
}

/// What a counter holds at an instant: billed use and live holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterRead {
    pub used: u64,
    /// The sum of holds that have not expired.
    pub held: u64,
}

impl CounterRead {
    /// Used plus held.
    pub fn total(&self) -> u64 {
        self.used.saturating_add(self.held)
    }
}

/// One hold to place (and, with a limit, to check) in an all-or-none reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReserveItem {
    pub key: CounterKey,
    pub hold: u64,
    /// The amount of the tightest rule checked on this counter; `None` when the call only
    /// adds to it. With a limit, the store requires `counted < limit` and
    /// `counted + hold <= limit`, where `counted = used + live holds + carried`.
    pub limit: Option<u64>,
    /// What the previous bucket carries into a sliding window, computed by the guard at the
    /// same instant (it can only shrink afterwards, so checking with it is safe).
    pub carried: u64,
    /// Until when the counter must be kept.
    pub retain_until: Millis,
}

/// The outcome of a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReserveOutcome {
    /// Every hold was placed.
    Reserved,
    /// Item `item` did not fit; nothing was placed.
    Conflict { item: usize },
}

/// A hold to give back when a ticket settles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldRef {
    pub key: CounterKey,
    pub amount: u64,
}

/// Use to add to a counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageAdd {
    pub key: CounterKey,
    pub amount: u64,
    pub retain_until: Millis,
}

/// A store could not be reached or answered with an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("counter store error: {0}")]
pub struct StoreError(pub String);

/// A store operation in flight.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The minute number a hold expires at: holds are grouped by expiry minute (`r<minute>`).
pub fn expiry_minute(now: Millis, hold_for_ms: i64) -> i64 {
    (now + hold_for_ms).div_euclid(60_000) + 1
}

/// Whether holds of `minute` are still live at `now`.
pub fn hold_is_live(minute: i64, now: Millis) -> bool {
    minute * 60_000 > now
}

/// Where counters live. Implementations make `reserve` and `settle` atomic across all
/// their items, and ignore (and clean) expired holds.
pub trait CounterStore: Send + Sync + std::fmt::Debug {
    /// Reads every key at `now`, in order. Missing counters read as zero.
    fn read(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<CounterRead>>;

    /// Checks every item with a limit and, only if all fit, places every hold under
    /// `expiry_minute`.
    fn reserve(
        &self,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
    ) -> StoreFuture<'_, ReserveOutcome>;

    /// In one step, takes back `holds` (placed under `expiry_minute`; a hold already expired
    /// is left alone) and adds `adds` to the counters.
    fn settle(
        &self,
        holds: Vec<HoldRef>,
        expiry_minute: i64,
        adds: Vec<UsageAdd>,
        now: Millis,
    ) -> StoreFuture<'_, ()>;

    /// Whether each key is marked filled from the ledger (a counter past its retention, or
    /// never written, is not). The default, for stores that cannot fill, reports every
    /// counter as filled, so none is ever filled (counters then start at 0 after a restart).
    fn filled(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<bool>> {
        let _ = now;
        Box::pin(std::future::ready(Ok(vec![true; keys.len()])))
    }

    /// Fills a counter from the ledger, in one step: unless it is already marked filled,
    /// sets `used = max(used, ledger_used)`, marks it filled and keeps it until at least
    /// `retain_until`. Returns whether this call filled it. The default fills nothing.
    fn fill(
        &self,
        key: CounterKey,
        ledger_used: u64,
        retain_until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, bool> {
        let _ = (key, ledger_used, retain_until, now);
        Box::pin(std::future::ready(Ok(false)))
    }

    /// Sets the mark `mark` (any text; stores escape it) if it is not set, keeping it until
    /// `keep_until`. Returns true for the one call that set it. The default fails: a store
    /// without marks cannot bill batch results exactly once, so batches are refused on it.
    fn mark_once(&self, mark: String, keep_until: Millis, now: Millis) -> StoreFuture<'_, bool> {
        let _ = (mark, keep_until, now);
        Box::pin(std::future::ready(Err(StoreError(
            "this counter store has no marks (batches need them)".into(),
        ))))
    }
}

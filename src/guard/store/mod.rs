//! Counter stores: where counters live. A store only reads counters and applies holds and
//! usage atomically; it never decides. The same decision code serves every store.

mod capabilities;
mod lease;
mod memory;
mod memory_tickets;
mod memory_wait_queues;
mod outage;
#[cfg(feature = "redis")]
mod redis;
mod wait_queues;

use std::future::Future;
use std::pin::Pin;

pub(crate) use capabilities::StoreWays;
pub use capabilities::{BackgroundSettling, Fencing, ReserveFromKnown};
pub(crate) use lease::give_back_everywhere;
pub use lease::{LeaseOptions, LeasedStore};
pub use memory::MemoryStore;
pub use outage::OutageLog;
#[cfg(feature = "redis")]
pub use redis::{Migrated, RedisStore};
#[cfg(feature = "python")]
pub(crate) use redis::{REDIS_TIMEOUT, TIMEOUT_RANGE as REDIS_TIMEOUT_RANGE};
pub use wait_queues::{QueueJoin, QueueSpot, WaitQueues};

pub(crate) use crate::guard::domain::clock::Millis;
pub(crate) use crate::guard::domain::counter::hold_is_live;
pub use crate::guard::domain::counter::{
    expiry_minute, CounterKey, CounterRead, FenceAnswer, HoldRef, KnownAnswer, KnownOutcome,
    KnownReserve, PartSettle, PartsSettle, ReserveItem, ReserveOutcome, Settle, SettleOutcome,
    UsageAdd,
};

/// A store's epoch as read (docs/redis.md, "The epoch fence").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochRead {
    /// The generation, `None` when the store has no epoch.
    pub generation: Option<String>,
    /// Whether the epoch was written by the store process answering now (a restarted,
    /// failed-over or reloaded Redis answers with another process).
    pub trusted: bool,
}

/// What a fenced reserve needs: the generation the guard trusts (empty for none yet) and,
/// per item, whether its rule is fenced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fence {
    pub generation: String,
    pub fenced: Vec<bool>,
}

/// The outcome of the store's configuration checks (`noeviction`, destructive commands
/// denied to the connection's ACL user).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCheck {
    /// Every check passed (or the store needs none).
    Passed,
    /// A check failed or could not be verified (an unreadable answer is not a pass).
    Failed,
    /// No check has finished yet.
    Pending,
}

/// A store could not be reached or answered with an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("counter store error: {0}")]
pub struct StoreError(pub String);

/// A store operation in flight: an answer already made (the memory store answers at once,
/// with no allocation), or the boxed work of a store that waits on the network.
pub struct StoreFuture<'a, T>(Answer<'a, T>);

enum Answer<'a, T> {
    Ready(Option<Result<T, StoreError>>),
    Boxed(Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>),
}

impl<'a, T> StoreFuture<'a, T> {
    /// An operation already answered.
    pub fn ready(answer: Result<T, StoreError>) -> Self {
        StoreFuture(Answer::Ready(Some(answer)))
    }

    /// An operation still to run.
    pub fn boxed(work: impl Future<Output = Result<T, StoreError>> + Send + 'a) -> Self {
        StoreFuture(Answer::Boxed(Box::pin(work)))
    }
}

// The answer is moved out, never pinned: the future is `Unpin` whatever `T` is.
impl<T> Unpin for StoreFuture<'_, T> {}

impl<T> Future for StoreFuture<'_, T> {
    type Output = Result<T, StoreError>;

    fn poll(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match &mut self.get_mut().0 {
            Answer::Ready(answer) => {
                std::task::Poll::Ready(answer.take().expect("a store answer is polled once"))
            }
            Answer::Boxed(work) => work.as_mut().poll(cx),
        }
    }
}

/// Where counters live. Implementations make `reserve` and `settle` atomic across all
/// their items, and ignore (and clean) expired holds. Holds belong to a counter, not to a
/// bucket, and are known by ticket id (see `counter`). What only some stores can do (fence,
/// reserve from known values, settle in the background, keep wait queues) is a capability
/// trait the store returns from its accessor (`capabilities.rs`); the defaults offer none.
/// The types its methods take and answer are in `usage_guard::internals` (not a stable API):
/// a guard is built on `Arc<dyn CounterStore>`, and a store written outside the crate
/// implements it with them.
pub trait CounterStore: Send + Sync + std::fmt::Debug {
    /// Reads every key at `now`, in order: the bucket's use and every live hold of its
    /// counter. Missing counters read as zero.
    fn read(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<CounterRead>>;

    /// For ticket `ticket`: unless it already settled (`Settled`) or already reserved
    /// (`Reserved`, nothing placed twice), checks every item with a limit and, only if all
    /// fit, places every hold under `expiry_minute` and records that the reservation landed.
    fn reserve(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
    ) -> StoreFuture<'_, ReserveOutcome>;

    /// In one step, unless `settle.id` already settled: gives back `settle.holds` (see
    /// `Settle`), adds `settle.adds` and marks `settle.id` settled. Idempotent by id.
    fn settle(&self, settle: &Settle, now: Millis) -> StoreFuture<'_, SettleOutcome>;

    /// The store's fair FIFO wait queues (`throttle` rules wait in them). The default: none,
    /// and a throttled call waits on its refusal's `resets_at` alone.
    fn queues(&self) -> Option<&dyn WaitQueues> {
        None
    }

    /// The store's epoch fence (a store whose state can be lost while guards keep running).
    /// The default (the memory store, whose state dies with the process): none, so admission
    /// builds no fence and a fenced reserve is a plain one.
    fn fencing(&self) -> Option<&dyn Fencing> {
        None
    }

    /// Whether, and how, admission decides from known counter values and reserves in one step
    /// (a store across a network, where a read costs a round trip). The default (the memory
    /// store): none, admission reads, then reserves.
    fn reserve_from_known(&self) -> Option<&dyn ReserveFromKnown> {
        None
    }

    /// How bills settle in the background, pipelined (a store across a network, where a
    /// settle costs a round trip). The default, for stores that answer at once (the memory
    /// store): none, bills settle inline.
    fn background_settling(&self) -> Option<&dyn BackgroundSettling> {
        None
    }

    /// The log of this store's outages: each logged once when it starts and once when it
    /// ends. The default is one log shared by every store that keeps none of its own, so one
    /// such store's endless outage hides the start of another's: keep one per store.
    fn outage(&self) -> &OutageLog {
        &outage::SHARED_OUTAGE
    }

    /// Whether each key is marked filled from the ledger (a counter past its retention, or
    /// never written, is not). The default, for stores that cannot fill, reports every
    /// counter as filled, so none is ever filled (counters then start at 0 after a restart).
    fn filled(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<bool>> {
        let _ = now;
        StoreFuture::ready(Ok(vec![true; keys.len()]))
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
        StoreFuture::ready(Ok(false))
    }

    /// The latest outcome of the store checks; with `wait`, when none has finished yet,
    /// runs one (coalesced with any in flight) and answers its outcome. The default: passed.
    fn store_check(&self, wait: bool) -> StoreFuture<'_, StoreCheck> {
        let _ = wait;
        StoreFuture::ready(Ok(StoreCheck::Passed))
    }

    /// Gives back what this process leased of the store's counters (`LeasedStore`), with the
    /// use billed against it; answers how many leases could not be. The default leases
    /// nothing.
    fn give_back_leases(&self) -> StoreFuture<'_, usize> {
        StoreFuture::ready(Ok(0))
    }

    /// Sets the mark `mark` (any text; stores escape it) if it is not set, keeping it until
    /// `keep_until`. Returns true for the one call that set it. The default fails: a store
    /// without marks cannot bill batch results exactly once, so batches are refused on it.
    fn mark_once(&self, mark: String, keep_until: Millis, now: Millis) -> StoreFuture<'_, bool> {
        let _ = (mark, keep_until, now);
        StoreFuture::ready(Err(StoreError(
            "this counter store has no marks (batches need them)".into(),
        )))
    }

    /// Sets the note `key` (any text; stores escape it) to `(until, note)` unless it holds a
    /// later `until` still ahead of `now`; it is kept until `until` (at least a second).
    /// Provider health shares open breakers and cooldowns this way. The default keeps
    /// nothing: each guard then only knows its own health.
    fn raise_until(
        &self,
        key: String,
        until: Millis,
        note: String,
        now: Millis,
    ) -> StoreFuture<'_, ()> {
        let _ = (key, until, note, now);
        StoreFuture::ready(Ok(()))
    }

    /// The notes at `keys`, in order, written by `raise_until`: `(until, note)` for each still
    /// ahead of `now`, else `None`. The default knows none.
    fn read_until(
        &self,
        keys: Vec<String>,
        now: Millis,
    ) -> StoreFuture<'_, Vec<Option<(Millis, String)>>> {
        let _ = now;
        StoreFuture::ready(Ok(vec![None; keys.len()]))
    }

    /// In one step, for every part of `settle` (in order) whose record says it has not done
    /// so yet: gives back the part's share (once, if the batch's reservation landed), adds a
    /// bill's use (once), and records what it did until `settle.settled_until`. Returns, per
    /// part, `Settled` if this call gave back or billed it, else `AlreadySettled`. All or
    /// none per call. The default fails: batches are refused on a store without it.
    fn settle_parts(
        &self,
        settle: &PartsSettle,
        now: Millis,
    ) -> StoreFuture<'_, Vec<SettleOutcome>> {
        let _ = (settle, now);
        StoreFuture::ready(Err(StoreError(
            "this counter store cannot settle batch parts (batches need it)".into(),
        )))
    }
}

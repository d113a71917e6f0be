//! Counter stores: where counters live. A store only reads counters and applies holds and
//! usage atomically; it never decides. The same decision code serves every store.

mod memory;
mod memory_queue;
mod memory_tickets;
mod outage;
mod queues;
#[cfg(feature = "redis")]
mod redis;

use std::future::Future;
use std::pin::Pin;

pub use memory::MemoryStore;
pub use outage::OutageLog;
pub use queues::{QueueJoin, QueueSpot, WaitQueues};
#[cfg(feature = "redis")]
pub use redis::RedisStore;
#[cfg(feature = "python")]
pub(crate) use redis::{REDIS_TIMEOUT, TIMEOUT_RANGE as REDIS_TIMEOUT_RANGE};

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

/// A store operation in flight.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Where counters live. Implementations make `reserve` and `settle` atomic across all
/// their items, and ignore (and clean) expired holds. Holds belong to a counter, not to a
/// bucket, and are known by ticket id (see `counter`).
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

    /// Whether admission should decide from known counter values and reserve with
    /// `reserve_known` (a store across a network, where a read costs a round trip). The
    /// default (the memory store): no, admission reads, then reserves.
    fn reserves_from_known(&self) -> bool {
        false
    }

    /// In one step, for a reservation decided from known values: unless the ticket already
    /// settled or reserved, or the fence refuses, checks that every skipped source still has
    /// nothing left and no previous bucket counted grew (else `Moved`), then reserves as
    /// `reserve_fenced` does; answers the fresh values of every counter of the call. The
    /// default fails: admission only calls it when `reserves_from_known` says so.
    fn reserve_known(
        &self,
        reserve: KnownReserve,
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'_, KnownAnswer> {
        let _ = (reserve, now, fence);
        Box::pin(std::future::ready(Err(StoreError(
            "this counter store does not reserve from known values".into(),
        ))))
    }

    /// `settle_many(settles)`, then `reserve_known(reserve)`, in one step where the store can
    /// (Redis: one script): a queued bill rides with the next reservation instead of taking
    /// a round trip of its own. Each settle is as `settle` does (idempotent by id), and the
    /// reservation sees what they gave back and added. Answers the reservation and one result
    /// per settle, in order; the outer error is a failure of the whole step (each settle may
    /// or may not have landed). The default takes two steps.
    fn reserve_known_carrying<'a>(
        &'a self,
        reserve: KnownReserve,
        settles: &'a [Settle],
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'a, (KnownAnswer, Vec<Result<SettleOutcome, StoreError>>)> {
        Box::pin(async move {
            let settled = self.settle_many(settles, now).await?;
            Ok((self.reserve_known(reserve, now, fence).await?, settled))
        })
    }

    /// The log of this store's outages: each logged once when it starts and once when it
    /// ends. The default is one log shared by every store that keeps none of its own, so one
    /// such store's endless outage hides the start of another's: keep one per store.
    fn outage(&self) -> &OutageLog {
        &outage::SHARED_OUTAGE
    }

    /// Whether bills should settle in the background, pipelined (a store across a network,
    /// where a settle costs a round trip). The default, for stores that answer at once (the
    /// memory store): no, bills settle inline.
    fn settles_in_background(&self) -> bool {
        false
    }

    /// Settles every one of `settles` (each as `settle` does, idempotent by id) in as few
    /// round trips as the store can (Redis: one pipeline). Answers one result per settle, in
    /// order; the outer error is a failure of the whole step. The default settles one by one.
    fn settle_many<'a>(
        &'a self,
        settles: &'a [Settle],
        now: Millis,
    ) -> StoreFuture<'a, Vec<Result<SettleOutcome, StoreError>>> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(settles.len());
            for settle in settles {
                out.push(self.settle(settle, now).await);
            }
            Ok(out)
        })
    }

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

    /// `reserve`, fenced: when any item is fenced and the store's epoch cannot be trusted
    /// (missing, written by another store process, of another generation than
    /// `fence.generation`, or a counter it expects is missing), places nothing and answers
    /// `ReserveOutcome::Fenced`. The default (a store whose state dies with the process, like
    /// the memory store) needs no fence and ignores it.
    fn reserve_fenced(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'_, ReserveOutcome> {
        let _ = fence;
        self.reserve(ticket, items, expiry_minute, now)
    }

    /// Whether `reserve_fenced` checks its fence (a store whose state can be lost while
    /// guards keep running). The default, like the memory store: no, so admission skips
    /// building one.
    fn fences(&self) -> bool {
        false
    }

    /// Reads the epoch. The default: one generation (`""`), always trusted.
    fn epoch(&self) -> StoreFuture<'_, EpochRead> {
        Box::pin(std::future::ready(Ok(EpochRead {
            generation: Some(String::new()),
            trusted: true,
        })))
    }

    /// The epoch's generation alone (`None`: the store has none), without telling whether it
    /// may be trusted: a cheap first look for a guard waiting for a new one. The default
    /// reads the epoch.
    fn epoch_generation(&self) -> StoreFuture<'_, Option<String>> {
        Box::pin(async move { self.epoch().await.map(|read| read.generation) })
    }

    /// Takes the recovery lock for `token` for `ttl_ms` (store time) if no one holds it.
    /// The default always succeeds.
    fn epoch_lock(&self, token: String, ttl_ms: u64) -> StoreFuture<'_, bool> {
        let _ = (token, ttl_ms);
        Box::pin(std::future::ready(Ok(true)))
    }

    /// Gives the recovery lock back if `token` holds it.
    fn epoch_unlock(&self, token: String) -> StoreFuture<'_, ()> {
        let _ = token;
        Box::pin(std::future::ready(Ok(())))
    }

    /// Writes a new epoch of `generation` (written by the store process answering). With a
    /// `token`, only while that token holds the recovery lock; with `adopt`, only when the
    /// store has neither an epoch nor a counter (the initial adoption). Until
    /// `hold_again_until` (0: not at all), fenced reserves under it answer
    /// `FenceAnswer::HoldingAgain`. Returns whether it was written. The default writes
    /// nothing and answers true.
    fn set_epoch(
        &self,
        generation: String,
        now: Millis,
        token: Option<String>,
        adopt: bool,
        hold_again_until: Millis,
    ) -> StoreFuture<'_, bool> {
        let _ = (generation, now, token, adopt, hold_again_until);
        Box::pin(std::future::ready(Ok(true)))
    }

    /// The latest outcome of the store checks; with `wait`, when none has finished yet,
    /// runs one (coalesced with any in flight) and answers its outcome. The default: passed.
    fn store_check(&self, wait: bool) -> StoreFuture<'_, StoreCheck> {
        let _ = wait;
        Box::pin(std::future::ready(Ok(StoreCheck::Passed)))
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
        Box::pin(std::future::ready(Ok(())))
    }

    /// The notes at `keys`, in order, written by `raise_until`: `(until, note)` for each still
    /// ahead of `now`, else `None`. The default knows none.
    fn read_until(
        &self,
        keys: Vec<String>,
        now: Millis,
    ) -> StoreFuture<'_, Vec<Option<(Millis, String)>>> {
        let _ = now;
        Box::pin(std::future::ready(Ok(vec![None; keys.len()])))
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
        Box::pin(std::future::ready(Err(StoreError(
            "this counter store cannot settle batch parts (batches need it)".into(),
        ))))
    }
}

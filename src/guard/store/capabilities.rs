//! What a store can do beyond reading, reserving and settling: each capability is a trait of
//! its own that a store offers through `CounterStore` as `Option<&dyn …>` (as `queues()`
//! does), so a new store implements only `CounterStore` and opts into the rest. A guard
//! looks at which ones its store offers once, when it is built (`engine/shared.rs`,
//! `StoreWays`), as `limits` checks for its `MovingWindowSupport` mixin once.
//!
//! `impl dyn CounterStore` below answers for every store what the engine asks outside its
//! per-call branches (the epoch, a fenced reserve, many settles): through the capability when
//! the store offers it, else as a store without it behaves.

use super::{
    CounterStore, EpochRead, Fence, KnownAnswer, KnownReserve, Millis, ReserveItem, ReserveOutcome,
    Settle, SettleOutcome, StoreError, StoreFuture,
};

/// The epoch fence (docs/redis.md, "The epoch fence"), for a store whose state can be lost
/// while guards keep running: a reserve that checks the store's epoch, and the epoch itself.
pub trait Fencing: Send + Sync {
    /// `reserve`, fenced: when any item is fenced and the store's epoch cannot be trusted
    /// (missing, written by another store process, of another generation than
    /// `fence.generation`, or a counter it expects is missing), places nothing and answers
    /// `ReserveOutcome::Fenced`.
    fn reserve_fenced(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'_, ReserveOutcome>;

    /// Reads the epoch.
    fn epoch(&self) -> StoreFuture<'_, EpochRead>;

    /// The epoch's generation alone (`None`: the store has none), without telling whether it
    /// may be trusted: a cheap first look for a guard waiting for a new one.
    fn epoch_generation(&self) -> StoreFuture<'_, Option<String>>;

    /// Takes the recovery lock for `token` for `ttl_ms` (store time) if no one holds it.
    fn epoch_lock(&self, token: String, ttl_ms: u64) -> StoreFuture<'_, bool>;

    /// Gives the recovery lock back if `token` holds it.
    fn epoch_unlock(&self, token: String) -> StoreFuture<'_, ()>;

    /// Writes a new epoch of `generation` (written by the store process answering). With a
    /// `token`, only while that token holds the recovery lock; with `adopt`, only when the
    /// store has neither an epoch nor a counter (the initial adoption). Until
    /// `hold_again_until` (0: not at all), fenced reserves under it answer
    /// `FenceAnswer::HoldingAgain`. Returns whether it was written.
    fn set_epoch(
        &self,
        generation: String,
        now: Millis,
        token: Option<String>,
        adopt: bool,
        hold_again_until: Millis,
    ) -> StoreFuture<'_, bool>;
}

/// Reserving from known values, for a store across a network where a read costs a round
/// trip: admission decides from the values the guard already knows and the store checks
/// what the decision rested on in the same step as the reservation.
pub trait ReserveFromKnown: Send + Sync {
    /// In one step, for a reservation decided from known values: unless the ticket already
    /// settled or reserved, or the fence refuses, checks that every skipped source still has
    /// nothing left and no previous bucket counted grew (else `Moved`), then reserves as
    /// `reserve_fenced` does; answers the fresh values of every counter of the call.
    fn reserve_known(
        &self,
        reserve: KnownReserve,
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'_, KnownAnswer>;

    /// `settle_many(settles)`, then `reserve_known(reserve)`, in one step (Redis: one
    /// script): a queued bill rides with the next reservation instead of taking a round trip
    /// of its own. Each settle is as `settle` does (idempotent by id), and the reservation
    /// sees what they gave back and added. Answers the reservation and one result per settle,
    /// in order; the outer error is a failure of the whole step (each settle may or may not
    /// have landed).
    fn reserve_known_carrying<'a>(
        &'a self,
        reserve: KnownReserve,
        settles: &'a [Settle],
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'a, (KnownAnswer, Vec<Result<SettleOutcome, StoreError>>)>;
}

/// Settling in the background, for a store across a network where a settle costs a round
/// trip: bills are queued on the guard and sent together.
pub trait BackgroundSettling: Send + Sync {
    /// Settles every one of `settles` (each as `settle` does, idempotent by id) in as few
    /// round trips as the store can (Redis: one pipeline). Answers one result per settle, in
    /// order; the outer error is a failure of the whole step.
    fn settle_many<'a>(
        &'a self,
        settles: &'a [Settle],
        now: Millis,
    ) -> StoreFuture<'a, Vec<Result<SettleOutcome, StoreError>>>;
}

impl<'s> dyn CounterStore + 's {
    /// `Fencing::reserve_fenced`; a store without a fence (its state dies with the process,
    /// like the memory store's) reserves and ignores it.
    pub fn reserve_fenced(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'_, ReserveOutcome> {
        match self.fencing() {
            Some(f) => f.reserve_fenced(ticket, items, expiry_minute, now, fence),
            None => self.reserve(ticket, items, expiry_minute, now),
        }
    }

    /// `Fencing::epoch`; without a fence, one generation (`""`), always trusted.
    pub fn epoch(&self) -> StoreFuture<'_, EpochRead> {
        match self.fencing() {
            Some(f) => f.epoch(),
            None => StoreFuture::ready(Ok(EpochRead {
                generation: Some(String::new()),
                trusted: true,
            })),
        }
    }

    /// `Fencing::epoch_generation`; without a fence, `""`.
    pub fn epoch_generation(&self) -> StoreFuture<'_, Option<String>> {
        match self.fencing() {
            Some(f) => f.epoch_generation(),
            None => StoreFuture::ready(Ok(Some(String::new()))),
        }
    }

    /// `Fencing::epoch_lock`; without a fence, always taken.
    pub fn epoch_lock(&self, token: String, ttl_ms: u64) -> StoreFuture<'_, bool> {
        match self.fencing() {
            Some(f) => f.epoch_lock(token, ttl_ms),
            None => StoreFuture::ready(Ok(true)),
        }
    }

    /// `Fencing::epoch_unlock`; without a fence, nothing to give back.
    pub fn epoch_unlock(&self, token: String) -> StoreFuture<'_, ()> {
        match self.fencing() {
            Some(f) => f.epoch_unlock(token),
            None => StoreFuture::ready(Ok(())),
        }
    }

    /// `Fencing::set_epoch`; without a fence, writes nothing and answers true.
    pub fn set_epoch(
        &self,
        generation: String,
        now: Millis,
        token: Option<String>,
        adopt: bool,
        hold_again_until: Millis,
    ) -> StoreFuture<'_, bool> {
        match self.fencing() {
            Some(f) => f.set_epoch(generation, now, token, adopt, hold_again_until),
            None => StoreFuture::ready(Ok(true)),
        }
    }

    /// `BackgroundSettling::settle_many`; without it, settles one by one.
    pub fn settle_many<'a>(
        &'a self,
        settles: &'a [Settle],
        now: Millis,
    ) -> StoreFuture<'a, Vec<Result<SettleOutcome, StoreError>>> {
        if let Some(b) = self.background_settling() {
            return b.settle_many(settles, now);
        }
        StoreFuture::boxed(async move {
            let mut out = Vec::with_capacity(settles.len());
            for settle in settles {
                out.push(self.settle(settle, now).await);
            }
            Ok(out)
        })
    }
}

/// Which capabilities a store offers, looked up once when a guard is built and kept on it:
/// the engine's per-call branches (how admission reserves, how a bill settles, whether a
/// ticket is watched for a lost epoch) read these, never the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoreWays {
    /// The store fences (`Fencing`): admission builds a fence, open calls are watched.
    pub(crate) fences: bool,
    /// Admission decides from known values (`ReserveFromKnown`).
    pub(crate) from_known: bool,
    /// Bills settle in the background (`BackgroundSettling`).
    pub(crate) settles_in_background: bool,
    /// A throttled call waits in the store's queues (`WaitQueues`).
    pub(crate) queues: bool,
}

impl StoreWays {
    /// What `store` offers.
    pub(crate) fn of(store: &dyn CounterStore) -> Self {
        StoreWays {
            fences: store.fencing().is_some(),
            from_known: store.reserve_from_known().is_some(),
            settles_in_background: store.background_settling().is_some(),
            queues: store.queues().is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::store::MemoryStore;
    use futures::executor::block_on;

    /// The memory store offers wait queues alone, and through `dyn CounterStore` answers as
    /// a store without a fence did when these were `CounterStore`'s defaults: one epoch
    /// (`""`, trusted) that nothing rewrites, a lock always taken, a fence ignored.
    #[test]
    fn a_memory_store_offers_queues_alone_and_answers_as_a_store_without_a_fence() {
        let memory = MemoryStore::new();
        let store: &dyn CounterStore = &memory;
        let ways = StoreWays::of(store);
        let offered = (ways.fences, ways.from_known, ways.settles_in_background);
        assert_eq!(offered, (false, false, false));
        assert!(ways.queues);
        let one = EpochRead {
            generation: Some(String::new()),
            trusted: true,
        };
        assert_eq!(block_on(store.epoch()).unwrap(), one);
        assert_eq!(
            block_on(store.epoch_generation()).unwrap(),
            Some(String::new())
        );
        assert!(block_on(store.epoch_lock("t".into(), 1_000)).unwrap());
        assert!(block_on(store.set_epoch("g".into(), 0, None, true, 0)).unwrap());
        assert_eq!(block_on(store.epoch()).unwrap(), one, "nothing was written");
        let fence = Fence {
            generation: "another".into(),
            fenced: vec![],
        };
        let reserved = block_on(store.reserve_fenced("t1".into(), vec![], 0, 0, fence));
        assert_eq!(reserved.unwrap(), ReserveOutcome::Reserved);
        assert!(block_on(store.settle_many(&[], 0)).unwrap().is_empty());
    }
}

//! Leased shared counters (docs/redis.md, "Leases"): a store wrapped so that a counter every
//! call of a model or team touches is not a round trip to one hot Redis master per call.
//!
//! A guard process leases a slice of such a counter: a hold placed in the store under a
//! lease id of its own, with an expiry, and checked against the counter's amount like any
//! hold. Calls are then checked against the slice here, in memory; their bills add to the
//! slice's use, and the store is told in batches (the lease is renewed: a new hold covering
//! what open calls took plus a new slice, then the old one given back with the use billed
//! against it, each step one script). The slice is a share of what is left, so it shrinks as
//! the counter nears its amount, and leasing stops when a call no longer fits in one: then
//! calls reserve in the store as before. Leases are holds, so the amount is never exceeded;
//! what they hold unused is what other guards cannot take meanwhile (`unused`).
//!
//! Everything the engine asks goes through `CounterStore` unchanged: this wrapper answers
//! for leased counters and hands the rest to the store inside (`split.rs`).

mod book;
#[cfg(test)]
mod exit_tests;
mod flush;
mod narrow;
mod renew;
mod settles;
mod split;
mod timer;
mod wait;

pub(crate) use timer::give_back_everywhere;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use crate::fork::ForkLocal;
use crate::guard::domain::clock::Millis;
use crate::lock::Mutex;

use super::{
    BackgroundSettling, CounterKey, CounterRead, CounterStore, EpochRead, Fence, Fencing,
    KnownAnswer, KnownReserve, OutageLog, PartsSettle, ReserveFromKnown, ReserveItem,
    ReserveOutcome, Settle, SettleOutcome, StoreCheck, StoreError, StoreFuture, WaitQueues,
};
use book::Book;

/// When and how much a store leases.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseOptions {
    /// A shared counter is leased once this process reserves on it at least this many times
    /// a second (0: from its first call).
    pub above_per_second: f64,
    /// The most a slice takes of what is left of the counter (0 < share <= 1): with `n`
    /// guards leasing, at most `n × share` of what was left is held in slices.
    pub share: f64,
    /// How often the use billed against a lease is told to the store (ms): what a guard
    /// killed with `kill -9` can leave uncounted is the leased use of this long.
    pub refresh_ms: Millis,
    /// How long a lease's hold lives unless renewed: the headroom a killed guard's slices
    /// keep from others at most (ms).
    pub ttl_ms: Millis,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions {
            above_per_second: 20.0,
            share: 0.1,
            refresh_ms: 250,
            ttl_ms: 120_000,
        }
    }
}

/// A counter store whose shared counters this process leases (see the module).
#[derive(Clone)]
pub struct LeasedStore {
    core: Arc<Core>,
}

pub(crate) struct Core {
    inner: Arc<dyn CounterStore>,
    options: LeaseOptions,
    /// This process's leases: a forked child starts with none (its parent's are not its own).
    book: ForkLocal<Mutex<Book>>,
    /// This process's lease ids: a random prefix drawn in this process (a forked child draws
    /// its own: siblings never reuse each other's ids, nor the parent's) and a count.
    ids: ForkLocal<(u64, AtomicU64)>,
    /// The latest `now` a caller passed, and when (ns since `origin`), for the timer, which
    /// has no clock. Atomics, not a lock: a forked child may use them whatever its parent's
    /// threads were doing.
    last_now: AtomicI64,
    last_at: AtomicU64,
    origin: std::time::Instant,
    /// Woken when a renewal ends (calls wait for it rather than go to the store).
    renewed: tokio::sync::Notify,
    /// Whether this process's timer runs (per fork generation).
    timer: ForkLocal<std::sync::atomic::AtomicBool>,
}

impl Drop for Core {
    fn drop(&mut self) {
        timer::end_dropped(self);
    }
}

impl std::fmt::Debug for LeasedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedStore")
            .field("inner", &self.core.inner)
            .field("options", &self.core.options)
            .finish()
    }
}

impl LeasedStore {
    /// `inner`, leasing its shared counters as `options` say. `options.share` is clamped to
    /// (0, 1].
    pub fn new(inner: Arc<dyn CounterStore>, mut options: LeaseOptions) -> Self {
        options.share = options.share.clamp(1e-6, 1.0);
        options.refresh_ms = options.refresh_ms.max(10);
        options.ttl_ms = options.ttl_ms.max(60_000);
        let core = Arc::new(Core {
            inner,
            options,
            book: ForkLocal::empty(),
            ids: ForkLocal::empty(),
            last_now: AtomicI64::new(0),
            last_at: AtomicU64::new(0),
            origin: std::time::Instant::now(),
            timer: ForkLocal::empty(),
            renewed: tokio::sync::Notify::new(),
        });
        let mut stores = timer::STORES.lock();
        stores.retain(|store| store.strong_count() > 0);
        stores.push(Arc::downgrade(&core));
        drop(stores);
        LeasedStore { core }
    }

    /// What this process's slices hold and no open call has taken: headroom other guards
    /// cannot use until the slices are renewed or given back.
    pub fn unused(&self) -> u64 {
        self.core.book().lock().unused()
    }

    /// How many counters this process holds a lease on now.
    pub fn leases(&self) -> usize {
        let book = self.core.book().lock();
        book.slots.values().filter(|s| s.lease.is_some()).count()
    }

    /// Gives back every lease of this process: what no open call took, with the use billed
    /// against it added to the counters (what open calls took stays held until the lease's
    /// expiry). Answers how many leases could not be given back (the store did not answer).
    pub async fn give_back(&self) -> usize {
        timer::give_back_all(&self.core).await
    }
}

impl Core {
    fn book(&self) -> &Mutex<Book> {
        self.book.get()
    }

    /// Notes `now` for the timer.
    fn saw(&self, now: Millis) {
        if self.last_now.swap(now, Ordering::Relaxed) != now {
            let at = self.origin.elapsed().as_nanos() as u64;
            self.last_at.store(at, Ordering::Relaxed);
        }
    }

    /// The timer's idea of now: the latest `now` a caller passed, plus the time since.
    fn now(&self) -> Millis {
        let at = self.last_at.load(Ordering::Relaxed);
        let elapsed = (self.origin.elapsed().as_nanos() as u64).saturating_sub(at) / 1_000_000;
        self.last_now.load(Ordering::Relaxed) + elapsed as Millis
    }

    fn lease_id(&self) -> String {
        let (prefix, seq) = self.ids.get_or(|| (random_prefix(), AtomicU64::new(0)));
        let n = seq.fetch_add(1, Ordering::Relaxed);
        format!("lease-{prefix:012x}-{n:x}")
    }
}

/// A lease id prefix for this process (a forked child draws its own).
fn random_prefix() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    crate::fork::random_bits48(nanos)
}

impl CounterStore for LeasedStore {
    fn read(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<CounterRead>> {
        self.core.saw(now);
        StoreFuture::boxed(split::read(&self.core, keys, now))
    }

    fn reserve(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
    ) -> StoreFuture<'_, ReserveOutcome> {
        self.core.saw(now);
        StoreFuture::boxed(split::reserve(
            &self.core,
            ticket,
            items,
            expiry_minute,
            now,
            None,
        ))
    }

    fn settle(&self, settle: &Settle, now: Millis) -> StoreFuture<'_, SettleOutcome> {
        self.core.saw(now);
        match settles::strip(&self.core, settle, now) {
            Some(rest) => {
                StoreFuture::boxed(async move { self.core.inner.settle(&rest, now).await })
            }
            None => StoreFuture::ready(Ok(SettleOutcome::Settled)),
        }
    }

    fn queues(&self) -> Option<&dyn WaitQueues> {
        self.core.inner.queues()
    }

    fn fencing(&self) -> Option<&dyn Fencing> {
        self.core.inner.fencing().map(|_| self as &dyn Fencing)
    }

    fn reserve_from_known(&self) -> Option<&dyn ReserveFromKnown> {
        self.core
            .inner
            .reserve_from_known()
            .map(|_| self as &dyn ReserveFromKnown)
    }

    fn background_settling(&self) -> Option<&dyn BackgroundSettling> {
        self.core
            .inner
            .background_settling()
            .map(|_| self as &dyn BackgroundSettling)
    }

    fn outage(&self) -> &OutageLog {
        self.core.inner.outage()
    }

    fn filled(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<bool>> {
        self.core.inner.filled(keys, now)
    }

    fn fill(
        &self,
        key: CounterKey,
        used: u64,
        until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, bool> {
        self.core.inner.fill(key, used, until, now)
    }

    fn store_check(&self, wait: bool) -> StoreFuture<'_, StoreCheck> {
        self.core.inner.store_check(wait)
    }

    fn mark_once(&self, mark: String, keep_until: Millis, now: Millis) -> StoreFuture<'_, bool> {
        self.core.inner.mark_once(mark, keep_until, now)
    }

    fn raise_until(
        &self,
        key: String,
        until: Millis,
        note: String,
        now: Millis,
    ) -> StoreFuture<'_, ()> {
        self.core.inner.raise_until(key, until, note, now)
    }

    fn read_until(
        &self,
        keys: Vec<String>,
        now: Millis,
    ) -> StoreFuture<'_, Vec<Option<(Millis, String)>>> {
        self.core.inner.read_until(keys, now)
    }

    fn settle_parts(
        &self,
        settle: &PartsSettle,
        now: Millis,
    ) -> StoreFuture<'_, Vec<SettleOutcome>> {
        self.core.inner.settle_parts(settle, now)
    }

    fn give_back_leases(&self) -> StoreFuture<'_, usize> {
        StoreFuture::boxed(async move { Ok(self.give_back().await) })
    }
}

impl Fencing for LeasedStore {
    fn reserve_fenced(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'_, ReserveOutcome> {
        self.core.saw(now);
        let work = split::reserve(&self.core, ticket, items, expiry_minute, now, Some(fence));
        StoreFuture::boxed(work)
    }

    fn epoch(&self) -> StoreFuture<'_, EpochRead> {
        self.core.inner.epoch()
    }

    fn epoch_generation(&self) -> StoreFuture<'_, Option<String>> {
        self.core.inner.epoch_generation()
    }

    fn epoch_lock(&self, token: String, ttl_ms: u64) -> StoreFuture<'_, bool> {
        self.core.inner.epoch_lock(token, ttl_ms)
    }

    fn epoch_unlock(&self, token: String) -> StoreFuture<'_, ()> {
        self.core.inner.epoch_unlock(token)
    }

    fn set_epoch(
        &self,
        generation: String,
        now: Millis,
        token: Option<String>,
        adopt: bool,
        hold_again_until: Millis,
    ) -> StoreFuture<'_, bool> {
        let inner = &self.core.inner;
        inner.set_epoch(generation, now, token, adopt, hold_again_until)
    }
}

impl ReserveFromKnown for LeasedStore {
    fn reserve_known(
        &self,
        reserve: KnownReserve,
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'_, KnownAnswer> {
        self.core.saw(now);
        let work = split::reserve_known(&self.core, reserve, Vec::new(), now, fence);
        StoreFuture::boxed(async move { work.await.map(|(answer, _)| answer) })
    }

    fn reserve_known_carrying<'a>(
        &'a self,
        reserve: KnownReserve,
        settles: &'a [Settle],
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'a, (KnownAnswer, Vec<Result<SettleOutcome, StoreError>>)> {
        self.core.saw(now);
        let stripped = settles
            .iter()
            .map(|s| settles::strip(&self.core, s, now))
            .collect();
        StoreFuture::boxed(split::reserve_known(
            &self.core, reserve, stripped, now, fence,
        ))
    }
}

impl BackgroundSettling for LeasedStore {
    fn settle_many<'a>(
        &'a self,
        settles: &'a [Settle],
        now: Millis,
    ) -> StoreFuture<'a, Vec<Result<SettleOutcome, StoreError>>> {
        self.core.saw(now);
        let stripped: Vec<Option<Settle>> = settles
            .iter()
            .map(|s| settles::strip(&self.core, s, now))
            .collect();
        StoreFuture::boxed(settles::settle_many(&self.core, stripped, now))
    }
}

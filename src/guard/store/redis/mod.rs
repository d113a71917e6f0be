//! The Redis store: counters shared by every guard that points at one Redis or Redis Cluster.
//!
//! Each counter bucket is a hash (`u` used, `e` retain-until; the rest in `common.lua`) at
//! `<tag>:c:<counter>:<bucket>`; a counter's holds, whatever their bucket, are one hash of
//! sums by expiry minute (`r<minute>`) at `<tag>:h:<counter>`; a ticket's record is a string
//! at `<tag>:t:<ticket id>`. In the shared layout every key has the tag `{<prefix>}`, so one
//! Lua script reads, reserves or settles several counters atomically, on one node or a
//! cluster; with slot groups (`groups.rs`) each owner's counters have a tag of their own and
//! an operation runs one script per group. Times are the caller's, never the server's.

mod args;
mod blocking;
mod carry;
mod checks;
mod connect;
mod connection;
mod epoch;
mod group_join;
mod group_known;
mod group_reserve;
mod group_sweep;
mod groups;
mod here;
mod keys;
mod known;
mod marks;
mod migrate;
mod parts;
mod pipeline;
mod redis_wait_queues;
mod scripts;

use std::sync::Arc;
use std::time::Duration;

use checks::Checks;
use connection::Target;
use scripts::{invoke, Scripts};

use super::{
    BackgroundSettling, CounterKey, CounterRead, CounterStore, EpochRead, Fence, Fencing,
    KnownAnswer, KnownReserve, OutageLog, PartsSettle, ReserveFromKnown, ReserveItem,
    ReserveOutcome, Settle, SettleOutcome, StoreCheck, StoreError, StoreFuture, WaitQueues,
};
use crate::fork::ForkLocal;
use crate::guard::domain::clock::Millis;

pub(crate) use connection::REDIS_TIMEOUT;
#[cfg(feature = "python")]
pub(crate) use connection::TIMEOUT_RANGE;
pub use migrate::Migrated;

struct Inner {
    target: Target,
    scripts: Scripts,
    /// The tag of the store's own keys: `{<escaped prefix>}`, or `{<escaped prefix>:2}` with
    /// slot groups.
    home: String,
    /// With slot groups, the start of a group's tag: `{<escaped prefix>:2:` (the owner and
    /// `}` follow); `None` in the shared layout.
    group_head: Option<String>,
    /// `<home>:c:`
    key_head: String,
    /// `<home>:m:`
    mark_head: String,
    /// `<home>:epoch` and its recovery lock `…:lock`.
    epoch_key: String,
    lock_key: String,
    /// The ACL user the connection logs in as, if the URL names one (the store checks ask
    /// whether it may run destructive commands).
    acl_user: Option<String>,
    /// The store checks of this process (a forked child checks its own connection).
    checks: ForkLocal<Checks>,
    /// The bound on one operation.
    operation_timeout: Duration,
    description: String,
    /// This store's outages, logged once each (`CounterStore::outage`).
    outage: OutageLog,
}

/// Counters in Redis or Redis Cluster, shared by every guard (in any process) that uses the
/// same server and prefix. Cheap to clone; clones share one multiplexed connection.
///
/// Guarantees: `reserve` checks and places all holds in one Lua script (all or none);
/// `settle` takes holds back and adds use in one script, never taking a hold below zero, once
/// per ticket id (a settled mark outlives any hold of the ticket, so a late reservation
/// places nothing); `settle_parts` settles many parts of a batch in one script, each once;
/// expired holds are ignored and deleted; every operation is one round trip
/// (plus one `SCRIPT LOAD` the first time a server sees a script) and fails with `StoreError`
/// within 2.5 × the store's timeout (1 s unless given) when Redis cannot answer; the store
/// reconnects by itself when Redis is back.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.inner.description)
            .field("home", &self.inner.home)
            .field("slot_groups", &self.inner.group_head.is_some())
            .finish()
    }
}

impl CounterStore for RedisStore {
    fn read(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<CounterRead>> {
        match self.grouped() {
            true => self.read_grouped(keys, now),
            false => self.read_call(keys, now),
        }
    }

    fn reserve(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
    ) -> StoreFuture<'_, ReserveOutcome> {
        self.reserve_fenced(ticket, items, expiry_minute, now, Fence::default())
    }

    fn settle(&self, settle: &Settle, now: Millis) -> StoreFuture<'_, SettleOutcome> {
        match self.grouped() {
            true => self.settle_grouped(settle, now),
            false => self.settle_one_call(settle, now),
        }
    }

    fn outage(&self) -> &OutageLog {
        &self.inner.outage
    }

    fn settle_parts(
        &self,
        settle: &PartsSettle,
        now: Millis,
    ) -> StoreFuture<'_, Vec<SettleOutcome>> {
        self.settle_parts_call(settle, now)
    }

    fn filled(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<bool>> {
        self.filled_call(keys, now)
    }

    fn fill(
        &self,
        key: CounterKey,
        used: u64,
        until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, bool> {
        self.fill_call(key, used, until, now)
    }

    fn store_check(&self, wait: bool) -> StoreFuture<'_, StoreCheck> {
        self.check_store(wait)
    }

    fn fencing(&self) -> Option<&dyn Fencing> {
        Some(self)
    }

    fn reserve_from_known(&self) -> Option<&dyn ReserveFromKnown> {
        Some(self)
    }

    fn background_settling(&self) -> Option<&dyn BackgroundSettling> {
        Some(self)
    }

    fn queues(&self) -> Option<&dyn WaitQueues> {
        Some(self)
    }

    fn mark_once(&self, mark: String, keep_until: Millis, now: Millis) -> StoreFuture<'_, bool> {
        self.mark_once_call(mark, keep_until, now)
    }

    fn raise_until(
        &self,
        key: String,
        until: Millis,
        note: String,
        now: Millis,
    ) -> StoreFuture<'_, ()> {
        self.raise_until_call(key, until, note, now)
    }

    fn read_until(
        &self,
        keys: Vec<String>,
        now: Millis,
    ) -> StoreFuture<'_, Vec<Option<(Millis, String)>>> {
        self.read_until_call(keys, now)
    }
}

impl Fencing for RedisStore {
    fn reserve_fenced(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'_, ReserveOutcome> {
        if items.is_empty() {
            return StoreFuture::ready(Ok(ReserveOutcome::Reserved));
        }
        if self.grouped() {
            return self.reserve_grouped(ticket, items, expiry_minute, now, fence);
        }
        let home = &self.inner.home;
        let (redis_keys, args) =
            self.reserve_call(home, &ticket, &items, expiry_minute, now, fence);
        self.run("reserve", move |inner, mut conn| async move {
            let answer: i64 = invoke(&inner.scripts.reserve, &redis_keys, &args, &mut conn).await?;
            if answer == -2 {
                // Another Redis process answers: check its configuration too.
                Checks::request(&inner);
            }
            if let Some(fenced) = known::fence_answer(answer) {
                return Ok(ReserveOutcome::Fenced(fenced));
            }
            Ok(match answer {
                -1 => ReserveOutcome::Reserved,
                -5 => ReserveOutcome::Settled,
                item => ReserveOutcome::Conflict {
                    item: item as usize,
                },
            })
        })
    }

    fn epoch(&self) -> StoreFuture<'_, EpochRead> {
        self.read_epoch()
    }

    fn epoch_generation(&self) -> StoreFuture<'_, Option<String>> {
        self.read_generation()
    }

    fn epoch_lock(&self, token: String, ttl_ms: u64) -> StoreFuture<'_, bool> {
        self.lock_epoch(token, ttl_ms)
    }

    fn epoch_unlock(&self, token: String) -> StoreFuture<'_, ()> {
        self.unlock_epoch(token)
    }

    fn set_epoch(
        &self,
        generation: String,
        now: Millis,
        token: Option<String>,
        adopt: bool,
        hold_again_until: Millis,
    ) -> StoreFuture<'_, bool> {
        self.write_epoch(generation, now, token, adopt, hold_again_until)
    }
}

impl ReserveFromKnown for RedisStore {
    fn reserve_known(
        &self,
        reserve: KnownReserve,
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'_, KnownAnswer> {
        match self.grouped() {
            true => self.reserve_known_grouped(reserve, now, fence),
            false => self.reserve_known_call(reserve, now, fence),
        }
    }

    fn reserve_known_carrying<'a>(
        &'a self,
        reserve: KnownReserve,
        settles: &'a [Settle],
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'a, (KnownAnswer, Vec<Result<SettleOutcome, StoreError>>)> {
        match self.grouped() {
            true => self.carry_grouped(reserve, settles, now, fence),
            false => self.carry_call(reserve, settles, now, fence),
        }
    }
}

impl BackgroundSettling for RedisStore {
    fn settle_many<'a>(
        &'a self,
        settles: &'a [Settle],
        now: Millis,
    ) -> StoreFuture<'a, Vec<Result<SettleOutcome, StoreError>>> {
        match self.grouped() {
            true => self.settle_many_grouped(settles, now),
            false => self.settle_many_call(settles, now),
        }
    }
}

//! The Redis store: counters shared by every guard that points at one Redis or Redis Cluster.
//!
//! Each counter bucket is a hash (`u` used, `e` retain-until; the rest in `common.lua`) at
//! `{<prefix>}:c:<counter>:<bucket>`; a counter's holds, whatever their bucket, are one hash of
//! sums by expiry minute (`r<minute>`) at `{<prefix>}:h:<counter>`; a ticket's record is a
//! string at `{<prefix>}:t:<ticket id>`. Every key shares the hash tag `{<prefix>}`, so one
//! Lua script reads, reserves or settles several counters atomically, on one node or a
//! cluster. Times are the caller's, never the server's.

mod args;
mod blocking;
mod carry;
mod checks;
mod connection;
mod epoch;
mod here;
mod keys;
mod known;
mod marks;
mod parts;
mod pipeline;
mod redis_wait_queues;
mod scripts;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::cluster::ClusterClient;
use redis::Client;

use checks::Checks;
use connection::{check_timeout, store_error, Target};
use keys::key_head;
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

struct Inner {
    target: Target,
    scripts: Scripts,
    /// `{<escaped prefix>}:c:`
    key_head: String,
    /// `{<escaped prefix>}:m:`
    mark_head: String,
    /// `{<escaped prefix>}:epoch` and its recovery lock `…:lock`.
    epoch_key: String,
    lock_key: String,
    /// The ACL user the connection logs in as, if the URL names one (the store checks ask
    /// whether it may run destructive commands).
    acl_user: Option<String>,
    /// The store checks of this process (a forked child checks its own connection).
    checks: ForkLocal<Checks>,
    /// `{<escaped prefix>}:h:`
    holds_head: String,
    /// `{<escaped prefix>}:t:`
    ticket_head: String,
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
            .field("key_head", &self.inner.key_head)
            .finish()
    }
}

impl RedisStore {
    /// A store on one Redis node at `url` (`redis://host:port/db`), with every key under the
    /// hash tag `{prefix}`. Only the URL is checked here: the connection is made on first use
    /// and remade after failures, so a guard can start while Redis is down.
    pub fn connect(url: &str, prefix: &str) -> Result<Self, StoreError> {
        Self::connect_with_timeout(url, prefix, REDIS_TIMEOUT)
    }

    /// `connect`, with `timeout` (within `TIMEOUT_RANGE`) as the bound on connecting and on
    /// each answer; one operation fails after at most 2.5 × `timeout`.
    pub fn connect_with_timeout(
        url: &str,
        prefix: &str,
        timeout: Duration,
    ) -> Result<Self, StoreError> {
        check_timeout(timeout)?;
        let client = Client::open(url).map_err(|e| store_error("url", e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let user = client.get_connection_info().redis_settings().username();
        let acl_user = user.map(str::to_string);
        Ok(Self::with_target(
            Target::single(client, config),
            prefix,
            url.to_string(),
            timeout,
            acl_user,
        ))
    }

    /// A store on the Redis Cluster reachable through any of `urls`, with every key under the
    /// hash tag `{prefix}` (so all of this store's counters live in one slot). Only the URLs
    /// are checked here; the cluster is connected on first use.
    pub fn cluster(urls: &[String], prefix: &str) -> Result<Self, StoreError> {
        Self::cluster_with_timeout(urls, prefix, REDIS_TIMEOUT)
    }

    /// `cluster`, with `timeout` as in `connect_with_timeout`.
    pub fn cluster_with_timeout(
        urls: &[String],
        prefix: &str,
        timeout: Duration,
    ) -> Result<Self, StoreError> {
        check_timeout(timeout)?;
        if urls.is_empty() {
            return Err(StoreError("redis cluster: no node URL given".into()));
        }
        let client = ClusterClient::builder(urls.iter().map(String::as_str))
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(2)
            .build()
            .map_err(|e| store_error("cluster urls", e))?;
        let acl_user = Client::open(urls[0].as_str()).ok().and_then(|c| {
            c.get_connection_info()
                .redis_settings()
                .username()
                .map(str::to_string)
        });
        Ok(Self::with_target(
            Target::cluster(client),
            prefix,
            format!("cluster {}", urls.join(",")),
            timeout,
            acl_user,
        ))
    }

    fn with_target(
        target: Target,
        prefix: &str,
        description: String,
        timeout: Duration,
        acl_user: Option<String>,
    ) -> Self {
        let counter_head = key_head(prefix, "c");
        let epoch_key = epoch::epoch_key(&counter_head);
        RedisStore {
            inner: Arc::new(Inner {
                target,
                scripts: Scripts::new(),
                lock_key: format!("{epoch_key}:lock"),
                epoch_key,
                key_head: counter_head,
                mark_head: key_head(prefix, "m"),
                acl_user,
                checks: ForkLocal::empty(),
                holds_head: key_head(prefix, "h"),
                ticket_head: key_head(prefix, "t"),
                // The hard bound on one operation, reconnecting included: 2.5 answers.
                operation_timeout: timeout * 5 / 2,
                description,
                outage: OutageLog::new(),
            }),
        }
    }
}

impl CounterStore for RedisStore {
    fn read(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<CounterRead>> {
        self.read_call(keys, now)
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
        self.settle_one_call(settle, now)
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
        let (redis_keys, args) = self.reserve_call(&ticket, &items, expiry_minute, now, fence);
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
        self.reserve_known_call(reserve, now, fence)
    }

    fn reserve_known_carrying<'a>(
        &'a self,
        reserve: KnownReserve,
        settles: &'a [Settle],
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'a, (KnownAnswer, Vec<Result<SettleOutcome, StoreError>>)> {
        self.carry_call(reserve, settles, now, fence)
    }
}

impl BackgroundSettling for RedisStore {
    fn settle_many<'a>(
        &'a self,
        settles: &'a [Settle],
        now: Millis,
    ) -> StoreFuture<'a, Vec<Result<SettleOutcome, StoreError>>> {
        self.settle_many_call(settles, now)
    }
}

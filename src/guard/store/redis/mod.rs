//! The Redis store: counters shared by every guard that points at one Redis or Redis Cluster.
//!
//! Each counter is a hash (`u` used, `s` filled mark, `e` retain-until, `r<minute>` holds by
//! expiry minute) at `{<prefix>}:c:<counter>:<bucket>`. Every key of a store shares the hash tag
//! `{<prefix>}`, so one Lua script can read, reserve or settle several counters atomically,
//! on one node or a cluster. Times are the caller's, never the server's.

mod checks;
mod connection;
mod epoch;
mod scripts;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::cluster::ClusterClient;
use redis::{Client, RedisError};

use checks::Checks;
use connection::{Conn, Target};
use scripts::Scripts;

use super::{
    CounterKey, CounterRead, CounterStore, EpochRead, Fence, FenceAnswer, HoldRef, ReserveItem,
    ReserveOutcome, StoreCheck, StoreError, StoreFuture, UsageAdd,
};
use crate::guard::domain::clock::Millis;
use crate::guard::domain::rule::escape_id;

/// How long connecting, and each answer, may take before the store reports an error.
pub(crate) const REDIS_TIMEOUT: Duration = Duration::from_secs(1);
/// The hard bound on one store operation, reconnecting included.
const OPERATION_TIMEOUT: Duration = Duration::from_millis(2_500);

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
    checks: Checks,
    description: String,
}

/// Counters in Redis or Redis Cluster, shared by every guard (in any process) that uses the
/// same server and prefix. Cheap to clone; clones share one multiplexed connection.
///
/// Guarantees: `reserve` checks and places all holds in one Lua script (all or none);
/// `settle` takes holds back and adds use in one script, never taking a hold below zero;
/// expired holds are ignored and deleted; every operation is one round trip (plus one
/// `SCRIPT LOAD` the first time a server sees a script) and fails with `StoreError` within
/// about 2.5 s when Redis cannot answer; the store reconnects by itself when Redis is back.
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

fn store_error(context: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("redis {context}: {e}"))
}

fn key_head(prefix: &str, kind: &str) -> String {
    let mut head = String::with_capacity(prefix.len() + 6);
    head.push('{');
    escape_id(prefix, &mut head);
    head.push_str("}:");
    head.push_str(kind);
    head.push(':');
    head
}

impl RedisStore {
    /// A store on one Redis node at `url` (`redis://host:port/db`), with every key under the
    /// hash tag `{prefix}`. Only the URL is checked here: the connection is made on first use
    /// and remade after failures, so a guard can start while Redis is down.
    pub fn connect(url: &str, prefix: &str) -> Result<Self, StoreError> {
        let client = Client::open(url).map_err(|e| store_error("url", e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(REDIS_TIMEOUT))
            .set_response_timeout(Some(REDIS_TIMEOUT))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let user = client.get_connection_info().redis_settings().username();
        let acl_user = user.map(str::to_string);
        Ok(Self::with_target(
            Target::single(client, config),
            prefix,
            url.to_string(),
            acl_user,
        ))
    }

    /// A store on the Redis Cluster reachable through any of `urls`, with every key under the
    /// hash tag `{prefix}` (so all of this store's counters live in one slot). Only the URLs
    /// are checked here; the cluster is connected on first use.
    pub fn cluster(urls: &[String], prefix: &str) -> Result<Self, StoreError> {
        if urls.is_empty() {
            return Err(StoreError("redis cluster: no node URL given".into()));
        }
        let client = ClusterClient::builder(urls.iter().map(String::as_str))
            .connection_timeout(REDIS_TIMEOUT)
            .response_timeout(REDIS_TIMEOUT)
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
            acl_user,
        ))
    }

    fn with_target(
        target: Target,
        prefix: &str,
        description: String,
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
                checks: Checks::default(),
                description,
            }),
        }
    }

    /// The Redis key of a counter: `{<prefix>}:c:<counter>:<bucket seconds>`. Ids are escaped
    /// (see `CounterId::render`), so no id can reach another counter's key or the hash tag.
    pub fn redis_key(&self, key: &CounterKey) -> String {
        let mut out = self.inner.key_head.clone();
        out.push_str(&key.render());
        out
    }

    /// The Redis key of a `mark_once` mark: `{<prefix>}:m:<escaped mark>`.
    pub fn mark_key(&self, mark: &str) -> String {
        let mut out = self.inner.mark_head.clone();
        escape_id(mark, &mut out);
        out
    }

    /// Runs `op` with a connection on the shared runtime, bounded by `OPERATION_TIMEOUT`, so
    /// it works from any thread and any executor (including `block_on`).
    fn run<T, F, Fut>(&self, what: &'static str, op: F) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>, Conn) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, RedisError>> + Send + 'static,
    {
        let inner = self.inner.clone();
        let handle = crate::runtime::shared().spawn(async move {
            let work = async {
                let conn = inner.target.connection().await?;
                op(inner.clone(), conn).await
            };
            let outcome = match tokio::time::timeout(OPERATION_TIMEOUT, work).await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(e)) => {
                    inner.target.forget_connection(&e);
                    Err(store_error(what, e))
                }
                Err(_) => Err(store_error(what, "timed out")),
            };
            Checks::after_operation(&inner, outcome.is_ok());
            outcome
        });
        Box::pin(async move {
            handle
                .await
                .map_err(|e| store_error(what, format!("task failed: {e}")))?
        })
    }
}

impl CounterStore for RedisStore {
    fn read(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<CounterRead>> {
        if keys.is_empty() {
            return Box::pin(std::future::ready(Ok(Vec::new())));
        }
        let redis_keys: Vec<String> = keys.iter().map(|k| self.redis_key(k)).collect();
        self.run("read", move |inner, mut conn| async move {
            let mut call = inner.scripts.read.prepare_invoke();
            call.key(redis_keys).arg(now);
            let flat: Vec<u64> = call.invoke_async(&mut conn).await?;
            Ok(flat
                .chunks_exact(2)
                .map(|pair| CounterRead {
                    used: pair[0],
                    held: pair[1],
                })
                .collect())
        })
    }

    fn reserve(
        &self,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
    ) -> StoreFuture<'_, ReserveOutcome> {
        self.reserve_fenced(items, expiry_minute, now, Fence::default())
    }

    fn reserve_fenced(
        &self,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'_, ReserveOutcome> {
        if items.is_empty() {
            return Box::pin(std::future::ready(Ok(ReserveOutcome::Reserved)));
        }
        let mut redis_keys: Vec<String> = items.iter().map(|i| self.redis_key(&i.key)).collect();
        redis_keys.push(self.inner.epoch_key.clone());
        let mut args: Vec<String> = Vec::with_capacity(4 + items.len() * 4);
        args.push(now.to_string());
        args.push(expiry_minute.to_string());
        for item in &items {
            args.push(item.hold.to_string());
            args.push(item.limit.map(|l| l.to_string()).unwrap_or_default());
            args.push(item.carried.to_string());
            args.push(item.retain_until.to_string());
        }
        // fence.lua takes these two off the end.
        args.push(fence.generation);
        args.push(
            fence
                .fenced
                .iter()
                .map(|&f| if f { '1' } else { '0' })
                .collect(),
        );
        self.run("reserve", move |inner, mut conn| async move {
            let mut call = inner.scripts.reserve.prepare_invoke();
            call.key(redis_keys).arg(args);
            let answer: i64 = call.invoke_async(&mut conn).await?;
            if answer == -2 {
                // Another Redis process answers: check its configuration too.
                Checks::request(&inner);
            }
            Ok(match answer {
                -2 => ReserveOutcome::Fenced(FenceAnswer::Untrusted),
                -3 => ReserveOutcome::Fenced(FenceAnswer::Stale),
                -4 => ReserveOutcome::Fenced(FenceAnswer::CounterLost),
                a if a < 0 => ReserveOutcome::Reserved,
                item => ReserveOutcome::Conflict {
                    item: item as usize,
                },
            })
        })
    }

    fn settle(
        &self,
        holds: Vec<HoldRef>,
        expiry_minute: i64,
        adds: Vec<UsageAdd>,
        now: Millis,
    ) -> StoreFuture<'_, ()> {
        let holds: Vec<HoldRef> = holds.into_iter().filter(|h| h.amount > 0).collect();
        let adds: Vec<UsageAdd> = adds.into_iter().filter(|a| a.amount > 0).collect();
        if holds.is_empty() && adds.is_empty() {
            return Box::pin(std::future::ready(Ok(())));
        }
        let mut redis_keys: Vec<String> = Vec::with_capacity(holds.len() + adds.len());
        let mut args: Vec<String> = Vec::with_capacity(3 + holds.len() + adds.len() * 2);
        args.push(now.to_string());
        args.push(expiry_minute.to_string());
        args.push(holds.len().to_string());
        for hold in &holds {
            redis_keys.push(self.redis_key(&hold.key));
            args.push(hold.amount.to_string());
        }
        for add in &adds {
            redis_keys.push(self.redis_key(&add.key));
            args.push(add.amount.to_string());
            args.push(add.retain_until.to_string());
        }
        self.run("settle", move |inner, mut conn| async move {
            let mut call = inner.scripts.settle.prepare_invoke();
            call.key(redis_keys).arg(args);
            let _: i64 = call.invoke_async(&mut conn).await?;
            Ok(())
        })
    }

    fn filled(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<bool>> {
        if keys.is_empty() {
            return Box::pin(std::future::ready(Ok(Vec::new())));
        }
        let mut redis_keys: Vec<String> = keys.iter().map(|k| self.redis_key(k)).collect();
        redis_keys.push(self.inner.epoch_key.clone());
        self.run("filled", move |inner, mut conn| async move {
            let mut call = inner.scripts.filled.prepare_invoke();
            call.key(redis_keys).arg(now);
            let marks: Vec<i64> = call.invoke_async(&mut conn).await?;
            Ok(marks.into_iter().map(|m| m == 1).collect())
        })
    }

    fn fill(
        &self,
        key: CounterKey,
        ledger_used: u64,
        retain_until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, bool> {
        let redis_keys = [self.redis_key(&key), self.inner.epoch_key.clone()];
        self.run("fill", move |inner, mut conn| async move {
            let mut call = inner.scripts.fill.prepare_invoke();
            call.key(&redis_keys[..])
                .arg(now)
                .arg(ledger_used)
                .arg(retain_until);
            let filled: i64 = call.invoke_async(&mut conn).await?;
            Ok(filled == 1)
        })
    }

    fn epoch(&self) -> StoreFuture<'_, EpochRead> {
        self.read_epoch()
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
    ) -> StoreFuture<'_, bool> {
        self.write_epoch(generation, now, token, adopt)
    }

    fn store_check(&self, wait: bool) -> StoreFuture<'_, StoreCheck> {
        self.check_store(wait)
    }

    fn mark_once(&self, mark: String, keep_until: Millis, now: Millis) -> StoreFuture<'_, bool> {
        let redis_key = self.mark_key(&mark);
        self.run("mark_once", move |inner, mut conn| async move {
            let mut call = inner.scripts.mark_once.prepare_invoke();
            call.key(redis_key).arg(now).arg(keep_until);
            let set: i64 = call.invoke_async(&mut conn).await?;
            Ok(set == 1)
        })
    }
}

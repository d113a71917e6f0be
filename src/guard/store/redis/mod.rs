//! The Redis store: counters shared by every guard that points at one Redis or Redis Cluster.
//!
//! Each counter bucket is a hash (`u` used, `s` filled mark, `e` retain-until) at
//! `{<prefix>}:c:<counter>:<bucket>`; a counter's holds, whatever their bucket, are one hash of
//! sums by expiry minute (`r<minute>`) at `{<prefix>}:h:<counter>`; a ticket's record (its
//! reservation landed, or it settled) is a string at `{<prefix>}:t:<ticket id>`. Every key of a
//! store shares the hash tag `{<prefix>}`, so one Lua script can read, reserve or settle
//! several counters atomically, on one node or a cluster. Times are the caller's, never the
//! server's.

mod connection;
mod keys;
mod parts;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::cluster::ClusterClient;
use redis::{Client, RedisError, Script};

use connection::{Conn, Target};
use keys::key_head;

use super::{
    CounterKey, CounterRead, CounterStore, PartsSettle, ReserveItem, ReserveOutcome, Settle,
    SettleOutcome, StoreError, StoreFuture,
};
use crate::guard::domain::clock::Millis;

const COMMON_LUA: &str = include_str!("../lua/common.lua");
const READ_LUA: &str = include_str!("../lua/read.lua");
const RESERVE_LUA: &str = include_str!("../lua/reserve.lua");
const SETTLE_LUA: &str = include_str!("../lua/settle.lua");
const FILLED_LUA: &str = include_str!("../lua/filled.lua");
const FILL_LUA: &str = include_str!("../lua/fill.lua");
const MARK_ONCE_LUA: &str = include_str!("../lua/mark_once.lua");
const SETTLE_PARTS_LUA: &str = include_str!("../lua/settle_parts.lua");

/// How long connecting, and each answer, may take unless the store is given a `timeout`.
pub(crate) const REDIS_TIMEOUT: Duration = Duration::from_secs(1);
/// The accepted range of a store's `timeout`.
pub(crate) const TIMEOUT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_secs(60);

/// Checks a store's `timeout` against `TIMEOUT_RANGE`.
fn check_timeout(timeout: Duration) -> Result<(), StoreError> {
    TIMEOUT_RANGE
        .contains(&timeout)
        .then_some(())
        .ok_or_else(|| {
            let given = timeout.as_secs_f64();
            StoreError(format!(
                "timeout {given} s: must be from 0.001 to 60 seconds"
            ))
        })
}

struct Scripts {
    read: Script,
    reserve: Script,
    settle: Script,
    filled: Script,
    fill: Script,
    mark_once: Script,
    settle_parts: Script,
}

impl Scripts {
    fn new() -> Self {
        let with_common = |body: &str| Script::new(&format!("{COMMON_LUA}\n{body}"));
        Scripts {
            read: with_common(READ_LUA),
            reserve: with_common(RESERVE_LUA),
            settle: with_common(SETTLE_LUA),
            filled: with_common(FILLED_LUA),
            fill: with_common(FILL_LUA),
            mark_once: Script::new(MARK_ONCE_LUA),
            settle_parts: with_common(SETTLE_PARTS_LUA),
        }
    }
}

struct Inner {
    target: Target,
    scripts: Scripts,
    /// `{<escaped prefix>}:c:`
    key_head: String,
    /// `{<escaped prefix>}:m:`
    mark_head: String,
    /// `{<escaped prefix>}:h:`
    holds_head: String,
    /// `{<escaped prefix>}:t:`
    ticket_head: String,
    /// The bound on one operation.
    operation_timeout: Duration,
    description: String,
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

fn store_error(context: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("redis {context}: {e}"))
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
        Ok(Self::with_target(
            Target::single(client, config),
            prefix,
            url.to_string(),
            timeout,
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
        Ok(Self::with_target(
            Target::cluster(client),
            prefix,
            format!("cluster {}", urls.join(",")),
            timeout,
        ))
    }

    fn with_target(target: Target, prefix: &str, description: String, timeout: Duration) -> Self {
        RedisStore {
            inner: Arc::new(Inner {
                target,
                scripts: Scripts::new(),
                key_head: key_head(prefix, "c"),
                mark_head: key_head(prefix, "m"),
                holds_head: key_head(prefix, "h"),
                ticket_head: key_head(prefix, "t"),
                // The hard bound on one operation, reconnecting included: 2.5 answers.
                operation_timeout: timeout * 5 / 2,
                description,
            }),
        }
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
            match tokio::time::timeout(inner.operation_timeout, work).await {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(e)) => {
                    inner.target.forget_connection(&e);
                    Err(store_error(what, e))
                }
                Err(_) => Err(store_error(what, "timed out")),
            }
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
        let redis_keys: Vec<String> = keys
            .iter()
            .flat_map(|k| [self.redis_key(k), self.holds_key(k)])
            .collect();
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
        ticket: String,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
    ) -> StoreFuture<'_, ReserveOutcome> {
        if items.is_empty() {
            return Box::pin(std::future::ready(Ok(ReserveOutcome::Reserved)));
        }
        let mut redis_keys: Vec<String> = Vec::with_capacity(1 + items.len() * 2);
        redis_keys.push(self.ticket_key(&ticket));
        let mut args: Vec<String> = Vec::with_capacity(2 + items.len() * 3);
        args.push(now.to_string());
        args.push(expiry_minute.to_string());
        for item in &items {
            redis_keys.push(self.redis_key(&item.key));
            redis_keys.push(self.holds_key(&item.key));
            args.push(item.hold.to_string());
            args.push(item.limit.map(|l| l.to_string()).unwrap_or_default());
            args.push(item.carried.to_string());
        }
        self.run("reserve", move |inner, mut conn| async move {
            let mut call = inner.scripts.reserve.prepare_invoke();
            call.key(redis_keys).arg(args);
            let answer: i64 = call.invoke_async(&mut conn).await?;
            Ok(match answer {
                -1 => ReserveOutcome::Reserved,
                -2 => ReserveOutcome::Settled,
                item => ReserveOutcome::Conflict {
                    item: item as usize,
                },
            })
        })
    }

    fn settle(&self, settle: &Settle, now: Millis) -> StoreFuture<'_, SettleOutcome> {
        let holds: Vec<_> = settle.holds.iter().filter(|h| h.amount > 0).collect();
        let adds: Vec<_> = settle.adds.iter().filter(|a| a.amount > 0).collect();
        if holds.is_empty() && adds.is_empty() {
            return Box::pin(std::future::ready(Ok(SettleOutcome::Settled)));
        }
        let mut redis_keys: Vec<String> = Vec::with_capacity(2 + holds.len() + adds.len());
        redis_keys.push(self.ticket_key(&settle.id));
        redis_keys.push(self.ticket_key(&settle.ticket));
        let mut args: Vec<String> = Vec::with_capacity(4 + holds.len() + adds.len() * 2);
        args.push(now.to_string());
        args.push(settle.expiry_minute.to_string());
        args.push(holds.len().to_string());
        args.push(settle.settled_until.to_string());
        for hold in &holds {
            redis_keys.push(self.holds_key(&hold.key));
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
            let answer: i64 = call.invoke_async(&mut conn).await?;
            Ok(if answer == 0 {
                SettleOutcome::Settled
            } else {
                SettleOutcome::AlreadySettled
            })
        })
    }

    fn settle_parts(
        &self,
        settle: &PartsSettle,
        now: Millis,
    ) -> StoreFuture<'_, Vec<SettleOutcome>> {
        self.settle_parts_call(settle, now)
    }

    fn filled(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<bool>> {
        if keys.is_empty() {
            return Box::pin(std::future::ready(Ok(Vec::new())));
        }
        let redis_keys: Vec<String> = keys.iter().map(|k| self.redis_key(k)).collect();
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
        let redis_key = self.redis_key(&key);
        self.run("fill", move |inner, mut conn| async move {
            let mut call = inner.scripts.fill.prepare_invoke();
            call.key(redis_key)
                .arg(now)
                .arg(ledger_used)
                .arg(retain_until);
            let filled: i64 = call.invoke_async(&mut conn).await?;
            Ok(filled == 1)
        })
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

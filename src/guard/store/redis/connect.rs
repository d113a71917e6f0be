//! How a Redis store is made: on one node or a cluster, in the shared layout (every key under
//! `{<prefix>}`) or with slot groups (`groups.rs`).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::cluster::ClusterClient;
use redis::Client;

use super::connection::{check_timeout, store_error, Target};
use super::keys::{home_tag, key_head};
use super::scripts::Scripts;
use super::{Inner, RedisStore, REDIS_TIMEOUT};
use crate::fork::ForkLocal;
use crate::guard::store::{OutageLog, StoreError};

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
        Self::connect_with_layout(url, prefix, timeout, false)
    }

    /// `connect_with_timeout`, with slot groups (docs/redis.md, "Slot groups"): each owner's
    /// counters under a hash tag of their own, `{<prefix>:2:<owner>}`.
    pub fn connect_grouped(url: &str, prefix: &str, timeout: Duration) -> Result<Self, StoreError> {
        Self::connect_with_layout(url, prefix, timeout, true)
    }

    fn connect_with_layout(
        url: &str,
        prefix: &str,
        timeout: Duration,
        grouped: bool,
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
            grouped,
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
        Self::cluster_with_layout(urls, prefix, timeout, false)
    }

    /// `cluster_with_timeout`, with slot groups (docs/redis.md, "Slot groups"): each owner's
    /// counters under a hash tag of their own, so a store's load spreads over the masters.
    pub fn cluster_grouped(
        urls: &[String],
        prefix: &str,
        timeout: Duration,
    ) -> Result<Self, StoreError> {
        Self::cluster_with_layout(urls, prefix, timeout, true)
    }

    fn cluster_with_layout(
        urls: &[String],
        prefix: &str,
        timeout: Duration,
        grouped: bool,
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
            grouped,
        ))
    }

    /// Calls the store's scripts by SHA (`EVALSHA`) from now on, never as the function
    /// library it otherwise loads on a server with functions (docs/redis.md, "Scripts and
    /// functions"): for a server whose operators keep functions out. Applies to every clone.
    pub fn without_functions(&self) {
        self.inner.scripts.without_functions();
    }

    /// Whether the store calls its scripts as the function library now: until the server
    /// turns out to have no functions, or refuses to load the library, or
    /// `without_functions`.
    pub fn uses_functions(&self) -> bool {
        self.inner.scripts.functions_on()
    }

    fn with_target(
        target: Target,
        prefix: &str,
        description: String,
        timeout: Duration,
        acl_user: Option<String>,
        grouped: bool,
    ) -> Self {
        let home = home_tag(prefix, if grouped { ":2" } else { "" });
        let epoch_key = format!("{home}:epoch");
        let group_head = grouped.then(|| format!("{}:", &home[..home.len() - 1]));
        RedisStore {
            inner: Arc::new(Inner {
                target,
                scripts: Scripts::new(),
                lock_key: format!("{epoch_key}:lock"),
                epoch_key,
                key_head: key_head(&home, "c"),
                mark_head: key_head(&home, "m"),
                home,
                group_head,
                acl_user,
                checks: ForkLocal::empty(),
                // The hard bound on one operation, reconnecting included: 2.5 answers.
                operation_timeout: timeout * 5 / 2,
                description,
                outage: OutageLog::new(),
            }),
        }
    }
}

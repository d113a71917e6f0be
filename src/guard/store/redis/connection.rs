//! Connections to one Redis node or a cluster, made on first use, remade after failures, and
//! made afresh in a forked child (the parent's connection tasks do not run there).

use std::time::Duration;

use crate::lock::Mutex;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, RedisError};

use super::blocking::{Lease, Pool};
use crate::fork::ForkLocal;
use crate::guard::store::StoreError;

/// How long connecting, and each answer, may take unless the store is given a `timeout`.
pub(crate) const REDIS_TIMEOUT: Duration = Duration::from_secs(1);
/// The accepted range of a store's `timeout`.
pub(crate) const TIMEOUT_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_secs(60);

/// A store error saying what failed (`context`) and why.
pub(super) fn store_error(context: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("redis {context}: {e}"))
}

/// Checks a store's `timeout` against `TIMEOUT_RANGE`.
pub(super) fn check_timeout(timeout: std::time::Duration) -> Result<(), StoreError> {
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

/// Where a store's connections go.
pub(super) enum Target {
    /// One node: a connection manager multiplexes requests and reconnects by itself.
    Single {
        client: std::sync::Arc<Client>,
        config: Box<ConnectionManagerConfig>,
        /// The manager of this process (a forked child makes its own).
        manager: ForkLocal<Mutex<Option<ConnectionManager>>>,
        /// Blocking connections for callers that may block (`blocking.rs`).
        pool: Pool,
    },
    /// A cluster: connected on first use (and again after a failed connect); the cluster
    /// connection multiplexes requests and follows slot moves.
    Cluster {
        client: Box<ClusterClient>,
        /// The connection of this process (a forked child makes its own).
        connection: ForkLocal<Mutex<Option<ClusterConnection>>>,
    },
}

impl Target {
    pub(super) fn single(client: Client, config: ConnectionManagerConfig) -> Self {
        Target::Single {
            client: std::sync::Arc::new(client),
            config: Box::new(config),
            manager: ForkLocal::empty(),
            pool: Pool::default(),
        }
    }

    pub(super) fn cluster(client: ClusterClient) -> Self {
        Target::Cluster {
            client: Box::new(client),
            connection: ForkLocal::empty(),
        }
    }

    /// A connection for one operation; must be called on the shared runtime. A connection
    /// made before a `fork()` is never used in the child.
    pub(super) async fn connection(&self) -> Result<Conn, RedisError> {
        match self {
            Target::Single {
                client,
                config,
                manager,
                ..
            } => {
                let mut slot = manager.get().lock();
                match slot.as_ref() {
                    Some(m) => Ok(Conn::Single(m.clone())),
                    None => {
                        let m = ConnectionManager::new_lazy_with_config(
                            (**client).clone(),
                            (**config).clone(),
                        )?;
                        *slot = Some(m.clone());
                        Ok(Conn::Single(m))
                    }
                }
            }
            Target::Cluster { client, connection } => {
                let slot = connection.get();
                if let Some(conn) = slot.lock().clone() {
                    return Ok(Conn::Cluster(conn));
                }
                let conn = client.get_async_connection().await?;
                *slot.lock() = Some(conn.clone());
                Ok(Conn::Cluster(conn))
            }
        }
    }

    /// A blocking connection for a caller that may block, answers bounded by `timeout`; `None`
    /// for a cluster (it always goes through the shared runtime).
    pub(super) fn blocking(
        &self,
        timeout: std::time::Duration,
    ) -> Option<Result<Lease, RedisError>> {
        match self {
            Target::Single { client, pool, .. } => Some(pool.take(client, timeout)),
            Target::Cluster { .. } => None,
        }
    }

    /// Takes back a blocking connection after its operation.
    pub(super) fn give_back(&self, lease: &Lease) {
        if let Target::Single { pool, .. } = self {
            pool.give_back(lease);
        }
    }

    /// After a connection-level failure on a cluster, connects afresh next time (the single
    /// node's connection manager reconnects by itself).
    pub(super) fn forget_connection(&self, error: &RedisError) {
        if let Target::Cluster { connection, .. } = self {
            if error.is_unrecoverable_error() || error.is_io_error() || error.is_timeout() {
                *connection.get().lock() = None;
            }
        }
    }
}

/// Whether a request failed on a connection the server had dropped, so that the same request
/// on a new connection may succeed. Not when connecting was refused (or the socket file is
/// missing): no server is listening, and a resend would only wait for the manager's next
/// failed reconnect (an admission during an outage heard "unavailable" after 152 ms instead
/// of 76 ms).
pub(super) fn dropped_by_server(error: &RedisError) -> bool {
    error.is_connection_dropped() && !error.is_connection_refusal()
}

/// A connection to either kind of target; both multiplex requests from concurrent tasks.
/// `Blocking` answers on the caller's thread: its futures are ready when first polled.
///
/// A request on the one node's connection that finds it dropped by the server (a restart,
/// `CLIENT KILL`, an idle timeout: the write is refused or the read meets the end of the
/// stream) is sent once more, on the connection the manager remakes: else every call in flight
/// or next in line when Redis drops its clients would fail (20 asyncio admissions of 20 after
/// a `CLIENT KILL`). Never after a timeout, where Redis may still be running it. A request Redis
/// ran before dropping the connection runs twice: every store step is idempotent by ticket id
/// (the epoch lock by its token) except a queue join, whose extra place lapses with its
/// liveness. (The blocking pool resends a pooled connection's first request the same way:
/// `blocking.rs`.)
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Blocking(Lease),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(c) => Box::pin(async move {
                match c.req_packed_command(cmd).await {
                    Err(e) if dropped_by_server(&e) => c.req_packed_command(cmd).await,
                    answer => answer,
                }
            }),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Blocking(c) => Box::pin(std::future::ready(c.command(cmd))),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(c) => Box::pin(async move {
                match c.req_packed_commands(cmd, offset, count).await {
                    Err(e) if dropped_by_server(&e) => {
                        c.req_packed_commands(cmd, offset, count).await
                    }
                    answer => answer,
                }
            }),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Blocking(c) => Box::pin(std::future::ready(c.pipeline(cmd, offset, count))),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Blocking(c) => c.db,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::dropped_by_server;
    use std::io::{Error, ErrorKind};

    #[test]
    fn a_dropped_connection_is_resent_a_refused_one_is_not() {
        let redis = |kind: ErrorKind| redis::RedisError::from(Error::from(kind));
        for kind in [
            ErrorKind::ConnectionReset,
            ErrorKind::BrokenPipe,
            ErrorKind::UnexpectedEof,
        ] {
            assert!(dropped_by_server(&redis(kind)), "{kind:?}");
        }
        for kind in [
            ErrorKind::ConnectionRefused,
            ErrorKind::NotFound,
            ErrorKind::TimedOut,
        ] {
            assert!(!dropped_by_server(&redis(kind)), "{kind:?}");
        }
    }
}

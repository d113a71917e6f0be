//! Blocking connections to the one Redis node, from a small pool, for operations of a caller
//! that may block (`here.rs`): a sync `admit` then makes its round trip on its own thread,
//! without handing the work to the shared runtime and waiting for it to hand it back.
//!
//! Only callers that may block use it: `crate::runtime::block_on` marks its thread while it
//! runs (`crate::runtime::may_block`); an asyncio caller's first poll, a runtime worker and a
//! `Drop` never block here. A cluster always goes through the shared runtime.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::lock::Mutex;
use redis::{Client, ConnectionLike as _, RedisError, RedisResult, Value};

use crate::fork::ForkLocal;

/// The most idle connections a store keeps: one per thread that calls at once, up to this
/// many (more threads at once open their own, closed when given back).
const POOL_SIZE: usize = 32;

/// A pooled connection idle this long is checked (`PING`) before it is lent: Redis may have
/// closed it meanwhile (its `timeout` setting, a restart), and the call lent a closed one
/// would fail.
const CHECK_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Idle blocking connections of this process, each with when it was given back (a forked
/// child opens its own: the parent's sockets are shared with it).
#[derive(Default)]
pub(super) struct Pool {
    idle: ForkLocal<Mutex<Vec<(redis::Connection, Instant)>>>,
}

impl Pool {
    /// An idle connection (one idle past `CHECK_AFTER_IDLE` only if it still answers), or a
    /// new one (connecting and each answer bounded by `timeout`).
    pub(super) fn take(&self, client: &Arc<Client>, timeout: Duration) -> RedisResult<Lease> {
        loop {
            let Some((mut conn, since)) = self.idle.get().lock().pop() else {
                break;
            };
            if since.elapsed() < CHECK_AFTER_IDLE
                || redis::cmd("PING").query::<()>(&mut conn).is_ok()
            {
                let redo = Redo {
                    client: client.clone(),
                    timeout,
                };
                return Ok(Lease::new(conn, Some(redo)));
            }
        }
        Ok(Lease::new(connect(client, timeout)?, None))
    }

    /// Takes `lease`'s connection back, unless a request on it failed (its state is unknown:
    /// an answer may still be on the way) or the pool is full.
    pub(super) fn give_back(&self, lease: &Lease) {
        let Some(conn) = lease.slot.lock().conn.take() else {
            return;
        };
        if lease.failed.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let mut idle = self.idle.get().lock();
        if idle.len() < POOL_SIZE {
            idle.push((conn, Instant::now()));
        }
    }
}

/// A new connection, connecting and each answer bounded by `timeout`.
fn connect(client: &Client, timeout: Duration) -> RedisResult<redis::Connection> {
    let conn = client.get_connection_with_timeout(timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(conn)
}

/// How to connect afresh when a connection lent from the pool turns out closed by the server
/// at its first request (a restart, `CLIENT KILL`, an idle timeout within `CHECK_AFTER_IDLE`).
struct Redo {
    client: Arc<Client>,
    timeout: Duration,
}

/// A lease's connection (`None` once given back), and how to remake it while its first
/// request has not been sent (only for one from the pool).
struct Slot {
    conn: Option<redis::Connection>,
    redo: Option<Redo>,
}

/// One connection lent to one operation (shared by the clones of its `Conn`).
#[derive(Clone)]
pub(super) struct Lease {
    slot: Arc<Mutex<Slot>>,
    failed: Arc<std::sync::atomic::AtomicBool>,
    /// The database the connection selected.
    pub(super) db: i64,
}

impl Lease {
    fn new(conn: redis::Connection, redo: Option<Redo>) -> Self {
        Lease {
            db: conn.get_db(),
            slot: Arc::new(Mutex::new(Slot {
                conn: Some(conn),
                redo,
            })),
            failed: Arc::default(),
        }
    }

    /// Sends `packed` (one command or a pipeline) and reads `count` answers after skipping
    /// `offset` (`None`: one command's answer).
    fn request(&self, packed: &[u8], range: Option<(usize, usize)>) -> RedisResult<Vec<Value>> {
        let mut slot = self.slot.lock();
        let redo = slot.redo.take();
        let Some(conn) = slot.conn.as_mut() else {
            return Err(RedisError::from((
                redis::ErrorKind::Client,
                "connection given back",
            )));
        };
        let send = |conn: &mut redis::Connection| match range {
            None => conn.req_packed_command(packed).map(|v| vec![v]),
            Some((offset, count)) => conn.req_packed_commands(packed, offset, count),
        };
        let answer = match (send(conn), redo) {
            // The pooled connection was closed by the server while it sat idle: the request
            // reached no server (a closed socket takes nothing in), so it goes once more on a
            // new connection. Not after a timeout, where Redis may still be running it. (Were
            // it run after all, see `Conn` in connection.rs.)
            (Err(e), Some(redo)) if e.is_connection_dropped() => {
                // The dropped connection never goes back to the pool, however the resend ends.
                self.failed
                    .store(true, std::sync::atomic::Ordering::Release);
                connect(&redo.client, redo.timeout).and_then(|fresh| {
                    *conn = fresh;
                    self.failed
                        .store(false, std::sync::atomic::Ordering::Release);
                    send(conn)
                })
            }
            (answer, _) => answer,
        };
        if let Err(e) = &answer {
            // A server's error reply leaves the connection in step; anything else may not.
            if !matches!(e.kind(), redis::ErrorKind::Server(_)) {
                self.failed
                    .store(true, std::sync::atomic::Ordering::Release);
            }
        }
        answer
    }

    /// One command's answer.
    pub(super) fn command(&self, cmd: &redis::Cmd) -> RedisResult<Value> {
        self.request(&cmd.get_packed_command(), None)
            .map(|mut v| v.pop().unwrap_or(Value::Nil))
    }

    /// A pipeline's answers (`offset` skipped, `count` read), as the async connections do.
    pub(super) fn pipeline(
        &self,
        pipe: &redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.request(&pipe.get_packed_pipeline(), Some((offset, count)))
    }
}

//! Where a store operation runs: for a caller that may block (`crate::runtime::may_block`),
//! on its own thread with a blocking connection (`blocking.rs`); else on the shared runtime.

use std::sync::Arc;

use redis::RedisError;

use super::checks::Checks;
use super::connection::{store_error, Conn};
use super::{Inner, RedisStore};
use crate::guard::store::StoreFuture;

impl RedisStore {
    /// Runs `op` bounded by `operation_timeout`: on this thread if its caller may block
    /// (`run_here`), else on the shared runtime (from any thread and executor).
    pub(super) fn run<T, F, Fut>(&self, what: &'static str, op: F) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>, Conn) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, RedisError>> + Send + 'static,
    {
        self.run_within(what, Some(self.inner.operation_timeout), op)
    }

    /// Runs `op`, of as many round trips as its data needs (a migration's pages), bounded
    /// only per answer (each within the store's `timeout`, as the connections enforce), never
    /// as a whole: a bound on the whole would fail every run over a store past some size.
    pub(super) fn run_paged<T, F, Fut>(&self, what: &'static str, op: F) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>, Conn) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, RedisError>> + Send + 'static,
    {
        self.run_within(what, None, op)
    }

    fn run_within<T, F, Fut>(
        &self,
        what: &'static str,
        whole: Option<std::time::Duration>,
        op: F,
    ) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>, Conn) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, RedisError>> + Send + 'static,
    {
        let inner = self.inner.clone();
        let op = match run_here(&inner, what, op) {
            Ok(answered) => return answered,
            Err(op) => op,
        };
        let handle = crate::runtime::shared().spawn(async move {
            let work = async {
                let conn = inner.target.connection().await?;
                op(inner.clone(), conn).await
            };
            let bounded = async {
                match whole {
                    Some(whole) => tokio::time::timeout(whole, work).await,
                    None => Ok(work.await),
                }
            };
            let outcome = match bounded.await {
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
        StoreFuture::boxed(async move {
            handle
                .await
                .map_err(|e| store_error(what, format!("task failed: {e}")))?
        })
    }
}

/// Runs `op` on this thread with a blocking connection when the caller may block
/// (`crate::runtime::may_block`) and the store is one node: the answer comes back as a ready
/// future. Else gives `op` back, for the shared runtime.
pub(super) fn run_here<T, F, Fut>(
    inner: &Arc<Inner>,
    what: &'static str,
    op: F,
) -> Result<StoreFuture<'static, T>, F>
where
    T: Send + 'static,
    F: FnOnce(Arc<Inner>, Conn) -> Fut,
    Fut: std::future::Future<Output = Result<T, RedisError>>,
{
    if !crate::runtime::may_block() {
        return Err(op);
    }
    // Each answer within the store's timeout (`operation_timeout` is 2.5 of them).
    let Some(lease) = inner.target.blocking(inner.operation_timeout * 2 / 5) else {
        return Err(op);
    };
    let outcome = lease.and_then(|lease| {
        let outcome = crate::runtime::block_on(op(inner.clone(), Conn::Blocking(lease.clone())));
        inner.target.give_back(&lease);
        outcome
    });
    let outcome = outcome.map_err(|e| match e.is_timeout() {
        // as the runtime's timeout says it (a read timeout is an EAGAIN on Linux)
        true => store_error(what, "timed out"),
        false => store_error(what, e),
    });
    Checks::after_operation(inner, outcome.is_ok());
    Ok(StoreFuture::ready(outcome))
}

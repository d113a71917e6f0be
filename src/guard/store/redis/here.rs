//! Store operations of a caller that may block (`crate::runtime::may_block`), run on its own
//! thread with a blocking connection (`blocking.rs`) instead of on the shared runtime.

use std::sync::Arc;

use redis::RedisError;

use super::checks::Checks;
use super::connection::{store_error, Conn};
use super::Inner;
use crate::guard::store::StoreFuture;

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
    Ok(Box::pin(std::future::ready(outcome)))
}

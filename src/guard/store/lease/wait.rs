//! Waiting for a lease's renewal in flight (a call that would take from the lease, a
//! give-back that would end it), bounded.

use std::future::Future;

/// The longest one wait for a renewal in flight lasts.
pub(super) const RENEWAL_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits until `renewed` fires or `limit` passes. The timer runs on the crate's runtime:
/// a caller may poll from any thread (a memory store's admission runs on the caller's).
pub(super) async fn wait_for(
    mut renewed: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    limit: std::time::Duration,
) {
    let mut sleep = crate::runtime::shared().spawn(async move { tokio::time::sleep(limit).await });
    std::future::poll_fn(|cx| {
        let woken = renewed.as_mut().poll(cx).is_ready();
        match woken || std::pin::Pin::new(&mut sleep).poll(cx).is_ready() {
            true => std::task::Poll::Ready(()),
            false => std::task::Poll::Pending,
        }
    })
    .await;
    sleep.abort();
}

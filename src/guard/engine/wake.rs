//! In-process wake-ups for calls waiting in a throttle queue (`waiting.rs`): a settle that
//! gave room back wakes the heads, a waiter leaving wakes the ones behind it. Each has a
//! generation count too, so a waiter that was busy when one happened still sees it. Waiters
//! in other processes notice by polling.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

use tokio::sync::Notify;

/// Notified when a ticket of this process settled (room may have come back).
pub(crate) static ROOM: LazyLock<Notify> = LazyLock::new(Notify::new);
/// How many times `ROOM` was notified.
pub(crate) static ROOMS: AtomicU64 = AtomicU64::new(0);

/// Notified when a waiter of this process left a queue (the ones behind it moved up).
pub(crate) static LEFT: LazyLock<Notify> = LazyLock::new(Notify::new);
/// How many waiters of this process left a queue (of any counter).
pub(crate) static LEAVES: AtomicU64 = AtomicU64::new(0);

/// Wakes the queue heads of this process: a ticket settled.
pub(crate) fn room_freed() {
    ROOMS.fetch_add(1, Ordering::SeqCst);
    ROOM.notify_waiters();
}

/// Wakes the waiters of this process: one of them left its queues.
pub(crate) fn left() {
    LEAVES.fetch_add(1, Ordering::SeqCst);
    LEFT.notify_waiters();
}

/// A generation count now.
pub(crate) fn seen(count: &AtomicU64) -> u64 {
    count.load(Ordering::SeqCst)
}

//! In-process wake-ups for calls waiting in a throttle queue (`waiting.rs`): a settle that
//! gave room back wakes the heads, a waiter leaving wakes the ones behind it. Waiters in
//! other processes notice by polling.

use std::sync::LazyLock;

use tokio::sync::Notify;

/// Notified when a ticket of this process settled (room may have come back).
pub(crate) static ROOM: LazyLock<Notify> = LazyLock::new(Notify::new);

/// Notified when a waiter of this process left a queue (the ones behind it moved up).
pub(crate) static LEFT: LazyLock<Notify> = LazyLock::new(Notify::new);

/// Wakes the queue heads of this process: a ticket settled.
pub(crate) fn room_freed() {
    ROOM.notify_waiters();
}

//! In-process wake-ups for calls waiting in a throttle queue (`wait_queue.rs`): a settle that
//! gave room back wakes the heads, a waiter leaving wakes the ones behind it. Each has a
//! generation count too, so a waiter that was busy when one happened still sees it. Waiters
//! in other processes notice by polling.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use crate::fork::ForkLocal;

// Per fork generation: a parent thread may hold a Notify's waiter-list lock at a fork.
static ROOM: ForkLocal<Notify> = ForkLocal::empty();
static LEFT: ForkLocal<Notify> = ForkLocal::empty();

/// Notified when a ticket of this process settled (room may have come back).
pub(crate) fn room() -> &'static Notify {
    ROOM.get()
}
/// How many times `room()` was notified.
pub(crate) static ROOMS: AtomicU64 = AtomicU64::new(0);

/// Notified when a waiter of this process left a queue (the ones behind it moved up).
pub(crate) fn moved_up() -> &'static Notify {
    LEFT.get()
}
/// How many waiters of this process left a queue (of any counter).
pub(crate) static LEAVES: AtomicU64 = AtomicU64::new(0);

/// Wakes the queue heads of this process: a ticket settled.
pub(crate) fn room_freed() {
    ROOMS.fetch_add(1, Ordering::SeqCst);
    room().notify_waiters();
}

/// Wakes the waiters of this process: one of them left its queues.
pub(crate) fn left() {
    LEAVES.fetch_add(1, Ordering::SeqCst);
    moved_up().notify_waiters();
}

/// A generation count now.
pub(crate) fn seen(count: &AtomicU64) -> u64 {
    count.load(Ordering::SeqCst)
}

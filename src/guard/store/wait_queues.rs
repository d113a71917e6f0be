//! Fair FIFO wait queues in the store (docs/quotas.md, "Queues"): a waiter joins every queue
//! of its call with one ticket number from one sequence per store, so the oldest waiter is the
//! head of each of its queues (no two waiters can each wait for the other). A waiter keeps its
//! place by polling before its `alive_until`; a killed waiter lapses and drops out.

use super::{Millis, StoreFuture};

/// One queue a waiter joins: its name (any text; stores escape it) and its bound on length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSpot {
    pub queue: String,
    /// Waiters the queue may hold; a join past it is refused.
    pub max_len: u64,
}

/// The answer to a join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueJoin {
    /// Asked to join only behind others, and every queue was empty: not joined.
    Clear,
    /// Joined every queue under this ticket number.
    Joined(u64),
    /// The queue at this index (of the spots given) is full: joined none.
    Full(usize),
}

/// Fair FIFO wait queues, shared by every guard on the store.
pub trait WaitQueues: Send + Sync {
    /// In one step: drops lapsed waiters of `spots`; with `only_if_busy`, answers `Clear` when
    /// every queue is empty; answers `Full` when one is at its `max_len`; otherwise takes the
    /// next ticket number and joins every queue with it, alive until `alive_until`.
    fn join(
        &self,
        spots: Vec<QueueSpot>,
        only_if_busy: bool,
        alive_until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, QueueJoin>;

    /// In one step: drops lapsed waiters, then, if `ticket` is still in every queue, keeps it
    /// alive until `alive_until` and answers how many waiters are ahead of it in the queue
    /// where most are (0: the head of all); `None` when it lapsed or left.
    fn ahead(
        &self,
        queues: Vec<String>,
        ticket: u64,
        alive_until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, Option<u64>>;

    /// Removes `ticket` from every queue (nothing if it is not there).
    fn leave(&self, queues: Vec<String>, ticket: u64) -> StoreFuture<'_, ()>;

    /// How many live waiters `queue` holds.
    fn length(&self, queue: String, now: Millis) -> StoreFuture<'_, u64>;
}

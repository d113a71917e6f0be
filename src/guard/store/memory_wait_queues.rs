//! The memory store's wait queues: the semantics of `WaitQueues` under one lock.

use std::collections::{BTreeMap, HashMap};

use crate::lock::Mutex;

use super::wait_queues::{QueueJoin, QueueSpot, WaitQueues};
use super::{Millis, StoreFuture};

#[derive(Debug, Default)]
struct State {
    /// The last ticket number given.
    last: u64,
    /// Each queue: ticket number -> alive until.
    queues: HashMap<String, BTreeMap<u64, Millis>>,
}

impl State {
    /// The live length of `queue` after dropping its lapsed waiters.
    fn prune(&mut self, queue: &str, now: Millis) -> u64 {
        let Some(waiters) = self.queues.get_mut(queue) else {
            return 0;
        };
        waiters.retain(|_, alive| *alive >= now);
        let len = waiters.len() as u64;
        if len == 0 {
            self.queues.remove(queue);
        }
        len
    }
}

/// Wait queues in this process's memory.
#[derive(Debug, Default)]
pub(super) struct MemoryQueues {
    state: Mutex<State>,
}

impl MemoryQueues {
    fn join_now(
        &self,
        spots: &[QueueSpot],
        only_if_busy: bool,
        alive_until: Millis,
        now: Millis,
    ) -> QueueJoin {
        let mut state = self.state.lock();
        let lens: Vec<u64> = spots.iter().map(|s| state.prune(&s.queue, now)).collect();
        if only_if_busy && lens.iter().all(|&n| n == 0) {
            return QueueJoin::Clear;
        }
        if let Some(full) = spots.iter().zip(&lens).position(|(s, &n)| n >= s.max_len) {
            return QueueJoin::Full(full);
        }
        state.last += 1;
        let ticket = state.last;
        for spot in spots {
            let waiters = state.queues.entry(spot.queue.clone()).or_default();
            waiters.insert(ticket, alive_until);
        }
        QueueJoin::Joined(ticket)
    }

    fn ahead_now(
        &self,
        queues: &[String],
        ticket: u64,
        alive_until: Millis,
        now: Millis,
    ) -> Option<u64> {
        let mut state = self.state.lock();
        let mut most = 0;
        for queue in queues {
            state.prune(queue, now);
            let waiters = state.queues.get(queue)?;
            waiters.get(&ticket)?;
            most = most.max(waiters.range(..ticket).count() as u64);
        }
        for queue in queues {
            if let Some(alive) = state.queues.get_mut(queue).and_then(|q| q.get_mut(&ticket)) {
                *alive = alive_until;
            }
        }
        Some(most)
    }

    fn leave_now(&self, queues: &[String], ticket: u64) {
        let mut state = self.state.lock();
        for queue in queues {
            if let Some(waiters) = state.queues.get_mut(queue) {
                waiters.remove(&ticket);
                if waiters.is_empty() {
                    state.queues.remove(queue);
                }
            }
        }
    }
}

impl WaitQueues for MemoryQueues {
    fn join(
        &self,
        spots: Vec<QueueSpot>,
        only_if_busy: bool,
        alive_until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, QueueJoin> {
        let joined = self.join_now(&spots, only_if_busy, alive_until, now);
        StoreFuture::ready(Ok(joined))
    }

    fn ahead(
        &self,
        queues: Vec<String>,
        ticket: u64,
        alive_until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, Option<u64>> {
        let ahead = self.ahead_now(&queues, ticket, alive_until, now);
        StoreFuture::ready(Ok(ahead))
    }

    fn leave(&self, queues: Vec<String>, ticket: u64) -> StoreFuture<'_, ()> {
        self.leave_now(&queues, ticket);
        StoreFuture::ready(Ok(()))
    }

    fn length(&self, queue: String, now: Millis) -> StoreFuture<'_, u64> {
        let len = self.state.lock().prune(&queue, now);
        StoreFuture::ready(Ok(len))
    }
}

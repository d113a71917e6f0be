//! A guard's queue of bills settling in the background (stores across a network): a bill
//! computes what it bills, queues its settle and returns; the guard's next reservation
//! carries what is queued in its own store step, and one task per guard drains the rest
//! (after a short linger), sending everything queued in one store step (Redis: one
//! pipeline), and drains again while more arrives. Reads of this guard's views wait for
//! what it queued first. This file holds the queue's state; the drain and the carrying are
//! in `settling.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

use crate::guard::store::{Settle, SettleOutcome};

/// How long `close()` and interpreter exit wait for queued settles.
pub(crate) const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// One queued settle, and who waits for its answer (`bill(wait=True)`); the answer is `None`
/// when the store did not answer (the settle is then retried in the background).
pub(crate) struct Job {
    pub(crate) settle: Settle,
    pub(crate) reply: Option<oneshot::Sender<Option<SettleOutcome>>>,
}

struct Pending {
    jobs: Vec<Job>,
    draining: bool,
    /// The fork generation the jobs were queued in.
    generation: u64,
}

/// The queue's state, shared by the guard and its drain task.
pub(crate) struct QueueState {
    pending: Mutex<Pending>,
    /// Jobs ever queued, and jobs answered (or handed to the background retry); `done` moves
    /// are announced on `moved`. (Atomics, not a lock a forked child could inherit held.)
    queued: AtomicU64,
    done: AtomicU64,
    moved: Notify,
    /// Store steps sent (each carries every job queued when it started).
    pub(crate) steps: AtomicU64,
    /// Flushes waiting now.
    flushing: AtomicU64,
}

/// A guard's settle queue. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SettleQueue {
    state: Arc<QueueState>,
}

/// Every live queue of the process, flushed at interpreter exit.
static QUEUES: Mutex<Vec<Weak<QueueState>>> = Mutex::new(Vec::new());

impl Default for SettleQueue {
    fn default() -> Self {
        let state = Arc::new(QueueState {
            pending: Mutex::new(Pending {
                jobs: Vec::new(),
                draining: false,
                generation: crate::fork::generation(),
            }),
            queued: AtomicU64::new(0),
            done: AtomicU64::new(0),
            moved: Notify::new(),
            steps: AtomicU64::new(0),
            flushing: AtomicU64::new(0),
        });
        let mut all = QUEUES.lock();
        all.retain(|q| q.strong_count() > 0);
        all.push(Arc::downgrade(&state));
        SettleQueue { state }
    }
}

impl SettleQueue {
    /// Queues `job`; returns true when the caller must start a drain (none is running).
    pub(crate) fn push(&self, job: Job) -> bool {
        let mut pending = self.state.pending.lock();
        forget_parents(&self.state, &mut pending);
        pending.jobs.push(job);
        self.state.queued.fetch_add(1, Ordering::AcqRel);
        !std::mem::replace(&mut pending.draining, true)
    }

    /// Everything queued, for the drain; empty (and the drain marked stopped) when nothing is.
    pub(crate) fn take(&self) -> Vec<Job> {
        let mut pending = self.state.pending.lock();
        if pending.jobs.is_empty() {
            pending.draining = false;
            return Vec::new();
        }
        self.state.steps.fetch_add(1, Ordering::Relaxed);
        std::mem::take(&mut pending.jobs)
    }

    /// Up to `max` queued jobs, for a reservation to carry (a drain lingering meanwhile finds
    /// the rest, or nothing).
    pub(crate) fn take_some(&self, max: usize) -> Vec<Job> {
        let mut pending = self.state.pending.lock();
        forget_parents(&self.state, &mut pending);
        let n = pending.jobs.len().min(max);
        pending.jobs.drain(..n).collect()
    }

    /// Whether someone waits for a queued job now (`bill(wait=True)`, a flush): the drain
    /// then sends at once instead of lingering for a reservation to carry it.
    pub(crate) fn awaited(&self) -> bool {
        self.state.flushing.load(Ordering::Acquire) > 0
            || self
                .state
                .pending
                .lock()
                .jobs
                .iter()
                .any(|j| j.reply.is_some())
    }

    /// `n` jobs were answered (or handed to the background retry).
    pub(crate) fn finished(&self, n: usize) {
        self.state.done.fetch_add(n as u64, Ordering::AcqRel);
        self.state.moved.notify_waiters();
    }

    /// Store steps sent so far.
    pub(crate) fn steps(&self) -> u64 {
        self.state.steps.load(Ordering::Relaxed)
    }

    /// Waits until every job queued before this call was answered (or handed to the
    /// background retry), at most `limit`; returns whether it got there.
    pub(crate) async fn flush(&self, limit: Option<Duration>) -> bool {
        flush_state(&self.state, limit).await
    }
}

/// In a forked child, forgets the parent's jobs, queued or in flight: the parent's store
/// connection and drain task do not exist here, and the parent settles them itself.
fn forget_parents(state: &QueueState, pending: &mut Pending) {
    let generation = crate::fork::generation();
    if pending.generation != generation {
        pending.jobs.clear();
        pending.draining = false;
        pending.generation = generation;
        let done = state.done.load(Ordering::Acquire);
        state.queued.store(done, Ordering::Release);
    }
}

async fn flush_state(state: &QueueState, limit: Option<Duration>) -> bool {
    forget_parents(state, &mut state.pending.lock());
    state.flushing.fetch_add(1, Ordering::AcqRel);
    let _done = Flushing(state);
    let target = state.queued.load(Ordering::Acquire);
    let wait = async {
        loop {
            let moved = state.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if state.done.load(Ordering::Acquire) >= target {
                return;
            }
            moved.await;
        }
    };
    match limit {
        None => {
            wait.await;
            true
        }
        Some(limit) => tokio::time::timeout(limit, wait).await.is_ok(),
    }
}

/// Counts a flush waiting until it ends (however its future ends).
struct Flushing<'a>(&'a QueueState);

impl Drop for Flushing<'_> {
    fn drop(&mut self) {
        self.0.flushing.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Waits (at most `limit` in all) for every queue of the process; returns how many settles
/// were still queued when the wait ended.
pub(crate) async fn flush_all(limit: Duration) -> u64 {
    let queues: Vec<Arc<QueueState>> = QUEUES.lock().iter().filter_map(Weak::upgrade).collect();
    let deadline = tokio::time::Instant::now() + limit;
    let mut left = 0;
    for state in queues {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        if !flush_state(&state, Some(remaining)).await {
            let done = state.done.load(Ordering::Acquire);
            left += state.queued.load(Ordering::Acquire).saturating_sub(done);
        }
    }
    left
}

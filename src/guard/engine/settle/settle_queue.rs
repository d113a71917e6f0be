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

use crate::lock::Mutex;
use tokio::sync::{oneshot, Notify};

use crate::fork::ForkLocal;
use crate::guard::store::{Settle, SettleOutcome};

/// How long `close()` and interpreter exit wait for queued settles.
pub(crate) const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// One queued settle, and who waits for its answer (`bill(wait=True)`); the answer is `None`
/// when the store did not answer (the settle is then retried in the background).
pub(crate) struct Job {
    pub(crate) settle: Settle,
    pub(crate) reply: Option<oneshot::Sender<Option<SettleOutcome>>>,
}

#[derive(Default)]
struct Pending {
    jobs: Vec<Job>,
    draining: bool,
}

/// The queue in one fork generation: a forked child starts a new one and never touches the
/// parent's (a parent thread may have held `pending` or been inside `moved` at the fork); the
/// parent's jobs, queued or in flight, stay the parent's to settle.
#[derive(Default)]
struct Generation {
    pending: Mutex<Pending>,
    /// Jobs ever queued, and jobs answered (or handed to the background retry); `done` moves
    /// are announced on `moved`.
    queued: AtomicU64,
    done: AtomicU64,
    moved: Notify,
    /// Flushes waiting now.
    flushing: AtomicU64,
    /// Retries of bills the store did not answer, still running (`RetryPlace`); their ends
    /// are announced on `moved` too.
    retrying: AtomicU64,
}

/// The queue's state, shared by the guard and its drain task.
pub(crate) struct QueueState {
    current: ForkLocal<Generation>,
    /// Store steps sent (each carries every job queued when it started).
    pub(crate) steps: AtomicU64,
}

impl QueueState {
    /// This process's queue, registered for the flush at exit on first use.
    fn here(self: &Arc<Self>) -> &Generation {
        self.current.get_or(|| {
            let mut all = QUEUES.get().lock();
            all.retain(|q| q.strong_count() > 0);
            all.push(Arc::downgrade(self));
            Generation::default()
        })
    }
}

/// A guard's settle queue. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SettleQueue {
    state: Arc<QueueState>,
}

/// Every queue used in this process, flushed at interpreter exit.
static QUEUES: ForkLocal<Mutex<Vec<Weak<QueueState>>>> = ForkLocal::empty();

impl Default for SettleQueue {
    fn default() -> Self {
        let state = Arc::new(QueueState {
            current: ForkLocal::empty(),
            steps: AtomicU64::new(0),
        });
        SettleQueue { state }
    }
}

impl SettleQueue {
    /// Queues `job`; returns true when the caller must start a drain (none is running).
    pub(crate) fn push(&self, job: Job) -> bool {
        let here = self.state.here();
        let mut pending = here.pending.lock();
        pending.jobs.push(job);
        here.queued.fetch_add(1, Ordering::AcqRel);
        !std::mem::replace(&mut pending.draining, true)
    }

    /// Everything queued, for the drain; empty (and the drain marked stopped) when nothing is.
    pub(crate) fn take(&self) -> Vec<Job> {
        let mut pending = self.state.here().pending.lock();
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
        let mut pending = self.state.here().pending.lock();
        let n = pending.jobs.len().min(max);
        pending.jobs.drain(..n).collect()
    }

    /// Puts back, first in line, jobs a reservation took to carry and then gave up on before
    /// the store answered (they were never answered, so they still count as queued); returns
    /// true when the caller must start a drain (none is running).
    pub(crate) fn requeue(&self, jobs: Vec<Job>) -> bool {
        let here = self.state.here();
        let mut pending = here.pending.lock();
        pending.jobs.splice(0..0, jobs);
        !std::mem::replace(&mut pending.draining, true)
    }

    /// Whether someone waits for a queued job now (`bill(wait=True)`, a flush): the drain
    /// then sends at once instead of lingering for a reservation to carry it.
    pub(crate) fn awaited(&self) -> bool {
        let here = self.state.here();
        here.flushing.load(Ordering::Acquire) > 0
            || here.pending.lock().jobs.iter().any(|j| j.reply.is_some())
    }

    /// `n` jobs were answered (or handed to the background retry).
    pub(crate) fn finished(&self, n: usize) {
        let here = self.state.here();
        here.done.fetch_add(n as u64, Ordering::AcqRel);
        here.moved.notify_waiters();
    }

    /// A place for a retry of a bill the store did not answer: `flush(.., Retries::Awaited)`
    /// waits for it until the place is dropped (the retry landed or gave up).
    pub(crate) fn retry_place(&self) -> RetryPlace {
        self.state.here().retrying.fetch_add(1, Ordering::AcqRel);
        RetryPlace {
            state: self.state.clone(),
            generation: crate::fork::generation(),
        }
    }

    /// Store steps sent so far.
    pub(crate) fn steps(&self) -> u64 {
        self.state.steps.load(Ordering::Relaxed)
    }

    /// Waits until every job queued before this call was answered (or handed to the
    /// background retry; with `Retries::Awaited`, until no retry of a bill runs either), at
    /// most `limit`; returns whether it got there.
    pub(crate) async fn flush(&self, limit: Option<Duration>, retries: Retries) -> bool {
        flush_state(&self.state, limit, retries).await
    }
}

/// Whether a flush also waits for the retries of bills the store did not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retries {
    /// Read-your-writes: what was answered (a retried bill is `recorded=None`).
    Skipped,
    /// `close()` and exit: every bill that may still land.
    Awaited,
}

/// A retry of a bill the store did not answer, counted in its queue while it runs.
pub(crate) struct RetryPlace {
    state: Arc<QueueState>,
    generation: u64,
}

impl Drop for RetryPlace {
    fn drop(&mut self) {
        // A forked child never runs (nor drops) the parent's retries; were it to, the count
        // is the parent's.
        if self.generation == crate::fork::generation() {
            let here = self.state.here();
            here.retrying.fetch_sub(1, Ordering::AcqRel);
            here.moved.notify_waiters();
        }
    }
}

async fn flush_state(state: &Arc<QueueState>, limit: Option<Duration>, retries: Retries) -> bool {
    let state = state.here();
    state.flushing.fetch_add(1, Ordering::AcqRel);
    let _done = Flushing(state);
    let target = state.queued.load(Ordering::Acquire);
    let wait = async {
        loop {
            let moved = state.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if state.done.load(Ordering::Acquire) >= target
                && (retries == Retries::Skipped || state.retrying.load(Ordering::Acquire) == 0)
            {
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
struct Flushing<'a>(&'a Generation);

impl Drop for Flushing<'_> {
    fn drop(&mut self) {
        self.0.flushing.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether no queue of this process has a settle queued, in flight or retried (then an exit
/// has nothing to wait for, and needs no runtime: a forked child that never billed).
pub(crate) fn idle() -> bool {
    let queues: Vec<Arc<QueueState>> = QUEUES
        .get()
        .lock()
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    queues.iter().all(|state| {
        let here = state.here();
        here.done.load(Ordering::Acquire) >= here.queued.load(Ordering::Acquire)
            && here.retrying.load(Ordering::Acquire) == 0
    })
}

/// [`flush_all`] from a thread that is not a task of the runtime (exit paths): returns at
/// once when nothing is queued.
pub(crate) fn flush_all_blocking(limit: Duration) -> u64 {
    if idle() {
        return 0;
    }
    let _runtime = crate::runtime::shared().enter();
    crate::runtime::block_on(flush_all(limit))
}

/// [`flush_all_blocking`], then the leases of every leasing store of the process are given
/// back with the use those bills added to them (in what is left of `limit`). Answers how
/// many settles were still queued or retried.
pub(crate) fn flush_all_and_leases_blocking(limit: Duration) -> u64 {
    let started = std::time::Instant::now();
    let left = flush_all_blocking(limit);
    let leases = crate::guard::store::give_back_everywhere(limit.saturating_sub(started.elapsed()));
    if leases > 0 {
        log::error!("at exit: {leases} leases were not given back (they expire on their own)");
    }
    left
}

/// Waits (at most `limit` in all) for every queue of the process, retries of bills the store
/// did not answer included; returns how many settles were still queued or retried when the
/// wait ended.
pub(crate) async fn flush_all(limit: Duration) -> u64 {
    let queues: Vec<Arc<QueueState>> = QUEUES
        .get()
        .lock()
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    let deadline = tokio::time::Instant::now() + limit;
    let mut left = 0;
    for state in queues {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        if !flush_state(&state, Some(remaining), Retries::Awaited).await {
            let here = state.here();
            let done = here.done.load(Ordering::Acquire);
            left += here.queued.load(Ordering::Acquire).saturating_sub(done);
            left += here.retrying.load(Ordering::Acquire);
        }
    }
    left
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Job, Retries, Settle, SettleQueue};

    fn job(id: &str) -> Job {
        Job {
            settle: Settle {
                id: id.into(),
                ticket: id.into(),
                holds: Vec::new(),
                expiry_minute: 0,
                adds: Vec::new(),
                settled_until: 0,
            },
            reply: None,
        }
    }

    /// A retry of a bill keeps `close()`'s and exit's flush (`Retries::Awaited`) waiting
    /// until it ends, not a read-your-writes flush (`Retries::Skipped`).
    #[test]
    fn a_flush_for_close_waits_for_the_retries_of_bills() {
        let queue = SettleQueue::default();
        let _runtime = crate::runtime::shared().enter();
        let wait = Some(Duration::from_millis(20));
        let place = queue.retry_place();
        let second = queue.retry_place();
        assert!(!crate::runtime::block_on(
            queue.flush(wait, Retries::Awaited)
        ));
        assert!(crate::runtime::block_on(
            queue.flush(wait, Retries::Skipped)
        ));
        drop(place);
        assert!(!crate::runtime::block_on(
            queue.flush(wait, Retries::Awaited)
        ));
        let flush = crate::runtime::shared().spawn({
            let queue = queue.clone();
            async move {
                queue
                    .flush(Some(Duration::from_secs(10)), Retries::Awaited)
                    .await
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        drop(second); // wakes the flush waiting for it
        assert!(crate::runtime::block_on(flush).unwrap());
    }

    /// Jobs a reservation took and gave back go first in line, still unanswered: a flush
    /// waits for them until the drain answers them.
    #[test]
    fn requeued_jobs_go_first_and_a_flush_waits_for_them() {
        let queue = SettleQueue::default();
        assert!(queue.push(job("a")), "the first push starts a drain");
        assert!(!queue.push(job("b")));
        let carried = queue.take_some(1);
        assert_eq!(carried[0].settle.id, "a");
        assert!(!queue.requeue(carried), "the drain still runs");
        let taken = queue.take();
        let ids: Vec<_> = taken.iter().map(|j| j.settle.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        let _runtime = crate::runtime::shared().enter();
        let wait = Some(Duration::from_millis(20));
        assert!(
            !crate::runtime::block_on(queue.flush(wait, Retries::Awaited)),
            "two jobs unanswered"
        );
        queue.finished(taken.len());
        assert!(crate::runtime::block_on(
            queue.flush(wait, Retries::Awaited)
        ));
        assert!(queue.take().is_empty(), "the drain stops");
        assert!(
            queue.requeue(vec![job("c")]),
            "no drain runs: the caller starts one"
        );
    }

    /// A parent thread inside the queue in the instant of a fork (it holds the lock for ever
    /// in the child): the child queues, drains and flushes its own jobs, never the parent's.
    #[test]
    fn a_child_never_waits_on_the_queue_a_parent_thread_held() {
        let queue = SettleQueue::default();
        assert!(queue.push(job("parent")), "the parent's drain starts");
        let held = queue.state.here().pending.lock();
        let code = crate::fork::in_child(Duration::from_secs(20), || {
            let starts_drain = queue.push(job("child"));
            let taken = queue.take();
            queue.finished(taken.len());
            let flushed = crate::runtime::block_on(queue.flush(None, Retries::Awaited));
            let only_its_own = taken.len() == 1 && taken[0].settle.id == "child";
            i32::from(!(starts_drain && only_its_own && flushed))
        });
        drop(held);
        assert_eq!(code, Some(0), "the child hung or took the parent's job");
        let taken = queue.take();
        assert_eq!(taken.len(), 1, "the parent keeps its job");
        assert_eq!(taken[0].settle.id, "parent");
    }
}

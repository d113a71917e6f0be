//! The bounded queue between billing threads and a ledger's writer thread. It bounds two
//! things: memory (at most `MAX_ROWS` rows recorded and not yet committed) and the loss
//! window (while the writer is healthy, a row waits at most `WINDOW` before billing
//! threads wait for the writer: a `kill -9` loses about the last `WINDOW` of rows). A writer
//! that makes no progress never blocks a caller for more than `STALL` at a time.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::MutexGuard;

use crate::lock::{Condvar, Mutex};

use super::{AuditQuery, AuditRow, LedgerError, RowMaker, SumFilter, UsageGroup, UsageQuery};
use crate::guard::domain::rule::Metric;

/// The most rows recorded and not yet committed (memory bound, ~20 MB). The loss window is
/// kept by `WINDOW`; this bound only matters when the writer is stalled, and is several
/// times what 250 ms of billing needs (Python billing without a ledger measured ~55,000/s).
pub(crate) const MAX_ROWS: usize = 50_000;
/// The age of the oldest uncommitted row past which billing waits for the writer. Below
/// 250 ms so that the commit in flight (up to `TX_ROWS` rows) still lands inside the
/// documented loss window.
pub(crate) const WINDOW: Duration = Duration::from_millis(100);
/// How long a caller waits for a writer that commits nothing before going on (a waiting row
/// is then dropped and counted when the queue is full; a durable bill returns uncommitted).
pub(crate) const STALL: Duration = Duration::from_secs(2);
/// The longest a durable `record` waits for its commit while the writer is still trying.
const DURABLE_WAIT: Duration = Duration::from_secs(30);
/// The longest a record (or a close) waits for the writer once the process is ending.
pub(crate) const EXIT_WAIT: Duration = Duration::from_secs(2);
/// How long after the oldest uncommitted row was recorded the writer waits for more before
/// its commit (`gather`; after a failed write, from then): the rows of a few bursts of calls
/// share one transaction (a SQLite commit costs ~250 µs of CPU however
/// few its rows: a page of each index and the WAL's writes), and billing threads wake the
/// writer once per window, not once per row. Half of `WINDOW`, a fifth of the loss window.
const GATHER: Duration = Duration::from_millis(50);
/// Rows that end the gathering at once (a transaction's worth is already there).
const GATHER_ROWS: usize = 512;

/// Where an answer goes.
pub(crate) type Reply<T> = Sender<Result<T, LedgerError>>;

/// What the writer thread is asked, in order.
pub(crate) enum Msg {
    /// A row, built by the writer thread.
    Row(RowMaker),
    Flush(Reply<()>),
    /// A sum, unless its asker stopped waiting (the flag set) before the writer got to it.
    Sum(SumFilter, Metric, Reply<u64>, Arc<AtomicBool>),
    Query(UsageQuery, Reply<Vec<UsageGroup>>),
    /// An audit row (never waited for: outside the rows' loss-window accounting).
    Audit(Box<AuditRow>),
    Audited(AuditQuery, Reply<Vec<AuditRow>>),
    Stop(Reply<()>),
}

/// What the queue holds, under one lock.
#[derive(Default)]
pub(crate) struct State {
    /// Messages for the writer, in order.
    pub(crate) queue: VecDeque<Msg>,
    /// When each row recorded and not yet committed was queued, oldest first.
    times: VecDeque<Instant>,
    /// Rows accepted so far (the sequence number of the last one).
    accepted: u64,
    /// Rows committed so far (every row with a sequence number up to it is in the database).
    committed: u64,
    pub(crate) dropped: u64,
    /// The last commit (or the start).
    progress: Option<Instant>,
    /// The writer failed its last write, or a caller gave up waiting for it; cleared by the
    /// next commit. While stalled, the loss window is not enforced and a full queue drops.
    stalled: bool,
    /// The writer thread has ended.
    pub(crate) stopped: bool,
    /// A drop was logged (once per stall).
    drop_logged: bool,
    /// An uncommitted durable row was logged (once per stall).
    durable_logged: bool,
    /// The writer sleeps until a message comes: the next one wakes it.
    idle: bool,
    /// The writer waits out `GATHER`: only a control message, a durable row or
    /// `GATHER_ROWS` rows wake it.
    gathering: bool,
    /// A control message (or audit row) came since the writer last took the queue.
    control: bool,
    /// Callers waiting for their row's commit (a durable ledger): the writer does not gather.
    durable_waits: usize,
}

impl State {
    /// Rows recorded and not yet committed.
    pub(crate) fn pending(&self) -> usize {
        self.times.len()
    }

    fn must_wait(&self, now: Instant) -> bool {
        if self.pending() >= MAX_ROWS {
            return true;
        }
        !self.stalled
            && self
                .times
                .front()
                .is_some_and(|t| now.duration_since(*t) >= WINDOW)
    }
}

/// The queue shared by the handle and the writer thread.
///
/// Its lock and condvars are `std`'s, for `fork()` (`crate::lock`): the writer thread spends
/// its life waiting on `arrived`. When they were `parking_lot`'s, the writer's entry in
/// parking_lot's process-wide wait table was left in every forked child, in memory the
/// child's next threads reuse, and 4 to 5 forked children in 150 died of SIGSEGV under load
/// with a ledger (none without one).
#[derive(Default)]
pub(crate) struct Queue {
    state: Mutex<State>,
    /// Signalled when a message is queued.
    pub(crate) arrived: Condvar,
    /// Signalled when rows are committed or the writer fails or stops.
    pub(crate) moved: Condvar,
}

impl Queue {
    /// The queue's state, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Queues a control message (flush, sum, query, stop).
    pub(crate) fn send(&self, msg: Msg) {
        let mut st = self.lock();
        st.queue.push_back(msg);
        st.control = true;
        drop(st);
        self.arrived.notify_one();
    }

    /// Queues a row, waiting while the queue is full or its oldest row is past the window;
    /// with `durable`, returns once the row is committed. Returns false when the row was
    /// dropped (counted).
    pub(crate) fn record(&self, row: RowMaker, durable: bool) -> bool {
        let mut st = self.lock();
        // (Read under the lock: see `EXITING`.)
        let durable = durable || super::EXITING.load(std::sync::atomic::Ordering::SeqCst);
        let start = Instant::now();
        let mut now = start;
        while st.must_wait(now) && !st.stopped {
            if self.no_progress_for(&st, start) >= STALL || st.stalled {
                st.stalled = true;
                break;
            }
            let left = STALL.saturating_sub(self.no_progress_for(&st, start));
            st = self.moved.wait_at_most(st, left).0;
            now = Instant::now();
        }
        if st.pending() >= MAX_ROWS || st.stopped {
            st.dropped += 1;
            if !st.drop_logged {
                st.drop_logged = true;
                log::warn!(
                    "usage_guard: the ledger writer is not keeping up (nothing committed for \
                     {STALL:?} with {MAX_ROWS} rows waiting): dropping rows; see pending()"
                );
            }
            return false;
        }
        st.queue.push_back(Msg::Row(row));
        st.times.push_back(now);
        st.accepted += 1;
        let seq = st.accepted;
        // A busy writer takes the queue when its write ends: waking it is a system call
        // per row for nothing.
        if st.idle || durable || (st.gathering && st.queue.len() >= GATHER_ROWS) {
            self.arrived.notify_one();
        }
        if durable {
            st.durable_waits += 1;
            st = self.wait_committed(st, seq);
            st.durable_waits -= 1;
        }
        true
    }

    fn no_progress_for(&self, st: &State, start: Instant) -> Duration {
        let since = st.progress.map_or(start, |p| p.max(start));
        Instant::now().duration_since(since)
    }

    /// Waits until row `seq` is committed, the writer fails or stops, or `DURABLE_WAIT`
    /// (`EXIT_WAIT` once the process is ending: it must not be kept).
    fn wait_committed<'a>(&self, mut st: MutexGuard<'a, State>, seq: u64) -> MutexGuard<'a, State> {
        let exiting = super::EXITING.load(std::sync::atomic::Ordering::SeqCst);
        let deadline = Instant::now() + if exiting { EXIT_WAIT } else { DURABLE_WAIT };
        while st.committed < seq && !st.stopped {
            let timed_out = st.stalled || {
                let left = deadline.saturating_duration_since(Instant::now());
                let timed_out;
                (st, timed_out) = self.moved.wait_at_most(st, left);
                timed_out
            };
            if timed_out {
                if st.committed < seq && !st.durable_logged {
                    st.durable_logged = true;
                    log::warn!(
                        "usage_guard: a durable ledger row is not committed yet (the writer \
                         is failing); it stays queued and is retried"
                    );
                }
                return st;
            }
        }
        st
    }

    /// Takes every queued message (the writer thread), waiting up to `timeout` for one
    /// (forever with `None`). Empty when the wait timed out.
    /// Rows are first gathered until `GATHER` after the oldest was recorded (`gather`).
    pub(crate) fn take(&self, timeout: Option<Duration>) -> VecDeque<Msg> {
        let mut st = self.lock();
        while st.queue.is_empty() {
            st.idle = true;
            match timeout {
                None => st = self.arrived.wait(st),
                Some(t) => {
                    let timed_out;
                    (st, timed_out) = self.arrived.wait_at_most(st, t);
                    if timed_out {
                        break;
                    }
                }
            }
        }
        st.idle = false;
        if !st.queue.is_empty() {
            st = self.gather(st);
        }
        st.control = false;
        std::mem::take(&mut st.queue)
    }

    /// Waits for more rows until `GATHER` after the oldest uncommitted row was recorded,
    /// unless a control message, a durable row or `GATHER_ROWS` rows wait. A writer busy
    /// with its last commit so waits only what is left of it: at a steady rate of calls it
    /// commits every `GATHER` (or `GATHER_ROWS`), not as soon as a commit ends (a commit of
    /// a few rows rewrites nearly as many pages of the table and its indexes as one of
    /// hundreds). After a failed write the wait is `GATHER` from now: the oldest row is old
    /// then, and a database that refuses at once would be tried again for every row.
    fn gather<'a>(&self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        let Some(oldest) = st.times.front() else {
            return st;
        };
        let until = if st.stalled {
            Instant::now() + GATHER
        } else {
            *oldest + GATHER
        };
        st.gathering = true;
        while !st.control && st.durable_waits == 0 && st.queue.len() < GATHER_ROWS {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = self.arrived.wait_at_most(st, left).0;
        }
        st.gathering = false;
        st
    }

    /// `n` more rows are committed (the writer thread).
    pub(crate) fn committed(&self, n: usize) {
        let mut st = self.lock();
        let n = n.min(st.times.len());
        st.times.drain(..n);
        st.committed += n as u64;
        st.progress = Some(Instant::now());
        st.stalled = false;
        st.drop_logged = false;
        st.durable_logged = false;
        drop(st);
        self.moved.notify_all();
    }

    /// A write failed (the writer thread): callers stop waiting for the loss window.
    pub(crate) fn failed(&self) {
        self.lock().stalled = true;
        self.moved.notify_all();
    }

    /// The writer thread ended: nobody waits for it any more.
    pub(crate) fn stop(&self) {
        self.lock().stopped = true;
        self.moved.notify_all();
    }

    /// `(rows recorded and not committed, rows dropped)`.
    pub(crate) fn counts(&self) -> (usize, u64) {
        let st = self.lock();
        (st.pending(), st.dropped)
    }
}

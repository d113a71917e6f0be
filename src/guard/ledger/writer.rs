//! The writer thread every ledger runs: it owns the database connection, takes everything
//! queued (so concurrent billers share one commit), writes it in transactions of up to
//! `TX_ROWS` rows (multi-row inserts), keeps rows a failed write left and tries them again,
//! and answers sums and queries in order with the writes (its loop: `writer_loop`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::lock::Mutex;

use super::write_queue::{Msg, Queue, Reply, EXIT_WAIT};
pub(crate) use super::writer_loop::Backend;
use super::TIMED_OUT;
use super::{AuditQuery, AuditRow, LedgerError, LedgerRow, SumFilter, UsageGroup, UsageQuery};
use crate::fork::{ForkLocal, Quiet};
use crate::guard::domain::rule::Metric;

/// The longest a sum waits for the writer (`Writer::sum`): a fill on an admission's path,
/// long enough for a month's sum over a large table.
const SUM_WAIT: Duration = Duration::from_secs(10);
/// No bound (a day: what `recv_timeout` takes for none).
const FOREVER: Duration = Duration::from_secs(86_400);

/// Opens the database connection a writer thread owns (again in a forked child).
type Open = Arc<dyn Fn() -> Result<Box<dyn Backend>, String> + Send + Sync>;

/// A running writer thread and its queue.
struct Live {
    queue: Arc<Queue>,
    thread: Option<JoinHandle<()>>,
}

/// The writer thread of one process: whether one was started here, and its handle while it
/// runs.
#[derive(Default)]
struct Slot {
    live: Option<Live>,
    started: bool,
}

/// The handle to a writer thread. In a forked child (where the parent's thread does not run)
/// the first use starts a new thread on a new connection, never touching the parent's thread
/// or queue (a parent thread may have held its lock at the fork); rows the parent had queued
/// stay the parent's to write.
pub(crate) struct Writer {
    name: String,
    open: Open,
    /// `record` returns only once the row is committed.
    durable: bool,
    live: ForkLocal<Mutex<Slot>>,
    /// Set by `close` (a ledger closed before a fork is closed in the child too), with the
    /// rows it left unwritten and the rows dropped since (recorded after close).
    closed: AtomicBool,
    left: AtomicUsize,
    dropped: AtomicU64,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("name", &self.name)
            .field("durable", &self.durable)
            .finish()
    }
}

fn gone() -> LedgerError {
    LedgerError("the ledger is closed".into())
}

/// Starts a writer thread on the backend `open` makes (in the thread).
fn spawn_live(name: &str, open: &Open) -> Result<Live, LedgerError> {
    let queue = Arc::new(Queue::default());
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let thread_queue = queue.clone();
    let open = open.clone();
    let thread =
        crate::runtime::spawn_thread(
            format!("usage-guard-ledger-{name}"),
            move || match Quiet::run(|| open()) {
                Ok(backend) => {
                    let _ = ready_tx.send(Ok(()));
                    super::writer_loop::run(Box::new(QuietBackend(Some(backend))), &thread_queue);
                    thread_queue.stop();
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            },
        )
        .map_err(|e| LedgerError(format!("cannot start the writer thread: {e}")))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(Live {
            queue,
            thread: Some(thread),
        }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(LedgerError(e))
        }
        Err(_) => Err(LedgerError("the writer thread failed to start".into())),
    }
}

/// A backend whose every call (and its close) is a [`Quiet`] section: a `fork()` waits for
/// the call to end, so the database library's process-wide locks (SQLite's allocator and
/// file-lock mutexes) are never held across it, and the child can open its own connection.
struct QuietBackend(Option<Box<dyn Backend>>);

impl QuietBackend {
    fn backend(&mut self) -> &mut dyn Backend {
        self.0.as_deref_mut().expect("dropped only at the end")
    }
}

impl Backend for QuietBackend {
    fn write(&mut self, rows: &[LedgerRow]) -> Result<(), String> {
        Quiet::run(|| self.backend().write(rows))
    }
    fn sum(&mut self, filter: &SumFilter, metric: Metric) -> Result<u64, String> {
        Quiet::run(|| self.backend().sum(filter, metric))
    }
    fn query(&mut self, query: &UsageQuery) -> Result<Vec<UsageGroup>, String> {
        Quiet::run(|| self.backend().query(query))
    }
    fn write_audit(&mut self, rows: &[AuditRow]) -> Result<(), String> {
        Quiet::run(|| self.backend().write_audit(rows))
    }
    fn audit(&mut self, query: &AuditQuery) -> Result<Vec<AuditRow>, String> {
        Quiet::run(|| self.backend().audit(query))
    }
}

impl Drop for QuietBackend {
    fn drop(&mut self) {
        Quiet::run(|| drop(self.0.take()));
    }
}

impl Writer {
    /// Starts a writer thread on the backend `open` makes (in the thread); fails when it
    /// cannot be opened. With `durable`, `record` returns once its row is committed.
    pub(crate) fn start<B, F>(name: &str, durable: bool, open: F) -> Result<Writer, LedgerError>
    where
        B: Backend,
        F: Fn() -> Result<B, String> + Send + Sync + 'static,
    {
        let open: Open = Arc::new(move || open().map(|b| Box::new(b) as Box<dyn Backend>));
        let live = spawn_live(name, &open)?;
        Ok(Writer {
            name: name.to_string(),
            open,
            durable,
            live: ForkLocal::new(Mutex::new(Slot {
                live: Some(live),
                started: true,
            })),
            closed: AtomicBool::new(false),
            left: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
        })
    }

    /// The queue of the thread of this process (started on first use in a forked child);
    /// `None` once closed.
    fn current(&self) -> Option<Arc<Queue>> {
        let mut slot = self.live.get().lock();
        if !slot.started && !self.closed.load(Ordering::Acquire) {
            slot.started = true;
            match spawn_live(&self.name, &self.open) {
                Ok(fresh) => slot.live = Some(fresh),
                Err(e) => log::warn!("usage_guard: ledger after fork: {e}"),
            }
        }
        slot.live.as_ref().map(|l| l.queue.clone())
    }

    /// Sends `make`'s message and waits for its answer, `wait` at most (a writer held up by
    /// its database answers it later, to no one).
    fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Msg, wait: Duration) -> Result<T, LedgerError> {
        let (tx, rx) = mpsc::channel();
        let Some(queue) = self.current() else {
            return Err(gone());
        };
        if queue.lock().stopped {
            return Err(gone());
        }
        queue.send(make(tx));
        match rx.recv_timeout(wait) {
            Ok(answer) => answer,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(LedgerError(format!(
                "the {} ledger {TIMED_OUT} {:.1} s (its database is held up)",
                self.name,
                wait.as_secs_f64()
            ))),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(gone()),
        }
    }

    /// Queues a row, built on the writer thread (waiting while the queue is full); a durable
    /// writer returns once the row is committed.
    pub(crate) fn record(&self, row: super::RowMaker) {
        let Some(queue) = self.current() else {
            self.dropped.fetch_add(1, Ordering::AcqRel);
            return;
        };
        queue.record(row, self.durable);
    }

    /// Waits for every row queued so far to be written. There are none once `close` wrote
    /// them (under the slot lock), nor in a forked child that never used the ledger: no thread
    /// (nor connection) is started for it (the exit flush of each child of a pool reaches it).
    pub(crate) fn flush(&self) -> Result<(), LedgerError> {
        self.flush_within(FOREVER)
    }

    /// [`Writer::flush`], waiting `wait` at most.
    pub(crate) fn flush_within(&self, wait: Duration) -> Result<(), LedgerError> {
        let slot = self.live.get().lock();
        if !slot.started || self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        drop(slot);
        self.ask(Msg::Flush, wait)
    }

    /// A sum, after every row queued so far; `SUM_WAIT` at most (a counter's fill, on an
    /// admission's path: a database held up must not hold the call).
    pub(crate) fn sum(&self, filter: &SumFilter, metric: Metric) -> Result<u64, LedgerError> {
        let abandoned = Arc::new(AtomicBool::new(false));
        let asked = self.ask(
            |r| Msg::Sum(filter.clone(), metric, r, abandoned.clone()),
            SUM_WAIT,
        );
        if asked.as_ref().is_err_and(LedgerError::is_timeout) {
            abandoned.store(true, Ordering::Release);
        }
        asked
    }

    /// A grouped query, after every row queued so far.
    pub(crate) fn query(&self, query: &UsageQuery) -> Result<Vec<UsageGroup>, LedgerError> {
        self.ask(|r| Msg::Query(query.clone(), r), FOREVER)
    }

    /// Queues an audit row, never waiting (dropped when the ledger is closed).
    pub(crate) fn record_audit(&self, row: AuditRow) {
        match self.current() {
            Some(queue) if !queue.lock().stopped => {
                queue.send(Msg::Audit(Box::new(row)));
            }
            _ => log::debug!("usage_guard: an audit row after the ledger closed was dropped"),
        }
    }

    /// The audit rows `query` selects, after every row queued so far.
    pub(crate) fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRow>, LedgerError> {
        self.ask(|r| Msg::Audited(query.clone(), r), FOREVER)
    }

    /// Flushes and stops the thread; later calls answer "closed". In a forked child that
    /// never used the ledger, there is nothing of its own to flush.
    pub(crate) fn close(&self) -> Result<(), LedgerError> {
        let mut slot = self.live.get().lock();
        self.closed.store(true, Ordering::Release);
        slot.started = true;
        let Some(l) = slot.live.take() else {
            return Ok(());
        };
        let (reply, answer) = mpsc::channel();
        l.queue.send(Msg::Stop(reply));
        // Once the process is ending (a ledger dropped at interpreter exit), a database that
        // does not answer must not keep it: the writer is left to end with the process.
        let exiting = super::EXITING.load(Ordering::SeqCst);
        let wait = if exiting { EXIT_WAIT } else { FOREVER };
        let result = match answer.recv_timeout(wait) {
            Ok(result) => result,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(LedgerError(format!(
                    "the {} ledger did not write its last rows within {} s of the exit",
                    self.name,
                    wait.as_secs()
                )))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(gone()),
        };
        if let Some(thread) = l.thread {
            let _ = thread.join();
        }
        let (left, dropped) = l.queue.counts();
        self.left.store(left, Ordering::Release);
        self.dropped.fetch_add(dropped, Ordering::AcqRel);
        result
    }

    /// Rows not yet written, and rows dropped.
    pub(crate) fn pending(&self) -> (usize, u64) {
        match self.live.get().lock().live.as_ref() {
            Some(l) => l.queue.counts(),
            None => (
                self.left.load(Ordering::Acquire),
                self.dropped.load(Ordering::Acquire),
            ),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;

//! The writer thread every ledger runs: it owns the database connection, takes everything
//! queued (so concurrent billers share one commit), writes it in transactions of up to
//! `TX_ROWS` rows (multi-row inserts), keeps rows a failed write left and tries them again,
//! and answers sums and queries in order with the writes.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::lock::Mutex;

use super::audit::MAX_PENDING;
use super::failure_log::FailureLog;
use super::write_queue::{Msg, Queue, Reply};
use super::{AuditQuery, AuditRow, LedgerError, LedgerRow, SumFilter, UsageGroup, UsageQuery};
use crate::fork::{ForkLocal, Quiet};
use crate::guard::domain::rule::Metric;

/// The most rows written in one transaction: small enough that a commit lands well inside
/// the 250 ms loss window, large enough to amortise it.
pub(crate) const TX_ROWS: usize = 2_000;
/// How long rows a failed write left wait before the next try (when nothing else comes).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A database the writer thread talks to.
pub(crate) trait Backend: Send + 'static {
    /// Writes rows in one transaction, skipping ticket ids already present.
    fn write(&mut self, rows: &[LedgerRow]) -> Result<(), String>;
    /// The sum of a metric over matching rows.
    fn sum(&mut self, filter: &SumFilter, metric: Metric) -> Result<u64, String>;
    /// Grouped usage.
    fn query(&mut self, query: &UsageQuery) -> Result<Vec<UsageGroup>, String>;
    /// Writes audit rows in one transaction, skipping event ids already present.
    fn write_audit(&mut self, rows: &[AuditRow]) -> Result<(), String>;
    /// The audit rows a query selects.
    fn audit(&mut self, query: &AuditQuery) -> Result<Vec<AuditRow>, String>;
}

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
                    run(Box::new(QuietBackend(Some(backend))), &thread_queue);
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

    fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Msg) -> Result<T, LedgerError> {
        let (tx, rx) = mpsc::channel();
        let Some(queue) = self.current() else {
            return Err(gone());
        };
        if queue.lock().stopped {
            return Err(gone());
        }
        queue.send(make(tx));
        rx.recv().map_err(|_| gone())?
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
        let slot = self.live.get().lock();
        if !slot.started || self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        drop(slot);
        self.ask(Msg::Flush)
    }

    /// A sum, after every row queued so far.
    pub(crate) fn sum(&self, filter: &SumFilter, metric: Metric) -> Result<u64, LedgerError> {
        self.ask(|r| Msg::Sum(filter.clone(), metric, r))
    }

    /// A grouped query, after every row queued so far.
    pub(crate) fn query(&self, query: &UsageQuery) -> Result<Vec<UsageGroup>, LedgerError> {
        self.ask(|r| Msg::Query(query.clone(), r))
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
        self.ask(|r| Msg::Audited(query.clone(), r))
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
        let result = answer.recv().unwrap_or_else(|_| Err(gone()));
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

struct Loop<'q> {
    backend: Box<dyn Backend>,
    pending: Vec<LedgerRow>,
    /// Audit rows not yet written (at most `MAX_PENDING`: the oldest go first).
    audit: Vec<AuditRow>,
    queue: &'q Queue,
    /// What is logged while the database does not take the rows, or the audit rows.
    rows_failing: FailureLog,
    audit_failing: FailureLog,
}

impl Loop<'_> {
    /// Writes what is pending, a transaction at a time; stops at the first failure.
    fn write_pending(&mut self) -> Result<(), LedgerError> {
        while !self.pending.is_empty() {
            let n = self.pending.len().min(TX_ROWS);
            let written = self.backend.write(&self.pending[..n]);
            if let Err(e) = self.rows_failing.after(written, self.pending.len()) {
                self.queue.failed();
                return Err(LedgerError(e));
            }
            self.pending.drain(..n);
            self.queue.committed(n);
        }
        if !self.audit.is_empty() {
            let written = self.backend.write_audit(&self.audit);
            self.audit_failing
                .after(written, self.audit.len())
                .map_err(LedgerError)?;
            self.audit.clear();
        }
        Ok(())
    }

    fn push_audit(&mut self, row: AuditRow) {
        if self.audit.len() >= MAX_PENDING {
            self.audit.remove(0);
            log::warn!("usage_guard: the audit log is not taking rows: the oldest was dropped");
        }
        self.audit.push(row);
    }
}

/// Takes everything queued, writes the rows, answers the rest in order; until `Stop`.
fn run(backend: Box<dyn Backend>, queue: &Queue) {
    let mut l = Loop {
        backend,
        pending: Vec::new(),
        audit: Vec::new(),
        queue,
        rows_failing: FailureLog::new("ledger"),
        audit_failing: FailureLog::new("audit log"),
    };
    loop {
        let wait = (!l.pending.is_empty() || !l.audit.is_empty()).then_some(RETRY_AFTER);
        let msgs = queue.take(wait);
        for msg in msgs {
            match msg {
                Msg::Row(make) => l.pending.push(make()),
                m => {
                    if !answer(&mut l, m) {
                        return;
                    }
                }
            }
        }
        let _ = l.write_pending();
    }
}

/// Answers a non-row message; false when the loop must stop.
fn answer(l: &mut Loop<'_>, msg: Msg) -> bool {
    match msg {
        Msg::Row(make) => l.pending.push(make()),
        Msg::Audit(row) => l.push_audit(*row),
        Msg::Audited(query, reply) => {
            let _ = reply.send(
                l.write_pending()
                    .and_then(|_| l.backend.audit(&query).map_err(LedgerError)),
            );
        }
        Msg::Flush(reply) => {
            let _ = reply.send(l.write_pending());
        }
        Msg::Sum(filter, metric, reply) => {
            let _ = reply.send(
                l.write_pending()
                    .and_then(|_| l.backend.sum(&filter, metric).map_err(LedgerError)),
            );
        }
        Msg::Query(query, reply) => {
            let _ = reply.send(
                l.write_pending()
                    .and_then(|_| l.backend.query(&query).map_err(LedgerError)),
            );
        }
        Msg::Stop(reply) => {
            let _ = reply.send(l.write_pending());
            return false;
        }
    }
    true
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;

//! The writer thread every ledger runs: it owns the database connection, writes queued rows
//! in batches (up to `BATCH_ROWS` a transaction), keeps rows a failed write left and tries
//! them again, and answers sums and queries in order with the writes.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

use super::{LedgerError, LedgerRow, SumFilter, UsageGroup, UsageQuery};
use crate::guard::domain::rule::Metric;

/// The most rows written in one transaction.
pub(crate) const BATCH_ROWS: usize = 500;
/// How long rows a failed write left wait before the next try (when nothing else comes).
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Rows kept for retry at most; beyond it the oldest are dropped (and counted).
const MAX_PENDING: usize = 1_000_000;

/// A database the writer thread talks to.
pub(crate) trait Backend: Send + 'static {
    /// Writes rows in one transaction, skipping ticket ids already present.
    fn write(&mut self, rows: &[LedgerRow]) -> Result<(), String>;
    /// The sum of a metric over matching rows.
    fn sum(&mut self, filter: &SumFilter, metric: Metric) -> Result<u64, String>;
    /// Grouped usage.
    fn query(&mut self, query: &UsageQuery) -> Result<Vec<UsageGroup>, String>;
}

type Reply<T> = Sender<Result<T, LedgerError>>;

enum Msg {
    Row(Box<LedgerRow>),
    Flush(Reply<()>),
    Sum(SumFilter, Metric, Reply<u64>),
    Query(UsageQuery, Reply<Vec<UsageGroup>>),
    Stop(Reply<()>),
}

#[derive(Debug, Default)]
struct Counts {
    pending: usize,
    dropped: u64,
}

/// Opens the database connection a writer thread owns (again in a forked child).
type Open = Arc<dyn Fn() -> Result<Box<dyn Backend>, String> + Send + Sync>;

/// A running writer thread: its queue, its counts, and the fork generation it runs in.
struct Live {
    tx: Sender<Msg>,
    thread: Option<JoinHandle<()>>,
    counts: Arc<Mutex<Counts>>,
    generation: u64,
}

/// The handle to a writer thread. In a forked child (where the parent's thread does not run)
/// the first use starts a new thread on a new connection; rows the parent had queued stay
/// the parent's to write.
pub(crate) struct Writer {
    name: String,
    open: Open,
    live: Mutex<Option<Live>>,
    /// The counts once closed: what was left, and rows dropped since (recorded after close).
    closed: Mutex<Counts>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("name", &self.name).finish()
    }
}

fn gone() -> LedgerError {
    LedgerError("the ledger is closed".into())
}

/// Starts a writer thread on the backend `open` makes (in the thread).
fn spawn_live(name: &str, open: &Open) -> Result<Live, LedgerError> {
    let (tx, rx) = mpsc::channel::<Msg>();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let counts = Arc::new(Mutex::new(Counts::default()));
    let thread_counts = counts.clone();
    let open = open.clone();
    let thread = std::thread::Builder::new()
        .name(format!("usage-guard-ledger-{name}"))
        .spawn(move || match open() {
            Ok(backend) => {
                let _ = ready_tx.send(Ok(()));
                run(backend, rx, thread_counts);
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e));
            }
        })
        .map_err(|e| LedgerError(format!("cannot start the writer thread: {e}")))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(Live {
            tx,
            thread: Some(thread),
            counts,
            generation: crate::fork::generation(),
        }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(LedgerError(e))
        }
        Err(_) => Err(LedgerError("the writer thread failed to start".into())),
    }
}

impl Writer {
    /// Starts a writer thread on the backend `open` makes (in the thread); fails when it
    /// cannot be opened.
    pub(crate) fn start<B, F>(name: &str, open: F) -> Result<Writer, LedgerError>
    where
        B: Backend,
        F: Fn() -> Result<B, String> + Send + Sync + 'static,
    {
        let open: Open = Arc::new(move || open().map(|b| Box::new(b) as Box<dyn Backend>));
        let live = spawn_live(name, &open)?;
        Ok(Writer {
            name: name.to_string(),
            open,
            live: Mutex::new(Some(live)),
            closed: Mutex::new(Counts::default()),
        })
    }

    /// The queue and counts of the thread of this process (started afresh after a fork);
    /// `None` once closed.
    fn current(&self) -> Option<(Sender<Msg>, Arc<Mutex<Counts>>)> {
        let mut live = self.live.lock();
        let stale = live
            .as_ref()
            .is_some_and(|l| l.generation != crate::fork::generation());
        if stale {
            // The parent's thread does not exist here: never join or detach it.
            if let Some(old) = live.take() {
                std::mem::forget(old.thread);
            }
            match spawn_live(&self.name, &self.open) {
                Ok(fresh) => *live = Some(fresh),
                Err(e) => log::warn!("usage_guard: ledger after fork: {e}"),
            }
        }
        live.as_ref().map(|l| (l.tx.clone(), l.counts.clone()))
    }

    fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Msg) -> Result<T, LedgerError> {
        let (tx, rx) = mpsc::channel();
        let Some((queue, _)) = self.current() else {
            return Err(gone());
        };
        if queue.send(make(tx)).is_err() {
            return Err(gone());
        }
        rx.recv().map_err(|_| gone())?
    }

    /// Queues a row.
    pub(crate) fn record(&self, row: LedgerRow) {
        let Some((queue, counts)) = self.current() else {
            self.closed.lock().dropped += 1;
            return;
        };
        counts.lock().pending += 1;
        if queue.send(Msg::Row(Box::new(row))).is_err() {
            let mut c = counts.lock();
            c.pending -= 1;
            c.dropped += 1;
        }
    }

    /// Waits for every row queued so far to be written.
    pub(crate) fn flush(&self) -> Result<(), LedgerError> {
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

    /// Flushes and stops the thread; later calls answer "closed". In a forked child that
    /// never used the ledger, there is nothing of its own to flush.
    pub(crate) fn close(&self) -> Result<(), LedgerError> {
        let mut live = self.live.lock();
        let Some(l) = live.take() else {
            return Ok(());
        };
        if l.generation != crate::fork::generation() {
            std::mem::forget(l.thread);
            return Ok(());
        }
        let (reply, answer) = mpsc::channel();
        let result = match l.tx.send(Msg::Stop(reply)) {
            Ok(()) => answer.recv().unwrap_or_else(|_| Err(gone())),
            Err(_) => Ok(()),
        };
        drop(l.tx);
        if let Some(thread) = l.thread {
            let _ = thread.join();
        }
        let last = l.counts.lock();
        *self.closed.lock() = Counts {
            pending: last.pending,
            dropped: last.dropped,
        };
        result
    }

    /// Rows not yet written, and rows dropped.
    pub(crate) fn pending(&self) -> (usize, u64) {
        match self.live.lock().as_ref() {
            Some(l) => {
                let c = l.counts.lock();
                (c.pending, c.dropped)
            }
            None => {
                let c = self.closed.lock();
                (c.pending, c.dropped)
            }
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

struct Loop {
    backend: Box<dyn Backend>,
    pending: Vec<LedgerRow>,
    counts: Arc<Mutex<Counts>>,
}

impl Loop {
    /// Writes what is pending, a batch at a time; stops at the first failure.
    fn write_pending(&mut self) -> Result<(), LedgerError> {
        while !self.pending.is_empty() {
            let n = self.pending.len().min(BATCH_ROWS);
            if let Err(e) = self.backend.write(&self.pending[..n]) {
                log::warn!(
                    "ledger write failed ({} rows kept): {e}",
                    self.pending.len()
                );
                return Err(LedgerError(e));
            }
            self.pending.drain(..n);
            self.counts.lock().pending -= n;
        }
        Ok(())
    }

    fn take(&mut self, row: LedgerRow) {
        if self.pending.len() >= MAX_PENDING {
            self.pending.remove(0);
            let mut c = self.counts.lock();
            c.pending -= 1;
            c.dropped += 1;
        }
        self.pending.push(row);
    }
}

fn run(backend: Box<dyn Backend>, rx: Receiver<Msg>, counts: Arc<Mutex<Counts>>) {
    let mut l = Loop {
        backend,
        pending: Vec::new(),
        counts,
    };
    loop {
        let msg = if l.pending.is_empty() {
            match rx.recv() {
                Ok(m) => m,
                Err(_) => break,
            }
        } else {
            match rx.recv_timeout(RETRY_AFTER) {
                Ok(m) => m,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = l.write_pending();
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        };
        match msg {
            Msg::Row(row) => {
                l.take(*row);
                // Take whatever else is queued, then write it together.
                let mut other = None;
                while l.pending.len() < BATCH_ROWS {
                    match rx.try_recv() {
                        Ok(Msg::Row(row)) => l.take(*row),
                        Ok(m) => {
                            other = Some(m);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let _ = l.write_pending();
                if let Some(m) = other {
                    if !answer(&mut l, m) {
                        return;
                    }
                }
            }
            m => {
                if !answer(&mut l, m) {
                    return;
                }
            }
        }
    }
    let _ = l.write_pending();
}

/// Answers a non-row message; false when the loop must stop.
fn answer(l: &mut Loop, msg: Msg) -> bool {
    match msg {
        Msg::Row(row) => {
            l.take(*row);
            let _ = l.write_pending();
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

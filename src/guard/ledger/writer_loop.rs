//! The writer thread's loop: takes everything queued, writes the rows a transaction at a time
//! (keeping what a failed write left, for the next try), and answers flushes, sums and queries
//! in order with the writes.

use std::time::Duration;

use super::audit::MAX_PENDING;
use super::failure_log::FailureLog;
use super::write_queue::{Msg, Queue};
use super::{AuditQuery, AuditRow, LedgerError, LedgerRow, SumFilter, UsageGroup, UsageQuery};
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
pub(super) fn run(backend: Box<dyn Backend>, queue: &Queue) {
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
        Msg::Sum(filter, metric, reply, abandoned) => {
            // An abandoned sum (its asker timed out) is not run: under a slow database
            // they would pile up ahead of the rows.
            if !abandoned.load(std::sync::atomic::Ordering::Acquire) {
                let _ = reply.send(
                    l.write_pending()
                        .and_then(|_| l.backend.sum(&filter, metric).map_err(LedgerError)),
                );
            }
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

//! Counts an operator can watch (each bumped where it happens, `fetch_add(1, Ordering::Relaxed)`; store
//! failures are logged once per outage by the store's `OutageLog`).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counts an operator can watch.
#[derive(Debug, Default)]
pub struct Stats {
    pub admitted: AtomicU64,
    pub refused: AtomicU64,
    /// Admitted without being counted because the store failed and no rule could refuse.
    pub uncounted: AtomicU64,
    pub unavailable: AtomicU64,
    pub store_errors: AtomicU64,
    pub reserve_retries: AtomicU64,
    pub billed: AtomicU64,
    pub released: AtomicU64,
    /// Settle attempts (bill, release, give-back) the store did not answer; each is retried
    /// in the background by ticket id until the store answers.
    pub settle_failures: AtomicU64,
    /// Settles that landed on a background retry.
    pub settles_retried: AtomicU64,
    /// Tickets dropped without bill or release (released when dropped).
    pub dropped: AtomicU64,
    /// Calls refused because a fenced rule's counters could not be trusted.
    pub recovering: AtomicU64,
    /// New store epochs this guard wrote: recoveries (from the ledger or attested) and
    /// initial adoptions.
    pub epochs_written: AtomicU64,
    /// Reservations the caller gave up on before the store answered (timeout, cancel,
    /// failed round trip): given back by ticket id in the background.
    pub given_up: AtomicU64,
    /// Calls waiting in a throttle queue now (`Guard::waiting`; a gauge, not in `snapshot`).
    pub waiting: AtomicU64,
    /// Bills that rode with a later reservation of this guard (one store step for both)
    /// instead of a store step of their own.
    pub settles_carried: AtomicU64,
    /// Open calls whose holds this guard placed again under a new store epoch (after the
    /// store lost them: `hold_again.rs`).
    pub calls_held_again: AtomicU64,
    /// Calls decided from the ledger while the counter store did not answer
    /// (`settings.spend_failure_mode = "allow"`), admitted or refused.
    pub ledger_answered: AtomicU64,
    /// Cost counters such a call skipped: keyed by what the ledger cannot answer (a model's
    /// total or shared public use, a generic rule's attributes).
    pub budget_unanswerable: AtomicU64,
    /// Ledger reads of such calls in progress (a gauge, not in `snapshot`).
    pub ledger_reads: AtomicU64,
}

impl Stats {
    /// Every count by name.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("admitted", read(&self.admitted)),
            ("refused", read(&self.refused)),
            ("uncounted", read(&self.uncounted)),
            ("unavailable", read(&self.unavailable)),
            ("store_errors", read(&self.store_errors)),
            ("reserve_retries", read(&self.reserve_retries)),
            ("billed", read(&self.billed)),
            ("released", read(&self.released)),
            ("settle_failures", read(&self.settle_failures)),
            ("settles_retried", read(&self.settles_retried)),
            ("dropped", read(&self.dropped)),
            ("recovering", read(&self.recovering)),
            ("epochs_written", read(&self.epochs_written)),
            ("given_up", read(&self.given_up)),
            ("settles_carried", read(&self.settles_carried)),
            ("calls_held_again", read(&self.calls_held_again)),
            ("ledger_answered", read(&self.ledger_answered)),
            ("budget_unanswerable", read(&self.budget_unanswerable)),
        ]
    }
}

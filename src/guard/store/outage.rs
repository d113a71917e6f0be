//! Logging a counter-store outage once when it starts and once when it ends, with the number
//! of operations it affected, instead of once per failed call.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::guard::store::StoreError;

/// Tracks a store's outages, one at a time: logs once when one starts and once when it ends,
/// with the number of operations it affected. Lock-free: one atomic counts the failed
/// operations of the current outage (0 while the store is healthy).
#[derive(Debug, Default)]
pub struct OutageLog {
    failures: AtomicU64,
}

/// What a call to [`OutageLog::failed`] or [`OutageLog::succeeded`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    /// Nothing to log: the outage goes on, or the store stays healthy.
    None,
    /// This failure started an outage (logged as a warning).
    Started,
    /// This success ended an outage that affected this many operations (logged).
    Ended(u64),
}

impl OutageLog {
    /// A healthy store.
    pub const fn new() -> Self {
        Self {
            failures: AtomicU64::new(0),
        }
    }

    /// Records a failed store operation. Logs a warning only for the first failure of an
    /// outage; every failure is counted into the outage's total.
    pub(crate) fn failed(&self, operation: &str, error: &StoreError) -> Transition {
        if self.failures.fetch_add(1, Ordering::AcqRel) == 0 {
            log::warn!(
                "counter store outage started: {operation}: {error}; further failures are \
                 counted and reported when the store answers again"
            );
            Transition::Started
        } else {
            Transition::None
        }
    }

    /// Records a successful store operation. Ends the current outage, if any, logging how
    /// many operations it affected. Costs one atomic load while the store is healthy.
    pub(crate) fn succeeded(&self) -> Transition {
        if self.failures.load(Ordering::Acquire) == 0 {
            return Transition::None;
        }
        // Each failure is counted into exactly one outage: the swap takes the whole count.
        match self.failures.swap(0, Ordering::AcqRel) {
            0 => Transition::None,
            affected => {
                log::warn!(
                    "counter store outage ended: {affected} operation{} affected",
                    if affected == 1 { "" } else { "s" }
                );
                Transition::Ended(affected)
            }
        }
    }

    /// [`OutageLog::failed`], for a caller that only reports the failure (the engine: every
    /// store failure it meets is logged here, once per outage).
    pub(crate) fn log_failed(&self, operation: &str, error: &StoreError) {
        self.failed(operation, error);
    }

    /// [`OutageLog::succeeded`], for a caller that only reports that the store answered.
    pub(crate) fn answered(&self) {
        self.succeeded();
    }

    /// Failed operations in the current outage (0 while healthy).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn affected(&self) -> u64 {
        self.failures.load(Ordering::Acquire)
    }
}

/// The outage log of the stores that keep none of their own (`CounterStore::outage`).
pub(crate) static SHARED_OUTAGE: OutageLog = OutageLog::new();

#[cfg(test)]
mod tests {
    use super::*;

    fn error() -> StoreError {
        StoreError("redis admit: connection refused".into())
    }

    #[test]
    fn an_outage_starts_once_and_ends_with_its_count() {
        let log = OutageLog::new();
        assert_eq!(log.succeeded(), Transition::None);
        assert_eq!(log.failed("admit", &error()), Transition::Started);
        assert_eq!(log.failed("admit", &error()), Transition::None);
        assert_eq!(log.failed("bill", &error()), Transition::None);
        assert_eq!(log.affected(), 3);
        assert_eq!(log.succeeded(), Transition::Ended(3));
        assert_eq!(log.succeeded(), Transition::None);
        assert_eq!(log.affected(), 0);
    }

    #[test]
    fn a_second_outage_starts_again() {
        let log = OutageLog::new();
        log.failed("admit", &error());
        log.succeeded();
        assert_eq!(log.failed("usage", &error()), Transition::Started);
        assert_eq!(log.succeeded(), Transition::Ended(1));
    }

    #[test]
    fn concurrent_failures_start_one_outage_and_are_all_counted() {
        let log = std::sync::Arc::new(OutageLog::new());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let log = log.clone();
                std::thread::spawn(move || {
                    (0..100)
                        .filter(|_| log.failed("admit", &error()) == Transition::Started)
                        .count()
                })
            })
            .collect();
        let starts: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(starts, 1);
        assert_eq!(log.succeeded(), Transition::Ended(800));
    }
}

//! What the ledger's writer says while a database does not take its rows: the first failure
//! at once, then one line a minute while it goes on (the writer retries every second, and
//! each flush, sum or query tries again too: an outage of ten minutes logged a line per
//! attempt), and one line when writes resume, with how long and how many attempts it took.

use std::time::{Duration, Instant};

/// How often a failure that goes on is logged again.
const AGAIN_AFTER: Duration = Duration::from_secs(60);

/// One kind of write's failures (the usage rows', the audit rows').
pub(super) struct FailureLog {
    what: &'static str,
    /// Since when writes fail, the attempts since, and when a line was last logged.
    failing: Option<(Instant, u64, Instant)>,
}

impl FailureLog {
    pub(super) fn new(what: &'static str) -> Self {
        FailureLog {
            what,
            failing: None,
        }
    }

    /// Logs what a write of `rows` came to (`written`), and answers it.
    pub(super) fn after(&mut self, written: Result<(), String>, rows: usize) -> Result<(), String> {
        match &written {
            Ok(()) => self.succeeded(),
            Err(e) => self.failed(rows, e),
        }
        written
    }

    /// A write failed with `rows` kept for the next attempt.
    fn failed(&mut self, rows: usize, error: &str) {
        let now = Instant::now();
        let what = self.what;
        match &mut self.failing {
            None => {
                log::warn!(
                    "{what} write failed ({rows} rows kept): {error}; retried every second, \
                     logged again once a minute while it fails"
                );
                self.failing = Some((now, 1, now));
            }
            Some((since, attempts, logged)) => {
                *attempts += 1;
                if now.duration_since(*logged) >= AGAIN_AFTER {
                    log::warn!(
                        "{what} writes still failing after {}s and {attempts} attempts \
                         ({rows} rows kept): {error}",
                        now.duration_since(*since).as_secs()
                    );
                    *logged = now;
                }
            }
        }
    }

    /// A write succeeded: says so once if writes had been failing.
    fn succeeded(&mut self) {
        if let Some((since, attempts, _)) = self.failing.take() {
            log::warn!(
                "{} writes resumed after {}s and {attempts} failed attempts",
                self.what,
                since.elapsed().as_secs()
            );
        }
    }

    /// Whether writes are failing now.
    #[cfg(test)]
    pub(super) fn is_failing(&self) -> bool {
        self.failing.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_one_line_then_one_a_minute_then_one_when_it_ends() {
        let mut log = FailureLog::new("ledger");
        let down = || Err("down".to_string());
        assert_eq!(log.after(down(), 3), down());
        assert!(log.is_failing());
        for _ in 0..100 {
            let _ = log.after(down(), 3);
        }
        let (_, attempts, logged) = log.failing.unwrap();
        assert_eq!(attempts, 101);
        // Pretend the last line was logged over a minute ago: the next failure logs again.
        log.failing = Some((logged - AGAIN_AFTER * 2, attempts, logged - AGAIN_AFTER));
        let _ = log.after(down(), 3);
        let (_, attempts, again) = log.failing.unwrap();
        assert_eq!(attempts, 102);
        assert!(
            again > logged - AGAIN_AFTER,
            "the line logged now is remembered"
        );
        assert_eq!(log.after(Ok(()), 3), Ok(()));
        assert!(!log.is_failing());
    }
}

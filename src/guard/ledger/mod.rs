//! The usage ledger: one append-only row per billed call, written off the admission path by a
//! background writer thread in batches, idempotent by ticket id. The queue to the writer is
//! bounded in rows and in age (see `queue`): a `kill -9` loses at most about the last 250 ms
//! of acknowledged rows, and a durable ledger none. It answers usage queries
//! (grouped by user, team, model and day) and the sums that fill counters after a restart.
//!
//! Every backend operation runs on the writer thread, in the order it was asked: a sum or a
//! query therefore sees every row recorded before it, and a blocking database client never
//! runs inside an async runtime.

mod audit;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod audit_db;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod failure_log;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod quota_db;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod quota_schema;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql_ledger;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod write_queue;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod writer;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod writer_loop;

#[cfg(feature = "python")]
use std::sync::{Arc, Weak};

pub(crate) use self::audit::STORE_EPOCH;
pub use self::audit::{AuditQuery, AuditRow};
#[cfg(feature = "postgres")]
pub use self::postgres::{Postgres, PostgresLedger};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use self::quota_db::{QuotaDb, QuotaDbAt};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use self::sql::SqlValue;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use self::sql_ledger::SqlLedger;
#[cfg(feature = "sqlite")]
pub use self::sqlite::{Sqlite, SqliteLedger};

use crate::guard::domain::clock::Millis;
pub use crate::guard::domain::recorded::{RowCondition, RowField};
use crate::guard::domain::rule::Metric;

/// One billed call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerRow {
    /// The ticket's id (or `<batch id>/<result id>` for a batch result): the primary key.
    pub ticket_id: String,
    /// When the call was billed (ms since the epoch, guard clock).
    pub at_ms: Millis,
    pub user: Option<String>,
    /// Every team on the call's path.
    pub teams: Vec<String>,
    /// The source billed: `direct`, `team` or `public`.
    pub source_type: String,
    pub source_id: String,
    pub model: String,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    pub cost_micros: u64,
    pub compute_ms: u64,
    pub request_id: Option<String>,
    /// Free JSON the caller attached.
    pub metadata: Option<serde_json::Value>,
    /// The call's attributes a generic rule reads (`recorded::row_json`), if any.
    pub attributes: Option<serde_json::Value>,
}

impl LedgerRow {
    /// The billed team (when the source is a team).
    pub fn team(&self) -> Option<&str> {
        (self.source_type == "team").then_some(self.source_id.as_str())
    }
}

/// Which rows a counter sum counts: every set field must match; the time range is
/// `[since, until)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SumFilter {
    pub user: Option<String>,
    /// The billed team (`source_type = 'team' AND source_id = team`).
    pub team: Option<String>,
    /// The billed source type (`public` for a model's public use).
    pub source_type: Option<String>,
    pub model: Option<String>,
    pub since: Millis,
    pub until: Millis,
    /// Conditions on the user, model and recorded attributes (a generic rule's counter).
    pub attributes: Vec<RowCondition>,
}

/// What to group usage by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupBy {
    User,
    Team,
    Model,
    Day,
    /// The UTC hour (`YYYY-MM-DDTHH:00:00Z`): the dashboard's series; not a `group_by` word.
    Hour,
}

impl GroupBy {
    /// The `group_by` words (`FromStr` reads these; `Hour` is not one).
    const ALL: [GroupBy; 4] = [GroupBy::User, GroupBy::Team, GroupBy::Model, GroupBy::Day];

    /// The word for the key (also its `Display`).
    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::User => "user",
            GroupBy::Team => "team",
            GroupBy::Model => "model",
            GroupBy::Day => "day",
            GroupBy::Hour => "hour",
        }
    }
}

crate::guard::domain::words::words!(GroupBy);

/// A usage query: filters (`None` matches everything; `team` is the billed team) and the keys
/// to group by, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageQuery {
    pub user: Option<String>,
    pub team: Option<String>,
    pub model: Option<String>,
    pub since: Option<Millis>,
    pub until: Option<Millis>,
    pub group_by: Vec<GroupBy>,
}

/// Usage of one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageGroup {
    /// The group's keys, in `group_by` order (`None` e.g. for the team of a non-team call).
    pub keys: Vec<(GroupBy, Option<String>)>,
    pub requests: u64,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    pub cost_micros: u64,
    pub compute_ms: u64,
}

impl UsageGroup {
    /// Input plus output tokens.
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// The ledger could not be opened, written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("usage ledger error: {0}")]
pub struct LedgerError(pub String);

/// What a [`LedgerError`] of a ledger that did not answer in time says (`is_timeout`).
pub(crate) const TIMED_OUT: &str = "did not answer within";

impl LedgerError {
    /// Whether the ledger did not answer in time (its database held up), rather than
    /// answering with an error.
    pub fn is_timeout(&self) -> bool {
        self.0.contains(TIMED_OUT)
    }
}

/// A ledger row still to be built (by the writer thread, off the billing thread).
pub type RowMaker = Box<dyn FnOnce() -> LedgerRow + Send>;

/// Where billed calls are recorded. `record` queues; it waits only for backpressure (the
/// writer is behind) or, on a durable ledger, for its row's commit, and never longer than a
/// bounded time when the database is gone. Everything else waits for the writer thread.
pub trait Ledger: Send + Sync + std::fmt::Debug {
    /// Queues a row for writing (a row with a ticket id already written is ignored). Waits
    /// while the writer is behind; a durable ledger returns once the row is committed. A row
    /// the writer cannot take in time (database gone, queue full) is dropped and counted.
    fn record(&self, row: LedgerRow);
    /// [`Ledger::record`] of the row `make` builds. A ledger with a writer thread builds it
    /// there: billing only queues it.
    fn record_made(&self, make: RowMaker) {
        self.record(make())
    }
    /// Waits until every row queued before the call is written (a closed ledger: nothing
    /// to wait for, `close` wrote them).
    fn flush(&self) -> Result<(), LedgerError>;
    /// [`Ledger::flush`], waiting at most `wait` (an error past it: the rows not written yet
    /// stay queued).
    fn flush_within(&self, wait: std::time::Duration) -> Result<(), LedgerError> {
        let _ = wait;
        self.flush()
    }
    /// Flushes and stops the writer; later records are dropped (and counted).
    fn close(&self) -> Result<(), LedgerError>;
    /// The sum of `metric` over the rows matching `filter` (`requests` counts rows).
    fn sum(&self, filter: &SumFilter, metric: Metric) -> Result<u64, LedgerError>;
    /// Usage grouped as asked.
    fn query(&self, query: &UsageQuery) -> Result<Vec<UsageGroup>, LedgerError>;
    /// Rows waiting to be written, and rows dropped (the ledger was closed, or its writer
    /// could not take them in time).
    fn pending(&self) -> (usize, u64);
    /// Queues an event's row for the audit log, without waiting (a ledger with no audit log
    /// ignores it). Written in order with the usage rows; an event id already written is
    /// ignored.
    fn record_event(&self, row: AuditRow) {
        let _ = row;
    }
    /// The audit rows `query` selects, oldest first (after every row queued before it).
    fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRow>, LedgerError> {
        let _ = query;
        Ok(Vec::new())
    }
}

/// Every ledger opened in this process or the one it was forked from (lock-free: a forked
/// child reads it whatever a parent thread was doing at the fork).
#[cfg(feature = "python")]
static OPEN_LEDGERS: arc_swap::ArcSwapOption<Vec<Weak<dyn Ledger>>> =
    arc_swap::ArcSwapOption::const_empty();

#[cfg(feature = "python")]
/// Remembers a ledger so `flush_all` reaches it (at interpreter exit).
pub(crate) fn register_open(ledger: &Arc<dyn Ledger>) {
    OPEN_LEDGERS.rcu(|open| {
        let mut open: Vec<Weak<dyn Ledger>> = open
            .iter()
            .flat_map(|v| v.iter())
            .filter(|w| w.strong_count() > 0)
            .cloned()
            .collect();
        open.push(Arc::downgrade(ledger));
        Some(Arc::new(open))
    });
}

/// Set once the process is ending (`flush_all`): every row recorded from then on is written
/// before its `record` returns (`write_queue`), since no later flush will write it. Read
/// under each queue's lock, and set before `flush_all` queues its flushes: a row is either
/// ahead of its ledger's flush or recorded as durable.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) static EXITING: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

#[cfg(feature = "python")]
/// Flushes every ledger still alive, waiting `budget` at most in all (the process is
/// ending: a database that does not answer must not keep it); returns the errors' texts.
pub(crate) fn flush_all(budget: std::time::Duration) -> Vec<String> {
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    EXITING.store(true, std::sync::atomic::Ordering::SeqCst);
    let live: Vec<Arc<dyn Ledger>> = OPEN_LEDGERS
        .load()
        .iter()
        .flat_map(|v| v.iter())
        .filter_map(Weak::upgrade)
        .collect();
    let deadline = std::time::Instant::now() + budget;
    live.iter()
        .filter_map(|l| {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            l.flush_within(left).err().map(|e| e.to_string())
        })
        .collect()
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// The day (`YYYY-MM-DD`, UTC) of an instant.
pub(crate) fn day_of(at_ms: Millis) -> String {
    use chrono::Datelike;
    match chrono::DateTime::from_timestamp_millis(at_ms) {
        // What `%Y-%m-%d` writes for a four-digit year, without parsing the format per row.
        Some(t) if (0..=9999).contains(&t.year()) => {
            format!("{:04}-{:02}-{:02}", t.year(), t.month(), t.day())
        }
        Some(t) => t.format("%Y-%m-%d").to_string(),
        None => "invalid".into(),
    }
}

//! Counter keys and the values that cross the store boundary: what a store reads, the holds
//! an all-or-none reservation places, and the use a settle adds. Plain data, no I/O.

use std::sync::Arc;

use super::clock::Millis;
use super::rule::CounterId;

/// One counter in one time bucket.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CounterKey {
    pub id: Arc<CounterId>,
    /// The bucket's start (0 for concurrency counters).
    pub bucket: Millis,
}

impl CounterKey {
    /// A stable text form, `<counter>:<bucket start in seconds>`, for stores keyed by text.
    pub fn render(&self) -> String {
        format!("{}:{}", self.id.render(), self.bucket.div_euclid(1000))
    }
}

/// What a counter holds at an instant: billed use and live holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterRead {
    pub used: u64,
    /// The sum of holds that have not expired.
    pub held: u64,
}

impl CounterRead {
    /// Used plus held.
    pub fn total(&self) -> u64 {
        self.used.saturating_add(self.held)
    }
}

/// One hold to place (and, with a limit, to check) in an all-or-none reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReserveItem {
    pub key: CounterKey,
    pub hold: u64,
    /// The amount of the tightest rule checked on this counter; `None` when the call only
    /// adds to it. With a limit, the store requires `counted < limit` and
    /// `counted + hold <= limit`, where `counted = used + live holds + carried`.
    pub limit: Option<u64>,
    /// What the previous bucket carries into a sliding window, computed by the guard at the
    /// same instant (it can only shrink afterwards, so checking with it is safe).
    pub carried: u64,
    /// Until when the counter must be kept.
    pub retain_until: Millis,
}

/// The outcome of a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReserveOutcome {
    /// Every hold was placed.
    Reserved,
    /// Item `item` did not fit; nothing was placed.
    Conflict { item: usize },
    /// A fenced item's counters cannot be trusted (docs/redis.md, "The epoch fence");
    /// nothing was placed.
    Fenced(FenceAnswer),
}

/// Why a fenced reserve placed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceAnswer {
    /// The epoch is missing or was written by another store process (restart, failover,
    /// reload).
    Untrusted,
    /// The store's epoch is of another generation than the guard's (another guard recovered).
    Stale,
    /// A counter the epoch expects is missing (lost while the store kept running).
    CounterLost,
}

/// A hold to give back when a ticket settles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldRef {
    pub key: CounterKey,
    pub amount: u64,
}

/// Use to add to a counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageAdd {
    pub key: CounterKey,
    pub amount: u64,
    pub retain_until: Millis,
}

/// The minute number a hold expires at: holds are grouped by expiry minute (`r<minute>`).
pub fn expiry_minute(now: Millis, hold_for_ms: i64) -> i64 {
    (now + hold_for_ms).div_euclid(60_000) + 1
}

/// Whether holds of `minute` are still live at `now`.
pub(crate) fn hold_is_live(minute: i64, now: Millis) -> bool {
    minute * 60_000 > now
}

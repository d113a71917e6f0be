//! Counter keys and the values that cross the store boundary: what a store reads, the holds
//! an all-or-none reservation places, and what a settle gives back and adds. Plain data, no I/O.
//!
//! Holds belong to a counter, not to one of its buckets: a read of any bucket of a counter
//! counts every live hold of that counter, so an open call counts in full in every window it
//! overlaps until it is settled or its holds expire. Every reservation carries its ticket id;
//! the store records that the reservation landed, and a settle by ticket id gives back exactly
//! that reservation (nothing if it never landed) and leaves a settled mark, so settles are
//! idempotent and a reservation that lands after its ticket settled places nothing.

use std::fmt::Write as _;
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
        let mut out = String::with_capacity(80);
        self.render_into(&mut out);
        out
    }

    /// Appends [`CounterKey::render`] to `out`.
    pub fn render_into(&self, out: &mut String) {
        self.id.render_into(out);
        let _ = write!(out, ":{}", self.bucket.div_euclid(1000));
    }
}

/// What a counter holds at an instant: billed use in the bucket read, and live holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterRead {
    pub used: u64,
    /// The sum of the counter's holds that have not expired, whatever bucket was read.
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
    /// Every hold was placed (or this ticket's reservation had already landed: a reservation
    /// is placed at most once per ticket id).
    Reserved,
    /// Item `item` did not fit; nothing was placed.
    Conflict { item: usize },
    /// A fenced item's counters cannot be trusted (docs/redis.md, "The epoch fence");
    /// nothing was placed.
    Fenced(FenceAnswer),
    /// The ticket was already settled (given up, released or billed): nothing was placed.
    Settled,
}

/// A reservation decided from known counter values (read in this admission, or cached from
/// earlier answers), for a store to check against what the decision rested on and place in
/// one step (`CounterStore::reserve_known`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownReserve {
    pub ticket: String,
    /// The counter keys the decision read: each counter's current bucket, in slot order.
    pub counters: Vec<CounterKey>,
    /// Previous buckets of sliding windows: the key and the index of its counter.
    pub previous: Vec<(CounterKey, usize)>,
    /// The holds to place, checked as in `reserve`; each item's key is one of `counters`.
    pub items: Vec<ReserveItem>,
    /// Per item: the index of its counter, and, for a sliding window, the index of its
    /// previous bucket in `previous` with the use the decision assumed there (`carried` was
    /// computed from it; a larger use now means the decision no longer holds).
    pub item_counters: Vec<usize>,
    pub item_previous: Vec<Option<(usize, u64)>>,
    /// Per source the decision passed over for having nothing left: its rules as (counter
    /// index, amount, carried). The reservation stands only while each such source still has
    /// a rule with `used + held + carried >= amount`.
    pub skipped: Vec<Vec<(usize, u64, u64)>>,
    pub expiry_minute: i64,
}

/// What `reserve_known` answers: the outcome (`Moved` when a condition the decision rested
/// on no longer holds) and, unless the store did not look (fenced, settled), the fresh
/// values: per counter its bucket's use and live holds (after the holds placed, when
/// reserved), then per previous bucket its use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownAnswer {
    pub outcome: KnownOutcome,
    pub counters: Vec<CounterRead>,
    pub previous: Vec<u64>,
}

/// The outcome of `reserve_known`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnownOutcome {
    /// As `reserve` answers.
    Reserve(ReserveOutcome),
    /// A source the decision passed over has room now, or a previous bucket it counted grew:
    /// nothing was placed; decide again from the fresh values.
    Moved,
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
    /// The store's epoch was written by a recovery moments ago and other guards may still be
    /// placing their open calls' holds again under it: fenced reservations wait until the
    /// time it set (docs/redis.md, "The epoch fence").
    HoldingAgain,
}

/// A settle: gives back a reservation's holds and adds use, once per `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settle {
    /// The id settled: a second settle of the same id does nothing (until `settled_until`).
    pub id: String,
    /// The ticket whose reservation `holds` belong to: `id` itself for a call or a whole
    /// batch; the batch's id when `id` is one of its parts (then `holds` is the part's share,
    /// given back if the batch's reservation landed, whether or not the batch finished).
    pub ticket: String,
    /// The holds to give back (placed under `expiry_minute`). For a whole settle they are
    /// given back only if the ticket's reservation landed; a hold already expired is left.
    pub holds: Vec<HoldRef>,
    pub expiry_minute: i64,
    /// Use to add, in the buckets of the moment of billing.
    pub adds: Vec<UsageAdd>,
    /// Until when the settled mark of `id` is kept (a retry of this settle sent before then
    /// finds it). A whole ticket whose reservation never landed keeps its mark at least until
    /// `expiry_minute` starts, so a reservation landing late places nothing.
    pub settled_until: Millis,
}

impl Settle {
    /// Whether this settles a whole ticket (not a part of a batch).
    pub fn is_whole(&self) -> bool {
        self.id == self.ticket
    }
}

/// The outcome of a settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleOutcome {
    /// This call settled the id.
    Settled,
    /// The id was already settled: nothing was given back or added.
    AlreadySettled,
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

/// One part of a batch in a `PartsSettle`: its share of the batch's holds and, for a bill, the
/// use to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartSettle {
    /// The part's id, `<batch id>/<result id>`: its record is the mark that it settled.
    pub id: String,
    /// The part's share of the batch's holds, given back once (if the batch's reservation
    /// landed), by whichever comes first: its bill or the batch's finish.
    pub holds: Vec<HoldRef>,
    /// A bill (adds `adds` once) or a finish (gives the share back only; a bill after it still
    /// adds its use once).
    pub bill: bool,
    /// Use to add, in the buckets of the moment of billing (a bill only).
    pub adds: Vec<UsageAdd>,
}

/// Parts of one batch settled in one atomic store step (`CounterStore::settle_parts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartsSettle {
    /// The batch's ticket id (whose reservation the shares belong to).
    pub ticket: String,
    /// The expiry minute the batch's holds were placed under.
    pub expiry_minute: i64,
    /// Until when each part's record is kept (at least as long as the batch's holds could
    /// count, so no share is given back twice and no result billed twice).
    pub settled_until: Millis,
    pub parts: Vec<PartSettle>,
}

//! A guard process's leases, kept in memory: per counter its slice (a hold the store placed
//! under the lease's own id), what open calls took from it, and the use billed against it
//! that the store has not been told yet. Plain data under one lock; the store work is in
//! `renew.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use crate::guard::domain::clock::Millis;
use crate::guard::domain::counter::hold_is_live;
use crate::guard::domain::rule::{CounterId, Scope};
use crate::guard::domain::window::Window;
use crate::guard::store::{CounterKey, CounterRead, HoldRef, PartsSettle};

/// How long the rate a counter is reserved at is measured over.
const RATE_SPAN_MS: Millis = 1_000;

/// Whether a counter may be leased: one every call of a model or team touches (a Model
/// Total, public shared use, a team's shared or total budget, a generic rule's subject).
/// A person's own counters are theirs alone, and a concurrency counter counts calls, not use.
pub(crate) fn leasable(id: &CounterId) -> bool {
    let shared = matches!(
        id.scope,
        Scope::ModelTotal
            | Scope::PublicShared
            | Scope::TeamShared
            | Scope::TeamTotal
            | Scope::Rule
    );
    shared && id.window != Window::WhileRunning
}

/// One lease: a hold of `placed` on the counter, placed by the store under `id`.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    pub(crate) id: String,
    /// The key the hold was placed under (holds are the counter's, whatever the bucket).
    pub(crate) key: CounterKey,
    pub(crate) minute: i64,
    /// What the store holds under the lease's id: what calls may use of it, less what they
    /// took and the use billed against it (use billed while it was placed is in `pending`).
    pub(crate) placed: u64,
    /// The tightest amount checked on the counter when the lease was taken.
    pub(crate) limit: u64,
    /// What open calls hold of the slice.
    pub(crate) taken: u64,
    /// Use billed against the slice, per bucket, not yet added in the store.
    pub(crate) pending: Vec<(CounterKey, u64)>,
    /// The counter's buckets as the store answered at the last renewal (used, holds).
    pub(crate) base: Vec<(Millis, CounterRead)>,
    pub(crate) renewed_at: Millis,
    /// No new call takes from it (the counter neared its amount); it lives on while calls
    /// it admitted are open, then is given back.
    pub(crate) draining: bool,
    /// The store lost it (a fenced answer): renew before the next take.
    pub(crate) lost: bool,
}

impl Lease {
    pub(crate) fn pending_total(&self) -> u64 {
        self.pending
            .iter()
            .fold(0u64, |sum, (_, used)| sum.saturating_add(*used))
    }

    /// What is left of the slice for new calls.
    pub(crate) fn free(&self) -> u64 {
        self.placed
            .saturating_sub(self.taken)
            .saturating_sub(self.pending_total())
    }

    /// The counter's bucket `key` as this guard sees it: the store's last answer, with the
    /// use billed here since, and the free part of the slice not counted as held (this
    /// guard may still use it).
    pub(crate) fn read(&self, key: &CounterKey) -> CounterRead {
        let base = self
            .base
            .iter()
            .find(|(bucket, _)| *bucket == key.bucket)
            .map(|(_, read)| *read)
            .unwrap_or_default();
        let pending: u64 = self
            .pending
            .iter()
            .filter(|(k, _)| k.bucket == key.bucket)
            .map(|(_, used)| *used)
            .sum();
        let held = self.base.first().map_or(0, |(_, read)| read.held);
        CounterRead {
            used: base.used.saturating_add(pending),
            held: held.saturating_sub(self.free()),
        }
    }

    /// The hold to give back when the lease ends.
    pub(crate) fn hold(&self) -> HoldRef {
        HoldRef {
            key: self.key.clone(),
            amount: self.placed,
        }
    }
}

/// A counter's state in the book.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    pub(crate) lease: Option<Lease>,
    /// Reserves seen in the current span, and the span's start.
    calls: u64,
    span_start: Millis,
    /// The rate (reserves per second) of the last full span.
    pub(crate) rate: f64,
    /// The largest hold a call asked of the counter lately (a slice is never smaller).
    pub(crate) largest: u64,
    /// A renewal is in flight (only one at a time).
    pub(crate) renewing: bool,
    /// Leasing stopped (near the amount) until then.
    pub(crate) stopped_until: Millis,
    /// When a call last reserved on the counter.
    pub(crate) last_call: Millis,
    /// The fence the counter's last call was reserved under (generation, fenced), for the
    /// timer's renewals.
    pub(crate) fence: Option<(String, bool)>,
}

impl Slot {
    /// Counts one reserve of `hold` at `now`.
    pub(crate) fn count(&mut self, hold: u64, now: Millis) {
        if now - self.span_start >= RATE_SPAN_MS {
            let elapsed = (now - self.span_start).max(RATE_SPAN_MS);
            self.rate = if elapsed > 2 * RATE_SPAN_MS {
                0.0
            } else {
                self.calls as f64 * 1000.0 / elapsed as f64
            };
            self.calls = 0;
            self.span_start = now;
            self.largest = 0;
        }
        self.calls += 1;
        self.last_call = now;
        self.largest = self.largest.max(hold);
    }
}

impl Slot {
    /// The reserve rate now: the last full span's, or the current span's so far when higher
    /// (a burst is seen before its first span ends).
    pub(crate) fn rate_now(&self, now: Millis) -> f64 {
        let elapsed = (now - self.span_start).clamp(100, RATE_SPAN_MS);
        self.rate.max(self.calls as f64 * 1000.0 / elapsed as f64)
    }
}

/// What one ticket took from leases: per counter, the amount.
pub(crate) type Takes = Vec<(Arc<CounterId>, u64)>;

/// The book of one store's leases in this process.
#[derive(Debug, Default)]
pub(crate) struct Book {
    pub(crate) slots: HashMap<Arc<CounterId>, Slot>,
    /// Open tickets' takes, by ticket id, with the minute their holds expire in.
    pub(crate) tickets: HashMap<String, (Takes, i64)>,
    /// When tickets past their holds' expiry were last put back.
    last_expiry_sweep: Millis,
    /// Settle ids and tickets whose holds or use on leased counters were answered here:
    /// until when that is kept, and the counters.
    handled: HashMap<String, (Millis, Vec<Arc<CounterId>>)>,
    last_sweep: Millis,
    /// Flush steps the store did not answer, sent again first (same part ids).
    pub(crate) stuck: Vec<PartsSettle>,
    /// Flush steps made (for their part ids).
    pub(crate) flushes: u64,
}

impl Book {
    /// Gives back what `ticket` took (once): the amounts leave the slices' `taken`.
    pub(crate) fn put_back(&mut self, ticket: &str) -> Takes {
        let takes = self.tickets.remove(ticket).unwrap_or_default().0;
        for (id, amount) in &takes {
            if let Some(lease) = self.slots.get_mut(id).and_then(|s| s.lease.as_mut()) {
                lease.taken = lease.taken.saturating_sub(*amount);
            }
        }
        takes
    }

    /// Puts back (at most once a second) what tickets past their holds' expiry took, as the
    /// store drops an expired hold: a ticket never settled here (billed in a forked child,
    /// leaked) would otherwise keep its take, and the lease it took from, for ever. Its late
    /// bill, finding no take, goes to the store whole. Answers how many were put back.
    pub(crate) fn put_back_expired(&mut self, now: Millis) -> usize {
        if now - self.last_expiry_sweep < 1_000 {
            return 0;
        }
        self.last_expiry_sweep = now;
        let expired: Vec<String> = self
            .tickets
            .iter()
            .filter(|(_, (_, minute))| !hold_is_live(*minute, now))
            .map(|(ticket, _)| ticket.clone())
            .collect();
        for ticket in &expired {
            self.put_back(ticket);
        }
        expired.len()
    }

    /// Adds `used` on `key` (a bill on a leased counter) to its slice's use; false when the
    /// counter has no lease (the use goes to the store).
    pub(crate) fn add_use(&mut self, key: &CounterKey, used: u64) -> bool {
        let Some(lease) = self.slots.get_mut(&key.id).and_then(|s| s.lease.as_mut()) else {
            return false;
        };
        match lease.pending.iter_mut().find(|(k, _)| k == key) {
            Some((_, sum)) => *sum = sum.saturating_add(used),
            None => lease.pending.push((key.clone(), used)),
        }
        true
    }

    /// The leased counters an earlier settle of this id (or ticket) answered here.
    pub(crate) fn handled(&self, id: &str) -> Option<Vec<Arc<CounterId>>> {
        self.handled.get(id).map(|(_, ids)| ids.clone())
    }

    /// Records that settle `id` of `ticket` answered `local` here, kept until `until` (a
    /// retry, or a later settle of the ticket, must neither add that use again nor give
    /// those holds back in the store); forgets old records.
    pub(crate) fn mark_handled(
        &mut self,
        id: &str,
        ticket: &str,
        local: Vec<Arc<CounterId>>,
        until: Millis,
        now: Millis,
    ) {
        if ticket != id {
            self.handled
                .insert(ticket.to_string(), (until, local.clone()));
        }
        self.handled.insert(id.to_string(), (until, local));
        if now - self.last_sweep >= 60_000 {
            self.handled.retain(|_, (keep, _)| *keep > now);
            self.last_sweep = now;
        }
    }

    /// `keys` as their counters' leases see them (`None`: no lease).
    pub(crate) fn read_leased(&self, keys: &[CounterKey]) -> Vec<Option<CounterRead>> {
        keys.iter()
            .map(|key| {
                let lease = self.slots.get(&key.id).and_then(|s| s.lease.as_ref());
                lease.map(|lease| lease.read(key))
            })
            .collect()
    }

    /// The headroom held by this process's leases and not taken: what other guards cannot
    /// use now (the cost of leasing).
    pub(crate) fn unused(&self) -> u64 {
        self.slots
            .values()
            .filter_map(|s| s.lease.as_ref())
            .fold(0u64, |sum, lease| sum.saturating_add(lease.free()))
    }
}

//! Taking, renewing and giving back a lease in the store, and the timer that renews leases
//! with use to report and gives back idle ones.
//!
//! A renewal is three steps, each one script: read the counter; reserve a new lease (what
//! open calls took, plus a new slice) checked against the amount as if the old lease were
//! already given back; then settle the old lease by its id, giving its hold back and adding
//! the use billed against it. Between the last two the counter counts both leases (high,
//! never low). No call takes from the lease while it is renewed, and what calls billed
//! meanwhile is taken off the new slice, so a slice never lets use past the amount.

use std::sync::Arc;

use super::book::Lease;
use super::flush::Unanswered;
use super::Core;
use crate::guard::domain::clock::Millis;
use crate::guard::domain::rule::CounterId;
use crate::guard::store::Fence;
use crate::guard::store::{
    expiry_minute, CounterKey, CounterRead, FenceAnswer, HoldRef, ReserveItem, ReserveOutcome,
    StoreError,
};

/// A slice is sized for this many seconds of the calls seen on the counter (at least 8).
const SLICE_SPAN_S: f64 = 1.0;

/// What a renewal came to.
pub(super) enum Renewed {
    /// A lease with a slice is in place.
    Granted,
    /// No slice (the counter is near its amount, or the lease was idle): calls reserve in
    /// the store.
    Stopped,
    /// Another renewal of the counter is in flight.
    Busy,
    /// The store's epoch fence refused the lease.
    Fenced(FenceAnswer),
}

/// Renews the lease of `id` (taking one if there is none) for a call holding `need`, checked
/// against `limit` (0: the lease's own), under `fence` (generation, whether the counter is
/// fenced; `None`: the last one seen). Runs detached: a caller that gives up never leaves a
/// lease the book does not know.
pub(super) async fn renew(
    core: &Arc<Core>,
    id: Arc<CounterId>,
    need: u64,
    limit: u64,
    fence: Option<(String, bool)>,
    now: Millis,
) -> Result<Renewed, StoreError> {
    let work = {
        let core = core.clone();
        async move { renew_now(&core, id, need, limit, fence, now, false).await }
    };
    match crate::runtime::shared().spawn(work).await {
        Ok(renewed) => renewed,
        Err(e) => Err(StoreError(format!("lease renewal stopped: {e}"))),
    }
}

/// Clears a counter's `renewing` however the renewal ends.
struct Renewing<'a> {
    core: &'a Core,
    id: Arc<CounterId>,
}

impl Drop for Renewing<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.core.book().lock().slots.get_mut(&self.id) {
            slot.renewing = false;
        }
        self.core.renewed.notify_waiters();
    }
}

/// The lease as it was when its renewal started.
struct Before {
    lease: Option<Lease>,
    largest: u64,
    rate: f64,
    fence: Option<(String, bool)>,
}

fn begin(
    core: &Core,
    id: &Arc<CounterId>,
    fence: Option<(String, bool)>,
    now: Millis,
) -> Option<Before> {
    let mut book = core.book().lock();
    let slot = book.slots.entry(id.clone()).or_default();
    if slot.renewing {
        return None;
    }
    slot.renewing = true;
    if fence.is_some() {
        slot.fence = fence;
    }
    Some(Before {
        lease: slot.lease.clone(),
        largest: slot.largest,
        rate: slot.rate_now(now),
        fence: slot.fence.clone(),
    })
}

/// The renewal itself (see the module); with `stop`, no new slice (the lease only keeps
/// what open calls took, or is given back when they took nothing).
pub(super) async fn renew_now(
    core: &Arc<Core>,
    id: Arc<CounterId>,
    need: u64,
    limit: u64,
    fence: Option<(String, bool)>,
    now: Millis,
    stop: bool,
) -> Result<Renewed, StoreError> {
    let Some(before) = begin(core, &id, fence, now) else {
        return Ok(Renewed::Busy);
    };
    let _renewing = Renewing {
        core,
        id: id.clone(),
    };
    let old = before.lease.as_ref();
    let limit = match limit {
        0 => old.map_or(0, |l| l.limit),
        limit => limit,
    };
    let (current, previous) = keys_of(&id, now);
    let mut keys = vec![current.clone()];
    keys.extend(previous.clone());
    let reads = core.inner.read(keys, now).await?;
    let carried = id.window.carried(reads.get(1).map_or(0, |r| r.used), now);
    let counted = reads[0].total().saturating_add(carried);
    let slice = if stop {
        0
    } else {
        slice_for(core, &before, counted, limit, need)
    };
    let minute = expiry_minute(now, core.options.ttl_ms);
    let new = New {
        key: current.clone(),
        limit,
        carried,
        minute,
    };
    let (new_id, placed, slice) = match place(core, &before, new, slice, now).await? {
        Ok(placed) => placed,
        Err(answer) => {
            lost(core, &id);
            return Ok(Renewed::Fenced(answer));
        }
    };
    let base = Base {
        reads,
        current: &current,
        previous: previous.as_ref(),
    };
    let new = (new_id, placed, slice, limit, minute);
    if let Some(ended) = swap(core, &id, before.lease.as_ref(), new, base, now) {
        super::flush::settle_old(core, ended, now).await;
    }
    Ok(if slice > 0 {
        Renewed::Granted
    } else {
        Renewed::Stopped
    })
}

/// The counter's current bucket at `now` and, for a sliding window, the previous one.
fn keys_of(id: &Arc<CounterId>, now: Millis) -> (CounterKey, Option<CounterKey>) {
    let window = id.window;
    let current = CounterKey {
        id: id.clone(),
        bucket: window.bucket_start(now),
    };
    let previous = window
        .is_sliding()
        .then(|| window.previous_bucket_start(current.bucket))
        .flatten()
        .map(|bucket| CounterKey {
            id: id.clone(),
            bucket,
        });
    (current, previous)
}

/// The new slice: about `SLICE_SPAN_S` of the calls seen, at most `share` of what would be
/// left with the old lease given back; 0 when that is less than one call's hold.
fn slice_for(core: &Core, before: &Before, counted: u64, limit: u64, need: u64) -> u64 {
    let own_free = before.lease.as_ref().map_or(0, |l| {
        l.placed
            .saturating_sub(l.taken)
            .saturating_sub(l.pending_total())
    });
    let room = limit.saturating_sub(counted).saturating_add(own_free);
    let per_call = before.largest.max(need).max(1);
    let calls = (before.rate * SLICE_SPAN_S).max(8.0);
    let target = per_call.saturating_mul(calls as u64);
    let share = (core.options.share * room as f64) as u64;
    match target.min(share) {
        slice if slice < per_call => 0,
        slice => slice,
    }
}

/// What a new lease is placed on: the counter's current bucket, the amount checked, what
/// the previous bucket carries, the hold's expiry minute.
struct New {
    key: CounterKey,
    limit: u64,
    carried: u64,
    minute: i64,
}

/// Places the new lease: what open calls took of the old one plus `slice`, checked as if the
/// old one were given back. A counter that filled meanwhile gets only what open calls took
/// (no slice). Answers (its id, what it holds, the slice), or the fence's answer.
async fn place(
    core: &Arc<Core>,
    before: &Before,
    new: New,
    mut slice: u64,
    now: Millis,
) -> Result<Result<(String, u64, u64), FenceAnswer>, StoreError> {
    let (placed, taken, pending) = before
        .lease
        .as_ref()
        .map_or((0, 0, 0), |l| (l.placed, l.taken, l.pending_total()));
    // The old lease is given back right after, so the check may count its hold as free; not
    // a lease the store may have lost (its give-back would give nothing back).
    let credit = match before.lease.as_ref().is_some_and(|l| l.lost) {
        true => 0,
        false => placed.saturating_sub(pending),
    };
    if taken + slice == 0 {
        return Ok(Ok((String::new(), 0, 0)));
    }
    let fence = before.fence.as_ref().map(|(generation, on)| Fence {
        generation: generation.clone(),
        fenced: vec![*on],
    });
    let mut item = ReserveItem {
        key: new.key.clone(),
        hold: taken + slice,
        limit: (slice > 0).then(|| new.limit.saturating_add(credit)),
        carried: new.carried,
        retain_until: new.key.id.window.retain_until(new.key.bucket),
    };
    let mut id = core.lease_id();
    let mut outcome = reserve(core, &id, &item, new.minute, now, fence.clone()).await?;
    if matches!(outcome, ReserveOutcome::Conflict { .. }) {
        (slice, item.hold, item.limit) = (0, taken, None);
        id = core.lease_id();
        outcome = match taken {
            0 => return Ok(Ok((String::new(), 0, 0))),
            _ => reserve(core, &id, &item, new.minute, now, fence).await?,
        };
    }
    match outcome {
        ReserveOutcome::Reserved => Ok(Ok((id, item.hold, slice))),
        ReserveOutcome::Fenced(answer) => Ok(Err(answer)),
        other => Err(StoreError(format!(
            "a lease's reservation answered {other:?}"
        ))),
    }
}

/// Reserves lease `id`'s hold; what a reservation the store did not answer may have placed
/// is given back (`flush::Unanswered`).
async fn reserve(
    core: &Arc<Core>,
    id: &str,
    item: &ReserveItem,
    minute: i64,
    now: Millis,
    fence: Option<Fence>,
) -> Result<ReserveOutcome, StoreError> {
    let items = vec![item.clone()];
    let hold = HoldRef {
        key: item.key.clone(),
        amount: item.hold,
    };
    let in_flight = Unanswered::new(core, id, hold, minute, now);
    let outcome = match fence {
        Some(fence) => {
            core.inner
                .reserve_fenced(id.to_string(), items, minute, now, fence)
                .await
        }
        None => core.inner.reserve(id.to_string(), items, minute, now).await,
    };
    if outcome.is_ok() {
        in_flight.answered();
    }
    outcome
}

/// The store's last answer on the counter.
struct Base<'a> {
    reads: Vec<CounterRead>,
    current: &'a CounterKey,
    previous: Option<&'a CounterKey>,
}

/// Puts the new lease in the book in the old one's place; answers the old one, to settle.
/// `new` is (its id, what it holds, its slice, the amount checked, its expiry minute).
fn swap(
    core: &Core,
    id: &Arc<CounterId>,
    before: Option<&Lease>,
    new: (String, u64, u64, u64, i64),
    base: Base<'_>,
    now: Millis,
) -> Option<Lease> {
    let (new_id, placed, slice, limit, minute) = new;
    let mut book = core.book().lock();
    let slot = book.slots.entry(id.clone()).or_default();
    let mut old = slot.lease.take();
    if slice == 0 {
        slot.stopped_until = now + core.options.refresh_ms;
    }
    let old_placed = before.map_or(0, |l| l.placed);
    let taken = old.as_ref().map_or(0, |l| l.taken);
    if placed > 0 {
        // Use billed while the new lease was reserved is the new lease's to tell: the calls
        // that billed it took from the old lease, and the new one holds what they took
        // again (its check could not know they ended). Its flush gives back as much of the
        // new hold as it adds, so the counter counts no more than the check allowed; the
        // old lease's settle adds only the use billed before.
        let then = before.map(|l| l.pending.as_slice()).unwrap_or_default();
        let meanwhile = old
            .as_mut()
            .map(|l| billed_since(&mut l.pending, then))
            .unwrap_or_default();
        let mut reads = base.reads;
        reads[0].held = reads[0]
            .held
            .saturating_sub(old_placed)
            .saturating_add(placed);
        let mut lease = Lease {
            id: new_id,
            key: base.current.clone(),
            minute,
            placed,
            limit,
            taken,
            pending: meanwhile,
            base: vec![(base.current.bucket, reads[0])],
            renewed_at: now,
            draining: slice == 0,
            lost: false,
        };
        if let (Some(key), Some(read)) = (base.previous, reads.get(1)) {
            lease.base.push((key.bucket, *read));
        }
        for (key, used) in old.iter().flat_map(|l| l.pending.iter()) {
            if let Some((_, read)) = lease.base.iter_mut().find(|(b, _)| *b == key.bucket) {
                read.used = read.used.saturating_add(*used);
            }
        }
        slot.lease = Some(lease);
    }
    old
}

/// Takes off `pending` the use billed since it was `then` (per bucket), and answers it.
fn billed_since(
    pending: &mut Vec<(CounterKey, u64)>,
    then: &[(CounterKey, u64)],
) -> Vec<(CounterKey, u64)> {
    let mut since = Vec::new();
    for (key, used) in pending.iter_mut() {
        let before = then.iter().find(|(k, _)| k == key).map_or(0, |(_, u)| *u);
        let more = used.saturating_sub(before);
        if more > 0 {
            *used -= more;
            since.push((key.clone(), more));
        }
    }
    pending.retain(|(_, used)| *used > 0);
    since
}

/// Marks the lease of `id` lost (its store answered with the fence): renewed before use.
fn lost(core: &Core, id: &Arc<CounterId>) {
    if let Some(lease) = core
        .book()
        .lock()
        .slots
        .get_mut(id)
        .and_then(|s| s.lease.as_mut())
    {
        lease.lost = true;
    }
}

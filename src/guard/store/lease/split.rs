//! Each store operation split in two: what leased counters answer here (a read from the
//! lease, a hold taken from a slice, a bill added to a slice's use) and what is handed to
//! the store inside, with the indices of everything mapped between the two.

use std::sync::Arc;

use super::book::{leasable, Book, Takes};
use super::renew::{renew, Renewed};
use super::wait::{wait_for, RENEWAL_WAIT};
use super::Core;
use crate::guard::domain::clock::Millis;
use crate::guard::domain::rule::CounterId;
use crate::guard::store::{
    hold_is_live, CounterKey, CounterRead, Fence, KnownAnswer, KnownOutcome, KnownReserve,
    ReserveItem, ReserveOutcome, Settle, SettleOutcome, StoreError,
};

/// A reservation held longer than this is a batch's (25 h): never taken from a lease, whose
/// life is minutes.
const CALL_HOLD_MAX_MS: Millis = 16 * 60_000;
/// How many times a call leases, or waits for a renewal, before it goes to the store.
const LEASING_ROUNDS: usize = 2;
/// A lease this close to its expiry is renewed before a call takes from it.
const EXPIRY_MARGIN_MS: Millis = 30_000;

/// Reads `keys`: a counter this process leases from its lease (the store's answer at the
/// last renewal, with this process's use since), the rest from the store. Near the amount
/// (less than two calls' holds left) a leased counter is read from the store too, its
/// lease's free part not counted as held: a refusal is never decided from a stale value.
pub(super) async fn read(
    core: &Arc<Core>,
    keys: Vec<CounterKey>,
    now: Millis,
) -> Result<Vec<CounterRead>, StoreError> {
    let mut out: Vec<Option<CounterRead>> = vec![None; keys.len()];
    let mut own_free = vec![0u64; keys.len()];
    {
        let book = core.book().lock();
        for (i, key) in keys.iter().enumerate() {
            let Some(lease) = usable(&book, &key.id, now) else {
                continue;
            };
            let read = lease.read(key);
            let largest = book.slots.get(&key.id).map_or(0, |s| s.largest);
            match lease.limit.saturating_sub(read.total()) < largest.saturating_mul(2) {
                true => own_free[i] = lease.free(),
                false => out[i] = Some(read),
            }
        }
    }
    let asked: Vec<CounterKey> = (0..keys.len())
        .filter(|&i| out[i].is_none())
        .map(|i| keys[i].clone())
        .collect();
    if !asked.is_empty() {
        let mut answered = core.inner.read(asked, now).await?.into_iter();
        for (slot, free) in out.iter_mut().zip(&own_free) {
            if slot.is_none() {
                let mut read = answered.next().unwrap_or_default();
                read.held = read.held.saturating_sub(*free);
                *slot = Some(read);
            }
        }
    }
    Ok(out.into_iter().map(Option::unwrap_or_default).collect())
}

/// The lease of `id` a call may take from now: live, not lost, not draining, not renewing.
fn usable<'b>(book: &'b Book, id: &CounterId, now: Millis) -> Option<&'b super::book::Lease> {
    let slot = book.slots.get(id)?;
    let lease = slot.lease.as_ref()?;
    let live = hold_is_live(lease.minute, now + EXPIRY_MARGIN_MS);
    (live && !lease.lost && !lease.draining && !slot.renewing).then_some(lease)
}

/// What taking a call's items from leases came to.
enum Taking {
    /// Per item, whether a lease holds it.
    Done(Vec<bool>),
    /// These counters need a lease (or a larger one) first: (counter, the call's hold,
    /// the amount checked, the item's index).
    Renew(Vec<(Arc<CounterId>, u64, u64, usize)>),
    /// A counter's lease is being renewed: wait for it rather than go to its store.
    Wait,
    /// The ticket was settled here already: nothing is placed.
    Settled,
}

/// Takes `ticket`'s items from leases where it can, all or none per call. With `renew`,
/// answers the counters to lease first instead of passing them to the store; a call's
/// `first` round counts it towards each counter's rate.
fn take(
    core: &Core,
    ticket: &str,
    items: &[ReserveItem],
    minute: i64,
    now: Millis,
    renew: bool,
    first: bool,
) -> Taking {
    let mut book = core.book().lock();
    // A hold that lives long, or is already past its expiry (a late retry), is the store's.
    if minute * 60_000 > now + CALL_HOLD_MAX_MS || !hold_is_live(minute, now) {
        return Taking::Done(vec![false; items.len()]);
    }
    if let Some((takes, _)) = book.tickets.get(ticket) {
        // Placed again (a retry, or open calls held again after a recovery): once.
        let taken = items
            .iter()
            .map(|i| takes.iter().any(|(id, _)| *id == i.key.id));
        return Taking::Done(taken.collect());
    }
    if book.handled(ticket).is_some() {
        // Settled before this reservation landed: it places nothing (the store contract),
        // or its take would never be put back.
        return Taking::Settled;
    }
    let above = core.options.above_per_second;
    let (mut flags, mut takes, mut wanted): (Vec<bool>, Takes, Vec<_>) =
        (Vec::new(), Vec::new(), Vec::new());
    let mut wait = false;
    for (i, item) in items.iter().enumerate() {
        if !leasable(&item.key.id) || item.hold == 0 && item.limit.is_some() {
            flags.push(false);
            continue;
        }
        let slot = book.slots.entry(item.key.id.clone()).or_default();
        if first {
            slot.count(item.hold, now);
        }
        // A slice leased under a larger amount (the policy lowered it since) is renewed
        // under this one first: its free part may be past the new amount.
        let fits = usable(&book, &item.key.id, now).is_some_and(|l| {
            l.free() >= item.hold && item.limit.is_none_or(|limit| limit >= l.limit)
        });
        let slot = book.slots.get_mut(&item.key.id).expect("counted above");
        if fits {
            let lease = slot.lease.as_mut().expect("usable");
            lease.taken += item.hold;
            takes.push((item.key.id.clone(), item.hold));
            flags.push(true);
            continue;
        }
        // A draining lease (its counter near the amount) is renewed by the timer, not by
        // every call: leasing stopped until `stopped_until`.
        let leased = slot.lease.as_ref().is_some_and(|l| !l.draining);
        let wants = now >= slot.stopped_until && (leased || slot.rate_now(now) >= above);
        if renew && wants && item.limit.is_some() {
            match slot.renewing {
                true => wait = true,
                false => wanted.push((item.key.id.clone(), item.hold, item.limit.unwrap_or(0), i)),
            }
        }
        flags.push(false);
    }
    if !wanted.is_empty() || wait {
        for (id, amount) in &takes {
            if let Some(lease) = book.slots.get_mut(id).and_then(|s| s.lease.as_mut()) {
                lease.taken -= amount;
            }
        }
        return match wanted.is_empty() {
            true => Taking::Wait,
            false => Taking::Renew(wanted),
        };
    }
    if !takes.is_empty() {
        book.tickets.insert(ticket.to_string(), (takes, minute));
    }
    Taking::Done(flags)
}

/// Takes what leases can hold of a call, leasing first where a counter wants a lease (or
/// waiting, at most `RENEWAL_WAIT`, for a renewal in flight, rather than sending a burst of
/// calls to the counter's store meanwhile): per item whether a lease holds it, or the
/// answer when nothing is to be placed (a lease's reserve was fenced; the ticket settled).
async fn take_leasing(
    core: &Arc<Core>,
    ticket: &str,
    items: &[ReserveItem],
    minute: i64,
    now: Millis,
    fence: Option<&Fence>,
) -> Result<Result<Vec<bool>, ReserveOutcome>, StoreError> {
    for round in 0..=LEASING_ROUNDS {
        let renewed = core.renewed.notified();
        tokio::pin!(renewed);
        renewed.as_mut().enable();
        match take(
            core,
            ticket,
            items,
            minute,
            now,
            round < LEASING_ROUNDS,
            round == 0,
        ) {
            Taking::Done(flags) => return Ok(Ok(flags)),
            Taking::Settled => return Ok(Err(ReserveOutcome::Settled)),
            Taking::Wait => wait_for(renewed, RENEWAL_WAIT).await,
            Taking::Renew(wanted) => {
                for (id, need, limit, i) in wanted {
                    let on = fence.map(|f| {
                        (
                            f.generation.clone(),
                            f.fenced.get(i).copied().unwrap_or(false),
                        )
                    });
                    match renew(core, id, need, limit, on, now).await? {
                        Renewed::Fenced(answer) => return Ok(Err(ReserveOutcome::Fenced(answer))),
                        Renewed::Granted => super::timer::ensure_timer(core),
                        Renewed::Stopped | Renewed::Busy => {}
                    }
                }
            }
        }
    }
    unreachable!("the last round takes without leasing, and so is done")
}

/// `reserve` (fenced with `fence`): leased items from their slices, the rest in the store.
pub(super) async fn reserve(
    core: &Arc<Core>,
    ticket: String,
    items: Vec<ReserveItem>,
    minute: i64,
    now: Millis,
    fence: Option<Fence>,
) -> Result<ReserveOutcome, StoreError> {
    let flags = match take_leasing(core, &ticket, &items, minute, now, fence.as_ref()).await? {
        Ok(flags) => flags,
        Err(fenced) => return Ok(fenced),
    };
    if !flags.contains(&true) {
        return pass(core, ticket, items, minute, now, fence).await;
    }
    let kept: Vec<usize> = (0..items.len()).filter(|&i| !flags[i]).collect();
    if kept.is_empty() {
        return Ok(ReserveOutcome::Reserved);
    }
    let fence = fence.map(|f| Fence {
        fenced: kept
            .iter()
            .map(|&i| f.fenced.get(i).copied().unwrap_or(false))
            .collect(),
        generation: f.generation,
    });
    let rest = kept.iter().map(|&i| items[i].clone()).collect();
    let outcome = pass(core, ticket.clone(), rest, minute, now, fence).await;
    if let Ok(ReserveOutcome::Fenced(_)) = outcome {
        lose_all(core);
    }
    // On an error the ticket keeps its take: the store may have placed the rest, and the
    // call's give-back (or a retry) must know which holds are the slices', not the store's
    // (Redis sums a counter's holds per minute: given back there, they would come off other
    // calls' holds). The give-back puts the take back; an abandoned one, its expiry.
    let outcome = outcome?;
    Ok(match outcome {
        ReserveOutcome::Reserved => ReserveOutcome::Reserved,
        ReserveOutcome::Conflict { item } => {
            core.book().lock().put_back(&ticket);
            ReserveOutcome::Conflict { item: kept[item] }
        }
        other => {
            core.book().lock().put_back(&ticket);
            other
        }
    })
}

/// The store answered with its fence (restarted, failed over, emptied): the leases may be
/// gone with it, so each is renewed (under the fence) before a call takes from it again.
fn lose_all(core: &Core) {
    let mut book = core.book().lock();
    for lease in book.slots.values_mut().filter_map(|s| s.lease.as_mut()) {
        lease.lost = true;
    }
}

async fn pass(
    core: &Core,
    ticket: String,
    items: Vec<ReserveItem>,
    minute: i64,
    now: Millis,
    fence: Option<Fence>,
) -> Result<ReserveOutcome, StoreError> {
    match fence {
        Some(fence) => {
            core.inner
                .reserve_fenced(ticket, items, minute, now, fence)
                .await
        }
        None => core.inner.reserve(ticket, items, minute, now).await,
    }
}

/// `reserve_known_carrying` (with no settles, `reserve_known`): the leased items taken from
/// slices, the leased counters answered from their leases, the rest (with the stripped
/// settles) in one step of the store inside.
pub(super) async fn reserve_known(
    core: &Arc<Core>,
    reserve: KnownReserve,
    stripped: Vec<Option<Settle>>,
    now: Millis,
    fence: Fence,
) -> Result<(KnownAnswer, Vec<Result<SettleOutcome, StoreError>>), StoreError> {
    let (ticket, minute) = (reserve.ticket.clone(), reserve.expiry_minute);
    let flags = match take_leasing(core, &ticket, &reserve.items, minute, now, Some(&fence)).await?
    {
        Ok(flags) => flags,
        Err(fenced) => {
            let settled = super::settles::settle_many(core, stripped, now).await?;
            let answer = KnownAnswer {
                outcome: KnownOutcome::Reserve(fenced),
                counters: Vec::new(),
                previous: Vec::new(),
            };
            return Ok((answer, settled));
        }
    };
    let plan = super::narrow::Narrowed::of(core, &reserve, &flags);
    let narrowed = plan.reserve(&reserve, &fence);
    let sent: Vec<Settle> = stripped.iter().flatten().cloned().collect();
    let answered = match narrowed {
        Some((narrowed, fence)) => {
            let Some(known) = core.inner.reserve_from_known() else {
                return Err(StoreError(
                    "the store inside cannot reserve from known values".into(),
                ));
            };
            let step = known
                .reserve_known_carrying(narrowed, &sent, now, fence)
                .await;
            // (On an error the ticket keeps its take, as in `reserve`.)
            step?
        }
        None => {
            let settled = if sent.is_empty() {
                Vec::new()
            } else {
                core.inner.settle_many(&sent, now).await?
            };
            let reserved = KnownOutcome::Reserve(ReserveOutcome::Reserved);
            (
                KnownAnswer {
                    outcome: reserved,
                    counters: Vec::new(),
                    previous: Vec::new(),
                },
                settled,
            )
        }
    };
    let (answer, settled) = answered;
    if let KnownOutcome::Reserve(ReserveOutcome::Fenced(_)) = answer.outcome {
        lose_all(core);
    }
    if answer.outcome != KnownOutcome::Reserve(ReserveOutcome::Reserved) {
        core.book().lock().put_back(&ticket);
    }
    let answer = plan.widen(core, &reserve, answer);
    let mut settled = settled.into_iter();
    let settled = stripped
        .iter()
        .map(|s| match s {
            Some(_) => settled.next().unwrap_or(Ok(SettleOutcome::Settled)),
            None => Ok(SettleOutcome::Settled),
        })
        .collect();
    Ok((answer, settled))
}

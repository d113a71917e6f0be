//! Settles with what leases answer taken out: a call's holds taken from slices go back
//! there, and its use on those counters to their slices; the rest goes to the store.

use std::sync::Arc;

use super::Core;
use crate::guard::domain::clock::Millis;
use crate::guard::domain::rule::CounterId;
use crate::guard::store::{Settle, SettleOutcome, StoreError};

/// `settle` with what leases answer taken out: the holds its ticket took from slices are
/// put back there, and its use on those counters is added to their slices' use (once per
/// settle id). `None` when nothing is left for the store.
pub(super) fn strip(core: &Core, settle: &Settle, now: Millis) -> Option<Settle> {
    let mut book = core.book().lock();
    let taken: Vec<Arc<CounterId>> = book
        .put_back(&settle.ticket)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    // A retry of this settle: what it answered here the first time.
    let earlier = book.handled(&settle.id);
    let mut local = taken.clone();
    if let Some(before) = earlier.as_ref().or(book.handled(&settle.ticket).as_ref()) {
        local.extend(before.iter().cloned());
    }
    let holds: Vec<_> = settle
        .holds
        .iter()
        .filter(|h| !local.contains(&h.key.id))
        .cloned()
        .collect();
    // Only use of a call that took from a lease is that lease's: a call reserved in the
    // store (or a record with no call) adds its use there, as its hold was there.
    let mut adds = Vec::with_capacity(settle.adds.len());
    for add in &settle.adds {
        let here = match &earlier {
            Some(before) => before.contains(&add.key.id),
            None => taken.contains(&add.key.id) && book.add_use(&add.key, add.amount),
        };
        if !here {
            adds.push(add.clone());
        }
    }
    // A call given up before its reservation took from a lease: recorded too, so that a
    // reservation landing late takes nothing (the store keeps its settled mark alike). Not
    // over a record kept already: a retry must keep the counters its first attempt answered.
    let leased = settle.is_whole()
        && earlier.is_none()
        && book.handled(&settle.ticket).is_none()
        && settle.holds.iter().any(|h| {
            let slot = book.slots.get(&h.key.id);
            slot.is_some_and(|s| s.lease.is_some() || s.renewing)
        });
    if !taken.is_empty() || leased {
        book.mark_handled(&settle.id, &settle.ticket, taken, settle.settled_until, now);
    }
    drop(book);
    if holds.len() == settle.holds.len() && adds.len() == settle.adds.len() {
        return Some(settle.clone());
    }
    (!holds.is_empty() || !adds.is_empty()).then(|| Settle {
        holds,
        adds,
        ..settle.clone()
    })
}

/// `settle_many` of stripped settles: those with nothing left answer `Settled` here.
pub(super) async fn settle_many(
    core: &Core,
    stripped: Vec<Option<Settle>>,
    now: Millis,
) -> Result<Vec<Result<SettleOutcome, StoreError>>, StoreError> {
    let sent: Vec<Settle> = stripped.iter().flatten().cloned().collect();
    let mut answered = if sent.is_empty() {
        Vec::new().into_iter()
    } else {
        core.inner.settle_many(&sent, now).await?.into_iter()
    };
    Ok(stripped
        .iter()
        .map(|s| match s {
            Some(_) => answered.next().unwrap_or(Ok(SettleOutcome::Settled)),
            None => Ok(SettleOutcome::Settled),
        })
        .collect())
}

//! Telling the store the use billed against a lease, in batches: one step per lease (a
//! batch part of the lease's reservation, `settle_parts`) adds the use and gives back as
//! much of the lease's hold, so the counter's use plus holds stays what it was. A step the
//! store did not answer is sent again with the same part id (it may have landed: the part's
//! record makes it count once).

use std::sync::Arc;

use std::time::Duration;

use super::book::Lease;
use super::Core;
use crate::guard::domain::clock::Millis;
use crate::guard::store::{HoldRef, PartSettle, PartsSettle, Settle, UsageAdd};

/// How long a lease's old settle is retried when the store does not answer (its use must
/// reach the counter; the settle is idempotent by the lease's id).
const RETRY_FOR_MS: u64 = 5 * 60_000;
/// How long a settled mark of a lease is kept.
const SETTLED_KEEP_MS: Millis = 5 * 60_000;
/// How long a flush's part record is kept: longer than any lease lives.
const PART_KEEP_MS: Millis = 30 * 60_000;

/// Sends what is pending on every lease not being renewed, after the steps not answered
/// before; answers whether every step was answered.
pub(super) async fn flush(core: &Arc<Core>, now: Millis) -> bool {
    let steps = {
        let mut guard = core.book().lock();
        let book = &mut *guard;
        let mut steps = std::mem::take(&mut book.stuck);
        let seq = &mut book.flushes;
        for slot in book.slots.values_mut().filter(|s| !s.renewing) {
            let Some(lease) = slot.lease.as_mut().filter(|l| !l.pending.is_empty()) else {
                continue;
            };
            let pending = std::mem::take(&mut lease.pending);
            let used: u64 = pending.iter().map(|(_, u)| *u).sum();
            let give = used.min(lease.placed);
            lease.placed -= give;
            for (key, used) in &pending {
                if let Some((_, read)) = lease.base.iter_mut().find(|(b, _)| *b == key.bucket) {
                    read.used = read.used.saturating_add(*used);
                }
            }
            if let Some((_, read)) = lease.base.first_mut() {
                read.held = read.held.saturating_sub(give);
            }
            *seq += 1;
            steps.push(PartsSettle {
                ticket: lease.id.clone(),
                expiry_minute: lease.minute,
                settled_until: now + PART_KEEP_MS,
                parts: vec![PartSettle {
                    id: format!("{}/f{}", lease.id, seq),
                    holds: vec![HoldRef {
                        key: lease.key.clone(),
                        amount: give,
                    }],
                    bill: true,
                    adds: pending
                        .into_iter()
                        .map(|(key, amount)| UsageAdd {
                            retain_until: key.id.window.retain_until(key.bucket),
                            key,
                            amount,
                        })
                        .collect(),
                }],
            });
        }
        steps
    };
    let mut all = true;
    for step in steps {
        if let Err(e) = core.inner.settle_parts(&step, now).await {
            log::warn!("usage_guard: telling the store a lease's use failed ({e}); retrying");
            core.book().lock().stuck.push(step);
            all = false;
        }
    }
    all
}

/// Settles an ended lease by its id: its hold given back, the use billed against it added.
/// Retried in the background while the store does not answer.
pub(super) async fn settle_old(core: &Arc<Core>, lease: Lease, now: Millis) {
    let settle = settle_of(&lease, now);
    if let Err(e) = core.inner.settle(&settle, now).await {
        log::warn!(
            "usage_guard: settling lease {} failed ({e}); retrying",
            lease.id
        );
        settle_in_background(core.clone(), settle);
    }
}

/// Sends `settle` (a lease's, idempotent by its id) in the background, every second while
/// the store does not answer, for at most `RETRY_FOR_MS`.
fn settle_in_background(core: Arc<Core>, settle: Settle) {
    crate::runtime::shared().spawn(async move {
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_millis(RETRY_FOR_MS) {
            if core.inner.settle(&settle, core.now()).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        log::error!(
            "usage_guard: lease {} was never settled: use billed against it is missing from \
             the counter, and its hold stays until it expires",
            settle.id
        );
    });
}

/// A lease's reservation in flight. Unless the store answered it, what it may have placed
/// is given back by the lease's id in the background: a reservation whose round trip failed
/// may have landed, and one dropped with the call that renewed (the caller gave up) may
/// still land (the give-back's settled mark then stops it); either would otherwise hold its
/// amount, unknown to this process, until it expired.
pub(super) struct Unanswered {
    core: Arc<Core>,
    settle: Option<Settle>,
}

impl Unanswered {
    pub(super) fn new(core: &Arc<Core>, id: &str, hold: HoldRef, minute: i64, now: Millis) -> Self {
        let settle = Settle {
            id: id.to_string(),
            ticket: id.to_string(),
            holds: vec![hold],
            expiry_minute: minute,
            adds: Vec::new(),
            settled_until: now + SETTLED_KEEP_MS,
        };
        Unanswered {
            core: core.clone(),
            settle: Some(settle),
        }
    }

    /// The store answered: this process knows what was placed.
    pub(super) fn answered(mut self) {
        self.settle = None;
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if let Some(settle) = self.settle.take() {
            settle_in_background(self.core.clone(), settle);
        }
    }
}

/// The settle that ends `lease`: its hold given back, the use billed against it added.
pub(super) fn settle_of(lease: &Lease, now: Millis) -> Settle {
    Settle {
        id: lease.id.clone(),
        ticket: lease.id.clone(),
        holds: vec![lease.hold()],
        expiry_minute: lease.minute,
        adds: lease
            .pending
            .iter()
            .map(|(key, used)| UsageAdd {
                key: key.clone(),
                amount: *used,
                retain_until: key.id.window.retain_until(key.bucket),
            })
            .collect(),
        settled_until: now + SETTLED_KEEP_MS,
    }
}

//! Calls open across a store's loss (docs/redis.md, "The epoch fence"). The ledger has bills,
//! not holds, so a recovery refills what was billed and the holds of calls still open are
//! gone: each guard places its open calls' holds again before it trusts a new epoch. A guard
//! with open calls on a store that fences reads the store's epoch every `WATCH_EVERY`, so it
//! meets a recovery written by another guard within that time even when it admits nothing;
//! and a recovery that refills from a ledger writes an epoch whose fenced reservations wait
//! `HOLD_AGAIN_MS` (`FenceAnswer::HoldingAgain`), long enough for every other guard to have
//! held its calls again, so none is admitted into the room they still use.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::guard::domain::clock::Millis;
use crate::guard::engine::handle::Guard;
use crate::guard::engine::shared::Shared;
use crate::guard::store::{Fence, ReserveItem, ReserveOutcome};

/// How long fenced reservations wait after a recovery that refills from a ledger (guard
/// clock): several `WATCH_EVERY`s, so a guard whose first read after the loss fails (its
/// connection is remade) still holds its calls again in time.
pub(crate) const HOLD_AGAIN_MS: Millis = 5_000;
/// How often a guard with open calls on a store that fences reads the store's epoch.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Starts this process's watch of the store's epoch for the open calls of `shared`, unless
/// one runs; it ends when no call is open (the next open call starts it again) or the guard
/// is gone.
pub(crate) fn watch(shared: &Arc<Shared>) {
    if shared.open_calls.start_watching() {
        let watched = Arc::downgrade(shared);
        crate::runtime::shared().spawn(watch_epoch(watched));
    }
}

async fn watch_epoch(watched: Weak<Shared>) {
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Some(shared) = watched.upgrade() else {
            return;
        };
        if !shared.open_calls.any_open() {
            if shared.open_calls.stop_watching() {
                return;
            }
            continue;
        }
        Guard { shared }.trust_a_newer_epoch().await;
    }
}

impl Guard {
    /// Once per epoch `generation`, before this guard trusts it: places the holds of its open
    /// calls again (no limit checked: they were admitted; not fenced), each under its ticket
    /// id, so calls admitted against the refilled counters count them. The first store error
    /// ends it (a store that stopped answering would otherwise cost a timeout per call): the
    /// calls not held again are logged, and their bills may land past a limit.
    pub(super) async fn hold_open_calls_again(&self, generation: &str, now: Millis) {
        let open = &self.shared.open_calls;
        let mut held_under = open.held_under().lock().await;
        if *held_under == generation {
            return;
        }
        let calls = open.open(now);
        let total = calls.len();
        for (done, (id, holds, minute)) in calls.into_iter().enumerate() {
            let items: Vec<ReserveItem> = holds
                .into_iter()
                .map(|h| ReserveItem {
                    key: h.key,
                    hold: h.amount,
                    limit: None,
                    carried: 0,
                    retain_until: minute * 60_000,
                })
                .collect();
            let fence = Fence {
                generation: generation.to_string(),
                fenced: vec![false; items.len()],
            };
            let placed = self
                .shared
                .store
                .reserve_fenced(id, items, minute, now, fence)
                .await;
            match placed {
                Ok(ReserveOutcome::Reserved) => {
                    self.shared.stats.calls_held_again.fetch_add(1, Relaxed);
                }
                Ok(_) => {} // settled meanwhile: nothing to hold
                Err(e) => {
                    log::warn!(
                        "counter store: {} of {total} open calls could not be held again \
                         under the new epoch ({}); their bills may land past a limit",
                        total - done,
                        e.0
                    );
                    break;
                }
            }
        }
        *held_under = generation.to_string();
    }
}

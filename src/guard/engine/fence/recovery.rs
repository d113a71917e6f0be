//! The epoch fence, guard side (docs/redis.md, "The epoch fence"): which reserve items are
//! fenced, what a fenced reserve does next, and recovery. With a ledger, a guard that finds
//! the store's state untrusted writes a new epoch under the store's recovery lock (one guard
//! does; the others wait briefly for its epoch, then refuse) and every counter is filled
//! again from the ledger when next read. Without one, only an empty store on a guard's first
//! use is adopted; anything else waits for the operator's `recover(attest=true)`.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::fill::is_refilled;
use super::hold_again::HOLD_AGAIN_MS;
use crate::error::{Error, Result};
use crate::guard::domain::clock::Millis;
use crate::guard::domain::policy::{Settings, StoreChecks};
use crate::guard::domain::refusal::Refusal;
use crate::guard::engine::handle::Guard;
use crate::guard::ledger::{AuditQuery, AuditRow, STORE_EPOCH};
use crate::guard::store::{Fence, FenceAnswer, ReserveItem, StoreCheck, StoreError};

/// How long the recovery lock is held at most (store time).
const LOCK_MS: u64 = 10_000;
/// How long a guard waits for another guard's recovery, in steps.
const WAIT_STEP: Duration = Duration::from_millis(50);
const WAIT_STEPS: usize = 40;

/// What a fenced reserve leads to.
pub(crate) enum AfterFence {
    /// The guard now trusts the store's epoch: reserve again.
    Retry,
    /// Refuse the call with `budget_recovering`.
    Refuse,
}

/// A new, unique generation: 64 random bits and the time, in hex.
fn new_generation(now: Millis) -> String {
    use std::hash::BuildHasher;
    let seed = std::collections::hash_map::RandomState::new();
    let bits = seed.hash_one((now, std::process::id(), std::thread::current().id()));
    format!("{:x}-{bits:016x}", now.max(0))
}

impl Guard {
    /// The fence of a reserve: `generation` (the one this guard trusted when it filled the
    /// counters of `items` from the ledger, `Values::generation`), and which items are
    /// fenced: those of a metric in `settings.fenced_metrics`, and, when the guard has a
    /// ledger, every counter the ledger refills (`fill::is_refilled`): a loss of those is
    /// recovered from the ledger, so it never reads as unspent either.
    pub(crate) fn fence_for(
        &self,
        generation: String,
        items: &[ReserveItem],
        settings: &Settings,
    ) -> Fence {
        let refills = self.ledger().is_some();
        Fence {
            generation,
            fenced: items
                .iter()
                .map(|i| {
                    settings.fenced_metrics.contains(&i.key.id.metric)
                        || (refills && is_refilled(&i.key.id))
                })
                .collect(),
        }
    }

    /// Under `store_checks = "enforce"`, whether the store checks passed (waiting for the
    /// first one); always true under "report".
    pub(crate) async fn checks_allow(&self, settings: &Settings) -> bool {
        if settings.store_checks == StoreChecks::Report {
            return true;
        }
        matches!(
            self.shared.store.store_check(true).await,
            Ok(StoreCheck::Passed)
        )
    }

    /// The refusal of a call whose fenced rules cannot be trusted.
    pub(crate) fn refuse_recovering(&self) -> Error {
        self.shared.stats.recovering.fetch_add(1, Relaxed);
        self.shared.stats.unavailable.fetch_add(1, Relaxed);
        self.refuse(Refusal::recovering())
    }

    /// After a reserve fenced under `fenced_generation`: trusts the store's epoch when
    /// another guard (or the operator) wrote a good one, recovers when this guard can, or
    /// refuses.
    pub(crate) async fn after_fence(
        &self,
        answer: FenceAnswer,
        fenced_generation: &str,
        now: Millis,
    ) -> std::result::Result<AfterFence, StoreError> {
        if answer == FenceAnswer::HoldingAgain {
            // The store's epoch is this guard's (its calls are held again): only the wait
            // for the other guards' is left.
            return Ok(AfterFence::Refuse);
        }
        let epoch = &self.shared.epoch;
        let _one = epoch.one().lock().await;
        if epoch.generation() != fenced_generation {
            return Ok(AfterFence::Retry);
        }
        let store = &self.shared.store;
        let read = store.epoch().await?;
        if self.trust_newer(&read, fenced_generation, now).await {
            return Ok(AfterFence::Retry);
        }
        if answer == FenceAnswer::Stale && read.trusted {
            // Same generation again: nothing changed since the reserve.
            return Ok(AfterFence::Refuse);
        }
        if self.ledger().is_some() {
            return self.recover_detached(fenced_generation, now).await;
        }
        if !epoch.seen() && read.generation.is_none() {
            let generation = new_generation(now);
            if store
                .set_epoch(generation.clone(), now, None, true, 0)
                .await?
            {
                log::info!(
                    "counter store: no epoch and no counters; adopted it (epoch {generation})"
                );
                self.shared.stats.epochs_written.fetch_add(1, Relaxed);
                self.trust(&generation, now).await;
                return Ok(AfterFence::Retry);
            }
            if self
                .trust_newer(&store.epoch().await?, fenced_generation, now)
                .await
            {
                return Ok(AfterFence::Retry);
            }
        }
        if epoch.warn_once() {
            log::warn!(
                "counter store state cannot be trusted ({answer:?}); fenced rules are refused \
                 until recovery (no ledger: `usage-guard recover --attest`)"
            );
        }
        Ok(AfterFence::Refuse)
    }

    /// Trusts the store's epoch if it is good and not the one fenced; returns whether it did.
    async fn trust_newer(
        &self,
        read: &crate::guard::store::EpochRead,
        fenced: &str,
        now: Millis,
    ) -> bool {
        match &read.generation {
            Some(g) if read.trusted && g != fenced => {
                self.trust(g, now).await;
                true
            }
            _ => false,
        }
    }

    /// Trusts the store's epoch if another guard (or the operator) wrote a newer good one,
    /// holding this guard's open calls again first (`hold_again.rs`, between reservations);
    /// a store that does not answer is left for the next look.
    pub(crate) async fn trust_a_newer_epoch(&self) {
        // Most looks find the epoch this guard trusts: the generation alone says so.
        let current = self.shared.epoch.generation();
        match self.shared.store.epoch_generation().await {
            Ok(Some(generation)) if generation != current.as_str() => {}
            _ => return,
        }
        let now = self.shared.clock.now_ms();
        let _one = self.shared.epoch.one().lock().await;
        let current = self.shared.epoch.generation();
        if let Ok(read) = self.shared.store.epoch().await {
            self.trust_newer(&read, &current, now).await;
        }
    }

    /// Trusts `generation`. A new one is trusted only once this guard's open calls are held
    /// under it (`hold_open_calls_again`): until then this guard's reservations carry the old
    /// generation, are fenced, and wait for this step.
    async fn trust(&self, generation: &str, now: Millis) {
        if self.shared.epoch.generation() != generation {
            self.hold_open_calls_again(generation, now).await;
            // Before the generation changes: a reservation under the new one has its
            // counters filled under it first (`Values::generation`).
            self.shared.fill.forget_all();
        }
        if self.shared.epoch.trust(generation) {
            // Also when another guard wrote it: a ledger then knows the epoch even if its
            // writer's row never landed, or it was written before this record existed.
            self.record_epoch(generation, now, "seen");
        }
    }

    /// `recover_locked` on a task of its own, so that a caller who gives up (a cancelled
    /// admission) never leaves the store's recovery lock held (every guard would wait for it
    /// and refuse until it expired) or a written epoch untrusted.
    async fn recover_detached(
        &self,
        fenced: &str,
        now: Millis,
    ) -> std::result::Result<AfterFence, StoreError> {
        let (guard, fenced) = (self.clone(), fenced.to_string());
        let recovery = async move { guard.recover_locked(&fenced, now, true).await };
        match crate::runtime::shared().spawn(recovery).await {
            Ok(after) => after,
            Err(e) => Err(StoreError(format!("the recovery stopped: {e}"))),
        }
    }

    /// Writes a new epoch under the recovery lock, unless a good one replaced the fenced one
    /// meanwhile. When another guard holds the lock and `wait`, waits for its epoch.
    async fn recover_locked(
        &self,
        fenced: &str,
        now: Millis,
        wait: bool,
    ) -> std::result::Result<AfterFence, StoreError> {
        let store = &self.shared.store;
        let token = new_generation(now);
        if !store.epoch_lock(token.clone(), LOCK_MS).await? {
            for _ in 0..if wait { WAIT_STEPS } else { 0 } {
                // On the shared runtime: the caller may be on any executor (`block_on`).
                let _ = crate::runtime::shared()
                    .spawn(async { tokio::time::sleep(WAIT_STEP).await })
                    .await;
                if self.trust_newer(&store.epoch().await?, fenced, now).await {
                    return Ok(AfterFence::Retry);
                }
            }
            return Ok(AfterFence::Refuse);
        }
        let written = async {
            let read = store.epoch().await?;
            if self.trust_newer(&read, fenced, now).await {
                return Ok(true);
            }
            // A loss (this guard trusted an epoch before, the store has one it cannot trust,
            // or the ledger recorded one written): other guards may have calls open, held
            // again within the wait. A store never given an epoch (a first start) has none.
            let lost = self.shared.epoch.seen()
                || read.generation.is_some()
                || self.ledger_recorded_an_epoch();
            let until = if lost { now + HOLD_AGAIN_MS } else { 0 };
            let done = store
                .set_epoch(token.clone(), now, Some(token.clone()), false, until)
                .await?;
            if done {
                log::warn!(
                    "counter store: wrote a new epoch {token} (counters refill from the ledger)"
                );
                self.record_epoch(&token, now, if lost { "recovered" } else { "first_start" });
                self.shared.stats.epochs_written.fetch_add(1, Relaxed);
                self.trust(&token, now).await;
            }
            Ok(done)
        }
        .await;
        let _ = store.epoch_unlock(token).await;
        Ok(if written? {
            AfterFence::Retry
        } else {
            AfterFence::Refuse
        })
    }

    /// The work of [`Guard::recover`].
    pub(crate) async fn recover_after_restart(&self, attest: bool) -> Result<String> {
        if self.ledger().is_none() && !attest {
            return Err(Error::invalid(
                "attest",
                "False",
                "must be True to recover without a ledger: the operator attests that the \
                 counters may be trusted as they are (what was lost is not counted)",
            ));
        }
        let now = self.shared.clock.now_ms();
        let _one = self.shared.epoch.one().lock().await;
        let store = &self.shared.store;
        let unavailable = |e: StoreError| {
            store.as_ref().outage().log_failed("recover", &e);
            Error::Refused(Box::new(Refusal::unavailable()))
        };
        let token = new_generation(now);
        if !store
            .epoch_lock(token.clone(), LOCK_MS)
            .await
            .map_err(unavailable)?
        {
            return Err(self.refuse_recovering());
        }
        // Refilled from the ledger: other guards' open calls are held again first. Attested
        // without one: what was lost is not counted, as the operator accepted.
        let hold_again_until = match self.ledger() {
            Some(_) => now + HOLD_AGAIN_MS,
            None => 0,
        };
        let written = store
            .set_epoch(
                token.clone(),
                now,
                Some(token.clone()),
                false,
                hold_again_until,
            )
            .await;
        let _ = store.epoch_unlock(token.clone()).await;
        if !written.map_err(unavailable)? {
            return Err(self.refuse_recovering());
        }
        log::warn!("counter store: recovered by the operator (epoch {token})");
        self.record_epoch(&token, now, "operator");
        self.shared.stats.epochs_written.fetch_add(1, Relaxed);
        self.trust(&token, now).await;
        Ok(token)
    }
}

impl Guard {
    /// Whether the ledger's audit log has an epoch a guard wrote or trusted (`STORE_EPOCH`
    /// rows): then a store with none lost it. A ledger that cannot be read answers yes (a
    /// needless wait costs seconds, a missed one may overspend); one without an audit log, no.
    fn ledger_recorded_an_epoch(&self) -> bool {
        let Some(ledger) = self.ledger() else {
            return false;
        };
        let query = AuditQuery {
            kind: Some(STORE_EPOCH.to_string()),
            limit: Some(1),
            ..AuditQuery::default()
        };
        match crate::runtime::blocking(|| ledger.audit(&query)) {
            Ok(rows) => !rows.is_empty(),
            Err(e) => {
                log::warn!(
                    "counter store: no epoch; the ledger's audit log ({e}) cannot say \
                     whether it lost one: taken as lost"
                );
                true
            }
        }
    }

    /// Records an epoch this guard wrote or trusted in the ledger's audit log (when it has
    /// one; one row per epoch, the first recorded).
    fn record_epoch(&self, generation: &str, now: Millis, how: &str) {
        if let Some(ledger) = self.ledger() {
            ledger.record_event(AuditRow::store_epoch(generation, now, how));
        }
    }
}

//! Admission's loop on a store that answers at once (the memory store): read, decide, let
//! the caller shape the plan, reserve all or none; on a lost race, again. What both loops
//! share: the retry bounds, the reservation, the refusal after the last lost race.

use crate::error::{Error, Result};
use crate::guard::domain::clock::Millis;
use crate::guard::domain::decide::{self, Decision, Demand, Plan, SlotRead};
use crate::guard::domain::path::Path;
use crate::guard::domain::policy::Settings;
use crate::guard::engine::fence::recovery::AfterFence;
use crate::guard::engine::handle::Guard;
use crate::guard::engine::observe::stats::{bump, store_answered};
use crate::guard::engine::settle::settling::InFlight;
use crate::guard::store::{expiry_minute, Fence, ReserveOutcome, StoreError};

/// How many times admission reads again after losing a race for what was left.
pub(crate) const RESERVE_RETRIES: usize = 3;
/// How many times admission reserves again after the epoch fence was lifted.
pub(crate) const FENCE_RETRIES: usize = 2;

/// A reservation that was placed: the plan as reserved, the expiry minute of its holds, and
/// what the caller's step between decision and reserve produced.
pub(crate) struct Reservation<T> {
    pub(crate) plan: Plan,
    pub(crate) minute: i64,
    pub(crate) extra: T,
}

impl Guard {
    /// `reserve_loop` on a store that answers at once: read, decide, let `shape` adjust the
    /// plan (fit a request, or require a batch to fit in full; its error refuses), reserve
    /// all or none for ticket `id`. A lost race reads again, at most `RESERVE_RETRIES` times,
    /// then refuses as does-not-fit. A reserve the epoch fence stopped reserves again once
    /// the guard trusts the store's epoch (see `recovery.rs`), else refuses with
    /// `budget_recovering`. The inner `Err` is a store failure, left to the caller's failure
    /// rule. A reservation whose round trip failed, or whose caller gave up while it was in
    /// flight (this future dropped), is given back by ticket id in the background.
    pub(crate) async fn read_then_reserve<T>(
        &self,
        id: &str,
        path: &Path,
        demand: &Demand,
        settings: &Settings,
        hold_ms: i64,
        mut shape: impl FnMut(&mut Plan, &[SlotRead], Millis) -> Result<T>,
    ) -> Result<std::result::Result<Reservation<T>, StoreError>> {
        let mut conflict: Option<(Plan, usize, Vec<SlotRead>)> = None;
        let (mut attempts, mut fences) = (0, 0);
        while attempts <= RESERVE_RETRIES {
            let now = self.shared.clock.now_ms();
            let reads = match self.shared.read(path, now).await {
                Ok(reads) => reads,
                Err(e) => return Ok(Err(e)),
            };
            let mut plan = match decide::decide(path, &reads, demand, settings, now) {
                Decision::Refuse(refusal) => return Err(self.refused(path, refusal, now).await),
                Decision::Admit(plan) => plan,
            };
            let extra = shape(&mut plan, &reads, now).map_err(|e| self.count_refusal(e))?;
            let minute = expiry_minute(now, hold_ms);
            let fence = if self.shared.store.fences() {
                self.fence_for(&plan.items, settings)
            } else {
                Fence::default()
            };
            if fence.fenced.contains(&true) && !self.checks_allow(settings).await {
                return Err(self.refuse_recovering());
            }
            let generation = fence.generation.clone();
            let in_flight = InFlight::new(&self.shared, id, &plan, minute);
            let outcome = self
                .shared
                .store
                .reserve_fenced(id.to_string(), plan.items.clone(), minute, now, fence)
                .await;
            if outcome.is_ok() {
                in_flight.answered();
            } else {
                drop(in_flight);
            }
            match outcome {
                Ok(ReserveOutcome::Reserved) => {
                    store_answered(self.shared.store.as_ref());
                    bump(&self.shared.stats.admitted);
                    return Ok(Ok(Reservation {
                        plan,
                        minute,
                        extra,
                    }));
                }
                Ok(ReserveOutcome::Conflict { item }) => {
                    bump(&self.shared.stats.reserve_retries);
                    conflict = Some((plan, item, reads));
                    attempts += 1;
                }
                Ok(ReserveOutcome::Fenced(answer)) => {
                    store_answered(self.shared.store.as_ref());
                    fences += 1;
                    match self.after_fence(answer, &generation, now).await {
                        Ok(AfterFence::Retry) if fences <= FENCE_RETRIES => {}
                        Ok(_) => return Err(self.refuse_recovering()),
                        Err(e) => return Ok(Err(e)),
                    }
                }
                Ok(ReserveOutcome::Settled) => {
                    return Ok(Err(StoreError(format!(
                        "ticket {id} was settled before its reservation landed"
                    ))))
                }
                Err(e) => return Ok(Err(e)),
            }
        }
        let (plan, item, reads) = conflict.expect("the loop ran at least once");
        Err(self.lost_race(path, &plan, item, &reads))
    }

    /// The refusal after every retry lost the race for what was left: the call does not fit
    /// in the rule checked on the conflicting item.
    pub(crate) fn lost_race(
        &self,
        path: &Path,
        plan: &Plan,
        item: usize,
        reads: &[SlotRead],
    ) -> Error {
        let now = self.shared.clock.now_ms();
        let slot = plan.item_slots[item];
        let rule = path
            .checked_rules(plan.source_index)
            .filter(|r| r.slot == slot)
            .min_by_key(|r| r.rule.amount)
            .expect("a conflicting item has a checked rule");
        let state = decide::rule_state(rule, reads, now);
        let need = plan.items[item].hold;
        if decide::caused_by_holds(rule, &state, need) {
            return self.refuse(decide::held_by_calls(path, rule, &state, now));
        }
        let resets_at = decide::room_at(rule, reads, need, now);
        self.refuse(decide::does_not_fit(
            path, rule, state.left, need, resets_at, now,
        ))
    }
}

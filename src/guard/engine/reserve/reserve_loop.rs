//! The one admission loop (`reserve_loop`), for single calls and batches, on every store:
//! take values (`values.rs`), decide, let the caller shape the plan, reserve all or none; on a
//! lost race, again. The guard's store decides once, when the guard is built
//! (`Shared::ways`), which of the two ways an attempt takes:
//!
//! - read, then reserve (a store that answers at once, the memory store);
//! - reserve from known values (a store across a network): decide from the counter values
//!   the guard already knows (`known.rs`: read by this guard, or answered by its
//!   reserves, however long ago) and reserve at once, in one round trip. The store's script
//!   checks what the decision rested on (the chosen source's items fit, the sources passed
//!   over still have nothing left, no previous bucket counted grew) and answers the fresh
//!   values of every counter of the call, so a failed condition decides again from them
//!   without a read. A refusal, or a ceiling lowered by what is left, is only ever decided
//!   from values read in this admission: from known values it reads first.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::values::{known_reserve, Decided, Values};
use crate::error::{Error, Result};
use crate::guard::domain::clock::Millis;
use crate::guard::domain::decide::{self, Demand, Plan, SlotRead};
use crate::guard::domain::path::Path;
use crate::guard::domain::policy::Settings;
use crate::guard::engine::fence::recovery::AfterFence;
use crate::guard::engine::handle::Guard;
use crate::guard::engine::settle::settling::{self, in_background, whole};
use crate::guard::engine::shared::Shared;
use crate::guard::store::{
    expiry_minute, Fence, KnownAnswer, KnownOutcome, ReserveOutcome, StoreError,
};

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

/// How `reserve_loop` ended when it did not refuse the call.
// Not boxed: it is returned once per admission and moved straight into the ticket, where a
// box would cost an allocation on every admit for a variant that is rare.
#[allow(clippy::large_enum_variant)]
pub(crate) enum ReserveEnd<T> {
    /// Every hold was placed.
    Placed(Reservation<T>),
    /// The store failed or did not answer: left to the caller's failure rule.
    StoreFailed(StoreError),
}

/// What sending one attempt's reservation came to.
enum Sent {
    /// The store answered (a reserve of the read way answers no fresh values), under the
    /// fence of this generation.
    Answered(KnownAnswer, String),
    /// The round trip failed (the reservation is given back by ticket id).
    Failed(StoreError),
}

impl Guard {
    /// The one admission loop (see the module): take values, decide, let `shape` adjust the
    /// plan (fit a request, or require a batch to fit in full; its error refuses), reserve all
    /// or none for ticket `id`. A lost race reads again, at most `RESERVE_RETRIES` times,
    /// then refuses as does-not-fit. A reserve the epoch fence stopped reserves again once
    /// the guard trusts the store's epoch (see `recovery.rs`), else refuses with
    /// `budget_recovering`. `Err` is a refusal; a store failure is `StoreFailed`. A
    /// reservation whose round trip failed, or whose caller gave up while it was in flight
    /// (this future dropped), is given back by ticket id in the background.
    pub(crate) async fn reserve_loop<T>(
        &self,
        id: &str,
        path: &Path,
        demand: &Demand,
        settings: &Settings,
        hold_ms: i64,
        mut shape: impl FnMut(&mut Plan, &[SlotRead], Millis) -> Result<T>,
    ) -> Result<ReserveEnd<T>> {
        // Without known values every attempt reads.
        let read_always = !self.shared.ways.from_known;
        let mut conflict: Option<(Plan, usize, Vec<SlotRead>)> = None;
        let (mut answered, mut force_read) = (None, read_always);
        let (mut attempts, mut fences) = (0, 0);
        while attempts <= RESERVE_RETRIES {
            let now = self.shared.clock.now_ms();
            let values = match self.values(path, now, answered.take(), force_read).await {
                Ok(values) => values,
                Err(e) => return Ok(ReserveEnd::StoreFailed(e)),
            };
            let (plan, extra) =
                match self.decide_from(path, &values, demand, settings, now, &mut shape)? {
                    Decided::Admit(plan, extra) => (plan, extra),
                    Decided::Refuse(refusal) => return Err(self.refused(path, refusal, now).await),
                    Decided::ReadFirst => {
                        force_read = true;
                        continue;
                    }
                };
            force_read = read_always;
            let minute = expiry_minute(now, hold_ms);
            let (answer, generation) = match self
                .send(id, path, &plan, &values, settings, minute)
                .await?
            {
                Sent::Answered(answer, generation) => (answer, generation),
                Sent::Failed(e) => return Ok(ReserveEnd::StoreFailed(e)),
            };
            answered = self.remember(&values, &answer, now);
            match answer.outcome {
                KnownOutcome::Reserve(ReserveOutcome::Reserved) => {
                    let fresh = answered.as_ref().filter(|_| !values.exact);
                    let fresh = fresh.map(|(_, reads)| reads.as_slice());
                    let placed = self.reserved(path, plan, extra, minute, fresh, now);
                    return Ok(ReserveEnd::Placed(placed));
                }
                KnownOutcome::Reserve(ReserveOutcome::Conflict { item }) => {
                    self.shared.stats.reserve_retries.fetch_add(1, Relaxed);
                    let reads = answered.as_ref().map_or(values.reads, |(_, r)| r.clone());
                    conflict = Some((plan, item, reads));
                    attempts += 1;
                }
                KnownOutcome::Moved => {
                    self.shared.stats.reserve_retries.fetch_add(1, Relaxed);
                    attempts += 1;
                }
                KnownOutcome::Reserve(ReserveOutcome::Fenced(fenced)) => {
                    self.shared.store.as_ref().outage().answered();
                    self.shared.known.forget_all();
                    fences += 1;
                    match self.after_fence(fenced, &generation, now).await {
                        Ok(AfterFence::Retry) if fences <= FENCE_RETRIES => {}
                        Ok(_) => return Err(self.refuse_recovering()),
                        Err(e) => return Ok(ReserveEnd::StoreFailed(e)),
                    }
                }
                KnownOutcome::Reserve(ReserveOutcome::Settled) => {
                    return Ok(ReserveEnd::StoreFailed(StoreError(format!(
                        "ticket {id} was settled before its reservation landed"
                    ))))
                }
            }
        }
        match conflict {
            Some((plan, item, reads)) => Err(self.lost_race(path, &plan, item, &reads)),
            None => Ok(ReserveEnd::StoreFailed(StoreError(
                "the counters kept moving under every attempt to reserve".into(),
            ))),
        }
    }

    /// The reservation the store placed. Decided from known values, its warnings are taken
    /// again from the `fresh` values the store answered (another guard's calls may have
    /// crossed a soft threshold since).
    fn reserved<T>(
        &self,
        path: &Path,
        mut plan: Plan,
        extra: T,
        minute: i64,
        fresh: Option<&[SlotRead]>,
        now: Millis,
    ) -> Reservation<T> {
        self.shared.store.as_ref().outage().answered();
        self.shared.stats.admitted.fetch_add(1, Relaxed);
        if let Some(fresh) = fresh {
            plan.warnings = decide::warnings_after_reserve(path, fresh, now);
        }
        Reservation {
            plan,
            minute,
            extra,
        }
    }

    /// Sends the reservation of `plan` (decided from `values`) the guard's way: from known
    /// values, with the bills queued on this guard riding along (one round trip for all), or
    /// as a plain (fenced) reserve. First the store checks, when a fenced rule needs them;
    /// answers with the generation the fence was sent with. A round trip that failed, or that
    /// its caller gave up on (this future dropped), is given back by ticket id.
    async fn send(
        &self,
        id: &str,
        path: &Path,
        plan: &Plan,
        values: &Values,
        settings: &Settings,
        minute: i64,
    ) -> Result<Sent> {
        let now = values.now;
        let fence = if self.shared.ways.fences {
            let generation = values.generation.as_deref().cloned().unwrap_or_default();
            self.fence_for(generation, &plan.items, settings)
        } else {
            Fence::default()
        };
        if fence.fenced.contains(&true) && !self.checks_allow(settings).await {
            return Err(self.refuse_recovering());
        }
        let generation = fence.generation.clone();
        let in_flight = InFlight::new(&self.shared, id, plan, minute);
        let answer = if self.shared.ways.from_known {
            let reserve = known_reserve(id, path, plan, values, minute, now);
            settling::reserve_known(&self.shared, reserve, now, fence).await
        } else {
            let (store, items) = (&self.shared.store, plan.items.clone());
            let outcome = store.reserve_fenced(id.to_string(), items, minute, now, fence);
            outcome.await.map(|outcome| KnownAnswer {
                outcome: KnownOutcome::Reserve(outcome),
                counters: Vec::new(),
                previous: Vec::new(),
            })
        };
        Ok(match answer {
            Ok(answer) => {
                in_flight.answered();
                Sent::Answered(answer, generation)
            }
            Err(e) => {
                drop(in_flight);
                Sent::Failed(e)
            }
        })
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

/// A reservation in flight for ticket `id`: if it is dropped while armed (the caller gave up:
/// timeout, cancel, dropped future) or left armed after a failed round trip (the request may
/// have reached the store), the ticket's holds are given back by id in the background. A
/// reservation that lands later finds the ticket settled and places nothing.
/// (It borrows what it needs: nothing is copied on the path where the store answers.)
pub(crate) struct InFlight<'a> {
    shared: &'a Arc<Shared>,
    id: &'a str,
    plan: &'a Plan,
    expiry_minute: i64,
    armed: bool,
}

impl<'a> InFlight<'a> {
    pub(crate) fn new(
        shared: &'a Arc<Shared>,
        id: &'a str,
        plan: &'a Plan,
        expiry_minute: i64,
    ) -> Self {
        InFlight {
            shared,
            id,
            plan,
            expiry_minute,
            armed: true,
        }
    }

    /// The store answered: what it did is known, nothing to give back here.
    pub(crate) fn answered(mut self) {
        self.armed = false;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.shared.stats.given_up.fetch_add(1, Relaxed);
        let now = self.shared.clock.now_ms();
        let settle = whole(
            self.id,
            self.plan.holds(),
            self.expiry_minute,
            Vec::new(),
            now,
        );
        let operation = "give back of an abandoned reservation";
        in_background(self.shared.clone(), settle, operation, false);
    }
}

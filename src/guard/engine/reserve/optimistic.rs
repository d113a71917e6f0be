//! The one admission loop (`reserve_loop`) and its way on a store across a network: decide
//! from the counter values the guard already knows (`known.rs`: read by this guard, or
//! answered by its last reserve, at most 1 s ago) and reserve at once, in one round trip. The
//! store's script checks what the decision rested on (the chosen source's items fit, the
//! sources passed over still have nothing left, no previous bucket counted grew) and answers
//! the fresh values of every counter of the call, so a failed condition decides again from
//! them without a read. A refusal, or a ceiling lowered by what is left, is only ever decided
//! from values read in this admission: from known values it reads first.

use crate::error::Result;
use crate::guard::domain::clock::Millis;
use crate::guard::domain::decide::{self, Decision, Demand, Plan, SlotRead};
use crate::guard::domain::path::Path;
use crate::guard::domain::policy::Settings;
use crate::guard::domain::refusal::Refusal;
use crate::guard::engine::fence::recovery::AfterFence;
use crate::guard::engine::handle::Guard;
use crate::guard::engine::observe::stats::{bump, store_answered};
use crate::guard::engine::reserve::from_store::{Reservation, FENCE_RETRIES, RESERVE_RETRIES};
use crate::guard::engine::settle::settling::{self, InFlight};
use crate::guard::engine::shared::{read_keys, slot_reads};
use crate::guard::store::{
    expiry_minute, CounterKey, CounterRead, KnownAnswer, KnownOutcome, KnownReserve,
    ReserveOutcome, StoreError,
};

/// The values a decision reads: the keys (`read_keys`), per slot its buckets, and whether
/// they were read (or answered) in this admission.
struct Values {
    keys: Vec<CounterKey>,
    previous_at: Vec<Option<usize>>,
    reads: Vec<SlotRead>,
    exact: bool,
}

/// What a decision from `Values` comes to.
enum Decided<T> {
    Admit(Plan, T),
    Refuse(Refusal),
    /// Decided from known values on what is left: decide again from a read.
    ReadFirst,
}

/// Values answered by the last reserve of this admission: their keys and per slot reads.
type Answered = Option<(Vec<CounterKey>, Vec<SlotRead>)>;

impl Guard {
    /// The one admission loop, for single calls and batches: read (on a store across a
    /// network, take the known values: see the module), decide, let `shape` adjust the plan (fit a request, or
    /// require a batch to fit in full; its error refuses), reserve all or none for ticket
    /// `id`. A lost race reads again, at most `RESERVE_RETRIES` times, then refuses as
    /// does-not-fit. A reserve the epoch fence stopped reserves again once the guard trusts
    /// the store's epoch (see `recovery.rs`), else refuses with `budget_recovering`. The inner
    /// `Err` is a store failure, left to the caller's failure rule. A reservation whose round
    /// trip failed, or whose caller gave up while it was in flight (this future dropped), is
    /// given back by ticket id in the background.
    pub(crate) async fn reserve_loop<T>(
        &self,
        id: &str,
        path: &Path,
        demand: &Demand,
        settings: &Settings,
        hold_ms: i64,
        shape: impl FnMut(&mut Plan, &[SlotRead], Millis) -> Result<T>,
    ) -> Result<std::result::Result<Reservation<T>, StoreError>> {
        if self.shared.store.reserves_from_known() {
            return self
                .reserve_from_known(id, path, demand, settings, hold_ms, shape)
                .await;
        }
        self.read_then_reserve(id, path, demand, settings, hold_ms, shape)
            .await
    }

    /// `reserve_loop` on a store that reserves from known values (see the module).
    async fn reserve_from_known<T>(
        &self,
        id: &str,
        path: &Path,
        demand: &Demand,
        settings: &Settings,
        hold_ms: i64,
        mut shape: impl FnMut(&mut Plan, &[SlotRead], Millis) -> Result<T>,
    ) -> Result<std::result::Result<Reservation<T>, StoreError>> {
        let mut conflict: Option<(Plan, usize, Vec<SlotRead>)> = None;
        let (mut answered, mut force_read): (Answered, bool) = (None, false);
        let (mut attempts, mut fences) = (0, 0);
        while attempts <= RESERVE_RETRIES {
            let now = self.shared.clock.now_ms();
            let values = match self.values(path, now, answered.take(), force_read).await {
                Ok(values) => values,
                Err(e) => return Ok(Err(e)),
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
            force_read = false;
            let minute = expiry_minute(now, hold_ms);
            let reserve = known_reserve(id, path, &plan, &values, minute, now);
            let (answer, generation) = match self.send(id, reserve, &plan, settings, now).await? {
                Ok(sent) => sent,
                Err(e) => return Ok(Err(e)),
            };
            answered = self.remember(&values, &answer, now);
            match answer.outcome {
                KnownOutcome::Reserve(ReserveOutcome::Reserved) => {
                    let fresh = answered.as_ref().filter(|_| !values.exact);
                    let fresh = fresh.map(|(_, reads)| reads.as_slice());
                    return Ok(Ok(self.reserved(path, plan, extra, minute, fresh, now)));
                }
                KnownOutcome::Reserve(ReserveOutcome::Conflict { item }) => {
                    bump(&self.shared.stats.reserve_retries);
                    let reads = answered.as_ref().map_or(values.reads, |(_, r)| r.clone());
                    conflict = Some((plan, item, reads));
                    attempts += 1;
                }
                KnownOutcome::Moved => {
                    bump(&self.shared.stats.reserve_retries);
                    attempts += 1;
                }
                KnownOutcome::Reserve(ReserveOutcome::Fenced(fenced)) => {
                    store_answered(self.shared.store.as_ref());
                    self.shared.known.forget_all();
                    fences += 1;
                    match self.after_fence(fenced, &generation, now).await {
                        Ok(AfterFence::Retry) if fences <= FENCE_RETRIES => {}
                        Ok(_) => return Err(self.refuse_recovering()),
                        Err(e) => return Ok(Err(e)),
                    }
                }
                KnownOutcome::Reserve(ReserveOutcome::Settled) => {
                    return Ok(Err(StoreError(format!(
                        "ticket {id} was settled before its reservation landed"
                    ))))
                }
            }
        }
        match conflict {
            Some((plan, item, reads)) => Err(self.lost_race(path, &plan, item, &reads)),
            None => Ok(Err(StoreError(
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
        store_answered(self.shared.store.as_ref());
        bump(&self.shared.stats.admitted);
        if let Some(fresh) = fresh {
            plan.warnings = decide::warnings_after_reserve(path, fresh, now);
        }
        Reservation {
            plan,
            minute,
            extra,
        }
    }

    /// Sends `reserve` (for `plan`), after the store checks when a fenced rule needs them;
    /// answers with the generation the fence was sent with. A round trip that failed, or that
    /// its caller gave up on (this future dropped), is given back by ticket id.
    async fn send(
        &self,
        id: &str,
        reserve: KnownReserve,
        plan: &Plan,
        settings: &Settings,
        now: Millis,
    ) -> Result<std::result::Result<(KnownAnswer, String), StoreError>> {
        let fence = self.fence_for(&plan.items, settings);
        if fence.fenced.contains(&true) && !self.checks_allow(settings).await {
            return Err(self.refuse_recovering());
        }
        let generation = fence.generation.clone();
        let in_flight = InFlight::new(&self.shared, id, plan, reserve.expiry_minute);
        // Bills queued on this guard ride along (one round trip for both).
        let answer = settling::reserve_known(&self.shared, reserve, now, fence).await;
        match answer {
            Ok(answer) => {
                in_flight.answered();
                Ok(Ok((answer, generation)))
            }
            Err(e) => {
                drop(in_flight);
                Ok(Err(e))
            }
        }
    }

    /// The values to decide from at `now`: those the last reserve answered (same keys), else
    /// the known ones when fresh (unless `force_read`), else a read.
    async fn values(
        &self,
        path: &Path,
        now: Millis,
        answered: Answered,
        force_read: bool,
    ) -> std::result::Result<Values, StoreError> {
        let (keys, previous_at) = read_keys(path, now);
        self.shared.fill(path, &keys, now).await;
        let mut values = Values {
            keys,
            previous_at,
            reads: Vec::new(),
            exact: true,
        };
        if let Some((keys, reads)) = answered.filter(|(k, _)| *k == values.keys) {
            values.keys = keys;
            values.reads = reads;
            return Ok(values);
        }
        if !force_read {
            if let Some(flat) = self.shared.known.fresh(&values.keys, now) {
                values.reads = slot_reads(&flat, &values.previous_at);
                values.exact = false;
                return Ok(values);
            }
        }
        let flat = self.shared.store.read(values.keys.clone(), now).await?;
        store_answered(self.shared.store.as_ref());
        self.shared.known.remember(&values.keys, &flat, now);
        values.reads = slot_reads(&flat, &values.previous_at);
        Ok(values)
    }

    /// Decides and shapes the plan; `ReadFirst` when the values were not read in this
    /// admission and the decision rests on what is left (a refusal, a lowered output maximum,
    /// a shape that failed): those are decided again from a read.
    fn decide_from<T>(
        &self,
        path: &Path,
        values: &Values,
        demand: &Demand,
        settings: &Settings,
        now: Millis,
        shape: &mut impl FnMut(&mut Plan, &[SlotRead], Millis) -> Result<T>,
    ) -> Result<Decided<T>> {
        let mut plan = match decide::decide(path, &values.reads, demand, settings, now) {
            Decision::Admit(plan) => plan,
            Decision::Refuse(_) if !values.exact => return Ok(Decided::ReadFirst),
            Decision::Refuse(refusal) => return Ok(Decided::Refuse(refusal)),
        };
        if !values.exact && plan.ceiling.max_output_tokens < demand.max_output_tokens {
            return Ok(Decided::ReadFirst);
        }
        match shape(&mut plan, &values.reads, now) {
            Ok(extra) => Ok(Decided::Admit(plan, extra)),
            Err(_) if !values.exact => Ok(Decided::ReadFirst),
            Err(e) => Err(self.count_refusal(e)),
        }
    }

    /// Remembers the values a reserve answered (read at `now`); returns them per slot for the
    /// next attempt (none when the store did not look).
    fn remember(&self, values: &Values, answer: &KnownAnswer, now: Millis) -> Answered {
        let n = answer.counters.len();
        if n == 0 {
            return None;
        }
        let mut flat: Vec<CounterRead> = answer.counters.clone();
        for (slot, at) in values.previous_at.iter().enumerate() {
            if let Some(i) = at {
                let used = answer.previous.get(i - n).copied().unwrap_or(0);
                flat.push(CounterRead {
                    used,
                    held: answer.counters[slot].held,
                });
            }
        }
        self.shared.known.remember(&values.keys, &flat, now);
        Some((values.keys.clone(), slot_reads(&flat, &values.previous_at)))
    }
}

/// What `reserve_known` needs for `plan`, decided from `values` at `now`.
fn known_reserve(
    id: &str,
    path: &Path,
    plan: &Plan,
    values: &Values,
    minute: i64,
    now: Millis,
) -> KnownReserve {
    let n = path.counters.len();
    let previous = (0..n)
        .filter_map(|slot| values.previous_at[slot].map(|i| (values.keys[i].clone(), slot)))
        .collect();
    let item_previous = plan
        .item_slots
        .iter()
        .map(|&slot| values.previous_at[slot].map(|i| (i - n, values.reads[slot].previous.used)))
        .collect();
    let skipped = path.sources[..plan.source_index.unwrap_or(0)]
        .iter()
        .map(|source| {
            source
                .rules
                .iter()
                .map(|r| {
                    let carried = values.reads[r.slot].carried(r.rule.window, now);
                    (r.slot, r.rule.amount, carried)
                })
                .collect()
        })
        .collect();
    KnownReserve {
        ticket: id.to_string(),
        counters: values.keys[..n].to_vec(),
        previous,
        items: plan.items.clone(),
        item_counters: plan.item_slots.clone(),
        item_previous,
        skipped,
        expiry_minute: minute,
    }
}

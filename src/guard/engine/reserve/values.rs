//! The values one attempt of `reserve_loop` decides from, and the decision: those the last
//! reserve answered, the known ones (`known.rs`) when every key is known, else a read; and what
//! `reserve_known` needs to check that a decision from them still holds.

use std::sync::Arc;

use crate::error::Result;
use crate::guard::domain::clock::Millis;
use crate::guard::domain::decide::{self, Decision, Demand, Plan, SlotRead};
use crate::guard::domain::path::Path;
use crate::guard::domain::policy::Settings;
use crate::guard::domain::refusal::Refusal;
use crate::guard::engine::handle::Guard;
use crate::guard::engine::shared::{read_keys, slot_reads};
use crate::guard::store::{CounterKey, CounterRead, KnownAnswer, KnownReserve, StoreError};

/// The values a decision reads: the keys (`read_keys`), per slot its buckets, whether they
/// were read (or answered) in this admission, and the time they were taken for.
pub(super) struct Values {
    keys: Vec<CounterKey>,
    previous_at: Vec<Option<usize>>,
    pub(super) reads: Vec<SlotRead>,
    pub(super) exact: bool,
    pub(super) now: Millis,
    /// The epoch generation this guard trusted before the counters were filled (on a store
    /// that fences): the reservation is fenced under it, so a counter is never reserved under
    /// a generation it was not filled in (a later fill would count again bills already in
    /// the ledger).
    pub(super) generation: Option<Arc<String>>,
}

/// What a decision from `Values` comes to.
pub(super) enum Decided<T> {
    Admit(Plan, T),
    Refuse(Refusal),
    /// Decided from known values on what is left: decide again from a read.
    ReadFirst,
}

/// Values answered by the last reserve of this admission: their keys and per slot reads.
pub(super) type Answered = Option<(Vec<CounterKey>, Vec<SlotRead>)>;

impl Guard {
    /// The values to decide from at `now`: those the last reserve answered (same keys), else
    /// the known ones when every key is known (unless `force_read`), else a read (remembered
    /// when the guard decides from known values).
    pub(super) async fn values(
        &self,
        path: &Path,
        now: Millis,
        answered: Answered,
        force_read: bool,
    ) -> std::result::Result<Values, StoreError> {
        let (keys, previous_at) = read_keys(path, now);
        let fences = self.shared.ways.fences;
        let generation = fences.then(|| self.shared.epoch.generation_shared());
        self.shared.fill(path, &keys, now).await;
        let mut values = Values {
            keys,
            previous_at,
            reads: Vec::new(),
            exact: true,
            now,
            generation,
        };
        if let Some((keys, reads)) = answered.filter(|(k, _)| *k == values.keys) {
            values.keys = keys;
            values.reads = reads;
            return Ok(values);
        }
        // Only a guard that decides from known values has any (the others never remember).
        if !force_read && self.shared.ways.from_known {
            if let Some(flat) = self.shared.known.get(&values.keys, now) {
                values.reads = slot_reads(&flat, &values.previous_at);
                values.exact = false;
                return Ok(values);
            }
        }
        // Only a guard that decides from known values needs the keys again (to remember
        // what was read, and to check a reserve's answer against); the read way hands them
        // to the store.
        let keys = if self.shared.ways.from_known {
            values.keys.clone()
        } else {
            std::mem::take(&mut values.keys)
        };
        let flat = self.shared.store.read(keys, now).await?;
        self.shared.store.as_ref().outage().answered();
        if self.shared.ways.from_known {
            self.shared.known.remember(&values.keys, &flat, now);
        }
        values.reads = slot_reads(&flat, &values.previous_at);
        Ok(values)
    }

    /// Decides and shapes the plan; `ReadFirst` when the values were not read in this
    /// admission and the decision rests on what is left (a refusal, a lowered output maximum,
    /// a shape that failed): those are decided again from a read.
    pub(super) fn decide_from<T>(
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
    /// next attempt (none when the store did not look, or answers none: a plain reserve).
    pub(super) fn remember(&self, values: &Values, answer: &KnownAnswer, now: Millis) -> Answered {
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
pub(super) fn known_reserve(
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

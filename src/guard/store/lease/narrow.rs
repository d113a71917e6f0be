//! A reservation from known values without what leases answer: the counters a lease holds
//! every item of leave the step sent to the store (so a Model Total's group is not touched),
//! and the store's answer is widened back with those counters read from their leases.

use std::sync::Arc;

use super::Core;
use crate::guard::store::{Fence, KnownAnswer, KnownOutcome, KnownReserve, ReserveOutcome};

/// Which counters, previous buckets and items of a `KnownReserve` go to the store.
pub(super) struct Narrowed {
    /// Per counter of the reserve, its index in the narrowed one (`None`: a lease's).
    counters: Vec<Option<usize>>,
    /// Per previous bucket, its index in the narrowed one.
    previous: Vec<Option<usize>>,
    /// The items sent, by their index in the reserve.
    items: Vec<usize>,
}

impl Narrowed {
    /// `reserve` without the items leases hold (`flags`) and the counters only they touch
    /// (a counter a skipped source reads stays: the store checks it).
    pub(super) fn of(core: &Arc<Core>, reserve: &KnownReserve, flags: &[bool]) -> Self {
        let n = reserve.counters.len();
        let mut keep = vec![true; n];
        if flags.contains(&true) {
            let book = core.book().lock();
            for (c, key) in reserve.counters.iter().enumerate() {
                let has_lease = book.slots.get(&key.id).is_some_and(|s| s.lease.is_some());
                let sent_item =
                    (0..reserve.items.len()).any(|i| !flags[i] && reserve.item_counters[i] == c);
                let skipped = reserve
                    .skipped
                    .iter()
                    .flatten()
                    .any(|(slot, _, _)| *slot == c);
                keep[c] = !has_lease || sent_item || skipped;
            }
        }
        let mut counters = Vec::with_capacity(n);
        let mut next = 0;
        for kept in &keep {
            counters.push(kept.then(|| {
                next += 1;
                next - 1
            }));
        }
        let mut previous = Vec::with_capacity(reserve.previous.len());
        let mut next = 0;
        for (_, slot) in &reserve.previous {
            previous.push(keep[*slot].then(|| {
                next += 1;
                next - 1
            }));
        }
        let items = (0..reserve.items.len()).filter(|&i| !flags[i]).collect();
        Narrowed {
            counters,
            previous,
            items,
        }
    }

    /// The step for the store, with its fence, or `None` when leases answer all of it.
    pub(super) fn reserve(
        &self,
        reserve: &KnownReserve,
        fence: &Fence,
    ) -> Option<(KnownReserve, Fence)> {
        let counters: Vec<_> = (0..reserve.counters.len())
            .filter(|&c| self.counters[c].is_some())
            .map(|c| reserve.counters[c].clone())
            .collect();
        if counters.is_empty() && self.items.is_empty() {
            return None;
        }
        let slot = |c: usize| self.counters[c].expect("a sent item's counter is sent");
        let previous = reserve
            .previous
            .iter()
            .filter(|(_, c)| self.counters[*c].is_some())
            .map(|(key, c)| (key.clone(), slot(*c)))
            .collect();
        let narrowed = KnownReserve {
            ticket: reserve.ticket.clone(),
            counters,
            previous,
            items: self
                .items
                .iter()
                .map(|&i| reserve.items[i].clone())
                .collect(),
            item_counters: self
                .items
                .iter()
                .map(|&i| slot(reserve.item_counters[i]))
                .collect(),
            item_previous: self
                .items
                .iter()
                .map(|&i| {
                    reserve.item_previous[i].map(|(p, used)| {
                        (
                            self.previous[p].expect("a sent item's bucket is sent"),
                            used,
                        )
                    })
                })
                .collect(),
            skipped: reserve
                .skipped
                .iter()
                .map(|rules| {
                    rules
                        .iter()
                        .map(|&(c, amount, carried)| (slot(c), amount, carried))
                        .collect()
                })
                .collect(),
            expiry_minute: reserve.expiry_minute,
        };
        let fence = Fence {
            generation: fence.generation.clone(),
            fenced: self
                .items
                .iter()
                .map(|&i| fence.fenced.get(i).copied().unwrap_or(false))
                .collect(),
        };
        Some((narrowed, fence))
    }

    /// The store's `answer` to the narrowed step, as an answer to `reserve`: the leased
    /// counters read from their leases, a conflicting item by its index in `reserve`.
    pub(super) fn widen(
        &self,
        core: &Arc<Core>,
        reserve: &KnownReserve,
        mut answer: KnownAnswer,
    ) -> KnownAnswer {
        if let KnownOutcome::Reserve(ReserveOutcome::Conflict { item }) = answer.outcome {
            answer.outcome = KnownOutcome::Reserve(ReserveOutcome::Conflict {
                item: self.items[item],
            });
        }
        let looked = !answer.counters.is_empty() || self.counters.iter().all(Option::is_none);
        let done = matches!(
            answer.outcome,
            KnownOutcome::Reserve(ReserveOutcome::Fenced(_) | ReserveOutcome::Settled)
        );
        if !looked || done {
            return answer;
        }
        let leased: Vec<_> = reserve
            .counters
            .iter()
            .chain(reserve.previous.iter().map(|(k, _)| k))
            .cloned()
            .collect();
        let local = core.book().lock().read_leased(&leased);
        let n = reserve.counters.len();
        let gone = (0..n).any(|c| self.counters[c].is_none() && local[c].is_none())
            || (0..reserve.previous.len())
                .any(|p| self.previous[p].is_none() && local[n + p].is_none());
        if gone {
            // A lease ended since the step was narrowed: its counter's value is not known
            // here, and an answer of 0 would be remembered as the counter's value. Answer none
            // (as a store that did not look): the next decision reads.
            answer.counters.clear();
            answer.previous.clear();
            return answer;
        }
        let counters = (0..n)
            .map(|c| match self.counters[c] {
                Some(at) => answer.counters.get(at).copied().unwrap_or_default(),
                None => local[c].unwrap_or_default(),
            })
            .collect();
        let previous = (0..reserve.previous.len())
            .map(|p| match self.previous[p] {
                Some(at) => answer.previous.get(at).copied().unwrap_or(0),
                None => local[n + p].map_or(0, |r| r.used),
            })
            .collect();
        KnownAnswer {
            outcome: answer.outcome,
            counters,
            previous,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::domain::rule::{CounterId, Metric, Scope};
    use crate::guard::domain::window::Window;
    use crate::guard::store::{CounterKey, CounterRead, LeaseOptions, LeasedStore, MemoryStore};

    #[test]
    fn an_answer_widened_after_its_lease_ended_has_no_values() {
        let store = LeasedStore::new(Arc::new(MemoryStore::new()), LeaseOptions::default());
        let window: Window = "day".parse().unwrap();
        let id = CounterId::new(
            Scope::ModelTotal,
            None,
            None,
            Some("gpt-5".into()),
            Metric::Tokens,
            window,
        );
        let key = CounterKey {
            id: Arc::new(id),
            bucket: 0,
        };
        let reserve = KnownReserve {
            ticket: "t".into(),
            counters: vec![key],
            previous: Vec::new(),
            items: Vec::new(),
            item_counters: Vec::new(),
            item_previous: Vec::new(),
            skipped: Vec::new(),
            expiry_minute: 1,
        };
        // Narrowed while the counter's lease lived; the lease is gone when the answer comes.
        let narrowed = Narrowed {
            counters: vec![None],
            previous: Vec::new(),
            items: Vec::new(),
        };
        let answer = KnownAnswer {
            outcome: KnownOutcome::Reserve(ReserveOutcome::Reserved),
            counters: vec![CounterRead { used: 7, held: 0 }],
            previous: Vec::new(),
        };
        let widened = narrowed.widen(&store.core, &reserve, answer);
        assert_eq!(
            widened.outcome,
            KnownOutcome::Reserve(ReserveOutcome::Reserved)
        );
        assert!(widened.counters.is_empty(), "{widened:?}");
    }
}

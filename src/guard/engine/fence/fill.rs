//! Filling counters from the ledger: the first time a counter of a day-or-longer window, or a
//! sliding window of an hour or more, is read, it takes the ledger's sum for its scope and
//! bucket (the larger of that and its own count) and is marked filled in the store, so no
//! other guard fills it again. One fill runs at a time per counter in a process; when the
//! ledger cannot be read the call goes on with what the counter holds, and the fill is tried
//! again a minute later (guard clock). Shorter windows start at 0. A generic rule's counter
//! sums the rows whose recorded attributes the rule counts (`domain::recorded`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::lock::Mutex;

use crate::fork::ForkLocal;
use crate::guard::domain::clock::Millis;
use crate::guard::domain::path::Path;
use crate::guard::domain::policy::refilled;
use crate::guard::domain::recorded::{rule_conditions, RowCondition};
use crate::guard::domain::rule::{CounterId, Scope};
use crate::guard::ledger::{Ledger, SumFilter};
use crate::guard::store::{CounterKey, CounterStore};

/// How long a fill waits after the ledger could not be read.
pub(crate) const FILL_RETRY_MS: i64 = 60_000;
const KNOWN_MAX: usize = 100_000;

/// What a process remembers of fills: keys known filled, keys waiting to retry, one lock
/// per key.
#[derive(Debug, Default)]
struct Fills {
    known: Mutex<HashSet<CounterKey>>,
    retry_at: Mutex<HashMap<CounterKey, Millis>>,
    locks: Mutex<HashMap<CounterKey, Arc<tokio::sync::Mutex<()>>>>,
}

/// A guard's memory of fills.
#[derive(Debug, Default)]
pub(crate) struct FillState {
    /// This process's (a forked child starts afresh: a parent task may have held a lock
    /// across the fork; the store's filled marks say what is filled).
    fills: ForkLocal<Fills>,
    /// How many times every fill was forgotten (a new epoch): a fill begun before the last
    /// forgetting is not remembered, its mark may be of the old generation.
    era: std::sync::atomic::AtomicU64,
    /// Counters filled by this guard, and ledger reads that failed.
    pub filled: std::sync::atomic::AtomicU64,
    pub ledger_errors: std::sync::atomic::AtomicU64,
}

impl FillState {
    fn fills(&self) -> &Fills {
        self.fills.get()
    }

    fn is_known(&self, key: &CounterKey) -> bool {
        self.fills().known.lock().contains(key)
    }

    fn era(&self) -> u64 {
        self.era.load(Relaxed)
    }

    /// Remembers `key` filled, unless every fill was forgotten since `era` (`forget_all`
    /// takes the same lock).
    fn know(&self, key: &CounterKey, era: u64) {
        let fills = self.fills();
        let mut known = fills.known.lock();
        if self.era() != era {
            return;
        }
        if known.len() >= KNOWN_MAX {
            known.clear();
        }
        known.insert(key.clone());
        drop(known);
        fills.locks.lock().remove(key);
        fills.retry_at.lock().remove(key);
    }

    fn waiting(&self, key: &CounterKey, now: Millis) -> bool {
        self.fills()
            .retry_at
            .lock()
            .get(key)
            .is_some_and(|&at| now < at)
    }

    /// Forgets every counter known filled (a new epoch has every counter filled again),
    /// and every fill in progress: a fill that read the ledger or the store's mark before
    /// this is done again.
    pub(crate) fn forget_all(&self) {
        let mut known = self.fills().known.lock();
        self.era.fetch_add(1, Relaxed);
        known.clear();
        drop(known);
        self.fills().retry_at.lock().clear();
    }

    fn lock_of(&self, key: &CounterKey) -> Arc<tokio::sync::Mutex<()>> {
        self.fills()
            .locks
            .lock()
            .entry(key.clone())
            .or_default()
            .clone()
    }
}

/// Whether the ledger refills a counter of this kind after a loss: one of a filled window
/// (a generic rule's too: its ledger rows record the attributes it reads).
pub(crate) fn is_refilled(id: &CounterId) -> bool {
    refilled(id.window, id.metric)
}

/// The ledger rows a counter's bucket counts on `path` (`None`: a generic rule's counter
/// the path binds no rule to, which nothing can answer).
pub(crate) fn sum_filter(key: &CounterKey, path: &Path) -> Option<SumFilter> {
    sum_filter_with(key, || rule_conditions_on(path, &key.id))
}

/// [`sum_filter`], with a generic rule's row conditions from `conditions` (`None`: the call
/// has no counter for the rule).
pub(crate) fn sum_filter_with(
    key: &CounterKey,
    conditions: impl FnOnce() -> Option<Vec<RowCondition>>,
) -> Option<SumFilter> {
    let id = &key.id;
    let text = |v: &Option<Arc<str>>| v.as_deref().map(str::to_string);
    let mut f = SumFilter {
        since: key.bucket,
        until: id.window.bucket_end(key.bucket),
        ..SumFilter::default()
    };
    match id.scope {
        Scope::PersonModel => {
            f.user = text(&id.user);
            f.model = text(&id.model);
        }
        Scope::TeamShared => {
            f.team = text(&id.team);
            f.model = text(&id.model);
        }
        Scope::TeamMember => {
            f.team = text(&id.team);
            f.user = text(&id.user);
            f.model = text(&id.model);
        }
        Scope::PublicShared => {
            f.source_type = Some("public".into());
            f.model = text(&id.model);
        }
        Scope::TeamTotal => f.team = text(&id.team),
        Scope::ModelTotal => f.model = text(&id.model),
        Scope::PersonAllModels => f.user = text(&id.user),
        Scope::Rule => f.attributes = conditions()?,
    }
    Some(f)
}

/// The row conditions of the generic rule `path` binds to counter `id` (rules alike share a
/// counter: the first one's).
fn rule_conditions_on(path: &Path, id: &CounterId) -> Option<Vec<RowCondition>> {
    let rule = path
        .ceilings
        .iter()
        .chain(&path.watched)
        .filter(|r| *path.counters[r.slot] == *id)
        .find_map(|r| r.generic.as_ref())?;
    rule_conditions(rule, &path.attributes)
}

/// Whether counter `id` of `path` has the filter it needs: a generic rule's counter has one
/// when the path binds a rule to it (every counter of a path that a rule counts).
pub(crate) fn rule_bound(path: &Path, id: &CounterId) -> bool {
    id.scope != Scope::Rule || rule_conditions_on(path, id).is_some()
}

/// Fills every key that needs it from `ledger`, counting the rows `filter_of` selects for it
/// (`sum_filter` of the call's path). Never fails: a store or ledger error leaves the counter
/// as it is.
pub(crate) async fn fill_keys(
    store: &dyn CounterStore,
    ledger: &Arc<dyn Ledger>,
    state: &FillState,
    filter_of: &(dyn Fn(&CounterKey) -> Option<SumFilter> + Sync),
    keys: &[CounterKey],
    now: Millis,
) {
    let candidates: Vec<CounterKey> = keys
        .iter()
        .filter(|k| is_refilled(&k.id))
        // A calendar window's previous bucket is read only for its live holds.
        .filter(|k| k.id.window.is_sliding() || k.bucket == k.id.window.bucket_start(now))
        .filter(|k| !state.is_known(k) && !state.waiting(k, now))
        .cloned()
        .collect();
    if candidates.is_empty() {
        return;
    }
    let era = state.era();
    let Ok(marks) = store.filled(candidates.clone(), now).await else {
        return;
    };
    // After a sum the ledger did not answer, the other keys wait for the retry too: each
    // would wait its `Writer::sum` bound again, on this admission's path.
    let mut held_up = false;
    for (key, marked) in candidates.into_iter().zip(marks) {
        if marked {
            state.know(&key, era);
            continue;
        }
        if held_up {
            state
                .fills()
                .retry_at
                .lock()
                .insert(key, now + FILL_RETRY_MS);
            continue;
        }
        let lock = state.lock_of(&key);
        let _one_at_a_time = lock.lock().await;
        if state.is_known(&key) || state.waiting(&key, now) {
            continue;
        }
        let Some(filter) = filter_of(&key) else {
            continue;
        };
        // The database's wait, announced to tokio on a worker (`runtime::blocking`).
        let sum = || ledger.sum(&filter, key.id.metric);
        let used = match crate::runtime::blocking(sum) {
            Ok(used) => used,
            Err(e) => {
                state.ledger_errors.fetch_add(1, Relaxed);
                log::warn!("fill {}: {e}; trying again in a minute", key.render());
                state
                    .fills()
                    .retry_at
                    .lock()
                    .insert(key.clone(), now + FILL_RETRY_MS);
                held_up = e.is_timeout();
                continue;
            }
        };
        let retain = key.id.window.retain_until(key.bucket);
        match store.fill(key.clone(), used, retain, now).await {
            Ok(did) => {
                if did {
                    state.filled.fetch_add(1, Relaxed);
                }
                state.know(&key, era);
            }
            Err(e) => store.outage().log_failed("fill", &e),
        }
    }
}

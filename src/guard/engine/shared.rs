//! What a guard, its tickets and its batches share: the store, the clock, the policy in force
//! with its path cache, the ledger and the counts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::lock::Mutex;
use arc_swap::ArcSwap;

use super::fence::fill::{fill_keys, sum_filter, FillState};
use super::fence::open_calls::OpenCalls;
use crate::error::Result;
use crate::fork::ForkLocal;
use crate::guard::domain::clock::{Clock, Millis};
use crate::guard::domain::decide::SlotRead;
use crate::guard::domain::event::Event;
use crate::guard::domain::generic;
use crate::guard::domain::path::{self, Path};
use crate::guard::domain::policy::Policy;
use crate::guard::engine::observe::event_stream::EventHub;
use crate::guard::engine::observe::health::ProviderHealth;
use crate::guard::engine::observe::metrics::Metrics;
use crate::guard::engine::observe::stats::Stats;
use crate::guard::engine::reserve::known::Known;
use crate::guard::engine::settle::settle_queue::SettleQueue;
use crate::guard::ledger::Ledger;
use crate::guard::ledger::SumFilter;
use crate::guard::store::{CounterKey, CounterRead, CounterStore, StoreError, StoreWays};

/// A function `Guard::on_event` registered, called with each event.
pub(crate) type Listener = Arc<dyn Fn(&Event) + Send + Sync>;

/// How long a resolved path is reused before it is resolved again.
pub(crate) const PATH_CACHE_MS: i64 = 30_000;
const PATH_CACHE_MAX: usize = 100_000;

struct CachedPath {
    path: Arc<Path>,
    version: u64,
    resolved_at: Millis,
}

/// Resolved paths: model → user → path.
type PathCache = HashMap<Arc<str>, HashMap<Arc<str>, CachedPath>>;

struct PolicyState {
    policy: Arc<Policy>,
    version: u64,
}

/// A path and the policy it was resolved under, read in one step (so a concurrent
/// `set_policy` can never pair one policy's path with another's settings).
pub(crate) struct Resolved {
    pub(crate) path: Arc<Path>,
    pub(crate) policy: Arc<Policy>,
}

/// What a guard and its tickets share.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn CounterStore>,
    /// What the store offers beyond read, reserve and settle, looked up once here.
    pub(crate) ways: StoreWays,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) stats: Stats,
    /// Refusals by reason, fitted calls, billed tokens and cost, open holds, latency.
    pub(crate) metrics: Metrics,
    /// Lock-free (`ArcSwap`), as `listeners`: a forked child reads them whatever a parent
    /// thread was doing at the fork.
    policy: ArcSwap<PolicyState>,
    /// This process's path cache (a forked child starts an empty one).
    cache: ForkLocal<Mutex<PathCache>>,
    ticket_seq: AtomicU64,
    /// 48 random bits that prefix ticket ids, and the fork generation they were drawn in: a
    /// forked child draws its own, so siblings never reuse each other's (or the parent's) ids.
    ticket_prefix: AtomicU64,
    prefix_generation: AtomicU64,
    /// Where billed calls are recorded, and counters filled from (set once).
    pub(crate) ledger: OnceLock<Arc<dyn Ledger>>,
    pub(crate) fill: FillState,
    /// The store epoch this guard trusts (docs/redis.md, "The epoch fence").
    pub(crate) epoch: EpochState,
    /// What `Guard::on_event` registered.
    pub(crate) listeners: ArcSwap<Vec<Listener>>,
    /// The streams of `Guard::events`.
    pub(crate) events: EventHub,
    /// Bills settling in the background (stores across a network).
    pub(crate) queue: SettleQueue,
    /// Last known counter values (stores across a network).
    pub(crate) known: Known,
    /// Provider breakers and credential cooldowns, shared through the store.
    pub(crate) health: ProviderHealth,
    /// The calls open on a fencing store, held again after a recovery.
    pub(crate) open_calls: OpenCalls,
}

/// The store epoch a guard trusts: its generation (empty until the first fenced reserve
/// learns it), whether it ever trusted one, and one fence-handling step at a time.
#[derive(Debug, Default)]
pub(crate) struct EpochState {
    /// Lock-free: a forked child reads what the parent trusted.
    generation: ArcSwap<String>,
    seen: std::sync::atomic::AtomicBool,
    /// Whether the fence was logged since the guard last trusted an epoch.
    warned: std::sync::atomic::AtomicBool,
    /// Per process: a parent task may have held it across the fork.
    one: ForkLocal<tokio::sync::Mutex<()>>,
}

impl EpochState {
    pub(crate) fn generation(&self) -> String {
        self.generation.load().to_string()
    }

    /// The generation, shared (no copy of its text).
    pub(crate) fn generation_shared(&self) -> Arc<String> {
        self.generation.load_full()
    }

    /// One fence-handling step at a time (in this process).
    pub(crate) fn one(&self) -> &tokio::sync::Mutex<()> {
        self.one.get()
    }

    /// Whether this guard ever trusted an epoch (a guard that did never adopts an empty
    /// store: to it, an empty store is a lost one).
    pub(crate) fn seen(&self) -> bool {
        self.seen.load(Ordering::Acquire)
    }

    /// True once until the guard trusts an epoch again (the fence is logged once).
    pub(crate) fn warn_once(&self) -> bool {
        !self.warned.swap(true, Ordering::AcqRel)
    }

    /// Trusts `generation`; returns whether it changed.
    pub(crate) fn trust(&self, generation: &str) -> bool {
        self.seen.store(true, Ordering::Release);
        self.warned.store(false, Ordering::Release);
        if self.generation.load().as_str() == generation {
            return false;
        }
        let previous = self.generation.swap(Arc::new(generation.to_string()));
        *previous != generation
    }
}

impl Shared {
    pub(crate) fn new(policy: Policy, store: Arc<dyn CounterStore>, clock: Arc<dyn Clock>) -> Self {
        let ticket_prefix = AtomicU64::new(random_prefix(&*clock));
        let prefix_generation = AtomicU64::new(crate::fork::generation());
        let health = ProviderHealth::new(store.clone(), clock.clone());
        Shared {
            ways: StoreWays::of(store.as_ref()),
            store,
            clock,
            stats: Stats::default(),
            metrics: Metrics::default(),
            policy: ArcSwap::from_pointee(PolicyState {
                policy: Arc::new(policy),
                version: 1,
            }),
            cache: ForkLocal::empty(),
            ticket_seq: AtomicU64::new(0),
            ticket_prefix,
            prefix_generation,
            ledger: OnceLock::new(),
            fill: FillState::default(),
            epoch: EpochState::default(),
            listeners: ArcSwap::from_pointee(Vec::new()),
            events: EventHub::default(),
            queue: SettleQueue::default(),
            known: Known::default(),
            health,
            open_calls: OpenCalls::default(),
        }
    }

    /// The policy in force and its version.
    pub(crate) fn policy(&self) -> (Arc<Policy>, u64) {
        let state = self.policy.load();
        (state.policy.clone(), state.version)
    }

    /// Replaces the policy and forgets every cached path.
    pub(crate) fn set_policy(&self, policy: Policy) {
        let policy = Arc::new(policy);
        self.policy.rcu(|state| PolicyState {
            policy: policy.clone(),
            version: state.version + 1,
        });
        self.cache.get().lock().clear();
    }

    /// The person's path on the model, from the cache when fresh (30 s, same policy
    /// version), with the policy it belongs to. A call with no user counts as
    /// `settings.anonymous` says; a blank user is refused.
    pub(crate) fn resolve(&self, user: Option<&str>, model: &str) -> Result<Resolved> {
        self.resolve_with(user, model, &[])
    }

    /// [`Shared::resolve`] for a call with `attributes` (`[[rules]]` match on them): the
    /// cache is keyed on the user and the attributes some rule reads.
    pub(crate) fn resolve_with(
        &self,
        user: Option<&str>,
        model: &str,
        attributes: &[(String, String)],
    ) -> Result<Resolved> {
        self.resolve_at(user, model, attributes, self.clock.now_ms())
    }

    /// [`Shared::resolve_with`] at `now` (the caller's reading of the clock).
    pub(crate) fn resolve_at(
        &self,
        user: Option<&str>,
        model: &str,
        attributes: &[(String, String)],
        now: Millis,
    ) -> Result<Resolved> {
        crate::guard::domain::caller::storable_call(user, model, attributes)?;
        let (policy, version) = self.policy();
        let suffix = generic::cache_suffix(attributes, policy.rule_index.used)?;
        let Some(user) = crate::guard::domain::caller::caller(&policy, user)? else {
            let path = Arc::new(path::resolve(&policy, None, model, attributes)?);
            return Ok(Resolved { path, policy });
        };
        let key = if suffix.is_empty() {
            std::borrow::Cow::Borrowed(user)
        } else {
            std::borrow::Cow::Owned(format!("\u{0}{}:{user}{suffix}", user.len()))
        };
        let user_key: &str = &key;
        if let Some(path) = self.cached(user_key, model, version, now) {
            return Ok(Resolved { path, policy });
        }
        let path = Arc::new(path::resolve(&policy, Some(user), model, attributes)?);
        let mut cache = self.cache.get().lock();
        if cache.values().map(HashMap::len).sum::<usize>() >= PATH_CACHE_MAX {
            cache.clear();
        }
        cache.entry(Arc::from(model)).or_default().insert(
            Arc::from(user_key),
            CachedPath {
                path: path.clone(),
                version,
                resolved_at: now,
            },
        );
        Ok(Resolved { path, policy })
    }

    fn cached(&self, user: &str, model: &str, version: u64, now: Millis) -> Option<Arc<Path>> {
        self.cache
            .get()
            .lock()
            .get(model)
            .and_then(|users| users.get(user))
            .filter(|c| {
                c.version == version && now - c.resolved_at < PATH_CACHE_MS && now >= c.resolved_at
            })
            .map(|c| c.path.clone())
    }

    /// A new ticket id, unique within this guard (and, by its random prefix, across guards).
    pub(crate) fn ticket_id(&self) -> String {
        let generation = crate::fork::generation();
        if self.prefix_generation.load(Ordering::Acquire) != generation {
            // Two threads racing here each draw a prefix; either is unique to this process.
            self.ticket_prefix
                .store(random_prefix(&*self.clock), Ordering::Release);
            self.prefix_generation.store(generation, Ordering::Release);
        }
        let prefix = self.ticket_prefix.load(Ordering::Acquire);
        let n = self.ticket_seq.fetch_add(1, Ordering::Relaxed);
        ticket_id_text(prefix, n)
    }

    /// Reads every counter of the path at `now` (filling long-window counters from the
    /// ledger the first time).
    pub(crate) async fn read(
        &self,
        path: &Path,
        now: Millis,
    ) -> std::result::Result<Vec<SlotRead>, StoreError> {
        let (keys, previous_at) = read_keys(path, now);
        self.fill(path, &keys, now).await;
        let reads = self.store.read(keys, now).await?;
        self.store.as_ref().outage().answered();
        Ok(slot_reads(&reads, &previous_at))
    }

    /// Fills the keys of `path` that need it from the ledger (the first time they are read);
    /// without a ledger there is nothing to fill from.
    pub(crate) async fn fill(&self, path: &Path, keys: &[CounterKey], now: Millis) {
        self.fill_with(keys, now, &|key| sum_filter(key, path))
            .await;
    }

    /// [`Shared::fill`] of `keys`, each counting the rows `filter_of` selects for it.
    pub(crate) async fn fill_with(
        &self,
        keys: &[CounterKey],
        now: Millis,
        filter_of: &(dyn Fn(&CounterKey) -> Option<SumFilter> + Sync),
    ) {
        if let Some(ledger) = self.ledger.get() {
            let store = self.store.as_ref();
            fill_keys(store, ledger, &self.fill, filter_of, keys, now).await;
        }
    }
}

/// Per slot, its current and previous bucket from `reads` of `read_keys`' keys.
pub(crate) fn slot_reads(reads: &[CounterRead], previous_at: &[Option<usize>]) -> Vec<SlotRead> {
    previous_at
        .iter()
        .enumerate()
        .map(|(slot, previous)| SlotRead {
            current: reads[slot],
            previous: previous.map(|i| reads[i]).unwrap_or_default(),
        })
        .collect()
}

/// 48 random bits, different in every process (the pid is mixed in: a forked child
/// inherits its parent's random state).
fn random_prefix(clock: &dyn Clock) -> u64 {
    crate::fork::random_bits48(clock.now_ms())
}

/// The keys to read for a path at `now`: each counter's current bucket, then, for sliding
/// windows, its previous bucket (with the index of each counter's previous-bucket key). A
/// calendar window's previous bucket is not read: its use no longer counts, and holds are the
/// counter's (read with the current bucket).
pub(crate) fn read_keys(path: &Path, now: Millis) -> (Vec<CounterKey>, Vec<Option<usize>>) {
    let mut keys = Vec::with_capacity(path.counters.len() * 2);
    let mut previous_at = Vec::with_capacity(path.counters.len());
    for id in &path.counters {
        keys.push(CounterKey {
            id: id.clone(),
            bucket: id.window.bucket_start(now),
        });
        previous_at.push(None);
    }
    for (slot, id) in path.counters.iter().enumerate() {
        if !id.window.is_sliding() {
            continue;
        }
        if let Some(prev) = id.window.previous_bucket_start(keys[slot].bucket) {
            previous_at[slot] = Some(keys.len());
            keys.push(CounterKey {
                id: id.clone(),
                bucket: prev,
            });
        }
    }
    (keys, previous_at)
}

/// `format!("t-{prefix:012x}-{n:x}")` without the formatting machinery, which took about
/// 6 % of an in-memory admit + bill's instructions.
fn ticket_id_text(prefix: u64, n: u64) -> String {
    // Bytes, not chars: a `String::push` encodes each char as UTF-8 on every admit.
    fn push_hex(out: &mut Vec<u8>, value: u64, min_digits: u32) {
        let digits = (64 - value.leading_zeros()).div_ceil(4).max(min_digits);
        for shift in (0..digits).rev() {
            out.push(b"0123456789abcdef"[((value >> (shift * 4)) & 0xf) as usize]);
        }
    }
    let mut id = Vec::with_capacity(32);
    id.extend_from_slice(b"t-");
    push_hex(&mut id, prefix, 12);
    id.push(b'-');
    push_hex(&mut id, n, 1);
    String::from_utf8(id).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn ticket_ids_read_as_formatted() {
        for (prefix, n) in [
            (0, 0),
            (1, 15),
            (0xabc, 16),
            (u64::MAX, u64::MAX),
            (1 << 47, 255),
        ] {
            let expected = format!("t-{prefix:012x}-{n:x}");
            assert_eq!(super::ticket_id_text(prefix, n), expected);
        }
    }
}

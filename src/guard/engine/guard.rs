//! The guard: resolve → read → decide → reserve, with a path cache and retries when another
//! call took what was left between the read and the reserve.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::fill::FillState;
use super::ticket::{Ticket, TicketParts};
use crate::error::{Error, Result};
use crate::guard::domain::clock::{Clock, Millis};
use crate::guard::domain::decide::{self, Decision, Demand, Plan, SlotRead, UsageCeiling};
use crate::guard::domain::path::{self, Path};
use crate::guard::domain::policy::Policy;
use crate::guard::domain::refusal::Refusal;
use crate::guard::domain::view::{self, UsageView};
use crate::guard::ledger::Ledger;
use crate::guard::store::{expiry_minute, CounterKey, CounterStore, HoldRef, ReserveOutcome};

/// How long a resolved path is reused before it is resolved again.
pub(crate) const PATH_CACHE_MS: i64 = 30_000;
/// How long a call's holds live if it never settles.
pub(crate) const CALL_HOLD_MS: i64 = 15 * 60_000;
/// How many times admission reads again after losing a race for what was left.
pub(crate) const RESERVE_RETRIES: usize = 3;
const PATH_CACHE_MAX: usize = 100_000;

/// What the caller knows about a call before it runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdmitRequest {
    /// The person calling; `None` for a call the platform makes itself (no limits).
    pub user: Option<String>,
    pub model: String,
    /// The prompt's tokens, if counted.
    pub prompt_tokens: Option<u64>,
    /// Whether `prompt_tokens` is an estimate rather than an exact count.
    pub prompt_is_estimate: bool,
    /// The caller's output maximum (`max_tokens`).
    pub max_output_tokens: Option<u64>,
    /// The provider request as it will be sent, and its API shape: when `prompt_tokens` is
    /// not given the guard counts the prompt from it, and when `max_output_tokens` is not
    /// given it reads the request's output maximum.
    pub request: Option<(serde_json::Value, crate::ceiling::Api)>,
}

/// Counts an operator can watch.
#[derive(Debug, Default)]
pub struct Stats {
    pub admitted: AtomicU64,
    pub refused: AtomicU64,
    /// Admitted without being counted because the store failed and no rule could refuse.
    pub uncounted: AtomicU64,
    pub unavailable: AtomicU64,
    pub store_errors: AtomicU64,
    pub reserve_retries: AtomicU64,
    pub billed: AtomicU64,
    pub released: AtomicU64,
    /// Bills or releases the store did not take (their holds expire on their own).
    pub settle_failures: AtomicU64,
    /// Tickets dropped without bill or release (released when dropped).
    pub dropped: AtomicU64,
}

impl Stats {
    /// Every count by name.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("admitted", read(&self.admitted)),
            ("refused", read(&self.refused)),
            ("uncounted", read(&self.uncounted)),
            ("unavailable", read(&self.unavailable)),
            ("store_errors", read(&self.store_errors)),
            ("reserve_retries", read(&self.reserve_retries)),
            ("billed", read(&self.billed)),
            ("released", read(&self.released)),
            ("settle_failures", read(&self.settle_failures)),
            ("dropped", read(&self.dropped)),
        ]
    }
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

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

/// What a guard and its tickets share.
pub(crate) struct Shared {
    pub store: Arc<dyn CounterStore>,
    pub clock: Arc<dyn Clock>,
    pub stats: Stats,
    policy: RwLock<PolicyState>,
    cache: Mutex<PathCache>,
    ticket_seq: AtomicU64,
    ticket_prefix: String,
    /// Where billed calls are recorded, and counters filled from (set once).
    pub ledger: std::sync::OnceLock<Arc<dyn Ledger>>,
    pub fill: FillState,
}

/// Admits calls against a policy, on a counter store, by a clock. Cheap to clone: clones
/// share the store, cache and stats.
#[derive(Clone)]
pub struct Guard {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("store", &self.shared.store)
            .field("policy_version", &self.policy_version())
            .finish()
    }
}

impl Guard {
    /// A guard over `policy` on `store`, reading time from `clock`.
    pub fn new(policy: Policy, store: Arc<dyn CounterStore>, clock: Arc<dyn Clock>) -> Self {
        let seed = std::collections::hash_map::RandomState::new();
        let prefix = {
            use std::hash::BuildHasher;
            format!("{:012x}", seed.hash_one(clock.now_ms()) & 0xffff_ffff_ffff)
        };
        Guard {
            shared: Arc::new(Shared {
                store,
                clock,
                stats: Stats::default(),
                policy: RwLock::new(PolicyState {
                    policy: Arc::new(policy),
                    version: 1,
                }),
                cache: Mutex::new(HashMap::new()),
                ticket_seq: AtomicU64::new(0),
                ticket_prefix: prefix,
                ledger: std::sync::OnceLock::new(),
                fill: FillState::default(),
            }),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        self.shared.policy.read().policy.clone()
    }

    /// The policy's version: 1 at start, +1 at each `set_policy`.
    pub fn policy_version(&self) -> u64 {
        self.shared.policy.read().version
    }

    /// Replaces the policy. Paths cached under the old one are resolved again at their next
    /// use; counters are kept (rules that keep their scope, metric and window keep their use).
    pub fn set_policy(&self, policy: Policy) {
        let mut state = self.shared.policy.write();
        state.policy = Arc::new(policy);
        state.version += 1;
        self.shared.cache.lock().clear();
    }

    /// The operator's counts.
    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    /// The clock the guard reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    /// The store the guard counts in.
    pub fn store(&self) -> &Arc<dyn CounterStore> {
        &self.shared.store
    }

    /// The person's path on the model, from the cache when fresh (30 s, same policy version).
    pub fn path(&self, user: Option<&str>, model: &str) -> Result<Arc<Path>> {
        let now = self.shared.clock.now_ms();
        let (policy, version) = {
            let state = self.shared.policy.read();
            (state.policy.clone(), state.version)
        };
        let Some(user) = user else {
            return Ok(Arc::new(path::resolve(&policy, None, model)?));
        };
        if let Some(cached) = self
            .shared
            .cache
            .lock()
            .get(model)
            .and_then(|users| users.get(user))
            .filter(|c| {
                c.version == version && now - c.resolved_at < PATH_CACHE_MS && now >= c.resolved_at
            })
        {
            return Ok(cached.path.clone());
        }
        let resolved = Arc::new(path::resolve(&policy, Some(user), model)?);
        let mut cache = self.shared.cache.lock();
        if cache.values().map(HashMap::len).sum::<usize>() >= PATH_CACHE_MAX {
            cache.clear();
        }
        cache.entry(Arc::from(model)).or_default().insert(
            Arc::from(user),
            CachedPath {
                path: resolved.clone(),
                version,
                resolved_at: now,
            },
        );
        Ok(resolved)
    }

    pub(crate) fn demand(
        path: &Path,
        request: &AdmitRequest,
        settings: &crate::guard::domain::policy::Settings,
    ) -> Demand {
        let model_max = path.model_spec.as_ref().and_then(|m| m.max_output_tokens);
        let max_output_tokens = match (request.max_output_tokens, model_max) {
            (Some(caller), Some(model)) => caller.min(model),
            (Some(caller), None) => caller,
            (None, Some(model)) => model,
            (None, None) => settings.default_max_output_tokens,
        };
        // Amounts stay exact in every store (Redis computes in doubles) and never overflow.
        let max = crate::guard::domain::policy::MAX_AMOUNT;
        Demand {
            prompt_tokens: request.prompt_tokens.unwrap_or(0).min(max),
            prompt_is_estimate: request.prompt_is_estimate,
            max_output_tokens: max_output_tokens.min(max),
        }
    }

    /// The keys to read for a path at `now`: each counter's current bucket, then, for
    /// sliding windows, its previous bucket.
    fn read_keys(path: &Path, now: Millis) -> (Vec<CounterKey>, Vec<Option<usize>>) {
        let mut keys = Vec::with_capacity(path.counters.len() * 2);
        let mut previous_at = Vec::with_capacity(path.counters.len());
        for id in &path.counters {
            let bucket = id.window.bucket_start(now);
            keys.push(CounterKey {
                id: id.clone(),
                bucket,
            });
            previous_at.push(None);
        }
        for (slot, id) in path.counters.iter().enumerate() {
            if let Some(prev) = id.window.previous_bucket_start(id.window.bucket_start(now)) {
                previous_at[slot] = Some(keys.len());
                keys.push(CounterKey {
                    id: id.clone(),
                    bucket: prev,
                });
            }
        }
        (keys, previous_at)
    }

    /// Reads every counter of the path at `now` (filling long-window counters from the
    /// ledger the first time).
    pub(crate) async fn read(
        &self,
        path: &Path,
        now: Millis,
    ) -> std::result::Result<Vec<SlotRead>, crate::guard::store::StoreError> {
        let (keys, previous_at) = Self::read_keys(path, now);
        super::fill::fill_keys(&self.shared, &keys, now).await;
        let reads = self.shared.store.read(keys, now).await?;
        Ok((0..path.counters.len())
            .map(|slot| SlotRead {
                current: reads[slot],
                previous: previous_at[slot].map(|i| reads[i]).unwrap_or_default(),
            })
            .collect())
    }

    pub(crate) fn ticket_id(&self) -> String {
        let n = self.shared.ticket_seq.fetch_add(1, Ordering::Relaxed);
        format!("t-{}-{n:x}", self.shared.ticket_prefix)
    }

    /// Admits a call: resolves the path, reads its counters, decides, and reserves all or
    /// none. Refusals are `Error::Refused`.
    pub async fn admit(&self, request: AdmitRequest) -> Result<Ticket> {
        if request.user.as_deref() == Some("") {
            return Err(Error::invalid(
                "user",
                "\"\"",
                "must not be empty; pass None for a call without a user",
            ));
        }
        if request.model.is_empty() {
            return Err(Error::invalid("model", "\"\"", "must not be empty"));
        }
        let path = self.path(request.user.as_deref(), &request.model)?;
        let policy = self.policy();
        let settings = &policy.settings;
        let request = counted(request, &path)?;
        let demand = Self::demand(&path, &request, settings);
        let admitted_at = self.shared.clock.now_ms();
        if path.is_unlimited() {
            bump(&self.shared.stats.admitted);
            return Ok(self.ticket(
                path.clone(),
                None,
                unlimited_ceiling(&demand, settings),
                admitted_at,
                Vec::new(),
                0,
                Vec::new(),
                false,
            ));
        }
        let mut conflict: Option<(Plan, usize, Vec<SlotRead>)> = None;
        for _attempt in 0..=RESERVE_RETRIES {
            let now = self.shared.clock.now_ms();
            let reads = match self.read(&path, now).await {
                Ok(reads) => reads,
                Err(e) => return self.store_failed(&path, &demand, settings, admitted_at, e),
            };
            let plan = match decide::decide(&path, &reads, &demand, settings, now) {
                Decision::Refuse(refusal) => return Err(self.refuse(refusal)),
                Decision::Admit(plan) => plan,
            };
            let minute = expiry_minute(now, CALL_HOLD_MS);
            match self
                .shared
                .store
                .reserve(plan.items.clone(), minute, now)
                .await
            {
                Ok(ReserveOutcome::Reserved) => {
                    bump(&self.shared.stats.admitted);
                    let holds = plan.holds();
                    let adds = plan.added_counters(&path);
                    return Ok(self.ticket(
                        path.clone(),
                        Some(&plan),
                        plan.ceiling.clone(),
                        admitted_at,
                        holds,
                        minute,
                        adds,
                        false,
                    ));
                }
                Ok(ReserveOutcome::Conflict { item }) => {
                    bump(&self.shared.stats.reserve_retries);
                    conflict = Some((plan, item, reads));
                }
                Err(e) => return self.store_failed(&path, &demand, settings, admitted_at, e),
            }
        }
        let (plan, item, reads) = conflict.expect("the loop ran at least once");
        Err(self.lost_race(&path, &plan, item, &reads))
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
        self.refuse(decide::does_not_fit(
            path,
            rule,
            state.left,
            state.resets_at,
            now,
        ))
    }

    /// Admits from synchronous code (blocks the calling thread until the store answers).
    pub fn admit_blocking(&self, request: AdmitRequest) -> Result<Ticket> {
        crate::runtime::block_on(self.admit(request))
    }

    /// The usage view of a person on a model: the source that would be billed now, its
    /// rules and the ceilings with use and resets, and the rule closest to its amount.
    pub async fn usage(&self, user: Option<&str>, model: &str) -> Result<UsageView> {
        let path = self.path(user, model)?;
        let now = self.shared.clock.now_ms();
        let reads = if path.is_unlimited() {
            Vec::new()
        } else {
            self.read(&path, now).await.map_err(|e| {
                bump(&self.shared.stats.store_errors);
                log_store_error("usage", &e);
                Error::Refused(Box::new(Refusal::unavailable()))
            })?
        };
        Ok(view::usage_view(&path, &reads, now))
    }

    pub(crate) fn refuse(&self, refusal: Refusal) -> Error {
        bump(&self.shared.stats.refused);
        Error::Refused(Box::new(refusal))
    }

    fn store_failed(
        &self,
        path: &Arc<Path>,
        demand: &Demand,
        settings: &crate::guard::domain::policy::Settings,
        admitted_at: Millis,
        error: crate::guard::store::StoreError,
    ) -> Result<Ticket> {
        bump(&self.shared.stats.store_errors);
        log_store_error("admit", &error);
        let could_refuse = path
            .ceilings
            .iter()
            .chain(path.sources.iter().flat_map(|s| s.rules.iter()))
            .any(|r| !settings.fail_open.contains(&r.rule.metric));
        if could_refuse {
            bump(&self.shared.stats.unavailable);
            bump(&self.shared.stats.refused);
            return Err(Error::Refused(Box::new(Refusal::unavailable())));
        }
        bump(&self.shared.stats.uncounted);
        bump(&self.shared.stats.admitted);
        Ok(self.ticket(
            path.clone(),
            None,
            unlimited_ceiling(demand, settings),
            admitted_at,
            Vec::new(),
            0,
            Vec::new(),
            true,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn ticket(
        &self,
        path: Arc<Path>,
        plan: Option<&Plan>,
        ceiling: UsageCeiling,
        admitted_at: Millis,
        holds: Vec<HoldRef>,
        expiry_minute: i64,
        adds: Vec<Arc<crate::guard::domain::rule::CounterId>>,
        uncounted: bool,
    ) -> Ticket {
        let source = plan
            .map(|p| p.source.clone())
            .unwrap_or_else(|| path.default_source.clone());
        Ticket::new(TicketParts {
            id: self.ticket_id(),
            shared: self.shared.clone(),
            path,
            source,
            ceiling,
            holds,
            expiry_minute,
            adds,
            admitted_at,
            uncounted,
        })
    }
}

/// Fills in the prompt count and output maximum from the provider request, when given.
fn counted(mut request: AdmitRequest, path: &Path) -> Result<AdmitRequest> {
    let Some((body, api)) = request.request.take() else {
        return Ok(request);
    };
    if request.prompt_tokens.is_none() {
        let spec = path.model_spec.as_deref();
        let count = crate::ceiling::count_request(&body, api, Some(&path.model), spec)?;
        request.prompt_tokens = Some(count.tokens);
        request.prompt_is_estimate = !count.exact;
    }
    if request.max_output_tokens.is_none() {
        request.max_output_tokens = if api.is_embeddings() {
            Some(0)
        } else {
            crate::ceiling::requested_max_output(&body, api)?
        };
    }
    Ok(request)
}

fn unlimited_ceiling(
    demand: &Demand,
    settings: &crate::guard::domain::policy::Settings,
) -> UsageCeiling {
    UsageCeiling {
        tokens: None,
        cost_micros: None,
        rates: None,
        max_output_tokens: demand.max_output_tokens,
        min_output_tokens: settings.min_output_tokens,
        margin: settings.margin,
    }
}

pub(crate) fn log_store_error(operation: &str, error: &crate::guard::store::StoreError) {
    super::outage::STORE_OUTAGE.failed(operation, error);
}

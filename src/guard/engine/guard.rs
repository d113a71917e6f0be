//! The guard's public surface: every public `Guard` method, each a short delegation to the
//! room that does the work (`admit/`, `batch/`, `settle/`, `observe/`, the fence).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use super::handle::Guard;
use super::shared::Shared;
use crate::error::{Error, Result};
use crate::guard::domain::clock::Clock;
use crate::guard::domain::event::Event;
use crate::guard::domain::path::Path;
use crate::guard::domain::policy::Policy;
use crate::guard::domain::refusal::Refusal;
use crate::guard::domain::view::{self, PersonView, UsageView};
use crate::guard::engine::admit::admission::AdmitRequest;
use crate::guard::engine::batch::batch_ticket::{BatchRequest, BatchTicket};
use crate::guard::engine::observe::event_stream::EventStream;
use crate::guard::engine::observe::health::ProviderHealth;
use crate::guard::engine::observe::metrics::{render, MetricFamily};
use crate::guard::engine::observe::stats::Stats;
use crate::guard::engine::quota::{QuotaRecord, RuleCounter};
use crate::guard::engine::settle::settle_queue::{self, Retries, FLUSH_WAIT};
use crate::guard::engine::settle::ticket::Ticket;
use crate::guard::ledger::{Ledger, LedgerError};
use crate::guard::store::CounterStore;

impl Guard {
    /// A guard over `policy` on `store`, reading time from `clock`.
    pub fn new(policy: Policy, store: Arc<dyn CounterStore>, clock: Arc<dyn Clock>) -> Self {
        Guard {
            shared: Arc::new(Shared::new(policy, store, clock)),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        self.shared.policy().0
    }

    /// The policy's version: 1 at start, +1 at each `set_policy`.
    pub fn policy_version(&self) -> u64 {
        self.shared.policy().1
    }

    /// Replaces the policy. Paths cached under the old one are resolved again at their next
    /// use; counters are kept (rules that keep their scope, metric and window keep their use).
    pub fn set_policy(&self, policy: Policy) {
        self.shared.set_policy(policy);
    }

    /// The operator's counts.
    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    /// Every count as Prometheus metric families: the stats, refusals by reason and limit
    /// type, fitted calls, tokens and cost billed, open holds, the admission latency.
    pub fn metrics(&self) -> Vec<MetricFamily> {
        self.shared.metrics.families(&self.shared.stats)
    }

    /// [`Guard::metrics`] in the Prometheus text format.
    pub fn metrics_text(&self) -> String {
        render(&self.metrics())
    }

    /// The clock the guard reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    /// The store the guard counts in.
    pub fn store(&self) -> &Arc<dyn CounterStore> {
        &self.shared.store
    }

    /// Provider health (breakers, credential cooldowns), shared with every guard on the
    /// same store.
    pub fn health(&self) -> &ProviderHealth {
        &self.shared.health
    }

    /// The person's path on the model, from the cache when fresh (30 s, same policy version).
    pub fn path(&self, user: Option<&str>, model: &str) -> Result<Arc<Path>> {
        Ok(self.shared.resolve(user, model)?.path)
    }

    /// The usage view of a person on a model: the source that would be billed now, its
    /// rules and the ceilings with use and resets, and the rule closest to its amount.
    pub async fn usage(&self, user: Option<&str>, model: &str) -> Result<UsageView> {
        let path = self.path(user, model)?;
        // Read-your-writes: this guard's queued bills land first.
        self.shared.queue.flush(None, Retries::Skipped).await;
        self.view_of(&path).await
    }

    /// A person's view across models: the rules that count them on every model, and their
    /// view on each model of the policy where a rule of its own applies to them (the
    /// models' counters read at once, one read per model).
    pub async fn usage_across(&self, user: Option<&str>) -> Result<PersonView> {
        let policy = self.policy();
        self.shared.queue.flush(None, Retries::Skipped).await;
        let paths = policy
            .models
            .iter()
            .map(|model| self.path(user, &model.id))
            .collect::<Result<Vec<_>>>()?;
        let views = futures::future::try_join_all(paths.iter().map(|p| self.view_of(p))).await?;
        let models = policy.models.iter().map(|m| m.id.clone());
        Ok(view::person_view(models.zip(views).collect()))
    }

    /// The view of `path` from one read of its counters.
    async fn view_of(&self, path: &Path) -> Result<UsageView> {
        let now = self.shared.clock.now_ms();
        let reads = if path.is_unlimited() {
            Vec::new()
        } else {
            self.shared.read(path, now).await.map_err(|e| {
                self.shared
                    .stats
                    .store_errors
                    .fetch_add(1, Ordering::Relaxed);
                self.shared.store.as_ref().outage().log_failed("usage", &e);
                Error::Refused(Box::new(Refusal::unavailable()))
            })?
        };
        Ok(view::usage_view(path, &reads, now))
    }

    /// Records every billed call in `ledger` and fills long-window counters from it. A guard
    /// takes one ledger: a second call keeps the first.
    pub fn with_ledger(self, ledger: Arc<dyn Ledger>) -> Self {
        let _ = self.shared.ledger.set(ledger);
        self
    }

    /// The guard's ledger, if it has one.
    pub fn ledger(&self) -> Option<&Arc<dyn Ledger>> {
        self.shared.ledger.get()
    }

    /// Counters this guard filled from the ledger, and ledger reads that failed.
    pub fn fill_counts(&self) -> (u64, u64) {
        let f = &self.shared.fill;
        (
            f.filled.load(Ordering::Relaxed),
            f.ledger_errors.load(Ordering::Relaxed),
        )
    }

    /// Waits until every bill this guard queued before the call has settled (or, the store
    /// not answering, was handed to the background retry), at most `limit`; returns whether
    /// it got there.
    pub async fn flush(&self, limit: Option<std::time::Duration>) -> bool {
        self.shared.queue.flush(limit, Retries::Skipped).await
    }

    /// Store steps the settle queue sent (each carries every bill queued when it started).
    pub fn settle_steps(&self) -> u64 {
        self.shared.queue.steps()
    }

    /// Settles this guard's queued bills (waiting at most 5 s), writes every ledger row
    /// billed so far and ends the event streams open now (the guard keeps working
    /// afterwards; later streams get later events).
    pub fn close(&self) -> Result<(), LedgerError> {
        self.shared.events.close();
        // The wait's timer needs the shared runtime's context (this thread may be any).
        let _runtime = crate::runtime::shared().enter();
        let flushed = self.shared.queue.flush(Some(FLUSH_WAIT), Retries::Awaited);
        if !crate::runtime::block_on(flushed) {
            log::warn!(
                "usage_guard: close() stopped waiting for queued or retried bills after {} s; \
                 they settle in the background",
                FLUSH_WAIT.as_secs()
            );
        }
        // Then the leases, with the use those bills added to them.
        let leases = tokio::time::timeout(FLUSH_WAIT, self.shared.store.give_back_leases());
        match crate::runtime::block_on(leases) {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => log::warn!("usage_guard: close() could not give back {n} leases"),
            Ok(Err(e)) => log::warn!("usage_guard: close() could not give back leases: {e}"),
            Err(_) => log::warn!("usage_guard: close() stopped waiting for leases"),
        }
        match self.shared.ledger.get() {
            Some(ledger) => ledger.flush(),
            None => Ok(()),
        }
    }

    /// Admits a call: resolves the path, reads its counters, decides, fits the request (when
    /// given) into what is left, and reserves all or none. Refusals are `Error::Refused`;
    /// a request that cannot fit is refused before anything is reserved. A call refused by a
    /// `degrade` rule is admitted on its `degrade_to` model when that one passes admission
    /// (`Ticket::model`, `Ticket::degraded_from`); otherwise the first refusal stands. A call
    /// refused by a `throttle` rule, or finding others already waiting in one of its queues,
    /// waits in the queue, first in first out (at most `throttle_max_wait`, at most
    /// `throttle_max_queue` waiting) and is admitted or refused then.
    pub fn admit(&self, request: AdmitRequest) -> impl Future<Output = Result<Ticket>> + '_ {
        // The work's own future, not an `async` wrapper around it: one state machine less to
        // build and move on every call.
        self.admit_with_actions(request)
    }

    /// Admits from synchronous code (blocks the calling thread until the store answers).
    pub fn admit_blocking(&self, request: AdmitRequest) -> Result<Ticket> {
        crate::runtime::block_on(self.admit(request))
    }

    /// How many calls of this guard wait in a queue now.
    pub fn waiting(&self) -> u64 {
        self.waiting_count()
    }

    /// Admits a batch for `user` on `model`: every request must fit in full (a batch is not
    /// shrunk), and its whole use is held for 25 hours.
    pub async fn admit_batch(
        &self,
        user: &str,
        model: &str,
        requests: Vec<BatchRequest>,
    ) -> Result<BatchTicket> {
        self.admit_batch_with(user, model, requests, Vec::new())
            .await
    }

    /// [`Guard::admit_batch`] for a batch whose calls carry `attributes`: the generic rules
    /// that match them count every request (a `requests` rule counts each one).
    pub async fn admit_batch_with(
        &self,
        user: &str,
        model: &str,
        requests: Vec<BatchRequest>,
        attributes: Vec<(String, String)>,
    ) -> Result<BatchTicket> {
        self.admit_batch_of(user, model, requests, attributes).await
    }

    /// A batch admitted by any guard on the same store, from its `BatchTicket::state`.
    pub fn resume_batch(&self, state: &str) -> Result<BatchTicket> {
        self.resume_batch_from(state)
    }

    /// Calls `listener` with each event (on any guard of the store, only the first call to
    /// reach an event sends it). Listeners run on the admitting thread, after the
    /// reservation.
    pub fn on_event(&self, listener: impl Fn(&Event) + Send + Sync + 'static) {
        self.add_listener(listener)
    }

    /// A stream of the events this guard sends from now on, buffering at most `buffer`
    /// unread events (a reader behind loses the oldest, counted in `EventStream::dropped`;
    /// sending never waits). Many streams may be open; each ends when the guard closes.
    pub fn events(&self, buffer: usize) -> EventStream {
        self.subscribe(buffer)
    }

    /// The counters of every generic rule named `prefix`... the attributes match
    /// (`principal` = `user`), in policy order, read in one store round trip.
    pub async fn rule_counters(
        &self,
        user: Option<&str>,
        attributes: &[(String, String)],
        prefix: &str,
    ) -> Result<Vec<RuleCounter>> {
        self.counters_of_rules(user, attributes, prefix).await
    }

    /// Adds `record.amount` of `record.metric` to the counter of every generic rule named
    /// `record.prefix`... on that metric the attributes match, never refusing; once per
    /// request id and dimension for 35 days (the store's settled mark, one round trip). The
    /// first time, a ledger row (`rec:<dimension>:<request_id>`, source type `quota`) is
    /// queued too. Returns whether this call counted it (`false`: already recorded). The
    /// concurrency metric is refused: it counts calls while they run.
    pub async fn record_rules(&self, record: &QuotaRecord) -> Result<bool> {
        self.record_rule_use(record).await
    }

    /// The operator's recovery: writes a new store epoch, lifting the fence. With a ledger,
    /// every counter is then filled again from it when next read, and fenced calls wait
    /// `HOLD_AGAIN_MS` while every guard holds its open calls again. Without one, `attest`
    /// must be true: the operator attests that the counters as they are may be trusted
    /// (restored, or knowingly started over). Fails while another guard holds the recovery
    /// lock. Returns the new epoch's generation.
    pub async fn recover(&self, attest: bool) -> Result<String> {
        self.recover_after_restart(attest).await
    }

    /// `recover` from synchronous code.
    pub fn recover_blocking(&self, attest: bool) -> Result<String> {
        crate::runtime::block_on(self.recover(attest))
    }
}

/// Waits (at most `limit` in all) for the bills every guard of the process queued for the
/// background (call it before the process exits; the Python package does at interpreter
/// exit); returns how many were still queued when the wait ended.
pub fn flush_all_blocking(limit: std::time::Duration) -> u64 {
    settle_queue::flush_all_and_leases_blocking(limit)
}

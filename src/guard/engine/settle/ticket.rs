//! Tickets: what an admitted call holds. A ticket settles once: the first of `bill` and
//! `release` wins, and the other does nothing, also when called from two threads at once.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

mod open;

use crate::ceiling::{usage_capped, Api, FitResult, PromptCount};
use crate::error::Result;
use crate::guard::domain::clock::Millis;
use crate::guard::domain::decide::{Plan, RuleWarning, UsageCeiling};
use crate::guard::domain::path::{Path, SourceRef};
use crate::guard::domain::refusal::Refusal;
use crate::guard::domain::rule::{CounterId, Metric};
use crate::guard::engine::settle::admitted_request::AdmittedRequest;
use crate::guard::engine::settle::billing::{check_usage, record, usage_adds};
pub use crate::guard::engine::settle::billing::{BillInfo, Billed, Recorded, Usage};
use crate::guard::engine::settle::settling;
use crate::guard::engine::settle::wake;
use crate::guard::engine::shared::Shared;
use crate::guard::store::{HoldRef, UsageAdd};

pub(crate) struct TicketParts {
    pub id: String,
    pub shared: Arc<Shared>,
    pub path: Arc<Path>,
    pub source: SourceRef,
    pub ceiling: UsageCeiling,
    pub holds: Vec<HoldRef>,
    pub expiry_minute: i64,
    pub adds: Vec<Arc<CounterId>>,
    pub admitted_at: Millis,
    pub uncounted: bool,
    /// The provider request given at admission: its count and fit.
    pub request: Option<Box<AdmittedRequest>>,
    /// Generic rules past a soft threshold, or that would have refused (shadow mode).
    pub warnings: Vec<RuleWarning>,
}

/// A ticket's parts and whether it settled, shared by its clones.
struct TicketState {
    parts: TicketParts,
    settled: AtomicBool,
    /// The fork generation that admitted it (`crate::fork`): only that process gives its
    /// holds back when it is dropped unsettled.
    generation: u64,
    /// The model asked for and its refusal, when a `degrade` rule admitted this one instead.
    degraded_from: std::sync::OnceLock<(Arc<str>, Box<Refusal>)>,
}

/// An admitted call. Cheap to clone; clones are the same ticket. Dropping the last clone of
/// a ticket that never settled releases it.
#[derive(Clone)]
pub struct Ticket {
    state: Arc<TicketState>,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("id", &self.state.parts.id)
            .field("source", &self.state.parts.source)
            .field("settled", &self.is_settled())
            .finish()
    }
}

impl Ticket {
    pub(crate) fn new(parts: TicketParts) -> Self {
        if !parts.holds.is_empty() {
            parts.shared.metrics.hold_opened();
        }
        let ticket = Ticket {
            state: Arc::new(TicketState {
                parts,
                settled: AtomicBool::new(false),
                generation: crate::fork::generation(),
                degraded_from: std::sync::OnceLock::new(),
            }),
        };
        if ticket.state.parts.shared.ways.fences && !ticket.state.parts.holds.is_empty() {
            ticket.keep_open();
        }
        ticket
    }

    /// The ticket's id, unique within its guard.
    pub fn id(&self) -> &str {
        &self.state.parts.id
    }

    /// The source billed.
    pub fn source(&self) -> &SourceRef {
        &self.state.parts.source
    }

    /// The model admitted (a `degrade` rule's `degrade_to` when it refused the one asked for).
    pub fn model(&self) -> &str {
        &self.state.parts.path.model
    }

    /// The model asked for, when a `degrade` rule admitted another (`model`) instead.
    pub fn degraded_from(&self) -> Option<&str> {
        self.state.degraded_from.get().map(|(m, _)| &**m)
    }

    /// The refusal of the model asked for, when a `degrade` rule admitted another instead.
    pub fn degrade_refusal(&self) -> Option<&Refusal> {
        self.state.degraded_from.get().map(|(_, r)| &**r)
    }
    pub(crate) fn set_degraded_from(&self, model: Arc<str>, refusal: Box<Refusal>) {
        let _ = self.state.degraded_from.set((model, refusal));
    }

    /// Generic rules past a soft threshold (`warn_at`), or past a `warn` rule's budget.
    pub fn warnings(&self) -> &[RuleWarning] {
        &self.state.parts.warnings
    }

    /// What the call may use.
    pub fn ceiling(&self) -> &UsageCeiling {
        &self.state.parts.ceiling
    }

    /// The path the call was admitted on.
    pub fn path(&self) -> &Arc<Path> {
        &self.state.parts.path
    }

    /// When the call was admitted.
    pub fn admitted_at(&self) -> Millis {
        self.state.parts.admitted_at
    }

    /// What is held for the call, per metric (each counter of a metric holds the same).
    pub fn reserved(&self) -> Vec<(Metric, u64)> {
        let mut out: Vec<(Metric, u64)> = Vec::new();
        for hold in &self.state.parts.holds {
            let metric = hold.key.id.metric;
            if !out.iter().any(|(m, _)| *m == metric) {
                out.push((metric, hold.amount));
            }
        }
        out.sort();
        out
    }

    /// The provider request's fit into the ceiling, when admission was given the request:
    /// `FitResult::request` is the request to send.
    pub fn fitted(&self) -> Option<&FitResult> {
        self.state.parts.request.as_ref().map(|r| &r.fit)
    }

    /// The request keys to send instead of the caller's (output maximum, thinking budget
    /// or thinking turned off); empty when nothing changes or admission had no request.
    pub fn fitted_changes(&self) -> Option<serde_json::Map<String, serde_json::Value>> {
        self.state.parts.request.as_ref().map(|r| r.fit.changes())
    }

    /// The prompt as counted at admission (once, with the policy's model spec); `None` when
    /// the caller gave `prompt_tokens` or no request.
    pub fn prompt(&self) -> Option<&PromptCount> {
        self.state
            .parts
            .request
            .as_ref()
            .and_then(|r| r.prompt.as_ref())
    }

    /// The API the admitted request is sent through.
    pub fn api(&self) -> Option<Api> {
        self.state.parts.request.as_ref().map(|r| r.api)
    }

    /// Whether `response` (a provider answer or its final stream event, as JSON) stopped at
    /// the output maximum the ceiling set. False when admission fitted no request.
    pub fn capped(&self, response: &serde_json::Value) -> bool {
        self.state
            .parts
            .request
            .as_ref()
            .is_some_and(|r| usage_capped(response, &r.fit, r.api))
    }

    /// Admitted without being counted (the store failed and no rule could refuse).
    pub fn is_uncounted(&self) -> bool {
        self.state.parts.uncounted
    }

    /// Whether the ticket was billed or released.
    pub fn is_settled(&self) -> bool {
        self.state.settled.load(Ordering::SeqCst)
    }

    /// Whether billing this ticket writes a ledger row (a write that may wait on the writer).
    pub fn has_ledger(&self) -> bool {
        self.state.parts.shared.ledger.get().is_some()
    }

    fn claim(&self) -> bool {
        let claimed = self
            .state
            .settled
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if claimed && !self.state.parts.holds.is_empty() {
            self.state.parts.shared.metrics.hold_closed();
        }
        claimed
    }

    /// Replaces the whole reservation with what the call used, in one store operation; use
    /// goes into the buckets of the moment of billing, even past an amount (real use is never
    /// dropped). Returns `None` if the ticket had already settled. When the store does not
    /// answer, `recorded` is `Recorded::Pending` and the bill is retried in the background by
    /// ticket id: it counts exactly once.
    pub async fn bill(&self, usage: Usage) -> Result<Option<Billed>> {
        self.bill_with(usage, BillInfo::default()).await
    }

    /// `bill`, recording `info` in the ledger row (when the guard has a ledger).
    pub async fn bill_with(&self, usage: Usage, info: BillInfo) -> Result<Option<Billed>> {
        self.bill_with_options(usage, info, true).await
    }

    /// `bill_with`. Unless `wait`, on a store that settles in the background (Redis) the
    /// settle is queued and the bill returns at once (`Recorded::Queued`): the guard's next
    /// reservation carries it, or its drain sends it, exactly once by ticket id (retried while
    /// the store does not answer); `Guard::usage` and `Guard::flush` wait for it. With `wait`,
    /// the bill waits for the store's answer: when the first attempt fails (a connection the
    /// server dropped), for the background retry's, up to `WAIT_FOR_RETRY` (2 s) more, then
    /// answers `Recorded::Pending`. Stores that answer at once (memory) settle inline.
    pub async fn bill_with_options(
        &self,
        usage: Usage,
        info: BillInfo,
        wait: bool,
    ) -> Result<Option<Billed>> {
        check_usage(&usage).and_then(|()| info.check())?;
        self.check_process()?;
        if !self.claim() {
            return Ok(None);
        }
        let shared = &self.state.parts.shared;
        let now = shared.clock.now_ms();
        let measured = (now - self.state.parts.admitted_at).max(0) as u64;
        let mut billed = Billed::of(&self.state.parts.path, &usage, measured);
        let adds = usage_adds(&self.state.parts.adds, &billed, now);
        billed.recorded = if shared.ways.settles_in_background {
            self.queue_settle(adds, now, wait).await
        } else {
            self.settle(adds, now, "bill").await
        };
        wake::room_freed();
        shared.stats.billed.fetch_add(1, Relaxed);
        shared.metrics.billed(billed.amounts());
        if let Some(ledger) = shared.ledger.get() {
            let parts = &self.state.parts;
            let id = parts.id.clone();
            record(
                ledger.as_ref(),
                &parts.path,
                &parts.source,
                id,
                now,
                &billed,
                info,
            );
        }
        Ok(Some(billed))
    }

    /// Gives the reservation back (the call failed and used nothing). Returns false if the
    /// ticket had already settled. When the store does not answer, the release is retried in
    /// the background by ticket id. (Python, which can fork, checks `check_process` first.)
    pub async fn release(&self) -> bool {
        if !self.claim() {
            return false;
        }
        let now = self.state.parts.shared.clock.now_ms();
        self.settle(Vec::new(), now, "release").await;
        wake::room_freed();
        self.state.parts.shared.stats.released.fetch_add(1, Relaxed);
        true
    }

    async fn settle(&self, adds: Vec<UsageAdd>, now: Millis, operation: &'static str) -> Recorded {
        let parts = &self.state.parts;
        if parts.holds.is_empty() && adds.is_empty() {
            return Recorded::Yes;
        }
        let settle = settling::of_ticket(settling::whole(
            &parts.id,
            parts.holds.clone(),
            parts.expiry_minute,
            adds,
            now,
        ));
        match settling::settle(&parts.shared, settle, operation, now).await {
            Some(_) => Recorded::Yes,
            None => Recorded::Pending,
        }
    }

    /// Queues the bill's settle; with `wait`, waits for the store's answer.
    async fn queue_settle(&self, adds: Vec<UsageAdd>, now: Millis, wait: bool) -> Recorded {
        let parts = &self.state.parts;
        if parts.holds.is_empty() && adds.is_empty() {
            return Recorded::Yes;
        }
        let settle = settling::of_ticket(settling::whole(
            &parts.id,
            parts.holds.clone(),
            parts.expiry_minute,
            adds,
            now,
        ));
        if !wait {
            settling::queue(&parts.shared, settle, None);
            return Recorded::Queued;
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        settling::queue(&parts.shared, settle, Some(reply));
        match answer.await {
            Ok(Some(_)) => Recorded::Yes,
            _ => Recorded::Pending,
        }
    }

    /// `bill_with_options` from synchronous code.
    pub fn bill_with_options_blocking(
        &self,
        usage: Usage,
        info: BillInfo,
        wait: bool,
    ) -> Result<Option<Billed>> {
        crate::runtime::block_on(self.bill_with_options(usage, info, wait))
    }

    /// `bill_with` from synchronous code.
    pub fn bill_with_blocking(&self, usage: Usage, info: BillInfo) -> Result<Option<Billed>> {
        crate::runtime::block_on(self.bill_with(usage, info))
    }

    /// `bill` from synchronous code.
    pub fn bill_blocking(&self, usage: Usage) -> Result<Option<Billed>> {
        crate::runtime::block_on(self.bill(usage))
    }

    /// `release` from synchronous code.
    pub fn release_blocking(&self) -> bool {
        crate::runtime::block_on(self.release())
    }
}

/// What an admitted call or batch keeps of its reservation: the source billed, its holds and
/// their expiry minute, and the counters a bill adds to.
pub(crate) struct ReservedParts {
    pub(crate) source: SourceRef,
    pub(crate) holds: Vec<HoldRef>,
    pub(crate) expiry_minute: i64,
    pub(crate) adds: Vec<Arc<CounterId>>,
    /// Generic rules past a soft threshold or (only reporting) past their budget.
    pub(crate) warnings: Vec<RuleWarning>,
}

impl ReservedParts {
    /// The parts of a call decided without the store (`ledger_fallback.rs`): billed to the
    /// plan's source and added to its counters, holding nothing.
    pub(crate) fn unheld(path: &Path, plan: &Plan) -> Self {
        ReservedParts {
            holds: Vec::new(),
            expiry_minute: 0,
            ..Self::of(path, Some((plan, 0)))
        }
    }

    /// The parts of `reserved` (a plan and its expiry minute); none held when admitted
    /// without counting, billed to the path's default source.
    pub(crate) fn of(path: &Path, reserved: Option<(&Plan, i64)>) -> Self {
        match reserved {
            Some((plan, minute)) => ReservedParts {
                source: plan.source.clone(),
                holds: plan.holds(),
                expiry_minute: minute,
                adds: plan.added_counters(path),
                warnings: plan.warnings.clone(),
            },
            None => ReservedParts {
                source: path.default_source.clone(),
                holds: Vec::new(),
                expiry_minute: 0,
                adds: Vec::new(),
                warnings: Vec::new(),
            },
        }
    }
}

//! The spend failure mode `allow` (`settings.spend_failure_mode`; docs/policy.md, "When the
//! counter store is down"). While the counter store does not answer, a call whose only rules
//! that could refuse it are cost rules is decided from the ledger instead of being refused:
//! each cost counter keyed by a person or a team (direct, team, team total, user total, the
//! platform limit — per person here — and public use per person) or by the attributes a
//! generic rule reads (credential, scope, ...: each row records them) takes its bucket's sum
//! from the ledger, and the call is decided on those sums as on the store's counters. A
//! counter not answered so (a model's total, a model's shared public use) is skipped and
//! counted (`budget_unanswerable`).
//!
//! The reads reserve nothing: calls admitted at once during an outage can together pass a cap
//! (each one sees only what was billed before it). At most `ledger_fallback_max_concurrent`
//! admissions of one guard read at once — one more is refused as unavailable (503) — and an
//! admission's reads are bounded to one second (past it: refused as unavailable). A call
//! admitted so holds nothing; its bill adds its use to the store's counters once the store
//! answers again (retried by ticket id, as every bill is).

use std::sync::atomic::Ordering;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use super::fill::{rule_bound, sum_filter};
use crate::error::Result;
use crate::guard::domain::clock::Millis;
use crate::guard::domain::counter::CounterRead;
use crate::guard::domain::decide::{self, Decision, Demand, Plan};
use crate::guard::domain::path::Path;
use crate::guard::domain::policy::{Settings, SpendFailureMode};
use crate::guard::domain::refusal::Refusal;
use crate::guard::domain::rule::{Metric, Scope};
use crate::guard::engine::handle::Guard;
use crate::guard::engine::settle::admitted_request::AdmittedRequest;
use crate::guard::engine::settle::ticket::{ReservedParts, Ticket, TicketParts};
use crate::guard::engine::shared::{read_keys, slot_reads, Shared};
use crate::guard::ledger::SumFilter;

/// How long an admission waits for its ledger reads.
const READ_BOUND: Duration = Duration::from_secs(1);

/// A place among a guard's ledger reads in progress, given back when dropped. It moves into
/// the read itself: a read that outlives its caller's wait still takes its place until it
/// ends, so no more than the bound ever run at once.
struct Permit(Arc<Shared>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.stats.ledger_reads.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether the ledger answers a counter of this scope here: a person's, a team's, or a
/// generic rule's (each row records the attributes generic rules read); not a model's total
/// or its shared public use.
fn answerable(scope: Scope) -> bool {
    !matches!(scope, Scope::ModelTotal | Scope::PublicShared)
}

impl Guard {
    /// Whether the ledger answers this call while the store does not: the spend failure mode
    /// is `allow`, the guard has a ledger, and every rule that could refuse the call (not in
    /// `fail_open`) is a cost rule.
    pub(crate) fn ledger_answers(&self, path: &Path, settings: &Settings) -> bool {
        let could_refuse = path
            .ceilings
            .iter()
            .chain(path.sources.iter().flat_map(|s| s.rules.iter()))
            .filter(|r| !settings.fail_open.contains(&r.rule.metric))
            .collect::<Vec<_>>();
        settings.spend_failure_mode == SpendFailureMode::Allow
            && self.ledger().is_some()
            && !could_refuse.is_empty()
            && could_refuse.iter().all(|r| r.rule.metric == Metric::Cost)
    }

    /// Decides `path` from the ledger's sums (see the module): the plan to admit without
    /// holds, or the refusal (a limit reached, or unavailable: over the bound of reads at
    /// once, a read slower than a second, a ledger that failed).
    pub(crate) async fn decide_from_ledger(
        &self,
        path: &Path,
        demand: &Demand,
        settings: &Settings,
    ) -> Result<Plan> {
        let now = self.shared.clock.now_ms();
        let (keys, previous_at) = read_keys(path, now);
        let filters: Vec<Option<SumFilter>> = keys
            .iter()
            .map(|k| {
                let asked =
                    k.id.metric == Metric::Cost && !settings.fail_open.contains(&k.id.metric);
                (asked && answerable(k.id.scope))
                    .then(|| sum_filter(k, path))
                    .flatten()
            })
            .collect();
        let skipped = path
            .counters
            .iter()
            .filter(|id| {
                id.metric == Metric::Cost && !(answerable(id.scope) && rule_bound(path, id))
            })
            .count();
        for _ in 0..skipped {
            self.shared.stats.budget_unanswerable.fetch_add(1, Relaxed);
        }
        self.shared.stats.ledger_answered.fetch_add(1, Relaxed);
        let sums = self
            .ledger_sums(filters, settings.ledger_fallback_max_concurrent)
            .await?;
        let reads: Vec<CounterRead> = sums
            .into_iter()
            .map(|used| CounterRead { used, held: 0 })
            .collect();
        let reads = slot_reads(&reads, &previous_at);
        match decide::decide(path, &reads, demand, settings, now) {
            Decision::Admit(plan) => Ok(plan),
            Decision::Refuse(refusal) => Err(self.refuse(refusal)),
        }
    }

    /// The ticket of a call admitted from the ledger: it holds nothing, and its bill adds
    /// to the plan's counters (once the store answers) and writes its ledger row.
    pub(crate) fn unheld_ticket(
        &self,
        id: String,
        path: &Arc<Path>,
        plan: &Plan,
        admitted_at: Millis,
        request: Option<Box<AdmittedRequest>>,
    ) -> Ticket {
        let parts = ReservedParts::unheld(path, plan);
        Ticket::new(TicketParts {
            id,
            shared: self.shared.clone(),
            path: path.clone(),
            source: parts.source,
            ceiling: plan.ceiling.clone(),
            holds: parts.holds,
            expiry_minute: parts.expiry_minute,
            adds: parts.adds,
            admitted_at,
            uncounted: false,
            request,
            warnings: parts.warnings,
        })
    }

    /// The ledger's cost sum for each filter (0 where none), read on the blocking pool under
    /// a permit, waited for at most `READ_BOUND`.
    async fn ledger_sums(&self, filters: Vec<Option<SumFilter>>, max: u64) -> Result<Vec<u64>> {
        let unavailable = |why: String| {
            log::warn!("usage_guard: spend failure mode allow: {why}; the call is refused");
            self.shared.stats.unavailable.fetch_add(1, Relaxed);
            self.refuse(Refusal::unavailable())
        };
        let Some(ledger) = self.ledger().cloned() else {
            return Err(unavailable("no ledger".into()));
        };
        let shared = self.shared.clone();
        let before = shared.stats.ledger_reads.fetch_add(1, Ordering::SeqCst);
        let permit = Permit(shared);
        if before >= max {
            return Err(unavailable(format!(
                "{max} ledger reads already in progress (settings.ledger_fallback_max_concurrent)"
            )));
        }
        let read = move || {
            let _permit = permit;
            filters
                .iter()
                .map(|f| match f {
                    Some(f) => ledger.sum(f, Metric::Cost),
                    None => Ok(0),
                })
                .collect::<std::result::Result<Vec<u64>, _>>()
        };
        let runtime = crate::runtime::shared();
        let handle = crate::runtime::starting_threads(|| runtime.spawn_blocking(read));
        let bounded = runtime.spawn(async move { tokio::time::timeout(READ_BOUND, handle).await });
        match bounded.await {
            Ok(Ok(Ok(Ok(sums)))) => Ok(sums),
            Ok(Ok(Ok(Err(e)))) => Err(unavailable(format!("the ledger failed: {e}"))),
            Ok(Err(_)) => Err(unavailable("the ledger did not answer within 1 s".into())),
            Ok(Ok(Err(e))) | Err(e) => Err(unavailable(format!("the ledger read ended: {e}"))),
        }
    }
}

//! Batches: reserve for every request at submission (holds live 25 hours), bill each result
//! once as it comes in (giving back its share of the reservation), release the rest at the
//! end (`batch_parts`). Results can be read many times and on any server: each part
//! `<batch id>/<result id>` is settled in one atomic store step whose record is its mark, so
//! each result is billed once and each share given back once, across crashes too.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::guard::domain::clock::Millis;
use crate::guard::domain::decide::{self, rule_left, Demand, Plan, SlotRead};
use crate::guard::domain::path::{Path, SourceRef};
use crate::guard::domain::refusal::Refusal;
use crate::guard::domain::rule::{CounterId, Metric};
use crate::guard::engine::admit::admission::{demand, AdmitRequest};
use crate::guard::engine::handle::Guard;
use crate::guard::engine::reserve::reserve_loop::ReserveEnd;
use crate::guard::engine::settle::ticket::ReservedParts;
use crate::guard::engine::shared::{Resolved, Shared};
use crate::guard::store::HoldRef;

/// How long a batch's holds live if it never finishes.
pub(crate) const BATCH_HOLD_MS: i64 = 25 * 3_600_000;
const DAY_MS: i64 = 86_400_000;

/// One request of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRequest {
    /// The result id its result will carry (unique in the batch).
    pub id: String,
    pub prompt_tokens: u64,
    /// The request's output maximum (the model's when `None`).
    pub max_output_tokens: Option<u64>,
}

/// A submitted batch: its holds, and what each result gives back.
#[derive(Clone)]
pub struct BatchTicket {
    pub(super) shared: Arc<Shared>,
    pub(super) id: String,
    pub(super) path: Arc<Path>,
    pub(super) source: SourceRef,
    pub(super) holds: Vec<HoldRef>,
    pub(super) expiry_minute: i64,
    pub(super) adds: Vec<Arc<CounterId>>,
    pub(super) request_ids: Vec<String>,
    /// The call's attributes (for `[[rules]]`), kept in the state.
    pub(super) attributes: Vec<(String, String)>,
}

impl std::fmt::Debug for BatchTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchTicket")
            .field("id", &self.id)
            .field("source", &self.source)
            .field("requests", &self.request_ids.len())
            .finish()
    }
}

pub(super) fn unavailable() -> Error {
    Error::Refused(Box::new(Refusal::unavailable()))
}

impl Guard {
    /// The work of [`Guard::admit_batch_with`].
    pub(crate) async fn admit_batch_of(
        &self,
        user: &str,
        model: &str,
        requests: Vec<BatchRequest>,
        attributes: Vec<(String, String)>,
    ) -> Result<BatchTicket> {
        let started = Instant::now();
        let admitted = self
            .admit_batch_once(user, model, requests, attributes)
            .await;
        let refusal = match &admitted {
            Err(Error::Refused(r)) => Some(&**r),
            _ => None,
        };
        self.shared.metrics.admission(started.elapsed(), refusal);
        admitted
    }

    async fn admit_batch_once(
        &self,
        user: &str,
        model: &str,
        requests: Vec<BatchRequest>,
        attributes: Vec<(String, String)>,
    ) -> Result<BatchTicket> {
        check_ids(&requests)?;
        let Resolved { path, policy } = self.shared.resolve_with(Some(user), model, &attributes)?;
        let demand = batch_demand(&path, user, model, &requests, &policy.settings);
        let need = BatchNeed::new(&path, &demand, requests.len() as u64);
        let request_ids: Vec<String> = requests.into_iter().map(|r| r.id).collect();
        let id = format!("b{}", self.shared.ticket_id());
        if path.is_unlimited() {
            self.shared.stats.admitted.fetch_add(1, Relaxed);
            return Ok(self.batch(id, &path, None, (request_ids, attributes)));
        }
        let in_full = |plan: &mut Plan, reads: &[SlotRead], now: Millis| {
            need.require(&path, plan, reads, now)
        };
        let end = self
            .reserve_loop(
                &id,
                &path,
                &demand,
                &policy.settings,
                BATCH_HOLD_MS,
                in_full,
            )
            .await?;
        match end {
            ReserveEnd::Placed(done) => {
                let reserved = Some((&done.plan, done.minute));
                Ok(self.batch(id, &path, reserved, (request_ids, attributes)))
            }
            ReserveEnd::StoreFailed(e) => {
                self.shared
                    .store
                    .as_ref()
                    .outage()
                    .failed("admit_batch", &e);
                Err(unavailable())
            }
        }
    }

    fn batch(
        &self,
        id: String,
        path: &Arc<Path>,
        reserved: Option<(&Plan, i64)>,
        (request_ids, attributes): (Vec<String>, Vec<(String, String)>),
    ) -> BatchTicket {
        let ReservedParts {
            source,
            holds,
            expiry_minute,
            adds,
            ..
        } = ReservedParts::of(path, reserved);
        BatchTicket {
            shared: self.shared.clone(),
            id,
            source,
            path: path.clone(),
            holds,
            expiry_minute,
            adds,
            request_ids,
            attributes,
        }
    }
}

fn check_ids(requests: &[BatchRequest]) -> Result<()> {
    if requests.is_empty() {
        return Err(Error::invalid("requests", "[]", "a batch needs a request"));
    }
    let mut ids: Vec<&str> = requests.iter().map(|r| r.id.as_str()).collect();
    for id in &ids {
        // Each becomes part of a ledger row's ticket id.
        crate::guard::domain::caller::storable("requests.id", id)?;
    }
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::invalid("requests.id", w[0], "ids must be unique"));
    }
    Ok(())
}

/// The whole batch's demand: the sum of each request's, each as admission would see it.
fn batch_demand(
    path: &Path,
    user: &str,
    model: &str,
    requests: &[BatchRequest],
    settings: &crate::guard::domain::policy::Settings,
) -> Demand {
    let (mut prompt, mut max_out) = (0u64, 0u64);
    for r in requests {
        let one = AdmitRequest {
            user: Some(user.to_string()),
            model: model.to_string(),
            prompt_tokens: Some(r.prompt_tokens),
            prompt_is_estimate: false,
            max_output_tokens: r.max_output_tokens,
            request: None,
            attributes: Vec::new(),
        };
        let d = demand(path, &one, settings);
        prompt = prompt.saturating_add(d.prompt_tokens);
        max_out = max_out.saturating_add(d.max_output_tokens);
    }
    Demand {
        prompt_tokens: prompt,
        prompt_is_estimate: false,
        max_output_tokens: max_out,
        answers: 1,
        // A batch sums its requests' maxima: it holds them in full.
        uncapped: false,
    }
}

/// What a batch needs on each metric, in full.
struct BatchNeed {
    prompt: u64,
    max_out: u64,
    cost: u64,
    requests: u64,
}

impl BatchNeed {
    fn new(path: &Path, demand: &Demand, requests: u64) -> Self {
        let (prompt, max_out) = (demand.prompt_tokens, demand.max_output_tokens);
        let prices = path
            .model_spec
            .as_ref()
            .map(|m| m.prices.rates(prompt))
            .unwrap_or_default();
        BatchNeed {
            prompt,
            max_out,
            cost: prices.dearest_cost_micros(prompt, max_out),
            requests,
        }
    }

    fn of(&self, metric: Metric) -> u64 {
        match metric {
            Metric::Tokens => self.prompt.saturating_add(self.max_out),
            Metric::InputTokens => self.prompt,
            Metric::OutputTokens => self.max_out,
            Metric::Cost => self.cost,
            Metric::Requests => self.requests,
            Metric::ComputeMs | Metric::Concurrency => 0,
        }
    }

    /// Refuses a batch that does not fit in full in a rule it is checked against; else
    /// holds the whole need on every counter of the plan.
    fn require(&self, path: &Path, plan: &mut Plan, reads: &[SlotRead], now: Millis) -> Result<()> {
        if let Some(rule) = path
            .checked_rules(plan.source_index)
            .find(|r| rule_left(r, reads, now) < self.of(r.rule.metric))
        {
            let left = rule_left(rule, reads, now);
            let need = self.of(rule.rule.metric);
            let resets_at = decide::room_at(rule, reads, need, now);
            return Err(Error::Refused(Box::new(decide::does_not_fit(
                path, rule, left, need, resets_at, now,
            ))));
        }
        for item in &mut plan.items {
            item.hold = self.of(item.key.id.metric);
        }
        Ok(())
    }
}

impl BatchTicket {
    /// The batch's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The source billed.
    pub fn source(&self) -> &SourceRef {
        &self.source
    }

    /// The result ids, in submission order.
    pub fn request_ids(&self) -> &[String] {
        &self.request_ids
    }

    /// What the whole batch holds, per metric.
    pub fn reserved(&self) -> Vec<(Metric, u64)> {
        let mut out: Vec<(Metric, u64)> = Vec::new();
        for h in &self.holds {
            if !out.iter().any(|(m, _)| *m == h.key.id.metric) {
                out.push((h.key.id.metric, h.amount));
            }
        }
        out.sort();
        out
    }

    /// Until when the records of the batch's parts are kept: a day past its holds.
    pub(super) fn marks_until(&self) -> Millis {
        self.expiry_minute * 60_000 + DAY_MS
    }

    /// Result `index`'s share of every hold (the holds split evenly, remainders first).
    pub(super) fn share(&self, index: usize) -> Vec<HoldRef> {
        let n = self.request_ids.len() as u64;
        self.holds
            .iter()
            .map(|h| HoldRef {
                key: h.key.clone(),
                amount: h.amount / n + u64::from((index as u64) < h.amount % n),
            })
            .filter(|h| h.amount > 0)
            .collect()
    }
}

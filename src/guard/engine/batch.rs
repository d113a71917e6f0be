//! Batches: reserve for every request at submission (holds live 25 hours), bill each result
//! once as it comes in (giving back its share of the reservation), release the rest at the
//! end. Results can be read many times and on any server: a mark in the counter store makes
//! each result billed once and each share given back once, and the ledger row of a result
//! (`<batch id>/<result id>`) is unique.

use std::sync::Arc;

use super::admission::{demand, AdmitRequest};
use super::billing::{
    check_usage, ledger_row, record, usage_adds, BillInfo, Billed, Recorded, Usage,
};
use super::guard::Guard;
use super::settling;
use super::shared::{Resolved, Shared};
use super::stats::{bump, log_store_error};
use super::ticket::ReservedParts;
use crate::error::{Error, Result};
use crate::guard::domain::clock::Millis;
use crate::guard::domain::decide::{self, rule_left, Demand, Plan, SlotRead};
use crate::guard::domain::path::{Path, SourceRef};
use crate::guard::domain::refusal::Refusal;
use crate::guard::domain::rule::{CounterId, Metric};
use crate::guard::store::{HoldRef, Settle, UsageAdd};

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

fn unavailable() -> Error {
    Error::Refused(Box::new(Refusal::unavailable()))
}

impl Guard {
    /// Admits a batch for `user` on `model`: every request must fit in full (a batch is not
    /// shrunk), and its whole use is held for 25 hours.
    pub async fn admit_batch(
        &self,
        user: &str,
        model: &str,
        requests: Vec<BatchRequest>,
    ) -> Result<BatchTicket> {
        check_ids(&requests)?;
        let Resolved { path, policy } = self.shared.resolve(Some(user), model)?;
        let demand = batch_demand(&path, user, model, &requests, &policy.settings);
        let need = BatchNeed::new(&path, &demand, requests.len() as u64);
        let request_ids: Vec<String> = requests.into_iter().map(|r| r.id).collect();
        let id = format!("b{}", self.shared.ticket_id());
        if path.is_unlimited() {
            bump(&self.shared.stats.admitted);
            return Ok(self.batch(id, &path, None, request_ids));
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
            Ok(done) => Ok(self.batch(id, &path, Some((&done.plan, done.minute)), request_ids)),
            Err(e) => {
                log_store_error("admit_batch", &e);
                Err(unavailable())
            }
        }
    }

    fn batch(
        &self,
        id: String,
        path: &Arc<Path>,
        reserved: Option<(&Plan, i64)>,
        request_ids: Vec<String>,
    ) -> BatchTicket {
        let ReservedParts {
            source,
            holds,
            expiry_minute,
            adds,
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
        }
    }
}

fn check_ids(requests: &[BatchRequest]) -> Result<()> {
    if requests.is_empty() {
        return Err(Error::invalid("requests", "[]", "a batch needs a request"));
    }
    let mut ids: Vec<&str> = requests.iter().map(|r| r.id.as_str()).collect();
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
        };
        let d = demand(path, &one, settings);
        prompt = prompt.saturating_add(d.prompt_tokens);
        max_out = max_out.saturating_add(d.max_output_tokens);
    }
    Demand {
        prompt_tokens: prompt,
        prompt_is_estimate: false,
        max_output_tokens: max_out,
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
        let prices = path
            .model_spec
            .as_ref()
            .map(|m| m.prices)
            .unwrap_or_default();
        let (prompt, max_out) = (demand.prompt_tokens, demand.max_output_tokens);
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

    fn mark(&self, kind: &str, result_id: &str) -> String {
        format!("batch:{}:{kind}:{result_id}", self.id)
    }

    fn marks_until(&self) -> Millis {
        self.expiry_minute * 60_000 + DAY_MS
    }

    /// Result `index`'s share of every hold (the holds split evenly, remainders first).
    fn share(&self, index: usize) -> Vec<HoldRef> {
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

    /// Gives back result `index`'s share once across every server; false if it was given.
    async fn give_back(&self, index: usize, now: Millis) -> Result<Vec<HoldRef>> {
        let mark = self.mark("h", &self.request_ids[index]);
        match self
            .shared
            .store
            .mark_once(mark, self.marks_until(), now)
            .await
        {
            Ok(true) => Ok(self.share(index)),
            Ok(false) => Ok(Vec::new()),
            Err(e) => {
                log_store_error("batch", &e);
                Err(unavailable())
            }
        }
    }

    /// Bills one result: the first read of `result_id` on any server bills `usage` and gives
    /// back the result's share of the reservation; later reads return `None`. Cost comes
    /// from the model's prices unless given.
    pub async fn bill_part(
        &self,
        result_id: &str,
        usage: Usage,
        info: BillInfo,
    ) -> Result<Option<Billed>> {
        check_usage(&usage)?;
        let index = self
            .request_ids
            .iter()
            .position(|r| r == result_id)
            .ok_or_else(|| {
                Error::invalid("result_id", result_id, "is not a request of the batch")
            })?;
        let now = self.shared.clock.now_ms();
        let first = self
            .shared
            .store
            .mark_once(self.mark("b", result_id), self.marks_until(), now)
            .await
            .map_err(|e| {
                log_store_error("bill_part", &e);
                unavailable()
            })?;
        if !first {
            return Ok(None);
        }
        let holds = self.give_back(index, now).await.unwrap_or_default();
        let mut billed = Billed::of(&self.path, &usage, 0);
        let adds = usage_adds(&self.adds, &billed, now);
        let part = format!("{}/{result_id}", self.id);
        billed.recorded = self.settle(part, holds, adds, now).await;
        bump(&self.shared.stats.billed);
        if let Some(ledger) = self.shared.ledger.get() {
            let ticket_id = format!("{}/{result_id}", self.id);
            record(
                ledger.as_ref(),
                ledger_row(&self.path, &self.source, ticket_id, now, &billed, info),
            );
        }
        Ok(Some(billed))
    }

    /// Ends the batch: gives back the share of every result not billed (on any server).
    /// Returns how many shares this call gave back.
    pub async fn finish(&self) -> Result<usize> {
        let now = self.shared.clock.now_ms();
        let mut holds: Vec<HoldRef> = Vec::new();
        let mut given = 0;
        for index in 0..self.request_ids.len() {
            let share = self.give_back(index, now).await?;
            if !share.is_empty() {
                given += 1;
            }
            for h in share {
                match holds.iter_mut().find(|x| x.key == h.key) {
                    Some(x) => x.amount += h.amount,
                    None => holds.push(h),
                }
            }
        }
        self.settle(self.id.clone(), holds, Vec::new(), now).await;
        bump(&self.shared.stats.released);
        Ok(given)
    }

    /// Settles `id` (the batch, or one of its parts `<batch id>/<result id>`) once, giving
    /// back `holds` of the batch's reservation; retried in the background by id when the
    /// store does not answer.
    async fn settle(
        &self,
        id: String,
        holds: Vec<HoldRef>,
        adds: Vec<UsageAdd>,
        now: Millis,
    ) -> Recorded {
        if holds.is_empty() && adds.is_empty() {
            return Recorded::Yes;
        }
        let settle = Settle {
            id,
            ticket: self.id.clone(),
            holds,
            expiry_minute: self.expiry_minute,
            adds,
            settled_until: settling::settled_until(now),
        };
        match settling::settle(&self.shared, settle, "batch settle").await {
            Some(_) => Recorded::Yes,
            None => Recorded::Pending,
        }
    }
}

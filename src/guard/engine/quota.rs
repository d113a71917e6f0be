//! The quota service's two engine operations (docs/quotas.md): reading the counters of the
//! generic rules a set of attributes matches (one store read, nothing reserved), and adding
//! use that did not pass through admission to them, once per request id.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::fence::fill::sum_filter_with;
use super::handle::Guard;
use crate::error::{Error, Result};
use crate::guard::domain::clock::Millis;
use crate::guard::domain::counter::{CounterRead, Settle, SettleOutcome, UsageAdd};
use crate::guard::domain::decide::{rule_state, RuleWarning, SlotRead};
use crate::guard::domain::event::EventKind;
use crate::guard::domain::generic::{Attribute, CallAttributes, GenericRule};
use crate::guard::domain::path::PathRule;
use crate::guard::domain::recorded::rule_conditions;
use crate::guard::domain::refusal::Refusal;
use crate::guard::domain::rule::{CounterId, LimitType, Metric};
use crate::guard::domain::window::Window;
use crate::guard::engine::observe::events::Caller;
use crate::guard::engine::settle::settling::settled_until;
use crate::guard::ledger::LedgerRow;
use crate::guard::store::CounterKey;

/// How long a recorded request id is remembered: a repeated `record` within this time
/// counts once.
pub(crate) const RECORD_KEEP_MS: i64 = 35 * 24 * 3_600_000;

/// One generic rule's counter for the attributes read.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleCounter {
    pub name: Arc<str>,
    pub metric: Metric,
    pub window: Window,
    /// The budget, in the metric's unit (micro-dollars for cost).
    pub budget: u64,
    /// Billed use in the window (with the previous bucket's share, for sliding windows).
    pub used: u64,
    /// Held by calls running now.
    pub held: u64,
    pub left: u64,
    pub resets_at: Option<Millis>,
}

/// The rules named `prefix`... that `call` matches, each with its counter.
fn matching(
    guard: &Guard,
    call: &CallAttributes,
    prefix: &str,
) -> Vec<(Arc<GenericRule>, Arc<CounterId>)> {
    let (policy, _) = guard.shared.policy();
    policy
        .rules
        .iter()
        .filter(|rule| rule.name.starts_with(prefix) && rule.matches(call))
        .filter_map(|rule| {
            let subject = rule.subject(call)?;
            let spec = &rule.spec;
            let id = CounterId::rule(subject.into(), spec.metric, spec.window);
            Some((rule.clone(), Arc::new(id)))
        })
        .collect()
}

/// The attributes of a quota call: `principal` is `user`, the others from `attributes`.
fn call_of(
    guard: &Guard,
    user: Option<&str>,
    attributes: &[(String, String)],
) -> Result<CallAttributes> {
    crate::guard::domain::caller::storable_call(user, "", attributes)?;
    let (policy, _) = guard.shared.policy();
    let call = CallAttributes::of(user, "", None, attributes, &policy.scopes)?;
    Ok(call)
}

fn unavailable(
    guard: &Guard,
    operation: &'static str,
    e: &crate::guard::store::StoreError,
) -> Error {
    guard.shared.stats.store_errors.fetch_add(1, Relaxed);
    guard
        .shared
        .store
        .as_ref()
        .outage()
        .log_failed(operation, e);
    Error::Refused(Box::new(Refusal::unavailable()))
}

impl Guard {
    /// The work of [`Guard::rule_counters`].
    pub(crate) async fn counters_of_rules(
        &self,
        user: Option<&str>,
        attributes: &[(String, String)],
        prefix: &str,
    ) -> Result<Vec<RuleCounter>> {
        let call = call_of(self, user, attributes)?;
        let rules = matching(self, &call, prefix);
        self.read_rules(&rules, &call).await
    }

    /// The counters of `rules` for `call`, read in one store round trip (filled from the
    /// ledger first, as admission fills them: so a check agrees with the admission after it).
    async fn read_rules(
        &self,
        rules: &[(Arc<GenericRule>, Arc<CounterId>)],
        call: &CallAttributes,
    ) -> Result<Vec<RuleCounter>> {
        if rules.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.shared.clock.now_ms();
        let mut keys = Vec::with_capacity(rules.len() * 2);
        for (_, id) in rules {
            let bucket = id.window.bucket_start(now);
            keys.push(CounterKey {
                id: id.clone(),
                bucket,
            });
        }
        let mut previous_at = Vec::with_capacity(rules.len());
        for (_, id) in rules {
            let start = id.window.bucket_start(now);
            let prev = id
                .window
                .is_sliding()
                .then(|| id.window.previous_bucket_start(start));
            previous_at.push(prev.flatten().map(|bucket| {
                keys.push(CounterKey {
                    id: id.clone(),
                    bucket,
                });
                keys.len() - 1
            }));
        }
        let filter_of = |key: &CounterKey| {
            let (rule, _) = rules.iter().find(|(_, id)| **id == *key.id)?;
            sum_filter_with(key, || rule_conditions(rule, call))
        };
        self.shared.fill_with(&keys, now, &filter_of).await;
        let reads = self
            .shared
            .store
            .read(keys, now)
            .await
            .map_err(|e| unavailable(self, "quota read", &e))?;
        let slots: Vec<SlotRead> = (0..rules.len())
            .map(|i| SlotRead {
                current: reads[i],
                previous: previous_at[i]
                    .map(|p| reads[p])
                    .unwrap_or(CounterRead::default()),
            })
            .collect();
        Ok(rules
            .iter()
            .enumerate()
            .map(|(slot, (rule, _))| {
                let bound = PathRule {
                    limit_type: LimitType::Rule,
                    rule: rule.spec.clone(),
                    slot,
                    team: None,
                    team_name: Arc::from(""),
                    per_person: false,
                    generic: Some(rule.clone()),
                };
                let state = rule_state(&bound, &slots, now);
                RuleCounter {
                    name: rule.name.clone(),
                    metric: rule.spec.metric,
                    window: rule.spec.window,
                    budget: rule.spec.amount,
                    used: state.used,
                    held: state.held,
                    left: state.left,
                    resets_at: state.resets_at,
                }
            })
            .collect())
    }

    /// The work of [`Guard::record_rules`].
    pub(crate) async fn record_rule_use(&self, record: &QuotaRecord) -> Result<bool> {
        check_storable(record)?;
        if record.metric == Metric::Concurrency {
            return Err(Error::invalid(
                "metric",
                serde_json::Value::from("concurrency"),
                "cannot be recorded: it counts calls while they run (admission holds it, \
                 the bill gives it back); accepted: tokens, input_tokens, output_tokens, \
                 cost, requests",
            ));
        }
        let call = call_of(self, record.user.as_deref(), &record.attributes)?;
        let now = self.shared.clock.now_ms();
        let adds: Vec<UsageAdd> = matching(self, &call, &record.prefix)
            .into_iter()
            .filter(|(_, id)| id.metric == record.metric && record.amount > 0)
            .map(|(_, id)| {
                let bucket = id.window.bucket_start(now);
                let retain_until = id.window.retain_until(bucket);
                UsageAdd {
                    key: CounterKey { id, bucket },
                    amount: record.amount,
                    retain_until,
                }
            })
            .collect();
        let id = record_id(record);
        let settle = Settle {
            id: id.clone(),
            ticket: id,
            holds: Vec::new(),
            expiry_minute: now.div_euclid(60_000),
            adds,
            settled_until: settled_until(now).max(now + RECORD_KEEP_MS),
        };
        let outcome = self
            .shared
            .store
            .settle(&settle, now)
            .await
            .map_err(|e| unavailable(self, "quota record", &e))?;
        let counted = outcome == SettleOutcome::Settled;
        if counted && !record.dimension.is_empty() {
            if let Some(ledger) = self.shared.ledger.get() {
                ledger.record(ledger_row(record, &call, now));
            }
        }
        if counted {
            self.warn_recorded(record, &call).await;
        }
        Ok(counted)
    }

    /// Sends the soft-threshold events a record crossed, as admission does (the same store
    /// mark: once per window, counter and threshold, whichever of them crosses first).
    async fn warn_recorded(&self, record: &QuotaRecord, call: &CallAttributes) {
        let rules: Vec<_> = matching(self, call, &record.prefix)
            .into_iter()
            .filter(|(rule, id)| id.metric == record.metric && !rule.warn_at.is_empty())
            .collect();
        if rules.is_empty() || !self.has_event_sinks() {
            return;
        }
        let Ok(counters) = self.read_rules(&rules, call).await else {
            return;
        };
        let now = self.shared.clock.now_ms();
        let caller = Caller {
            principal: record.user.as_deref().map(Arc::from),
            model: record.model.as_deref().map(Arc::from),
        };
        for ((rule, id), counter) in rules.iter().zip(counters) {
            let (used, budget) = (counter.used.saturating_add(counter.held), counter.budget);
            let reached = |t: &&f64| used as f64 >= (**t * budget as f64).ceil();
            let Some(&threshold) = rule.warn_at.iter().rev().find(reached) else {
                continue;
            };
            let key = CounterKey {
                id: id.clone(),
                bucket: id.window.bucket_start(now),
            };
            let mark = format!("ev:{}:{threshold}:false", key.render());
            let keep_until = id.window.retain_until(key.bucket);
            let warning = RuleWarning {
                rule: rule.name.clone(),
                metric: rule.spec.metric,
                used,
                budget,
                threshold,
                action: rule.action,
                would_refuse: false,
                key,
            };
            let kind = EventKind::of_warning(&warning);
            self.publish(kind, warning, &caller, mark, keep_until).await;
        }
    }
}

/// Use that did not pass through admission, for [`Guard::record_rules`].
#[derive(Debug, Clone)]
pub struct QuotaRecord {
    /// The principal (`user:` subjects).
    pub user: Option<String>,
    /// The other call attributes (`team`, `role`, `endpoint` ...).
    pub attributes: Vec<(String, String)>,
    /// The rules counted: those whose name starts with it.
    pub prefix: String,
    pub metric: Metric,
    /// In the metric's unit (micro-dollars for cost).
    pub amount: u64,
    pub request_id: String,
    /// The quota dimension, as the ledger row's `source_id` (empty: no ledger row).
    pub dimension: String,
    pub model: Option<String>,
    pub executor: Option<String>,
    /// Free JSON the caller attached.
    pub meta: Option<serde_json::Value>,
}

/// Refuses a record whose ledger row would hold a NUL character (`storable`): checked
/// before its use is counted, as a call's are.
fn check_storable(record: &QuotaRecord) -> Result<()> {
    use crate::guard::domain::caller::{storable, storable_json};
    storable("request_id", &record.request_id)?;
    storable("dimension", &record.dimension)?;
    for (field, value) in [("model", &record.model), ("executor", &record.executor)] {
        if let Some(value) = value {
            storable(field, value)?;
        }
    }
    if let Some(meta) = &record.meta {
        storable_json("meta", meta)?;
    }
    Ok(())
}

/// A record's ticket id, which makes it count once: per request id and dimension
/// (`rec:<dimension>:<request_id>`; a dimension has no `:`), so the tokens and the cost of one
/// request both count. A record without a dimension (no ledger row): `rec:<request_id>`.
fn record_id(record: &QuotaRecord) -> String {
    if record.dimension.is_empty() {
        format!("rec:{}", record.request_id)
    } else {
        format!("rec:{}:{}", record.dimension, record.request_id)
    }
}

fn ledger_row(record: &QuotaRecord, call: &CallAttributes, now: Millis) -> LedgerRow {
    let mut row = LedgerRow {
        ticket_id: record_id(record),
        at_ms: now,
        user: record.user.clone(),
        teams: call
            .get(Attribute::Team)
            .map(String::from)
            .into_iter()
            .collect(),
        source_type: "quota".into(),
        source_id: record.dimension.clone(),
        model: record.model.clone().unwrap_or_default(),
        request_id: Some(record.request_id.clone()),
        metadata: Some(serde_json::json!({
            "dimension": record.dimension,
            "amount": record.amount,
            "executor": record.executor,
            "meta": record.meta,
        })),
        ..LedgerRow::default()
    };
    match record.metric {
        Metric::Tokens | Metric::InputTokens => row.input_tokens = record.amount,
        Metric::OutputTokens => row.output_tokens = record.amount,
        Metric::Cost => row.cost_micros = record.amount,
        Metric::ComputeMs => row.compute_ms = record.amount,
        Metric::Requests | Metric::Concurrency => {}
    }
    row
}

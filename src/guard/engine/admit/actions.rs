//! The actions that act after a refusal: `degrade` admits the call on the rule's
//! `degrade_to` model instead, when that model itself passes admission (its own rules,
//! context and fit); `throttle` waits in the rule's fair FIFO queue (`wait_queue.rs`) until the
//! counter has room, within `throttle_max_wait`, and admits or refuses then (on a store
//! without queues: one timer until the refusal's `resets_at`, never a busy loop).

use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::guard::domain::counter::CounterKey;
use crate::guard::domain::generic::{Action, GenericRule};
use crate::guard::domain::refusal::Refusal;
use crate::guard::domain::rule::LimitType;
use crate::guard::engine::admit::admission::AdmitRequest;
use crate::guard::engine::handle::Guard;
use crate::guard::engine::observe::events::Caller;
use crate::guard::engine::settle::ticket::Ticket;

impl Guard {
    /// The work of [`Guard::admit`].
    pub(crate) async fn admit_with_actions(&self, request: AdmitRequest) -> Result<Ticket> {
        let started = Instant::now();
        let admitted = self.admit_acting(request).await;
        let refusal = match &admitted {
            Err(Error::Refused(r)) => Some(&**r),
            _ => None,
        };
        let metrics = &self.shared.metrics;
        metrics.admission(started.elapsed(), refusal);
        let ticket = admitted?;
        if ticket.fitted().is_some_and(|f| f.lowered) {
            metrics.fitted();
        }
        if !ticket.warnings().is_empty() {
            let caller = || Caller {
                principal: ticket.path().user.clone(),
                model: Some(Arc::from(ticket.model())),
            };
            self.emit(ticket.warnings(), caller).await;
        }
        Ok(ticket)
    }

    async fn admit_acting(&self, request: AdmitRequest) -> Result<Ticket> {
        let index = &self.shared.policy().0.rule_index;
        if !index.degrades && !index.throttles {
            return self.admit_one(request).await;
        }
        let retry = request.clone();
        let caller = Caller::of(retry.user.as_deref(), &retry.model);
        let queues = if index.throttles {
            self.queue_rules(&retry)
        } else {
            Vec::new()
        };
        let first = if queues.is_empty() {
            self.admit_one(request).await
        } else {
            match self.admit_queued(request, &queues).await {
                (Ok(ticket), true) => {
                    let q = &queues[0];
                    self.acted(&q.rule, q.key.clone(), &caller).await;
                    return Ok(ticket);
                }
                (out, _) => out,
            }
        };
        let refusal = match first {
            Err(Error::Refused(refusal)) => refusal,
            other => return other,
        };
        let Some((rule, key)) = self.acting_rule(&retry, &refusal) else {
            return Err(Error::Refused(refusal));
        };
        if rule.action == Action::Throttle && !queues.is_empty() {
            return Err(Error::Refused(refusal));
        }
        if rule.action == Action::Throttle {
            let now = self.shared.clock.now_ms();
            return match refusal.resets_at.map(|at| at - now) {
                Some(wait) if wait >= 0 && wait as u64 <= rule.throttle_max_wait_ms => {
                    // On the shared runtime: admit_blocking drives this future off it.
                    let pause = std::time::Duration::from_millis(wait as u64);
                    let timer = crate::runtime::shared()
                        .spawn(async move { tokio::time::sleep(pause).await });
                    let _ = timer.await;
                    self.acted(&rule, key, &caller).await;
                    self.admit_one(retry).await
                }
                _ => Err(Error::Refused(refusal)),
            };
        }
        let Some(to) = rule.degrade_to.clone() else {
            return Err(Error::Refused(refusal));
        };
        let from: Arc<str> = Arc::from(retry.model.as_str());
        let substitute = AdmitRequest {
            model: to.to_string(),
            request: retry.request.map(|(mut body, api)| {
                if let Some(map) = body.as_object_mut().filter(|m| m.contains_key("model")) {
                    map.insert("model".into(), serde_json::Value::from(&*to));
                }
                (body, api)
            }),
            ..retry
        };
        match self.admit_one(substitute).await {
            Ok(ticket) => {
                ticket.set_degraded_from(from, refusal);
                self.acted(&rule, key, &caller).await;
                Ok(ticket)
            }
            Err(Error::Refused(_)) => Err(Error::Refused(refusal)),
            Err(other) => Err(other),
        }
    }

    /// The `degrade` or `throttle` rule of the call's path that gave `refusal`, if one did.
    fn acting_rule(
        &self,
        request: &AdmitRequest,
        refusal: &Refusal,
    ) -> Option<(Arc<GenericRule>, CounterKey)> {
        if refusal.limit_type != Some(LimitType::Rule) {
            return None;
        }
        let user = request.user.as_deref();
        let resolved = self
            .shared
            .resolve_with(user, &request.model, &request.attributes)
            .ok()?;
        let rule = resolved.path.ceilings.iter().find(|r| {
            r.generic
                .as_ref()
                .is_some_and(|g| matches!(g.action, Action::Degrade | Action::Throttle))
                && refusal.metric == Some(r.rule.metric)
                && refusal.amount == Some(r.rule.amount)
                && refusal.window == Some(r.rule.window)
        })?;
        let id = resolved.path.counters[rule.slot].clone();
        let bucket = id.window.bucket_start(self.shared.clock.now_ms());
        Some((rule.generic.clone()?, CounterKey { id, bucket }))
    }

    /// The event of `rule`'s action on `key`, once per window of its counter.
    async fn acted(&self, rule: &GenericRule, key: CounterKey, caller: &Caller) {
        let mark = format!("ev:{}:{}", key.render(), rule.action.as_str());
        let keep_until = key.id.window.retain_until(key.bucket);
        self.emit_action(rule, key, (mark, keep_until), caller)
            .await;
    }
}

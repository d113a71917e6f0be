//! `degrade`: a call refused by a `degrade` rule is admitted on the rule's `degrade_to` model
//! instead, when that model itself passes admission (its own rules, context and fit).

use std::sync::Arc;

use super::admission::AdmitRequest;
use super::guard::Guard;
use super::ticket::Ticket;
use crate::error::{Error, Result};
use crate::guard::domain::generic::Action;
use crate::guard::domain::refusal::Refusal;
use crate::guard::domain::rule::LimitType;

impl Guard {
    /// Admits a call: resolves the path, reads its counters, decides, fits the request (when
    /// given) into what is left, and reserves all or none. Refusals are `Error::Refused`;
    /// a request that cannot fit is refused before anything is reserved. A call refused by a
    /// `degrade` rule is admitted on its `degrade_to` model when that one passes admission
    /// (`Ticket::model`, `Ticket::degraded_from`); otherwise the first refusal stands.
    pub async fn admit(&self, request: AdmitRequest) -> Result<Ticket> {
        if !self.shared.policy().0.rule_index.degrades {
            return self.admit_one(request).await;
        }
        let retry = request.clone();
        let refusal = match self.admit_one(request).await {
            Err(Error::Refused(refusal)) => refusal,
            other => return other,
        };
        let Some(to) = self.degrade_to(&retry, &refusal) else {
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
                ticket.set_degraded_from(from);
                Ok(ticket)
            }
            Err(Error::Refused(_)) => Err(Error::Refused(refusal)),
            Err(other) => Err(other),
        }
    }

    /// The model a `degrade` rule of the call's path offers after `refusal`, if one refused.
    fn degrade_to(&self, request: &AdmitRequest, refusal: &Refusal) -> Option<Arc<str>> {
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
                .is_some_and(|g| g.action == Action::Degrade)
                && refusal.metric == Some(r.rule.metric)
                && refusal.amount == Some(r.rule.amount)
                && refusal.window == Some(r.rule.window)
        })?;
        rule.generic.as_ref()?.degrade_to.clone()
    }
}

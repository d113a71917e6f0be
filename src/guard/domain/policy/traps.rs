//! What a policy cannot say by accident, across its sections: a cost rule over a model with
//! no price (it would count $0), and what is valid but lets calls escape a limit (undeclared
//! models allowed beside per-model limits or cost caps; no model declared at all).

use serde_json::Value;

use super::generic_rules::{can_count, model_condition};
use super::models::ModelSpec;
use super::values::{key_path, Parser};
use super::Policy;
use crate::guard::domain::rule::{Metric, RuleSpec};

fn has_cost(rules: &[RuleSpec]) -> bool {
    rules.iter().any(|r| r.metric == Metric::Cost)
}

/// The first cost rule that counts the calls of `model`, in words ("the user_total for
/// alice"), or `None`.
pub(super) fn cost_rule_over(policy: &Policy, model: &ModelSpec) -> Option<String> {
    let id = &*model.id;
    for d in policy.direct.iter().filter(|d| &*d.model == id) {
        if has_cost(&d.rules) {
            return Some(format!("the direct limit for {} on {id}", d.user));
        }
    }
    for t in policy.team.iter().filter(|t| &*t.model == id) {
        if has_cost(&t.shared) || has_cost(&t.each_member) {
            return Some(format!("the team limit for {} on {id}", t.team));
        }
        let total = policy.team_total.iter().find(|l| l.subject == t.team);
        if total.is_some_and(|l| has_cost(&l.rules)) {
            return Some(format!("the team_total for {}", t.team));
        }
    }
    if let Some(p) = policy.public.iter().find(|p| &*p.model == id) {
        if has_cost(&p.shared) || has_cost(&p.each_person) {
            return Some(format!("the public use limit on {id}"));
        }
    }
    let total = policy.model_total.iter().find(|l| &*l.subject == id);
    if total.is_some_and(|l| has_cost(&l.rules)) {
        return Some(format!("the model_total for {id}"));
    }
    // A router's own call skips the counters that span models.
    if !model.router {
        if let Some(u) = policy.user_total.iter().find(|u| has_cost(&u.rules)) {
            return Some(format!("the user_total for {}", u.subject));
        }
        if has_cost(&policy.platform) {
            return Some("the platform limit".into());
        }
    }
    policy
        .rules
        .iter()
        .filter(|r| r.spec.metric == Metric::Cost)
        .find(|r| can_count(r, id))
        .map(|r| format!("the rule '{}'", r.name))
}

/// A cost rule that counts calls on models the policy does not declare: a spanning limit,
/// or a generic cost rule that names no declared model only.
fn cost_rule_over_undeclared(policy: &Policy) -> Option<String> {
    if let Some(u) = policy.user_total.iter().find(|u| has_cost(&u.rules)) {
        return Some(format!("the user_total for {}", u.subject));
    }
    if has_cost(&policy.platform) {
        return Some("the platform limit".into());
    }
    let declared = |m: &str| policy.models.iter().any(|d| &*d.id == m);
    policy
        .rules
        .iter()
        .filter(|r| r.spec.metric == Metric::Cost)
        .find(|r| model_condition(r).is_none_or(|ms| ms.iter().any(|m| !declared(m))))
        .map(|r| format!("the rule '{}'", r.name))
}

/// The first limit that names one model, in words.
fn per_model_limit(policy: &Policy) -> Option<String> {
    if let Some(d) = policy.direct.first() {
        return Some(format!("the direct limit for {} on {}", d.user, d.model));
    }
    if let Some(t) = policy.team.first() {
        return Some(format!("the team limit for {} on {}", t.team, t.model));
    }
    if let Some(p) = policy.public.first() {
        return Some(format!("the public use limit on {}", p.model));
    }
    if let Some(m) = policy.model_total.first() {
        return Some(format!("the model_total for {}", m.subject));
    }
    policy
        .rules
        .iter()
        .find(|r| model_condition(r).is_some())
        .map(|r| format!("the rule '{}'", r.name))
}

impl Parser {
    /// Reports every model a cost rule counts that has no price from anywhere, and what is
    /// valid but lets calls escape: `doc` is the document (for what was written).
    pub(super) fn traps(&mut self, doc: &serde_json::Map<String, Value>, policy: &Policy) {
        for model in &policy.models {
            if model.prices.is_priced() {
                continue;
            }
            if let Some(rule) = cost_rule_over(policy, model) {
                let path = key_path(&key_path("models", &model.id), "prices");
                self.error(
                    &path,
                    None,
                    format!(
                        "is required: {rule} counts the cost of this model's calls, and no \
                         price is known for it (neither the built-in price table nor \
                         settings.prices_file lists {id}); give prices = {{ input = ..., \
                         output = ... }} in dollars per million tokens (0 for a model that \
                         costs nothing)",
                        id = model.id
                    ),
                );
            }
        }
        let settings = doc.get("settings").and_then(Value::as_object);
        let written = settings.and_then(|s| s.get("unknown_models"));
        match written.and_then(Value::as_str) {
            Some("allow") => self.allow_traps(policy, written),
            None if policy.models.is_empty() => self.warn(
                "models",
                None,
                "declares no model, so every call is refused (model_not_found): a model the \
                 policy does not declare is refused by default; declare the models callers \
                 use, or set settings.unknown_models = \"allow\"",
            ),
            _ => {}
        }
    }

    fn allow_traps(&mut self, policy: &Policy, written: Option<&Value>) {
        let path = "settings.unknown_models";
        if let Some(limit) = per_model_limit(policy) {
            self.warn(
                path,
                written,
                format!(
                    "is \"allow\" beside per-model limits ({limit}): a model name the policy \
                     does not declare escapes them (its calls are billed to public use, limited \
                     by the ceilings only); declare every model callers use (another letter \
                     case, a snapshot or an alias of a declared model is that model) and \
                     remove the setting: undeclared models are refused by default"
                ),
            );
        }
        if let Some(rule) = cost_rule_over_undeclared(policy) {
            self.warn(
                path,
                written,
                format!(
                    "is \"allow\", and {rule} counts cost across models: an undeclared model is \
                     priced from settings.prices_file or the built-in price table, and one \
                     priced by neither is refused (the cost cap could not count it); declare \
                     the models callers use"
                ),
            );
        }
    }
}

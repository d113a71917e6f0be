//! Walks a policy document (as a JSON value) section by section, collecting every error with
//! the field's path, the value and what is accepted. Unknown keys are always refused. The
//! sections are read by `models`, `teams`, `settings` and `limits` (with `rules`), on the
//! shared readers of `values`.

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

use super::limits::Known;
use super::settings::UnknownModels;
use super::values::Parser;
use super::Policy;
use crate::error::Error;

/// The policy a document describes (with its warnings), or every error found in it, in
/// document order.
/// `base_dir` is where a relative `settings.prices_file` is read from (the policy file's
/// folder; the working directory when `None`).
pub(super) fn parse(doc: &Value, base_dir: Option<&Path>) -> Result<Policy, Error> {
    let mut p = Parser::new();
    p.no_nul("", doc);
    let policy = p.policy(doc, base_dir);
    let given = doc.pointer("/settings/uncapped_output");
    if given.is_some() && (doc.get("limits").is_some() || doc.get("rules").is_some()) {
        // Where a limit can refuse, what a call without max_tokens holds decides whether the
        // next call finds room ("model" is the trap: one call holds a whole budget).
        p.note(
            "settings.uncapped_output",
            given,
            policy.settings.uncapped_output.describe(),
        );
    }
    let notes = p.take_notes();
    let (mut policy, warnings) = p.finish(policy)?;
    policy.warnings = warnings;
    policy.notes = notes;
    Ok(policy)
}

/// The ids of a top-level table (`models`, `teams`), for references from the limits.
fn ids(top: &serde_json::Map<String, Value>, key: &str) -> HashSet<String> {
    top.get(key)
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

impl Parser {
    fn policy(&mut self, doc: &Value, base_dir: Option<&Path>) -> Policy {
        let mut policy = Policy::default();
        let Some(top) = self.table(
            "",
            doc,
            &[
                "models",
                "teams",
                "limits",
                "settings",
                "rules",
                "scopes",
                "providers",
                "gateway",
            ],
        ) else {
            return policy;
        };
        if let Some(models) = top.get("models") {
            policy.models = self.models(models);
        }
        let models = policy.models.iter().map(|m| (&m.id, &m.aliases[..]));
        self.model_names = super::names::Names::of(models);
        if let Some(teams) = top.get("teams") {
            policy.teams = self.teams(teams);
        }
        if let Some(settings) = top.get("settings") {
            policy.settings = self.settings(settings);
        }
        policy.price_file = self.prices_file(&policy.settings, base_dir);
        self.price_models(&mut policy);
        let model_ids = ids(top, "models");
        let team_ids = ids(top, "teams");
        if let Some(providers) = top.get("providers") {
            policy.providers = self.upstreams(providers);
        }
        if let Some(gateway) = top.get("gateway") {
            policy.gateway = self.gateway(gateway, &team_ids, &model_ids);
        }
        if let Some(limits) = top.get("limits") {
            self.limits(limits, &mut Known::new(&model_ids, &team_ids), &mut policy);
        }
        if let Some(scopes) = top.get("scopes") {
            policy.scopes = self.scopes(scopes);
        }
        if let Some(rules) = top.get("rules") {
            let declared_only = policy.settings.unknown_models == UnknownModels::Refuse;
            policy.rules = self.generic_rules(rules, &model_ids, declared_only);
        }
        self.traps(top, &policy);
        let anonymous_written = top
            .get("settings")
            .and_then(Value::as_object)
            .is_some_and(|s| s.contains_key("anonymous"));
        if !anonymous_written && policy.has_limits() {
            self.warn(
                "settings.anonymous",
                None,
                "is not set, so calls with no user (user=None) run with no limits; set it to \
                 \"unlimited\" to mean that, \"refuse\", or a user id to count them as",
            );
        }
        policy
    }
}

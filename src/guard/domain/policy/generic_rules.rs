//! The `[[rules]]` section: generic rules (`applies_when`, `count_by`, `amount`, `budget`,
//! `window`, `action`, `warn_at`, and the actions' settings).

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::models::Provider;
use super::values::{key_path, Parser};
use crate::guard::domain::generic::{Action, Attribute, GenericRule, THROTTLE_MAX_QUEUE};
use crate::guard::domain::rule::{Metric, RuleSpec};

const RULE_KEYS: [&str; 13] = [
    "name",
    "applies_when",
    "applies_unless",
    "count_by",
    "amount",
    "budget",
    "window",
    "action",
    "warn_at",
    "degrade_to",
    "action_duration_seconds",
    "throttle_max_wait",
    "throttle_max_queue",
];

/// How long a throttled call may wait by default.
const THROTTLE_MAX_WAIT_MS: u64 = 10_000;

impl Parser {
    /// The list of generic rules; `models` are the policy's model ids (for `degrade_to`);
    /// `declared_only`: calls on undeclared models are refused (a rule may name no other).
    pub(super) fn generic_rules(
        &mut self,
        value: &Value,
        models: &HashSet<String>,
        declared_only: bool,
    ) -> Vec<Arc<GenericRule>> {
        let mut out = Vec::new();
        let mut names = HashSet::new();
        for (i, item) in self.list("rules", value).iter().enumerate() {
            let path = format!("rules[{i}]");
            if let Some(rule) = self.generic_rule(&path, item, models, declared_only) {
                if !names.insert(rule.name.clone()) {
                    let v = Value::from(&*rule.name);
                    self.error(
                        &key_path(&path, "name"),
                        Some(&v),
                        "is the name of another rule",
                    );
                }
                out.push(Arc::new(rule));
            }
        }
        out
    }

    fn generic_rule(
        &mut self,
        path: &str,
        value: &Value,
        models: &HashSet<String>,
        declared_only: bool,
    ) -> Option<GenericRule> {
        let fields = self.table(path, value, &RULE_KEYS)?;
        let name = self
            .required(path, fields, "name")
            .and_then(|v| self.string(&key_path(path, "name"), v));
        let applies_when = match fields.get("applies_when") {
            Some(v) => self.applies_when(&key_path(path, "applies_when"), v, declared_only),
            None => Some(Vec::new()),
        };
        let unless = match fields.get("applies_unless") {
            Some(v) => self.applies_when(&key_path(path, "applies_unless"), v, declared_only),
            None => Some(Vec::new()),
        };
        let count_by = match fields.get("count_by") {
            Some(v) => self.count_by(&key_path(path, "count_by"), v),
            None => Some(Vec::new()),
        };
        let metric_path = key_path(path, "amount");
        let metric = self.required(path, fields, "amount").and_then(|v| {
            let words: Vec<&str> = Metric::ALL.iter().map(|m| m.as_str()).collect();
            self.word(&metric_path, v, &words, "amount")
                .map(|i| Metric::ALL[i])
        });
        let budget_path = key_path(path, "budget");
        let budget = self
            .required(path, fields, "budget")
            .and_then(|v| match metric {
                Some(Metric::Cost) => self.cost_amount(&budget_path, v),
                _ => self.whole(&budget_path, v, 0),
            });
        let window = self.window(&key_path(path, "window"), metric, fields.get("window"));
        let action = self.action(path, fields);
        let warn_at = self.warn_at(path, fields);
        let degrade_to = self.degrade_to(path, fields, action, models);
        let duration = self.duration(path, fields, action);
        let wait = match fields.get("throttle_max_wait") {
            Some(v) => self
                .whole(&key_path(path, "throttle_max_wait"), v, 0)
                .map(|s| s.saturating_mul(1000)),
            None => Some(THROTTLE_MAX_WAIT_MS),
        };
        let queue = match fields.get("throttle_max_queue") {
            Some(v) => self.whole(&key_path(path, "throttle_max_queue"), v, 1),
            None => Some(THROTTLE_MAX_QUEUE),
        };
        let mut rule = GenericRule::new(
            Arc::from(name?),
            applies_when?,
            count_by?,
            RuleSpec {
                metric: metric?,
                amount: budget?,
                window: window?,
            },
            action?,
            warn_at?,
            degrade_to?,
            duration?,
            wait?,
        );
        rule.throttle_max_queue = queue?;
        rule.applies_unless = unless?;
        Some(rule)
    }

    fn attribute(&mut self, path: &str, key: &str, value: Option<&Value>) -> Option<Attribute> {
        let found = key.parse::<Attribute>().ok();
        if found.is_none() {
            let words = Attribute::ALL.map(Attribute::as_str);
            let hint = crate::guard::domain::suggest::hint(key, &words);
            self.error(
                path,
                value,
                format!(
                    "is not an attribute{hint}; accepted: {}",
                    Attribute::words()
                ),
            );
        }
        found
    }

    /// Whether each of `values` of `attr` can be a call's, else an error for each that
    /// cannot (a rule written for it would silently limit nothing): a provider is one of the
    /// policy's words, and with `declared_only` (`unknown_models = "refuse"`) a model is one
    /// the policy declares, by any of its names.
    fn matchable(
        &mut self,
        path: &str,
        attr: Attribute,
        values: &[String],
        declared_only: bool,
    ) -> bool {
        let mut ok = true;
        for (i, v) in values.iter().enumerate() {
            let at = if values.len() > 1 {
                format!("{path}[{i}]")
            } else {
                path.to_string()
            };
            let value = Value::from(v.as_str());
            match attr {
                Attribute::Provider => {
                    ok &= self
                        .word(&at, &value, &Provider::WORDS, "provider")
                        .is_some();
                }
                Attribute::Model if declared_only && self.model_names.find(v).is_none() => {
                    let why = "is not a model of the policy: with settings.unknown_models = \
                               \"refuse\" no call can be on it, so the rule would never apply; \
                               declare the model, or name one the policy declares";
                    self.error(&at, Some(&value), why);
                    ok = false;
                }
                _ => {}
            }
        }
        ok
    }

    fn applies_when(
        &mut self,
        path: &str,
        value: &Value,
        declared_only: bool,
    ) -> Option<Vec<(Attribute, Vec<Arc<str>>)>> {
        let Value::Object(map) = value else {
            self.table(path, value, &[]);
            return None;
        };
        let mut out = Vec::new();
        let mut ok = true;
        for (key, v) in map {
            let attr_path = key_path(path, key);
            let Some(attr) = self.attribute(&attr_path, key, None) else {
                ok = false;
                continue;
            };
            let values: Vec<Option<String>> = match v {
                Value::Array(items) if !items.is_empty() => items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| self.string(&format!("{attr_path}[{i}]"), item))
                    .collect(),
                Value::Array(_) => {
                    self.error(&attr_path, Some(v), "must list at least one value");
                    vec![None]
                }
                _ => vec![self.string(&attr_path, v)],
            };
            match values.into_iter().collect::<Option<Vec<String>>>() {
                Some(vs) if !self.matchable(&attr_path, attr, &vs, declared_only) => ok = false,
                // A rule on a model matches every name of it, as admission resolves them.
                Some(vs) if attr == Attribute::Model => {
                    let names = &self.model_names;
                    out.push((attr, vs.iter().map(|v| names.canonical(v)).collect()));
                }
                Some(vs) => out.push((attr, vs.into_iter().map(Arc::from).collect())),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn count_by(&mut self, path: &str, value: &Value) -> Option<Vec<Attribute>> {
        let mut out = Vec::new();
        let mut ok = value.is_array();
        for (i, item) in self.list(path, value).iter().enumerate() {
            let item_path = format!("{path}[{i}]");
            let attr = match item.as_str() {
                Some(word) => self.attribute(&item_path, word, Some(item)),
                None => self.attribute(&item_path, "", Some(item)),
            };
            match attr {
                Some(a) if out.contains(&a) => {
                    self.error(&item_path, Some(item), "is listed twice");
                    ok = false;
                }
                Some(a) => out.push(a),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn action(&mut self, path: &str, fields: &Map<String, Value>) -> Option<Action> {
        let Some(v) = fields.get("action") else {
            return Some(Action::Block);
        };
        let words: Vec<&str> = Action::ALL.iter().map(|a| a.as_str()).collect();
        self.word(&key_path(path, "action"), v, &words, "action")
            .map(|i| Action::ALL[i])
    }

    fn warn_at(&mut self, path: &str, fields: &Map<String, Value>) -> Option<Vec<f64>> {
        let Some(v) = fields.get("warn_at") else {
            return Some(Vec::new());
        };
        let path = key_path(path, "warn_at");
        let mut out = Vec::new();
        for (i, item) in self.list(&path, v).iter().enumerate() {
            match item.as_f64().filter(|f| *f > 0.0 && *f <= 1.0) {
                Some(f) => out.push(f),
                None => {
                    let p = format!("{path}[{i}]");
                    self.error(
                        &p,
                        Some(item),
                        "must be a fraction of the budget above 0, at most 1",
                    );
                    return None;
                }
            }
        }
        out.sort_by(f64::total_cmp);
        out.dedup();
        v.is_array().then_some(out)
    }

    fn degrade_to(
        &mut self,
        path: &str,
        fields: &Map<String, Value>,
        action: Option<Action>,
        models: &HashSet<String>,
    ) -> Option<Option<Arc<str>>> {
        let key = key_path(path, "degrade_to");
        match (fields.get("degrade_to"), action) {
            (Some(v), Some(Action::Degrade)) => self.reference(&key, v, models, "model").map(Some),
            (None, Some(Action::Degrade)) => {
                self.error(
                    &key,
                    None,
                    "is required with action = \"degrade\": the model to try instead",
                );
                None
            }
            (Some(v), _) => {
                self.error(&key, Some(v), "is only for action = \"degrade\"; remove it");
                None
            }
            (None, _) => Some(None),
        }
    }

    fn duration(
        &mut self,
        path: &str,
        fields: &Map<String, Value>,
        action: Option<Action>,
    ) -> Option<Option<u64>> {
        let key = key_path(path, "action_duration_seconds");
        match (fields.get("action_duration_seconds"), action) {
            (None, Some(Action::HaltSession)) => {
                let why =
                    "is required with action = \"halt_session\": how long the session stays halted";
                self.error(&key, None, why);
                None
            }
            (Some(v), Some(Action::Warn)) => {
                let why =
                    "is refused with action = \"warn\": a warning is an event, not a timed state";
                self.error(&key, Some(v), why);
                None
            }
            (Some(v), _) => self.whole(&key, v, 1).map(Some),
            (None, _) => Some(None),
        }
    }
}

/// The models a generic rule is limited to (`applies_when.model`), when it names any.
pub(super) fn model_condition(rule: &GenericRule) -> Option<&[Arc<str>]> {
    rule.applies_when
        .iter()
        .find(|(a, _)| *a == Attribute::Model)
        .map(|(_, models)| models.as_slice())
}

/// Whether a generic rule can count a call on `model` (its model conditions allow it).
pub(super) fn can_count(rule: &GenericRule, model: &str) -> bool {
    let named = |list: &[(Attribute, Vec<Arc<str>>)]| {
        list.iter()
            .any(|(a, ms)| *a == Attribute::Model && ms.iter().any(|m| &**m == model))
    };
    model_condition(rule).is_none_or(|ms| ms.iter().any(|m| &**m == model))
        && !named(&rule.applies_unless)
}

impl super::Policy {
    /// This policy with `rules` (a `[[rules]]` list, validated as a document's) after its own
    /// generic rules: how the quota service adds the rules its stored policies compile to. A
    /// name one of the policy's rules has is refused.
    pub fn with_rules(&self, rules: &Value) -> Result<super::Policy, crate::error::Error> {
        let models: HashSet<String> = self.models.iter().map(|m| m.id.to_string()).collect();
        let mut p = Parser::new();
        p.model_names = self.index.names.clone();
        let declared_only = self.settings.unknown_models == super::settings::UnknownModels::Refuse;
        let extra = p.generic_rules(rules, &models, declared_only);
        for (i, rule) in extra.iter().enumerate() {
            if self.rules.iter().any(|r| r.name == rule.name) {
                let v = Value::from(&*rule.name);
                let path = key_path(&format!("rules[{i}]"), "name");
                p.error(&path, Some(&v), "is the name of a rule of the policy");
            }
        }
        let (extra, _) = p.finish(extra)?;
        let mut out = self.clone();
        out.rules.extend(extra);
        out.build_index();
        Ok(out)
    }
}

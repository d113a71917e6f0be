//! Walks a policy document (as a JSON value) field by field, collecting every error with the
//! field's path, the value and what is accepted. Unknown keys are always refused.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::{
    Counting, DirectLimit, ModelSpec, Policy, Prices, Provider, PublicLimit, Settings,
    SubjectLimit, TeamLimit, TeamSpec, UnknownModels,
};
use crate::error::{Error, FieldError};
use crate::guard::domain::rule::{Metric, RuleSpec};
use crate::guard::domain::window::Window;

/// The largest amount a rule may have: 2^53, so that every counter stays exact where a store
/// computes in doubles (Redis Lua).
pub const MAX_AMOUNT: u64 = 1 << 53;

/// Tokenizer encodings a model may declare.
pub(crate) const ENCODINGS: [&str; 5] = [
    "o200k_base",
    "cl100k_base",
    "p50k_base",
    "p50k_edit",
    "r50k_base",
];

const WINDOW_WORDS: &str = "minute, hour, N seconds, N minutes, N hours, day, week, month, year";

struct Parser {
    errors: Vec<FieldError>,
}

pub(super) fn parse(doc: &Value) -> Result<Policy, Error> {
    let mut p = Parser { errors: Vec::new() };
    let policy = p.policy(doc);
    if p.errors.is_empty() {
        Ok(policy)
    } else {
        Err(Error::Policy(p.errors))
    }
}

/// A field path: `limits.team[2].shared[0]`.
fn key_path(parent: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let key = if plain {
        key.to_string()
    } else {
        serde_json::to_string(key).unwrap_or_default()
    };
    if parent.is_empty() {
        key
    } else {
        format!("{parent}.{key}")
    }
}

fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 80 {
        let cut: String = text.chars().take(77).collect();
        format!("{cut}...")
    } else {
        text
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table",
    }
}

impl Parser {
    fn error(&mut self, path: &str, value: Option<&Value>, message: impl Into<String>) {
        self.errors.push(FieldError::new(
            path,
            value.map(shown).unwrap_or_default(),
            message,
        ));
    }

    /// A table whose keys must all be in `accepted`; reports each unknown key.
    fn table<'v>(
        &mut self,
        path: &str,
        value: &'v Value,
        accepted: &[&str],
    ) -> Option<&'v Map<String, Value>> {
        let Value::Object(map) = value else {
            self.error(
                path,
                Some(value),
                format!("must be a table, not {}", kind(value)),
            );
            return None;
        };
        for key in map.keys() {
            if !accepted.contains(&key.as_str()) {
                self.error(
                    &key_path(path, key),
                    None,
                    format!("unknown key; accepted: {}", accepted.join(", ")),
                );
            }
        }
        Some(map)
    }

    fn list<'v>(&mut self, path: &str, value: &'v Value) -> &'v [Value] {
        match value {
            Value::Array(items) => items,
            other => {
                self.error(
                    path,
                    Some(other),
                    format!("must be a list, not {}", kind(other)),
                );
                &[]
            }
        }
    }

    fn string(&mut self, path: &str, value: &Value) -> Option<String> {
        match value {
            Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
            Value::String(_) => {
                self.error(path, Some(value), "must not be empty");
                None
            }
            other => {
                self.error(
                    path,
                    Some(other),
                    format!("must be a string, not {}", kind(other)),
                );
                None
            }
        }
    }

    fn required<'v>(
        &mut self,
        path: &str,
        map: &'v Map<String, Value>,
        key: &str,
    ) -> Option<&'v Value> {
        let found = map.get(key);
        if found.is_none() {
            self.error(&key_path(path, key), None, "is required");
        }
        found
    }

    /// A whole number in `min..=MAX_AMOUNT`.
    fn whole(&mut self, path: &str, value: &Value, min: u64) -> Option<u64> {
        let n = match value {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            }),
            _ => None,
        };
        match n {
            Some(n) if n >= min && n <= MAX_AMOUNT => Some(n),
            _ => {
                self.error(
                    path,
                    Some(value),
                    format!("must be a whole number from {min} to {MAX_AMOUNT}"),
                );
                None
            }
        }
    }

    /// Dollars (a number ≥ 0) as integer micro-dollars.
    fn dollars(&mut self, path: &str, value: &Value, what: &str) -> Option<u64> {
        let micros = value
            .as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(|f| (f * 1_000_000.0).round())
            .filter(|m| *m <= MAX_AMOUNT as f64);
        if micros.is_none() {
            self.error(
                path,
                Some(value),
                format!("must be {what}: a number of dollars, 0 or more"),
            );
        }
        micros.map(|m| m as u64)
    }

    fn reference(
        &mut self,
        path: &str,
        value: &Value,
        known: &HashSet<String>,
        what: &str,
    ) -> Option<Arc<str>> {
        let id = self.string(path, value)?;
        if known.contains(&id) {
            Some(Arc::from(id))
        } else {
            let mut names: Vec<&String> = known.iter().collect();
            names.sort();
            let accepted = if names.is_empty() {
                format!("the policy defines no {what}s")
            } else {
                format!(
                    "defined {what}s: {}",
                    names
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            self.error(
                path,
                Some(value),
                format!("is not a {what} of the policy; {accepted}"),
            );
            None
        }
    }

    fn policy(&mut self, doc: &Value) -> Policy {
        let mut policy = Policy::default();
        let Some(top) = self.table("", doc, &["models", "teams", "limits", "settings"]) else {
            return policy;
        };
        if let Some(models) = top.get("models") {
            policy.models = self.models(models);
        }
        if let Some(teams) = top.get("teams") {
            policy.teams = self.teams(teams);
        }
        if let Some(settings) = top.get("settings") {
            policy.settings = self.settings(settings);
        }
        let model_ids: HashSet<String> = top
            .get("models")
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let team_ids: HashSet<String> = top
            .get("teams")
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        if let Some(limits) = top.get("limits") {
            self.limits(limits, &model_ids, &team_ids, &mut policy);
        }
        policy
    }

    fn models(&mut self, value: &Value) -> Vec<Arc<ModelSpec>> {
        let accepted = [
            "display_name",
            "provider",
            "context_window",
            "max_input_tokens",
            "max_output_tokens",
            "prices",
            "router",
            "encoding",
            "counting",
        ];
        let Value::Object(map) = value else {
            self.error(
                "models",
                Some(value),
                format!("must be a table of models, not {}", kind(value)),
            );
            return Vec::new();
        };
        let mut models = Vec::new();
        for (id, entry) in map {
            let path = key_path("models", id);
            let Some(fields) = self.table(&path, entry, &accepted) else {
                continue;
            };
            let mut model = ModelSpec {
                id: Arc::from(id.as_str()),
                display_name: id.clone(),
                provider: Provider::Other,
                context_window: None,
                max_input_tokens: None,
                max_output_tokens: None,
                prices: Prices::default(),
                router: false,
                encoding: None,
                counting: None,
            };
            if let Some(v) = fields.get("display_name") {
                model.display_name = self
                    .string(&key_path(&path, "display_name"), v)
                    .unwrap_or_default();
            }
            if let Some(v) = fields.get("provider") {
                let p = key_path(&path, "provider");
                model.provider = match v.as_str().and_then(Provider::parse) {
                    Some(provider) => provider,
                    None => {
                        self.error(
                            &p,
                            Some(v),
                            format!(
                                "is not a provider; accepted: {}",
                                Provider::WORDS.join(", ")
                            ),
                        );
                        Provider::Other
                    }
                };
            }
            for (key, slot) in [
                ("context_window", &mut model.context_window),
                ("max_input_tokens", &mut model.max_input_tokens),
                ("max_output_tokens", &mut model.max_output_tokens),
            ] {
                if let Some(v) = fields.get(key) {
                    *slot = self.whole(&key_path(&path, key), v, 1);
                }
            }
            if let Some(v) = fields.get("prices") {
                model.prices = self.prices(&key_path(&path, "prices"), v);
            }
            if let Some(v) = fields.get("router") {
                match v.as_bool() {
                    Some(b) => model.router = b,
                    None => {
                        self.error(&key_path(&path, "router"), Some(v), "must be true or false")
                    }
                }
            }
            if let Some(v) = fields.get("encoding") {
                match v.as_str().filter(|e| ENCODINGS.contains(e)) {
                    Some(e) => model.encoding = Some(e.to_string()),
                    None => self.error(
                        &key_path(&path, "encoding"),
                        Some(v),
                        format!(
                            "is not a known encoding; accepted: {}",
                            ENCODINGS.join(", ")
                        ),
                    ),
                }
            }
            if let Some(v) = fields.get("counting") {
                model.counting = match v.as_str() {
                    Some("exact") => Some(Counting::Exact),
                    Some("estimate") => Some(Counting::Estimate),
                    _ => {
                        self.error(
                            &key_path(&path, "counting"),
                            Some(v),
                            "accepted: exact, estimate",
                        );
                        None
                    }
                };
            }
            if let (Some(window), Some(output)) = (model.context_window, model.max_output_tokens) {
                if output > window {
                    self.error(
                        &key_path(&path, "max_output_tokens"),
                        fields.get("max_output_tokens"),
                        format!("must not exceed context_window ({window})"),
                    );
                }
            }
            models.push(Arc::new(model));
        }
        models
    }

    fn prices(&mut self, path: &str, value: &Value) -> Prices {
        let Some(fields) = self.table(path, value, &["input", "cached_input", "output"]) else {
            return Prices::default();
        };
        let get = |p: &mut Self, key: &str| {
            fields
                .get(key)
                .and_then(|v| p.dollars(&key_path(path, key), v, "dollars per million tokens"))
        };
        let input = get(self, "input").unwrap_or(0);
        let output = get(self, "output").unwrap_or(0);
        let cached_input = get(self, "cached_input").unwrap_or(input);
        Prices {
            input,
            cached_input,
            output,
        }
    }

    fn teams(&mut self, value: &Value) -> Vec<TeamSpec> {
        let Value::Object(map) = value else {
            self.error(
                "teams",
                Some(value),
                format!("must be a table of teams, not {}", kind(value)),
            );
            return Vec::new();
        };
        let mut teams = Vec::new();
        for (id, entry) in map {
            let path = key_path("teams", id);
            let Some(fields) = self.table(&path, entry, &["members", "display_name", "priority"])
            else {
                continue;
            };
            let mut members = Vec::new();
            if let Some(list) = self.required(&path, fields, "members") {
                let members_path = key_path(&path, "members");
                let mut seen = HashSet::new();
                for (i, m) in self.list(&members_path, list).iter().enumerate() {
                    let p = format!("{members_path}[{i}]");
                    if let Some(user) = self.string(&p, m) {
                        if seen.insert(user.clone()) {
                            members.push(Arc::from(user));
                        } else {
                            self.error(&p, Some(m), "is listed twice");
                        }
                    }
                }
            }
            let display_name = match fields.get("display_name") {
                Some(v) => self
                    .string(&key_path(&path, "display_name"), v)
                    .unwrap_or_default(),
                None => id.clone(),
            };
            let priority = fields.get("priority").and_then(|v| match v.as_i64() {
                Some(n) => Some(n),
                None => {
                    self.error(
                        &key_path(&path, "priority"),
                        Some(v),
                        "must be a whole number",
                    );
                    None
                }
            });
            teams.push(TeamSpec {
                id: Arc::from(id.as_str()),
                display_name,
                members,
                priority,
            });
        }
        teams
    }

    fn settings(&mut self, value: &Value) -> Settings {
        let mut settings = Settings::default();
        let accepted = [
            "min_output_tokens",
            "margin",
            "default_max_output_tokens",
            "unknown_models",
            "fail_open",
        ];
        let Some(fields) = self.table("settings", value, &accepted) else {
            return settings;
        };
        if let Some(v) = fields.get("min_output_tokens") {
            settings.min_output_tokens = self
                .whole("settings.min_output_tokens", v, 0)
                .unwrap_or(256);
        }
        if let Some(v) = fields.get("default_max_output_tokens") {
            settings.default_max_output_tokens = self
                .whole("settings.default_max_output_tokens", v, 1)
                .unwrap_or(8192);
        }
        if let Some(v) = fields.get("margin") {
            match v.as_f64().filter(|m| (0.0..1.0).contains(m)) {
                Some(m) => settings.margin = m,
                None => self.error(
                    "settings.margin",
                    Some(v),
                    "must be a fraction from 0 up to (not including) 1",
                ),
            }
        }
        if let Some(v) = fields.get("unknown_models") {
            settings.unknown_models = match v.as_str() {
                Some("allow") => UnknownModels::Allow,
                Some("refuse") => UnknownModels::Refuse,
                _ => {
                    self.error(
                        "settings.unknown_models",
                        Some(v),
                        "accepted: allow, refuse",
                    );
                    UnknownModels::Allow
                }
            };
        }
        if let Some(v) = fields.get("fail_open") {
            for (i, item) in self.list("settings.fail_open", v).iter().enumerate() {
                match item.as_str().and_then(Metric::parse) {
                    Some(m) => settings.fail_open.push(m),
                    None => {
                        let words: Vec<&str> = Metric::ALL.iter().map(|m| m.word()).collect();
                        self.error(
                            &format!("settings.fail_open[{i}]"),
                            Some(item),
                            format!("is not a metric; accepted: {}", words.join(", ")),
                        );
                    }
                }
            }
        }
        settings
    }

    fn limits(
        &mut self,
        value: &Value,
        models: &HashSet<String>,
        teams: &HashSet<String>,
        policy: &mut Policy,
    ) {
        let accepted = [
            "direct",
            "team",
            "public",
            "team_total",
            "model_total",
            "user_total",
            "platform",
        ];
        let Some(fields) = self.table("limits", value, &accepted) else {
            return;
        };
        let entries = |p: &mut Self, key: &str| -> Vec<(String, &Map<String, Value>)> {
            let Some(list) = fields.get(key) else {
                return Vec::new();
            };
            let path = format!("limits.{key}");
            let mut out = Vec::new();
            for (i, item) in p.list(&path, list).iter().enumerate() {
                let item_path = format!("{path}[{i}]");
                if let Value::Object(map) = item {
                    out.push((item_path, map));
                } else {
                    p.error(
                        &item_path,
                        Some(item),
                        format!("must be a table, not {}", kind(item)),
                    );
                }
            }
            out
        };

        let mut seen: HashMap<String, String> = HashMap::new();
        let mut once = |p: &mut Self, what: String, path: &str| {
            if let Some(first) = seen.get(&what) {
                p.error(path, None, format!("{what} is already defined at {first}"));
                false
            } else {
                seen.insert(what, path.to_string());
                true
            }
        };

        for (path, map) in entries(self, "direct") {
            self.check_keys(&path, map, &["user", "model", "rules"]);
            let user = self
                .required(&path, map, "user")
                .and_then(|v| self.string(&key_path(&path, "user"), v));
            let model = self
                .required(&path, map, "model")
                .and_then(|v| self.reference(&key_path(&path, "model"), v, models, "model"));
            let rules = self.rule_list(&path, map, "rules", true);
            if let (Some(user), Some(model)) = (user, model) {
                if once(self, format!("a direct limit for {user} on {model}"), &path) {
                    policy.direct.push(DirectLimit {
                        user: Arc::from(user),
                        model,
                        rules,
                    });
                }
            }
        }
        for (path, map) in entries(self, "team") {
            self.check_keys(&path, map, &["team", "model", "shared", "each_member"]);
            let team = self
                .required(&path, map, "team")
                .and_then(|v| self.reference(&key_path(&path, "team"), v, teams, "team"));
            let model = self
                .required(&path, map, "model")
                .and_then(|v| self.reference(&key_path(&path, "model"), v, models, "model"));
            let shared = self.rule_list(&path, map, "shared", false);
            let each_member = self.rule_list(&path, map, "each_member", false);
            if let (Some(team), Some(model)) = (team, model) {
                if once(self, format!("a team limit for {team} on {model}"), &path) {
                    policy.team.push(TeamLimit {
                        team,
                        model,
                        shared,
                        each_member,
                    });
                }
            }
        }
        for (path, map) in entries(self, "public") {
            self.check_keys(&path, map, &["model", "shared", "each_person"]);
            let model = self
                .required(&path, map, "model")
                .and_then(|v| self.reference(&key_path(&path, "model"), v, models, "model"));
            let shared = self.rule_list(&path, map, "shared", false);
            let each_person = self.rule_list(&path, map, "each_person", false);
            if let Some(model) = model {
                if once(self, format!("a public use limit on {model}"), &path) {
                    policy.public.push(PublicLimit {
                        model,
                        shared,
                        each_person,
                    });
                }
            }
        }
        for (key, subject_key, what) in [
            ("team_total", "team", "team"),
            ("model_total", "model", "model"),
            ("user_total", "user", "user"),
        ] {
            for (path, map) in entries(self, key) {
                self.check_keys(&path, map, &[subject_key, "rules"]);
                let subject_path = key_path(&path, subject_key);
                let subject = self
                    .required(&path, map, subject_key)
                    .and_then(|v| match what {
                        "team" => self.reference(&subject_path, v, teams, "team"),
                        "model" => self.reference(&subject_path, v, models, "model"),
                        _ => self.string(&subject_path, v).map(Arc::from),
                    });
                let rules = self.rule_list(&path, map, "rules", true);
                if let Some(subject) = subject {
                    if once(self, format!("a {key} for {subject}"), &path) {
                        let limit = SubjectLimit { subject, rules };
                        match key {
                            "team_total" => policy.team_total.push(limit),
                            "model_total" => policy.model_total.push(limit),
                            _ => policy.user_total.push(limit),
                        }
                    }
                }
            }
        }
        if let Some(platform) = fields.get("platform") {
            if let Some(map) = self.table("limits.platform", platform, &["rules"]) {
                policy.platform = self.rule_list("limits.platform", map, "rules", true);
            }
        }
    }

    fn check_keys(&mut self, path: &str, map: &Map<String, Value>, accepted: &[&str]) {
        for key in map.keys() {
            if !accepted.contains(&key.as_str()) {
                self.error(
                    &key_path(path, key),
                    None,
                    format!("unknown key; accepted: {}", accepted.join(", ")),
                );
            }
        }
    }

    fn rule_list(
        &mut self,
        path: &str,
        map: &Map<String, Value>,
        key: &str,
        required: bool,
    ) -> Vec<RuleSpec> {
        let list = if required {
            self.required(path, map, key)
        } else {
            map.get(key)
        };
        let Some(list) = list else { return Vec::new() };
        let list_path = key_path(path, key);
        let mut rules: Vec<RuleSpec> = Vec::new();
        for (i, item) in self.list(&list_path, list).iter().enumerate() {
            let rule_path = format!("{list_path}[{i}]");
            if let Some(rule) = self.rule(&rule_path, item) {
                if let Some(j) = rules
                    .iter()
                    .position(|r| r.metric == rule.metric && r.window == rule.window)
                {
                    self.error(
                        &rule_path,
                        None,
                        format!(
                            "a {} rule over {} is already at {list_path}[{j}]; one limit has one rule per metric and window",
                            rule.metric.word(),
                            rule.window.word()
                        ),
                    );
                } else {
                    rules.push(rule);
                }
            }
        }
        rules
    }

    fn rule(&mut self, path: &str, value: &Value) -> Option<RuleSpec> {
        let fields = self.table(path, value, &["metric", "amount", "window"])?;
        let metric_value = self.required(path, fields, "metric");
        let metric = metric_value.and_then(|v| {
            let m = v.as_str().and_then(Metric::parse);
            if m.is_none() {
                let words: Vec<&str> = Metric::ALL.iter().map(|m| m.word()).collect();
                self.error(
                    &key_path(path, "metric"),
                    Some(v),
                    format!("is not a metric; accepted: {}", words.join(", ")),
                );
            }
            m
        });
        let window = match (metric, fields.get("window")) {
            (Some(Metric::Concurrency), None) => Some(Window::WhileRunning),
            (Some(Metric::Concurrency), Some(v)) => {
                self.error(
                    &key_path(path, "window"),
                    Some(v),
                    "a concurrency rule has no window; remove it",
                );
                None
            }
            (_, None) => {
                self.error(
                    &key_path(path, "window"),
                    None,
                    format!("is required; accepted: {WINDOW_WORDS}"),
                );
                None
            }
            (_, Some(v)) => {
                let w = v.as_str().and_then(Window::parse);
                if w.is_none() {
                    self.error(
                        &key_path(path, "window"),
                        Some(v),
                        format!("is not a window; accepted: {WINDOW_WORDS}"),
                    );
                }
                w
            }
        };
        let amount_path = key_path(path, "amount");
        let amount = self
            .required(path, fields, "amount")
            .and_then(|v| match metric {
                Some(Metric::Cost) => self.dollars(&amount_path, v, "an amount of cost"),
                _ => self.whole(&amount_path, v, 0),
            });
        Some(RuleSpec {
            metric: metric?,
            amount: amount?,
            window: window?,
        })
    }
}

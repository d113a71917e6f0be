//! The `limits` section: direct, team and public limits (the billing sources), the team,
//! model and user totals, and the platform limit. Each limit is defined at most once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::values::{key_path, kind, Parser};
use super::{Policy, RuleSpec};

/// A Direct Limit: one person on one model.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectLimit {
    pub user: Arc<str>,
    pub model: Arc<str>,
    pub rules: Vec<RuleSpec>,
}

/// A Team Limit: a team's use of one model.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamLimit {
    pub team: Arc<str>,
    pub model: Arc<str>,
    pub shared: Vec<RuleSpec>,
    pub each_member: Vec<RuleSpec>,
}

/// A Public Use Limit: anyone's use of one model.
#[derive(Debug, Clone, PartialEq)]
pub struct PublicLimit {
    pub model: Arc<str>,
    pub shared: Vec<RuleSpec>,
    pub each_person: Vec<RuleSpec>,
}

/// A limit on one subject (team, model or user) with plain rules.
#[derive(Debug, Clone, PartialEq)]
pub struct SubjectLimit {
    pub subject: Arc<str>,
    pub rules: Vec<RuleSpec>,
}

const LIMITS_KEYS: [&str; 7] = [
    "direct",
    "team",
    "public",
    "team_total",
    "model_total",
    "user_total",
    "platform",
];

/// What the limits may refer to, and where each limit was first defined.
pub(super) struct Known<'a> {
    pub(super) models: &'a HashSet<String>,
    pub(super) teams: &'a HashSet<String>,
    defined: HashMap<String, String>,
}

impl<'a> Known<'a> {
    pub(super) fn new(models: &'a HashSet<String>, teams: &'a HashSet<String>) -> Self {
        Known {
            models,
            teams,
            defined: HashMap::new(),
        }
    }
}

impl Parser {
    /// The `limits` table, into `policy`; sections are read in a fixed order so that errors
    /// come out the same way every time.
    pub(super) fn limits(&mut self, value: &Value, known: &mut Known, policy: &mut Policy) {
        let Some(fields) = self.table("limits", value, &LIMITS_KEYS) else {
            return;
        };
        self.direct_limits(fields, known, policy);
        self.team_limits(fields, known, policy);
        self.public_limits(fields, known, policy);
        self.subject_limits(fields, known, policy);
        if let Some(platform) = fields.get("platform") {
            if let Some(map) = self.table("limits.platform", platform, &["rules"]) {
                policy.platform = self.rule_list("limits.platform", map, "rules", true);
            }
        }
    }

    /// The tables of the list `limits.<key>`, each with its path; other items are reported.
    fn entries<'v>(
        &mut self,
        fields: &'v Map<String, Value>,
        key: &str,
    ) -> Vec<(String, &'v Map<String, Value>)> {
        let Some(list) = fields.get(key) else {
            return Vec::new();
        };
        let path = format!("limits.{key}");
        let mut out = Vec::new();
        for (i, item) in self.list(&path, list).iter().enumerate() {
            let item_path = format!("{path}[{i}]");
            if let Value::Object(map) = item {
                out.push((item_path, map));
            } else {
                self.error(
                    &item_path,
                    Some(item),
                    format!("must be a table, not {}", kind(item)),
                );
            }
        }
        out
    }

    /// Whether `what` is defined here first; a second definition is reported.
    fn first_definition(&mut self, known: &mut Known, what: String, path: &str) -> bool {
        if let Some(first) = known.defined.get(&what) {
            self.error(path, None, format!("{what} is already defined at {first}"));
            false
        } else {
            known.defined.insert(what, path.to_string());
            true
        }
    }

    /// Reports a limit whose two rule lists are both missing or empty: it would bill its
    /// calls with no limit at all.
    fn some_rules(&mut self, path: &str, map: &Map<String, Value>, keys: [&str; 2]) {
        let listed = |key: &str| {
            map.get(key)
                .is_some_and(|v| v.as_array().is_none_or(|a| !a.is_empty()))
        };
        if !keys.iter().any(|k| listed(k)) {
            self.error(
                path,
                None,
                format!(
                    "lists no rules: give {} or {} at least one rule (a limit with no rules \
                     limits nothing)",
                    keys[0], keys[1]
                ),
            );
        }
    }

    /// The required `model` of a limit, a model of the policy.
    fn model_of(
        &mut self,
        path: &str,
        map: &Map<String, Value>,
        known: &Known,
    ) -> Option<Arc<str>> {
        self.required(path, map, "model")
            .and_then(|v| self.reference(&key_path(path, "model"), v, known.models, "model"))
    }

    fn direct_limits(
        &mut self,
        fields: &Map<String, Value>,
        known: &mut Known,
        policy: &mut Policy,
    ) {
        for (path, map) in self.entries(fields, "direct") {
            self.check_keys(&path, map, &["user", "model", "rules"]);
            let user = self
                .required(&path, map, "user")
                .and_then(|v| self.string(&key_path(&path, "user"), v));
            let model = self.model_of(&path, map, known);
            let rules = self.rule_list(&path, map, "rules", true);
            let (Some(user), Some(model)) = (user, model) else {
                continue;
            };
            let what = format!("a direct limit for {user} on {model}");
            if self.first_definition(known, what, &path) {
                policy.direct.push(DirectLimit {
                    user: Arc::from(user),
                    model,
                    rules,
                });
            }
        }
    }

    fn team_limits(&mut self, fields: &Map<String, Value>, known: &mut Known, policy: &mut Policy) {
        for (path, map) in self.entries(fields, "team") {
            self.check_keys(&path, map, &["team", "model", "shared", "each_member"]);
            let team = self
                .required(&path, map, "team")
                .and_then(|v| self.reference(&key_path(&path, "team"), v, known.teams, "team"));
            let model = self.model_of(&path, map, known);
            let shared = self.rule_list(&path, map, "shared", false);
            let each_member = self.rule_list(&path, map, "each_member", false);
            self.some_rules(&path, map, ["shared", "each_member"]);
            let (Some(team), Some(model)) = (team, model) else {
                continue;
            };
            let what = format!("a team limit for {team} on {model}");
            if self.first_definition(known, what, &path) {
                policy.team.push(TeamLimit {
                    team,
                    model,
                    shared,
                    each_member,
                });
            }
        }
    }

    fn public_limits(
        &mut self,
        fields: &Map<String, Value>,
        known: &mut Known,
        policy: &mut Policy,
    ) {
        for (path, map) in self.entries(fields, "public") {
            self.check_keys(&path, map, &["model", "shared", "each_person"]);
            let model = self.model_of(&path, map, known);
            let shared = self.rule_list(&path, map, "shared", false);
            let each_person = self.rule_list(&path, map, "each_person", false);
            self.some_rules(&path, map, ["shared", "each_person"]);
            let Some(model) = model else {
                continue;
            };
            if self.first_definition(known, format!("a public use limit on {model}"), &path) {
                policy.public.push(PublicLimit {
                    model,
                    shared,
                    each_person,
                });
            }
        }
    }

    /// `team_total`, `model_total` and `user_total`: one subject and its rules each.
    fn subject_limits(
        &mut self,
        fields: &Map<String, Value>,
        known: &mut Known,
        policy: &mut Policy,
    ) {
        for (key, subject_key) in [
            ("team_total", "team"),
            ("model_total", "model"),
            ("user_total", "user"),
        ] {
            for (path, map) in self.entries(fields, key) {
                self.check_keys(&path, map, &[subject_key, "rules"]);
                let subject_path = key_path(&path, subject_key);
                let subject =
                    self.required(&path, map, subject_key)
                        .and_then(|v| match subject_key {
                            "team" => self.reference(&subject_path, v, known.teams, "team"),
                            "model" => self.reference(&subject_path, v, known.models, "model"),
                            _ => self.string(&subject_path, v).map(Arc::from),
                        });
                let rules = self.rule_list(&path, map, "rules", true);
                let Some(subject) = subject else {
                    continue;
                };
                if key == "team_total" && !has_team_limit(fields, &subject) {
                    self.error(&path, None, team_total_alone(&subject, &rules));
                    continue;
                }
                if self.first_definition(known, format!("a {key} for {subject}"), &path) {
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
}

/// Whether the document has a `[[limits.team]]` for `team` (a Team Total counts only calls
/// billed to the team, and only a Team Limit bills a team).
fn has_team_limit(fields: &Map<String, Value>, team: &str) -> bool {
    let limits = fields.get("team").and_then(Value::as_array);
    limits
        .into_iter()
        .flatten()
        .any(|l| l.get("team").and_then(Value::as_str) == Some(team))
}

/// Why a Team Total with no Team Limit is refused, and the generic rule that does what it
/// seems to say: count every call of the team's members, on every model.
fn team_total_alone(team: &str, rules: &[RuleSpec]) -> String {
    let example = rules.first().map_or_else(
        || "amount = \"cost\", budget = 100, window = \"month\"".to_string(),
        |r| {
            let budget = match r.metric {
                crate::guard::domain::rule::Metric::Cost => {
                    let dollars = r.amount as f64 / 1_000_000.0;
                    format!("{dollars}")
                }
                _ => r.amount.to_string(),
            };
            let window = if matches!(r.window, crate::guard::domain::window::Window::Anchored(_)) {
                "{ kind = \"calendar\", ... }".to_string()
            } else {
                format!("\"{}\"", r.window)
            };
            format!(
                "amount = \"{}\", budget = {budget}, window = {window}",
                r.metric.as_str()
            )
        },
    );
    format!(
        "a team_total counts only the calls billed to its team, and no [[limits.team]] bills \
         {team}, so it would never apply; to cap every call of {team}'s members on every \
         model, write a generic rule instead: [[rules]] name = \"{team} total\", applies_when \
         = {{ team = \"{team}\" }}, {example} (its members are teams.{team}.members; a call may \
         also say attributes={{\"team\": \"{team}\"}}); or add a [[limits.team]] for {team} on \
         the models it uses"
    )
}

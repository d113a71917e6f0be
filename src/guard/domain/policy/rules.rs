//! The rules of a limit: `{ metric, amount, window }`, at most one per metric and window.

use serde_json::{Map, Value};

use super::values::{key_path, Parser};
use crate::guard::domain::rule::{Metric, RuleSpec};
use crate::guard::domain::window::Window;
use crate::guard::domain::window_words::{self, ACCEPTED};

impl Parser {
    /// The rule list at `map[key]`; when `required`, it must be there and list a rule (a
    /// limit with no rules would grant what it seems to deny).
    pub(super) fn rule_list(
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
        let items = self.list(&list_path, list);
        if required && items.is_empty() && list.is_array() {
            self.error(
                &list_path,
                Some(list),
                "must list at least one rule: a limit with no rules limits nothing (remove the \
                 limit to leave its calls to the next source)",
            );
        }
        let mut rules: Vec<RuleSpec> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let rule_path = format!("{list_path}[{i}]");
            let Some(rule) = self.rule(&rule_path, item) else {
                continue;
            };
            if let Some(j) = rules
                .iter()
                .position(|r| r.metric == rule.metric && r.window == rule.window)
            {
                self.error(
                    &rule_path,
                    None,
                    format!(
                        "a {} rule over {} is already at {list_path}[{j}]; one limit has one rule per metric and window",
                        rule.metric.as_str(),
                        rule.window
                    ),
                );
            } else {
                rules.push(rule);
            }
        }
        rules
    }

    fn rule(&mut self, path: &str, value: &Value) -> Option<RuleSpec> {
        let fields = self.table(path, value, &["metric", "amount", "window"])?;
        let metric = self
            .required(path, fields, "metric")
            .and_then(|v| self.metric(&key_path(path, "metric"), v));
        let window = self.window(&key_path(path, "window"), metric, fields.get("window"));
        let amount_path = key_path(path, "amount");
        let amount_value = self.required(path, fields, "amount");
        let amount = amount_value.and_then(|v| match metric {
            Some(Metric::Cost) => self.cost_amount(&amount_path, v),
            _ => self.whole(&amount_path, v, 0),
        });
        if amount == Some(0) {
            self.warn(
                &amount_path,
                amount_value,
                "is 0: every call this rule counts is refused",
            );
        }
        Some(RuleSpec {
            metric: metric?,
            amount: amount?,
            window: window?,
        })
    }

    fn metric(&mut self, path: &str, value: &Value) -> Option<Metric> {
        let words: Vec<&str> = Metric::ALL.iter().map(|m| m.as_str()).collect();
        self.word(path, value, &words, "metric")
            .map(|i| Metric::ALL[i])
    }

    /// A rule's window: required, except that a concurrency rule has none (it counts while
    /// calls run).
    pub(super) fn window(
        &mut self,
        path: &str,
        metric: Option<Metric>,
        value: Option<&Value>,
    ) -> Option<Window> {
        match (metric, value) {
            (Some(Metric::Concurrency), None) => Some(Window::WhileRunning),
            (Some(Metric::Concurrency), Some(v)) => {
                self.error(path, Some(v), "a concurrency rule has no window; remove it");
                None
            }
            (_, None) => {
                self.error(path, None, format!("is required; accepted: {ACCEPTED}"));
                None
            }
            (_, Some(v)) if v.is_object() => self.window_table(path, v),
            (_, Some(v)) => {
                let Some(text) = v.as_str() else {
                    let why = format!("is not a window; accepted: {ACCEPTED}");
                    self.error(path, Some(v), why);
                    return None;
                };
                match window_words::read(text) {
                    Ok(window) => {
                        if let Some(note) = window_words::note(text, window) {
                            self.note(path, Some(v), note);
                        }
                        Some(window)
                    }
                    Err(why) => {
                        self.error(path, Some(v), format!("{why}; accepted: {ACCEPTED}"));
                        None
                    }
                }
            }
        }
    }
}

//! Generic rules in words, as `usage-guard check` prints them: one sentence per rule, and
//! the other rules a call can match at the same time.

use super::generic::{Action, GenericRule};
use super::rule::Metric;
use super::window::Window;

impl GenericRule {
    /// The rule in one sentence: "when model is gpt-4o, count cost per credential over a
    /// calendar month from the 1st 00:00 Europe/Paris; above $25.00: block".
    pub fn sentence(&self) -> String {
        sentence(self)
    }

    /// Whether some call can match both rules (every attribute both name shares a value).
    pub fn overlaps(&self, other: &GenericRule) -> bool {
        overlap(self, other)
    }
}

fn sentence(rule: &GenericRule) -> String {
    let when = if rule.applies_when.is_empty() {
        "for every call".to_string()
    } else {
        let parts: Vec<String> = rule
            .applies_when
            .iter()
            .map(|(attr, values)| {
                let values: Vec<&str> = values.iter().map(|v| &**v).collect();
                format!("{} is {}", attr.as_str(), values.join(" or "))
            })
            .collect();
        format!("when {}", parts.join(" and "))
    };
    let spec = &rule.spec;
    let by = if rule.count_by.is_empty() {
        String::new()
    } else {
        let words: Vec<&str> = rule.count_by.iter().map(|a| a.as_str()).collect();
        format!(" per {}", words.join(" and "))
    };
    let over = match spec.window {
        Window::WhileRunning => " at once".to_string(),
        Window::Sliding { .. } => format!(" over a rolling {}", spec.window),
        Window::Calendar(_) => format!(" over a calendar {} (UTC)", spec.window),
        Window::Anchored(a) => format!(" over {}", a.phrase()),
    };
    let budget = match spec.metric {
        Metric::Cost => spec.metric.amount_phrase(spec.amount),
        _ => super::rule::thousands(spec.amount),
    };
    let action = match rule.action {
        Action::Degrade => format!(
            "degrade to {}",
            rule.degrade_to.as_deref().unwrap_or_default()
        ),
        Action::HaltSession => format!(
            "halt the session for {} s",
            rule.action_duration_seconds.unwrap_or_default()
        ),
        other => other.as_str().to_string(),
    };
    let mut out = format!(
        "{when}, count {}{by}{over}; above {budget}: {action}",
        spec.metric.as_str()
    );
    if !rule.warn_at.is_empty() {
        let pct: Vec<String> = rule
            .warn_at
            .iter()
            .map(|t| format!("{}%", (t * 100.0).round()))
            .collect();
        out.push_str(&format!(" (warn at {})", pct.join(", ")));
    }
    out
}

fn overlap(a: &GenericRule, b: &GenericRule) -> bool {
    a.applies_when.iter().all(|(attr, values)| {
        b.applies_when
            .iter()
            .find(|(other, _)| other == attr)
            .is_none_or(|(_, others)| values.iter().any(|v| others.contains(v)))
    })
}

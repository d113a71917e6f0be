//! Refusal messages: a rule named the way the person it refuses reads it. A team refusal
//! only ever names a team on the caller's own path, i.e. one of the caller's teams.

use super::path::{Path, PathRule};
use super::rule::{LimitType, Metric};
use super::window::Window;

struct Parts {
    /// "You have", "Team Research has", "GPT-5 has".
    who: String,
    /// "your" or "its".
    whose: &'static str,
    /// " on GPT-5", " across all models", "".
    place: String,
}

fn parts(path: &Path, rule: &PathRule, team_name: &str) -> Parts {
    let model = path.display_name();
    let you = |place: String| Parts {
        who: "You have".into(),
        whose: "your",
        place,
    };
    let it = |who: String, place: String| Parts {
        who,
        whose: "its",
        place,
    };
    match rule.limit_type {
        LimitType::Direct => you(format!(" on {model}")),
        LimitType::Public if rule.per_person => you(format!(" of public use on {model}")),
        LimitType::Public => it(format!("Public use of {model} has"), String::new()),
        LimitType::Team if rule.per_person => you(format!(" on {model} through team {team_name}")),
        LimitType::Team => it(format!("Team {team_name} has"), format!(" on {model}")),
        LimitType::TeamTotal => it(format!("Team {team_name} has"), " across all models".into()),
        LimitType::ModelTotal => it(format!("{model} has"), String::new()),
        LimitType::UserTotal => you(" across all models".into()),
        LimitType::Platform => you(" on the platform".into()),
        LimitType::Rule => {
            let rule = rule.generic.as_deref();
            let name = rule.map_or("", |r| &r.name);
            let by: Vec<&str> = rule
                .map(|r| r.count_by.iter().map(|a| a.as_str()).collect())
                .unwrap_or_default();
            let place = if by.is_empty() {
                String::new()
            } else {
                format!(" for this {}", by.join(" and "))
            };
            it(format!("Rule \"{name}\" has"), place)
        }
    }
}

fn measure(metric: Metric, amount: u64, window: Window) -> String {
    if metric == Metric::Concurrency {
        return metric.amount_phrase(amount);
    }
    format!("{} {}", metric.amount_phrase(amount), window.phrase())
}

/// "You have used your 100,000 tokens a day on GPT-5." (no reset sentence).
pub(crate) fn reached(path: &Path, rule: &PathRule, team_name: &str) -> String {
    let p = parts(path, rule, team_name);
    let r = &rule.rule;
    if r.metric == Metric::Concurrency {
        return format!(
            "{} {} at once{}.",
            p.who
                .replace(" have", " already have")
                .replace(" has", " already has"),
            measure(r.metric, r.amount, r.window),
            p.place
        );
    }
    format!(
        "{} used {} {}{}.",
        p.who,
        p.whose,
        measure(r.metric, r.amount, r.window),
        p.place
    )
}

/// "This call needs more than is left: you have 300 tokens left of your 100,000 tokens a
/// day on GPT-5."
pub(crate) fn does_not_fit(path: &Path, rule: &PathRule, team_name: &str, left: u64) -> String {
    let p = parts(path, rule, team_name);
    let r = &rule.rule;
    let mut who = p.who;
    if who.starts_with("You") {
        who.replace_range(0..1, "y");
    }
    format!(
        "This call needs more than is left: {} {} left of {} {}{}.",
        who,
        r.metric.amount_phrase(left),
        p.whose,
        measure(r.metric, r.amount, r.window),
        p.place
    )
}

/// "You have 19,992 tokens held by calls in progress (8 tokens used) of your 20,000 tokens a
/// day of public use on GPT-5; this call fits once they end: try again in a moment."
pub(crate) fn held(path: &Path, rule: &PathRule, team_name: &str, held: u64, used: u64) -> String {
    let p = parts(path, rule, team_name);
    let r = &rule.rule;
    format!(
        "{} {} held by calls in progress ({} used) of {} {}{}; this call fits once they \
         end: try again in a moment.",
        p.who,
        r.metric.amount_phrase(held),
        r.metric.amount_phrase(used),
        p.whose,
        measure(r.metric, r.amount, r.window),
        p.place
    )
}

//! The refusals a decision gives: a rule with nothing left, or a call that does not fit.

use super::RuleState;
use crate::guard::domain::clock::{iso8601, Millis};
use crate::guard::domain::message;
use crate::guard::domain::path::{Path, PathRule};
use crate::guard::domain::refusal::{Reason, Refusal};
use crate::guard::domain::rule::Metric;

/// The refusal for a rule with nothing left.
pub(crate) fn reached(path: &Path, rule: &PathRule, state: &RuleState, now: Millis) -> Refusal {
    let mut message = message::reached(path, rule, &rule.team_name);
    match state.resets_at {
        Some(at) => message.push_str(&format!(" It resets at {}.", iso8601(at))),
        None if rule.rule.metric == Metric::Concurrency => {
            message.push_str(" It frees up when one of them ends.")
        }
        None => {}
    }
    refusal(Reason::LimitReached, rule, state.resets_at, message, now)
}

/// The refusal for a call that needs `need` of `rule`, of which only `left` is left:
/// `resets_at` is when that much is free (`room_at`), `None` when it never will.
pub(crate) fn does_not_fit(
    path: &Path,
    rule: &PathRule,
    left: u64,
    need: u64,
    resets_at: Option<Millis>,
    now: Millis,
) -> Refusal {
    let mut message = message::does_not_fit(path, rule, &rule.team_name, left);
    let r = &rule.rule;
    match resets_at {
        _ if need > r.amount => message.push_str(&format!(
            " It never will: this call needs {}, more than the rule allows.",
            r.metric.amount_phrase(need)
        )),
        Some(at) => message.push_str(&format!(" Enough is free at {}.", iso8601(at))),
        None => {}
    }
    refusal(Reason::DoesNotFit, rule, resets_at, message, now)
}

/// How long a client waits before trying again a call refused by holds of calls in
/// progress: their end is not known, and most calls end within seconds.
pub(crate) const HELD_RETRY_SECONDS: u64 = 5;

/// Whether the holds of calls in progress, not use, leave no room in a token or cost `rule`
/// for a call that needs `need` of it: without those holds it would fit. Holds are worst
/// cases (a call usually ends far below its output maximum), so the room comes back as they
/// end. Requests and concurrency are not: a call in progress uses what it holds.
pub(crate) fn caused_by_holds(rule: &PathRule, state: &RuleState, need: u64) -> bool {
    let worst_case = matches!(
        rule.rule.metric,
        Metric::Tokens | Metric::InputTokens | Metric::OutputTokens | Metric::Cost
    );
    let by_use = state.counted.saturating_sub(state.held);
    worst_case && state.held > 0 && by_use.saturating_add(need) <= rule.rule.amount
}

/// The refusal for a rule whose room the holds of calls in progress take, not use: the room
/// comes back as they end, so it is retryable (no reset time: it is not known when).
pub(crate) fn held_by_calls(
    path: &Path,
    rule: &PathRule,
    state: &RuleState,
    _now: Millis,
) -> Refusal {
    let message = message::held(path, rule, &rule.team_name, state.held, state.used);
    Refusal {
        reason: Reason::HeldByCalls,
        limit_type: Some(rule.limit_type),
        metric: Some(rule.rule.metric),
        amount: Some(rule.rule.amount),
        window: Some(rule.rule.window),
        resets_at: None,
        retry_after_seconds: Some(HELD_RETRY_SECONDS),
        message,
    }
}

fn refusal(
    reason: Reason,
    rule: &PathRule,
    resets_at: Option<Millis>,
    message: String,
    now: Millis,
) -> Refusal {
    Refusal {
        reason,
        limit_type: Some(rule.limit_type),
        metric: Some(rule.rule.metric),
        amount: Some(rule.rule.amount),
        window: Some(rule.rule.window),
        resets_at,
        retry_after_seconds: resets_at.map(|at| ((at - now).max(0) as u64).div_ceil(1000)),
        message,
    }
}

//! Events: what a guard tells its listeners, its event streams and its ledger's audit log.
//! An event is a warning (a soft threshold reached, a `warn` rule past its budget, a refusal
//! shadow mode held back) or an action taken (a call degraded, throttled, a session halted),
//! with when it happened, for whom, and the id that makes it happen once across a fleet.

use std::sync::Arc;

use super::clock::Millis;
use super::decide::RuleWarning;
use super::generic::Action;

/// What an event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A soft threshold (`warn_at`) reached.
    SoftThreshold,
    /// A rule that only reports (`action = "warn"`) went past its budget.
    OverBudget,
    /// A rule would have refused the call (shadow mode).
    ShadowRefusal,
    /// A call was admitted on the rule's `degrade_to` model.
    Degrade,
    /// A call waited for room and was let through.
    Throttle,
    /// A session was halted.
    HaltSession,
}

impl EventKind {
    /// Every kind, in the order of the words.
    pub const ALL: [EventKind; 6] = [
        EventKind::SoftThreshold,
        EventKind::OverBudget,
        EventKind::ShadowRefusal,
        EventKind::Degrade,
        EventKind::Throttle,
        EventKind::HaltSession,
    ];

    /// The kind's word: `soft_threshold`, `over_budget`, `shadow_refusal`, `degrade`,
    /// `throttle`, `halt_session`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::SoftThreshold => "soft_threshold",
            EventKind::OverBudget => "over_budget",
            EventKind::ShadowRefusal => "shadow_refusal",
            EventKind::Degrade => "degrade",
            EventKind::Throttle => "throttle",
            EventKind::HaltSession => "halt_session",
        }
    }

    /// The kind of a warning: a shadowed refusal, a `warn` rule past its budget, or a soft
    /// threshold (what any producer's warning below its budget is).
    pub fn of_warning(w: &RuleWarning) -> EventKind {
        if w.would_refuse {
            EventKind::ShadowRefusal
        } else if w.action == Action::Warn && w.used > w.budget {
            EventKind::OverBudget
        } else {
            EventKind::SoftThreshold
        }
    }

    /// The kind of an action taken (`None` for actions that are not events: block, warn).
    pub fn of_action(action: Action) -> Option<EventKind> {
        match action {
            Action::Degrade => Some(EventKind::Degrade),
            Action::Throttle => Some(EventKind::Throttle),
            Action::HaltSession => Some(EventKind::HaltSession),
            Action::Warn | Action::Block => None,
        }
    }
}

/// One event. It reads as its warning (`event.rule`, `event.threshold`, ...) plus what
/// happened, when, and on whose call.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Unique across every guard of the store (the store mark that made it go out once).
    pub id: String,
    /// When it went out (guard clock).
    pub at_ms: Millis,
    pub kind: EventKind,
    /// The rule, its counter, what it counts and its budget.
    pub warning: RuleWarning,
    /// The call's `user` (the person it counted as), when it had one.
    pub principal: Option<Arc<str>>,
    /// The model of the call.
    pub model: Option<Arc<str>>,
}

impl std::ops::Deref for Event {
    type Target = RuleWarning;

    fn deref(&self) -> &RuleWarning {
        &self.warning
    }
}

impl Event {
    /// The event's details beyond its columns, as JSON: amount (the metric), unit, used,
    /// budget (integers in the unit: micro-dollars for cost), action, would_refuse.
    pub fn detail(&self) -> serde_json::Value {
        let w = &self.warning;
        serde_json::json!({
            "amount": w.metric.as_str(),
            "unit": w.metric.unit(),
            "used": w.used,
            "budget": w.budget,
            "action": w.action.as_str(),
            "would_refuse": w.would_refuse,
        })
    }
}

super::words::words!(EventKind);

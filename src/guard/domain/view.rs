//! The usage view (`usageLimits` and `usageRestriction`): the source billed now, its rules
//! with use and resets, the ceilings, and the rule closest to its amount; and a person's
//! view across models.

use std::sync::Arc;

use super::clock::Millis;
use super::decide::{rule_left, rule_state, SlotRead};
use super::path::{Path, PathRule, SourceKind, SourceRef};
use super::rule::{LimitType, Metric};
use super::window::Window;

/// One rule's use. Every figure is in the metric's unit ([`Metric::unit`]): tokens,
/// micro-dollars, requests, ms, calls.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleView {
    pub limit_type: LimitType,
    pub team: Option<String>,
    /// An each-member / each-person rule (the caller's own use), not a shared one.
    pub per_person: bool,
    pub metric: Metric,
    pub window: Window,
    pub amount: u64,
    /// Billed use counted in the window (with the previous bucket's share, for sliding).
    pub used: u64,
    /// Held by calls running now.
    pub reserved: u64,
    pub left: u64,
    pub resets_at: Option<Millis>,
}

/// The rule closest to its amount.
#[derive(Debug, Clone, PartialEq)]
pub struct Restriction {
    pub restricted_by: LimitType,
    pub metric: Metric,
    pub window: Window,
    pub current_value: u64,
    pub max_value: u64,
}

/// A person's use on a model.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageView {
    pub source: SourceRef,
    pub rules: Vec<RuleView>,
    pub ceilings: Vec<RuleView>,
    pub restriction: Option<Restriction>,
}

fn rule_view(rule: &PathRule, reads: &[SlotRead], now: Millis) -> RuleView {
    let state = rule_state(rule, reads, now);
    RuleView {
        limit_type: rule.limit_type,
        team: rule.team.as_deref().map(str::to_string),
        per_person: rule.per_person,
        metric: rule.rule.metric,
        window: rule.rule.window,
        amount: rule.rule.amount,
        used: state.used,
        reserved: state.held,
        left: state.left,
        resets_at: state.resets_at,
    }
}

/// Builds the view from a snapshot of the path's counters.
pub(crate) fn usage_view(path: &Path, reads: &[SlotRead], now: Millis) -> UsageView {
    // The source admission would bill now: the first with room; a team with nothing left
    // passes on, any other source with nothing left is the one that refuses; if every team
    // passed, the first team refuses.
    let billed = path
        .sources
        .iter()
        .position(|s| {
            s.source.kind != SourceKind::Team
                || s.rules.iter().all(|r| rule_left(r, reads, now) > 0)
        })
        .or(if path.sources.is_empty() {
            None
        } else {
            Some(0)
        });
    let source = billed
        .map(|i| path.sources[i].source.clone())
        .unwrap_or_else(|| path.default_source.clone());
    let rules: Vec<RuleView> = billed
        .map(|i| {
            path.sources[i]
                .rules
                .iter()
                .map(|r| rule_view(r, reads, now))
                .collect()
        })
        .unwrap_or_default();
    let ceilings: Vec<RuleView> = path
        .ceilings
        .iter()
        .map(|r| rule_view(r, reads, now))
        .collect();
    let restriction = rules
        .iter()
        .chain(&ceilings)
        .max_by(|a, b| {
            let share = |v: &RuleView| {
                let counted = v.used.saturating_add(v.reserved) as f64;
                if v.amount == 0 {
                    f64::INFINITY
                } else {
                    counted / v.amount as f64
                }
            };
            share(a).total_cmp(&share(b))
        })
        .map(|v| Restriction {
            restricted_by: v.limit_type,
            metric: v.metric,
            window: v.window,
            current_value: v.used.saturating_add(v.reserved),
            max_value: v.amount,
        });
    UsageView {
        source,
        rules,
        ceilings,
        restriction,
    }
}

/// A person's use across models: the rules that count them on every model (User's Total
/// Limit, the General Platform Limit), and the view on each model where a rule of its own
/// applies to them (a source with rules, a Model Total, a generic rule).
#[derive(Debug, Clone, PartialEq)]
pub struct PersonView {
    pub rules: Vec<RuleView>,
    /// By model id, in the policy's order.
    pub models: Vec<(Arc<str>, UsageView)>,
}

fn spans_models(r: &RuleView) -> bool {
    matches!(r.limit_type, LimitType::UserTotal | LimitType::Platform)
}

/// The person's view from their view on each model (read from one snapshot each): the
/// all-models rules once (as the first model that counts them read them), and the models
/// with a rule of their own.
pub(crate) fn person_view(views: Vec<(Arc<str>, UsageView)>) -> PersonView {
    let mut rules: Vec<RuleView> = Vec::new();
    let mut models = Vec::new();
    for (model, view) in views {
        for r in view.ceilings.iter().filter(|r| spans_models(r)) {
            let seen = rules
                .iter()
                .any(|s| (s.limit_type, s.metric, s.window) == (r.limit_type, r.metric, r.window));
            if !seen {
                rules.push(r.clone());
            }
        }
        if !view.rules.is_empty() || view.ceilings.iter().any(|r| !spans_models(r)) {
            models.push((model, view));
        }
    }
    PersonView { rules, models }
}

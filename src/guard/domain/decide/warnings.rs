//! Warnings of an admitted call: generic rules past a soft threshold (`warn_at`), and rules
//! that only report (`warn`, shadow mode) past their budget.

use std::sync::Arc;

use super::steps::Holds;
use super::{rule_state, SlotRead};
use crate::guard::domain::clock::Millis;
use crate::guard::domain::counter::CounterKey;
use crate::guard::domain::generic::Action;
use crate::guard::domain::path::{Path, PathRule};
use crate::guard::domain::rule::Metric;

/// One warning on a ticket.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleWarning {
    /// The rule's name.
    pub rule: Arc<str>,
    pub metric: Metric,
    /// What the counter counts with this call's hold (micro-dollars for cost).
    pub used: u64,
    pub budget: u64,
    /// The threshold crossed: the highest `warn_at` reached, or 1.0 past the budget.
    pub threshold: f64,
    /// The rule's action.
    pub action: Action,
    /// Whether the rule would have refused the call (shadow mode).
    pub would_refuse: bool,
    /// The counter's bucket the warning is about (an event goes out once per bucket).
    pub key: CounterKey,
}

/// The warnings of a call holding `holds` on the path, one per generic rule at most; `None`
/// when `reads` already count the call's holds (values a store answered after reserving).
pub(super) fn warnings(
    path: &Path,
    reads: &[SlotRead],
    holds: Option<&Holds>,
    now: Millis,
) -> Vec<RuleWarning> {
    let watched = path.watched.iter().map(|r| (r, true));
    let checked = path.ceilings.iter().map(|r| (r, false));
    checked
        .chain(watched)
        .filter_map(|(rule, only_reports)| warning(path, rule, only_reports, reads, holds, now))
        .collect()
}

fn warning(
    path: &Path,
    rule: &PathRule,
    only_reports: bool,
    reads: &[SlotRead],
    holds: Option<&Holds>,
    now: Millis,
) -> Option<RuleWarning> {
    let generic = rule.generic.as_ref()?;
    let budget = rule.rule.amount;
    let used = rule_state(rule, reads, now)
        .counted
        .saturating_add(holds.map_or(0, |h| h.of(rule.rule.metric)));
    let over = only_reports && used > budget;
    let threshold = if over {
        1.0
    } else {
        // The highest soft threshold reached (`used >= ceil(t × budget)`).
        *generic
            .warn_at
            .iter()
            .rev()
            .find(|t| used as f64 >= (**t * budget as f64).ceil())?
    };
    Some(RuleWarning {
        rule: generic.name.clone(),
        metric: rule.rule.metric,
        used,
        budget,
        threshold,
        action: generic.action,
        would_refuse: over && generic.action != Action::Warn,
        key: CounterKey {
            id: path.counters[rule.slot].clone(),
            bucket: rule.rule.window.bucket_start(now),
        },
    })
}

//! What a counter store that loses its counters (Redis restarted without persistence, a
//! failover to a replica that missed writes) costs each rule of a policy, in one sentence for
//! `usage-guard check` (docs/redis.md, "The epoch fence"). A rule of a fenced metric is
//! refused until recovered; with a ledger, a counter of a calendar window or of a sliding
//! window of an hour or more (a limit's or a generic rule's: each ledger row records the
//! attributes generic rules read) is fenced too and refilled from the ledger; anything else
//! starts over from 0, so up to one more full allowance can be used in its window.

use super::Policy;
use crate::guard::domain::rule::{Metric, RuleSpec};
use crate::guard::domain::window::Window;

/// Sliding windows at least this long are refilled from a ledger.
const REFILL_MIN_SLIDING_SECONDS: u32 = 3_600;

/// Whether a counter of this window and metric is refilled from a ledger (a limit's or a
/// generic rule's alike).
pub(crate) fn refilled(window: Window, metric: Metric) -> bool {
    metric != Metric::Concurrency
        && match window {
            Window::Calendar(_) | Window::Anchored(_) => true,
            Window::Sliding { seconds } => seconds >= REFILL_MIN_SLIDING_SECONDS,
            Window::WhileRunning => false,
        }
}

/// "tokens per day" for a rule.
fn kind(spec: &RuleSpec) -> String {
    format!("{} per {}", spec.metric.as_str(), spec.window)
}

/// Adds `item` to `list` once.
fn add(list: &mut Vec<String>, item: String) {
    if !list.contains(&item) {
        list.push(item);
    }
}

fn words(list: &[String]) -> String {
    list.join(", ")
}

impl Policy {
    /// Every rule spec of the policy: the limits' and the generic rules'.
    fn all_rule_specs(&self) -> Vec<&RuleSpec> {
        let mut all: Vec<&RuleSpec> = Vec::new();
        let limits = self.direct.iter().flat_map(|d| &d.rules);
        let team = self
            .team
            .iter()
            .flat_map(|t| t.shared.iter().chain(&t.each_member));
        let public = self
            .public
            .iter()
            .flat_map(|p| p.shared.iter().chain(&p.each_person));
        let subjects = self.team_total.iter().chain(&self.model_total);
        let subjects = subjects.chain(&self.user_total).flat_map(|s| &s.rules);
        let plain = limits.chain(team).chain(public).chain(subjects);
        all.extend(plain.chain(&self.platform));
        all.extend(self.rules.iter().map(|r| &r.spec));
        all
    }

    /// What losing the counter store's counters costs this policy's rules, in one sentence:
    /// which rules are refused until recovered (fenced), which a ledger refills, and which
    /// start over from 0 (without a ledger, and always).
    pub fn restart_cost(&self) -> String {
        let fenced_metrics = &self.settings.fenced_metrics;
        let (mut fenced, mut ledger, mut over) = (Vec::new(), Vec::new(), Vec::new());
        for spec in self.all_rule_specs() {
            if spec.metric == Metric::Concurrency {
                continue; // holds only: calls running, nothing counted to lose
            }
            if fenced_metrics.contains(&spec.metric) {
                add(&mut fenced, kind(spec));
            } else if refilled(spec.window, spec.metric) {
                add(&mut ledger, kind(spec));
            } else {
                add(&mut over, kind(spec));
            }
        }
        let mut parts = Vec::new();
        if !fenced.is_empty() {
            parts.push(format!(
                "{} refused (503 budget_recovering) until refilled from the ledger or the \
                 operator attests",
                words(&fenced)
            ));
        }
        if !ledger.is_empty() {
            parts.push(format!(
                "{} refilled from the guard's ledger; without a ledger they start over from 0 \
                 (up to one more full allowance; settings.fenced_metrics refuses them instead)",
                words(&ledger)
            ));
        }
        if !over.is_empty() {
            parts.push(format!(
                "{} start over from 0, ledger or not (sliding windows under an hour are not \
                 refilled; settings.fenced_metrics refuses them instead)",
                words(&over)
            ));
        }
        if parts.is_empty() {
            return "if the counter store loses its counters: nothing is lost (no counted rule)"
                .into();
        }
        format!(
            "if the counter store loses its counters (Redis restarted empty): {}",
            parts.join("; ")
        )
    }
}

//! The IETF `RateLimit-Policy` / `RateLimit` fields (draft-ietf-httpapi-ratelimit-headers-12)
//! for the tightest rule of each reported metric: one place that writes them, for the
//! gateway's answers and for `usage_guard.http.headers` alike, so the two cannot drift.
//!
//! Each field is a Structured Field List (RFC 9651) of one item per policy, named by the
//! metric (`"requests"`, `"tokens"`, `"cost"`). Every policy says its unit in `qu`, because a
//! reader takes a policy without one as counting requests (the draft's default): `tokens`,
//! and for cost the vendor unit `micro_usd` (integer micro-dollars, the unit every cost
//! figure of the guard is in).

use super::clock::Millis;
use super::rule::Metric;
use super::window::Window;

/// The metrics the rate-limit headers report, in the order they are written.
pub(crate) const REPORTED: [Metric; 3] = [Metric::Requests, Metric::Tokens, Metric::Cost];

/// One rule as the headers report it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Reported {
    pub(crate) metric: Metric,
    /// `None` when only the window's words are known and they do not say its length (an
    /// anchored window in a usage view): the policy is written without `w`.
    pub(crate) window: Option<Window>,
    pub(crate) limit: u64,
    pub(crate) remaining: u64,
    pub(crate) resets_at: Option<Millis>,
}

impl Reported {
    /// Whole seconds from `now` to the reset (rounded up; 0 when past).
    pub(crate) fn reset_seconds(&self, now: Millis) -> Option<u64> {
        self.resets_at
            .map(|at| (at.saturating_sub(now).max(0) as u64).div_ceil(1000))
    }
}

/// The tightest (least remaining) of `rules` for each metric of [`REPORTED`]; a metric no
/// rule counts is left out.
pub(crate) fn tightest(rules: impl IntoIterator<Item = Reported> + Clone) -> Vec<Reported> {
    REPORTED
        .iter()
        .filter_map(|m| {
            rules
                .clone()
                .into_iter()
                .filter(|r| r.metric == *m)
                .min_by_key(|r| r.remaining)
        })
        .collect()
}

/// The policy name and `qu` unit of a reported metric (`None` for the others).
fn policy(metric: Metric) -> Option<(&'static str, &'static str)> {
    match metric {
        Metric::Requests => Some(("requests", "requests")),
        Metric::Tokens => Some(("tokens", "tokens")),
        Metric::Cost => Some(("cost", "micro_usd")),
        _ => None,
    }
}

/// The window's length in seconds for `w`: a sliding window's own, a calendar window's
/// current bucket (a month is as long as this month), 0 for while-running.
fn window_seconds(window: Window, now: Millis) -> u64 {
    match window {
        Window::Sliding { seconds } => u64::from(seconds),
        Window::Calendar(_) | Window::Anchored(_) => {
            let start = window.bucket_start(now);
            ((window.bucket_end(start) - start) / 1000).max(0) as u64
        }
        Window::WhileRunning => 0,
    }
}

/// `[("ratelimit-policy", …), ("ratelimit", …)]` for `rules` at `now`, e.g.
/// `"tokens";q=100000;qu="tokens";w=86400` and `"tokens";r=99000;t=3600`; nothing when no
/// rule is of a reported metric.
pub(crate) fn fields(rules: &[Reported], now: Millis) -> Vec<(String, String)> {
    let mut policies = Vec::new();
    let mut limits = Vec::new();
    for r in rules {
        let Some((name, unit)) = policy(r.metric) else {
            continue;
        };
        let mut policy = format!("\"{name}\";q={};qu=\"{unit}\"", r.limit);
        if let Some(window) = r.window {
            policy.push_str(&format!(";w={}", window_seconds(window, now)));
        }
        policies.push(policy);
        let mut item = format!("\"{name}\";r={}", r.remaining);
        if let Some(t) = r.reset_seconds(now) {
            item.push_str(&format!(";t={t}"));
        }
        limits.push(item);
    }
    if policies.is_empty() {
        return Vec::new();
    }
    vec![
        ("ratelimit-policy".to_string(), policies.join(", ")),
        ("ratelimit".to_string(), limits.join(", ")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::domain::window::CalendarUnit;

    fn rule(metric: Metric, window: Window, limit: u64, remaining: u64) -> Reported {
        Reported {
            metric,
            window: Some(window),
            limit,
            remaining,
            resets_at: Some(10_500),
        }
    }

    #[test]
    fn every_policy_names_its_unit() {
        let rules = [
            rule(Metric::Requests, Window::Sliding { seconds: 60 }, 10, 9),
            rule(
                Metric::Tokens,
                Window::Sliding { seconds: 3600 },
                100_000,
                99_000,
            ),
            rule(
                Metric::Cost,
                Window::Calendar(CalendarUnit::Day),
                5_000_000,
                4_000_000,
            ),
        ];
        let out = fields(&rules, 0);
        assert_eq!(
            out[0].1,
            "\"requests\";q=10;qu=\"requests\";w=60, \"tokens\";q=100000;qu=\"tokens\";w=3600, \
             \"cost\";q=5000000;qu=\"micro_usd\";w=86400"
        );
        assert_eq!(
            out[1].1,
            "\"requests\";r=9;t=11, \"tokens\";r=99000;t=11, \"cost\";r=4000000;t=11"
        );
    }

    #[test]
    fn the_tightest_of_each_metric_and_no_other_metric() {
        let rules = [
            rule(Metric::Tokens, Window::Sliding { seconds: 60 }, 100, 50),
            rule(Metric::Tokens, Window::Sliding { seconds: 3600 }, 1000, 20),
            rule(Metric::InputTokens, Window::Sliding { seconds: 60 }, 10, 1),
        ];
        let picked = tightest(rules);
        assert_eq!(picked.len(), 1);
        assert_eq!(picked[0].remaining, 20);
        assert!(fields(&[rules[2]], 0).is_empty());
    }
}

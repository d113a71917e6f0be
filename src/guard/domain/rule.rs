//! The one internal shape of a limit: a rule (metric, amount, window) of a limit kind, and
//! the counter it counts into (scope + subject ids + metric + window).

use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::window::Window;

/// What a rule counts.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Metric {
    /// Input plus output tokens.
    Tokens,
    InputTokens,
    OutputTokens,
    /// Integer micro-dollars.
    Cost,
    Requests,
    /// Checked before the call, counted at the end, never reserved.
    ComputeMs,
    /// Calls running at once; held while the call runs, never counted as use.
    Concurrency,
}

impl Metric {
    /// Every metric, in the order policy documents list them.
    pub const ALL: [Metric; 7] = [
        Metric::Tokens,
        Metric::InputTokens,
        Metric::OutputTokens,
        Metric::Cost,
        Metric::Requests,
        Metric::ComputeMs,
        Metric::Concurrency,
    ];

    /// The policy word for the metric; `Display` and `FromStr` use it.
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::Tokens => "tokens",
            Metric::InputTokens => "input_tokens",
            Metric::OutputTokens => "output_tokens",
            Metric::Cost => "cost",
            Metric::Requests => "requests",
            Metric::ComputeMs => "compute_ms",
            Metric::Concurrency => "concurrency",
        }
    }

    /// The unit every figure of this metric is given in at the boundary (docs/policy.md,
    /// "Units"): `tokens`, `micro_usd` (integer millionths of a dollar), `requests`, `ms`,
    /// `calls` (concurrency).
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Tokens | Metric::InputTokens | Metric::OutputTokens => "tokens",
            Metric::Cost => "micro_usd",
            Metric::Requests => "requests",
            Metric::ComputeMs => "ms",
            Metric::Concurrency => "calls",
        }
    }

    /// The key a figure of this metric has where the key alone must name its unit (a
    /// ticket's `reserved`): the policy word, `cost_micros` for cost.
    pub fn figure_key(self) -> &'static str {
        match self {
            Metric::Cost => "cost_micros",
            other => other.as_str(),
        }
    }

    /// Whether admission holds an estimate of this metric on its counters.
    pub fn is_token_like(self) -> bool {
        matches!(
            self,
            Metric::Tokens | Metric::InputTokens | Metric::OutputTokens
        )
    }

    /// An amount of this metric in words: "100,000 tokens", "$50.00", "60 requests".
    pub fn amount_phrase(self, amount: u64) -> String {
        match self {
            Metric::Tokens => plural(amount, "token", "tokens"),
            Metric::InputTokens => plural(amount, "input token", "input tokens"),
            Metric::OutputTokens => plural(amount, "output token", "output tokens"),
            Metric::Cost => dollars(amount),
            Metric::Requests => plural(amount, "request", "requests"),
            Metric::ComputeMs => format!("{} ms of compute time", thousands(amount)),
            Metric::Concurrency => plural(amount, "call running", "calls running"),
        }
    }
}

/// Which limit of the policy a rule belongs to (the `limit_type` of a refusal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum LimitType {
    Direct,
    Team,
    Public,
    TeamTotal,
    ModelTotal,
    UserTotal,
    Platform,
    /// A generic rule (`[[rules]]`).
    Rule,
}

impl LimitType {
    /// The name users see (`limit_type` on refusals and views).
    pub fn name(self) -> &'static str {
        match self {
            LimitType::Direct => "direct",
            LimitType::Team => "team",
            LimitType::Public => "public",
            LimitType::TeamTotal => "team_total",
            LimitType::ModelTotal => "model_total",
            LimitType::UserTotal => "user_total",
            LimitType::Platform => "platform",
            LimitType::Rule => "rule",
        }
    }
}

/// Whose use a counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// All of a person's use of one model, whichever source is billed.
    PersonModel,
    /// Calls billed to a team on one model.
    TeamShared,
    /// Calls billed to a team on one model, by one member.
    TeamMember,
    /// Calls billed to a model's public use.
    PublicShared,
    /// Calls billed to a team on any model.
    TeamTotal,
    /// Every call a model answers.
    ModelTotal,
    /// A person's use of every model.
    PersonAllModels,
    /// A generic rule's counter: its subject names the rule's identity and `count_by` values.
    Rule,
}

impl Scope {
    /// A short stable token used in counter keys.
    pub fn key_token(self) -> &'static str {
        match self {
            Scope::PersonModel => "pm",
            Scope::TeamShared => "ts",
            Scope::TeamMember => "tm",
            Scope::PublicShared => "ps",
            Scope::TeamTotal => "tt",
            Scope::ModelTotal => "mt",
            Scope::PersonAllModels => "pa",
            Scope::Rule => "ru",
        }
    }

    /// Whether the scope spans models (a router model's own call skips these).
    pub fn spans_models(self) -> bool {
        matches!(self, Scope::TeamTotal | Scope::PersonAllModels)
    }
}

/// One counter's identity, without its time bucket. Rules with the same scope, subject,
/// metric and window share a counter. The hash is computed once, at construction, so stores
/// keyed by counters hash a `u64` rather than the ids.
#[derive(Debug, Clone)]
pub struct CounterId {
    pub scope: Scope,
    pub user: Option<Arc<str>>,
    pub team: Option<Arc<str>>,
    pub model: Option<Arc<str>>,
    pub metric: Metric,
    pub window: Window,
    /// A generic rule's identity and `count_by` values, escaped (`None` for the kinds).
    pub subject: Option<Arc<str>>,
    hash: u64,
}

impl PartialEq for CounterId {
    fn eq(&self, other: &Self) -> bool {
        // Stores look counters up by `&CounterId` from the path's own `Arc`s: mostly the
        // very same id.
        std::ptr::eq(self, other)
            || self.hash == other.hash
                && self.scope == other.scope
                && self.metric == other.metric
                && self.window == other.window
                && self.user == other.user
                && self.team == other.team
                && self.model == other.model
                && self.subject == other.subject
    }
}

impl Eq for CounterId {}

impl Hash for CounterId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl CounterId {
    /// A counter id; absent ids are `None`.
    pub fn new(
        scope: Scope,
        user: Option<Arc<str>>,
        team: Option<Arc<str>>,
        model: Option<Arc<str>>,
        metric: Metric,
        window: Window,
    ) -> Self {
        // SipHash with fixed keys: the same id hashes the same in every process.
        #[allow(deprecated)]
        let mut h = std::hash::SipHasher::new();
        (scope, &user, &team, &model, metric, window).hash(&mut h);
        CounterId {
            scope,
            user,
            team,
            model,
            metric,
            window,
            subject: None,
            hash: h.finish(),
        }
    }

    /// The counter of a generic rule: `subject` is its identity and `count_by` values, as
    /// `GenericRule::subject` escapes them.
    pub fn rule(subject: Arc<str>, metric: Metric, window: Window) -> Self {
        #[allow(deprecated)]
        let mut h = std::hash::SipHasher::new();
        (Scope::Rule, &subject, metric, window).hash(&mut h);
        CounterId {
            scope: Scope::Rule,
            user: None,
            team: None,
            model: None,
            metric,
            window,
            subject: Some(subject),
            hash: h.finish(),
        }
    }

    /// The id's precomputed hash.
    pub fn hash_value(&self) -> u64 {
        self.hash
    }

    /// A stable, collision-free text form: `scope:user:team:model:metric:window`, each id
    /// escaped so that no id can contain a separator, a brace or a byte outside
    /// `[A-Za-z0-9_.-]`. An absent id is written as `-` (an id `-` is escaped to `%2D`).
    /// A generic rule's counter is `ru:<subject>:metric:window` (its subject holds only
    /// escaped ids and `=,+/`).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(64);
        self.render_into(&mut out);
        out
    }

    /// Appends [`CounterId::render`] to `out`.
    pub fn render_into(&self, out: &mut String) {
        out.push_str(self.scope.key_token());
        if let Some(subject) = &self.subject {
            out.push(':');
            out.push_str(subject);
        } else {
            for id in [&self.user, &self.team, &self.model] {
                out.push(':');
                match id {
                    Some(id) => escape_id(id, out),
                    None => out.push('-'),
                }
            }
        }
        out.push(':');
        out.push_str(self.metric.as_str());
        out.push(':');
        self.window.write_key_token(out);
    }
}

/// Escapes an id for a key: `[A-Za-z0-9_.]` and `-` inside a longer id stay; every other
/// byte becomes `%XX`. The id `-` alone is escaped so that it differs from "no id".
pub(crate) fn escape_id(id: &str, out: &mut String) {
    if id == "-" || id.is_empty() {
        // "" and "-" must not read as "no id"; "%" never appears unescaped otherwise.
        out.push_str(if id.is_empty() { "%" } else { "%2D" });
        return;
    }
    let kept = |byte: u8| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-');
    if id.bytes().all(kept) {
        // most ids: copied whole rather than a byte at a time
        out.push_str(id);
        return;
    }
    for byte in id.bytes() {
        if kept(byte) {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
}

/// A rule of the policy, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSpec {
    pub metric: Metric,
    /// Tokens, requests, milliseconds, calls, or micro-dollars for cost.
    pub amount: u64,
    pub window: Window,
}

/// `1234567` → `"1,234,567"`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Micro-dollars in words: `50_000_000` → `"$50.00"`, `1_234_567` → `"$1.234567"`.
pub(crate) fn dollars(micros: u64) -> String {
    let whole = micros / 1_000_000;
    let frac = micros % 1_000_000;
    let mut frac_text = format!("{frac:06}");
    while frac_text.len() > 2 && frac_text.ends_with('0') {
        frac_text.pop();
    }
    format!("${}.{}", thousands(whole), frac_text)
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

super::words::words!(Metric);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_read_naturally() {
        assert_eq!(Metric::Tokens.amount_phrase(100_000), "100,000 tokens");
        assert_eq!(Metric::Cost.amount_phrase(50_000_000), "$50.00");
        assert_eq!(Metric::Cost.amount_phrase(1_234_567), "$1.234567");
        assert_eq!(Metric::Cost.amount_phrase(500), "$0.0005");
        assert_eq!(Metric::Requests.amount_phrase(1), "1 request");
    }

    #[test]
    fn escaping_keeps_ids_apart() {
        let mut a = String::new();
        escape_id("a:b", &mut a);
        let mut b = String::new();
        escape_id("a%3Ab", &mut b);
        assert_ne!(a, b);
        assert_eq!(a, "a%3Ab");
        assert_eq!(b, "a%253Ab");
        let mut c = String::new();
        escape_id("{x}", &mut c);
        assert!(!c.contains('{') && !c.contains('}'));
    }
}

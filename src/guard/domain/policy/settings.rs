//! The `settings` section: what shapes admission and the usage ceiling.

use std::sync::Arc;

use serde_json::Value;

use super::values::Parser;
use crate::guard::domain::rule::Metric;

/// What to do with a call on a model the policy does not list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownModels {
    /// Admit it under the per-person ceilings (user total, platform) only.
    Allow,
    /// Refuse it (the default): another name of a declared model resolves to it, so only a
    /// model the policy never names is refused.
    Refuse,
}

/// What a failed store check does (`settings.store_checks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreChecks {
    /// Log a warning; admission goes on.
    Report,
    /// Refuse fenced rules (`budget_recovering`) until a check passes.
    Enforce,
}

/// What a cost rule does while the counter store does not answer
/// (`settings.spend_failure_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendFailureMode {
    /// Refuse the call as unavailable (503); the default.
    Deny,
    /// Answer the cost rules the ledger can answer from bounded reads of what it recorded
    /// (reserving nothing); skip the others.
    Allow,
}

/// What a call with no user (`user=None`) may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anonymous {
    /// It runs with no limits (a call the platform makes itself); the default.
    Unlimited,
    /// It is refused: every call must name its user.
    Refuse,
    /// It is counted and limited as this user's call.
    As(Arc<str>),
}

/// What a call without an output maximum reserves (`settings.uncapped_output`); its output
/// is clamped to what it reserved either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UncappedOutput {
    /// `"model"`: the model's maximum (else `default_max_output_tokens`), up to all that is
    /// left.
    Model,
    /// A number of tokens (never above the model's maximum).
    Tokens(u64),
    /// `"50%"`: this percentage (1 to 100) of what is left after the prompt (never above the
    /// model's maximum, never below `min_output_tokens`).
    Share(u8),
}

impl UncappedOutput {
    /// The default: half of what is left. One call without an output maximum never holds a
    /// whole budget, so a second call still finds room (docs/policy.md says why).
    pub const DEFAULT: UncappedOutput = UncappedOutput::Share(50);

    /// What a call without an output maximum may hold of `room` (the output room left per
    /// answer); `Model` and `Tokens` take all of it (their bound is the demand's).
    pub fn of_room(self, room: u64) -> u64 {
        match self {
            UncappedOutput::Share(pct) => ((room as u128 * pct as u128) / 100) as u64,
            UncappedOutput::Model | UncappedOutput::Tokens(_) => room,
        }
    }

    /// The setting's meaning in words, for `usage-guard check`.
    pub fn describe(self) -> String {
        match self {
            UncappedOutput::Model => "a call without max_tokens reserves the model's whole \
                output maximum, up to all that is left: one such call can hold a whole budget \
                until it ends"
                .to_string(),
            UncappedOutput::Tokens(n) => format!(
                "a call without max_tokens reserves {n} output tokens (at most the model's \
                 maximum) and is cut there"
            ),
            UncappedOutput::Share(pct) => format!(
                "a call without max_tokens reserves {pct}% of what is left after its prompt \
                 (at most the model's maximum) and is cut there"
            ),
        }
    }
}

/// Settings that shape admission and the usage ceiling.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Refuse a call when less than this is left for its output.
    pub min_output_tokens: u64,
    /// Kept free when a prompt count is an estimate (a fraction, 0.05 = 5%).
    pub margin: f64,
    /// The output assumed when neither the caller nor the model gives a maximum.
    pub default_max_output_tokens: u64,
    /// What a call without an output maximum reserves.
    pub uncapped_output: UncappedOutput,
    pub unknown_models: UnknownModels,
    /// Metrics whose rules let calls through uncounted when the counter store is down
    /// (every other rule refuses them as unavailable).
    pub fail_open: Vec<Metric>,
    /// What cost rules do while the counter store does not answer.
    pub spend_failure_mode: SpendFailureMode,
    /// Under `SpendFailureMode::Allow`, how many admissions of one guard may read the ledger
    /// at once; one more is refused as unavailable.
    pub ledger_fallback_max_concurrent: u64,
    // -- the epoch fence (docs/redis.md) --
    /// Metrics whose rules the epoch fence guards: refused with `budget_recovering` when the
    /// store lost (or may have lost) their counters. Always holds `cost`.
    pub fenced_metrics: Vec<Metric>,
    /// What a failed store check does.
    pub store_checks: StoreChecks,
    /// What a call with no user may do (`settings.anonymous`).
    pub anonymous: Anonymous,
    /// `settings.mode = "shadow"`: generic rules count and report what they would have
    /// refused (`ticket.warnings`), and never refuse.
    pub shadow: bool,
    /// `settings.enabled = false`: the quota service installs no stored quota (the file's
    /// own limits and rules still apply).
    pub quotas_enabled: bool,
    /// `settings.prices_file`: a price table read with the policy (`price_book`), for the
    /// models whose `prices` the policy does not give.
    pub prices_file: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            min_output_tokens: 256,
            margin: 0.05,
            default_max_output_tokens: 8192,
            uncapped_output: UncappedOutput::DEFAULT,
            unknown_models: UnknownModels::Refuse,
            fail_open: Vec::new(),
            spend_failure_mode: SpendFailureMode::Deny,
            ledger_fallback_max_concurrent: 4,
            fenced_metrics: vec![Metric::Cost],
            store_checks: StoreChecks::Report,
            anonymous: Anonymous::Unlimited,
            shadow: false,
            quotas_enabled: true,
            prices_file: None,
        }
    }
}

const SETTINGS_KEYS: &[&str] = &[
    "min_output_tokens",
    "margin",
    "default_max_output_tokens",
    "uncapped_output",
    "unknown_models",
    "fail_open",
    "spend_failure_mode",
    "ledger_fallback_max_concurrent",
    // the epoch fence
    "fenced_metrics",
    "store_checks",
    "anonymous",
    "mode",
    "enabled",
    "prices_file",
];

impl Parser {
    /// The `settings` table; a field in error keeps its default.
    pub(super) fn settings(&mut self, value: &Value) -> Settings {
        let mut settings = Settings::default();
        let Some(fields) = self.table("settings", value, SETTINGS_KEYS) else {
            return settings;
        };
        if let Some(v) = fields.get("min_output_tokens") {
            settings.min_output_tokens = self
                .whole("settings.min_output_tokens", v, 0)
                .unwrap_or(256);
        }
        if let Some(v) = fields.get("default_max_output_tokens") {
            settings.default_max_output_tokens = self
                .whole("settings.default_max_output_tokens", v, 1)
                .unwrap_or(8192);
        }
        if let Some(v) = fields.get("uncapped_output") {
            settings.uncapped_output = self.uncapped_output(v);
        }
        if let Some(v) = fields.get("margin") {
            match v.as_f64().filter(|m| (0.0..1.0).contains(m)) {
                Some(m) => settings.margin = m,
                None => self.error(
                    "settings.margin",
                    Some(v),
                    "must be a fraction from 0 up to (not including) 1",
                ),
            }
        }
        if let Some(v) = fields.get("unknown_models") {
            settings.unknown_models = self.unknown_models(v);
        }
        if let Some(v) = fields.get("fail_open") {
            settings.fail_open = self.metrics("settings.fail_open", v);
        }
        if let Some(v) = fields.get("spend_failure_mode") {
            let path = "settings.spend_failure_mode";
            if let Some(i) = self.word(path, v, &["deny", "allow"], "choice") {
                settings.spend_failure_mode = [SpendFailureMode::Deny, SpendFailureMode::Allow][i];
            }
        }
        if let Some(v) = fields.get("ledger_fallback_max_concurrent") {
            let path = "settings.ledger_fallback_max_concurrent";
            match v.as_u64().filter(|n| (1..=1024).contains(n)) {
                Some(n) => settings.ledger_fallback_max_concurrent = n,
                None => self.error(path, Some(v), "must be a whole number from 1 to 1024"),
            }
        }
        // -- the epoch fence --
        if let Some(v) = fields.get("fenced_metrics") {
            settings.fenced_metrics = self.metrics("settings.fenced_metrics", v);
            if !settings.fenced_metrics.contains(&Metric::Cost) {
                settings.fenced_metrics.push(Metric::Cost);
            }
        }
        if let Some(v) = fields.get("store_checks") {
            settings.store_checks = self.store_checks(v);
        }
        if let Some(v) = fields.get("anonymous") {
            settings.anonymous = self.anonymous(v);
        }
        if let Some(v) = fields.get("mode") {
            if let Some(i) = self.word("settings.mode", v, &["enforce", "shadow"], "mode") {
                settings.shadow = i == 1;
            }
        }
        if let Some(v) = fields.get("prices_file") {
            settings.prices_file = self.string("settings.prices_file", v);
        }
        if let Some(v) = fields.get("enabled") {
            match v.as_bool() {
                Some(on) => settings.quotas_enabled = on,
                None => self.error("settings.enabled", Some(v), "accepted: true, false"),
            }
        }
        settings
    }

    fn uncapped_output(&mut self, value: &Value) -> UncappedOutput {
        let accepted = "accepted: \"model\" (the model's maximum), a number of tokens from 1, \
                        or a share of what is left from \"1%\" to \"100%\"";
        if let Some(n) = value.as_u64().filter(|&n| n >= 1) {
            return UncappedOutput::Tokens(n);
        }
        if let Some(word) = value.as_str() {
            if word == "model" {
                return UncappedOutput::Model;
            }
            let pct = word
                .strip_suffix('%')
                .and_then(|p| p.trim().parse::<u8>().ok());
            if let Some(pct) = pct.filter(|p| (1..=100).contains(p)) {
                return UncappedOutput::Share(pct);
            }
        }
        self.error("settings.uncapped_output", Some(value), accepted);
        UncappedOutput::DEFAULT
    }

    fn unknown_models(&mut self, value: &Value) -> UnknownModels {
        let path = "settings.unknown_models";
        match self.word(path, value, &["allow", "refuse"], "choice") {
            Some(0) => UnknownModels::Allow,
            _ => UnknownModels::Refuse,
        }
    }

    fn store_checks(&mut self, value: &Value) -> StoreChecks {
        let path = "settings.store_checks";
        match self.word(path, value, &["report", "enforce"], "choice") {
            Some(1) => StoreChecks::Enforce,
            _ => StoreChecks::Report,
        }
    }

    /// A list of metric names at `field`.
    fn metrics(&mut self, field: &str, value: &Value) -> Vec<Metric> {
        let mut metrics = Vec::new();
        let words: Vec<&str> = Metric::ALL.iter().map(|m| m.as_str()).collect();
        for (i, item) in self.list(field, value).iter().enumerate() {
            if let Some(m) = self.word(&format!("{field}[{i}]"), item, &words, "metric") {
                metrics.push(Metric::ALL[m]);
            }
        }
        metrics
    }

    fn anonymous(&mut self, value: &Value) -> Anonymous {
        match value.as_str() {
            Some("unlimited") => Anonymous::Unlimited,
            Some("refuse") => Anonymous::Refuse,
            Some(user) if !user.trim().is_empty() => {
                // A misspelt word would silently count calls with no user as a user so
                // named: said, since ids are any text and cannot be refused.
                let words = ["unlimited", "refuse"];
                if let Some(word) = crate::guard::domain::suggest::nearest(user, &words) {
                    self.warn(
                        "settings.anonymous",
                        Some(value),
                        format!(
                            "counts calls with no user as the user {user:?}; did you mean \
                             \"{word}\"? (a user id is taken as written)"
                        ),
                    );
                }
                Anonymous::As(Arc::from(user))
            }
            _ => {
                self.error(
                    "settings.anonymous",
                    Some(value),
                    "accepted: \"unlimited\" (calls with no user have no limits), \"refuse\", \
                     or the id of the user to count them as",
                );
                Anonymous::Unlimited
            }
        }
    }
}

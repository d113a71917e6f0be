//! Refusals: why a call was refused, in words and in each provider's HTTP error shape.

use super::clock::{iso8601, Millis};
use super::rule::{LimitType, Metric};
use super::window::Window;

/// Why a call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Reason {
    /// A rule the call must fit in has nothing left.
    LimitReached,
    /// Something is left, but not enough for this call.
    DoesNotFit,
    /// The room is taken by the holds of calls in progress, not by use: without them the
    /// call would fit. Retryable: the room comes back as they end (usually far below what
    /// they hold).
    HeldByCalls,
    /// The counters could not be read or written.
    Unavailable,
    /// The prompt (or a required output) does not fit in the model's context window or
    /// input limit; refused before the provider sees it (HTTP 400).
    ContextWindowExceeded,
    /// The model is not one of the policy's and the policy refuses unknown models (HTTP 404).
    ModelNotFound,
    /// The counter store lost (or may have lost) the state of a fenced rule: a restart,
    /// failover or reload, a missing counter, or a failed enforced store check. Refused until
    /// recovery (HTTP 503 `budget_recovering`); an unavailable refusal.
    Recovering,
}

impl Reason {
    /// The reason code users see.
    pub fn code(self) -> &'static str {
        match self {
            Reason::LimitReached => "USAGE_LIMIT_REACHED",
            Reason::DoesNotFit => "USAGE_LIMIT_DOES_NOT_FIT",
            Reason::HeldByCalls => "USAGE_LIMIT_HELD",
            Reason::Unavailable => "USAGE_LIMITS_UNAVAILABLE",
            Reason::ContextWindowExceeded => "CONTEXT_WINDOW_EXCEEDED",
            Reason::ModelNotFound => "MODEL_NOT_FOUND",
            Reason::Recovering => "USAGE_LIMITS_RECOVERING",
        }
    }
}

/// The message of every refusal for unavailable counters.
pub(crate) const UNAVAILABLE_MESSAGE: &str = "Usage limits cannot be checked right now";

/// The message of every refusal while counters are being recovered.
pub(crate) const RECOVERING_MESSAGE: &str =
    "Usage limits are being recovered after the counter store lost its state; try again shortly";

/// A refused call: the rule that refused it and when it resets.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Refusal {
    pub reason: Reason,
    /// The kind of limit that refused (`None` when unavailable).
    pub limit_type: Option<LimitType>,
    pub metric: Option<Metric>,
    pub amount: Option<u64>,
    pub window: Option<Window>,
    /// When the refusing rule next has room (`None` if unknown or never).
    pub resets_at: Option<Millis>,
    /// Whole seconds from the refusal until `resets_at` (rounded up); for a refusal held by
    /// calls in progress, how long to wait before trying again.
    pub retry_after_seconds: Option<u64>,
    pub message: String,
}

impl Refusal {
    /// A refusal of a model the policy does not list (when it refuses unknown models).
    pub fn model_not_found(model: &str) -> Self {
        Refusal {
            reason: Reason::ModelNotFound,
            limit_type: None,
            metric: None,
            amount: None,
            window: None,
            resets_at: None,
            retry_after_seconds: None,
            message: format!("The model {model:?} does not exist or is not available here."),
        }
    }

    /// A refusal because the counters could not be reached.
    pub fn unavailable() -> Self {
        Refusal {
            reason: Reason::Unavailable,
            limit_type: None,
            metric: None,
            amount: None,
            window: None,
            resets_at: None,
            retry_after_seconds: None,
            message: UNAVAILABLE_MESSAGE.to_string(),
        }
    }

    /// A refusal because a fenced rule's counters cannot be trusted until recovery.
    pub fn recovering() -> Self {
        Refusal {
            reason: Reason::Recovering,
            message: RECOVERING_MESSAGE.to_string(),
            ..Self::unavailable()
        }
    }

    /// True for minute and hour (sliding) rules.
    pub fn is_rate_limit(&self) -> bool {
        self.window.is_some_and(Window::is_rate_limit)
    }

    /// True when the counters could not be checked (unreachable, or being recovered).
    pub fn unavailable_flag(&self) -> bool {
        matches!(self.reason, Reason::Unavailable | Reason::Recovering)
    }

    /// `resets_at` as ISO 8601 UTC.
    pub fn resets_at_iso(&self) -> Option<String> {
        self.resets_at.map(iso8601)
    }

    /// The error code of the HTTP answer: `rate_limit_exceeded` for minute/hour rules that
    /// free up at a known time (`retry_after_seconds`), `usage_limit_reached` for
    /// day-or-longer rules and for calls a rule never admits, `usage_limit_held` for room
    /// taken by calls in progress, `usage_limits_unavailable`,
    /// `budget_recovering`, `context_length_exceeded`, `model_not_found`.
    pub fn http_code(&self) -> &'static str {
        match self.reason {
            Reason::Unavailable => "usage_limits_unavailable",
            Reason::Recovering => "budget_recovering",
            Reason::ContextWindowExceeded => "context_length_exceeded",
            Reason::ModelNotFound => "model_not_found",
            Reason::HeldByCalls => "usage_limit_held",
            _ if self.is_rate_limit() && self.retry_after_seconds.is_some() => {
                "rate_limit_exceeded"
            }
            Reason::DoesNotFit | Reason::LimitReached => "usage_limit_reached",
        }
    }
}

//! What a provider call's outcome means for health: a success, a retryable failure (counted
//! by the provider's breaker), a rate limit or billing exhaustion (a credential's cooldown),
//! or a caller mistake (counted nowhere: one malformed request must not take a provider away
//! from everybody).

/// The health meaning of one provider call's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A 1xx-3xx answer.
    Success,
    /// A 5xx answer, a timeout or a connection fault (no status).
    Retryable,
    /// A 429 answer that is not billing exhaustion.
    RateLimited,
    /// The provider's account ran out (402, or an error code saying so).
    Billing,
    /// Any other 4xx: the caller's mistake.
    CallerMistake,
}

/// Error codes and message fragments providers use for an account out of credit (OpenAI
/// answers 429 `insufficient_quota`; Anthropic 400 "credit balance is too low").
const BILLING_WORDS: [&str; 4] = [
    "insufficient_quota",
    "billing_hard_limit_reached",
    "credit balance",
    "billing_not_active",
];

impl Outcome {
    /// Classifies an answer's `status` (`None`: no answer, a timeout or a connection fault)
    /// and the provider's error code or message, if any.
    pub fn classify(status: Option<u16>, error: Option<&str>) -> Outcome {
        let billing = error.is_some_and(|e| {
            let e = e.to_ascii_lowercase();
            BILLING_WORDS.iter().any(|w| e.contains(w))
        });
        match status {
            None => Outcome::Retryable,
            Some(s) if s >= 500 => Outcome::Retryable,
            Some(402) => Outcome::Billing,
            Some(s) if (400..500).contains(&s) && billing => Outcome::Billing,
            Some(429) => Outcome::RateLimited,
            Some(408) => Outcome::Retryable,
            Some(s) if s >= 400 => Outcome::CallerMistake,
            Some(_) => Outcome::Success,
        }
    }

    /// Whether the breaker counts this outcome as a failure.
    pub fn counts_as_failure(self) -> bool {
        self == Outcome::Retryable
    }

    /// The outcome's word: `success`, `retryable`, `rate_limited`, `billing`, `caller_mistake`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Retryable => "retryable",
            Outcome::RateLimited => "rate_limited",
            Outcome::Billing => "billing",
            Outcome::CallerMistake => "caller_mistake",
        }
    }
}

crate::guard::domain::words::display_as_str!(Outcome);

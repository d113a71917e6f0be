//! Provider health, pure: what a call's outcome means for its provider and credential
//! (`outcome`), the breaker of a provider (`breaker`) and a credential's cooldown timing read
//! from the provider's headers (`timing`), and one guard's book of them all (`book`). Time
//! comes from the caller (the guard's clock).

pub(crate) mod book;
pub(crate) mod breaker;
pub(crate) mod outcome;
pub(crate) mod timing;

#[cfg(test)]
mod tests;

pub(crate) use book::HealthBook;
pub use book::{Cooldown, Cooled, HealthSettings, HealthSnapshot, Recorded};
pub use breaker::{BreakerSettings, BreakerState, Transition};
pub use outcome::Outcome;
pub use timing::{CooldownTiming, TimingSource};

use super::clock::Millis;

/// Why a provider or credential cannot take a call now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnavailableReason {
    /// The provider's breaker is open (retryable failures), or half-open with every probe
    /// taken.
    BreakerOpen,
    /// The credential is cooling down after a rate limit (429).
    RateLimited,
    /// The credential is cooling down after the provider's billing ran out.
    Billing,
}

impl UnavailableReason {
    /// Every reason.
    pub const ALL: [UnavailableReason; 3] = [
        UnavailableReason::BreakerOpen,
        UnavailableReason::RateLimited,
        UnavailableReason::Billing,
    ];

    /// The reason's word: `breaker_open`, `rate_limited` or `billing`; `Display` and `FromStr`
    /// use it.
    pub fn as_str(self) -> &'static str {
        match self {
            UnavailableReason::BreakerOpen => "breaker_open",
            UnavailableReason::RateLimited => "rate_limited",
            UnavailableReason::Billing => "billing",
        }
    }
}

super::words::words!(UnavailableReason);

/// A provider or credential that cannot take a call until `until`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("provider {provider} unavailable ({}) until {}", reason.as_str(), super::clock::iso8601(*until))]
pub struct Unavailable {
    /// The provider asked about.
    pub provider: String,
    /// The credential cooling down, for a cooldown; `None` for an open breaker.
    pub credential: Option<String>,
    /// When it may take calls again (guard clock).
    pub until: Millis,
    /// Why.
    pub reason: UnavailableReason,
}

//! The health of every provider and credential one guard knows: a breaker per provider, a
//! cooldown clock per credential (`provider`, `credential`), and what each recorded outcome
//! did. Pure: the caller passes the time and shares what changed through the store.

use std::collections::{BTreeMap, HashMap};

use super::breaker::{Breaker, BreakerSettings, BreakerState, Transition};
use super::outcome::Outcome;
use super::timing::{cooldown_timing, CooldownTiming, DEFAULT_COOLDOWN_MS, MAX_COOLDOWN_MS};
use super::{Unavailable, UnavailableReason};
use crate::guard::domain::clock::Millis;

/// The thresholds of every breaker and cooldown (docs/gateway.md, "Provider health").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HealthSettings {
    /// Each provider's breaker.
    pub breaker: BreakerSettings,
    /// A cooldown's wait when the provider's answer gives no timing (5 s).
    pub cooldown_default_ms: i64,
    /// The longest cooldown (5 min).
    pub cooldown_max_ms: i64,
}

impl Default for HealthSettings {
    fn default() -> Self {
        HealthSettings {
            breaker: BreakerSettings::default(),
            cooldown_default_ms: DEFAULT_COOLDOWN_MS,
            cooldown_max_ms: MAX_COOLDOWN_MS,
        }
    }
}

/// A credential's cooldown started by a recorded outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cooldown {
    /// When the credential may take calls again.
    pub until: Millis,
    /// Rate limited or billing.
    pub reason: UnavailableReason,
    /// The wait the provider asked for and the wait kept.
    pub timing: CooldownTiming,
}

/// What recording one outcome did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// The breaker's change (opened until, closed, or none).
    pub transition: Transition,
    /// The cooldown started, for a rate limit or billing exhaustion.
    pub cooldown: Option<Cooldown>,
}

/// A cooled credential, for metrics and the admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cooled {
    pub provider: String,
    pub credential: String,
    pub until: Millis,
    pub reason: UnavailableReason,
}

/// Every provider's and credential's health, at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HealthSnapshot {
    /// Each provider with a breaker, by name, and its state.
    pub breakers: Vec<(String, BreakerState)>,
    /// The credentials cooling down now.
    pub cooled: Vec<Cooled>,
    /// Cooldowns started so far, by (provider, reason word).
    pub cooled_total: Vec<((String, &'static str), u64)>,
}

/// The health book of one guard.
#[derive(Debug, Clone)]
pub(crate) struct HealthBook {
    settings: HealthSettings,
    breakers: HashMap<String, Breaker>,
    cooldowns: HashMap<(String, String), (Millis, UnavailableReason)>,
    cooled_total: BTreeMap<(String, &'static str), u64>,
}

impl HealthBook {
    /// An empty book: every provider closed, no credential cooling.
    pub(crate) fn new(settings: HealthSettings) -> Self {
        HealthBook {
            settings,
            breakers: HashMap::new(),
            cooldowns: HashMap::new(),
            cooled_total: BTreeMap::new(),
        }
    }

    fn breaker(&mut self, provider: &str) -> &mut Breaker {
        let settings = self.settings.breaker;
        self.breakers
            .entry(provider.to_string())
            .or_insert_with(|| Breaker::new(settings))
    }

    /// The cooldown of the credential still running at `now`.
    fn cooling(&self, provider: &str, credential: &str, now: Millis) -> Option<Unavailable> {
        let key = (provider.to_string(), credential.to_string());
        let (until, reason) = *self.cooldowns.get(&key)?;
        (until > now).then(|| Unavailable {
            provider: provider.to_string(),
            credential: Some(credential.to_string()),
            until,
            reason,
        })
    }

    fn gate(
        &mut self,
        provider: &str,
        credential: &str,
        now: Millis,
        take: bool,
    ) -> Result<(), Unavailable> {
        let breaker = self.breaker(provider);
        let asked = if take {
            breaker.try_call(now)
        } else {
            breaker.would_admit(now)
        };
        if let Err(until) = asked {
            return Err(Unavailable {
                provider: provider.to_string(),
                credential: None,
                until,
                reason: UnavailableReason::BreakerOpen,
            });
        }
        match self.cooling(provider, credential, now) {
            Some(cooling) => Err(cooling),
            None => Ok(()),
        }
    }

    /// Whether a call through `credential` of `provider` may go at `now`, without taking a
    /// half-open probe.
    pub(crate) fn available(
        &mut self,
        provider: &str,
        credential: &str,
        now: Millis,
    ) -> Result<(), Unavailable> {
        self.gate(provider, credential, now, false)
    }

    /// Lets a call through `credential` of `provider` go at `now` (taking a half-open
    /// probe), or says why not. A cooling credential does not take a probe.
    pub(crate) fn take(
        &mut self,
        provider: &str,
        credential: &str,
        now: Millis,
    ) -> Result<(), Unavailable> {
        if let Some(cooling) = self.cooling(provider, credential, now) {
            return Err(cooling);
        }
        self.gate(provider, credential, now, true)
    }

    /// Records the outcome of `caller`'s call at `now` (`caller`: who made it, a gateway
    /// key's label or a user; the breaker opens only on failures of more than one); a rate
    /// limit or billing exhaustion starts the credential's cooldown with the timing read from
    /// the answer's `headers`. A rate limit never counts against the breaker; nor does a
    /// caller mistake.
    pub(crate) fn record(
        &mut self,
        provider: &str,
        credential: &str,
        caller: &str,
        outcome: Outcome,
        headers: &[(String, String)],
        now: Millis,
    ) -> Recorded {
        let reason = match outcome {
            Outcome::RateLimited => Some(UnavailableReason::RateLimited),
            Outcome::Billing => Some(UnavailableReason::Billing),
            _ => None,
        };
        let transition = match outcome {
            Outcome::Success | Outcome::Retryable => {
                self.breaker(provider)
                    .record(outcome.counts_as_failure(), caller, now)
            }
            _ => Transition::None,
        };
        let cooldown = reason.map(|reason| {
            let s = self.settings;
            let timing = cooldown_timing(headers, now, s.cooldown_default_ms, s.cooldown_max_ms);
            let until = now + timing.wait_ms.max(1);
            let key = (provider.to_string(), credential.to_string());
            // A new answer relearns the interval (it may be shorter than the last one).
            self.cooldowns.insert(key, (until, reason));
            *self
                .cooled_total
                .entry((provider.to_string(), reason.as_str()))
                .or_default() += 1;
            Cooldown {
                until,
                reason,
                timing,
            }
        });
        Recorded {
            transition,
            cooldown,
        }
    }

    /// Adopts a breaker another guard opened until `until`; returns whether it changed.
    pub(crate) fn adopt_open(&mut self, provider: &str, until: Millis, now: Millis) -> bool {
        self.breaker(provider).adopt_open(until, now)
    }

    /// Adopts a cooldown another guard started; a later one already known is kept. Returns
    /// whether it changed.
    pub(crate) fn adopt_cooldown(
        &mut self,
        provider: &str,
        credential: &str,
        until: Millis,
        reason: UnavailableReason,
        now: Millis,
    ) -> bool {
        if until <= now {
            return false;
        }
        let key = (provider.to_string(), credential.to_string());
        match self.cooldowns.get(&key) {
            Some((kept, _)) if *kept >= until => false,
            _ => {
                self.cooldowns.insert(key, (until, reason));
                true
            }
        }
    }

    /// Every provider's breaker state and the credentials cooling at `now` (ended cooldowns
    /// are forgotten).
    pub(crate) fn snapshot(&mut self, now: Millis) -> HealthSnapshot {
        self.cooldowns.retain(|_, (until, _)| *until > now);
        let mut breakers: Vec<(String, BreakerState)> = self
            .breakers
            .iter_mut()
            .map(|(p, b)| (p.clone(), b.state(now)))
            .collect();
        breakers.sort_by(|a, b| a.0.cmp(&b.0));
        let mut cooled: Vec<Cooled> = self
            .cooldowns
            .iter()
            .map(|((provider, credential), (until, reason))| Cooled {
                provider: provider.clone(),
                credential: credential.clone(),
                until: *until,
                reason: *reason,
            })
            .collect();
        cooled.sort_by(|a, b| (&a.provider, &a.credential).cmp(&(&b.provider, &b.credential)));
        HealthSnapshot {
            breakers,
            cooled,
            cooled_total: self
                .cooled_total
                .iter()
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
        }
    }
}

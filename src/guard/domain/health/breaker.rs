//! A provider's circuit breaker. Closed, it records each call's outcome in a sliding window;
//! once the window holds at least `min_calls` calls, at least `failure_ratio` of them failed
//! (retryable failures only) and the failures came from at least `min_failing_callers`
//! callers, it opens for `open_ms`: one caller's calls alone never take a provider away from
//! the others. Then it half-opens: up to `probes` calls go through; any failure opens it
//! again, `probes` successes close it.

use std::collections::VecDeque;

use crate::guard::domain::clock::Millis;

/// A breaker's thresholds (docs/health.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerSettings {
    /// Calls the window must hold before the breaker may open (5).
    pub min_calls: usize,
    /// The share of failures that opens it (0.5).
    pub failure_ratio: f64,
    /// How many different callers (gateway keys, the wrappers' users) the failures must
    /// come from (2).
    pub min_failing_callers: usize,
    /// How far back the window reaches, in ms (60 s).
    pub window_ms: i64,
    /// How long it stays open, in ms (10 s).
    pub open_ms: i64,
    /// Calls let through half-open (3).
    pub probes: u32,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings {
            min_calls: 5,
            failure_ratio: 0.5,
            min_failing_callers: 2,
            window_ms: 60_000,
            open_ms: 10_000,
            probes: 3,
        }
    }
}

/// A breaker's state as seen from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// No call goes through until `until`.
    Open { until: Millis },
    /// `admitted` of the probes have been let through, `succeeded` of them came back well.
    HalfOpen { admitted: u32, succeeded: u32 },
}

impl BreakerState {
    /// The state's word: `closed`, `open` or `half_open`.
    pub fn as_str(&self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open { .. } => "open",
            BreakerState::HalfOpen { .. } => "half_open",
        }
    }
}

/// What a recorded outcome did to the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing changed state.
    None,
    /// It opened (from closed or half-open) until the given instant.
    Opened(Millis),
    /// A half-open breaker closed.
    Closed,
}

/// One provider's breaker.
#[derive(Debug, Clone)]
pub(crate) struct Breaker {
    settings: BreakerSettings,
    /// (when, failed, the caller's hash) of the calls recorded while closed, oldest first.
    window: VecDeque<(Millis, bool, u64)>,
    state: BreakerState,
    /// When the half-open state last let a probe through (probes that never report back
    /// are forgotten after `open_ms`).
    probe_at: Millis,
}

impl Breaker {
    /// A closed breaker.
    pub(crate) fn new(settings: BreakerSettings) -> Self {
        Breaker {
            settings,
            window: VecDeque::new(),
            state: BreakerState::Closed,
            probe_at: 0,
        }
    }

    /// The state at `now` (an open breaker past its time reads half-open).
    pub(crate) fn state(&mut self, now: Millis) -> BreakerState {
        if let BreakerState::Open { until } = self.state {
            if now >= until {
                self.state = BreakerState::HalfOpen {
                    admitted: 0,
                    succeeded: 0,
                };
            }
        }
        if let BreakerState::HalfOpen {
            admitted,
            succeeded,
        } = self.state
        {
            if admitted > succeeded && now - self.probe_at >= self.settings.open_ms {
                self.state = BreakerState::HalfOpen {
                    admitted: succeeded,
                    succeeded,
                };
            }
        }
        self.state
    }

    /// Whether a call at `now` would be let through, without taking a probe: `Err(until)`
    /// when it would be refused until about that instant.
    pub(crate) fn would_admit(&mut self, now: Millis) -> Result<(), Millis> {
        match self.state(now) {
            BreakerState::Closed => Ok(()),
            BreakerState::Open { until } => Err(until),
            BreakerState::HalfOpen { admitted, .. } if admitted >= self.settings.probes => {
                Err(self.probe_at + self.settings.open_ms)
            }
            BreakerState::HalfOpen { .. } => Ok(()),
        }
    }

    /// Opens the breaker until `until` because another guard opened it (read from the
    /// store); an open breaker that ends later is kept. Returns whether it changed.
    pub(crate) fn adopt_open(&mut self, until: Millis, now: Millis) -> bool {
        if until <= now {
            return false;
        }
        match self.state(now) {
            BreakerState::Open { until: kept } if kept >= until => false,
            _ => {
                self.state = BreakerState::Open { until };
                self.window.clear();
                true
            }
        }
    }

    /// Asks to send a call at `now`: `Ok` lets it through (taking a probe when half-open),
    /// `Err(until)` refuses it until about that instant.
    pub(crate) fn try_call(&mut self, now: Millis) -> Result<(), Millis> {
        match self.state(now) {
            BreakerState::Closed => Ok(()),
            BreakerState::Open { until } => Err(until),
            BreakerState::HalfOpen {
                admitted,
                succeeded,
            } => {
                if admitted >= self.settings.probes {
                    return Err(self.probe_at + self.settings.open_ms);
                }
                self.state = BreakerState::HalfOpen {
                    admitted: admitted + 1,
                    succeeded,
                };
                self.probe_at = now;
                Ok(())
            }
        }
    }

    /// Records the outcome of `caller`'s call at `now` (`failed`: a retryable failure).
    pub(crate) fn record(&mut self, failed: bool, caller: &str, now: Millis) -> Transition {
        match self.state(now) {
            BreakerState::Open { .. } => Transition::None,
            BreakerState::HalfOpen {
                admitted,
                succeeded,
            } => {
                if failed {
                    return self.open(now);
                }
                let succeeded = succeeded + 1;
                if succeeded >= self.settings.probes {
                    self.state = BreakerState::Closed;
                    self.window.clear();
                    return Transition::Closed;
                }
                let admitted = admitted.max(succeeded);
                self.state = BreakerState::HalfOpen {
                    admitted,
                    succeeded,
                };
                Transition::None
            }
            BreakerState::Closed => {
                self.window.push_back((now, failed, caller_hash(caller)));
                self.trim(now);
                let calls = self.window.len();
                let failures = self.window.iter().filter(|(_, f, _)| *f).count();
                let ratio = failures as f64 / calls as f64;
                if calls >= self.settings.min_calls
                    && ratio >= self.settings.failure_ratio
                    && self.failing_callers() >= self.settings.min_failing_callers
                {
                    self.open(now)
                } else {
                    Transition::None
                }
            }
        }
    }

    /// How many different callers the window's failures came from (counted up to the
    /// threshold).
    fn failing_callers(&self) -> usize {
        let want = self.settings.min_failing_callers;
        let mut seen: Vec<u64> = Vec::with_capacity(want);
        for (_, failed, caller) in &self.window {
            if *failed && !seen.contains(caller) {
                seen.push(*caller);
                if seen.len() >= want {
                    break;
                }
            }
        }
        seen.len()
    }

    /// Opens the breaker at `now` for `open_ms`.
    fn open(&mut self, now: Millis) -> Transition {
        let until = now + self.settings.open_ms;
        self.state = BreakerState::Open { until };
        self.window.clear();
        Transition::Opened(until)
    }

    /// Drops calls older than the window (and keeps at most 1000).
    fn trim(&mut self, now: Millis) {
        let from = now - self.settings.window_ms;
        while self.window.front().is_some_and(|(t, _, _)| *t <= from) || self.window.len() > 1000 {
            self.window.pop_front();
        }
    }
}

/// A caller's name as the window keeps it (a hash: the window holds up to 1000 calls).
fn caller_hash(caller: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    caller.hash(&mut h);
    h.finish()
}

crate::guard::domain::words::display_as_str!(BreakerState);

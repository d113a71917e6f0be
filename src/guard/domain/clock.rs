//! Time for every window computation: one `Clock` the guard reads, so tests can drive it.

use std::sync::atomic::{AtomicI64, Ordering};

/// Milliseconds since the Unix epoch, UTC.
pub type Millis = i64;

/// Where the guard reads the time. Every window, hold expiry and reset is computed from
/// `now_ms`, never from a store server's own clock.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current instant in milliseconds since the Unix epoch (UTC).
    fn now_ms(&self) -> Millis;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        // SystemTime directly: chrono's `Utc::now()` builds a calendar date first.
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(since) => since.as_millis() as Millis,
            Err(before) => -(before.duration().as_millis() as Millis),
        }
    }
}

/// A clock that only moves when told to (tests, simulations). Shared freely between threads:
/// `set` and `advance` are seen at once by every guard that reads it.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A manual clock standing at `now_ms`.
    pub fn new(now_ms: Millis) -> Self {
        Self {
            now: AtomicI64::new(now_ms),
        }
    }

    /// Moves the clock to `now_ms` (backwards too).
    pub fn set(&self, now_ms: Millis) {
        self.now.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the clock forward by `ms` (a negative value moves it back).
    pub fn advance(&self, ms: i64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }
}

/// Formats an instant as ISO 8601 UTC with whole seconds, e.g. `2026-12-01T00:00:00Z`.
pub fn iso8601(ms: Millis) -> String {
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        None => ms.to_string(),
    }
}

/// Parses an ISO 8601 / RFC 3339 instant (`2026-11-30T14:20:00Z`, offsets allowed) into
/// milliseconds since the epoch.
pub fn parse_iso8601(text: &str) -> Option<Millis> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

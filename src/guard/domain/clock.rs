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

/// Parses an instant into milliseconds since the epoch: an RFC 3339 instant
/// (`2026-11-30T14:20:00Z`, offsets allowed), a date (`2026-11-30`: midnight UTC, as the
/// CLI's `--since` reads it), or a date and time without an offset (`2026-11-30T14:20`,
/// `2026-11-30 14:20:00`: UTC). Anything else is `None`.
pub fn parse_iso8601(text: &str) -> Option<Millis> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Some(t.timestamp_millis());
    }
    if let Ok(day) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Some(
            day.and_time(chrono::NaiveTime::MIN)
                .and_utc()
                .timestamp_millis(),
        );
    }
    [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|format| chrono::NaiveDateTime::parse_from_str(text, format).ok())
    .map(|t| t.and_utc().timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::{iso8601, parse_iso8601};

    #[test]
    fn a_date_is_midnight_utc_and_an_instant_without_offset_is_utc() {
        let midnight = parse_iso8601("2026-11-01T00:00:00Z").unwrap();
        assert_eq!(parse_iso8601("2026-11-01"), Some(midnight));
        assert_eq!(parse_iso8601("2026-11-01T00:00"), Some(midnight));
        assert_eq!(parse_iso8601("2026-11-01 00:00:00"), Some(midnight));
        assert_eq!(parse_iso8601("2026-11-01T01:00:00+01:00"), Some(midnight));
        assert_eq!(
            parse_iso8601("2026-11-01T10:30:00.250"),
            Some(midnight + 37_800_250)
        );
        assert_eq!(iso8601(midnight), "2026-11-01T00:00:00Z");
    }

    #[test]
    fn what_is_neither_a_date_nor_an_instant_is_refused() {
        for text in [
            "",
            "yesterday",
            "2026-13-01",
            "2026-11-31",
            "01/11/2026",
            "2026-11-01Z",
        ] {
            assert_eq!(parse_iso8601(text), None, "{text:?}");
        }
    }
}

//! A cooldown's timing from the provider's answer headers, in this order: `Retry-After`
//! (seconds or an HTTP date), `retry-after-ms`, then the earliest reset among OpenAI's
//! `x-ratelimit-reset-*` durations (`1s`, `6m0s`, `20ms`) and Anthropic's
//! `anthropic-ratelimit-*-reset` instants (RFC 3339); without any, a default (5 s). The wait
//! is clamped to a maximum (5 min). Header names are matched case-insensitively; a value that
//! does not parse is skipped (the next source is read).

use crate::guard::domain::clock::{parse_iso8601, Millis};

/// The default wait without timing headers (5 s).
pub(crate) const DEFAULT_COOLDOWN_MS: i64 = 5_000;
/// The longest wait (5 min).
pub(crate) const MAX_COOLDOWN_MS: i64 = 300_000;

/// Where a cooldown's timing came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimingSource {
    /// `Retry-After`.
    RetryAfter,
    /// `retry-after-ms`.
    RetryAfterMs,
    /// An OpenAI `x-ratelimit-reset-*` duration.
    OpenAiReset,
    /// An Anthropic `anthropic-ratelimit-*-reset` instant.
    AnthropicReset,
    /// No timing header: the default.
    Default,
}

impl TimingSource {
    /// The source as written in logs: the header (family) or `default`.
    pub fn as_str(self) -> &'static str {
        match self {
            TimingSource::RetryAfter => "retry-after",
            TimingSource::RetryAfterMs => "retry-after-ms",
            TimingSource::OpenAiReset => "x-ratelimit-reset-*",
            TimingSource::AnthropicReset => "anthropic-ratelimit-*-reset",
            TimingSource::Default => "default",
        }
    }
}

/// A cooldown's timing: the wait the provider asked for, where it came from, and the wait
/// kept after the clamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CooldownTiming {
    /// The wait asked for (or the default), in ms, never negative.
    pub asked_ms: i64,
    /// The wait kept: `asked_ms` clamped to the maximum.
    pub wait_ms: i64,
    /// Where `asked_ms` came from.
    pub source: TimingSource,
}

impl CooldownTiming {
    /// Whether the clamp shortened the wait asked for.
    pub fn clamped(&self) -> bool {
        self.wait_ms < self.asked_ms
    }
}

/// The cooldown timing of an answer with `headers` received at `now`, with `default_ms`
/// when no header gives timing and `max_ms` as the clamp.
pub(crate) fn cooldown_timing(
    headers: &[(String, String)],
    now: Millis,
    default_ms: i64,
    max_ms: i64,
) -> CooldownTiming {
    let (asked_ms, source) = asked(headers, now).unwrap_or((default_ms, TimingSource::Default));
    let asked_ms = asked_ms.max(0);
    CooldownTiming {
        asked_ms,
        wait_ms: asked_ms.min(max_ms.max(0)),
        source,
    }
}

/// The wait the headers ask for, by the first source that parses.
fn asked(headers: &[(String, String)], now: Millis) -> Option<(i64, TimingSource)> {
    fn value<'h>(
        headers: &'h [(String, String)],
        name: &'static str,
    ) -> impl Iterator<Item = &'h str> {
        headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }
    if let Some(ms) = value(headers, "retry-after").find_map(|v| retry_after_ms(v, now)) {
        return Some((ms, TimingSource::RetryAfter));
    }
    if let Some(ms) = value(headers, "retry-after-ms").find_map(number_ms) {
        return Some((ms, TimingSource::RetryAfterMs));
    }
    let mut earliest: Option<(i64, TimingSource)> = None;
    for (name, v) in headers {
        let name = name.to_ascii_lowercase();
        let found = if name.starts_with("x-ratelimit-reset-") {
            go_duration_ms(v.trim()).map(|ms| (ms, TimingSource::OpenAiReset))
        } else if name.starts_with("anthropic-ratelimit-") && name.ends_with("-reset") {
            parse_iso8601(v.trim()).map(|t| (t - now, TimingSource::AnthropicReset))
        } else {
            None
        };
        if let Some(f) = found {
            if earliest.is_none_or(|e| f.0 < e.0) {
                earliest = Some(f);
            }
        }
    }
    earliest
}

/// `Retry-After`: non-negative seconds (decimals allowed) or an HTTP date.
fn retry_after_ms(value: &str, now: Millis) -> Option<i64> {
    if value.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        let seconds: f64 = value.parse().ok()?;
        return finite_ms(seconds * 1000.0);
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    Some(date.timestamp_millis() - now)
}

/// A non-negative number of milliseconds (decimals allowed).
fn number_ms(value: &str) -> Option<i64> {
    if !value.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    finite_ms(value.parse().ok()?)
}

/// `ms` rounded up, if finite, non-negative and below a year.
fn finite_ms(ms: f64) -> Option<i64> {
    (ms.is_finite() && (0.0..=31_536_000_000.0).contains(&ms)).then(|| ms.ceil() as i64)
}

/// A Go duration as OpenAI writes it (`1s`, `6m0s`, `20ms`, `1h2m3.5s`, `0.5s`), in whole
/// ms rounded up; `None` unless the whole text is one.
pub(crate) fn go_duration_ms(text: &str) -> Option<i64> {
    if text.is_empty() {
        return None;
    }
    let mut rest = text;
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "h" => 3_600_000.0,
            "m" => 60_000.0,
            "s" => 1_000.0,
            "ms" => 1.0,
            "us" | "µs" | "μs" => 0.001,
            "ns" => 0.000_001,
            _ => return None,
        };
        total += number * factor;
        rest = &rest[unit_len..];
    }
    finite_ms(total)
}

crate::guard::domain::words::display_as_str!(TimingSource);

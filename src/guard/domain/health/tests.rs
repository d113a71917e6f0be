//! Provider health at its edges, on a clock the tests move by hand.

use super::book::{HealthBook, HealthSettings};
use super::breaker::{BreakerState, Transition};
use super::outcome::Outcome;
use super::timing::{cooldown_timing, go_duration_ms, TimingSource};
use super::UnavailableReason;

const T0: i64 = 1_780_000_000_000;

fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn book() -> HealthBook {
    HealthBook::new(HealthSettings::default())
}

/// Two callers take turns (by the instant's parity): a breaker never opens on one's alone.
fn caller(now: i64) -> &'static str {
    if now % 2 == 0 {
        "key-a"
    } else {
        "key-b"
    }
}

fn fail(b: &mut HealthBook, now: i64) -> Transition {
    b.record("openai", "k", caller(now), Outcome::Retryable, &[], now)
        .transition
}

fn ok(b: &mut HealthBook, now: i64) -> Transition {
    b.record("openai", "k", caller(now), Outcome::Success, &[], now)
        .transition
}

#[test]
fn one_caller_s_failures_alone_never_open_it_a_second_caller_s_do() {
    let mut b = book();
    for i in 0..50 {
        let r = b.record("openai", "k", "key-a", Outcome::Retryable, &[], T0 + i);
        assert_eq!(r.transition, Transition::None, "call {i}");
    }
    // Another caller keeps being served meanwhile.
    assert!(b.take("openai", "k", T0 + 50).is_ok());
    // One failure of a second caller, with the first one's in the window, opens it.
    let r = b.record("openai", "k", "key-b", Outcome::Retryable, &[], T0 + 51);
    assert!(matches!(r.transition, Transition::Opened(_)));
}

#[test]
fn a_second_caller_s_successes_do_not_count_as_failing_callers() {
    let mut b = book();
    for i in 0..5 {
        b.record("openai", "k", "key-a", Outcome::Retryable, &[], T0 + i);
        let r = b.record("openai", "k", "key-b", Outcome::Success, &[], T0 + i);
        assert_eq!(r.transition, Transition::None);
    }
}

#[test]
fn four_failures_are_too_few_calls_and_the_fifth_opens() {
    let mut b = book();
    for i in 0..4 {
        assert_eq!(fail(&mut b, T0 + i), Transition::None);
        assert!(b.available("openai", "k", T0 + i).is_ok());
    }
    assert_eq!(fail(&mut b, T0 + 4), Transition::Opened(T0 + 4 + 10_000));
    let refused = b.available("openai", "k", T0 + 5).unwrap_err();
    assert_eq!(refused.reason, UnavailableReason::BreakerOpen);
    assert_eq!(refused.until, T0 + 4 + 10_000);
    assert_eq!(refused.credential, None);
}

#[test]
fn the_ratio_opens_at_one_half_not_below() {
    let mut b = book();
    // 3 successes, 2 failures: 40 %.
    for i in 0..3 {
        ok(&mut b, T0 + i);
    }
    assert_eq!(fail(&mut b, T0 + 3), Transition::None);
    assert_eq!(fail(&mut b, T0 + 4), Transition::None);
    // The sixth call makes 3 of 6: 50 % opens.
    assert!(matches!(fail(&mut b, T0 + 5), Transition::Opened(_)));
}

#[test]
fn caller_mistakes_and_rate_limits_never_count() {
    let mut b = book();
    for i in 0..20 {
        let r = b.record("openai", "k", "key-a", Outcome::CallerMistake, &[], T0 + i);
        assert_eq!(r.transition, Transition::None);
        assert_eq!(r.cooldown, None);
    }
    for i in 0..20 {
        let r = b.record("openai", "k2", "key-a", Outcome::RateLimited, &[], T0 + i);
        assert_eq!(r.transition, Transition::None);
        assert!(r.cooldown.is_some());
    }
    // The 429s cooled their credential only: a sibling still serves.
    assert!(b.available("openai", "k", T0 + 30).is_ok());
    let cooled = b.available("openai", "k2", T0 + 30).unwrap_err();
    assert_eq!(cooled.reason, UnavailableReason::RateLimited);
    assert_eq!(cooled.credential.as_deref(), Some("k2"));
    // Neither was counted as a call: the fifth failure, not an earlier one, opens it.
    for i in 0..4 {
        assert_eq!(fail(&mut b, T0 + 30 + i), Transition::None);
    }
    assert!(matches!(fail(&mut b, T0 + 34), Transition::Opened(_)));
}

#[test]
fn open_for_ten_seconds_then_three_probes_close_it() {
    let mut b = book();
    for i in 0..5 {
        fail(&mut b, T0 + i);
    }
    let opened_at = T0 + 4;
    assert!(b.take("openai", "k", opened_at + 9_999).is_err());
    let half = opened_at + 10_000;
    for n in 0..3 {
        assert!(b.take("openai", "k", half + n).is_ok(), "probe {n}");
    }
    // Every probe is out: a fourth call waits.
    let waiting = b.take("openai", "k", half + 3).unwrap_err();
    assert_eq!(waiting.reason, UnavailableReason::BreakerOpen);
    assert_eq!(ok(&mut b, half + 4), Transition::None);
    assert_eq!(ok(&mut b, half + 5), Transition::None);
    assert_eq!(ok(&mut b, half + 6), Transition::Closed);
    assert_eq!(b.snapshot(half + 7).breakers[0].1, BreakerState::Closed);
    // Closed again, with an empty window: four failures do not reopen it.
    for i in 0..4 {
        assert_eq!(fail(&mut b, half + 10 + i), Transition::None);
    }
}

#[test]
fn a_failed_probe_opens_it_for_another_ten_seconds() {
    let mut b = book();
    for i in 0..5 {
        fail(&mut b, T0 + i);
    }
    let half = T0 + 4 + 10_000;
    assert!(b.take("openai", "k", half).is_ok());
    assert_eq!(ok(&mut b, half + 1), Transition::None);
    assert!(b.take("openai", "k", half + 2).is_ok());
    assert_eq!(
        fail(&mut b, half + 3),
        Transition::Opened(half + 3 + 10_000)
    );
    assert!(b.available("openai", "k", half + 3 + 9_999).is_err());
    assert!(b.available("openai", "k", half + 3 + 10_000).is_ok());
}

#[test]
fn available_does_not_take_a_probe() {
    let mut b = book();
    for i in 0..5 {
        fail(&mut b, T0 + i);
    }
    let half = T0 + 4 + 10_000;
    for _ in 0..10 {
        assert!(b.available("openai", "k", half).is_ok());
    }
    for n in 0..3 {
        assert!(b.take("openai", "k", half).is_ok(), "probe {n}");
    }
    assert!(b.available("openai", "k", half).is_err());
}

#[test]
fn an_adopted_open_breaker_half_opens_on_its_own_clock() {
    let mut b = book();
    assert!(b.adopt_open("openai", T0 + 10_000, T0));
    assert!(
        !b.adopt_open("openai", T0 + 5_000, T0),
        "an earlier end is not adopted"
    );
    assert!(
        !b.adopt_open("anthropic", T0 - 1, T0),
        "an ended one is not adopted"
    );
    assert!(b.available("openai", "k", T0 + 9_999).is_err());
    assert!(b.take("openai", "k", T0 + 10_000).is_ok());
    assert!(b.available("anthropic", "k", T0).is_ok());
}

#[test]
fn adopted_cooldowns_keep_the_later_end() {
    let mut b = book();
    let r = UnavailableReason::Billing;
    assert!(b.adopt_cooldown("openai", "k", T0 + 2_000, r, T0));
    assert!(!b.adopt_cooldown("openai", "k", T0 + 1_000, r, T0));
    let cooled = b.available("openai", "k", T0 + 1_999).unwrap_err();
    assert_eq!((cooled.until, cooled.reason), (T0 + 2_000, r));
    assert!(b.available("openai", "k", T0 + 2_000).is_ok());
    assert!(b.snapshot(T0 + 2_000).cooled.is_empty());
}

#[test]
fn outcomes_classify_by_status_and_billing_words() {
    use Outcome::*;
    let cases: [(Option<u16>, Option<&str>, Outcome); 11] = [
        (None, None, Retryable),
        (Some(500), None, Retryable),
        (Some(503), Some("overloaded"), Retryable),
        (Some(408), None, Retryable),
        (Some(200), None, Success),
        (Some(400), Some("bad messages"), CallerMistake),
        (Some(404), None, CallerMistake),
        (Some(429), Some("rate_limit_exceeded"), RateLimited),
        (Some(429), Some("insufficient_quota"), Billing),
        (Some(402), None, Billing),
        (
            Some(400),
            Some("Your credit balance is too low to access the Anthropic API"),
            Billing,
        ),
    ];
    for (status, error, want) in cases {
        assert_eq!(
            Outcome::classify(status, error),
            want,
            "{status:?} {error:?}"
        );
    }
}

#[test]
fn a_billing_exhaustion_cools_the_key_as_billing() {
    let mut b = book();
    let r = b.record("openai", "k", "key-a", Outcome::Billing, &[], T0);
    let c = r.cooldown.unwrap();
    assert_eq!(
        (c.reason, c.until),
        (UnavailableReason::Billing, T0 + 5_000)
    );
    assert_eq!(c.timing.source, TimingSource::Default);
    let snapshot = b.snapshot(T0);
    assert_eq!(
        snapshot.cooled_total,
        vec![(("openai".to_string(), "billing"), 1)]
    );
    assert_eq!(snapshot.cooled.len(), 1);
}

fn timing(pairs: &[(&str, &str)]) -> (i64, i64, TimingSource) {
    let t = cooldown_timing(&h(pairs), T0, 5_000, 300_000);
    (t.asked_ms, t.wait_ms, t.source)
}

#[test]
fn retry_after_seconds_and_http_date() {
    use TimingSource::*;
    assert_eq!(timing(&[("Retry-After", "7")]), (7_000, 7_000, RetryAfter));
    assert_eq!(timing(&[("retry-after", "0.25")]), (250, 250, RetryAfter));
    // An HTTP date 20 s after T0.
    let date = chrono::DateTime::from_timestamp_millis(T0 + 20_000)
        .unwrap()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    assert_eq!(
        timing(&[("Retry-After", &date)]),
        (20_000, 20_000, RetryAfter)
    );
    // A date already past asks for no wait.
    let past = chrono::DateTime::from_timestamp_millis(T0 - 60_000)
        .unwrap()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    assert_eq!(timing(&[("Retry-After", &past)]), (0, 0, RetryAfter));
}

#[test]
fn the_order_is_retry_after_then_ms_then_the_earliest_reset() {
    use TimingSource::*;
    let all = [
        ("x-ratelimit-reset-requests", "1s"),
        ("retry-after-ms", "1500"),
        ("Retry-After", "3"),
    ];
    assert_eq!(timing(&all), (3_000, 3_000, RetryAfter));
    assert_eq!(timing(&all[..2]), (1_500, 1_500, RetryAfterMs));
    // An unreadable Retry-After is skipped.
    let bad = [("Retry-After", "soon"), ("retry-after-ms", "40")];
    assert_eq!(timing(&bad), (40, 40, RetryAfterMs));
    let resets = [
        ("x-ratelimit-reset-requests", "1m30s"),
        ("x-ratelimit-reset-tokens", "6ms"),
    ];
    assert_eq!(timing(&resets), (6, 6, OpenAiReset));
    let at = chrono::DateTime::from_timestamp_millis(T0 + 2_000)
        .unwrap()
        .to_rfc3339();
    let anthropic = [
        ("anthropic-ratelimit-requests-reset", at.as_str()),
        ("x-ratelimit-reset-tokens", "1m30s"),
    ];
    assert_eq!(timing(&anthropic), (2_000, 2_000, AnthropicReset));
    assert_eq!(
        timing(&[("x-ratelimit-remaining-tokens", "0")]),
        (5_000, 5_000, Default)
    );
}

#[test]
fn the_wait_is_clamped_to_five_minutes_and_keeps_what_was_asked() {
    let t = cooldown_timing(&h(&[("retry-after", "600")]), T0, 5_000, 300_000);
    assert_eq!((t.asked_ms, t.wait_ms), (600_000, 300_000));
    assert!(t.clamped());
    let t = cooldown_timing(&h(&[("retry-after", "300")]), T0, 5_000, 300_000);
    assert!(!t.clamped());
    let mut b = book();
    let headers = h(&[("x-ratelimit-reset-requests", "1h")]);
    let r = b.record("openai", "k", "key-a", Outcome::RateLimited, &headers, T0);
    assert_eq!(r.cooldown.unwrap().until, T0 + 300_000);
}

#[test]
fn go_durations() {
    assert_eq!(go_duration_ms("1m30s"), Some(90_000));
    assert_eq!(go_duration_ms("6ms"), Some(6));
    assert_eq!(go_duration_ms("0.5s"), Some(500));
    assert_eq!(go_duration_ms("1h2m3.5s"), Some(3_723_500));
    assert_eq!(go_duration_ms("20us"), Some(1));
    for bad in ["", "5", "s", "1x", "1m 2s", "-1s"] {
        assert_eq!(go_duration_ms(bad), None, "{bad}");
    }
}

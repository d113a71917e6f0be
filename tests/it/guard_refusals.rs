//! Every refusal is the right one: the context window comes first for everyone, and a
//! sliding rule that does not fit says when enough will be free, or that it never will.

use crate::common;

use common::*;
use usage_guard::{AdmitRequest, HttpShape, Reason, Refusal, Usage};

const HOURLY: &str = r#"
[models.gpt-5]
display_name = "GPT-5"
context_window = 400000
max_output_tokens = 128000

[[limits.direct]]
user = "alice"
model = "gpt-5"
rules = [{ metric = "tokens", amount = 2000, window = "hour" }]
"#;

fn bill(s: &Setup, prompt: u64, output: u64) {
    let t = s
        .guard
        .admit_blocking(call("alice", "gpt-5", prompt, output))
        .unwrap();
    let usage = Usage {
        input_tokens: prompt,
        output_tokens: output,
        ..Usage::default()
    };
    t.bill_blocking(usage).unwrap().unwrap();
}

fn header<'a>(h: &'a usage_guard::HttpRefusal, name: &str) -> Option<&'a str> {
    h.headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// At 14:20 the hour rule counts 500 (this bucket) + 800 (of 1,200 in the previous one):
/// 700 of 2,000 left.
fn at_1420() -> Setup {
    let s = setup(HOURLY, "2026-11-30T13:30:00Z");
    bill(&s, 1000, 200);
    s.clock.set(at("2026-11-30T14:10:00Z"));
    bill(&s, 400, 100);
    s.clock.set(at("2026-11-30T14:20:00Z"));
    s
}

#[test]
fn a_sliding_rule_that_does_not_fit_says_when_enough_is_free() {
    let s = at_1420();
    // 900 + 100 needs 1,000: free once the previous bucket carries 500, at 14:35.
    let r = refusal(s.guard.admit_blocking(call("alice", "gpt-5", 900, 100)));
    assert_eq!(r.reason, Reason::DoesNotFit);
    assert_eq!(r.resets_at, Some(at("2026-11-30T14:35:00Z")));
    assert_eq!(r.retry_after_seconds, Some(15 * 60));
    assert!(
        r.message
            .ends_with("Enough is free at 2026-11-30T14:35:00Z."),
        "{}",
        r.message
    );
    let http = r.to_http(HttpShape::OpenAi);
    assert_eq!(http.status, 429);
    assert_eq!(header(&http, "retry-after"), Some("900"));
    assert_eq!(header(&http, "x-should-retry"), Some("false"));
    assert_eq!(http.body["error"]["code"], "rate_limit_exceeded");
    // Just before, it still does not fit; at 14:35 it does.
    s.clock.set(at("2026-11-30T14:34:59Z"));
    assert!(s
        .guard
        .admit_blocking(call("alice", "gpt-5", 900, 100))
        .is_err());
    s.clock.set(at("2026-11-30T14:35:00Z"));
    assert!(s
        .guard
        .admit_blocking(call("alice", "gpt-5", 900, 100))
        .is_ok());
}

#[test]
fn a_short_wait_is_a_plain_rate_limit() {
    let s = at_1420();
    // 660 + 50 needs 710: the carried 800 drops to 790 at 14:20:30.
    let r = refusal(s.guard.admit_blocking(call("alice", "gpt-5", 660, 50)));
    assert_eq!(r.resets_at, Some(at("2026-11-30T14:20:30Z")));
    let wait = r.retry_after_seconds.unwrap();
    assert_eq!(wait, 30);
    let http = r.to_http(HttpShape::Anthropic);
    assert_eq!(
        header(&http, "retry-after"),
        Some(wait.to_string().as_str())
    );
    assert_eq!(header(&http, "x-should-retry"), None);
    s.clock.set(r.resets_at.unwrap() - 1000);
    assert!(s
        .guard
        .admit_blocking(call("alice", "gpt-5", 660, 50))
        .is_err());
    s.clock.set(r.resets_at.unwrap());
    assert!(s
        .guard
        .admit_blocking(call("alice", "gpt-5", 660, 50))
        .is_ok());
}

#[test]
fn a_call_over_the_whole_amount_never_fits() {
    let s = at_1420();
    let r = refusal(s.guard.admit_blocking(call("alice", "gpt-5", 2500, 100)));
    assert_eq!(r.reason, Reason::DoesNotFit);
    assert_eq!((r.resets_at, r.retry_after_seconds), (None, None));
    assert!(r.message.contains("It never will"), "{}", r.message);
    let http = r.to_http(HttpShape::OpenAi);
    assert_eq!(header(&http, "retry-after"), None);
    assert_eq!(header(&http, "x-should-retry"), Some("false"));
    assert_eq!(http.body["error"]["code"], "usage_limit_reached");
    // Even after every bucket has slid out.
    s.clock.set(at("2026-12-01T00:00:00Z"));
    assert!(s
        .guard
        .admit_blocking(call("alice", "gpt-5", 2500, 100))
        .is_err());
}

fn context_refusal(user: Option<&str>, prompt: u64) -> Refusal {
    let s = setup(HOURLY, "2026-11-30T14:20:00Z");
    let request = AdmitRequest {
        user: user.map(str::to_string),
        model: "gpt-5".into(),
        prompt_tokens: Some(prompt),
        ..AdmitRequest::default()
    };
    refusal(s.guard.admit_blocking(request))
}

#[test]
fn the_context_window_comes_first_for_everyone() {
    for user in [Some("alice"), Some("nobody"), None] {
        for prompt in [450_000, 400_000, (1 << 53) + 1, u64::MAX] {
            let r = context_refusal(user, prompt);
            assert_eq!(r.reason, Reason::ContextWindowExceeded, "{user:?} {prompt}");
            assert!(
                r.message
                    .contains("GPT-5's context window of 400,000 tokens"),
                "{}",
                r.message
            );
            let http = r.to_http(HttpShape::OpenAi);
            assert_eq!(http.status, 400);
            assert_eq!(http.body["error"]["code"], "context_length_exceeded");
            assert_eq!(header(&http, "x-should-retry"), None);
        }
    }
}

#[test]
fn a_cost_refusal_waits_for_what_the_call_holds() {
    // Prices of fractions of a micro-dollar a token: a 1-token prompt costs 2 (1.1 rounded
    // up), 1 output token 1 (0.8 rounded up). With 2 left the call does not fit, and the
    // refusal must not say it fits now.
    let toml = r#"
[models.m]
display_name = "M"
prices = { input = 1.1, output = 0.8 }

[[limits.direct]]
user = "alice"
model = "m"
rules = [{ metric = "cost", amount = 0.001, window = "day" }]
"#;
    let s = setup(toml, "2026-11-30T14:20:00Z");
    let t = s.guard.admit_blocking(call("alice", "m", 0, 0)).unwrap();
    let used = Usage {
        cost_micros: Some(998),
        ..Usage::default()
    };
    t.bill_blocking(used).unwrap().unwrap();
    let r = refusal(s.guard.admit_blocking(call("alice", "m", 1, 1)));
    assert_eq!(r.reason, Reason::DoesNotFit);
    assert_eq!(
        r.resets_at,
        Some(at("2026-12-01T00:00:00Z")),
        "{}",
        r.message
    );
}

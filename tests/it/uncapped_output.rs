//! A call without an output maximum does not lock out the next one (issue 31, item 5):
//! `settings.uncapped_output` says what it holds, its output is clamped to that, and a
//! refusal caused by the holds of calls in progress (not by use) says so and is retryable.
//! `n` answers are reserved for (item 6).

use crate::common;

use common::*;
use usage_guard::{AdmitRequest, Api, HttpShape, Reason, Usage};

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

fn policy(setting: &str) -> String {
    format!(
        "[settings]\n{setting}\n{GPT5}[[limits.direct]]\nuser = \"dave\"\nmodel = \"gpt-5\"\n\
         rules = [{{ metric = \"tokens\", amount = 20000, window = \"day\" }}]\n"
    )
}

fn uncapped(prompt: u64) -> AdmitRequest {
    let mut req = call("dave", "gpt-5", prompt, 0);
    req.max_output_tokens = None;
    req
}

#[test]
fn by_default_a_call_without_a_maximum_holds_half_of_what_is_left() {
    let s = setup(&policy(""), "2026-11-30T10:00:00Z");
    let first = s.guard.admit_blocking(uncapped(8)).unwrap();
    assert_eq!(first.ceiling().max_output_tokens, (20_000 - 8) / 2);
    let second = s.guard.admit_blocking(uncapped(8)).unwrap();
    let left = 20_000 - 8 - (20_000 - 8) / 2;
    assert_eq!(second.ceiling().max_output_tokens, (left - 8) / 2);
    // A caller's own maximum is never cut by the setting, only by what is left.
    let third = s
        .guard
        .admit_blocking(call("dave", "gpt-5", 8, 3000))
        .unwrap();
    assert_eq!(third.ceiling().max_output_tokens, 3000);
}

#[test]
fn the_setting_can_hold_a_number_or_the_models_maximum() {
    let s = setup(&policy("uncapped_output = 1000"), "2026-11-30T10:00:00Z");
    let t = s.guard.admit_blocking(uncapped(8)).unwrap();
    assert_eq!(t.ceiling().max_output_tokens, 1000);
    assert_eq!(t.ceiling().tokens, Some(1008));
    let s = setup(
        &policy("uncapped_output = \"model\""),
        "2026-11-30T10:00:00Z",
    );
    let t = s.guard.admit_blocking(uncapped(8)).unwrap();
    assert_eq!(
        t.ceiling().max_output_tokens,
        19_992,
        "the whole day, as before"
    );
    let s = setup(&policy("uncapped_output = \"10%\""), "2026-11-30T10:00:00Z");
    let t = s.guard.admit_blocking(uncapped(8)).unwrap();
    assert_eq!(t.ceiling().max_output_tokens, 1999);
}

#[test]
fn a_refusal_by_holds_says_so_and_is_retryable() {
    let s = setup(
        &policy("uncapped_output = \"model\""),
        "2026-11-30T10:00:00Z",
    );
    let stream = s.guard.admit_blocking(uncapped(8)).unwrap();
    let r = refusal(s.guard.admit_blocking(uncapped(8)));
    assert_eq!(r.reason, Reason::HeldByCalls);
    assert_eq!(r.reason.code(), "USAGE_LIMIT_HELD");
    assert!(
        r.message.starts_with(
            "You have 20,000 tokens held by calls in progress (0 tokens used) of your 20,000 \
             tokens a day on GPT-5"
        ),
        "{}",
        r.message
    );
    for shape in [HttpShape::OpenAi, HttpShape::Anthropic, HttpShape::Ollama] {
        let http = r.to_http(shape);
        assert_eq!(http.status, 429);
        let header = |name: &str| {
            http.headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(header("x-should-retry"), Some("true"), "{shape:?}");
        assert_eq!(header("retry-after"), Some("5"), "{shape:?}");
    }
    // The stream ends having written 32 tokens: the room is back.
    stream.bill_blocking(usage(8, 24)).unwrap();
    s.guard.admit_blocking(uncapped(8)).unwrap();
}

#[test]
fn a_day_really_used_is_still_refused_as_reached_and_not_retryable() {
    let s = setup(&policy(""), "2026-11-30T10:00:00Z");
    let t = s
        .guard
        .admit_blocking(call("dave", "gpt-5", 10_000, 10_000))
        .unwrap();
    t.bill_blocking(usage(10_000, 10_000)).unwrap();
    let r = reached(s.guard.admit_blocking(uncapped(8)));
    let http = r.to_http(HttpShape::OpenAi);
    assert!(http
        .headers
        .contains(&("x-should-retry".to_string(), "false".to_string())));
}

#[test]
fn n_answers_are_reserved_for_and_sent_unchanged() {
    let s = setup(&policy(""), "2026-11-30T10:00:00Z");
    let mut req = call("dave", "gpt-5", 0, 50);
    req.prompt_tokens = None;
    req.request = Some((
        serde_json::json!({"model": "gpt-5", "n": 10, "max_completion_tokens": 50,
                           "messages": [{"role": "user", "content": "hi"}]}),
        Api::OpenAiChat,
    ));
    let t = s.guard.admit_blocking(req).unwrap();
    let prompt = t.fitted().unwrap().prompt_tokens;
    assert_eq!(t.ceiling().max_output_tokens, 50);
    assert_eq!(t.ceiling().tokens, Some(prompt + 10 * 50));
    assert!(t.fitted().unwrap().changes().is_empty());
}

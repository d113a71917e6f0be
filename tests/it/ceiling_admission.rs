//! Admission fits the request it counted: once, with the policy's model spec (its own
//! `context_window`, `encoding` and `counting`), and the ticket carries that count and fit.

use crate::common;

use std::sync::Mutex;

use common::*;
use serde_json::{json, Value};
use usage_guard::internals::prompt_counts;
use usage_guard::{count_request, AdmitRequest, Api, Encoding, Reason};

/// `prompt_counts` is process-wide: tests that read it run one at a time.
static COUNTING: Mutex<()> = Mutex::new(());

const ACME: &str = r#"
[models.acme-small]
display_name = "Acme Small"
provider = "openai"
context_window = 120
encoding = "cl100k_base"
counting = "exact"

[[limits.public]]
model = "acme-small"
shared = [{ metric = "tokens", amount = 100000, window = "day" }]
"#;

fn chat(text: &str) -> Value {
    json!({"model": "acme-small", "messages": [{"role": "user", "content": text}]})
}

fn admit(request: &Value) -> AdmitRequest {
    AdmitRequest {
        user: Some("alice".to_string()),
        model: "acme-small".to_string(),
        prompt_tokens: None,
        prompt_is_estimate: false,
        max_output_tokens: None,
        request: Some((request.clone(), Api::OpenAiChat)),
        ..AdmitRequest::default()
    }
}

#[test]
fn the_fit_uses_the_policy_spec_and_admissions_count() {
    let _one = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let s = setup(ACME, "2026-11-30T14:20:00Z");
    let policy = policy(ACME);
    let spec = policy.model("acme-small").map(|s| &**s);
    let request = chat("Summarise the quarterly report for the board, please.");
    let expected = count_request(&request, Api::OpenAiChat, Some("acme-small"), spec).unwrap();
    assert_eq!(expected.encoding, Encoding::Cl100kBase);
    assert!(expected.exact);

    let before = prompt_counts();
    let t = s.guard.admit_blocking(admit(&request)).unwrap();
    assert_eq!(
        prompt_counts() - before,
        1,
        "admission counts the prompt once"
    );
    assert_eq!(t.prompt(), Some(&expected));
    let fitted = t.fitted().expect("a request was given");
    assert_eq!(fitted.prompt_tokens, expected.tokens);
    assert!(fitted.prompt_exact);
    // The policy's window of 120 bounds the output, not the ceiling's default.
    let out = fitted.max_output_tokens.unwrap();
    assert_eq!(out, 120 - expected.tokens);
    assert_eq!(
        fitted.request["max_completion_tokens"],
        json!(out),
        "{:?}",
        fitted.request
    );
}

#[test]
fn a_prompt_over_the_policy_window_is_refused() {
    let _one = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    let s = setup(ACME, "2026-11-30T14:20:00Z");
    let request = chat(&"Summarise the quarterly report for the board. ".repeat(20));
    let r = refusal(s.guard.admit_blocking(admit(&request)));
    assert_eq!(r.reason, Reason::ContextWindowExceeded, "{}", r.message);
    assert!(r.message.contains("Acme Small"), "{}", r.message);
    assert!(r.message.contains("120 tokens"), "{}", r.message);
}

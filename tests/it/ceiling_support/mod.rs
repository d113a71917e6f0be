//! Helpers shared by the fit tests: a ceiling, a run, a refusal's reason, one request per API.
#![allow(dead_code)]

use serde_json::{json, Value};
use usage_guard::{count_request, fit, Api, FitOptions, FitResult};
use usage_guard::{Error, Reason, UsageCeiling};

pub fn ceiling(tokens: Option<u64>, max_out: u64) -> UsageCeiling {
    UsageCeiling {
        tokens,
        cost_micros: None,
        rates: None,
        max_output_tokens: max_out,
        min_output_tokens: 256,
        margin: 0.05,
    }
}

/// The prompt as fit takes it: the count, plus the margin when it is an estimate.
pub fn effective_prompt(request: &Value, api: Api, margin: f64) -> u64 {
    let c = count_request(request, api, None, None).unwrap();
    if c.exact {
        c.tokens
    } else {
        c.tokens + (c.tokens as f64 * margin).ceil() as u64
    }
}

pub fn run(request: &Value, api: Api, c: &UsageCeiling) -> Result<FitResult, Error> {
    fit(request, c, api, None, None, &FitOptions::default())
}

pub fn refused(result: Result<FitResult, Error>) -> Reason {
    match result {
        Err(Error::Refused(r)) => r.reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

pub fn text(n: usize) -> String {
    "Summarise the quarterly report for the board. ".repeat(n)
}

/// One request per API with an output maximum of `max` (None: no cap given).
pub fn requests(max: Option<u64>) -> Vec<(Api, Value, &'static str)> {
    let t = text(10);
    let mut out = vec![
        (
            Api::OpenAiChat,
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": t}]}),
            "/max_completion_tokens",
        ),
        (
            Api::OpenAiResponses,
            json!({"model": "gpt-5", "input": t}),
            "/max_output_tokens",
        ),
        (
            Api::Anthropic,
            json!({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": t}]}),
            "/max_tokens",
        ),
        (
            Api::Gemini,
            json!({"contents": [{"role": "user", "parts": [{"text": t}]}]}),
            "/generationConfig/maxOutputTokens",
        ),
        (
            Api::OllamaChat,
            json!({"model": "llama3.1", "messages": [{"role": "user", "content": t}]}),
            "/options/num_predict",
        ),
        (
            Api::OllamaGenerate,
            json!({"model": "llama3.1", "prompt": t}),
            "/options/num_predict",
        ),
    ];
    if let Some(max) = max {
        for (_, request, pointer) in out.iter_mut() {
            let keys: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
            let mut at = &mut *request;
            for k in &keys[..keys.len() - 1] {
                at = at
                    .as_object_mut()
                    .unwrap()
                    .entry(k.to_string())
                    .or_insert(json!({}));
            }
            at[keys[keys.len() - 1]] = json!(max);
        }
    }
    out
}

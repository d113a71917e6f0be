//! Ollama `/api/chat`, `/api/generate` and `/api/embed`: `options.num_predict` (negative:
//! no limit), `done_reason`, and `prompt_eval_count` / `eval_count`.

use serde_json::{json, Value};

use super::{count, ReportedUsage};
use crate::guard::domain::refusal::Refusal;

pub(super) const OUTPUT_PATH: [&str; 2] = ["options", "num_predict"];

/// The `done_reason` of a response or of the final (`done`) stream chunk.
pub(super) fn finish_reasons(response: &Value) -> Vec<&str> {
    response
        .get("done_reason")
        .and_then(Value::as_str)
        .into_iter()
        .collect()
}

/// A response or the final stream chunk: `prompt_eval_count` in, `eval_count` out (thinking
/// included; Ollama does not report it apart).
pub(super) fn usage(response: &Value) -> Option<ReportedUsage> {
    let read = |key: &str| response.get(key).and_then(|v| count(v, key));
    let (input, output) = (read("prompt_eval_count"), read("eval_count"));
    if input.is_none() && output.is_none() {
        return None;
    }
    Some(ReportedUsage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        ..ReportedUsage::default()
    })
}

/// A refusal in Ollama's error shape: `{"error": message}`.
pub(super) fn refusal_body(refusal: &Refusal) -> Value {
    json!({ "error": refusal.message })
}

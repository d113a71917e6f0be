//! Whether an answer stopped at the output maximum the ceiling set.

use serde_json::Value;

use super::api::Api;
use super::fit::FitResult;
use super::providers::{finish_reasons, stopped_at_max};

/// Whether `response` stopped at an output maximum the ceiling set: `fit` capped the output
/// and a finish reason says the maximum was reached (chat `length`, responses
/// `max_output_tokens`, Anthropic `max_tokens`, Gemini `MAX_TOKENS`, Ollama `length`).
/// `response` is a response, a final streaming chunk or event, the finish reason itself as a
/// JSON string, or a list of finish reasons (one per answer: capped when any is).
pub fn usage_capped(response: &Value, fit: &FitResult, api: Api) -> bool {
    if !fit.output_capped {
        return false;
    }
    match response {
        Value::String(reason) => stopped_at_max(reason, api),
        Value::Array(reasons) => reasons
            .iter()
            .filter_map(Value::as_str)
            .any(|r| stopped_at_max(r, api)),
        _ => finish_reasons(response, api)
            .into_iter()
            .any(|r| stopped_at_max(r, api)),
    }
}

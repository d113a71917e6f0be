//! Anthropic messages: `max_tokens`, `thinking.budget_tokens`, `stop_reason`, and usage with
//! cache reads and writes reported apart from `input_tokens`.

use serde_json::{json, Value};

use super::refusal::RefusalKind;
use super::{n, ReportedUsage};
use crate::guard::domain::refusal::Refusal;

pub(super) const OUTPUT_PATH: [&str; 1] = ["max_tokens"];
pub(super) const THINKING_PATH: [&str; 2] = ["thinking", "budget_tokens"];

/// A message's `stop_reason`, or a streaming `message_delta` event's `delta.stop_reason`.
pub(super) fn finish_reasons(response: &Value) -> Vec<&str> {
    ["/stop_reason", "/delta/stop_reason"]
        .iter()
        .filter_map(|p| response.pointer(p).and_then(Value::as_str))
        .collect()
}

/// A message's `usage`, a `message_delta` event's `usage` or a `message_start` event's
/// `message.usage`. Input is `input_tokens` + cache reads + cache writes; cached is the reads.
pub(super) fn usage(response: &Value) -> Option<ReportedUsage> {
    let u = response
        .get("usage")
        .or_else(|| response.pointer("/message/usage"))
        .filter(|u| u.is_object())?;
    let read = n(u, "/cache_read_input_tokens");
    Some(ReportedUsage {
        input_tokens: n(u, "/input_tokens") + read + n(u, "/cache_creation_input_tokens"),
        output_tokens: n(u, "/output_tokens"),
        cached_input_tokens: read,
        reasoning_tokens: 0,
    })
}

/// A refusal in Anthropic's error shape: `{"type": "error", "error": {type, message}}` (with
/// our `code` beside them).
pub(super) fn refusal_body(refusal: &Refusal, kind: RefusalKind) -> Value {
    let kind_word = match kind {
        RefusalKind::Limit => "rate_limit_error",
        RefusalKind::Unavailable => "api_error",
        RefusalKind::ContextWindow => "invalid_request_error",
        RefusalKind::ModelNotFound => "not_found_error",
    };
    json!({
        "type": "error",
        "error": { "type": kind_word, "message": refusal.message, "code": refusal.http_code() }
    })
}

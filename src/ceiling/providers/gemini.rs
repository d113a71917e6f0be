//! Gemini `generateContent`: the config object in REST camelCase (`generationConfig`) or
//! snake_case (`generation_config`, the SDK's `config`), `candidates[].finishReason`, and
//! `usageMetadata` with thoughts billed as output.

use serde_json::{json, Value};

use super::refusal::RefusalKind;
use super::{n, ReportedUsage};
use crate::ceiling::fields::read_count;
use crate::error::Result;
use crate::guard::domain::refusal::Refusal;

/// The config object and its spelling (true: camelCase).
const CONTAINERS: [(&str, bool); 3] = [
    ("generationConfig", true),
    ("generation_config", false),
    ("config", false),
];

fn container(request: &Value) -> (&'static str, bool) {
    CONTAINERS
        .iter()
        .copied()
        .find(|(k, _)| request.get(*k).is_some_and(Value::is_object))
        .unwrap_or(CONTAINERS[0])
}

fn spelled(camel: bool, camel_case: &'static str, snake_case: &'static str) -> &'static str {
    if camel {
        camel_case
    } else {
        snake_case
    }
}

pub(super) fn output_path(request: &Value) -> Vec<&'static str> {
    let (c, camel) = container(request);
    vec![c, spelled(camel, "maxOutputTokens", "max_output_tokens")]
}

pub(super) fn choices(request: &Value) -> Result<u64> {
    let (c, camel) = container(request);
    let path = [c, spelled(camel, "candidateCount", "candidate_count")];
    Ok(read_count(request, &path, false)?.unwrap_or(1).max(1))
}

pub(super) fn thinking_path(request: &Value) -> Vec<&'static str> {
    let (c, camel) = container(request);
    vec![
        c,
        spelled(camel, "thinkingConfig", "thinking_config"),
        spelled(camel, "thinkingBudget", "thinking_budget"),
    ]
}

pub(super) fn finish_reasons(response: &Value) -> Vec<&str> {
    response
        .get("candidates")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(|c| {
                    c.get("finishReason")
                        .or_else(|| c.get("finish_reason"))
                        .and_then(Value::as_str)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `usageMetadata` (or `usage_metadata`): thoughts are billed as output, so output is
/// candidates + thoughts.
pub(super) fn usage(response: &Value) -> Option<ReportedUsage> {
    let (u, camel) = match response.get("usageMetadata") {
        Some(u) => (u, true),
        None => (response.get("usage_metadata")?, false),
    };
    if !u.is_object() {
        return None;
    }
    let f = |camel_case, snake_case| n(u, spelled(camel, camel_case, snake_case));
    let thoughts = f("/thoughtsTokenCount", "/thoughts_token_count");
    // The prompts of tool calls Gemini makes itself (code execution, search) are billed as
    // input and counted in totalTokenCount, apart from promptTokenCount.
    let tool_use = f("/toolUsePromptTokenCount", "/tool_use_prompt_token_count");
    Some(ReportedUsage {
        input_tokens: f("/promptTokenCount", "/prompt_token_count").saturating_add(tool_use),
        output_tokens: f("/candidatesTokenCount", "/candidates_token_count") + thoughts,
        cached_input_tokens: f("/cachedContentTokenCount", "/cached_content_token_count"),
        reasoning_tokens: thoughts,
    })
}

/// Google's error shape, `{"error": {"code", "message", "status", "details"}}`: the gRPC
/// status word of an HTTP status (`RESOURCE_EXHAUSTED` for 429, `UNAVAILABLE` 503,
/// `INVALID_ARGUMENT` 400, `NOT_FOUND` 404), and `details` with an `ErrorInfo` whose
/// `reason` is `code` (the guard's error code) when one is given.
pub(crate) fn error_body(status: u16, message: &str, code: Option<&str>) -> Value {
    let word = match status {
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        413 => "INVALID_ARGUMENT",
        504 => "DEADLINE_EXCEEDED",
        500..=599 => "INTERNAL",
        _ => "UNKNOWN",
    };
    let mut error = json!({ "code": status, "message": message, "status": word });
    if let Some(code) = code {
        error["details"] = json!([{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": code,
            "domain": "usage-guard",
        }]);
    }
    json!({ "error": error })
}

/// A refusal in Gemini's shape ([`error_body`]); a rate limit also says when to come back
/// in a `RetryInfo` (`retryDelay`, as Gemini's own 429 does).
pub(super) fn refusal_body(refusal: &Refusal, kind: RefusalKind) -> Value {
    let mut body = error_body(kind.status(), &refusal.message, Some(refusal.http_code()));
    let retry = refusal
        .retry_after_seconds
        .filter(|_| refusal.is_rate_limit());
    if let (RefusalKind::Limit, Some(seconds)) = (kind, retry) {
        if let Some(details) = body["error"]["details"].as_array_mut() {
            details.push(json!({
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": format!("{}s", seconds.max(1)),
            }));
        }
    }
    body
}

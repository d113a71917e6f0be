//! Gemini `generateContent`: the config object in REST camelCase (`generationConfig`) or
//! snake_case (`generation_config`, the SDK's `config`), `candidates[].finishReason`, and
//! `usageMetadata` with thoughts billed as output.

use serde_json::Value;

use super::{n, ReportedUsage};
use crate::ceiling::fields::read_count;
use crate::error::Result;

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
    Some(ReportedUsage {
        input_tokens: f("/promptTokenCount", "/prompt_token_count"),
        output_tokens: f("/candidatesTokenCount", "/candidates_token_count") + thoughts,
        cached_input_tokens: f("/cachedContentTokenCount", "/cached_content_token_count"),
        reasoning_tokens: thoughts,
    })
}

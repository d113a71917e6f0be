//! OpenAI: chat completions (`max_completion_tokens`, legacy `max_tokens`, `n`,
//! `choices[].finish_reason`), responses (`max_output_tokens`, `incomplete_details`) and
//! embeddings, with their usage fields.

use serde_json::{json, Value};

use super::refusal::RefusalKind;
use super::{n, ReportedUsage};
use crate::ceiling::api::Api;
use crate::ceiling::fields::read_count;
use crate::error::Result;
use crate::guard::domain::refusal::Refusal;

/// Chat keeps the legacy `max_tokens` only when the caller set it and not the newer field.
pub(super) fn output_path(request: &Value, api: Api) -> Vec<&'static str> {
    if api == Api::OpenAiResponses {
        return vec!["max_output_tokens"];
    }
    let legacy = request.get("max_tokens").is_some_and(|v| !v.is_null())
        && request
            .get("max_completion_tokens")
            .is_none_or(Value::is_null);
    vec![if legacy {
        "max_tokens"
    } else {
        "max_completion_tokens"
    }]
}

/// Chat reads both `max_tokens` and `max_completion_tokens`: with both set, they must agree
/// (an upstream may honour either), and the other one is set to the fitted value too.
pub(super) fn other_output_path(request: &Value, api: Api) -> Result<Option<&'static str>> {
    let set = |k: &str| request.get(k).is_some_and(|v| !v.is_null());
    if api != Api::OpenAiChat || !(set("max_tokens") && set("max_completion_tokens")) {
        return Ok(None);
    }
    let legacy = read_count(request, &["max_tokens"], false)?;
    let newer = read_count(request, &["max_completion_tokens"], false)?;
    if legacy != newer {
        return Err(crate::ceiling::fields::field_error(
            "request.max_tokens",
            &request["max_tokens"],
            &format!(
                "disagrees with request.max_completion_tokens ({}): both set the output \
                 maximum; send one of them, or the same value in both",
                request["max_completion_tokens"]
            ),
        ));
    }
    Ok(Some("max_tokens"))
}

/// Chat's `prediction` (Predicted Outputs) is refused at admission: its rejected tokens are
/// billed as output on top of the output maximum, which admission cannot bound, so calls
/// with one overspent any limit (four of them billed 80,132 tokens on a 5,000-a-day limit).
pub(super) fn check_bounded(request: &Value) -> Result<()> {
    match request.get("prediction").filter(|p| !p.is_null()) {
        None => Ok(()),
        Some(prediction) => Err(crate::ceiling::fields::field_error(
            "request.prediction",
            prediction,
            "is not accepted on a metered call: a prediction's rejected tokens are billed as \
             output beyond the output maximum, which admission cannot reserve; send the call \
             without it",
        )),
    }
}

pub(super) fn choices(request: &Value) -> Result<u64> {
    Ok(read_count(request, &["n"], false)?.unwrap_or(1).max(1))
}

/// Legacy completions: `max(n, best_of)` answers for each prompt (`prompt` may be a list of
/// strings or of token-id lists: one completion each).
pub(super) fn completion_choices(request: &Value) -> Result<u64> {
    let n = read_count(request, &["n"], false)?.unwrap_or(1).max(1);
    let best_of = read_count(request, &["best_of"], false)?.unwrap_or(1);
    let prompts = match request.get("prompt") {
        Some(Value::Array(items)) if items.iter().any(|i| i.is_string() || i.is_array()) => {
            items.len() as u64
        }
        _ => 1,
    };
    Ok(n.max(best_of).saturating_mul(prompts.max(1)))
}

/// Chat and legacy completions: every choice's `finish_reason` (a response or a stream chunk). Responses: the
/// `incomplete_details.reason` of a response or of a `response.incomplete` event.
pub(super) fn finish_reasons(response: &Value, api: Api) -> Vec<&str> {
    if api == Api::OpenAiResponses {
        return [
            "/incomplete_details/reason",
            "/response/incomplete_details/reason",
        ]
        .iter()
        .filter_map(|p| response.pointer(p).and_then(Value::as_str))
        .collect();
    }
    response
        .get("choices")
        .and_then(Value::as_array)
        .map(|c| {
            c.iter()
                .filter_map(|c| c.get("finish_reason").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

/// Chat and embeddings report `usage.prompt_tokens`/`completion_tokens` (the last stream
/// chunk too, with `include_usage`); responses report `usage.input_tokens`/`output_tokens`
/// (a stream's `response.completed` event carries the response).
pub(super) fn usage(response: &Value, api: Api) -> Option<ReportedUsage> {
    let u = match api {
        Api::OpenAiResponses => response
            .get("usage")
            .or_else(|| response.pointer("/response/usage")),
        _ => response.get("usage"),
    }
    .filter(|u| u.is_object())?;
    Some(if api == Api::OpenAiResponses {
        ReportedUsage {
            input_tokens: n(u, "/input_tokens"),
            output_tokens: n(u, "/output_tokens"),
            cached_input_tokens: n(u, "/input_tokens_details/cached_tokens"),
            reasoning_tokens: n(u, "/output_tokens_details/reasoning_tokens"),
        }
    } else {
        ReportedUsage {
            input_tokens: n(u, "/prompt_tokens"),
            output_tokens: n(u, "/completion_tokens"),
            cached_input_tokens: n(u, "/prompt_tokens_details/cached_tokens"),
            reasoning_tokens: n(u, "/completion_tokens_details/reasoning_tokens"),
        }
    })
}

/// A refusal in OpenAI's error shape: `{"error": {message, type, param, code}}`.
pub(super) fn refusal_body(refusal: &Refusal, kind: RefusalKind) -> Value {
    let code = refusal.http_code();
    let (kind_word, param) = match kind {
        RefusalKind::Limit => (code, Value::Null),
        RefusalKind::Unavailable => ("api_error", Value::Null),
        RefusalKind::ContextWindow => ("invalid_request_error", json!("messages")),
        RefusalKind::ModelNotFound => ("invalid_request_error", json!("model")),
    };
    json!({
        "error": {
            "message": refusal.message,
            "type": kind_word,
            "param": param,
            "code": code,
        }
    })
}

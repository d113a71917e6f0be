//! What the fallback ladder met on its way (candidates skipped, refused, failed), and the
//! answer once no candidate is left: 402 `budget_exhausted` or 503 in the endpoint's shape.

use axum::body::Body;
use axum::http::{Response, StatusCode};
use serde_json::json;

use super::proxy::App;
use super::shape::{json_response, set_headers, Endpoint};
use crate::ceiling::{gemini_error_body, HttpShape};
use crate::guard::domain::refusal::Refusal;

/// What the ladder has met so far.
#[derive(Default)]
pub(crate) struct Hops {
    /// `pre-attempt` until a candidate was sent and failed, then `post-attempt`.
    pub(crate) attempted: bool,
    /// Candidates admission refused (model, refusal).
    pub(crate) refused: Vec<(String, Refusal)>,
    /// The earliest instant a skipped candidate may take calls again.
    pub(crate) earliest: Option<i64>,
    /// The last failed attempt's answer.
    pub(crate) failed: Option<Response<Body>>,
}

impl Hops {
    /// Notes a candidate skipped until `until`.
    pub(crate) fn skip(&mut self, until: i64) {
        self.earliest = Some(self.earliest.map_or(until, |e| e.min(until)));
    }

    /// `X-Model-Resolution` of a call asked for `asked` and served by `model`.
    pub(crate) fn resolution(&self, asked: &str, model: &str) -> String {
        let stage = if self.attempted {
            "post-attempt"
        } else {
            "pre-attempt"
        };
        format!("fallback({asked} -> {model}, {stage}, unavailable)")
    }
}

/// The answer once no candidate is left: 402 `budget_exhausted` when admission refused
/// one (none was affordable), else the last failed attempt's answer, else 503 (every
/// candidate unavailable) with `Retry-After` the earliest that may take calls again.
pub(crate) fn exhausted(app: &App, endpoint: Endpoint, model: &str, hops: Hops) -> Response<Body> {
    if !hops.refused.is_empty() {
        let why: Vec<String> = hops
            .refused
            .iter()
            .map(|(m, r)| format!("{m}: {}", r.message))
            .collect();
        let message = format!(
            "The model {model:?} is unavailable and no affordable fallback remains ({})",
            why.join("; ")
        );
        let mut response = shaped(
            endpoint.shape,
            StatusCode::PAYMENT_REQUIRED,
            ("insufficient_quota", "budget_exhausted", "billing_error"),
            &message,
        );
        set_headers(
            &mut response,
            vec![("x-should-retry".into(), "false".into())],
        );
        return response;
    }
    if let Some(failed) = hops.failed {
        return failed;
    }
    let now = app.guard.clock().now_ms();
    let wait = hops
        .earliest
        .map_or(1, |e| ((e - now).max(0) + 999) / 1000)
        .max(1);
    let message = format!(
        "The model {model:?} is unavailable (its provider's breaker is open or its credential \
         cools down) and no fallback is available; retry in {wait} s"
    );
    let mut response = shaped(
        endpoint.shape,
        StatusCode::SERVICE_UNAVAILABLE,
        ("api_error", "provider_unavailable", "overloaded_error"),
        &message,
    );
    set_headers(
        &mut response,
        vec![("retry-after".into(), wait.to_string())],
    );
    response
}

/// An error in `shape`: (OpenAI type, OpenAI code, Anthropic type).
fn shaped(
    shape: HttpShape,
    status: StatusCode,
    words: (&str, &str, &str),
    message: &str,
) -> Response<Body> {
    let (kind, code, anthropic) = words;
    let body = match shape {
        HttpShape::OpenAi => json!({
            "error": {"message": message, "type": kind, "param": null, "code": code}
        }),
        HttpShape::Anthropic => json!({
            "type": "error", "error": {"type": anthropic, "message": message}
        }),
        HttpShape::Ollama => json!({ "error": message, "code": code }),
        HttpShape::Gemini => gemini_error_body(status.as_u16(), message, Some(code)),
    };
    json_response(status, &body)
}

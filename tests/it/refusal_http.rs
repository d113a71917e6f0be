//! Refusals in each provider's HTTP error shape.

use serde_json::json;
use usage_guard::{HttpShape, LimitType, Metric, Reason, Refusal, Window};

fn refusal(window: Window, retry_after: Option<u64>) -> Refusal {
    Refusal {
        reason: Reason::LimitReached,
        limit_type: Some(LimitType::Direct),
        metric: Some(Metric::Tokens),
        amount: Some(100),
        window: Some(window),
        resets_at: None,
        retry_after_seconds: retry_after,
        message: "no".into(),
    }
}

fn header<'a>(h: &'a usage_guard::HttpRefusal, name: &str) -> Option<&'a str> {
    h.headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn a_minute_rule_is_a_rate_limit_with_retry_after() {
    let http = refusal(Window::Sliding { seconds: 60 }, Some(7)).to_http(HttpShape::OpenAi);
    assert_eq!(http.status, 429);
    assert_eq!(header(&http, "retry-after"), Some("7"));
    assert_eq!(header(&http, "x-should-retry"), None);
    assert_eq!(
        http.body,
        json!({"error": {"message": "no", "type": "rate_limit_exceeded", "param": null, "code": "rate_limit_exceeded"}})
    );
    // A wait longer than a minute also tells SDK clients not to hold the request.
    let long = refusal(Window::Sliding { seconds: 3600 }, Some(61)).to_http(HttpShape::OpenAi);
    assert_eq!(header(&long, "x-should-retry"), Some("false"));
}

#[test]
fn a_day_rule_is_not_retried_and_unavailable_is_503() {
    let day = refusal(Window::Calendar(usage_guard::CalendarUnit::Day), Some(3600));
    let http = day.to_http(HttpShape::Anthropic);
    assert_eq!((http.status, header(&http, "retry-after")), (429, None));
    assert_eq!(header(&http, "x-should-retry"), Some("false"));
    assert_eq!(
        http.body,
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "no", "code": "usage_limit_reached"}})
    );
    let down = Refusal::unavailable().to_http(HttpShape::Ollama);
    assert_eq!(down.status, 503);
    assert_eq!(
        down.body,
        json!({"error": "Usage limits cannot be checked right now"})
    );
    let down = Refusal::unavailable().to_http(HttpShape::OpenAi);
    assert_eq!(down.body["error"]["code"], "usage_limits_unavailable");
}

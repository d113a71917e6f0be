//! The headers of a call, both ways. Allowlists: what of a caller's headers goes to the
//! provider (the API version; the headers that pick the operator's account only for keys
//! allowed them), and what of a provider's answer reaches the caller (the content's type and
//! encoding, the request id, when to retry): nothing of the operator's account (cookies,
//! organization, project, the account's rate limits) leaks out. The rate-limit headers a
//! caller sees are the gateway's own: OpenAI's `x-ratelimit-*`, Anthropic's
//! `anthropic-ratelimit-*`, the IETF `RateLimit-Policy` / `RateLimit` fields (written by
//! `domain::ratelimit`, with their `qu` units), and `X-Usage-Restriction` for a fitted call.
//! Each kind of rate-limit header reports the tightest rule of its metric (requests, tokens;
//! cost in the IETF fields only); a metric no rule counts gets no header.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response};

use crate::ceiling::HttpShape;
use crate::guard::domain::clock::{iso8601, Millis};
use crate::guard::domain::policy::{GatewayKey, ACCOUNT_HEADERS};
use crate::guard::domain::ratelimit::{self, Reported};
use crate::guard::domain::refusal::Refusal;
use crate::guard::domain::rule::Metric;
use crate::guard::domain::view::UsageView;

/// The caller's headers every call passes on: the API version its SDK speaks.
const TO_UPSTREAM: [&str; 1] = ["anthropic-version"];

/// The headers of a provider's answer a caller sees: the content's type and encoding, the
/// provider's request id, and when to retry an error passed through. Every other header
/// (cookies, `openai-organization`, `openai-project`, the upstream account's `x-ratelimit-*`
/// and `anthropic-ratelimit-*`, anything a provider adds later) stays with the gateway.
const FROM_UPSTREAM: [&str; 8] = [
    "content-type",
    "content-encoding",
    "cache-control",
    "x-request-id",
    "request-id",
    "retry-after",
    "retry-after-ms",
    "x-should-retry",
];

/// The caller's headers to send the provider: [`TO_UPSTREAM`]'s, and those of
/// [`ACCOUNT_HEADERS`] (which pick the operator's organization, project or beta features,
/// and so who is invoiced for what) that the key's `pass_headers` lists.
pub(crate) fn to_upstream(
    caller: &HeaderMap,
    key: &GatewayKey,
) -> Vec<(&'static str, HeaderValue)> {
    let allowed = ACCOUNT_HEADERS
        .iter()
        .filter(|h| key.pass_headers.iter().any(|p| p == *h));
    TO_UPSTREAM
        .iter()
        .chain(allowed)
        .filter_map(|name| Some((*name, caller.get(*name)?.clone())))
        .collect()
}

/// Whether a header of a provider's answer (`name` in lowercase) reaches the caller.
pub(crate) fn from_upstream(name: &str) -> bool {
    FROM_UPSTREAM.contains(&name)
}

/// The tightest requests, tokens and cost rule of a usage view.
pub(crate) fn tightest(view: &UsageView) -> Vec<Reported> {
    ratelimit::tightest(view.rules.iter().chain(&view.ceilings).map(|r| Reported {
        metric: r.metric,
        window: Some(r.window),
        limit: r.amount,
        remaining: r.left,
        resets_at: r.resets_at,
    }))
}

/// The rule a refusal names, as the headers report it (nothing left).
pub(crate) fn refused(refusal: &Refusal) -> Vec<Reported> {
    match (refusal.metric, refusal.window, refusal.amount) {
        (Some(metric), Some(window), Some(limit)) if ratelimit::REPORTED.contains(&metric) => {
            vec![Reported {
                metric,
                window: Some(window),
                limit,
                remaining: 0,
                resets_at: refusal.resets_at,
            }]
        }
        _ => Vec::new(),
    }
}

/// `1h2m3s`, `4m0s`, `7s`: OpenAI's reset durations.
fn duration(seconds: u64) -> String {
    let (h, m, s) = (seconds / 3600, seconds % 3600 / 60, seconds % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

/// The headers for `rules` in `shape`, `now` being the time of the answer.
pub(crate) fn rate_limit(
    rules: &[Reported],
    shape: HttpShape,
    now: Millis,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for r in rules {
        // The vendors' own headers know requests and tokens; cost is in the IETF fields only.
        let word = match r.metric {
            Metric::Requests => "requests",
            Metric::Tokens => "tokens",
            _ => continue,
        };
        match shape {
            HttpShape::OpenAi | HttpShape::Ollama | HttpShape::Gemini => {
                out.push((format!("x-ratelimit-limit-{word}"), r.limit.to_string()));
                out.push((
                    format!("x-ratelimit-remaining-{word}"),
                    r.remaining.to_string(),
                ));
                if let Some(s) = r.reset_seconds(now) {
                    out.push((format!("x-ratelimit-reset-{word}"), duration(s)));
                }
            }
            HttpShape::Anthropic => {
                out.push((
                    format!("anthropic-ratelimit-{word}-limit"),
                    r.limit.to_string(),
                ));
                out.push((
                    format!("anthropic-ratelimit-{word}-remaining"),
                    r.remaining.to_string(),
                ));
                if let Some(at) = r.resets_at {
                    out.push((format!("anthropic-ratelimit-{word}-reset"), iso8601(at)));
                }
            }
        }
    }
    out.extend(ratelimit::fields(rules, now));
    out
}

/// `X-Usage-Restriction` for a call whose output maximum the ceiling lowered: the rule
/// closest to its amount and the output maximum sent.
pub(crate) fn restriction(view: &UsageView, max_output_tokens: Option<u64>) -> String {
    let mut parts = Vec::new();
    if let Some(r) = &view.restriction {
        parts.push(format!("restricted_by={}", r.restricted_by.name()));
        parts.push(format!("metric={}", r.metric.as_str()));
        parts.push(format!("window=\"{}\"", r.window));
        parts.push(format!("current_value={}", r.current_value));
        parts.push(format!("max_value={}", r.max_value));
    }
    if let Some(m) = max_output_tokens {
        parts.push(format!("max_output_tokens={m}"));
    }
    parts.join("; ")
}

/// The provider's status and the headers of its answer a caller may see
/// ([`from_upstream`]), for the answer.
pub(crate) fn head(upstream: &reqwest::Response) -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = upstream.status();
    // Room for what passes and the gateway's own headers (`rate_limit`, the marks), so the
    // map is not regrown while they are added.
    let headers = response.headers_mut();
    headers.reserve(24);
    for (name, value) in upstream.headers() {
        if from_upstream(name.as_str()) {
            // The same types on both sides: a name and a value are shared, not copied.
            headers.append(name.clone(), value.clone());
        }
    }
    response
}

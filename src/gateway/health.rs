//! Provider health in the gateway: which credential an upstream calls with, what an answer
//! means for health, `POST /admin/providers/{id}/probe` (a one-token call, recorded), and
//! the health lines of `GET /metrics`.

use std::fmt::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Value};

use super::admin;
use super::proxy::App;
use super::shape::json_response;
use super::upstream;
use crate::guard::domain::clock::iso8601;
use crate::guard::domain::health::{BreakerState, HealthSnapshot, Outcome};
use crate::guard::domain::policy::{Provider, Upstream};
use crate::guard::engine::guard::Guard;

/// The credential an upstream calls with: its `api_key_env` (the variable's name, never the
/// key), or `default` for an upstream that sends none.
pub(crate) fn credential(upstream: &Upstream) -> String {
    upstream
        .api_key_env
        .clone()
        .unwrap_or_else(|| "default".to_string())
}

/// An answer's headers as (name, value) pairs, for a cooldown's timing.
pub(crate) fn header_pairs(headers: &reqwest::header::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(n, v)| Some((n.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect()
}

/// What an answer with `status` and error `body` means for health (the body's first 4 KiB
/// are read for a billing error code).
pub(crate) fn outcome(status: u16, body: &[u8]) -> Outcome {
    if (200..400).contains(&status) {
        return Outcome::Success;
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(4096)]);
    Outcome::classify(Some(status), Some(&text))
}

/// The one-token call a probe sends to `provider`'s upstream, with the model it names.
fn probe_call(app: &App, provider: Provider) -> (&'static str, Value) {
    let policy = app.guard.policy();
    let model = policy
        .models
        .iter()
        .find(|m| m.provider == provider)
        .map(|m| m.id.to_string());
    let ping = json!([{"role": "user", "content": "ping"}]);
    match provider {
        Provider::Anthropic => (
            "/v1/messages",
            json!({"model": model.unwrap_or_else(|| "claude-haiku-4-5".into()),
                   "messages": ping, "max_tokens": 1}),
        ),
        Provider::Ollama => (
            "/api/chat",
            json!({"model": model.unwrap_or_else(|| "llama3.2".into()), "messages": ping,
                   "stream": false, "options": {"num_predict": 1}}),
        ),
        _ => (
            "/v1/chat/completions",
            json!({"model": model.unwrap_or_else(|| "gpt-4o-mini".into()), "messages": ping,
                   "max_tokens": 1}),
        ),
    }
}

/// `POST /admin/providers/{id}/probe`: a one-token call to the provider's upstream (sent
/// even while its breaker is open: a probe is how an operator checks), its outcome recorded
/// like any call's; answers the outcome and the provider's health after it.
pub(crate) async fn probe(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response<Body> {
    if let Some(refused) = admin::refused(&app, &headers) {
        return refused;
    }
    let policy = app.guard.policy();
    let Some(upstream) = id
        .parse::<Provider>()
        .ok()
        .and_then(|p| policy.providers.iter().find(|u| u.provider == p))
        .cloned()
    else {
        let message = format!("no upstream for the provider {id:?} (the policy's [providers.*])");
        return json_response(StatusCode::NOT_FOUND, &json!({"error": message}));
    };
    let (path, body) = probe_call(&app, upstream.provider);
    let request = upstream::request(&app.client(), &upstream, path, &[]);
    let started = Instant::now();
    let sent = tokio::time::timeout(
        Duration::from_secs(30),
        request.body(body.to_string()).send(),
    )
    .await;
    let latency_ms = started.elapsed().as_millis() as u64;
    let (status, outcome, answer_headers) = match sent {
        Ok(Ok(r)) => {
            let status = r.status().as_u16();
            let pairs = header_pairs(r.headers());
            let bytes = r.bytes().await.unwrap_or_default();
            (Some(status), outcome(status, &bytes), pairs)
        }
        _ => (None, Outcome::Retryable, Vec::new()),
    };
    let provider = upstream.provider.as_str();
    let health = app.guard.health();
    let credential = credential(&upstream);
    // The operator's probe is a caller of its own.
    health
        .record(
            provider,
            &credential,
            "admin probe",
            outcome,
            &answer_headers,
        )
        .await;
    let snapshot = health.snapshot();
    json_response(
        StatusCode::OK,
        &json!({
            "provider": provider,
            "model": body["model"],
            "status": status,
            "outcome": outcome.as_str(),
            "latency_ms": latency_ms,
            "health": provider_json(&snapshot, provider),
        }),
    )
}

/// One provider's breaker and cooling credentials, as JSON.
fn provider_json(snapshot: &HealthSnapshot, provider: &str) -> Value {
    let breaker = snapshot
        .breakers
        .iter()
        .find(|(p, _)| p == provider)
        .map_or(BreakerState::Closed, |(_, s)| *s);
    let open_until = match breaker {
        BreakerState::Open { until } => Some(iso8601(until)),
        _ => None,
    };
    let cooled: Vec<Value> = snapshot
        .cooled
        .iter()
        .filter(|c| c.provider == provider)
        .map(|c| json!({"credential": c.credential, "reason": c.reason.as_str(), "until": iso8601(c.until)}))
        .collect();
    json!({"breaker": breaker.as_str(), "open_until": open_until, "cooled_credentials": cooled})
}

/// The health lines of `GET /metrics`: each provider's breaker state (one series per state,
/// 1 for the current one), each cooling credential, and the cooldowns started.
pub(crate) fn metrics_text(guard: &Guard) -> String {
    let snapshot = guard.health().snapshot();
    let mut out = String::new();
    let _ = writeln!(out, "# TYPE usage_guard_provider_breaker_state gauge");
    for (provider, state) in &snapshot.breakers {
        for word in ["closed", "open", "half_open"] {
            let on = u8::from(state.as_str() == word);
            let _ = writeln!(
                out,
                "usage_guard_provider_breaker_state{{provider=\"{provider}\",state=\"{word}\"}} {on}"
            );
        }
    }
    let _ = writeln!(out, "# TYPE usage_guard_provider_credential_cooled gauge");
    for c in &snapshot.cooled {
        let _ = writeln!(
            out,
            "usage_guard_provider_credential_cooled{{provider=\"{}\",credential=\"{}\",reason=\"{}\"}} 1",
            c.provider,
            c.credential.replace('\\', "\\\\").replace('"', "\\\""),
            c.reason.as_str()
        );
    }
    let _ = writeln!(
        out,
        "# TYPE usage_guard_provider_credential_cooled_total counter"
    );
    for ((provider, reason), n) in &snapshot.cooled_total {
        let _ = writeln!(
            out,
            "usage_guard_provider_credential_cooled_total{{provider=\"{provider}\",reason=\"{reason}\"}} {n}"
        );
    }
    out
}

//! One model call through the gateway: key → body → admission (prompt counted, output
//! maximum fitted) → the provider → the answer relayed and billed (the ladder of candidates
//! that drives these steps is `fallback`'s). Every refusal and error answers in the
//! endpoint's provider shape, before the provider sees the call.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Response, StatusCode};
use bytes::Bytes;
use serde_json::{json, Value};

use super::conn::is_body_timeout;
use super::headers::{rate_limit, refused};
use super::keys;
use super::metrics::Metrics;
use super::otel::Otel;
use super::relay::Call;
use super::shape::{json_response, set_headers, Endpoint, Problem};
use crate::error::Error;
use crate::guard::domain::policy::{GatewayKey, Upstream};
use crate::guard::domain::refusal::Refusal;
use crate::guard::engine::guard::Guard;
use crate::guard::engine::settle::ticket::BillInfo;

/// What every request of one gateway shares.
pub(crate) struct App {
    pub(crate) guard: Guard,
    /// The upstreams the gateway started with: where each provider's calls go and which
    /// environment variable holds its key. The admin API cannot change them (a restart on
    /// a new policy file can), so its token never reaches a credential or host it was not
    /// given.
    pub(crate) upstreams: Vec<Upstream>,
    /// The client of threads that cannot build their own ([`App::client`]).
    pub(crate) client: reqwest::Client,
    pub(crate) metrics: Arc<Metrics>,
    /// The OTLP export (`[gateway.otel]`), when configured.
    pub(crate) otel: Option<Arc<Otel>>,
    /// Set when shutting down: new calls are refused (503), running ones finish.
    pub(crate) draining: AtomicBool,
    /// Model calls running, including those whose client went away (their provider still
    /// works): a shutdown waits for them, up to `gateway.drain_seconds`.
    pub(crate) calls: AtomicUsize,
}

thread_local! {
    /// This thread's upstream client: a pooled connection is driven on the thread that
    /// opened it, so each serving thread keeps its own pool (no hand-off to another thread
    /// per call). `None` when it could not be built (the shared one serves).
    static CLIENT: std::cell::OnceCell<Option<reqwest::Client>> =
        const { std::cell::OnceCell::new() };
}

impl App {
    /// The upstream HTTP client for a call on this thread.
    pub(crate) fn client(&self) -> reqwest::Client {
        CLIENT
            .with(|c| c.get_or_init(|| super::upstream::client().ok()).clone())
            .unwrap_or_else(|| self.client.clone())
    }
}

pub(crate) fn bad(endpoint: Endpoint, message: &str) -> Response<Body> {
    Problem::BadRequest.response(endpoint.shape, message)
}

/// What a call whose body came too slowly is told.
const BODY_LATE: &str = "The request body did not arrive in time (gateway.body_timeout_seconds)";

/// The request's body as a JSON object (no key twice: `body::parse`) with its model and
/// whether it streams.
async fn read_request(
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Body,
    limit: u64,
) -> Result<(Value, String, bool), Response<Body>> {
    let too_large = || {
        Problem::TooLarge.response(
            endpoint.shape,
            &format!("The request body is larger than {limit} bytes (gateway.max_body_bytes)"),
        )
    };
    let declared = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let bytes =
        axum::body::to_bytes(body, limit as usize)
            .await
            .map_err(|e| match is_body_timeout(e.into_inner().as_ref()) {
                true => Problem::RequestTimeout.response(endpoint.shape, BODY_LATE),
                false => too_large(),
            })?;
    let request: Value = match super::body::parse(&bytes) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return Err(bad(endpoint, "The request body must be a JSON object")),
        Err(e) => {
            return Err(bad(
                endpoint,
                &format!("The request body is not valid JSON: {e}"),
            ))
        }
    };
    let model = match request.get("model") {
        Some(Value::String(m)) if !m.trim().is_empty() => m.clone(),
        Some(other) => {
            return Err(bad(
                endpoint,
                &format!("`model` must be a non-empty string (got {other})"),
            ))
        }
        None => return Err(bad(endpoint, "`model` is required")),
    };
    let stream = match request.get("stream") {
        None | Some(Value::Null) => endpoint.streams_by_default,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(bad(
                endpoint,
                &format!("`stream` must be true or false (got {other})"),
            ))
        }
    };
    Ok((request, model, stream))
}

/// The refusal as the endpoint's provider answers it, with the rate-limit headers.
pub(crate) fn refusal_response(app: &App, refusal: &Refusal, endpoint: Endpoint) -> Response<Body> {
    let http = refusal.to_http(endpoint.shape);
    let mut response = json_response(
        StatusCode::from_u16(http.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
        &http.body,
    );
    let now = app.guard.clock().now_ms();
    let mut extra = http.headers;
    extra.extend(rate_limit(&refused(refusal), endpoint.shape, now));
    set_headers(&mut response, extra);
    response
}

/// What the ledger row of a gateway call records beside the usage: the key's label (never
/// the key), its credential and attributes, and the endpoint.
pub(crate) fn bill_info(key: &GatewayKey, endpoint: Endpoint, stream: bool) -> BillInfo {
    let mut meta = json!({
        "gateway": endpoint.path,
        "key": key.label,
        "stream": stream,
    });
    if let Some(c) = &key.credential {
        meta["credential"] = json!(c);
    }
    if !key.teams.is_empty() {
        meta["teams"] = json!(key.teams);
    }
    if !key.attributes.is_empty() {
        meta["attributes"] = json!(key.attributes);
    }
    BillInfo {
        request_id: None,
        metadata: Some(meta),
    }
}

/// The attributes a key's calls are admitted with, for the generic rules: `endpoint` (the
/// path called), the key's `credential`, each of its `teams` as `team` (a rule on `team`
/// matches any of them; `count_by = ["team"]` counts the least), and its `attributes`.
pub(crate) fn attributes(key: &GatewayKey, endpoint: Endpoint) -> Vec<(String, String)> {
    let mut out = vec![("endpoint".to_string(), endpoint.path.to_string())];
    if let Some(c) = &key.credential {
        out.push(("credential".into(), c.clone()));
    }
    out.extend(key.teams.iter().map(|t| ("team".to_string(), t.clone())));
    out.extend(key.attributes.iter().map(|(k, v)| (k.clone(), v.clone())));
    out
}

/// The body to send: the request as parsed and admitted (never the caller's bytes, whose
/// other readings admission did not see), with the keys the fit changed set, its fields and
/// their order otherwise kept; and `stream_options.include_usage` when the gateway asks for
/// the stream's usage.
pub(crate) fn outgoing(mut request: Value, call: &Call, ask_usage: bool) -> Bytes {
    let mut changes = call.ticket().fitted_changes().unwrap_or_default();
    if call.ticket().degraded_from().is_some() {
        // A `degrade` rule admitted its `degrade_to` model instead: that one is sent.
        changes.insert("model".into(), json!(call.ticket().model()));
    }
    if let Value::Object(map) = &mut request {
        map.extend(changes);
        if ask_usage {
            let options = map.entry("stream_options").or_insert_with(|| json!({}));
            if !options.is_object() {
                *options = json!({});
            }
            options["include_usage"] = json!(true);
        }
    }
    Bytes::from(serde_json::to_vec(&request).unwrap_or_default())
}

/// A call whose key, body, model and upstream were checked.
pub(crate) struct Checked {
    pub(crate) key: GatewayKey,
    /// The body as parsed (the fallback ladder takes it: `Value::Null` after).
    pub(crate) request: Value,
    pub(crate) model: String,
    pub(crate) stream: bool,
    pub(crate) upstream: Upstream,
    pub(crate) timeout: Duration,
    /// How long a streamed answer may take to start (`gateway.upstream_first_byte_seconds`).
    pub(crate) first_byte: Duration,
}

/// Checks a call before admission: the gateway is running, the key, the body, the key may
/// call the model, and the model's provider has an upstream.
pub(crate) async fn check(
    app: &App,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Body,
) -> Result<Checked, Response<Body>> {
    if app.draining.load(Ordering::Relaxed) {
        let message = "The gateway is shutting down";
        return Err(Problem::Unavailable.response(endpoint.shape, message));
    }
    let policy = app.guard.policy();
    let key = match keys::authenticate(&policy, headers) {
        Ok(k) => k.clone(),
        Err(message) => return Err(Problem::Unauthorized.response(endpoint.shape, message)),
    };
    let limit = policy.gateway.max_body_bytes;
    let (request, model, stream) = read_request(endpoint, headers, body, limit).await?;
    // The one model resolution of admission: another name of a declared model is that
    // model (for the key's list and the provider too); an undeclared one is refused here,
    // before it reaches any upstream, unless the policy allows undeclared models.
    let spec = match policy.resolve_model(&model) {
        Ok(spec) => spec,
        Err(Error::Refused(refusal)) => return Err(refusal_response(app, &refusal, endpoint)),
        Err(_) => None,
    };
    let admitted = spec.as_ref().map_or(model.as_str(), |m| &*m.id);
    if let Some(models) = key
        .models
        .as_ref()
        .filter(|m| !m.iter().any(|k| k == admitted))
    {
        let message = format!(
            "This key may not call the model {model:?}; it may call: {}",
            models.join(", ")
        );
        return Err(Problem::Forbidden.response(endpoint.shape, &message));
    }
    // A declared model's provider; an undeclared one (allowed, even if a price table knows
    // it) goes to the endpoint's own provider, as its body is in that provider's shape.
    let provider = policy
        .model(&model)
        .map(|m| m.provider)
        .unwrap_or(endpoint.provider());
    let upstream = policy.providers.iter().find(|u| u.provider == provider);
    let Some(upstream) = upstream.cloned() else {
        let word = provider.as_str();
        let message = format!(
            "No upstream for the provider {word}: add [providers.{word}] base_url = \"...\" \
             to the policy"
        );
        return Err(Problem::BadGateway.response(endpoint.shape, &message));
    };
    Ok(Checked {
        key,
        request,
        model,
        stream,
        upstream,
        timeout: Duration::from_secs(policy.gateway.upstream_timeout_seconds),
        first_byte: Duration::from_secs(policy.gateway.upstream_first_byte_seconds),
    })
}

/// A model call counted in [`App::calls`] while it runs, or while its stream is read on
/// after its client left: a stop's drain waits for it (up to `gateway.drain_seconds`).
pub(crate) struct Running(Arc<App>);

impl Running {
    pub(crate) fn new(app: Arc<App>) -> Self {
        app.calls.fetch_add(1, Ordering::AcqRel);
        Running(app)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, Ordering::AcqRel);
    }
}

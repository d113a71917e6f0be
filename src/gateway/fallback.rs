//! The fallback ladder of one model call: the model asked for, then its policy `fallbacks`,
//! in order. Each hop re-derives the next candidate against live health (a provider whose
//! breaker is open or whose credential cools is skipped), and every candidate passes
//! admission again (a fallback that would overspend is skipped: never spend through a
//! fallback what the first model could not). A candidate whose provider fails retryably
//! (5xx, timeout, connection fault) or limits the rate hands the call to the next one while
//! nothing was relayed yet. Each answer's outcome is recorded in the guard's health.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Response};
use serde_json::{json, Value};

use super::fallback_hops::{exhausted, Hops};
use super::forward::Forward;
use super::headers::{rate_limit, restriction, tightest, to_upstream};
use super::health::credential;
use super::otel_ids::now_ns;
use super::proxy::{
    attributes, bad, bill_info, check, outgoing, refusal_response, App, Checked, Running,
};
use super::relay::Call;
use super::shape::{set_headers, Endpoint, Problem};
use crate::error::Error;
use crate::guard::domain::health::Outcome;
use crate::guard::domain::policy::{Policy, Upstream};
use crate::guard::domain::refusal::Refusal;
use crate::guard::domain::view::UsageView;
use crate::guard::engine::admit::admission::AdmitRequest;

/// Serves one model call at `endpoint`, and counts its answer.
pub(crate) async fn model_call(
    app: Arc<App>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Body,
) -> Response<Body> {
    let metrics = app.metrics.clone();
    // The call runs in its own task: a client that goes away while the provider works does
    // not cancel it, so what the provider did is still billed. It stays on this thread's
    // runtime (the gateway's serving threads: one hop less than another runtime).
    let running = Running::new(app.clone());
    let task = tokio::spawn(async move {
        let _running = running;
        call(app, endpoint, headers, body).await
    });
    let response = task
        .await
        .unwrap_or_else(|_| Problem::BadGateway.response(endpoint.shape, "the call failed"));
    metrics.count(
        "usage_guard_gateway_requests",
        &[
            ("endpoint", endpoint.path),
            ("status", response.status().as_str()),
        ],
    );
    response
}

/// The upstream of `model`'s provider (a model the policy does not list goes to the
/// endpoint's own provider).
fn upstream_for(policy: &Policy, model: &str, endpoint: Endpoint) -> Option<Upstream> {
    let provider = policy
        .model(model)
        .map(|m| m.provider)
        .unwrap_or(endpoint.provider());
    policy
        .providers
        .iter()
        .find(|u| u.provider == provider)
        .cloned()
}

/// The ladder: the model asked for, then its fallbacks the key may call.
fn ladder(policy: &Policy, checked: &Checked) -> Vec<String> {
    let may = |m: &str| {
        checked
            .key
            .models
            .as_ref()
            .is_none_or(|ms| ms.iter().any(|k| k == m))
    };
    let mut out = vec![checked.model.clone()];
    for (m, _) in policy.ladder(&checked.model).into_iter().skip(1) {
        if may(&m) && !out.contains(&m) {
            out.push(m);
        }
    }
    out
}

async fn call(app: Arc<App>, endpoint: Endpoint, headers: HeaderMap, body: Body) -> Response<Body> {
    let mut checked = match check(&app, endpoint, &headers, body).await {
        Ok(c) => c,
        Err(response) => return response,
    };
    // The body as the caller sent it: copied for each candidate but the last, which takes it.
    let mut original = Some(std::mem::take(&mut checked.request));
    let policy = app.guard.policy();
    let ladder = ladder(&policy, &checked);
    let mut hops = Hops::default();
    let health = app.guard.health();
    let attempt = Attempt {
        app: &app,
        endpoint,
        headers: &headers,
        checked: &checked,
    };
    for (i, model) in ladder.iter().enumerate() {
        let upstream = match i {
            0 => checked.upstream.clone(),
            _ => match upstream_for(&policy, model, endpoint) {
                Some(u) => u,
                None => continue,
            },
        };
        let (provider, cred) = (upstream.provider.as_str(), credential(&upstream));
        if let Err(u) = health.available(provider, &cred).await {
            hops.skip(u.until);
            continue;
        }
        let last = i + 1 == ladder.len();
        let request = with_model(&mut original, last, &checked.model, model);
        let admitted = attempt.admit(model, &request).await;
        let (call, upstream) = match admitted.map(|c| degraded(&policy, endpoint, c, upstream)) {
            Ok(Ok(sent)) => sent,
            Ok(Err((call, r))) => {
                call.release().await;
                if i == 0 {
                    return refusal_response(&app, &r, endpoint);
                }
                hops.refused.push((model.clone(), *r));
                continue;
            }
            Err(Error::Refused(r)) if i == 0 => return refusal_response(&app, &r, endpoint),
            Err(Error::Refused(r)) => {
                hops.refused.push((model.clone(), *r));
                continue;
            }
            Err(e) => return bad(endpoint, &e.to_string()),
        };
        let (provider, cred) = (upstream.provider.as_str(), credential(&upstream));
        if let Err(u) = health.take(provider, &cred).await {
            // Another call took the last half-open probe meanwhile.
            call.release().await;
            hops.skip(u.until);
            continue;
        }
        let served = Served {
            upstream: &upstream,
            resolution: (i > 0).then(|| hops.resolution(&checked.model, model)),
            last,
        };
        match attempt.send(served, call, request).await {
            Ok(response) => return response,
            Err(failed) => {
                hops.attempted = true;
                hops.failed = Some(failed);
            }
        }
    }
    exhausted(&app, endpoint, &checked.model, hops)
}

/// Where a call a `degrade` rule admitted on its `degrade_to` model goes: that model's
/// provider's upstream when it serves the endpoint as it is (no translation between APIs).
/// Otherwise the call comes back with the refusal of the model asked for, which stands.
fn degraded(
    policy: &Policy,
    endpoint: Endpoint,
    call: Call,
    upstream: Upstream,
) -> Result<(Call, Upstream), (Call, Box<Refusal>)> {
    if call.ticket().degraded_from().is_none() {
        return Ok((call, upstream));
    }
    let model = call.ticket().model();
    let provider = policy
        .model(model)
        .map_or(endpoint.provider(), |m| m.provider);
    if provider == upstream.provider {
        return Ok((call, upstream));
    }
    let served = endpoint.served_by(provider);
    match upstream_for(policy, model, endpoint).filter(|_| served) {
        Some(upstream) => Ok((call, upstream)),
        None => {
            log::info!(
                "gateway: the degrade_to model {model:?} is served by {} in another API than \
                 {} (or has no upstream): the refusal stands",
                provider.as_str(),
                endpoint.path
            );
            match call.ticket().degrade_refusal().cloned() {
                Some(refusal) => Err((call, Box::new(refusal))),
                None => Ok((call, upstream)),
            }
        }
    }
}

/// The caller's request with `model` in it (the `last` candidate takes `original`).
fn with_model(original: &mut Option<Value>, last: bool, asked: &str, model: &str) -> Value {
    let mut request = match last {
        true => original.take().unwrap_or_default(),
        false => original.clone().unwrap_or_default(),
    };
    if model != asked {
        request["model"] = json!(model);
    }
    request
}

/// The candidate a call is sent to.
struct Served<'a> {
    upstream: &'a Upstream,
    /// `X-Model-Resolution`, for a fallback.
    resolution: Option<String>,
    /// Whether no candidate follows (a failure is then passed on as it came).
    last: bool,
}

/// The headers that say who served a call: `X-Served-Provider`, and `X-Model-Resolution`
/// for a fallback.
fn marks(served: &Served<'_>) -> Vec<(String, String)> {
    let mut mark = vec![(
        "x-served-provider".to_string(),
        served.upstream.provider.as_str().to_string(),
    )];
    if let Some(r) = &served.resolution {
        mark.push(("x-model-resolution".into(), r.clone()));
    }
    mark
}

/// One candidate's attempt.
struct Attempt<'a> {
    app: &'a Arc<App>,
    endpoint: Endpoint,
    headers: &'a HeaderMap,
    checked: &'a Checked,
}

impl Attempt<'_> {
    /// Admits the call on `model` (its body `request`): a call ready to send.
    async fn admit(&self, model: &str, request: &Value) -> Result<Call, Error> {
        let (app, checked) = (self.app, self.checked);
        let (start_ns, started) = (now_ns(), std::time::Instant::now());
        let admitted = app
            .guard
            .admit(AdmitRequest {
                user: Some(checked.key.principal.to_string()),
                model: model.to_string(),
                request: Some((request.clone(), self.endpoint.api)),
                attributes: attributes(&checked.key, self.endpoint),
                ..AdmitRequest::default()
            })
            .await;
        let span = app.otel.as_ref().map(|otel| {
            let user = &checked.key.principal;
            let call = otel.call(self.endpoint, self.headers, user, model);
            let outcome = match &admitted {
                Ok(ticket) => Ok(ticket),
                Err(Error::Refused(r)) => Err(Some(&**r)),
                Err(_) => Err(None),
            };
            (
                otel.clone(),
                otel.admitted(call, start_ns, started.elapsed(), outcome),
            )
        });
        let info = bill_info(&checked.key, self.endpoint, checked.stream);
        Ok(Call::new(admitted?, info).traced(span))
    }

    /// Counts an admitted call (the guard counts fitted ones); `Some` (its output maximum)
    /// when the fit lowered it.
    fn admitted(&self, call: &Call) -> Option<Option<u64>> {
        let path = self.endpoint.path;
        let metrics = &self.app.metrics;
        metrics.count("usage_guard_gateway_admissions", &[("endpoint", path)]);
        call.ticket()
            .fitted()
            .filter(|f| f.lowered)
            .map(|f| f.max_output_tokens)
    }

    /// The gateway's rate-limit headers for the caller's tightest rules, and
    /// `X-Usage-Restriction` when the fit lowered the output maximum to `lowered`.
    fn limit_headers(
        &self,
        view: &UsageView,
        lowered: Option<Option<u64>>,
    ) -> Vec<(String, String)> {
        let now = self.app.guard.clock().now_ms();
        let mut headers = rate_limit(&tightest(view), self.endpoint.shape, now);
        if let Some(max) = lowered {
            headers.push(("x-usage-restriction".into(), restriction(view, max)));
        }
        headers
    }

    /// Sends the admitted call; `Err` with the failed answer when the provider failed in a
    /// way the next candidate may cure and one follows (the ticket is released).
    async fn send(
        &self,
        served: Served<'_>,
        call: Call,
        request: Value,
    ) -> Result<Response<Body>, Response<Body>> {
        let (app, endpoint, checked) = (self.app, self.endpoint, self.checked);
        let lowered = self.admitted(&call);
        let asked = request.pointer("/stream_options/include_usage") == Some(&Value::Bool(true));
        let ask_usage = checked.stream && endpoint.asks_stream_usage() && !asked;
        let send = outgoing(request, &call, ask_usage);
        let client = app.client();
        let bounds = app.guard.policy().gateway.bounds;
        let forward = Forward {
            app,
            client: &client,
            metrics: &app.metrics,
            endpoint,
            upstream: served.upstream,
            timeout: checked.timeout,
            first_byte: checked.first_byte,
            max_event: bounds.max_event_bytes as usize,
            max_answer: bounds.max_answer_bytes as usize,
        };
        let passed = to_upstream(self.headers, &checked.key);
        // The headers' view is read while the provider works.
        // A `degrade` rule admitted (and `outgoing` sends) its `degrade_to` model instead.
        let admitted = call.ticket().model().to_string();
        let view = app.guard.usage(Some(&checked.key.principal), &admitted);
        let sent = forward.send(&passed, send, checked.stream);
        let (view, answer) = tokio::join!(view, sent);
        let mark = marks(&served);
        let mut extra = mark.clone();
        if let Some(from) = call.ticket().degraded_from() {
            extra.push(("x-degraded".into(), format!("{from} -> {admitted}")));
        }
        if let Ok(view) = &view {
            extra.extend(self.limit_headers(view, lowered));
        }
        let provider = served.upstream.provider.as_str();
        let cred = credential(served.upstream);
        let health = app.guard.health();
        // Whose call this was: a breaker opens only on failures of more than one key.
        let caller = checked.key.label.as_str();
        let upstream = match answer {
            Ok(r) if r.status().is_success() => {
                health
                    .record(provider, &cred, caller, Outcome::Success, &[])
                    .await;
                let stream = checked.stream;
                return Ok(forward.answer(r, call, stream, ask_usage, extra).await);
            }
            Ok(r) => r,
            Err(why) => {
                if why.provider_failed() {
                    let retryable = Outcome::Retryable;
                    health.record(provider, &cred, caller, retryable, &[]).await;
                }
                let mut response = forward.unanswered(why, call).await;
                set_headers(&mut response, mark);
                return if served.last || !why.provider_failed() {
                    Ok(response)
                } else {
                    Err(response)
                };
            }
        };
        // The provider refused or failed: it used nothing we can bill.
        call.release().await;
        let (mut response, outcome) = forward.failed(upstream, health, caller).await;
        set_headers(&mut response, mark);
        let next_may_cure = matches!(
            outcome,
            Outcome::Retryable | Outcome::RateLimited | Outcome::Billing
        );
        if next_may_cure && !served.last {
            return Err(response);
        }
        Ok(response)
    }
}

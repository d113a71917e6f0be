//! The admin API (`/admin/...`), behind the token in the environment variable that
//! `gateway.admin_token_env` names: what is in force for a principal on a model, usage from
//! the ledger, the policy (read, and replaced only when valid), and recovery of the counters.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Response, StatusCode};
use axum::middleware::Next;
use serde_json::{json, Value};

use super::keys;
use super::proxy::App;
use super::shape::json_response;
use super::upstream;
use crate::error::Error;
use crate::guard::domain::clock::{iso8601, parse_iso8601};
use crate::guard::domain::policy::{key_digest, GatewayKey, Policy};
use crate::guard::domain::view::RuleView;
use crate::guard::ledger::{GroupBy, Ledger, UsageQuery};

type Params = Query<HashMap<String, String>>;

pub(crate) fn error(status: StatusCode, message: &str) -> Response<Body> {
    json_response(status, &json!({ "error": message }))
}

/// The admin token: the value of the variable `gateway.admin_token_env` names, without the
/// blanks around it (a caller's are trimmed too), when that leaves one.
pub(crate) fn admin_token(policy: &Policy) -> Option<String> {
    let var = policy.gateway.admin_token_env.as_deref()?;
    let token = std::env::var(var).ok()?;
    let token = token.trim();
    (!token.is_empty()).then(|| token.to_string())
}

/// Every `/admin` request is checked for the admin token before its handler reads anything
/// (a body read first would let anyone hold the server's memory, 2 MB a connection).
pub(crate) async fn gate(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Response<Body> {
    let path = request.uri().path();
    if path == "/admin" || path.starts_with("/admin/") {
        if let Some(answer) = refused(&app, request.headers()) {
            return answer;
        }
    }
    next.run(request).await
}

/// `None` when the request carries the admin token; else the answer to give.
pub(crate) fn refused(app: &App, headers: &HeaderMap) -> Option<Response<Body>> {
    let Some(token) = admin_token(&app.guard.policy()) else {
        let message = "The admin API is off: set gateway.admin_token_env in the policy";
        return Some(error(StatusCode::FORBIDDEN, message));
    };
    // Digests compared, so the comparison's time says nothing about the token.
    match keys::presented(headers) {
        Some(given) if key_digest(given) == key_digest(&token) => None,
        _ => Some(error(StatusCode::UNAUTHORIZED, "Incorrect admin token")),
    }
}

pub(crate) fn rule_json(r: &RuleView) -> Value {
    json!({
        "limit_type": r.limit_type.name(),
        "team": r.team,
        "per_person": r.per_person,
        "metric": r.metric.as_str(),
        "unit": r.metric.unit(),
        "window": r.window.to_string(),
        "amount": r.amount,
        "used": r.used,
        "reserved": r.reserved,
        "left": r.left,
        "resets_at": r.resets_at.map(iso8601),
    })
}

/// `GET /admin/control/effective?principal=...&model=...`: every rule that applies, with
/// used, reserved, left (in the rule's `unit`) and when it resets.
pub(crate) async fn effective(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Params,
) -> Response<Body> {
    if let Some(r) = refused(&app, &headers) {
        return r;
    }
    let (Some(principal), Some(model)) = (q.get("principal"), q.get("model")) else {
        return error(StatusCode::BAD_REQUEST, "give ?principal=...&model=...");
    };
    match app.guard.usage(Some(principal), model).await {
        Ok(view) => json_response(
            StatusCode::OK,
            &json!({
                "principal": principal,
                "model": model,
                "policy_version": app.guard.policy_version(),
                "source": {"type": view.source.kind.as_str(), "id": &*view.source.id},
                "rules": view.rules.iter().map(rule_json).collect::<Vec<_>>(),
                "ceilings": view.ceilings.iter().map(rule_json).collect::<Vec<_>>(),
                "restriction": view.restriction.map(|r| json!({
                    "restricted_by": r.restricted_by.name(),
                    "metric": r.metric.as_str(),
                    "unit": r.metric.unit(),
                    "window": r.window.to_string(),
                    "current_value": r.current_value,
                    "max_value": r.max_value,
                })),
            }),
        ),
        Err(Error::Refused(r)) => error(StatusCode::SERVICE_UNAVAILABLE, &r.message),
        Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

fn usage_query(q: &HashMap<String, String>) -> Result<UsageQuery, String> {
    let instant = |name: &str| -> Result<Option<i64>, String> {
        q.get(name)
            .map(|t| {
                parse_iso8601(t).ok_or(format!(
                    "{name}: {t:?} is not a date or an ISO 8601 instant"
                ))
            })
            .transpose()
    };
    let mut group_by = Vec::new();
    for word in q
        .get("group_by")
        .map(String::as_str)
        .unwrap_or("user,model")
        .split(',')
    {
        group_by.push(word.trim().parse::<GroupBy>().map_err(|_| {
            format!("group_by: {word:?} is not accepted; accepted: user, team, model, day")
        })?);
    }
    Ok(UsageQuery {
        user: q.get("user").cloned(),
        team: q.get("team").cloned(),
        model: q.get("model").cloned(),
        since: instant("since")?,
        until: instant("until")?,
        group_by,
    })
}

/// The guard's ledger for an admin request: `Err` with the answer when the token is wrong
/// (401) or there is no ledger (409).
pub(crate) fn admin_ledger(
    app: &App,
    headers: &HeaderMap,
) -> Result<Arc<dyn Ledger>, Box<Response<Body>>> {
    if let Some(r) = refused(app, headers) {
        return Err(Box::new(r));
    }
    app.guard.ledger().cloned().ok_or_else(|| {
        Box::new(error(
            StatusCode::CONFLICT,
            "The gateway has no ledger (--ledger)",
        ))
    })
}

/// `GET /admin/usage?user=&team=&model=&since=&until=&group_by=user,model`: from the ledger.
pub(crate) async fn usage(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Params,
) -> Response<Body> {
    let ledger = match admin_ledger(&app, &headers) {
        Ok(ledger) => ledger,
        Err(response) => return *response,
    };
    let query = match usage_query(&q) {
        Ok(query) => query,
        Err(message) => return error(StatusCode::BAD_REQUEST, &message),
    };
    let groups = match tokio::task::spawn_blocking(move || ledger.query(&query)).await {
        Ok(Ok(groups)) => groups,
        Ok(Err(e)) => return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "the ledger query failed"),
    };
    let groups: Vec<Value> = groups
        .iter()
        .map(|g| {
            let mut row = serde_json::Map::new();
            for (by, value) in &g.keys {
                row.insert(by.as_str().to_string(), json!(value));
            }
            for (name, n) in [
                ("requests", g.requests),
                ("input_tokens", g.input_tokens),
                ("cached_input_tokens", g.cached_input_tokens),
                ("output_tokens", g.output_tokens),
                ("reasoning_tokens", g.reasoning_tokens),
                ("tokens", g.tokens()),
                ("cost_micros", g.cost_micros),
                ("compute_ms", g.compute_ms),
            ] {
                row.insert(name.to_string(), json!(n));
            }
            Value::Object(row)
        })
        .collect();
    json_response(StatusCode::OK, &json!({ "groups": groups }))
}

fn policy_json(policy: &Policy, version: u64) -> Value {
    json!({
        "version": version,
        "models": policy.models.iter().map(|m| &*m.id).collect::<Vec<_>>(),
        "teams": policy.teams.iter().map(|t| &*t.id).collect::<Vec<_>>(),
        "providers": policy.providers.iter().map(|u| json!({
            "provider": u.provider.as_str(), "base_url": u.base_url, "api_key_env": u.api_key_env,
        })).collect::<Vec<_>>(),
        "keys": policy.gateway.keys.iter().map(|k| json!({
            "label": k.label, "principal": &*k.principal, "credential": k.credential,
        })).collect::<Vec<_>>(),
        "warnings": policy.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
    })
}

/// `GET /admin/policy`: a summary of the policy in force (never a key or its digest).
pub(crate) async fn get_policy(State(app): State<Arc<App>>, headers: HeaderMap) -> Response<Body> {
    if let Some(r) = refused(&app, &headers) {
        return r;
    }
    let policy = app.guard.policy();
    json_response(
        StatusCode::OK,
        &policy_json(&policy, app.guard.policy_version()),
    )
}

/// `PUT /admin/policy`: replaces the policy with the body (JSON, or TOML when the content
/// type says `toml`) if it is valid; else 400 with every error, the running one kept. A
/// policy whose `[providers]` differ from those the gateway started with is refused (403):
/// the admin token changes limits, keys and models, never where calls and credentials go.
pub(crate) async fn put_policy(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: String,
) -> Response<Body> {
    if let Some(r) = refused(&app, &headers) {
        return r;
    }
    let toml = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("toml"));
    let parsed = if toml {
        Policy::from_toml(&body)
    } else {
        Policy::from_json(&body)
    };
    if let Ok(policy) = &parsed {
        let moved = upstream::moved(&app.upstreams, &policy.providers);
        if !moved.is_empty() {
            log::warn!(
                "gateway: PUT /admin/policy refused: it changes where provider calls or \
                 credentials go ({})",
                moved
                    .iter()
                    .map(|f| f.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            return refused_policy(StatusCode::FORBIDDEN, &Error::Policy(moved));
        }
    }
    let checked = parsed.and_then(|p| upstream::check_keys(&p).map(|_| p));
    match checked {
        Ok(policy) => {
            app.guard.set_policy(policy);
            log::info!(
                "gateway: policy replaced (version {})",
                app.guard.policy_version()
            );
            let policy = app.guard.policy();
            json_response(
                StatusCode::OK,
                &policy_json(&policy, app.guard.policy_version()),
            )
        }
        Err(e) => invalid(&e),
    }
}

/// 400 with every error of an invalid policy (or key).
fn invalid(e: &Error) -> Response<Body> {
    refused_policy(StatusCode::BAD_REQUEST, e)
}

/// `status` with every error of a refused policy (or key): `{error, errors: [{path, value,
/// message}]}`.
fn refused_policy(status: StatusCode, e: &Error) -> Response<Body> {
    let errors: Vec<Value> = match e {
        Error::Policy(list) => list.clone(),
        Error::InvalidArgument(f) | Error::WrongType(f) => vec![f.clone()],
        _ => Vec::new(),
    }
    .iter()
    .map(|f| json!({"path": f.path, "value": f.value, "message": f.message}))
    .collect();
    json_response(status, &json!({"error": e.to_string(), "errors": errors}))
}

fn key_json(k: &GatewayKey) -> Value {
    json!({
        "label": k.label, "principal": &*k.principal, "credential": k.credential,
        "teams": k.teams, "attributes": k.attributes, "models": k.models,
        "pass_headers": k.pass_headers,
    })
}

/// `GET /admin/keys`: the gateway's keys (labels and who they call as; never a key).
pub(crate) async fn list_keys(State(app): State<Arc<App>>, headers: HeaderMap) -> Response<Body> {
    if let Some(r) = refused(&app, &headers) {
        return r;
    }
    let keys: Vec<Value> = app
        .guard
        .policy()
        .gateway
        .keys
        .iter()
        .map(key_json)
        .collect();
    json_response(StatusCode::OK, &json!({ "keys": keys }))
}

/// `PUT /admin/keys/{label}`: adds or replaces a key (the fields of a `[gateway.keys.*]`
/// table, as JSON) in the policy in force; 400 with every error when it is not valid.
pub(crate) async fn put_key(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(label): Path<String>,
    body: String,
) -> Response<Body> {
    if let Some(r) = refused(&app, &headers) {
        return r;
    }
    let entry = match serde_json::from_str::<Value>(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("not JSON: {e}")),
    };
    match app.guard.policy().with_gateway_key(&label, &entry) {
        Ok(policy) => {
            app.guard.set_policy(policy);
            log::info!("gateway: key {label:?} set by the admin API");
            let policy = app.guard.policy();
            let key = policy.gateway.keys.iter().find(|k| k.label == label);
            json_response(StatusCode::OK, &key.map(key_json).unwrap_or_default())
        }
        Err(e) => invalid(&e),
    }
}

/// `DELETE /admin/keys/{label}`: removes a key from the policy in force (404 when none).
pub(crate) async fn delete_key(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(label): Path<String>,
) -> Response<Body> {
    if let Some(r) = refused(&app, &headers) {
        return r;
    }
    match app.guard.policy().without_gateway_key(&label) {
        Some(policy) => {
            app.guard.set_policy(policy);
            log::info!("gateway: key {label:?} removed by the admin API");
            json_response(StatusCode::OK, &json!({ "deleted": label }))
        }
        None => error(StatusCode::NOT_FOUND, "no key with that label"),
    }
}

/// `POST /admin/recover?attest=true`: writes a new store epoch (lifting the epoch fence);
/// counters refill from the ledger, or are attested as they are.
pub(crate) async fn recover(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Params,
) -> Response<Body> {
    if let Some(r) = refused(&app, &headers) {
        return r;
    }
    let attest = q.get("attest").is_some_and(|v| v == "true" || v == "1");
    match app.guard.recover(attest).await {
        Ok(generation) => json_response(StatusCode::OK, &json!({ "generation": generation })),
        Err(Error::Refused(r)) => error(StatusCode::SERVICE_UNAVAILABLE, &r.message),
        Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

//! The providers behind the gateway: where a model's calls go and with which credentials,
//! fixed when the gateway starts (the admin API cannot move them: [`moved`]).

use std::time::Duration;

use axum::http::HeaderValue;
use bytes::Bytes;
use futures::StreamExt;

use crate::error::{Error, FieldError, Result};
use crate::guard::domain::policy::{Policy, Provider, Upstream};

/// An HTTP client for upstream calls (each serving thread has one: `App::client`).
pub(crate) fn client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(90))
        .tcp_nodelay(true)
        .build()
        .map_err(|e| Error::invalid("gateway", "", format!("cannot build the HTTP client: {e}")))
}

/// The first upstream whose `api_key_env` is not set in the environment (or is the admin
/// token's variable), as an error naming it.
pub(crate) fn check_keys(policy: &Policy) -> Result<()> {
    for u in &policy.providers {
        if let Some(var) = &u.api_key_env {
            if policy.gateway.admin_token_env.as_ref() == Some(var) {
                return Err(Error::invalid(
                    &format!("providers.{}.api_key_env", u.provider.as_str()),
                    format!("{var:?}"),
                    "is gateway.admin_token_env: the admin token would be sent to the provider \
                     as its key; give each its own variable",
                ));
            }
            if std::env::var_os(var).is_none_or(|v| v.is_empty()) {
                return Err(Error::invalid(
                    &format!("providers.{}.api_key_env", u.provider.as_str()),
                    format!("{var:?}"),
                    "names an environment variable that is not set",
                ));
            }
        }
    }
    Ok(())
}

/// The upstream call for `provider`: the URL of `path` there, the caller's headers that
/// may pass (`headers::to_upstream`: never the caller's key or the admin token), and the
/// provider's credential from the gateway's environment.
pub(crate) fn request(
    client: &reqwest::Client,
    upstream: &Upstream,
    path: &str,
    passed: &[(&'static str, HeaderValue)],
) -> reqwest::RequestBuilder {
    let url = format!("{}{}", upstream.base_url, path);
    let mut request = match parsed(&url) {
        Some(url) => client.post(url),
        // Not a URL: the call fails when sent, as reqwest reports it.
        None => client.post(url),
    }
    .header("content-type", "application/json");
    for (name, value) in passed {
        request = request.header(*name, value.clone());
    }
    let versioned = passed.iter().any(|(n, _)| *n == "anthropic-version");
    if upstream.provider == Provider::Anthropic && !versioned {
        request = request.header("anthropic-version", "2023-06-01");
    }
    if let Some(key) = upstream
        .api_key_env
        .as_ref()
        .and_then(|v| std::env::var(v).ok())
    {
        request = match upstream.provider {
            Provider::Anthropic => request.header("x-api-key", key),
            _ => request.bearer_auth(key),
        };
    }
    request
}

thread_local! {
    /// The upstream URLs this thread has called, parsed: an upstream's calls go to the few
    /// paths of its endpoints, and parsing one (IDNA included) cost more than the call's
    /// admission.
    static PARSED: std::cell::RefCell<Vec<(String, reqwest::Url)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// At most this many URLs are kept per thread (the upstreams' endpoints; health probes).
const PARSED_KEPT: usize = 64;

/// `url` parsed (from this thread's cache when it was before); `None` when it is no URL.
fn parsed(url: &str) -> Option<reqwest::Url> {
    PARSED.with_borrow_mut(|seen| {
        if let Some((_, u)) = seen.iter().find(|(s, _)| s == url) {
            return Some(u.clone());
        }
        let u = reqwest::Url::parse(url).ok()?;
        if seen.len() < PARSED_KEPT {
            seen.push((url.to_string(), u.clone()));
        }
        Some(u)
    })
}

/// Every difference between the upstreams the gateway started with and `new`'s, as an
/// error: a provider added or removed, or its `base_url` or `api_key_env` changed. Only a
/// restart on a new policy file changes where calls and credentials go.
pub(crate) fn moved(started: &[Upstream], new: &[Upstream]) -> Vec<FieldError> {
    const WHY: &str = "where a provider's calls go and which variable holds its key are fixed \
                       when the gateway starts: restart it with a new policy file to change them";
    let mut out = Vec::new();
    for u in new {
        let path = format!("providers.{}", u.provider.as_str());
        let Some(was) = started.iter().find(|s| s.provider == u.provider) else {
            out.push(FieldError::new(
                path,
                &u.base_url,
                format!("is a new upstream: {WHY}"),
            ));
            continue;
        };
        if was.base_url != u.base_url {
            let message = format!("differs from the running {:?}: {WHY}", was.base_url);
            out.push(FieldError::new(
                format!("{path}.base_url"),
                &u.base_url,
                message,
            ));
        }
        if was.api_key_env != u.api_key_env {
            let message = format!("differs from the running {:?}: {WHY}", was.api_key_env);
            let value = u.api_key_env.as_deref().unwrap_or("");
            out.push(FieldError::new(
                format!("{path}.api_key_env"),
                value,
                message,
            ));
        }
    }
    for s in started
        .iter()
        .filter(|s| !new.iter().any(|u| u.provider == s.provider))
    {
        let path = format!("providers.{}", s.provider.as_str());
        out.push(FieldError::new(path, "", format!("is missing: {WHY}")));
    }
    out
}

/// Why an answer read whole was not.
pub(crate) enum Unread {
    /// Larger than `gateway.max_answer_bytes`.
    TooLarge,
    /// The upstream broke off (or stopped sending for the upstream timeout).
    Broke,
    Timeout,
}

/// The upstream's body, read whole as long as it is at most `limit` bytes and comes within
/// `timeout`; the rest is never buffered.
pub(crate) async fn read_bounded(
    upstream: reqwest::Response,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, Unread> {
    if upstream.content_length().is_some_and(|n| n > limit as u64) {
        return Err(Unread::TooLarge);
    }
    let read = async {
        let mut body = Vec::new();
        let mut chunks = upstream.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|_| Unread::Broke)?;
            if body.len() + chunk.len() > limit {
                return Err(Unread::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(body))
    };
    tokio::time::timeout(timeout, read)
        .await
        .unwrap_or(Err(Unread::Timeout))
}

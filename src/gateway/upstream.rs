//! The providers behind the gateway: where a model's calls go and with which credentials.

use std::time::Duration;

use axum::http::HeaderMap;

use crate::error::{Error, Result};
use crate::guard::domain::policy::{Policy, Provider, Upstream};

/// Request headers a caller's SDK sets that the provider needs to see.
const PASSED_ON: [&str; 5] = [
    "anthropic-version",
    "anthropic-beta",
    "openai-beta",
    "openai-organization",
    "openai-project",
];

/// An HTTP client for upstream calls (each serving thread has one: `App::client`).
pub(crate) fn client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(90))
        .tcp_nodelay(true)
        .build()
        .map_err(|e| Error::invalid("gateway", "", format!("cannot build the HTTP client: {e}")))
}

/// Every upstream whose `api_key_env` is not set in the environment, as an error naming it.
pub(crate) fn check_keys(policy: &Policy) -> Result<()> {
    for u in &policy.providers {
        if let Some(var) = &u.api_key_env {
            if std::env::var_os(var).is_none_or(|v| v.is_empty()) {
                return Err(Error::invalid(
                    &format!("providers.{}.api_key_env", u.provider.word()),
                    format!("{var:?}"),
                    "names an environment variable that is not set",
                ));
            }
        }
    }
    Ok(())
}

/// The upstream call for `provider`: the URL of `path` there and the headers to send.
pub(crate) fn request(
    client: &reqwest::Client,
    upstream: &Upstream,
    path: &str,
    caller: &HeaderMap,
) -> reqwest::RequestBuilder {
    let mut request = client
        .post(format!("{}{}", upstream.base_url, path))
        .header("content-type", "application/json");
    for name in PASSED_ON {
        if let Some(v) = caller.get(name) {
            request = request.header(name, v.clone());
        }
    }
    if upstream.provider == Provider::Anthropic && caller.get("anthropic-version").is_none() {
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

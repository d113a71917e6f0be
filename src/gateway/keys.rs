//! API keys: the key a caller presents (`Authorization: Bearer ...`, or Anthropic's
//! `x-api-key`), looked up by its SHA-256 digest. A key is never logged or kept in plain.

use axum::http::HeaderMap;

use crate::guard::domain::policy::{key_digest, GatewayKey, Policy};

/// The key the request presents, if any.
pub(crate) fn presented(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        let key = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
            .unwrap_or(v)
            .trim();
        if !key.is_empty() {
            return Some(key);
        }
    }
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty())
}

/// The policy's entry for the key the request presents; `Err` with the message to answer
/// (401) when it presents none or an unknown one.
pub(crate) fn authenticate<'p>(
    policy: &'p Policy,
    headers: &HeaderMap,
) -> Result<&'p GatewayKey, &'static str> {
    let key = presented(headers)
        .ok_or("No API key: send it as `Authorization: Bearer <key>` (or `x-api-key: <key>`)")?;
    policy
        .gateway
        .key(&key_digest(key))
        .ok_or("Incorrect API key provided")
}

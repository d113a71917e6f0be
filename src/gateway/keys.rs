//! API keys: the key a caller presents (`Authorization: Bearer ...`, or Anthropic's
//! `x-api-key`), looked up by its SHA-256 digest. A key is never logged or kept in plain.

use axum::http::HeaderMap;

use crate::guard::domain::policy::{key_digest, GatewayKey, Policy};

/// The key the request presents, if any: `Authorization: Bearer <key>` (the scheme in any
/// letter case, as HTTP has it), else `x-api-key: <key>`. An `Authorization` header with
/// another scheme, or none, presents no key.
pub(crate) fn presented(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    bearer.or_else(|| {
        headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|k| !k.is_empty())
    })
}

/// The credentials of an `Authorization: Bearer <key>` value.
fn bearer(value: &str) -> Option<&str> {
    let (scheme, key) = value.trim().split_once([' ', '\t'])?;
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then_some(key)
}

/// The policy's entry for the key the request presents; `Err` with the message to answer
/// (401) when it presents none or an unknown one.
pub(crate) fn authenticate<'p>(
    policy: &'p Policy,
    headers: &HeaderMap,
) -> Result<&'p GatewayKey, &'static str> {
    let Some(key) = presented(headers) else {
        if headers.contains_key("authorization") {
            return Err("The Authorization header must be `Bearer <key>`");
        }
        return Err("No API key: send it as `Authorization: Bearer <key>` (or `x-api-key: <key>`)");
    };
    policy
        .gateway
        .key(&key_digest(key))
        .ok_or("Incorrect API key provided")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_in_any_case_and_nothing_without_it() {
        assert_eq!(bearer("Bearer sk-1"), Some("sk-1"));
        assert_eq!(bearer("BEARER  sk-1 "), Some("sk-1"));
        assert_eq!(bearer("bearer\tsk-1"), Some("sk-1"));
        assert_eq!(bearer("sk-1"), None);
        assert_eq!(bearer("Basic c2stMQ=="), None);
        assert_eq!(bearer("Bearer "), None);
    }
}

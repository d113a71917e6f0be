//! The gateway's sections: `providers` (where each provider's calls go) and `gateway` (API
//! keys and the server's bounds). Only `usage-guard serve` reads them; a guard ignores them.
//! Keys are kept as SHA-256 digests: a plain key written in the policy is hashed here and
//! never kept.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::gateway_bounds::GatewayBounds;
use super::gateway_bounds::BOUND_KEYS;
use super::gateway_otel::GatewayOtel;
use super::models::Provider;
use super::values::{key_path, kind, Parser};

/// Where one provider's calls are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub provider: Provider,
    /// The provider's base URL, without a trailing slash (`https://api.openai.com`); the
    /// endpoint's path (`/v1/chat/completions`) is appended.
    pub base_url: String,
    /// The environment variable holding the provider's API key (read when the gateway
    /// starts); `None` sends no key (a local Ollama).
    pub api_key_env: Option<String>,
}

/// One API key of the gateway: who its calls are made as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayKey {
    /// The key's SHA-256 digest, 64 lowercase hex digits.
    pub sha256: String,
    /// The table name the key was written under (its digest, or a label).
    pub label: String,
    /// The user the key's calls are admitted as.
    pub principal: Arc<str>,
    pub credential: Option<String>,
    pub teams: Vec<String>,
    pub attributes: BTreeMap<String, String>,
    /// The models the key may call; `None`: every model.
    pub models: Option<Vec<String>>,
    /// The headers choosing the operator's account (`ACCOUNT_HEADERS`) the key's calls may
    /// pass on to the provider; none by default.
    pub pass_headers: Vec<String>,
}

/// The `gateway` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewaySettings {
    pub keys: Vec<GatewayKey>,
    pub(super) by_digest: HashMap<String, usize>,
    /// Bodies larger than this are refused with 413.
    pub max_body_bytes: u64,
    /// How long an upstream call may take before it is given up (504, the prompt billed).
    pub upstream_timeout_seconds: u64,
    /// How long a streamed call's answer may take to start (its status and headers) before
    /// it is given up (504, the prompt billed, a failure of the provider for its breaker).
    pub upstream_first_byte_seconds: u64,
    /// How long a shutdown lets running calls and streams finish.
    pub drain_seconds: u64,
    /// Threads serving calls, each with its own event loop (`None`: one per core). Read
    /// when the gateway starts.
    pub threads: Option<u64>,
    /// The environment variable holding the admin API's token; no admin API without it.
    pub admin_token_env: Option<String>,
    /// Connections, header, body and idle time, event and answer sizes.
    pub bounds: GatewayBounds,
    /// Where and how the gateway exports through OTLP (`[gateway.otel]`).
    pub otel: GatewayOtel,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        GatewaySettings {
            keys: Vec::new(),
            by_digest: HashMap::new(),
            max_body_bytes: 8 * 1024 * 1024,
            upstream_timeout_seconds: 600,
            upstream_first_byte_seconds: 60,
            drain_seconds: 30,
            threads: None,
            admin_token_env: None,
            bounds: GatewayBounds::default(),
            otel: GatewayOtel::default(),
        }
    }
}

impl GatewaySettings {
    /// The key whose SHA-256 digest is `digest` (lowercase hex).
    pub fn key(&self, digest: &str) -> Option<&GatewayKey> {
        self.by_digest.get(digest).map(|&i| &self.keys[i])
    }

    /// Every bound of the section by its key, as in force (`None`: derived when the gateway
    /// starts, or one per core for `threads`): what docs/security.md's table lists.
    pub fn limits(&self) -> Vec<(&'static str, Option<u64>)> {
        let b = &self.bounds;
        let mut out = vec![
            ("max_connections", b.max_connections),
            ("header_timeout_seconds", Some(b.header_timeout_seconds)),
            ("body_timeout_seconds", Some(b.body_timeout_seconds)),
            ("idle_timeout_seconds", Some(b.idle_timeout_seconds)),
            ("max_body_bytes", Some(self.max_body_bytes)),
            ("max_event_bytes", Some(b.max_event_bytes)),
            ("max_answer_bytes", Some(b.max_answer_bytes)),
            (
                "upstream_timeout_seconds",
                Some(self.upstream_timeout_seconds),
            ),
            (
                "upstream_first_byte_seconds",
                Some(self.upstream_first_byte_seconds),
            ),
            ("drain_seconds", Some(self.drain_seconds)),
            ("threads", self.threads),
        ];
        out.extend(self.otel.limits());
        out
    }
}

impl GatewaySettings {
    /// Replaces the keys (their digests unique).
    pub(super) fn set_keys(&mut self, keys: Vec<GatewayKey>) {
        self.by_digest = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.sha256.clone(), i))
            .collect();
        self.keys = keys;
    }
}

/// The SHA-256 digest of `key` as 64 lowercase hex digits.
pub(crate) fn key_digest(key: &str) -> String {
    // Every gateway call authenticates through this: one `format!` per byte cost ~5 µs of a
    // call's ~120 µs, the table ~0.5 µs.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(key.as_bytes());
    let mut out = String::with_capacity(64);
    for b in digest.iter() {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    out
}

/// The most serving threads a gateway may ask for.
const MAX_THREADS: u64 = 256;
const UPSTREAM_KEYS: [&str; 2] = ["base_url", "api_key_env"];
const GATEWAY_KEYS: [&str; 8] = [
    "keys",
    "max_body_bytes",
    "upstream_timeout_seconds",
    "upstream_first_byte_seconds",
    "drain_seconds",
    "threads",
    "admin_token_env",
    "otel",
];

impl Parser {
    /// The `providers` table: `[providers.openai] base_url = ..., api_key_env = ...`.
    pub(super) fn upstreams(&mut self, value: &Value) -> Vec<Upstream> {
        let Value::Object(map) = value else {
            self.error(
                "providers",
                Some(value),
                format!("must be a table of providers, not {}", kind(value)),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (word, entry) in map {
            let path = key_path("providers", word);
            let Ok(provider) = word.parse::<Provider>() else {
                self.error(
                    &path,
                    None,
                    format!(
                        "is not a provider{}; accepted: {}",
                        crate::guard::domain::suggest::hint(word, &Provider::WORDS),
                        Provider::WORDS.join(", ")
                    ),
                );
                continue;
            };
            let Some(fields) = self.table(&path, entry, &UPSTREAM_KEYS) else {
                continue;
            };
            let base_url = self
                .required(&path, fields, "base_url")
                .and_then(|v| self.url(&key_path(&path, "base_url"), v));
            let api_key_env = fields
                .get("api_key_env")
                .and_then(|v| self.string(&key_path(&path, "api_key_env"), v));
            if let Some(base_url) = base_url {
                out.push(Upstream {
                    provider,
                    base_url,
                    api_key_env,
                });
            }
        }
        out
    }

    pub(super) fn url(&mut self, path: &str, value: &Value) -> Option<String> {
        let text = self.string(path, value)?;
        let rest = text
            .strip_prefix("http://")
            .or_else(|| text.strip_prefix("https://"));
        if rest
            .is_none_or(|r| r.is_empty() || r.starts_with('/') || r.contains(char::is_whitespace))
        {
            self.error(
                path,
                Some(value),
                "must be an http:// or https:// URL with a host",
            );
            return None;
        }
        Some(text.trim_end_matches('/').to_string())
    }

    /// The `gateway` table; `teams` and `models` are the policy's ids, for the keys.
    pub(super) fn gateway(
        &mut self,
        value: &Value,
        teams: &HashSet<String>,
        models: &HashSet<String>,
    ) -> GatewaySettings {
        let mut settings = GatewaySettings::default();
        let accepted: Vec<&str> = GATEWAY_KEYS.iter().chain(&BOUND_KEYS).copied().collect();
        let Some(fields) = self.table("gateway", value, &accepted) else {
            return settings;
        };
        settings.bounds = self.gateway_bounds(fields);
        settings.otel = self.gateway_otel(fields);
        for (name, min) in [
            ("max_body_bytes", 1),
            ("upstream_timeout_seconds", 1),
            ("upstream_first_byte_seconds", 1),
            ("drain_seconds", 0),
        ] {
            let Some(v) = fields.get(name) else { continue };
            let Some(n) = self.whole(&key_path("gateway", name), v, min) else {
                continue;
            };
            match name {
                "max_body_bytes" => settings.max_body_bytes = n,
                "upstream_timeout_seconds" => settings.upstream_timeout_seconds = n,
                "upstream_first_byte_seconds" => settings.upstream_first_byte_seconds = n,
                _ => settings.drain_seconds = n,
            }
        }
        if let Some(v) = fields.get("threads") {
            match v.as_u64().filter(|n| (1..=MAX_THREADS).contains(n)) {
                Some(n) => settings.threads = Some(n),
                None => self.error(
                    "gateway.threads",
                    Some(v),
                    format!("must be a whole number from 1 to {MAX_THREADS}"),
                ),
            }
        }
        if let Some(v) = fields.get("admin_token_env") {
            settings.admin_token_env = self.string("gateway.admin_token_env", v);
        }
        if let Some(keys) = fields.get("keys") {
            self.keys(keys, teams, models, &mut settings);
        }
        settings
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_key_digest_is_sha256_in_lowercase_hex() {
        assert_eq!(
            super::key_digest("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}

//! The gateway's bounds on what one caller can hold: open connections, the time a request's
//! header and body may take, how long a kept-alive connection may sit idle, and the size of
//! one streamed event and of an answer read whole. Each has a safe default and a range
//! checked when the policy is read (docs/security.md lists them).

use serde_json::{Map, Value};

use super::values::{key_path, Parser};

/// The `[gateway]` bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatewayBounds {
    /// The most client connections open at once; over it new ones are refused at once
    /// (a few more are kept for `/healthz`). `None`: derived from the process's descriptor
    /// limit when the gateway starts. Read when the gateway starts.
    pub max_connections: Option<u64>,
    /// How long a request's line and headers may take to arrive, from the connection's
    /// first byte (or its opening); over it the connection is closed.
    pub header_timeout_seconds: u64,
    /// How long a request's body may take to arrive once its headers have; over it the
    /// call is answered 408 and the connection closed.
    pub body_timeout_seconds: u64,
    /// How long a kept-alive connection may wait for its next request.
    pub idle_timeout_seconds: u64,
    /// The largest streamed event (SSE event, NDJSON line) the gateway relays; a larger one
    /// ends the stream with an error event (billed for what was delivered).
    pub max_event_bytes: u64,
    /// The largest answer read whole (a call that does not stream, an upstream error); a
    /// larger one is a 502 (billed).
    pub max_answer_bytes: u64,
}

impl Default for GatewayBounds {
    fn default() -> Self {
        GatewayBounds {
            max_connections: None,
            header_timeout_seconds: 10,
            body_timeout_seconds: 60,
            idle_timeout_seconds: 60,
            max_event_bytes: 16 * 1024 * 1024,
            max_answer_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Each bound's key, its accepted range, and where it is kept.
type Slot = fn(&mut GatewayBounds) -> &mut u64;
const RANGES: [(&str, u64, u64, Slot); 5] = [
    ("header_timeout_seconds", 1, 3600, |b| {
        &mut b.header_timeout_seconds
    }),
    ("body_timeout_seconds", 1, 3600, |b| {
        &mut b.body_timeout_seconds
    }),
    ("idle_timeout_seconds", 1, 3600, |b| {
        &mut b.idle_timeout_seconds
    }),
    ("max_event_bytes", 1024, 1 << 30, |b| &mut b.max_event_bytes),
    ("max_answer_bytes", 1024, 1 << 32, |b| {
        &mut b.max_answer_bytes
    }),
];

/// The most connections a gateway may be told to hold.
pub(crate) const MAX_CONNECTIONS: u64 = 1_000_000;

/// The `[gateway]` keys of the bounds.
pub(super) const BOUND_KEYS: [&str; 6] = [
    "max_connections",
    "header_timeout_seconds",
    "body_timeout_seconds",
    "idle_timeout_seconds",
    "max_event_bytes",
    "max_answer_bytes",
];

impl Parser {
    /// The bounds set in the `[gateway]` table `fields` (the others keep their defaults).
    pub(super) fn gateway_bounds(&mut self, fields: &Map<String, Value>) -> GatewayBounds {
        let mut bounds = GatewayBounds::default();
        for (name, min, max, slot) in RANGES {
            if let Some(v) = fields.get(name) {
                if let Some(n) = self.in_range(&key_path("gateway", name), v, min, max) {
                    *slot(&mut bounds) = n;
                }
            }
        }
        if let Some(v) = fields.get("max_connections") {
            let path = "gateway.max_connections";
            bounds.max_connections = self.in_range(path, v, 1, MAX_CONNECTIONS);
        }
        bounds
    }

    fn in_range(&mut self, path: &str, value: &Value, min: u64, max: u64) -> Option<u64> {
        match value.as_u64().filter(|n| (min..=max).contains(n)) {
            Some(n) => Some(n),
            None => {
                self.error(
                    path,
                    Some(value),
                    format!("must be a whole number from {min} to {max}"),
                );
                None
            }
        }
    }
}

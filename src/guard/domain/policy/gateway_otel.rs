//! `[gateway.otel]`: where the gateway sends its metrics and spans through OTLP/HTTP, how
//! often, how long one export may take, and how many spans wait between exports. Only
//! `usage-guard serve` reads it.

use serde_json::{Map, Value};

use super::values::{key_path, Parser};

/// The `[gateway.otel]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayOtel {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`), without a trailing
    /// slash; `/v1/metrics` and `/v1/traces` are appended. `None`: nothing is exported.
    pub endpoint: Option<String>,
    /// Seconds between exports.
    pub export_interval_seconds: u64,
    /// How long one export may take before it is given up (its data dropped).
    pub export_timeout_seconds: u64,
    /// The most spans (and call records) kept between two exports; past it new ones are
    /// dropped and counted, the calls never wait.
    pub max_queue: u64,
}

impl Default for GatewayOtel {
    fn default() -> Self {
        GatewayOtel {
            endpoint: None,
            export_interval_seconds: 10,
            export_timeout_seconds: 5,
            max_queue: 2048,
        }
    }
}

impl GatewayOtel {
    /// The bounds, by their key under `gateway` (what docs/security.md's table lists).
    pub fn limits(&self) -> [(&'static str, Option<u64>); 3] {
        [
            (
                "otel.export_interval_seconds",
                Some(self.export_interval_seconds),
            ),
            (
                "otel.export_timeout_seconds",
                Some(self.export_timeout_seconds),
            ),
            ("otel.max_queue", Some(self.max_queue)),
        ]
    }
}

/// Each numeric key, its accepted range, and where it is kept.
type Slot = fn(&mut GatewayOtel) -> &mut u64;
const RANGES: [(&str, u64, u64, Slot); 3] = [
    ("export_interval_seconds", 1, 3600, |o| {
        &mut o.export_interval_seconds
    }),
    ("export_timeout_seconds", 1, 60, |o| {
        &mut o.export_timeout_seconds
    }),
    ("max_queue", 1, 1_000_000, |o| &mut o.max_queue),
];

const OTEL_KEYS: [&str; 4] = [
    "endpoint",
    "export_interval_seconds",
    "export_timeout_seconds",
    "max_queue",
];

impl Parser {
    /// The `[gateway.otel]` table in `fields` (the `[gateway]` table), its defaults when
    /// absent.
    pub(super) fn gateway_otel(&mut self, fields: &Map<String, Value>) -> GatewayOtel {
        let mut otel = GatewayOtel::default();
        let Some(value) = fields.get("otel") else {
            return otel;
        };
        let Some(table) = self.table("gateway.otel", value, &OTEL_KEYS) else {
            return otel;
        };
        for (name, min, max, slot) in RANGES {
            let Some(v) = table.get(name) else { continue };
            let path = key_path("gateway.otel", name);
            match v.as_u64().filter(|n| (min..=max).contains(n)) {
                Some(n) => *slot(&mut otel) = n,
                None => self.error(
                    &path,
                    Some(v),
                    format!("must be a whole number from {min} to {max}"),
                ),
            }
        }
        match table.get("endpoint") {
            Some(v) => otel.endpoint = self.url("gateway.otel.endpoint", v),
            None => self.error(
                "gateway.otel.endpoint",
                None,
                "is required: the collector's OTLP/HTTP URL (http://host:4318)",
            ),
        }
        otel
    }
}

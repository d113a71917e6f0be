//! The HTTP gateway (`usage-guard serve`, feature `gateway`): OpenAI, Anthropic and Ollama
//! endpoints in front of the providers, on the same guard. Every call is admitted (its
//! prompt counted, its output maximum fitted) before the provider sees it, forwarded with
//! only the fitted keys changed, streamed back as it arrives, and billed from the usage the
//! provider reports (or what was delivered, when a stream ends early).
//!
//! Files import one way: body, shape, keys, metrics, upstream, upstream_error, conn, otel_ids,
//! answer_usage ←
//! otel ←
//! headers ← relay ←
//! forward ← proxy ← admin ← health, fallback_hops ← fallback ← dashboard_api ← dashboard ←
//! threads, descriptors, otel_export ← listen ← server.

mod admin;
mod answer_usage;
mod body;
mod conn;
mod dashboard;
mod dashboard_api;
mod descriptors;
mod fallback;
mod fallback_hops;
mod forward;
mod framing;
#[cfg(test)]
mod fuzz_tests;
mod headers;
mod health;
mod keys;
mod listen;
mod metrics;
mod otel;
mod otel_export;
mod otel_ids;
mod proxy;
mod relay;
mod server;
mod shape;
mod spread;
mod stream_errors;
mod stream_events;
mod streamed;
mod threads;
mod upstream;
mod upstream_error;

pub use server::{Gateway, GatewayOptions};

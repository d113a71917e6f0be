//! What the engine shows: counts (`stats.rs`), Prometheus families (`metrics.rs`), events to
//! listeners, streams and the audit log (`events.rs`, `event_stream.rs`) and provider health
//! (`health.rs`). The other rooms call in; observe calls none of them.

pub(crate) mod event_stream;
pub(crate) mod events;
pub(crate) mod health;
pub(crate) mod metrics;
pub(crate) mod stats;

//! The pure domain: what a policy says, how it resolves for a person on a model, how windows
//! bucket time, and what to decide from a snapshot of counters. Nothing here does I/O.

pub(crate) mod calendar;
pub(crate) mod caller;
pub(crate) mod clock;
pub(crate) mod counter;
pub(crate) mod decide;
pub(crate) mod event;
pub(crate) mod explain;
pub(crate) mod generic;
pub(crate) mod health;
pub(crate) mod message;
mod owner;
pub(crate) mod path;
pub(crate) mod policy;
// The rate-limit headers: written by the gateway and by `usage_guard.http.headers`.
#[cfg(any(feature = "gateway", feature = "python"))]
pub(crate) mod ratelimit;
pub(crate) mod recorded;
pub(crate) mod refusal;
pub(crate) mod room;
pub(crate) mod rule;
pub(crate) mod rule_index;
pub(crate) mod source;
pub(crate) mod suggest;
pub(crate) mod view;
pub(crate) mod window;
pub(crate) mod window_words;
pub(crate) mod words;

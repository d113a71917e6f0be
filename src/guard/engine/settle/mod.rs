//! Settling what a call used: the [`ticket::Ticket`] (bill once, or release), what a bill
//! records (`billing.rs`), settling in the store now or through the settle queue
//! (`settling.rs`, `settle_queue.rs`) with its background retry (`retry.rs`), and the
//! wake-ups of callers waiting for room (`wake.rs`); SIGTERM's flush of what is queued
//! (`on_sigterm.rs`). Never admits.

pub(crate) mod admitted_request;
pub(crate) mod billing;
#[cfg(all(unix, feature = "python"))]
pub(crate) mod on_sigterm;
pub(crate) mod retry;
pub(crate) mod settle_queue;
pub(crate) mod settling;
pub(crate) mod ticket;
pub(crate) mod wake;

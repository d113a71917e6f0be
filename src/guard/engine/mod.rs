//! The engine: a guard ties a policy, a counter store, a clock and an optional ledger
//! together; admission reads, decides, fits and reserves; tickets and batches settle.
//!
//! Files import one way: wake, stats, billing ← metrics ← fill, known, queue, health,
//! event_stream ← shared ← settling, fitted ← ticket ← guard ← events ← halts, actions; guard ←
//! recovery ← reserve ← optimistic ← admission ← waiting ← actions, batch ← batch_parts,
//! batch_state.

mod actions;
pub(crate) mod admission;
pub(crate) mod batch;
mod batch_parts;
mod batch_state;
pub(crate) mod billing;
pub(crate) mod event_stream;
mod events;
pub(crate) mod fill;
mod fitted;
#[allow(clippy::module_inception)]
pub(crate) mod guard;
mod halts;
pub(crate) mod health;
mod hold_again;
mod known;
mod ledger_fallback;
pub(crate) mod metrics;
mod open_calls;
mod optimistic;
pub(crate) mod queue;
pub(crate) mod quota;
mod recovery;
mod reserve;
mod retry;
mod settling;
pub(crate) mod shared;
pub(crate) mod stats;
pub(crate) mod ticket;
mod waiting;
mod wake;

//! The guard core: policy, paths, windows, counters, decisions, admission and tickets.

pub mod batch;
mod batch_state;
pub mod clock;
pub mod decide;
pub mod fill;
#[allow(clippy::module_inception)]
pub mod guard;
pub mod ledger;
pub mod message;
pub mod path;
pub mod policy;
pub mod refusal;
pub mod rule;
pub mod store;
pub mod ticket;
pub mod view;
pub mod window;

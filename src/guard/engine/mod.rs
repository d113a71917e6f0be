//! The engine: a guard ties a policy, a counter store, a clock and an optional ledger
//! together; admission reads, decides, fits and reserves; tickets and batches settle.

pub(crate) mod batch;
mod batch_state;
pub(crate) mod fill;
#[allow(clippy::module_inception)]
pub(crate) mod guard;
mod outage;
pub(crate) mod ticket;

//! Holding a call's amounts in the counter store: `from_store.rs` reads, decides and
//! reserves (retrying a lost race); `optimistic.rs` reserves from values known in-process
//! (`known.rs`) when the store can check them itself. Never decides admission; never bills.

pub(crate) mod from_store;
pub(crate) mod known;
pub(crate) mod optimistic;

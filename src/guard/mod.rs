//! The guard core, one folder per layer, each importing only the layers above it here:
//!
//! - [`domain`]: clock, windows, rules, counter ids, policy, paths, the decision, refusals and
//!   the usage view: pure functions and data, no I/O.
//! - [`store`]: where counters live (memory; Redis behind the `redis` feature). A store reads
//!   and applies holds atomically; it never decides.
//! - [`ledger`]: the append-only record of billed calls (SQLite, PostgreSQL behind features).
//! - [`engine`]: the guard, the one admission loop, tickets, batches and fill from the ledger.
//!
//! The request side (`crate::ceiling`) sits between the domain and the adapters.

pub(crate) mod domain;
pub(crate) mod engine;
pub(crate) mod ledger;
pub(crate) mod store;

//! Holding a call's amounts in the counter store: `reserve_loop.rs` is the one admission
//! loop (decide, reserve all or none, retry a lost race), reading then reserving, or
//! reserving from values known in-process (`known.rs`) when the store can check them itself;
//! `values.rs` takes the values an attempt decides from. Never decides admission; never bills.

pub(crate) mod known;
pub(crate) mod reserve_loop;
mod values;

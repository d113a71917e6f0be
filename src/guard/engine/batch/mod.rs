//! Batches: one admission for many requests (`batch_ticket.rs`), billed part by part
//! (`parts.rs`), and carried across processes as text (`state.rs`).

pub(crate) mod batch_ticket;
pub(crate) mod parts;
pub(crate) mod state;

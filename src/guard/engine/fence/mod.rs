//! What keeps counts true across a store that restarts or goes away: the epoch fence and
//! recovery (`recovery.rs`), holds taken again for calls still open (`hold_again.rs`,
//! `open_calls.rs`), long-window counters filled from the ledger (`fill.rs`), and admission
//! decided from the ledger while the store does not answer (`ledger_fallback.rs`).

pub(crate) mod fill;
pub(crate) mod hold_again;
pub(crate) mod ledger_fallback;
pub(crate) mod open_calls;
pub(crate) mod recovery;

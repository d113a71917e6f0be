//! The engine: a guard ties a policy, a counter store, a clock and an optional ledger
//! together. `guard.rs` holds every public `Guard` method, each delegating to one room:
//!
//! - [`admit`]: admission (read, decide, fit), rule actions, throttle queues, halts;
//! - [`reserve`]: holding a call's amounts in the store (read then reserve, or from values
//!   known in-process);
//! - [`settle`]: tickets, bills, the settle queue and its background retry;
//! - [`batch`]: batch tickets, their parts and their resumable state;
//! - [`observe`]: stats, metrics, events and provider health;
//! - [`fence`]: the epoch fence and recovery after a store restart, holds taken again, the
//!   open calls, fill from the ledger and admission from it while the store is away.
//!
//! Rooms import one way (checked by `scripts/check_layers.py`): batch → admit → reserve →
//! fence, settle (peers) → observe. `shared.rs` is the state every room reads, `handle.rs` the
//! `Guard` type; `guard.rs` sits on top.

pub(crate) mod admit;
pub(crate) mod batch;
pub(crate) mod fence;
#[allow(clippy::module_inception)]
pub(crate) mod guard;
pub(crate) mod handle;
pub(crate) mod observe;
pub(crate) mod quota;
pub(crate) mod reserve;
pub(crate) mod settle;
pub(crate) mod shared;

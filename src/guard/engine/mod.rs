//! The engine: a guard ties a policy, a counter store, a clock and an optional ledger
//! together. `guard.rs` holds every public `Guard` method, each delegating to one room:
//!
//! - [`admit`]: admission (read, decide, fit), rule actions, throttle queues, halts;
//! - [`reserve`]: holding a call's amounts in the store (read then reserve, or from values
//!   known in-process);
//! - [`settle`]: tickets, bills, the settle queue and its background retry;
//! - [`batch`]: batch tickets, their parts and their resumable state;
//! - [`observe`]: stats, metrics, events and provider health;
//! - fence (`recovery`, `hold_again`, `open_calls`, `fill`, `ledger_fallback`): the epoch
//!   fence, holds taken again after a store restart, fill from the ledger.
//!
//! Rooms import one way (checked by `scripts/check_layers.py`): batch → admit → reserve →
//! fence → settle → observe. `shared.rs` is the state every room reads; `guard.rs` sits on top.

pub(crate) mod admit;
pub(crate) mod batch;
pub(crate) mod fill;
#[allow(clippy::module_inception)]
pub(crate) mod guard;
pub(crate) mod handle;
pub(crate) mod hold_again;
pub(crate) mod ledger_fallback;
pub(crate) mod observe;
pub(crate) mod open_calls;
pub(crate) mod quota;
pub(crate) mod recovery;
pub(crate) mod reserve;
pub(crate) mod settle;
pub(crate) mod shared;

// The fence files still name their neighbours by their old flat paths.
use observe::stats;
use settle::admitted_request as fitted;
use settle::ticket;

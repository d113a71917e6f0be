//! An open ticket's end of life: what it holds while open (for the epoch fence's recovery,
//! `open_calls.rs`), its holds given back when it is dropped unsettled, and which process
//! may end it (the one that admitted it, not a forked child).

use std::sync::atomic::Ordering;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};

use super::{Ticket, TicketState};
use crate::error::Result;
use crate::guard::engine::fence::open_calls::OpenCall;
use crate::guard::engine::settle::settling;
use crate::guard::store::HoldRef;

impl OpenCall for TicketState {
    fn is_open(&self) -> bool {
        !self.settled.load(Ordering::SeqCst) && !self.parts.holds.is_empty()
    }

    fn open_holds(&self) -> Option<(String, Vec<HoldRef>, i64)> {
        let parts = &self.parts;
        self.is_open()
            .then(|| (parts.id.clone(), parts.holds.clone(), parts.expiry_minute))
    }
}

impl Ticket {
    /// A ticket settles only in the process that admitted it: one inherited through `fork()`
    /// is the parent's call, which the parent bills. A child's bill or release would settle
    /// the parent's ticket id first, and the parent's own bill would then count nothing.
    pub fn check_process(&self) -> Result<()> {
        if self.state.generation == crate::fork::generation() {
            return Ok(());
        }
        Err(crate::error::Error::invalid(
            "ticket",
            self.id(),
            "was admitted before this process forked, so it is the parent's call: bill or \
             release it in the process that admitted it (admit the child's own calls in \
             the child)",
        ))
    }

    /// Lists this ticket (one that holds something, on a store that fences and so may lose
    /// holds) among the guard's open calls.
    pub(super) fn keep_open(&self) {
        let parts = &self.state.parts;
        let state: Weak<TicketState> = Arc::downgrade(&self.state);
        parts.shared.open_calls.add(state);
        crate::guard::engine::fence::hold_again::watch(&parts.shared);
    }
}

/// A ticket dropped without bill or release (an abandoned or cancelled call) gives its
/// holds back by ticket id at once (retried in the background while the store does not
/// answer) instead of leaving them to expire 15 minutes later. Not in a forked child: a
/// parent's ticket that a child drops (at its exit, with everything it inherited) is still
/// the parent's call, and a give-back by its id would let the parent's bill find it settled
/// and count nothing.
impl Drop for TicketState {
    fn drop(&mut self) {
        if self.settled.load(Ordering::SeqCst)
            || self.parts.holds.is_empty()
            || self.generation != crate::fork::generation()
        {
            return;
        }
        let shared = &self.parts.shared;
        shared.stats.dropped.fetch_add(1, Relaxed);
        shared.metrics.hold_closed();
        let holds = std::mem::take(&mut self.parts.holds);
        let now = shared.clock.now_ms();
        let settle = settling::whole(
            &self.parts.id,
            holds,
            self.parts.expiry_minute,
            Vec::new(),
            now,
        );
        settling::in_background(shared.clone(), settle, "release of a dropped ticket", true);
    }
}

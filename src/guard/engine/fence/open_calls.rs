//! The calls a guard has open, kept for the epoch fence's recovery (docs/redis.md, "The epoch
//! fence"): a store that lost its state lost their holds with it, and a recovery refills the
//! counters with what the ledger billed, not with what open calls hold. Before the guard
//! trusts a new epoch it places each of its open calls' holds again, under the call's ticket
//! id (`Guard::trust` in `recovery.rs`); a call that settled meanwhile is not held again (its
//! ticket record says it settled), and one held already is not held twice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Weak;

use crate::lock::Mutex;

use crate::fork::ForkLocal;
use crate::guard::domain::clock::Millis;
use crate::guard::store::HoldRef;

/// What an open call holds, read when the guard holds its calls again.
pub(crate) trait OpenCall: Send + Sync {
    /// Whether it still holds anything (not billed, released or dropped).
    fn is_open(&self) -> bool;
    /// Its ticket id, holds and the minute they expire; `None` once it is not open.
    fn open_holds(&self) -> Option<(String, Vec<HoldRef>, i64)>;
}

#[derive(Default)]
struct Registry {
    calls: Vec<Weak<dyn OpenCall>>,
    /// How many were open at the last pruning: the next prunes at twice as many.
    open_at_prune: usize,
}

/// This process's open calls on a fencing store (a forked child starts with none: its
/// parent's calls are not its own), and the epoch they were last held under.
#[derive(Default)]
pub(crate) struct OpenCalls {
    registry: ForkLocal<Mutex<Registry>>,
    held_under: ForkLocal<tokio::sync::Mutex<String>>,
    /// Whether this process watches the store's epoch for them (`hold_again::watch`).
    watching: ForkLocal<AtomicBool>,
}

impl OpenCalls {
    fn registry(&self) -> &Mutex<Registry> {
        self.registry.get_or(Default::default)
    }

    /// Keeps `call` until it settles or is dropped. Amortized O(1): settled and dropped calls
    /// are pruned when the list has doubled since the last pruning.
    pub(crate) fn add(&self, call: Weak<dyn OpenCall>) {
        let mut registry = self.registry().lock();
        registry.calls.push(call);
        if registry.calls.len() > 2 * registry.open_at_prune.max(32) {
            registry
                .calls
                .retain(|c| c.upgrade().is_some_and(|call| call.is_open()));
            registry.open_at_prune = registry.calls.len();
        }
    }

    /// Whether any call is open.
    pub(crate) fn any_open(&self) -> bool {
        let calls: Vec<_> = self.registry().lock().calls.clone();
        calls
            .iter()
            .any(|c| c.upgrade().is_some_and(|call| call.is_open()))
    }

    /// Claims the epoch watch: true when none ran (the caller starts one). Called on every
    /// admission that holds: a plain read first, so a running watch costs no write.
    pub(crate) fn start_watching(&self) -> bool {
        let watching = self.watching.get_or(Default::default);
        !watching.load(Ordering::Acquire) && !watching.swap(true, Ordering::AcqRel)
    }

    /// Gives the watch up when no call is open; true when it ended. A call opened meanwhile
    /// (which saw the watch running and started none) keeps it on: false then, and the
    /// watch goes on.
    pub(crate) fn stop_watching(&self) -> bool {
        self.watching
            .get_or(Default::default)
            .store(false, Ordering::Release);
        !(self.any_open() && self.start_watching())
    }

    /// The epoch the open calls were last held under; one holding at a time.
    pub(crate) fn held_under(&self) -> &tokio::sync::Mutex<String> {
        self.held_under.get_or(Default::default)
    }

    /// The holds of every call still open whose holds have not expired at `now`.
    pub(crate) fn open(&self, now: Millis) -> Vec<(String, Vec<HoldRef>, i64)> {
        let calls: Vec<_> = self.registry().lock().calls.clone();
        calls
            .iter()
            .filter_map(|c| c.upgrade()?.open_holds())
            .filter(|(_, _, minute)| minute * 60_000 > now)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Weak};

    use super::*;

    struct Call(AtomicBool);

    impl OpenCall for Call {
        fn is_open(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
        fn open_holds(&self) -> Option<(String, Vec<HoldRef>, i64)> {
            self.is_open().then(|| ("t".to_string(), Vec::new(), 10))
        }
    }

    #[test]
    fn settled_and_dropped_calls_are_pruned_and_open_ones_kept() {
        let open_calls = OpenCalls::default();
        let kept: Vec<Arc<Call>> = (0..10)
            .map(|_| Arc::new(Call(AtomicBool::new(true))))
            .collect();
        for call in &kept {
            let weak: Weak<Call> = Arc::downgrade(call);
            open_calls.add(weak);
        }
        let mut settled = Vec::new();
        for i in 0..1_000 {
            let call = Arc::new(Call(AtomicBool::new(i % 2 == 0)));
            let weak: Weak<Call> = Arc::downgrade(&call);
            open_calls.add(weak);
            if i % 2 == 1 {
                settled.push(call); // alive, but settled
            } // else dropped here
        }
        let listed = open_calls.registry().lock().calls.len();
        assert!(listed <= 2 * 32 + 1, "{listed} listed");
        assert_eq!(open_calls.open(0).len(), 10);
        kept[0].0.store(false, Ordering::SeqCst);
        assert_eq!(open_calls.open(0).len(), 9);
        assert!(
            open_calls.open(10 * 60_000).is_empty(),
            "expired holds are not held again"
        );
    }

    #[test]
    fn one_watch_at_a_time_and_it_ends_only_with_no_call_open() {
        let open_calls = OpenCalls::default();
        assert!(
            open_calls.start_watching(),
            "the first claim starts the watch"
        );
        assert!(
            !open_calls.start_watching(),
            "a running watch is not started twice"
        );
        let call = Arc::new(Call(AtomicBool::new(true)));
        let weak: Weak<Call> = Arc::downgrade(&call);
        open_calls.add(weak);
        assert!(open_calls.any_open());
        assert!(
            !open_calls.stop_watching(),
            "a call is open: the watch goes on"
        );
        assert!(!open_calls.start_watching(), "and it is still claimed");
        call.0.store(false, Ordering::SeqCst);
        assert!(!open_calls.any_open());
        assert!(open_calls.stop_watching(), "no call open: the watch ends");
        assert!(
            open_calls.start_watching(),
            "the next open call starts it again"
        );
    }
}

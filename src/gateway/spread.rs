//! Spreading the calls over the serving threads (`threads.rs` spreads the connections).
//!
//! Spreading connections is not spreading calls: a client's pool that takes its most recently
//! idle connection first (reqwest's, hyper-util's) sends every burst on the same few, and
//! those can all be on one thread while the others idle (docs/performance.md). So a thread
//! that served most of the recent calls, with calls queued on it while another thread has
//! none, answers one call in `SPREAD_EVERY` with `Connection: close` (`Load::crowded`): the
//! client carries on with another of its connections (the idle ones are on the other
//! threads) or opens one (placed by open connections, `threads.rs`). A thread at its share of
//! the calls closes nothing.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::threads::{Load, Peers};

/// How many calls the recent share is counted over: past twice this many, every thread's
/// count is halved (older calls weigh half as much).
const RECENT: usize = 64;

/// A crowded thread closes at most one connection per this many calls it answers.
const SPREAD_EVERY: usize = 8;

/// A call in progress on its thread (`Load::started`); dropped when its answer has gone.
pub(super) struct Busy {
    peers: Arc<Peers>,
    index: usize,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.peers.busy[self.index].fetch_sub(1, Ordering::AcqRel);
    }
}

impl Load {
    /// A call begins on this connection's thread: counted in progress, and in the thread's
    /// recent calls.
    pub(super) fn started(&self) -> Busy {
        let peers = &*self.peers;
        peers.busy[self.index].fetch_add(1, Ordering::AcqRel);
        peers.recent[self.index].fetch_add(1, Ordering::AcqRel);
        let total: usize = peers.recent.iter().map(|r| r.load(Ordering::Acquire)).sum();
        if total > 2 * RECENT {
            for recent in &peers.recent {
                let _ = recent.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(n / 2));
            }
        }
        Busy {
            peers: self.peers.clone(),
            index: self.index,
        }
    }

    /// Whether the call being answered here should close its connection to spread the
    /// calls (see the module): this thread started over 1.2 times its share of the recent
    /// calls (of at least `RECENT / 2`), has another call in progress, and another serving
    /// thread has none; and it closed none in its last `SPREAD_EVERY` answers.
    pub(super) fn crowded(&self) -> bool {
        let peers = &*self.peers;
        let threads = peers.busy.len();
        let since = peers.since_spread[self.index].fetch_add(1, Ordering::AcqRel) + 1;
        if threads < 2 || since < SPREAD_EVERY {
            return false;
        }
        let recent: Vec<usize> = peers
            .recent
            .iter()
            .map(|r| r.load(Ordering::Acquire))
            .collect();
        let total: usize = recent.iter().sum();
        let heavy = total >= RECENT / 2 && recent[self.index] * threads * 5 > total * 6;
        let queued = peers.busy[self.index].load(Ordering::Acquire) >= 2;
        let idle_elsewhere = (0..threads).any(|j| {
            j != self.index
                && peers.busy[j].load(Ordering::Acquire) == 0
                && peers.loads[j].load(Ordering::Acquire) < usize::MAX / 4
        });
        if !(heavy && queued && idle_elsewhere) {
            return false;
        }
        peers.since_spread[self.index].store(0, Ordering::Release);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use super::{Busy, RECENT, SPREAD_EVERY};
    use crate::gateway::threads::{Load, Peers};

    fn peers(threads: usize) -> Arc<Peers> {
        let inboxes = (0..threads).map(|_| tokio::sync::mpsc::unbounded_channel().0);
        Arc::new(Peers::new(inboxes.collect()))
    }

    fn connection(peers: &Arc<Peers>, index: usize) -> Load {
        peers.loads[index].fetch_add(1, Ordering::AcqRel);
        Load {
            peers: peers.clone(),
            index,
        }
    }

    /// Bursts of `burst` calls on `on` (each with the others in progress), `bursts` times,
    /// while `beside` has a call in progress if given: how many answers closed their
    /// connection.
    fn spread_by(on: &Load, burst: usize, bursts: usize, beside: Option<&Load>) -> usize {
        let _other: Option<Busy> = beside.map(Load::started);
        let mut closed = 0;
        for _ in 0..bursts {
            let calls: Vec<Busy> = (0..burst).map(|_| on.started()).collect();
            for call in calls {
                closed += usize::from(on.crowded());
                drop(call);
            }
        }
        closed
    }

    /// A client's pool keeps its bursts on one thread's connections while the other thread
    /// idles: once the thread has served enough of the recent calls (`RECENT / 2`), one
    /// answer in `SPREAD_EVERY` closes its connection, never more.
    #[test]
    fn a_thread_crowded_by_its_connections_lets_one_go_in_every_few_answers() {
        let p = peers(2);
        let (hot, _idle) = (connection(&p, 0), connection(&p, 1));
        // calls 1-28: too few to judge; the burst of calls 29-32 finds 32 recent calls
        assert_eq!(spread_by(&hot, 4, 7, None), 0);
        assert_eq!(spread_by(&hot, 4, 1, None), 1);
        // then one in 8 answers (the last of a burst has nothing queued behind it)
        assert_eq!(spread_by(&hot, 4, 2, None), 1);
        assert_eq!(spread_by(&hot, 4, 40, None), 160 / SPREAD_EVERY);
        assert_eq!(p.busy[0].load(Ordering::Acquire), 0, "every call ended");
    }

    /// Calls spread already, another thread busy, a call alone, or one serving thread: no
    /// connection is closed.
    #[test]
    fn no_connection_is_closed_where_calls_are_spread_or_nothing_idles() {
        let p = peers(2);
        let (a, b) = (connection(&p, 0), connection(&p, 1));
        for _ in 0..50 {
            assert_eq!(spread_by(&a, 3, 1, None) + spread_by(&b, 3, 1, None), 0);
        }
        let p = peers(2);
        let (a, b) = (connection(&p, 0), connection(&p, 1));
        assert_eq!(
            spread_by(&a, 4, 50, Some(&b)),
            0,
            "the other thread is busy"
        );
        assert_eq!(
            spread_by(&a, 1, 100, None),
            0,
            "nothing queued behind a call"
        );
        let p = peers(1);
        assert_eq!(spread_by(&connection(&p, 0), 4, 50, None), 0, "one thread");
    }

    /// The recent counts stay bounded (halved past twice `RECENT`), so the share follows
    /// the load as it moves: a thread that served every call for long is not crowded once
    /// the calls are spread again.
    #[test]
    fn the_recent_share_follows_the_load() {
        let p = peers(2);
        let (a, b) = (connection(&p, 0), connection(&p, 1));
        spread_by(&a, 4, 1_000, None);
        let total = || {
            p.recent
                .iter()
                .map(|r| r.load(Ordering::Acquire))
                .sum::<usize>()
        };
        assert!(total() <= 2 * RECENT, "{}", total());
        let alternate = || spread_by(&b, 4, 1, None) + spread_by(&a, 4, 1, None);
        for _ in 0..RECENT {
            alternate();
        }
        let closed: usize = (0..20).map(|_| alternate()).sum();
        assert_eq!(closed, 0, "a's share is back to a half");
    }
}

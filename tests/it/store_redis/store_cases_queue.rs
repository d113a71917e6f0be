//! The store suite's wait-queue cases (`WaitQueues`): order, bounds, lapse.

use futures::executor::block_on;
use usage_guard::internals::{QueueJoin, QueueSpot};

use super::store_cases_core::T0;
use super::{fixture, Kind};

fn spot(queue: &str, max_len: u64) -> QueueSpot {
    QueueSpot {
        queue: queue.into(),
        max_len,
    }
}

fn names(queues: &[&str]) -> Vec<String> {
    queues.iter().map(|q| q.to_string()).collect()
}

/// A waiter joins every queue of its call under one ticket; the oldest is the head of all;
/// only when a queue is busy does `only_if_busy` join.
pub fn queues_are_first_in_first_out(kind: Kind) {
    let f = fixture(kind, "queue-fifo");
    let q = f.store.queues().expect("the store has queues");
    let alive = T0 + 2_000;
    let clear = block_on(q.join(vec![spot("a", 10)], true, alive, T0)).unwrap();
    assert_eq!(clear, QueueJoin::Clear);
    let QueueJoin::Joined(first) = block_on(q.join(vec![spot("a", 10)], false, alive, T0)).unwrap()
    else {
        panic!("not joined")
    };
    let both = vec![spot("a", 10), spot("b:{weird}", 10)];
    let QueueJoin::Joined(second) = block_on(q.join(both, true, alive, T0)).unwrap() else {
        panic!("a busy queue is joined")
    };
    assert!(second > first);
    let ab = names(&["a", "b:{weird}"]);
    assert_eq!(
        block_on(q.ahead(names(&["a"]), first, alive, T0)).unwrap(),
        Some(0)
    );
    assert_eq!(
        block_on(q.ahead(ab.clone(), second, alive, T0)).unwrap(),
        Some(1)
    );
    assert_eq!(block_on(q.length("b:{weird}".into(), T0)).unwrap(), 1);
    block_on(q.leave(names(&["a"]), first)).unwrap();
    assert_eq!(
        block_on(q.ahead(names(&["a"]), first, alive, T0)).unwrap(),
        None
    );
    assert_eq!(
        block_on(q.ahead(ab.clone(), second, alive, T0)).unwrap(),
        Some(0)
    );
    block_on(q.leave(ab, second)).unwrap();
    assert_eq!(block_on(q.length("a".into(), T0)).unwrap(), 0);
}

/// A join past a queue's bound joins none of the call's queues.
pub fn a_full_queue_joins_nothing(kind: Kind) {
    let f = fixture(kind, "queue-full");
    let q = f.store.queues().expect("the store has queues");
    let alive = T0 + 2_000;
    let joined = block_on(q.join(vec![spot("a", 1)], false, alive, T0)).unwrap();
    assert!(matches!(joined, QueueJoin::Joined(_)));
    let full = block_on(q.join(vec![spot("b", 5), spot("a", 1)], false, alive, T0)).unwrap();
    assert_eq!(full, QueueJoin::Full(1));
    assert_eq!(block_on(q.length("b".into(), T0)).unwrap(), 0);
    assert_eq!(block_on(q.length("a".into(), T0)).unwrap(), 1);
}

/// A waiter that stops polling drops out after its `alive_until`; polling keeps it.
pub fn a_lapsed_waiter_drops_out(kind: Kind) {
    let f = fixture(kind, "queue-lapse");
    let q = f.store.queues().expect("the store has queues");
    let QueueJoin::Joined(gone) =
        block_on(q.join(vec![spot("a", 10)], false, T0 + 2_000, T0)).unwrap()
    else {
        panic!("not joined")
    };
    let QueueJoin::Joined(kept) =
        block_on(q.join(vec![spot("a", 10)], false, T0 + 2_000, T0)).unwrap()
    else {
        panic!("not joined")
    };
    let a = names(&["a"]);
    let later = T0 + 1_500;
    assert_eq!(
        block_on(q.ahead(a.clone(), kept, later + 2_000, later)).unwrap(),
        Some(1)
    );
    let after = T0 + 2_500;
    assert_eq!(
        block_on(q.ahead(a.clone(), kept, after + 2_000, after)).unwrap(),
        Some(0)
    );
    assert_eq!(
        block_on(q.ahead(a, gone, after + 2_000, after)).unwrap(),
        None
    );
    assert_eq!(block_on(q.length("a".into(), after)).unwrap(), 1);
}

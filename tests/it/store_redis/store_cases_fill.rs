//! More cases of the store suite (see store_redis.rs): exact large amounts, ledger fill
//! marks and `mark_once`.

use futures::executor::block_on;
use usage_guard::internals::{expiry_minute, ReserveOutcome};

use super::fixture;
use super::store_cases_core::{add, adds_only, day, item, rd, read, tid, HOLD_MS, T0};
use super::Kind;

pub fn large_amounts_stay_exact(kind: Kind) {
    let fx = fixture(kind, "large");
    let s = fx.store.as_ref();
    let a = day("big");
    let max = 1u64 << 53;
    let m = expiry_minute(T0, HOLD_MS);
    block_on(s.settle(&adds_only(m, vec![add(&a, max - 3)]), T0)).unwrap();
    assert_eq!(read(s, std::slice::from_ref(&a), T0), vec![rd(max - 3, 0)]);
    let r = |hold| block_on(s.reserve(tid(), vec![item(&a, hold, Some(max), 0)], m, T0)).unwrap();
    assert_eq!(r(4), ReserveOutcome::Conflict { item: 0 });
    assert_eq!(r(2), ReserveOutcome::Reserved);
    assert_eq!(
        r(1),
        ReserveOutcome::Reserved,
        "counted + hold == 2^53 fits"
    );
    assert_eq!(r(0), ReserveOutcome::Conflict { item: 0 });
    assert_eq!(read(s, &[a], T0), vec![rd(max - 3, 3)]);
}

pub fn fill_happens_once_and_keeps_the_larger(kind: Kind) {
    let fx = fixture(kind, "fill");
    let s = fx.store.as_ref();
    let (a, b) = (day("fa"), day("fb"));
    let m = expiry_minute(T0, HOLD_MS);
    let keep = T0 + 86_400_000;
    block_on(s.settle(&adds_only(m, vec![add(&a, 50)]), T0)).unwrap();
    assert_eq!(
        block_on(s.filled(vec![a.clone(), b.clone()], T0)).unwrap(),
        vec![false, false]
    );
    assert!(
        block_on(s.fill(a.clone(), 30, keep, T0)).unwrap(),
        "first fill"
    );
    assert!(
        !block_on(s.fill(a.clone(), 99, keep, T0)).unwrap(),
        "second fill does nothing"
    );
    assert!(block_on(s.fill(b.clone(), 70, keep, T0)).unwrap());
    assert_eq!(
        read(s, &[a.clone(), b.clone()], T0),
        vec![rd(50, 0), rd(70, 0)]
    );
    assert_eq!(
        block_on(s.filled(vec![a.clone(), b.clone()], T0)).unwrap(),
        vec![true, true]
    );
    // Past its retention a counter is gone, mark included.
    let after = keep + 120_000;
    block_on(s.settle(&adds_only(m, vec![add(&day("other"), 1)]), after)).unwrap();
    assert_eq!(
        block_on(s.filled(vec![b.clone()], after)).unwrap(),
        vec![false]
    );
    assert!(block_on(s.fill(b.clone(), 5, after + 60_000, after)).unwrap());
    assert_eq!(read(s, &[b], after), vec![rd(5, 0)]);
}

pub fn marks_are_set_once_until_they_expire(kind: Kind) {
    let fx = fixture(kind, "marks");
    let s = fx.store.as_ref();
    let until = T0 + 3_600_000;
    let weird = "b:{batch}:r 1".to_string();
    assert!(block_on(s.mark_once(weird.clone(), until, T0)).unwrap());
    assert!(!block_on(s.mark_once(weird.clone(), until, T0 + 1)).unwrap());
    assert!(
        block_on(s.mark_once("b:{batch}:r%201".into(), until, T0)).unwrap(),
        "distinct"
    );
    assert!(
        block_on(s.mark_once(weird, until + 60_000, until)).unwrap(),
        "expired mark"
    );
}

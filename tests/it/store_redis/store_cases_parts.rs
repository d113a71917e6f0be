//! Store cases for `settle_parts`: each part of a batch gives back its share once and bills
//! once, whether its bill or the batch's finish comes first, in one atomic step per call.

use futures::executor::block_on;
use usage_guard::internals::{
    expiry_minute, PartSettle, PartsSettle, ReserveOutcome, SettleOutcome,
};

use super::fixture;
use super::store_cases_core::{add, day, hold, item, rd, read, tid, T0};
use super::Kind;

const BATCH_MS: i64 = 25 * 3_600_000;

fn parts(batch: &str, m: i64, parts: Vec<PartSettle>) -> PartsSettle {
    PartsSettle {
        ticket: batch.to_string(),
        expiry_minute: m,
        settled_until: m * 60_000 + 86_400_000,
        parts,
    }
}

fn part(batch: &str, n: usize, share: u64, bill: Option<u64>) -> PartSettle {
    let key = day("parts");
    PartSettle {
        id: format!("{batch}/r{n}"),
        holds: vec![hold(&key, share)],
        bill: bill.is_some(),
        adds: bill.map(|used| vec![add(&key, used)]).unwrap_or_default(),
    }
}

use SettleOutcome::{AlreadySettled as Already, Settled};

/// A bill gives back the part's share and adds its use once; a finish gives back every
/// share not yet given back, once; a bill after the finish adds its use once and gives back
/// nothing more. Another batch's hold on the same counter shows nothing is given back twice.
pub fn parts_settle_once_by_bill_or_finish(kind: Kind) {
    let fx = fixture(kind, "parts");
    let s = fx.store.as_ref();
    let a = day("parts");
    let m = expiry_minute(T0, BATCH_MS);
    let (batch, other) = (tid(), tid());
    for t in [&batch, &other] {
        let placed = block_on(s.reserve(t.clone(), vec![item(&a, 400, None, 0)], m, T0));
        assert_eq!(placed.unwrap(), ReserveOutcome::Reserved);
    }
    let run = |p: PartsSettle, now| block_on(s.settle_parts(&p, now)).unwrap();
    let bill0 = parts(&batch, m, vec![part(&batch, 0, 100, Some(30))]);
    assert_eq!(run(bill0.clone(), T0 + 1), vec![Settled]);
    assert_eq!(run(bill0, T0 + 2), vec![Already]);
    assert_eq!(read(s, std::slice::from_ref(&a), T0 + 3), vec![rd(30, 700)]);
    let finish = parts(
        &batch,
        m,
        (0..4).map(|n| part(&batch, n, 100, None)).collect(),
    );
    assert_eq!(
        run(finish.clone(), T0 + 4),
        vec![Already, Settled, Settled, Settled]
    );
    assert_eq!(run(finish, T0 + 5), vec![Already; 4]);
    assert_eq!(read(s, std::slice::from_ref(&a), T0 + 6), vec![rd(30, 400)]);
    let late = parts(&batch, m, vec![part(&batch, 2, 100, Some(50))]);
    assert_eq!(run(late.clone(), T0 + 7), vec![Settled]);
    assert_eq!(run(late, T0 + 8), vec![Already]);
    assert_eq!(read(s, &[a], T0 + 9), vec![rd(80, 400)]);
}

/// Parts of a batch whose reservation never landed give nothing back (its bill still adds).
pub fn parts_of_a_batch_never_landed_give_nothing_back(kind: Kind) {
    let fx = fixture(kind, "parts-none");
    let s = fx.store.as_ref();
    let a = day("parts");
    let m = expiry_minute(T0, BATCH_MS);
    let (batch, other) = (tid(), tid());
    block_on(s.reserve(other, vec![item(&a, 400, None, 0)], m, T0)).unwrap();
    let p = parts(
        &batch,
        m,
        vec![part(&batch, 0, 100, Some(5)), part(&batch, 1, 100, None)],
    );
    assert_eq!(
        block_on(s.settle_parts(&p, T0 + 1)).unwrap(),
        vec![Settled; 2]
    );
    assert_eq!(read(s, &[a], T0 + 2), vec![rd(5, 400)]);
}

/// Many parts in one call (one step): 1,000 shares given back at once, each once.
pub fn many_parts_settle_in_one_call(kind: Kind) {
    let fx = fixture(kind, "parts-many");
    let s = fx.store.as_ref();
    let a = day("parts");
    let m = expiry_minute(T0, BATCH_MS);
    let batch = tid();
    block_on(s.reserve(batch.clone(), vec![item(&a, 3_000, None, 0)], m, T0)).unwrap();
    let all = parts(
        &batch,
        m,
        (0..1000).map(|n| part(&batch, n, 3, None)).collect(),
    );
    let outcomes = block_on(s.settle_parts(&all, T0 + 1)).unwrap();
    assert_eq!(outcomes, vec![Settled; 1000]);
    assert_eq!(read(s, &[a], T0 + 2), vec![rd(0, 0)]);
    let again = block_on(s.settle_parts(&all, T0 + 3)).unwrap();
    assert_eq!(again, vec![Already; 1000]);
}

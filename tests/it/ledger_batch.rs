//! Batches: reserve for every request at submission, bill each result once however many
//! times and on however many guards it is read, give the rest back at the end.
#![cfg(feature = "sqlite")]

use crate::common;

use std::sync::Arc;

use common::*;
use usage_guard::CounterStore;
use usage_guard::{
    BatchRequest, BillInfo, Guard, Ledger, ManualClock, MemoryStore, Metric, SqliteLedger, Usage,
    UsageQuery,
};

fn policy_text() -> String {
    format!(
        r#"{GPT5}
[[limits.direct]]
user = "alice"
model = "gpt-5"
rules = [
  {{ metric = "tokens", amount = 1000000, window = "day" }},
  {{ metric = "requests", amount = 1000, window = "day" }},
]
"#
    )
}

fn requests(n: usize) -> Vec<BatchRequest> {
    (0..n)
        .map(|i| BatchRequest {
            id: format!("r{i}"),
            prompt_tokens: 1000,
            max_output_tokens: Some(1000),
        })
        .collect()
}

fn usage() -> Usage {
    Usage {
        input_tokens: 1000,
        output_tokens: 300,
        ..Usage::default()
    }
}

/// (used, held) of alice's day token counter, read through the guard's view.
fn tokens(guard: &Guard) -> (u64, u64) {
    let v = futures::executor::block_on(guard.usage(Some("alice"), "gpt-5")).unwrap();
    let r = v.rules.iter().find(|r| r.metric == Metric::Tokens).unwrap();
    (r.used, r.reserved)
}

#[test]
fn three_guards_reading_every_result_bill_each_once() {
    let dir = tempdir("batch");
    let path = dir.join("ledger.db");
    let clock = Arc::new(ManualClock::new(at("2026-11-30T10:00:00Z")));
    let store = Arc::new(MemoryStore::new());
    let guards: Vec<Guard> = (0..3)
        .map(|_| {
            let ledger: Arc<dyn Ledger> =
                Arc::new(SqliteLedger::open(path.to_str().unwrap()).unwrap());
            Guard::new(policy(&policy_text()), store.clone(), clock.clone()).with_ledger(ledger)
        })
        .collect();
    let batch = futures::executor::block_on(guards[0].admit_batch("alice", "gpt-5", requests(100)))
        .unwrap();
    assert_eq!(
        batch.reserved(),
        vec![(Metric::Tokens, 200_000), (Metric::Requests, 100)]
    );
    assert_eq!(tokens(&guards[0]), (0, 200_000));
    let state = batch.state();

    let billed: usize = std::thread::scope(|s| {
        let handles: Vec<_> = guards
            .iter()
            .map(|g| {
                let state = &state;
                s.spawn(move || {
                    let mine = g.resume_batch(state).unwrap();
                    let mut n = 0;
                    for read in 0..2 {
                        for i in 0..100 {
                            let rid = format!("r{i}");
                            let got = futures::executor::block_on(mine.bill_part(
                                &rid,
                                usage(),
                                BillInfo::default(),
                            ))
                            .unwrap();
                            n += usize::from(got.is_some());
                            assert!(read == 0 || got.is_none());
                        }
                    }
                    n
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(billed, 100);
    // Every result gave its share back: nothing is held, 100 × 1300 tokens are used.
    assert_eq!(tokens(&guards[1]), (130_000, 0));
    let released = futures::executor::block_on(batch.finish()).unwrap();
    assert_eq!(released, 0);
    assert_eq!(tokens(&guards[2]), (130_000, 0));
    for g in &guards {
        g.close().unwrap();
    }
    let rows = SqliteLedger::open(path.to_str().unwrap())
        .unwrap()
        .query(&UsageQuery::default())
        .unwrap();
    assert_eq!(rows[0].requests, 100);
    assert_eq!(rows[0].tokens(), 130_000);
}

#[test]
fn finish_releases_what_was_not_billed_once() {
    let s = setup(&policy_text(), "2026-11-30T10:00:00Z");
    let batch =
        futures::executor::block_on(s.guard.admit_batch("alice", "gpt-5", requests(10))).unwrap();
    for i in 0..4 {
        futures::executor::block_on(batch.bill_part(
            &format!("r{i}"),
            usage(),
            BillInfo::default(),
        ))
        .unwrap()
        .unwrap();
    }
    assert_eq!(tokens(&s.guard), (4 * 1300, 6 * 2000));
    let other = s.guard.resume_batch(&batch.state()).unwrap();
    assert_eq!(futures::executor::block_on(other.finish()).unwrap(), 6);
    assert_eq!(futures::executor::block_on(batch.finish()).unwrap(), 0);
    assert_eq!(tokens(&s.guard), (4 * 1300, 0));
    // A result read after the end is still billed once (real use is never dropped).
    let late =
        futures::executor::block_on(batch.bill_part("r9", usage(), BillInfo::default())).unwrap();
    assert!(late.is_some());
    assert_eq!(tokens(&s.guard), (5 * 1300, 0));
    let err = futures::executor::block_on(batch.bill_part("nope", usage(), BillInfo::default()))
        .unwrap_err();
    assert!(err.to_string().contains("result_id"), "{err}");
}

#[test]
fn holds_live_25_hours() {
    let s = setup(&policy_text(), "2026-11-30T10:00:00Z");
    let _batch =
        futures::executor::block_on(s.guard.admit_batch("alice", "gpt-5", requests(2))).unwrap();
    let key = usage_guard::internals::CounterKey {
        id: s.guard.path(Some("alice"), "gpt-5").unwrap().counters[0].clone(),
        bucket: at("2026-11-30T00:00:00Z"),
    };
    let held = |now: &str| {
        futures::executor::block_on(s.store.read(vec![key.clone()], at(now))).unwrap()[0].held
    };
    assert_eq!(held("2026-12-01T10:59:00Z"), 4000);
    assert_eq!(held("2026-12-01T11:02:00Z"), 0);
}

#[test]
fn a_batch_that_does_not_fit_in_full_is_refused_and_holds_nothing() {
    let s = setup(&policy_text(), "2026-11-30T10:00:00Z");
    let r = match futures::executor::block_on(s.guard.admit_batch("alice", "gpt-5", requests(600)))
    {
        Err(usage_guard::Error::Refused(r)) => r,
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(r.reason, usage_guard::Reason::DoesNotFit);
    assert_eq!(tokens(&s.guard), (0, 0));
    let dup = vec![requests(1)[0].clone(), requests(1)[0].clone()];
    assert!(futures::executor::block_on(s.guard.admit_batch("alice", "gpt-5", dup)).is_err());
}

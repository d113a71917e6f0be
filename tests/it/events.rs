//! Events (issue 13.4): `Guard::events` streams beside `on_event`, and generic rules on
//! calls with no user and on batches with attributes. The audit log: `audit_log.rs`.

use crate::common;

use std::sync::{Arc, Mutex};

use common::events::{alice, call, drain, policy, NOW};
use common::{at, reached, setup, GPT5};
use usage_guard::{BatchRequest, Event, EventKind};

#[test]
fn a_stream_gets_what_listeners_get_and_ends_when_the_guard_closes() {
    let s = setup(&policy(), NOW);
    let heard: Arc<Mutex<Vec<Event>>> = Arc::default();
    let sink = heard.clone();
    s.guard
        .on_event(move |e| sink.lock().unwrap().push(e.clone()));
    let (one, two) = (s.guard.events(100), s.guard.events(100));
    let _held: Vec<_> = (0..3)
        .map(|_| s.guard.admit_blocking(alice("a")).unwrap())
        .collect();
    let heard = heard.lock().unwrap().clone();
    assert_eq!(
        heard.iter().map(|e| e.threshold).collect::<Vec<_>>(),
        vec![0.1, 0.2, 0.3]
    );
    assert_eq!(drain(&one), heard);
    assert_eq!(drain(&two), heard);
    let first = &heard[0];
    assert_eq!(first.kind, EventKind::SoftThreshold);
    assert_eq!(first.rule.as_ref(), "soft");
    assert_eq!(first.principal.as_deref(), Some("alice"));
    assert_eq!(first.model.as_deref(), Some("gpt-5"));
    assert_eq!(first.at_ms, at(NOW));
    assert!(first.id.starts_with("ev:"), "{}", first.id);
    // A reader waiting on another thread is woken by the next event.
    let waiting = one.clone();
    let reader = std::thread::spawn(move || futures::executor::block_on(waiting.next()));
    let _fourth = s.guard.admit_blocking(alice("a")).unwrap();
    assert_eq!(reader.join().unwrap().map(|e| e.threshold), Some(0.4));
    // Closing the guard ends the streams open now, after what they hold.
    let _fifth = s.guard.admit_blocking(alice("a")).unwrap();
    s.guard.close().unwrap();
    assert!(one.is_closed() && two.is_closed());
    let last = futures::executor::block_on(one.next());
    assert_eq!(last.map(|e| e.threshold), Some(0.5));
    assert_eq!(futures::executor::block_on(one.next()), None);
    // The guard keeps working: a later stream gets later events.
    let later = s.guard.events(10);
    let _b = s.guard.admit_blocking(alice("b")).unwrap();
    assert_eq!(drain(&later).len(), 1);
}

#[test]
fn a_slow_reader_loses_the_oldest_events_and_counts_them() {
    let s = setup(&policy(), NOW);
    let (small, large) = (s.guard.events(2), s.guard.events(100));
    let _held: Vec<_> = (0..5)
        .map(|_| s.guard.admit_blocking(alice("a")).unwrap())
        .collect();
    let kept: Vec<f64> = drain(&small).iter().map(|e| e.threshold).collect();
    assert_eq!(kept, vec![0.4, 0.5]);
    assert_eq!(small.dropped(), 3);
    assert_eq!(drain(&large).len(), 5);
    assert_eq!(large.dropped(), 0);
    // A stream its reader dropped is forgotten; the others go on.
    drop(large);
    let _sixth = s.guard.admit_blocking(alice("b")).unwrap();
    assert_eq!(drain(&small).len(), 1);
}

#[test]
fn a_halt_is_one_event_naming_the_session_and_the_caller() {
    let s = setup(&policy(), NOW);
    let stream = s.guard.events(10);
    let sess = || call(Some("alice"), &[("session", "s1")]);
    let _held: Vec<_> = (0..2)
        .map(|_| s.guard.admit_blocking(sess()).unwrap())
        .collect();
    reached(s.guard.admit_blocking(sess()));
    reached(s.guard.admit_blocking(sess()));
    let halts: Vec<Event> = drain(&stream)
        .into_iter()
        .filter(|e| e.kind == EventKind::HaltSession)
        .collect();
    assert_eq!(halts.len(), 1, "{halts:?}");
    assert_eq!(halts[0].rule.as_ref(), "runaway");
    assert_eq!(halts[0].principal.as_deref(), Some("alice"));
    assert!(halts[0].key.render().contains("s1"), "{:?}", halts[0].key);
}

/// A per-credential rule, and a platform limit that calls with no user do not have.
fn anonymous_policy() -> String {
    format!(
        r#"{GPT5}
[limits.platform]
rules = [{{ metric = "tokens", amount = 50, window = "day" }}]

[[rules]]
name = "per credential"
count_by = ["credential"]
amount = "requests"
budget = 2
window = "minute"

[[rules]]
name = "only alice"
applies_when = {{ principal = "alice" }}
amount = "requests"
budget = 0
window = "minute"
"#
    )
}

#[test]
fn generic_rules_count_calls_with_no_user() {
    let s = setup(&anonymous_policy(), NOW);
    let anon = |credential: &str| call(None, &[("credential", credential)]);
    // The limit kinds do not apply to a call with no user; a rule on `principal` does not
    // match it; a rule counting by credential counts it.
    let _a = s.guard.admit_blocking(anon("k1")).unwrap();
    let _b = s.guard.admit_blocking(anon("k1")).unwrap();
    let r = reached(s.guard.admit_blocking(anon("k1")));
    assert!(
        r.message.contains("Rule \"per credential\""),
        "{}",
        r.message
    );
    let _c = s.guard.admit_blocking(anon("k2")).unwrap();
    // A call lacking the attribute is not counted by the rule.
    for _ in 0..3 {
        let _ = s.guard.admit_blocking(call(None, &[])).unwrap();
    }
    // A named user has the platform limit (200 tokens > 50).
    let r = common::refusal(s.guard.admit_blocking(call(Some("bob"), &[])));
    assert_eq!(
        r.limit_type,
        Some(usage_guard::LimitType::Platform),
        "{}",
        r.message
    );
}

#[test]
fn a_batch_with_attributes_counts_every_request_in_the_rules_it_matches() {
    let s = setup(
        &anonymous_policy().replace("amount = 50", "amount = 100000"),
        NOW,
    );
    let requests = |ids: &[&str]| -> Vec<BatchRequest> {
        ids.iter()
            .map(|id| BatchRequest {
                id: id.to_string(),
                prompt_tokens: 10,
                max_output_tokens: Some(10),
            })
            .collect()
    };
    let k1 = vec![("credential".to_string(), "k1".to_string())];
    let batch = futures::executor::block_on(s.guard.admit_batch_with(
        "bob",
        "gpt-5",
        requests(&["a", "b"]),
        k1.clone(),
    ))
    .unwrap();
    // Two of the credential's two a minute are held: a third call on k1 is refused...
    reached(
        s.guard
            .admit_blocking(call(Some("bob"), &[("credential", "k1")])),
    );
    let again = s
        .guard
        .admit_batch_with("bob", "gpt-5", requests(&["c"]), k1);
    let Err(usage_guard::Error::Refused(_)) = futures::executor::block_on(again) else {
        panic!("a second batch on k1 was admitted");
    };
    // ...and another credential is not.
    let _k2 = s
        .guard
        .admit_blocking(call(Some("bob"), &[("credential", "k2")]))
        .unwrap();
    // The state keeps the attributes: a resumed batch is the same batch.
    let state = batch.state();
    assert!(
        state.contains(r#""attributes":{"credential":"k1"}"#),
        "{state}"
    );
    assert_eq!(s.guard.resume_batch(&state).unwrap().state(), state);
}

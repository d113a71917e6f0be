//! Generic rules (`[[rules]]`): parsing and its errors, matching on each attribute, fan-out
//! by `count_by`, tightest-wins and stacking, warn, block, soft thresholds and shadow mode.

use crate::common;

use common::events::NOW;
use common::{at, reached, setup, GPT5};
use usage_guard::{AdmitRequest, Error, LimitType, Policy};

fn errors(toml: &str) -> Vec<String> {
    match Policy::from_toml(toml) {
        Err(Error::Policy(errors)) => errors.iter().map(|e| e.to_string()).collect(),
        Err(other) => panic!("expected policy errors, got {other}"),
        Ok(_) => panic!("expected policy errors, the policy was accepted"),
    }
}

fn call(user: &str, attributes: &[(&str, &str)]) -> AdmitRequest {
    common::events::call(Some(user), attributes)
}

#[test]
fn bad_rules_are_refused_with_their_paths() {
    let found = errors(&format!(
        r#"{GPT5}
[[rules]]
name = "a"
applies_when = {{ modle = "gpt-5" }}
count_by = ["credentail"]
amount = "requests"
budget = 5
window = {{ kind = "rolling", count = 1, unit = "fortnights" }}

[[rules]]
name = "b"
amount = "cost"
budget = 5
window = {{ kind = "calendar", unit = "month", anchor_zone = "Mars/Olympus" }}
action = "explode"

[[rules]]
name = "c"
amount = "requests"
budget = 5
window = "minute"
action = "degrade"
degrade_to = "gpt-6"

[[rules]]
name = "d"
amount = "requests"
budget = 5
window = "minute"
action = "halt_session"

[[rules]]
name = "e"
amount = "requests"
budget = 5
window = "minute"
action = "warn"
action_duration_seconds = 60
"#
    ));
    let expected = [
        "rules[0].applies_when.modle: is not an attribute (did you mean \"model\"?); accepted: scope, principal, credential, session, agent, task, model, provider, endpoint, environment, request_fingerprint, team, role",
        "rules[0].count_by[0]: is not an attribute (did you mean \"credential\"?); accepted: scope, principal, credential, session, agent, task, model, provider, endpoint, environment, request_fingerprint, team, role (got \"credentail\")",
        "rules[0].window.unit: is not a rolling unit; accepted: seconds, minutes, hours, days, weeks (got \"fortnights\")",
        "rules[1].window.anchor_zone: is not an IANA time zone",
        "rules[1].action: is not an action; accepted: warn, block, throttle, degrade, halt_session (got \"explode\")",
        "rules[2].degrade_to: is not a model of the policy; defined models: gpt-5 (got \"gpt-6\")",
        "rules[3].action_duration_seconds: is required with action = \"halt_session\"",
        "rules[4].action_duration_seconds: is refused with action = \"warn\"",
    ];
    assert_eq!(found.len(), expected.len(), "{found:#?}");
    for (got, want) in found.iter().zip(expected) {
        assert!(
            got.starts_with(want),
            "{got}\n  does not start with\n{want}"
        );
    }
}

#[test]
fn a_rule_counts_only_the_calls_it_applies_to() {
    for attr in [
        "scope",
        "credential",
        "session",
        "agent",
        "task",
        "endpoint",
        "environment",
        "request_fingerprint",
        "team",
        "role",
    ] {
        let s = setup(
            &format!(
                r#"{GPT5}
[[rules]]
name = "one"
applies_when = {{ {attr} = ["x", "y"] }}
amount = "requests"
budget = 1
window = "day"
"#
            ),
            NOW,
        );
        let mut keep = Vec::new();
        let other = call("alice", &[(attr, "z")]);
        keep.push(s.guard.admit_blocking(other.clone()).unwrap());
        keep.push(s.guard.admit_blocking(other).unwrap());
        keep.push(s.guard.admit_blocking(call("alice", &[])).unwrap());
        keep.push(
            s.guard
                .admit_blocking(call("alice", &[(attr, "y")]))
                .unwrap(),
        );
        let r = reached(s.guard.admit_blocking(call("bob", &[(attr, "x")])));
        assert_eq!(r.limit_type, Some(LimitType::Rule), "{attr}");
        assert!(r.message.contains("Rule \"one\""), "{attr}: {}", r.message);
    }
}

#[test]
fn principal_model_and_provider_come_from_the_call() {
    let s = setup(
        &format!(
            r#"{GPT5}
[[rules]]
name = "alice on openai gpt-5"
applies_when = {{ principal = "alice", model = "gpt-5", provider = "openai" }}
amount = "requests"
budget = 1
window = "day"
"#
        ),
        NOW,
    );
    let _bob = s.guard.admit_blocking(call("bob", &[])).unwrap();
    let _alice = s.guard.admit_blocking(call("alice", &[])).unwrap();
    reached(s.guard.admit_blocking(call("alice", &[])));
    s.guard.admit_blocking(call("bob", &[])).unwrap();
    // The call gives them: attributes may not.
    let err = s
        .guard
        .admit_blocking(call("alice", &[("principal", "bob")]))
        .unwrap_err();
    assert!(err.to_string().contains("comes from the call"), "{err}");
    let err = s
        .guard
        .admit_blocking(call("alice", &[("credentail", "k")]))
        .unwrap_err();
    assert!(err.to_string().contains("is not an attribute"), "{err}");
}

#[test]
fn count_by_fans_into_one_counter_per_value_tuple() {
    let s = setup(
        &format!(
            r#"{GPT5}
[[rules]]
name = "two a day per credential per agent"
count_by = ["credential", "agent"]
amount = "requests"
budget = 2
window = "day"
"#
        ),
        NOW,
    );
    let k = |c: &'static str, a: &'static str| call("alice", &[("credential", c), ("agent", a)]);
    let mut keep = Vec::new();
    for _ in 0..2 {
        keep.push(s.guard.admit_blocking(k("k1", "a1")).unwrap());
    }
    let r = reached(s.guard.admit_blocking(k("k1", "a1")));
    assert!(
        r.message.contains("for this credential and agent"),
        "{}",
        r.message
    );
    keep.push(s.guard.admit_blocking(k("k1", "a2")).unwrap());
    keep.push(s.guard.admit_blocking(k("k2", "a1")).unwrap());
    // An id with separators stays its own counter.
    keep.push(s.guard.admit_blocking(k("k1,a1", "x")).unwrap());
    // A call without a count_by attribute is not counted by the rule.
    for _ in 0..3 {
        keep.push(s.guard.admit_blocking(call("alice", &[])).unwrap());
    }
}

#[test]
fn identical_identities_take_the_tightest_budget_and_others_stack() {
    let s = setup(
        &format!(
            r#"{GPT5}
[[rules]]
name = "loose"
count_by = ["credential"]
amount = "requests"
budget = 5
window = "day"

[[rules]]
name = "tight"
count_by = ["credential"]
amount = "requests"
budget = 2
window = "day"

[[rules]]
name = "per team"
count_by = ["team"]
amount = "requests"
budget = 3
window = "day"
"#
        ),
        NOW,
    );
    let k = |c: &'static str| call("alice", &[("credential", c), ("team", "t")]);
    let _one = s.guard.admit_blocking(k("k1")).unwrap();
    let _two = s.guard.admit_blocking(k("k1")).unwrap();
    let r = reached(s.guard.admit_blocking(k("k1")));
    assert!(r.message.contains("Rule \"tight\""), "{}", r.message);
    assert_eq!(r.amount, Some(2));
    let _three = s.guard.admit_blocking(k("k2")).unwrap();
    let r = reached(s.guard.admit_blocking(k("k3")));
    assert!(r.message.contains("Rule \"per team\""), "{}", r.message);
}

#[test]
fn warn_counts_and_continues_and_thresholds_warn() {
    let s = setup(
        &format!(
            r#"{GPT5}
[[rules]]
name = "soft"
amount = "requests"
budget = 2
window = "day"
action = "warn"

[[rules]]
name = "hard"
amount = "requests"
budget = 10
window = "day"
warn_at = [0.2, 0.3]
"#
        ),
        NOW,
    );
    let one = s.guard.admit_blocking(call("alice", &[])).unwrap();
    assert!(one.warnings().is_empty(), "{:?}", one.warnings());
    let two = s.guard.admit_blocking(call("alice", &[])).unwrap();
    let w = two.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!((&*w[0].rule, w[0].used, w[0].threshold), ("hard", 2, 0.2));
    let three = s.guard.admit_blocking(call("alice", &[])).unwrap();
    let w = three.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!((&*w[0].rule, w[0].threshold), ("hard", 0.3));
    assert_eq!((&*w[1].rule, w[1].used, w[1].budget), ("soft", 3, 2));
    assert!(!w[1].would_refuse, "a warn rule never refuses");
}

#[test]
fn shadow_mode_never_refuses_on_a_rule_and_says_what_would_have() {
    let s = setup(
        &format!(
            r#"{GPT5}
[settings]
mode = "shadow"

[[rules]]
name = "one a day"
amount = "requests"
budget = 1
window = {{ kind = "calendar", unit = "day", anchor_zone = "Europe/Paris" }}
"#
        ),
        NOW,
    );
    let first = s.guard.admit_blocking(call("alice", &[])).unwrap();
    assert!(first.warnings().is_empty());
    let second = s.guard.admit_blocking(call("alice", &[])).unwrap();
    let w = second.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].would_refuse);
    assert_eq!((w[0].used, w[0].budget), (2, 1));
    // Midnight in Paris (23:00 UTC) starts a new day.
    s.clock.set(at("2026-12-02T23:00:00Z"));
    let next = s.guard.admit_blocking(call("alice", &[])).unwrap();
    assert!(next.warnings().is_empty(), "{:?}", next.warnings());
}

#[test]
fn a_block_rule_joins_the_reservation_with_the_limit_kinds() {
    let s = setup(
        &format!(
            r#"{GPT5}
[[limits.direct]]
user = "alice"
model = "gpt-5"
rules = [{{ metric = "requests", amount = 100, window = "day" }}]

[[rules]]
name = "per session"
count_by = ["session"]
amount = "tokens"
budget = 1000
window = {{ kind = "rolling", count = 10, unit = "minutes" }}
"#
        ),
        NOW,
    );
    let t = s
        .guard
        .admit_blocking(AdmitRequest {
            max_output_tokens: Some(5000),
            ..call("alice", &[("session", "s1")])
        })
        .unwrap();
    // The rule's 1,000 tokens cap the output: 1,000 - 100 prompt.
    assert_eq!(t.ceiling().max_output_tokens, 900);
    assert_eq!(t.source().kind.as_str(), "direct");
    let r = common::refusal(s.guard.admit_blocking(call("alice", &[("session", "s1")])));
    assert_eq!(r.limit_type, Some(LimitType::Rule));
    assert!(
        r.message.contains("1,000 tokens every 10 minutes"),
        "{}",
        r.message
    );
    t.release_blocking();
    s.guard
        .admit_blocking(call("alice", &[("session", "s1")]))
        .unwrap();
}

#[test]
fn each_rule_reads_as_one_sentence_and_names_its_overlaps() {
    let policy = common::policy(&format!(
        r#"{GPT5}
[[rules]]
name = "monthly"
applies_when = {{ model = "gpt-5", environment = ["prod", "staging"] }}
count_by = ["credential"]
amount = "cost"
budget = 25
window = {{ kind = "calendar", unit = "month", anchor_zone = "Europe/Paris", anchor_day = 1 }}
warn_at = [0.8, 0.95]

[[rules]]
name = "dev only"
applies_when = {{ environment = "dev" }}
amount = "requests"
budget = 10
window = {{ kind = "rolling", count = 10, unit = "minutes" }}
action = "warn"
"#
    ));
    let (monthly, dev) = (&policy.rules[0], &policy.rules[1]);
    assert_eq!(
        monthly.sentence(),
        "when model is gpt-5 and environment is prod or staging, count cost per credential \
         over a calendar month from the 1st 00:00 Europe/Paris; above $25.00: block \
         (warn at 80%, 95%)"
    );
    assert_eq!(
        dev.sentence(),
        "when environment is dev, count requests over a rolling 10 minutes; above 10: warn"
    );
    assert!(!monthly.overlaps(dev) && !dev.overlaps(monthly));
    assert!(monthly.overlaps(monthly));
}

#[test]
fn halt_session_halts_that_session_for_every_guard_and_no_other() {
    let toml = format!(
        r#"{GPT5}
[[rules]]
name = "runaway"
count_by = ["session"]
amount = "requests"
budget = 2
window = "minute"
action = "halt_session"
action_duration_seconds = 600
"#
    );
    let s = setup(&toml, NOW);
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = events.clone();
    s.guard.on_event(move |e| {
        sink.lock()
            .unwrap()
            .push((e.rule.to_string(), e.action.as_str()))
    });
    // Another guard on the same store (another process on Redis: tests_py/policy/test_rules.py).
    let other = usage_guard::Guard::new(common::policy(&toml), s.store.clone(), s.clock.clone());
    let sess = |id: &'static str| call("alice", &[("session", id)]);
    let _a = s.guard.admit_blocking(sess("s1")).unwrap();
    let _b = s.guard.admit_blocking(sess("s1")).unwrap();
    let r = reached(s.guard.admit_blocking(sess("s1")));
    assert!(
        r.message.contains("Rule \"runaway\" has used"),
        "{}",
        r.message
    );
    drop((_a, _b));
    // The minute is over and the counter empty: still halted, on every guard.
    s.clock.set(at("2026-12-02T10:05:00Z"));
    let r = reached(other.admit_blocking(sess("s1")));
    assert!(
        r.message
            .contains("halted this session until 2026-12-02T10:10:00"),
        "{}",
        r.message
    );
    assert_eq!(r.retry_after_seconds, Some(300));
    // Another session on the same rule is not halted.
    let _c = other.admit_blocking(sess("s2")).unwrap();
    // The halt ends after its duration.
    s.clock.set(at("2026-12-02T10:10:00Z"));
    let _d = s.guard.admit_blocking(sess("s1")).unwrap();
}

#[test]
fn degrade_admits_the_cheaper_model_when_it_passes_admission() {
    let s = setup(
        &format!(
            r#"{GPT5}
[models.small]
provider = "openai"
context_window = 1000

[[rules]]
name = "gpt-5 per agent"
applies_when = {{ model = "gpt-5" }}
count_by = ["agent"]
amount = "requests"
budget = 1
window = "day"
action = "degrade"
degrade_to = "small"

[[rules]]
name = "small per agent"
applies_when = {{ model = "small" }}
count_by = ["agent"]
amount = "requests"
budget = 1
window = "day"
"#
        ),
        NOW,
    );
    let agent = |a: &'static str| call("alice", &[("agent", a)]);
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = events.clone();
    s.guard
        .on_event(move |e| sink.lock().unwrap().push(e.action.as_str()));
    let first = s.guard.admit_blocking(agent("a1")).unwrap();
    assert_eq!((first.model(), first.degraded_from()), ("gpt-5", None));
    let second = s.guard.admit_blocking(agent("a1")).unwrap();
    assert_eq!(
        (second.model(), second.degraded_from()),
        ("small", Some("gpt-5"))
    );
    assert_eq!(*events.lock().unwrap(), vec!["degrade"]);
    // The substitute must pass admission itself: its own rule is spent now.
    let r = reached(s.guard.admit_blocking(agent("a1")));
    assert_eq!(events.lock().unwrap().len(), 1);
    assert!(
        r.message.contains("Rule \"gpt-5 per agent\""),
        "{}",
        r.message
    );
    // ...and its context check: a prompt the small model cannot take is not degraded.
    let _other = s.guard.admit_blocking(agent("a2")).unwrap();
    let big = AdmitRequest {
        prompt_tokens: Some(5000),
        ..agent("a2")
    };
    let r = reached(s.guard.admit_blocking(big));
    assert!(
        r.message.contains("Rule \"gpt-5 per agent\""),
        "{}",
        r.message
    );
}

#[test]
fn throttle_waits_for_room_within_its_bound_and_no_longer() {
    let s = setup(
        &format!(
            r#"{GPT5}
[[rules]]
name = "one a second"
applies_when = {{ task = "fast" }}
amount = "requests"
budget = 1
window = {{ kind = "rolling", count = 1, unit = "seconds" }}
action = "throttle"
throttle_max_wait = 2

[[rules]]
name = "one a minute"
applies_when = {{ task = "slow" }}
amount = "requests"
budget = 1
window = "minute"
action = "throttle"
throttle_max_wait = 2
"#
        ),
        NOW,
    );
    let fast = || call("alice", &[("task", "fast")]);
    let first = s.guard.admit_blocking(fast()).unwrap();
    first.bill_blocking(usage_guard::Usage::default()).unwrap();
    // The counter has room again when the bucket slides out, 2 s later in manual time (the
    // wait is the refusal's resets_at); the clock moves meanwhile.
    let clock = s.clock.clone();
    let mover = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        clock.advance(2000);
    });
    let started = std::time::Instant::now();
    let _second = s.guard.admit_blocking(fast()).unwrap();
    let waited = started.elapsed();
    mover.join().unwrap();
    // Never before the room came back (the clock moves at 200 ms). It may be at once then:
    // a waiter also wakes whenever any ticket of this process settles (`settle/wake.rs`),
    // and the other tests of this binary settle theirs meanwhile; else at its resets_at.
    assert!(
        waited >= std::time::Duration::from_millis(190),
        "{waited:?}"
    );
    // Well under two waits: the sleep's wake-up may come late on a loaded machine.
    assert!(
        waited < std::time::Duration::from_millis(3900),
        "{waited:?}"
    );
    // Room further away than the bound: refused at once, no wait.
    let slow = || call("bob", &[("task", "slow")]);
    let _third = s.guard.admit_blocking(slow()).unwrap();
    let started = std::time::Instant::now();
    let r = reached(s.guard.admit_blocking(slow()));
    assert!(started.elapsed() < std::time::Duration::from_millis(500));
    assert!(r.message.contains("one a minute"), "{}", r.message);
}

#[test]
fn a_parent_scope_rule_counts_its_children() {
    let s = setup(
        &format!(
            r#"{GPT5}
[scopes.acme]
[scopes.acme-eu]
parent = "acme"
[scopes.acme-eu-paris]
parent = "acme-eu"
[scopes.globex]

[[rules]]
name = "acme total"
applies_when = {{ scope = "acme" }}
amount = "requests"
budget = 2
window = "day"
"#
        ),
        NOW,
    );
    let scope = |id: &'static str| call("alice", &[("scope", id)]);
    let _a = s.guard.admit_blocking(scope("acme-eu-paris")).unwrap();
    let _b = s.guard.admit_blocking(scope("acme")).unwrap();
    let r = reached(s.guard.admit_blocking(scope("acme-eu")));
    assert!(r.message.contains("Rule \"acme total\""), "{}", r.message);
    let _c = s.guard.admit_blocking(scope("globex")).unwrap();
    let _d = s.guard.admit_blocking(scope("globex")).unwrap();
    let _e = s.guard.admit_blocking(scope("globex")).unwrap();
}

#[test]
fn a_scope_tree_names_defined_parents_and_has_no_loops() {
    let found = errors(
        r#"
[scopes.a]
parent = "b"
[scopes.b]
parent = "a"
[scopes.c]
parent = "nowhere"
"#,
    );
    assert!(
        found.iter().any(|e| e
            .starts_with("scopes.c.parent: is not a scope of the policy; defined scopes: a, b, c")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|e| e.starts_with("scopes.a.parent: the parents loop back")),
        "{found:#?}"
    );
}

#[test]
fn an_event_goes_out_once_per_window_per_counter_across_guards() {
    use std::sync::{Arc, Mutex};
    let toml = format!(
        r#"{GPT5}
[[rules]]
name = "soft"
count_by = ["agent"]
amount = "requests"
budget = 10
window = "minute"
warn_at = [0.3, 0.6]
"#
    );
    let s = setup(&toml, NOW);
    let seen: Arc<Mutex<Vec<(String, f64)>>> = Arc::default();
    let guards: Vec<usage_guard::Guard> = (0..3)
        .map(|_| {
            let g =
                usage_guard::Guard::new(common::policy(&toml), s.store.clone(), s.clock.clone());
            let seen = seen.clone();
            g.on_event(move |w| seen.lock().unwrap().push((w.rule.to_string(), w.threshold)));
            g
        })
        .collect();
    let mut keep = Vec::new();
    for i in 0..8 {
        keep.push(
            guards[i % 3]
                .admit_blocking(call("alice", &[("agent", "a")]))
                .unwrap(),
        );
    }
    assert_eq!(
        *seen.lock().unwrap(),
        vec![("soft".to_string(), 0.3), ("soft".to_string(), 0.6)]
    );
    // Another counter (agent), and the next window, send their own.
    keep.push(
        guards[0]
            .admit_blocking(call("alice", &[("agent", "b")]))
            .unwrap(),
    );
    assert_eq!(seen.lock().unwrap().len(), 2);
    drop(keep);
    s.clock.set(at("2026-12-02T10:01:00Z"));
    let keep: Vec<_> = (0..3)
        .map(|i| {
            guards[i]
                .admit_blocking(call("alice", &[("agent", "a")]))
                .unwrap()
        })
        .collect();
    assert_eq!(seen.lock().unwrap().len(), 3);
    drop(keep);
}

#[test]
fn set_policy_keeps_the_counters_of_rules_whose_identity_did_not_change() {
    let rule = |budget: u64, window: &str| {
        format!(
            r#"{GPT5}
[[rules]]
name = "renamed {budget}"
count_by = ["agent"]
amount = "requests"
budget = {budget}
window = "{window}"
"#
        )
    };
    let s = setup(&rule(5, "day"), NOW);
    let agent = || call("alice", &[("agent", "a")]);
    let _held: Vec<_> = (0..3)
        .map(|_| s.guard.admit_blocking(agent()).unwrap())
        .collect();
    // Another name and budget, the same identity: the 3 calls still count.
    s.guard.set_policy(common::policy(&rule(3, "day")));
    reached(s.guard.admit_blocking(agent()));
    // Another window is another counter.
    s.guard.set_policy(common::policy(&rule(3, "week")));
    let _fresh = s.guard.admit_blocking(agent()).unwrap();
}

//! Admission decisions on the in-memory store, driven by a manual clock.

use crate::common;

use common::*;
use usage_guard::{LimitType, Metric, Reason, SourceKind, Usage};

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

const DIRECT: &str = r#"
[[limits.direct]]
user = "alice"
model = "gpt-5"
rules = [{ metric = "tokens", amount = 100000, window = "day" }]
"#;

#[test]
fn a_direct_limit_refuses_with_its_words_and_reset() {
    let s = setup(&format!("{GPT5}{DIRECT}"), "2026-11-30T14:20:00Z");
    let t = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 1000, 4000))
        .unwrap();
    assert_eq!(t.source().kind, SourceKind::Direct);
    assert_eq!(t.ceiling().tokens, Some(5000));
    t.bill_blocking(usage(60_000, 40_000)).unwrap().unwrap();
    let r = reached(s.guard.admit_blocking(call("alice", "gpt-5", 10, 10)));
    assert_eq!(
        r.message,
        "You have used your 100,000 tokens a day on GPT-5. It resets at 2026-12-01T00:00:00Z."
    );
    assert_eq!(r.limit_type, Some(LimitType::Direct));
    assert!(!r.is_rate_limit());
    assert_eq!(r.retry_after_seconds, Some(9 * 3600 + 40 * 60));
    // The next day the limit has reset.
    s.clock.set(at("2026-12-01T00:00:00Z"));
    assert!(s
        .guard
        .admit_blocking(call("alice", "gpt-5", 10, 10))
        .is_ok());
}

#[test]
fn the_reservation_is_the_lesser_of_estimate_and_what_is_left() {
    let s = setup(&format!("{GPT5}{DIRECT}"), "2026-11-30T10:00:00Z");
    let first = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 2_000, 90_000))
        .unwrap();
    assert_eq!(first.ceiling().tokens, Some(92_000));
    assert_eq!(first.ceiling().max_output_tokens, 90_000);
    // 8,000 left: the second call is held to what is left and its output lowered to fit.
    let second = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 1_000, 50_000))
        .unwrap();
    assert_eq!(second.ceiling().tokens, Some(8_000));
    assert_eq!(second.ceiling().max_output_tokens, 7_000);
    // Too little left for the prompt plus the minimum output: does not fit, nothing held.
    // Nothing is used yet: the two calls in progress hold it all.
    let r = refusal(s.guard.admit_blocking(call("alice", "gpt-5", 1, 50_000)));
    assert_eq!(r.reason, Reason::HeldByCalls, "{}", r.message);
    first.release_blocking();
    let r = refusal(
        s.guard
            .admit_blocking(call("alice", "gpt-5", 91_900, 50_000)),
    );
    // 92,000 are left, the second call in progress holds 8,000: it would fit without it.
    assert_eq!(r.reason, Reason::HeldByCalls, "{}", r.message);
    assert!(
        r.message
            .starts_with("You have 8,000 tokens held by calls in progress (0 tokens used)"),
        "{}",
        r.message
    );
    second.release_blocking();
    s.guard
        .admit_blocking(call("alice", "gpt-5", 1_000, 98_000))
        .unwrap()
        .bill_blocking(usage(8_000, 0))
        .unwrap();
    let r = refusal(
        s.guard
            .admit_blocking(call("alice", "gpt-5", 91_900, 50_000)),
    );
    assert_eq!(r.reason, Reason::DoesNotFit);
    assert!(
        r.message
            .starts_with("This call needs more than is left: you have 92,000 tokens left"),
        "{}",
        r.message
    );
}

#[test]
fn no_caller_maximum_falls_back_to_the_model_then_the_default() {
    let toml = format!("{GPT5}{DIRECT}\n[models.bare]\n[[limits.direct]]\nuser = \"alice\"\nmodel = \"bare\"\nrules = [{{ metric = \"tokens\", amount = 100000, window = \"day\" }}]\n");
    let s = setup(&toml, "2026-11-30T10:00:00Z");
    let mut req = call("alice", "gpt-5", 100, 0);
    req.max_output_tokens = None;
    let t = s.guard.admit_blocking(req.clone()).unwrap();
    // The model allows 128,000 and 99,900 fit after the prompt: a call without a maximum
    // holds `settings.uncapped_output` of it, half by default.
    assert_eq!(t.ceiling().max_output_tokens, 49_950);
    t.release_blocking();
    req.model = "bare".into();
    let t = s.guard.admit_blocking(req).unwrap();
    assert_eq!(t.ceiling().max_output_tokens, 8192);
    assert_eq!(t.ceiling().tokens, Some(8292));
}

const TEAMS: &str = r#"
[teams.research]
display_name = "Research"
members = ["alice", "bob"]

[teams.support]
display_name = "Support"
members = ["bob"]

[teams.secret]
members = ["eve"]

[[limits.team]]
team = "research"
model = "gpt-5"
shared = [{ metric = "tokens", amount = 1000, window = "day" }]

[[limits.team]]
team = "support"
model = "gpt-5"
shared = [{ metric = "tokens", amount = 1000, window = "day" }]

[[limits.team]]
team = "secret"
model = "gpt-5"
shared = [{ metric = "tokens", amount = 1000, window = "day" }]

[[limits.team_total]]
team = "support"
rules = [{ metric = "requests", amount = 1, window = "day" }]

[[limits.public]]
model = "gpt-5"
each_person = [{ metric = "tokens", amount = 1500, window = "day" }]
"#;

#[test]
fn a_team_with_nothing_left_passes_the_call_on() {
    let s = setup(&format!("{GPT5}{TEAMS}"), "2026-11-30T10:00:00Z");
    // bob: research first, then support, then public use.
    let t = s
        .guard
        .admit_blocking(call("bob", "gpt-5", 100, 100))
        .unwrap();
    assert_eq!(&*t.source().id, "research");
    t.bill_blocking(usage(600, 400)).unwrap();
    let t = s
        .guard
        .admit_blocking(call("bob", "gpt-5", 100, 100))
        .unwrap();
    assert_eq!(&*t.source().id, "support");
    t.bill_blocking(usage(10, 10)).unwrap();
    // support's Team Total (1 request a day) is used up: passes on to public use.
    let t = s
        .guard
        .admit_blocking(call("bob", "gpt-5", 100, 100))
        .unwrap();
    assert_eq!(t.source().kind, SourceKind::Public);
    // bob's own per-model counter holds his team use too (1,020 of 1,500): 480 left.
    assert_eq!(t.ceiling().tokens, Some(200));
    t.bill_blocking(usage(300, 200)).unwrap();
    let r = reached(s.guard.admit_blocking(call("bob", "gpt-5", 1, 1)));
    assert_eq!(r.limit_type, Some(LimitType::Public));
    assert_eq!(r.message, "You have used your 1,500 tokens a day of public use on GPT-5. It resets at 2026-12-01T00:00:00Z.");
}

#[test]
fn when_every_team_is_used_up_the_refusal_names_only_the_callers_team() {
    let toml = format!("{GPT5}{TEAMS}").replace(
        "[[limits.public]]\nmodel = \"gpt-5\"\neach_person = [{ metric = \"tokens\", amount = 1500, window = \"day\" }]\n",
        "",
    );
    let s = setup(&toml, "2026-11-30T10:00:00Z");
    let t = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 10, 10))
        .unwrap();
    t.bill_blocking(usage(700, 300)).unwrap();
    let r = reached(s.guard.admit_blocking(call("alice", "gpt-5", 1, 1)));
    assert_eq!(r.limit_type, Some(LimitType::Team));
    assert_eq!(r.message, "Team Research has used its 1,000 tokens a day on GPT-5. It resets at 2026-12-01T00:00:00Z.");
    assert!(!r.message.contains("secret") && !r.message.contains("Support"));
}

#[test]
fn moving_from_public_use_to_a_direct_limit_keeps_the_days_use() {
    let public = format!(
        "{GPT5}[[limits.public]]\nmodel = \"gpt-5\"\neach_person = [{{ metric = \"tokens\", amount = 5000, window = \"day\" }}]\n"
    );
    let s = setup(&public, "2026-11-30T10:00:00Z");
    let t = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 10, 10))
        .unwrap();
    assert_eq!(t.source().kind, SourceKind::Public);
    t.bill_blocking(usage(2_000, 1_000)).unwrap();
    s.guard.set_policy(policy(&format!(
        "{GPT5}[[limits.direct]]\nuser = \"alice\"\nmodel = \"gpt-5\"\nrules = [{{ metric = \"tokens\", amount = 4000, window = \"day\" }}]\n"
    )));
    let view = futures::executor::block_on(s.guard.usage(Some("alice"), "gpt-5")).unwrap();
    assert_eq!(view.source.kind, SourceKind::Direct);
    assert_eq!(view.rules[0].used, 3_000);
    assert_eq!(view.rules[0].left, 1_000);
    let t = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 100, 5_000))
        .unwrap();
    assert_eq!(t.ceiling().tokens, Some(1_000));
}

#[test]
fn every_ceiling_refuses_when_it_has_nothing_left() {
    let toml = format!(
        "{GPT5}{DIRECT}
[[limits.model_total]]
model = \"gpt-5\"
rules = [{{ metric = \"requests\", amount = 3, window = \"day\" }}]

[[limits.user_total]]
user = \"bob\"
rules = [{{ metric = \"requests\", amount = 1, window = \"hour\" }}]

[limits.platform]
rules = [{{ metric = \"requests\", amount = 2, window = \"day\" }}]
"
    );
    let s = setup(&toml, "2026-11-30T10:00:00Z");
    s.guard
        .admit_blocking(call("bob", "gpt-5", 1, 1))
        .unwrap()
        .bill_blocking(usage(1, 1))
        .unwrap();
    let r = reached(s.guard.admit_blocking(call("bob", "gpt-5", 1, 1)));
    assert_eq!(r.limit_type, Some(LimitType::UserTotal));
    assert!(r.is_rate_limit());
    assert_eq!(r.message, "You have used your 1 request an hour across all models. It resets at 2026-11-30T12:00:00Z.");
    // (One request rounds up to a whole request until the previous bucket has slid out.)
    s.guard
        .admit_blocking(call("alice", "gpt-5", 1, 1))
        .unwrap()
        .bill_blocking(usage(1, 1))
        .unwrap();
    s.guard
        .admit_blocking(call("alice", "gpt-5", 1, 1))
        .unwrap()
        .bill_blocking(usage(1, 1))
        .unwrap();
    // The model total (3 a day) is used up now, for everyone, even with room elsewhere.
    let r = reached(s.guard.admit_blocking(call("carol", "gpt-5", 1, 1)));
    assert_eq!(r.limit_type, Some(LimitType::ModelTotal));
    assert_eq!(
        r.message,
        "GPT-5 has used its 3 requests a day. It resets at 2026-12-01T00:00:00Z."
    );
    // alice's platform limit (2 a day) is used up too; the refusal that frees up last wins.
    let r = reached(s.guard.admit_blocking(call("alice", "gpt-5", 1, 1)));
    assert!(matches!(
        r.limit_type,
        Some(LimitType::ModelTotal | LimitType::Platform)
    ));
}

#[test]
fn a_router_call_skips_counters_that_span_models() {
    let toml = format!(
        "{GPT5}
[models.auto]
router = true

[[limits.user_total]]
user = \"alice\"
rules = [{{ metric = \"requests\", amount = 1, window = \"day\" }}]

[limits.platform]
rules = [{{ metric = \"tokens\", amount = 10, window = \"day\" }}]
"
    );
    let s = setup(&toml, "2026-11-30T10:00:00Z");
    // The routed-to model's call counts once across models...
    s.guard
        .admit_blocking(call("alice", "gpt-5", 1, 1))
        .unwrap()
        .bill_blocking(usage(1, 1))
        .unwrap();
    // ...the router's own call does not touch those counters, so it still passes.
    let t = s
        .guard
        .admit_blocking(call("alice", "auto", 100, 100))
        .unwrap();
    assert!(t.path().counters.is_empty());
    t.bill_blocking(usage(100, 100)).unwrap();
    assert!(
        reached(s.guard.admit_blocking(call("alice", "gpt-5", 1, 1))).limit_type
            == Some(LimitType::UserTotal)
    );
}

#[test]
fn calls_without_user_or_rules_never_touch_the_store() {
    let s = setup(&format!("{GPT5}{DIRECT}"), "2026-11-30T10:00:00Z");
    let mut req = call("nobody", "gpt-5", 10, 10);
    req.user = None;
    let t = s.guard.admit_blocking(req).unwrap();
    assert_eq!(t.source().kind, SourceKind::Public);
    t.bill_blocking(usage(1_000_000, 1_000_000)).unwrap();
    let t = s
        .guard
        .admit_blocking(call("bob", "gpt-5", 10, 10))
        .unwrap();
    assert_eq!(t.ceiling().tokens, None);
    t.bill_blocking(usage(5, 5)).unwrap();
    assert!(s.store.is_empty(), "an unlimited path touched the store");
}

#[test]
fn a_request_rule_holds_one_request_from_admission() {
    let toml = format!("{GPT5}[[limits.direct]]\nuser = \"alice\"\nmodel = \"gpt-5\"\nrules = [{{ metric = \"requests\", amount = 2, window = \"minute\" }}]\n");
    let s = setup(&toml, "2026-11-30T10:00:00Z");
    let a = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 1, 1))
        .unwrap();
    let b = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 1, 1))
        .unwrap();
    let r = reached(s.guard.admit_blocking(call("alice", "gpt-5", 1, 1)));
    assert!(r.is_rate_limit());
    assert_eq!(
        r.message.split(". It resets").next().unwrap(),
        "You have used your 2 requests a minute on GPT-5"
    );
    assert!(a.release_blocking());
    let c = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 1, 1))
        .unwrap();
    b.bill_blocking(usage(1, 1)).unwrap();
    c.bill_blocking(usage(1, 1)).unwrap();
    assert_eq!(
        reached(s.guard.admit_blocking(call("alice", "gpt-5", 1, 1))).metric,
        Some(Metric::Requests)
    );
}

#[test]
fn compute_time_is_checked_before_and_counted_at_the_end() {
    let toml = format!("{GPT5}[[limits.direct]]\nuser = \"alice\"\nmodel = \"gpt-5\"\nrules = [{{ metric = \"compute_ms\", amount = 1000, window = \"day\" }}]\n");
    let s = setup(&toml, "2026-11-30T10:00:00Z");
    let a = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 1, 1))
        .unwrap();
    let b = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 1, 1))
        .unwrap();
    assert!(a.reserved().is_empty(), "compute time is never reserved");
    s.clock.advance(700);
    // Measured from admission by the guard's clock.
    assert_eq!(
        a.bill_blocking(usage(1, 1)).unwrap().unwrap().compute_ms,
        700
    );
    let billed = b
        .bill_blocking(Usage {
            compute_ms: Some(900),
            ..usage(1, 1)
        })
        .unwrap()
        .unwrap();
    assert_eq!(billed.compute_ms, 900);
    let r = reached(s.guard.admit_blocking(call("alice", "gpt-5", 1, 1)));
    assert_eq!(r.metric, Some(Metric::ComputeMs));
}

#[test]
fn bill_goes_into_the_bucket_of_the_moment_and_is_kept_past_the_amount() {
    let s = setup(&format!("{GPT5}{DIRECT}"), "2026-11-30T23:59:00Z");
    let t = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 100, 100))
        .unwrap();
    s.clock.set(at("2026-12-01T00:01:00Z"));
    t.bill_blocking(usage(150_000, 50_000)).unwrap();
    let view = futures::executor::block_on(s.guard.usage(Some("alice"), "gpt-5")).unwrap();
    assert_eq!(view.rules[0].used, 200_000, "real use is never dropped");
    assert_eq!(view.rules[0].reserved, 0);
    assert_eq!(view.rules[0].left, 0);
    // Nothing went to the day that ended.
    s.clock.set(at("2026-11-30T23:59:30Z"));
    let view = futures::executor::block_on(s.guard.usage(Some("alice"), "gpt-5")).unwrap();
    assert_eq!(view.rules[0].used, 0);
}

#[test]
fn cost_is_billed_from_prices_in_exact_micro_dollars() {
    let toml = format!("{GPT5}[[limits.direct]]\nuser = \"alice\"\nmodel = \"gpt-5\"\nrules = [{{ metric = \"cost\", amount = 1.0, window = \"day\" }}]\n");
    let s = setup(&toml, "2026-11-30T10:00:00Z");
    let t = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 1_000, 1_000))
        .unwrap();
    // Estimated at the dearest rates: 1,000 × $1.25/M + 1,000 × $10/M = 11,250 µ$.
    assert_eq!(t.ceiling().cost_micros, Some(11_250));
    let billed = t
        .bill_blocking(Usage {
            cached_input_tokens: 400,
            ..usage(1_000, 333)
        })
        .unwrap()
        .unwrap();
    // 600 × 1.25 + 400 × 0.125 + 333 × 10 = 750 + 50 + 3,330 = 4,130 µ$.
    assert_eq!(billed.cost_micros, 4_130);
    // $1 a day: the cost bound lowers the output maximum.
    let t = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 1_000, 1_000_000))
        .unwrap();
    let ceiling = t.ceiling();
    assert_eq!(ceiling.cost_micros, Some(1_000_000 - 4_130));
    assert_eq!(ceiling.max_output_tokens, (1_000_000 - 4_130 - 1_250) / 10);
}

#[test]
fn holds_expire_after_fifteen_minutes() {
    let s = setup(&format!("{GPT5}{DIRECT}"), "2026-11-30T10:00:00Z");
    let lost = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 50_000, 50_000))
        .unwrap();
    // Nothing is used: the call in progress holds the room, so the refusal says so.
    assert!(held(s.guard.admit_blocking(call("alice", "gpt-5", 1, 1)))
        .limit_type
        .is_some());
    s.clock.advance(16 * 60_000);
    let t = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 1, 1))
        .unwrap();
    assert_eq!(t.ceiling().tokens, Some(2));
    // Settling the expired ticket later gives nothing back twice and bills its use.
    lost.bill_blocking(usage(10, 10)).unwrap();
    let view = futures::executor::block_on(s.guard.usage(Some("alice"), "gpt-5")).unwrap();
    assert_eq!((view.rules[0].used, view.rules[0].reserved), (20, 2));
}

#[test]
fn a_ticket_settles_once() {
    let s = setup(&format!("{GPT5}{DIRECT}"), "2026-11-30T10:00:00Z");
    let t = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 10, 10))
        .unwrap();
    assert!(t.bill_blocking(usage(5, 5)).unwrap().is_some());
    assert!(t.bill_blocking(usage(5, 5)).unwrap().is_none());
    assert!(!t.release_blocking());
    let t = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 10, 10))
        .unwrap();
    assert!(t.release_blocking());
    assert!(t.bill_blocking(usage(5, 5)).unwrap().is_none());
    let view = futures::executor::block_on(s.guard.usage(Some("alice"), "gpt-5")).unwrap();
    assert_eq!((view.rules[0].used, view.rules[0].reserved), (10, 0));
    // Bad usage is refused before anything settles.
    let t = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 10, 10))
        .unwrap();
    assert!(t
        .bill_blocking(Usage {
            cached_input_tokens: 9,
            ..usage(5, 5)
        })
        .is_err());
    assert!(!t.is_settled());
}

#[test]
fn the_memory_store_forgets_buckets_after_their_retention() {
    let toml = format!("{GPT5}[[limits.direct]]\nuser = \"alice\"\nmodel = \"gpt-5\"\nrules = [{{ metric = \"tokens\", amount = 1000, window = \"10 minutes\" }}]\n");
    let s = setup(&toml, "2026-11-30T10:00:00Z");
    s.guard
        .admit_blocking(call("alice", "gpt-5", 1, 1))
        .unwrap()
        .bill_blocking(usage(1, 1))
        .unwrap();
    assert_eq!(s.store.len(), 1);
    // Kept while it can still be the previous bucket (window + a minute after its end)...
    // (holds live beside the buckets: only a bill writes a bucket)
    s.clock.set(at("2026-11-30T10:20:59Z"));
    s.guard
        .admit_blocking(call("alice", "gpt-5", 1, 1))
        .unwrap()
        .bill_blocking(usage(1, 1))
        .unwrap();
    assert_eq!(s.store.len(), 2);
    // ...and swept after.
    s.clock.set(at("2026-11-30T10:45:00Z"));
    s.guard
        .admit_blocking(call("alice", "gpt-5", 1, 1))
        .unwrap()
        .bill_blocking(usage(1, 1))
        .unwrap();
    assert_eq!(s.store.len(), 1, "only the current bucket is left");
}

#[test]
fn paths_are_cached_for_thirty_seconds_and_dropped_at_a_new_policy() {
    let s = setup(&format!("{GPT5}{DIRECT}"), "2026-11-30T10:00:00Z");
    let first = s.guard.path(Some("alice"), "gpt-5").unwrap();
    s.clock.advance(29_999);
    assert!(std::sync::Arc::ptr_eq(
        &first,
        &s.guard.path(Some("alice"), "gpt-5").unwrap()
    ));
    s.clock.advance(1);
    let second = s.guard.path(Some("alice"), "gpt-5").unwrap();
    assert!(
        !std::sync::Arc::ptr_eq(&first, &second),
        "resolved again after 30 s"
    );
    assert_eq!(first, second);
    s.guard.set_policy(policy(GPT5));
    assert_eq!(s.guard.policy_version(), 2);
    let third = s.guard.path(Some("alice"), "gpt-5").unwrap();
    assert!(third.sources.is_empty(), "the new policy applies at once");
}

#[test]
fn a_ticket_dropped_without_bill_or_release_gives_its_holds_back() {
    let s = setup(&format!("{GPT5}{DIRECT}"), "2026-11-30T10:00:00Z");
    let t = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 50_000, 50_000))
        .unwrap();
    let clone = t.clone();
    drop(t);
    let held = |s: &Setup| {
        futures::executor::block_on(s.guard.usage(Some("alice"), "gpt-5"))
            .unwrap()
            .rules[0]
            .reserved
    };
    assert_eq!(held(&s), 100_000, "a clone still holds the ticket");
    drop(clone);
    assert_eq!(held(&s), 0);
    assert_eq!(
        s.guard
            .stats()
            .dropped
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    // A settled ticket dropped does nothing more.
    let t = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 10, 10))
        .unwrap();
    t.bill_blocking(usage(5, 5)).unwrap();
    drop(t);
    let view = futures::executor::block_on(s.guard.usage(Some("alice"), "gpt-5")).unwrap();
    assert_eq!((view.rules[0].used, view.rules[0].reserved), (10, 0));
    assert_eq!(
        s.guard
            .stats()
            .dropped
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
}

#[test]
fn holds_from_the_previous_bucket_still_count_in_the_next() {
    // A call admitted just before midnight bills into the new day: its hold counts there.
    let s = setup(&format!("{GPT5}{DIRECT}"), "2026-11-30T23:59:59Z");
    let late = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 50_000, 50_000))
        .unwrap();
    s.clock.set(at("2026-12-01T00:00:01Z"));
    let r = held(s.guard.admit_blocking(call("alice", "gpt-5", 1, 1)));
    assert_eq!(r.limit_type, Some(LimitType::Direct));
    late.bill_blocking(usage(60_000, 40_000)).unwrap();
    reached(s.guard.admit_blocking(call("alice", "gpt-5", 1, 1)));
    // Sliding: a hold of the previous minute counts in full, not weighted.
    let toml = format!("{GPT5}[[limits.direct]]\nuser = \"alice\"\nmodel = \"gpt-5\"\nrules = [{{ metric = \"tokens\", amount = 1000, window = \"minute\" }}]\n");
    let s = setup(&toml, "2026-11-30T12:00:59Z");
    let a = s
        .guard
        .admit_blocking(call("alice", "gpt-5", 500, 500))
        .unwrap();
    s.clock.set(at("2026-11-30T12:01:30Z"));
    held(s.guard.admit_blocking(call("alice", "gpt-5", 1, 1)));
    a.bill_blocking(usage(500, 500)).unwrap();
    let view = futures::executor::block_on(s.guard.usage(Some("alice"), "gpt-5")).unwrap();
    assert_eq!((view.rules[0].used, view.rules[0].left), (1000, 0));
}

#[test]
fn huge_numbers_are_clamped_or_refused_never_overflowing() {
    let toml = format!("{GPT5}[[limits.public]]\nmodel = \"gpt-5\"\neach_person = [{{ metric = \"tokens\", amount = 1000, window = \"day\" }}]\n[models.bare]\n[limits.platform]\nrules = [{{ metric = \"requests\", amount = 100, window = \"day\" }}]\n");
    let s = setup(&toml, "2026-11-30T10:00:00Z");
    let mut req = call("alice", "bare", u64::MAX, u64::MAX);
    req.model = "bare".into();
    let a = s.guard.admit_blocking(req.clone()).unwrap();
    let b = s.guard.admit_blocking(req).unwrap();
    let limit = usage_guard::MAX_AMOUNT;
    assert!(a.ceiling().max_output_tokens <= limit && b.ceiling().max_output_tokens <= limit);
    assert!(
        a.bill_blocking(usage(u64::MAX, 1)).is_err(),
        "usage past 2^53 is refused"
    );
    assert!(!a.is_settled());
}

/// Admission given the provider request counts its prompt once, with the policy's model spec,
/// and fits the request into the ceiling: the ticket carries the changes to send.
#[test]
fn admission_fits_the_request_it_counts() {
    let s = setup(
        r#"
[models.small]
display_name = "Small"
provider = "openai"
context_window = 1000
max_output_tokens = 500
encoding = "cl100k_base"

[[limits.direct]]
user = "alice"
model = "small"
rules = [{ metric = "tokens", amount = 300, window = "day" }]
"#,
        "2026-03-10T12:00:00Z",
    );
    let body = serde_json::json!({
        "model": "small",
        "messages": [{"role": "user", "content": "Hello there"}],
        "max_completion_tokens": 400,
    });
    let ticket = s
        .guard
        .admit_blocking(usage_guard::AdmitRequest {
            user: Some("alice".into()),
            model: "small".into(),
            request: Some((body.clone(), usage_guard::Api::OpenAiChat)),
            ..Default::default()
        })
        .unwrap();
    let prompt = *ticket.prompt().expect("admission counted the prompt");
    let spec_count =
        usage_guard::count_request(&body, usage_guard::Api::OpenAiChat, Some("small"), None)
            .unwrap();
    assert_eq!(prompt.encoding, usage_guard::Encoding::Cl100kBase);
    assert_ne!(
        spec_count.encoding, prompt.encoding,
        "the policy's encoding was used"
    );
    let fitted = ticket.fitted().unwrap();
    assert_eq!(fitted.prompt_tokens, prompt.tokens);
    let max = fitted.max_output_tokens.unwrap();
    assert!(
        max <= 300 - prompt.tokens && max + 20 >= 300 - prompt.tokens,
        "{max}"
    );
    let changes = ticket.fitted_changes().unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes["max_completion_tokens"], serde_json::json!(max));
}

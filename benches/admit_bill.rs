//! admit + bill on the in-memory store, over a path of 6 rules (5 counters held per call).

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use usage_guard::parse_iso8601;
use usage_guard::{AdmitRequest, Guard, ManualClock, MemoryStore, Policy, Usage};

pub const SIX_RULES: &str = r#"
[models.gpt-5]
display_name = "GPT-5"
max_output_tokens = 128000
prices = { input = 1.25, cached_input = 0.125, output = 10.0 }

[[limits.direct]]
user = "alice"
model = "gpt-5"
rules = [
  { metric = "tokens", amount = 9000000000000, window = "day" },
  { metric = "requests", amount = 9000000000000, window = "10 minutes" },
]

[[limits.model_total]]
model = "gpt-5"
rules = [{ metric = "tokens", amount = 9000000000000, window = "day" }]

[[limits.user_total]]
user = "alice"
rules = [{ metric = "cost", amount = 9000000.0, window = "week" }]

[limits.platform]
rules = [
  { metric = "requests", amount = 9000000000000, window = "hour" },
  { metric = "tokens", amount = 9000000000000, window = "month" },
]
"#;

fn admit_bill(c: &mut Criterion) {
    let clock = Arc::new(ManualClock::new(
        parse_iso8601("2026-11-30T14:20:00Z").unwrap(),
    ));
    let guard = Guard::new(
        Policy::from_toml(SIX_RULES).unwrap(),
        Arc::new(MemoryStore::new()),
        clock,
    );
    let request = AdmitRequest {
        user: Some("alice".into()),
        model: "gpt-5".into(),
        prompt_tokens: Some(1200),
        prompt_is_estimate: false,
        max_output_tokens: Some(4000),
        request: None,
        attributes: Vec::new(),
    };
    let usage = Usage {
        input_tokens: 1100,
        output_tokens: 800,
        ..Usage::default()
    };
    c.bench_function("admit+bill, memory store, 6 rules", |b| {
        b.iter(|| {
            let ticket = guard.admit_blocking(request.clone()).unwrap();
            ticket.bill_blocking(usage).unwrap();
        })
    });
}

criterion_group!(benches, admit_bill);
criterion_main!(benches);

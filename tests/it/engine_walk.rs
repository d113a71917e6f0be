//! The engine files one admission and one bill walk through (issue 33: at most 8 each), for
//! `scripts/engine_files.sh`, which runs this test under callgrind, collecting only inside
//! `walk_admit` and then only inside `walk_bill`, and lists the `src/guard/engine/` files
//! whose functions ran. Ignored in the suite: it asserts only that the call was admitted
//! and billed.

use crate::common;

use common::*;
use serde_json::json;
use usage_guard::{AdmitRequest, Api, Ticket, Usage};

const POLICY: &str = r#"
[models.gpt-4o]
provider = "openai"
max_output_tokens = 16384
prices = { input = 2.5, output = 10.0 }

[[limits.direct]]
user = "alice"
model = "gpt-4o"
rules = [
  { metric = "tokens", amount = 1000000, window = "day" },
  { metric = "requests", amount = 1000, window = "10 minutes" },
]
"#;

fn request() -> AdmitRequest {
    let chat = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "Say hello."}]});
    AdmitRequest {
        user: Some("alice".to_string()),
        model: "gpt-4o".to_string(),
        request: Some((chat, Api::OpenAiChat)),
        ..AdmitRequest::default()
    }
}

fn usage() -> Usage {
    Usage {
        input_tokens: 10,
        output_tokens: 20,
        ..Usage::default()
    }
}

#[inline(never)]
fn walk_admit(s: &Setup) -> Ticket {
    s.guard.admit_blocking(request()).expect("admitted")
}

#[inline(never)]
fn walk_bill(t: &Ticket) {
    t.bill_blocking(usage()).expect("billed");
}

#[test]
#[ignore = "run by scripts/engine_files.sh under callgrind"]
fn one_admission_and_one_bill() {
    let s = setup(POLICY, "2026-11-30T14:20:00Z");
    // A first call warms the path cache and the lazily made parts, as a running guard has.
    let warm = s.guard.admit_blocking(request()).expect("admitted");
    warm.bill_blocking(usage()).expect("billed");
    let ticket = walk_admit(&s);
    walk_bill(&ticket);
    assert!(ticket.is_settled());
}

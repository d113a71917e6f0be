//! What the event and audit tests share: calls with attributes, and a policy with five soft
//! thresholds (one event at each of the first five calls) and a session halt after two calls
//! a minute.

use usage_guard::{AdmitRequest, Event};

use super::GPT5;

pub const NOW: &str = "2026-12-02T10:00:00Z";

pub fn call(user: Option<&str>, attributes: &[(&str, &str)]) -> AdmitRequest {
    AdmitRequest {
        user: user.map(str::to_string),
        attributes: attributes
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..super::call("-", "gpt-5", 100, 100)
    }
}

pub fn alice(agent: &str) -> AdmitRequest {
    call(Some("alice"), &[("agent", agent)])
}

pub fn policy() -> String {
    format!(
        r#"{GPT5}
[[rules]]
name = "soft"
count_by = ["agent"]
amount = "requests"
budget = 10
window = "minute"
warn_at = [0.1, 0.2, 0.3, 0.4, 0.5]

[[rules]]
name = "runaway"
count_by = ["session"]
amount = "requests"
budget = 2
window = "minute"
action = "halt_session"
action_duration_seconds = 600
"#
    )
}

pub fn drain(stream: &usage_guard::EventStream) -> Vec<Event> {
    std::iter::from_fn(|| stream.try_next()).collect()
}

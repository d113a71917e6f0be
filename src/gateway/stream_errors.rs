//! An error event inside a streamed answer, as the caller gets it: the provider's error type
//! and code kept, its message replaced by the gateway's. A provider that fails mid-answer
//! (Anthropic's `overloaded_error`, an OpenAI `{"error": ...}` chunk, a Responses `error`
//! event) words it as its error answers are worded, which may name the operator's account or
//! echo its credential (`upstream_error.rs` says why an error answer is rewritten).

use serde_json::Value;

use super::shape::Framing;
use super::upstream_error::identifier;

/// `event` (whose payload is `value`) rewritten when it is an error event: the message the
/// provider wrote replaced; `None` when it is not one.
pub(super) fn redacted(event: &[u8], value: &Value, framing: Framing) -> Option<Vec<u8>> {
    let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
    let at = match kind {
        "error" if value.get("message").is_some() => "/message",
        "response.failed" if value.pointer("/response/error/message").is_some() => {
            "/response/error/message"
        }
        _ => match value.get("error")? {
            Value::Object(e) if e.contains_key("message") => "/error/message",
            Value::String(_) => "/error",
            _ => return None,
        },
    };
    let said = our_message(&code_of(value));
    let mut value = value.clone();
    *value.pointer_mut(at)? = Value::from(said);
    Some(reframed(event, &value, framing))
}

/// The error's code, else its type, when a plain identifier (`unknown` otherwise).
fn code_of(value: &Value) -> String {
    let error = value
        .pointer("/response/error")
        .or_else(|| value.get("error").filter(|e| e.is_object()))
        .unwrap_or(value);
    ["code", "type"]
        .iter()
        .filter_map(|k| error.get(*k).and_then(Value::as_str))
        .find_map(identifier)
        .unwrap_or("unknown")
        .to_string()
}

/// The gateway's words for a provider's error in the middle of an answer.
fn our_message(code: &str) -> String {
    format!(
        "The provider reported an error during the answer ({code}); its own message is not \
         passed on"
    )
}

/// The event with `value` as its payload: an SSE event keeps its other lines (`event:`,
/// `id:`) and gets one `data:` line; an NDJSON event is the line.
fn reframed(event: &[u8], value: &Value, framing: Framing) -> Vec<u8> {
    let json = value.to_string();
    match framing {
        Framing::Ndjson => format!("{json}\n").into_bytes(),
        Framing::Sse => {
            let text = String::from_utf8_lossy(event);
            let mut out = String::new();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                if !line.starts_with("data:") {
                    out.push_str(line);
                    out.push('\n');
                }
            }
            out.push_str("data: ");
            out.push_str(&json);
            out.push_str("\n\n");
            out.into_bytes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rewritten(event: &str, framing: Framing) -> Option<String> {
        let data = event
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap_or(event);
        let value: Value = serde_json::from_str(data.trim()).unwrap();
        redacted(event.as_bytes(), &value, framing).map(|b| String::from_utf8(b).unwrap())
    }

    const SAID: &str = "organization org-OPERATOR123: Limit 30000, Used 29000, key sk-UP-SECRET";

    #[test]
    fn an_error_event_keeps_its_code_not_its_message() {
        let events = [
            (
                format!(
                    "data: {}\n\n",
                    json!({"error": {"message": SAID, "type": "server_error", "code": "rate_limit_exceeded"}})
                ),
                "rate_limit_exceeded",
            ),
            (
                format!(
                    "event: error\ndata: {}\n\n",
                    json!({"type": "error", "error": {"type": "overloaded_error", "message": SAID}})
                ),
                "overloaded_error",
            ),
            (
                format!(
                    "event: error\ndata: {}\n\n",
                    json!({"type": "error", "code": "server_error", "message": SAID})
                ),
                "server_error",
            ),
            (
                format!(
                    "data: {}\n\n",
                    json!({"type": "response.failed", "response": {"error": {"code": "server_error", "message": SAID}}})
                ),
                "server_error",
            ),
        ];
        for (event, code) in events {
            let out = rewritten(&event, Framing::Sse).expect("an error event");
            assert!(
                !out.contains("org-OPERATOR123") && !out.contains("SECRET"),
                "{out}"
            );
            assert!(out.contains(&format!("({code})")), "{out}");
            assert_eq!(
                out.starts_with("event: error\n"),
                event.starts_with("event: error")
            );
            assert!(out.ends_with("\n\n"), "{out}");
        }
        let ollama = rewritten(&format!("{}\n", json!({"error": SAID})), Framing::Ndjson).unwrap();
        assert!(
            !ollama.contains("OPERATOR") && ollama.ends_with("}\n"),
            "{ollama}"
        );
    }

    #[test]
    fn other_events_pass_as_they_are() {
        let chunk = format!(
            "data: {}\n\n",
            json!({"choices": [{"delta": {"content": "hi"}}]})
        );
        assert_eq!(rewritten(&chunk, Framing::Sse), None);
        let done = format!("{}\n", json!({"done": true, "error": null}));
        assert_eq!(rewritten(&done, Framing::Ndjson), None);
    }
}

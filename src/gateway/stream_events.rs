//! What a streamed answer's events say, per API: an event's JSON payload, the output text
//! it carries, and whether it is the last the provider sends.

use serde_json::Value;

use super::shape::Framing;
use crate::ceiling::Api;

/// The JSON payload of one event (SSE: its `data:` lines; NDJSON: the line).
pub(super) fn payload(event: &[u8], framing: Framing) -> Option<Value> {
    let text = std::str::from_utf8(event).ok()?;
    match framing {
        Framing::Ndjson => serde_json::from_str(text.trim()).ok(),
        Framing::Sse => {
            let data: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if data.is_empty() || data == ["[DONE]"] {
                return None;
            }
            serde_json::from_str(&data.join("\n")).ok()
        }
    }
}

/// Whether `event` is OpenAI's `data: [DONE]`, after the usage chunk.
pub(super) fn is_done(event: &[u8]) -> bool {
    std::str::from_utf8(event).is_ok_and(|t| t.lines().any(|l| l.trim() == "data: [DONE]"))
}

/// Whether `event` is the last its API sends, with or after the final usage (Gemini's
/// stream has no such event: it ends).
pub(super) fn is_last(event: &Value, api: Api) -> bool {
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
    match api {
        Api::OpenAiResponses => matches!(
            kind,
            "response.completed" | "response.incomplete" | "response.failed"
        ),
        Api::Anthropic => kind == "message_stop",
        Api::OllamaChat | Api::OllamaGenerate => {
            event.get("done").and_then(Value::as_bool) == Some(true)
        }
        _ => false,
    }
}

/// The output text an event carries, in each API's delta fields.
pub(super) fn delta_text(event: &Value, api: Api, out: &mut String) {
    let mut push = |v: Option<&Value>| {
        if let Some(s) = v.and_then(Value::as_str) {
            out.push_str(s);
        }
    };
    match api {
        Api::OpenAiChat => {
            for c in event
                .get("choices")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let delta = c.get("delta");
                push(delta.and_then(|d| d.get("content")));
                push(delta.and_then(|d| d.get("reasoning_content")));
                for t in delta
                    .and_then(|d| d.get("tool_calls"))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    push(t.pointer("/function/arguments"));
                }
            }
        }
        Api::OpenAiCompletions => {
            for c in event
                .get("choices")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                push(c.get("text"));
            }
        }
        Api::OpenAiResponses => {
            let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
            if kind.ends_with(".delta") {
                push(event.get("delta"));
            }
        }
        Api::Anthropic => {
            if let Some(d) = event.get("delta") {
                push(d.get("text"));
                push(d.get("thinking"));
                push(d.get("partial_json"));
            }
        }
        _ => {
            push(event.pointer("/message/content"));
            push(event.pointer("/message/thinking"));
            push(event.get("response"));
            push(event.get("thinking"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_api_s_last_event_is_known() {
        assert!(is_done(b"data: [DONE]\n\n"));
        assert!(!is_done(b"data: {\"choices\": []}\n\n"));
        let last = [
            (Api::OpenAiResponses, json!({"type": "response.completed"})),
            (Api::Anthropic, json!({"type": "message_stop"})),
            (Api::OllamaChat, json!({"done": true})),
        ];
        for (api, event) in last {
            assert!(is_last(&event, api), "{api:?}");
        }
        let not_last = [
            (
                Api::OpenAiResponses,
                json!({"type": "response.output_text.delta"}),
            ),
            (Api::Anthropic, json!({"type": "message_delta"})),
            (Api::OllamaChat, json!({"done": false})),
            (Api::Gemini, json!({"usageMetadata": {}})),
        ];
        for (api, event) in not_last {
            assert!(!is_last(&event, api), "{api:?}");
        }
    }
}

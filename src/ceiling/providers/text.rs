//! The output text of a plain answer, in each API's fields: what a biller counts when the
//! provider's usage is missing or unreadable (the delivered output is billed, never nothing).

use serde_json::Value;

use crate::ceiling::api::Api;

/// Every element of the array at `key` of `v` (none when it is not an array).
fn each<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

/// Appends the string at `pointer` of `v`; a JSON value that is not a string (tool arguments
/// written as an object) is appended as its JSON text.
fn push(out: &mut String, v: &Value, pointer: &str) {
    match v.pointer(pointer) {
        Some(Value::String(s)) => out.push_str(s),
        Some(Value::Null) | None => {}
        Some(other) => out.push_str(&other.to_string()),
    }
}

/// The output text (answers, thinking, tool call arguments) `response`, a plain answer of
/// `api`, carries; empty for embeddings and for anything else.
pub fn answer_text(response: &Value, api: Api) -> String {
    let mut out = String::new();
    match api {
        Api::OpenAiChat => {
            for c in each(response, "choices") {
                let Some(m) = c.get("message") else { continue };
                match m.get("content") {
                    Some(Value::Array(parts)) => {
                        parts.iter().for_each(|p| push(&mut out, p, "/text"))
                    }
                    _ => push(&mut out, m, "/content"),
                }
                push(&mut out, m, "/reasoning_content");
                push(&mut out, m, "/refusal");
                push(&mut out, m, "/function_call/arguments");
                each(m, "tool_calls").for_each(|t| push(&mut out, t, "/function/arguments"));
            }
        }
        Api::OpenAiCompletions => {
            each(response, "choices").for_each(|c| push(&mut out, c, "/text"))
        }
        Api::OpenAiResponses => {
            for item in each(response, "output") {
                for part in each(item, "content").chain(each(item, "summary")) {
                    push(&mut out, part, "/text");
                    push(&mut out, part, "/refusal");
                }
                push(&mut out, item, "/arguments");
            }
        }
        Api::Anthropic => {
            for block in each(response, "content") {
                push(&mut out, block, "/text");
                push(&mut out, block, "/thinking");
                push(&mut out, block, "/input");
            }
        }
        Api::Gemini => {
            for c in each(response, "candidates") {
                let parts = c.pointer("/content/parts").and_then(Value::as_array);
                parts
                    .into_iter()
                    .flatten()
                    .for_each(|p| push(&mut out, p, "/text"));
            }
        }
        Api::OllamaChat | Api::OllamaGenerate => {
            for pointer in [
                "/message/content",
                "/message/thinking",
                "/response",
                "/thinking",
            ] {
                push(&mut out, response, pointer);
            }
            let calls = response
                .pointer("/message/tool_calls")
                .and_then(Value::as_array);
            calls
                .into_iter()
                .flatten()
                .for_each(|t| push(&mut out, t, "/function/arguments"));
        }
        Api::OpenAiEmbeddings | Api::OllamaEmbed => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_api_s_answer_text_is_read_from_its_fields() {
        let cases = [
            (
                Api::OpenAiChat,
                json!({"choices": [{"message": {"content": "ab", "tool_calls": [
                    {"function": {"arguments": "{}"}}]}}, {"message": {"content": "c"}}]}),
                "ab{}c",
            ),
            (
                Api::OpenAiCompletions,
                json!({"choices": [{"text": "x"}, {"text": "y"}]}),
                "xy",
            ),
            (
                Api::OpenAiResponses,
                json!({"output": [{"type": "reasoning", "summary": [{"text": "r"}]},
                    {"type": "message", "content": [{"type": "output_text", "text": "t"}]},
                    {"type": "function_call", "arguments": "{\"a\":1}"}]}),
                "rt{\"a\":1}",
            ),
            (
                Api::Anthropic,
                json!({"content": [{"type": "thinking", "thinking": "h"},
                    {"type": "text", "text": "t"}, {"type": "tool_use", "input": {"q": 1}}]}),
                "ht{\"q\":1}",
            ),
            (
                Api::OllamaChat,
                json!({"message": {"content": "o", "thinking": "k"}}),
                "ok",
            ),
            (Api::OllamaGenerate, json!({"response": "g"}), "g"),
            (
                Api::OpenAiEmbeddings,
                json!({"data": [{"embedding": [0.1]}]}),
                "",
            ),
        ];
        for (api, response, text) in cases {
            assert_eq!(answer_text(&response, api), text, "{api:?}");
        }
    }
}

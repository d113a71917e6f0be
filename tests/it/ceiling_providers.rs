//! Per provider: the request keys a fit changes (`FitResult::changes`), the finish reason
//! that means "stopped at the output maximum", and the usage read from responses and final
//! stream events.

use serde_json::{json, Map, Value};
use usage_guard::internals::usage_paths;
use usage_guard::{fit, reported_usage, stopped_at_max, usage_capped, Api, FitOptions};
use usage_guard::{ReportedUsage, UsageCeiling};

fn ceiling(tokens: u64, max_out: u64) -> UsageCeiling {
    UsageCeiling {
        tokens: Some(tokens),
        cost_micros: None,
        rates: None,
        max_output_tokens: max_out,
        min_output_tokens: 1,
        margin: 0.05,
    }
}

fn changes(request: &Value, api: Api, c: &UsageCeiling) -> (Map<String, Value>, Value) {
    let r = fit(request, c, api, None, None, &FitOptions::default()).unwrap();
    (r.changes(), r.request)
}

fn updated(request: &Value, changes: &Map<String, Value>) -> Value {
    let mut out = request.clone();
    for (k, v) in changes {
        out[k] = v.clone();
    }
    out
}

#[test]
fn changes_are_exactly_the_keys_to_set() {
    let hi = json!([{"role": "user", "content": "hi"}]);
    let cases = vec![
        (
            Api::OpenAiChat,
            json!({"model": "gpt-4o", "max_tokens": 4000, "messages": hi}),
            json!({"max_tokens": 500}),
        ),
        (
            Api::OpenAiChat,
            json!({"model": "gpt-4o", "messages": hi}),
            json!({"max_completion_tokens": 500}),
        ),
        (
            Api::OpenAiResponses,
            json!({"model": "gpt-5", "input": "hi"}),
            json!({"max_output_tokens": 500}),
        ),
        (
            Api::Anthropic,
            json!({"model": "claude-sonnet-4-5", "max_tokens": 8000, "messages": hi,
                   "thinking": {"type": "enabled", "budget_tokens": 4000}}),
            json!({"max_tokens": 500, "thinking": {"type": "disabled"}}),
        ),
        (
            Api::Gemini,
            json!({"contents": "hi", "generationConfig": {"temperature": 0.5}}),
            json!({"generationConfig": {"temperature": 0.5, "maxOutputTokens": 500}}),
        ),
        (
            Api::OllamaChat,
            json!({"model": "llama3.1", "messages": hi, "options": {"temperature": 0}}),
            json!({"options": {"temperature": 0, "num_predict": 500}}),
        ),
    ];
    for (api, request, expected) in cases {
        let (got, fitted) = changes(&request, api, &ceiling(100_000, 500));
        assert_eq!(Value::Object(got.clone()), expected, "{api:?}");
        assert_eq!(updated(&request, &got), fitted, "{api:?}");
    }
}

#[test]
fn thinking_lowered_alone_is_the_one_change() {
    let request = json!({"model": "claude-sonnet-4-5", "max_tokens": 3000,
        "thinking": {"type": "enabled", "budget_tokens": 4000},
        "messages": [{"role": "user", "content": "hi"}]});
    let (got, _) = changes(&request, Api::Anthropic, &ceiling(100_000, 8000));
    assert_eq!(
        Value::Object(got),
        json!({"thinking": {"type": "enabled", "budget_tokens": 2999}})
    );
}

#[test]
fn nothing_changed_is_an_empty_map() {
    let request = json!({"model": "gpt-4o", "max_completion_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}]});
    let (got, fitted) = changes(&request, Api::OpenAiChat, &ceiling(100_000, 500));
    assert!(got.is_empty(), "{got:?}");
    assert_eq!(fitted, request);
    let embed = json!({"model": "text-embedding-3-small", "input": "hi"});
    let (got, _) = changes(&embed, Api::OpenAiEmbeddings, &ceiling(100, 0));
    assert!(got.is_empty());
}

#[test]
fn finish_reasons_at_the_maximum() {
    let cases = [
        (Api::OpenAiChat, "length", "stop"),
        (Api::OpenAiResponses, "max_output_tokens", "content_filter"),
        (Api::Anthropic, "max_tokens", "end_turn"),
        (Api::Gemini, "MAX_TOKENS", "STOP"),
        (Api::OllamaChat, "length", "stop"),
        (Api::OllamaGenerate, "length", "stop"),
    ];
    for (api, at_max, other) in cases {
        assert!(stopped_at_max(at_max, api), "{api:?}");
        assert!(!stopped_at_max(other, api), "{api:?}");
    }
    assert!(!stopped_at_max("length", Api::OpenAiEmbeddings));
}

#[test]
fn usage_capped_takes_a_finish_reason_string() {
    let request = json!({"model": "claude-sonnet-4-5", "max_tokens": 4000,
        "messages": [{"role": "user", "content": "hi"}]});
    let capped = fit(
        &request,
        &ceiling(1000, 8192),
        Api::Anthropic,
        None,
        None,
        &FitOptions::default(),
    )
    .unwrap();
    assert!(usage_capped(&json!("max_tokens"), &capped, Api::Anthropic));
    assert!(!usage_capped(&json!("end_turn"), &capped, Api::Anthropic));
    assert!(usage_capped(
        &json!(["end_turn", "max_tokens"]),
        &capped,
        Api::Anthropic
    ));
    assert!(!usage_capped(&json!(["end_turn"]), &capped, Api::Anthropic));
}

fn usage(input: u64, output: u64, cached: u64, reasoning: u64) -> Option<ReportedUsage> {
    Some(ReportedUsage {
        input_tokens: input,
        output_tokens: output,
        cached_input_tokens: cached,
        reasoning_tokens: reasoning,
    })
}

#[test]
fn usage_per_provider() {
    let cases = vec![
        (
            Api::OpenAiChat,
            json!({"usage": {"prompt_tokens": 10, "completion_tokens": 20,
                "prompt_tokens_details": {"cached_tokens": 4},
                "completion_tokens_details": {"reasoning_tokens": 5}}}),
            usage(10, 20, 4, 5),
        ),
        (
            Api::OpenAiResponses,
            json!({"type": "response.completed", "response": {"usage": {"input_tokens": 7,
                "output_tokens": 9, "input_tokens_details": {"cached_tokens": 2},
                "output_tokens_details": {"reasoning_tokens": 3}}}}),
            usage(7, 9, 2, 3),
        ),
        (
            Api::OpenAiEmbeddings,
            json!({"usage": {"prompt_tokens": 8, "total_tokens": 8}}),
            usage(8, 0, 0, 0),
        ),
        (
            Api::Anthropic,
            json!({"usage": {"input_tokens": 5, "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 20, "output_tokens": 30}}),
            usage(125, 30, 100, 0),
        ),
        (
            Api::Anthropic,
            json!({"type": "message_start", "message": {"content": [],
                "usage": {"input_tokens": 5, "cache_read_input_tokens": 7, "output_tokens": 1}}}),
            usage(12, 1, 7, 0),
        ),
        (
            Api::Gemini,
            json!({"usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 6,
                "thoughtsTokenCount": 4, "cachedContentTokenCount": 3}}),
            usage(11, 10, 3, 4),
        ),
        (
            Api::Gemini,
            json!({"usage_metadata": {"prompt_token_count": 11, "candidates_token_count": 6}}),
            usage(11, 6, 0, 0),
        ),
        // The prompts of Gemini's own tool calls are billed as input (totalTokenCount has them).
        (
            Api::Gemini,
            json!({"usageMetadata": {"promptTokenCount": 21, "candidatesTokenCount": 12,
                "thoughtsTokenCount": 40, "toolUsePromptTokenCount": 1500,
                "totalTokenCount": 1573}}),
            usage(1521, 52, 0, 40),
        ),
        (
            Api::Gemini,
            json!({"usage_metadata": {"prompt_token_count": 2, "candidates_token_count": 1,
                "tool_use_prompt_token_count": 3}}),
            usage(5, 1, 0, 0),
        ),
        (
            Api::OllamaChat,
            json!({"done": true, "prompt_eval_count": 12, "eval_count": 13}),
            usage(12, 13, 0, 0),
        ),
    ];
    for (api, response, expected) in cases {
        assert_eq!(reported_usage(&response, api), expected, "{api:?}");
        // What a binding converts (only the usage paths) reads the same.
        assert_eq!(
            reported_usage(&only_usage(&response, api), api),
            expected,
            "{api:?}"
        );
    }
    let chunk = json!({"choices": [{"delta": {"content": "x"}}]});
    assert_eq!(reported_usage(&chunk, Api::OpenAiChat), None);
    assert_eq!(
        reported_usage(&json!({"done": false}), Api::OllamaChat),
        None
    );
}

/// Whatever a provider reports is billable: counts held to 2^53, counts that are not whole
/// numbers from 0 read as 0 (unknown: the biller counts instead), parts held to their wholes.
#[test]
fn odd_usage_is_held_to_what_can_be_billed() {
    const MAX: u64 = 1 << 53;
    let cases = vec![
        (
            Api::OpenAiChat,
            json!({"usage": {"prompt_tokens": 1u64 << 60, "completion_tokens": 1e30,
                "prompt_tokens_details": {"cached_tokens": u64::MAX},
                "completion_tokens_details": {"reasoning_tokens": 5}}}),
            usage(MAX, MAX, MAX, 5),
        ),
        (
            Api::OpenAiChat,
            json!({"usage": {"prompt_tokens": -1, "completion_tokens": "7",
                "prompt_tokens_details": {"cached_tokens": 3},
                "completion_tokens_details": {"reasoning_tokens": 9.5}}}),
            usage(0, 0, 0, 0),
        ),
        (
            Api::OpenAiChat,
            json!({"usage": {"prompt_tokens": 21.0, "completion_tokens": 5,
                "completion_tokens_details": {"reasoning_tokens": 9}}}),
            usage(21, 5, 0, 5),
        ),
        (
            Api::OpenAiResponses,
            json!({"usage": {"input_tokens": 4, "output_tokens": null,
                "input_tokens_details": {"cached_tokens": 6}}}),
            usage(4, 0, 4, 0),
        ),
        (
            Api::Anthropic,
            json!({"usage": {"input_tokens": MAX, "cache_read_input_tokens": MAX,
                "cache_creation_input_tokens": MAX, "output_tokens": -2}}),
            usage(MAX, 0, MAX, 0),
        ),
        (
            Api::Gemini,
            json!({"usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": MAX,
                "thoughtsTokenCount": MAX}}),
            usage(3, MAX, 0, MAX),
        ),
        (
            Api::OllamaChat,
            json!({"done": true, "prompt_eval_count": 12, "eval_count": -1}),
            usage(12, 0, 0, 0),
        ),
    ];
    for (api, response, expected) in cases {
        assert_eq!(
            reported_usage(&response, api),
            expected,
            "{api:?} {response}"
        );
    }
}

/// `response` with only the parts at `usage_paths(api)` kept, as a binding converts it.
fn only_usage(response: &Value, api: Api) -> Value {
    let mut kept = json!({});
    for path in usage_paths(api) {
        let pointer: String = path.iter().map(|k| format!("/{k}")).collect();
        if let Some(found) = response.pointer(&pointer) {
            let mut at = &mut kept;
            for key in &path[..path.len() - 1] {
                at = at
                    .as_object_mut()
                    .unwrap()
                    .entry(key.to_string())
                    .or_insert_with(|| json!({}));
            }
            at[path[path.len() - 1]] = found.clone();
        }
    }
    kept
}

//! Prompt counting: the OpenAI cookbook's published counts, agreement with tiktoken-rs, and
//! the shape of every API.

use proptest::prelude::*;
use serde_json::{json, Value};
use usage_guard::Error;
use usage_guard::{count_request, count_tokens, tokenizer_for, Api, Encoding};

fn cookbook_messages() -> Value {
    json!([
        {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
        {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
        {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
        {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
        {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to do better."},
        {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client deliverable."}
    ])
}

fn cookbook_tools() -> Value {
    json!([{
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                    "unit": {"type": "string", "description": "The unit of temperature to return", "enum": ["celsius", "fahrenheit"]}
                },
                "required": ["location"]
            }
        }
    }])
}

/// The cookbook ("How to count tokens with tiktoken", section 6) prints the counts the
/// OpenAI API returned for its example messages: 129 for gpt-3.5-turbo and gpt-4, 124 for
/// gpt-4o and gpt-4o-mini.
#[test]
fn cookbook_chat_messages() {
    for (model, expected) in [
        ("gpt-3.5-turbo", 129),
        ("gpt-4-0613", 129),
        ("gpt-4", 129),
        ("gpt-4o", 124),
        ("gpt-4o-mini", 124),
    ] {
        let request = json!({"model": model, "messages": cookbook_messages()});
        let count = count_request(&request, Api::OpenAiChat, None, None).unwrap();
        assert_eq!(count.tokens, expected, "{model}");
        assert!(count.exact, "{model}");
    }
}

/// Section 7: with the weather tool, the API counted 105 (gpt-3.5-turbo, gpt-4) and 101
/// (gpt-4o, gpt-4o-mini).
#[test]
fn cookbook_chat_with_tools() {
    let messages = json!([
        {"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
        {"role": "user", "content": "What's the weather like in San Francisco?"}
    ]);
    for (model, expected) in [
        ("gpt-3.5-turbo", 105),
        ("gpt-4", 105),
        ("gpt-4o", 101),
        ("gpt-4o-mini", 101),
    ] {
        let request = json!({"model": model, "messages": messages, "tools": cookbook_tools()});
        let count = count_request(&request, Api::OpenAiChat, None, None).unwrap();
        assert_eq!(count.tokens, expected, "{model}");
        assert!(count.exact, "{model}");
    }
}

#[test]
fn model_registry_picks_encodings() {
    for (model, enc, exact) in [
        ("gpt-4o-2024-08-06", Encoding::O200kBase, true),
        ("gpt-4.1-mini", Encoding::O200kBase, true),
        ("gpt-5", Encoding::O200kBase, true),
        ("o1-preview", Encoding::O200kBase, true),
        ("o3-mini", Encoding::O200kBase, true),
        ("o4-mini", Encoding::O200kBase, true),
        ("openai/gpt-4o", Encoding::O200kBase, true),
        ("gpt-4", Encoding::Cl100kBase, true),
        ("gpt-4-turbo", Encoding::Cl100kBase, true),
        ("gpt-3.5-turbo-0125", Encoding::Cl100kBase, true),
        ("claude-sonnet-4-5", Encoding::O200kBase, false),
        ("gemini-2.5-pro", Encoding::O200kBase, false),
        ("llama3.1:8b", Encoding::O200kBase, false),
    ] {
        let t = tokenizer_for(Some(model), None).unwrap();
        assert_eq!((t.encoding, t.exact), (enc, exact), "{model}");
    }
}

#[test]
fn policy_encoding_and_counting_override() {
    let policy = usage_guard::Policy::from_value(&json!({
        "models": {
            "in-house": {"provider": "other", "encoding": "cl100k_base", "counting": "exact"},
            "gpt-4o": {"provider": "openai", "counting": "estimate"}
        }
    }))
    .unwrap();
    let t = tokenizer_for(Some("in-house"), policy.model("in-house").map(|m| &**m)).unwrap();
    assert_eq!((t.encoding, t.exact), (Encoding::Cl100kBase, true));
    let t = tokenizer_for(Some("gpt-4o"), policy.model("gpt-4o").map(|m| &**m)).unwrap();
    assert_eq!((t.encoding, t.exact), (Encoding::O200kBase, false));
}

#[test]
fn count_tokens_known_values_and_bad_encoding() {
    // The cookbook's "tiktoken is great!" is 6 tokens in cl100k_base and o200k_base.
    assert_eq!(
        count_tokens("tiktoken is great!", "cl100k_base").unwrap(),
        6
    );
    assert_eq!(count_tokens("tiktoken is great!", "o200k_base").unwrap(), 6);
    // "お誕生日おめでとう": 9 tokens in cl100k_base, 8 in o200k_base (cookbook section 5).
    assert_eq!(
        count_tokens("お誕生日おめでとう", "cl100k_base").unwrap(),
        9
    );
    assert_eq!(count_tokens("お誕生日おめでとう", "o200k_base").unwrap(), 8);
    assert_eq!(count_tokens("", "o200k_base").unwrap(), 0);
    // Special-token spellings in user text count as text.
    assert!(count_tokens("<|endoftext|>", "cl100k_base").unwrap() > 1);
    let err = count_tokens("x", "o300k").unwrap_err().to_string();
    assert!(
        err.contains("encoding") && err.contains("o300k") && err.contains("cl100k_base"),
        "{err}"
    );
}

fn unicode_text() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        "[a-zA-Z0-9 ,.!?'\n]{0,20}",
        "[\u{4e00}-\u{9fff}\u{3040}-\u{30ff}]{0,10}",
        "[\u{1f300}-\u{1faff}\u{200d}\u{fe0f}]{0,6}",
        "[a-z\u{0300}-\u{036f}\u{0e31}-\u{0e3a}]{0,10}",
        "[ \t\u{a0}\u{3000}]{0,4}",
        any::<String>(),
    ];
    prop::collection::vec(pieces, 0..8).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn agrees_with_tiktoken_rs(text in unicode_text()) {
        let o200 = tiktoken_rs::o200k_base_singleton().encode_ordinary(&text).len() as u64;
        let cl100 = tiktoken_rs::cl100k_base_singleton().encode_ordinary(&text).len() as u64;
        prop_assert_eq!(count_tokens(&text, "o200k_base").unwrap(), o200);
        prop_assert_eq!(count_tokens(&text, "cl100k_base").unwrap(), cl100);
        // A one-message chat prompt is its text plus the documented framing.
        let request = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]});
        let count = count_request(&request, Api::OpenAiChat, None, None).unwrap();
        prop_assert_eq!(count.tokens, 3 + 1 + o200 + 3);
    }
}

const PNG_1024X1024: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAABAAAAAQACAIAAAA=";

#[test]
fn openai_image_parts_by_tile_rule() {
    let text_only = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"}]}]});
    let base = count_request(&text_only, Api::OpenAiChat, None, None).unwrap();
    assert!(base.exact);
    let with = |detail: &str, url: &str| {
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": url, "detail": detail}}
        ]}]})
    };
    // 1024×1024, high: scaled to 768×768, 4 tiles: 85 + 4 × 170 = 765.
    let high = count_request(&with("high", PNG_1024X1024), Api::OpenAiChat, None, None).unwrap();
    assert_eq!(high.tokens - base.tokens, 765);
    assert!(high.exact);
    let low = count_request(&with("low", PNG_1024X1024), Api::OpenAiChat, None, None).unwrap();
    assert_eq!(low.tokens - base.tokens, 85);
    // A URL that cannot be read: the worst case (768×2048, 8 tiles), as an estimate.
    let remote = count_request(
        &with("auto", "https://example.com/cat.png"),
        Api::OpenAiChat,
        None,
        None,
    )
    .unwrap();
    assert_eq!(remote.tokens - base.tokens, 85 + 8 * 170);
    assert!(!remote.exact);
}

#[test]
fn tool_calls_and_nested_schemas_are_estimates() {
    let request = json!({"model": "gpt-4o", "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
    ]});
    let count = count_request(&request, Api::OpenAiChat, None, None).unwrap();
    assert!(!count.exact);
    assert!(count.tokens > 20, "{}", count.tokens);
    let nested = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {
        "name": "f", "description": "d", "parameters": {"type": "object", "properties": {"x": {"type": "object", "properties": {"y": {"type": "string"}}}}}}}]});
    assert!(
        !count_request(&nested, Api::OpenAiChat, None, None)
            .unwrap()
            .exact
    );
}

#[test]
fn every_api_counts_its_prompt_fields() {
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(20);
    let n = count_tokens(&long, "o200k_base").unwrap();
    let cases: Vec<(Api, Value)> = vec![
        (
            Api::OpenAiChat,
            json!({"model": "gpt-5", "messages": [{"role": "user", "content": long}]}),
        ),
        (
            Api::OpenAiResponses,
            json!({"model": "gpt-5", "input": long}),
        ),
        (
            Api::OpenAiResponses,
            json!({"model": "gpt-5", "instructions": long, "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}),
        ),
        (
            Api::OpenAiEmbeddings,
            json!({"model": "text-embedding-3-small", "input": [long.clone()]}),
        ),
        (
            Api::Anthropic,
            json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "system": long, "messages": [{"role": "user", "content": "hi"}]}),
        ),
        (
            Api::Anthropic,
            json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": [{"type": "text", "text": long}]}]}),
        ),
        (
            Api::Gemini,
            json!({"contents": [{"role": "user", "parts": [{"text": long}]}]}),
        ),
        (
            Api::Gemini,
            json!({"systemInstruction": {"parts": [{"text": long}]}, "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
        ),
        (
            Api::OllamaChat,
            json!({"model": "llama3.1", "messages": [{"role": "user", "content": long}]}),
        ),
        (
            Api::OllamaGenerate,
            json!({"model": "llama3.1", "prompt": long}),
        ),
        (
            Api::OllamaEmbed,
            json!({"model": "nomic-embed-text", "input": long}),
        ),
    ];
    for (api, request) in cases {
        let c = count_request(&request, api, None, None).unwrap();
        assert!(
            c.tokens >= n && c.tokens <= n + 30,
            "{api:?}: {} vs text {n}",
            c.tokens
        );
    }
    // Embeddings: token-id input counts its ids; no framing.
    let ids = json!({"model": "text-embedding-3-small", "input": [[1, 2, 3], [4, 5]]});
    assert_eq!(
        count_request(&ids, Api::OpenAiEmbeddings, None, None)
            .unwrap()
            .tokens,
        5
    );
    let text = json!({"model": "text-embedding-3-small", "input": "hello world"});
    let c = count_request(&text, Api::OpenAiEmbeddings, None, None).unwrap();
    assert_eq!((c.tokens, c.exact), (2, true));
    // Anthropic tools add their definitions and the tool-use system prompt.
    let plain = json!({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let mut tools = plain.clone();
    tools["tools"] = json!([{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}]);
    let (a, b) = (
        count_request(&plain, Api::Anthropic, None, None).unwrap(),
        count_request(&tools, Api::Anthropic, None, None).unwrap(),
    );
    assert!(b.tokens > a.tokens + 346 && !a.exact);
}

#[test]
fn bad_requests_name_the_field() {
    let cases: Vec<(Api, Value, &str)> = vec![
        (
            Api::OpenAiChat,
            json!({"model": "gpt-4o"}),
            "request.messages",
        ),
        (
            Api::OpenAiChat,
            json!({"messages": "hi"}),
            "request.messages",
        ),
        (
            Api::OpenAiChat,
            json!({"messages": [1]}),
            "request.messages[0]",
        ),
        (
            Api::OpenAiResponses,
            json!({"model": "gpt-5"}),
            "request.input",
        ),
        (
            Api::OpenAiEmbeddings,
            json!({"input": {"a": 1}}),
            "request.input",
        ),
        (
            Api::OpenAiEmbeddings,
            json!({"input": [true]}),
            "request.input[0]",
        ),
        (Api::Gemini, json!({}), "request.contents"),
        (Api::OllamaGenerate, json!({"prompt": 3}), "request.prompt"),
        (Api::Anthropic, json!([1, 2]), "request"),
    ];
    for (api, request, field) in cases {
        match count_request(&request, api, None, None) {
            Err(Error::InvalidArgument(f)) => assert_eq!(f.path, field, "{api:?} {request}"),
            other => panic!("{api:?} {request}: expected an error on {field}, got {other:?}"),
        }
    }
    let err = Api::parse("openai.chat.completions", "provider")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("provider")
            && err.contains("openai.responses")
            && err.contains("ollama.generate"),
        "{err}"
    );
}

#[test]
fn routing_groups_take_the_largest_count() {
    let request = json!({"messages": [{"role": "user", "content": "お誕生日おめでとう and 東京 データ 用户 限额"}]});
    let one = |m: &str| count_request(&request, Api::OpenAiChat, Some(m), None).unwrap();
    let (gpt4, gpt4o) = (one("gpt-4"), one("gpt-4o"));
    assert!(gpt4.tokens > gpt4o.tokens);
    let group = usage_guard::internals::count_request_for_group(
        &request,
        Api::OpenAiChat,
        &[("gpt-4o", None), ("gpt-4", None)],
    )
    .unwrap();
    assert_eq!((group.tokens, group.exact), (gpt4.tokens, true));
    let mixed = usage_guard::internals::count_request_for_group(
        &request,
        Api::OpenAiChat,
        &[("gpt-4o", None), ("llama3.1", None)],
    )
    .unwrap();
    assert!(!mixed.exact);
    assert!(
        usage_guard::internals::count_request_for_group(&request, Api::OpenAiChat, &[]).is_err()
    );
}

/// The o200k_base and cl100k_base counts (hand-written split, counting merge) against
/// tiktoken-rs's encoder on the shapes that stress the split: whitespace and newline runs,
/// digit runs, contractions, marks, mixed scripts, emoji, very long words.
#[test]
fn fast_counts_agree_with_tiktoken_rs_on_hard_shapes() {
    let texts = [
        " ".repeat(3000),
        format!("a{}b\n{}\n", " ".repeat(999), "\t ".repeat(500)),
        "\n\n\r\n  \u{a0}\u{3000}x\u{2028}y \n".repeat(200),
        "1234567890".repeat(500) + " 3.14159 1,000,000 ²³ Ⅻ ٣٤٥",
        "I'm sure they'LL say it's 'S fine, we've DONE'T x'ſ".repeat(50),
        "e\u{301}\u{301} \u{301}x .\u{301} CamelCase HTTPServer ǅemal ʰmod".repeat(40),
        "東京タワー 서울 🙂🚀 👩\u{200d}💻 ❤\u{fe0f} データ用户限额".repeat(60),
        "supercalifragilisticexpialidocious".repeat(600),
        "fn main() { let v: Vec<u64> = (0..10).map(|x| x * x).collect(); }\n// a/b//c\n"
            .repeat(100),
    ];
    for text in &texts {
        for (encoding, bpe) in [
            ("o200k_base", tiktoken_rs::o200k_base_singleton()),
            ("cl100k_base", tiktoken_rs::cl100k_base_singleton()),
        ] {
            let expected = bpe.encode_ordinary(text).len() as u64;
            let head: String = text.chars().take(40).collect();
            assert_eq!(
                count_tokens(text, encoding).unwrap(),
                expected,
                "{encoding}: {head:?}"
            );
        }
    }
}

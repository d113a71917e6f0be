//! Every parser of caller bytes is total (issue 31, item 7): images (PNG, GIF, JPEG, WebP
//! headers in data URLs), request shapes of every API, provider responses. Arbitrary bytes
//! and arbitrary JSON give an answer or an error naming the field, never a panic, and sums
//! over caller-given sizes saturate instead of wrapping.
//!
//! Run with the test command, bounded: `UG_FUZZ_CASES` cases per target (1,024 by default,
//! under a second).
//! A failing case proptest finds is kept in `proptest-regressions/parsers_fuzz.txt` and
//! replayed first on every run; the cases found so far are also plain tests below.

use base64::Engine as _;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{json, Value};
use usage_guard::{
    answer_text, count_request, fit, reported_usage, requested_max_output, Api, Error, FitOptions,
    Policy, UsageCeiling,
};

const APIS: [Api; 9] = [
    Api::OpenAiChat,
    Api::OpenAiCompletions,
    Api::OpenAiResponses,
    Api::OpenAiEmbeddings,
    Api::Anthropic,
    Api::Gemini,
    Api::OllamaChat,
    Api::OllamaGenerate,
    Api::OllamaEmbed,
];

fn config() -> ProptestConfig {
    let cases = std::env::var("UG_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1024);
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/parsers_fuzz.txt",
        ))),
        ..ProptestConfig::default()
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Image bytes: a real format's magic, then anything (truncated headers, huge sizes).
fn image_bytes() -> impl Strategy<Value = Vec<u8>> {
    let magic = prop::sample::select(vec![
        b"\x89PNG\r\n\x1a\n".to_vec(),
        b"GIF89a".to_vec(),
        b"RIFF\0\0\0\0WEBPVP8 ".to_vec(),
        b"RIFF\0\0\0\0WEBPVP8L".to_vec(),
        b"RIFF\0\0\0\0WEBPVP8X".to_vec(),
        vec![0xff, 0xd8],
        Vec::new(),
    ]);
    (magic, prop::collection::vec(any::<u8>(), 0..64)).prop_map(|(mut m, tail)| {
        m.extend(tail);
        m
    })
}

/// The same image where each API reads one.
fn with_image(api: Api, data: &str) -> Value {
    let url = format!("data:image/png;base64,{data}");
    match api {
        Api::Anthropic => json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [
            {"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}]}]}),
        Api::Gemini => json!({"contents": [{"role": "user", "parts": [
            {"inlineData": {"mimeType": "image/png", "data": data}}]}]}),
        Api::OpenAiResponses => json!({"model": "gpt-4o", "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": url}]}]}),
        Api::OllamaChat => json!({"model": "llava", "messages": [
            {"role": "user", "content": "what is it", "images": [data]}]}),
        _ => json!({"model": "gpt-4o", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}}]}]}),
    }
}

/// The keys the request and response parsers read.
const CALL_KEYS: &[&str] = &[
    "model",
    "messages",
    "content",
    "role",
    "type",
    "text",
    "image_url",
    "url",
    "source",
    "data",
    "media_type",
    "contents",
    "parts",
    "inlineData",
    "inline_data",
    "mimeType",
    "input",
    "prompt",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "n",
    "generationConfig",
    "maxOutputTokens",
    "candidateCount",
    "options",
    "num_predict",
    "thinking",
    "budget_tokens",
    "tools",
    "tool_calls",
    "function",
    "system",
    "images",
    "usage",
    "choices",
    "message",
    "delta",
    "usageMetadata",
    "candidates",
    "output",
    "prompt_tokens",
    "completion_tokens",
    "input_tokens",
    "output_tokens",
    "eval_count",
    "prompt_eval_count",
    "finish_reason",
    "stop_reason",
    "detail",
    "name",
    "parameters",
];

/// The keys a policy document has.
const POLICY_KEYS: &[&str] = &[
    "models",
    "teams",
    "limits",
    "settings",
    "rules",
    "scopes",
    "providers",
    "gateway",
    "direct",
    "team",
    "public",
    "team_total",
    "model_total",
    "user_total",
    "platform",
    "user",
    "model",
    "metric",
    "amount",
    "window",
    "display_name",
    "provider",
    "prices",
    "input",
    "output",
    "max_output_tokens",
    "context_window",
    "members",
    "each_person",
    "shared",
    "uncapped_output",
    "margin",
    "min_output_tokens",
    "anonymous",
    "name",
    "applies_when",
    "count_by",
    "action",
    "aliases",
    "long_context",
    "above_input_tokens",
    "keys",
    "principal",
];

/// Arbitrary JSON whose keys are often the ones a parser reads, so its paths are taken.
fn json_value() -> impl Strategy<Value = Value> {
    json_with(CALL_KEYS)
}

fn json_with(keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        prop::sample::select(keys.to_vec()).prop_map(String::from),
        ".{0,8}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,20}".prop_map(Value::from),
        image_bytes().prop_map(|b| Value::from(format!("data:image/webp;base64,{}", b64(&b)))),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::vec((key.clone(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn roomy() -> UsageCeiling {
    UsageCeiling {
        tokens: Some(100_000),
        cost_micros: None,
        rates: None,
        max_output_tokens: 4096,
        min_output_tokens: 1,
        margin: 0.05,
    }
}

/// An error a caller can act on: a refusal, or bad input naming the request or a field.
fn clear(error: &Error) -> bool {
    match error {
        Error::Refused(_) => true,
        Error::InvalidArgument(f) | Error::WrongType(f) => !f.path.is_empty(),
        _ => false,
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn images_of_any_bytes_are_counted(bytes in image_bytes(), api_i in 0usize..9) {
        let api = APIS[api_i];
        let request = with_image(api, &b64(&bytes));
        match count_request(&request, api, None, None) {
            Ok(_) => {}
            Err(e) => prop_assert!(clear(&e), "{e}"),
        }
    }

    #[test]
    fn data_urls_of_any_text_are_counted(text in ".{0,80}", api_i in 0usize..9) {
        let api = APIS[api_i];
        let request = with_image(api, &text);
        if let Err(e) = count_request(&request, api, None, None) {
            prop_assert!(clear(&e), "{e}");
        }
    }

    #[test]
    fn any_request_shape_is_counted_and_fitted_or_refused(request in json_value(), api_i in 0usize..9) {
        let api = APIS[api_i];
        if let Err(e) = count_request(&request, api, None, None) {
            prop_assert!(clear(&e), "count: {e}");
        }
        if let Err(e) = requested_max_output(&request, api) {
            prop_assert!(clear(&e), "max output: {e}");
        }
        if let Err(e) = fit(&request, &roomy(), api, Some("gpt-4o"), None, &FitOptions::default()) {
            prop_assert!(clear(&e), "fit: {e}");
        }
    }

    #[test]
    fn any_policy_document_is_read_or_refused_naming_its_fields(doc in json_with(POLICY_KEYS)) {
        match Policy::from_value(&doc) {
            Ok(_) => {}
            Err(Error::Policy(fields)) => prop_assert!(!fields.is_empty()),
            Err(e) => prop_assert!(clear(&e), "{e}"),
        }
    }

    #[test]
    fn any_response_shape_is_read(response in json_value(), api_i in 0usize..9) {
        let api = APIS[api_i];
        let _ = reported_usage(&response, api);
        let _ = answer_text(&response, api);
    }
}

/// Found by the fuzzing above: an 18-byte WebP whose VP8X header is cut short panicked
/// (an index past the end) in every API that reads inline images.
#[test]
fn a_truncated_webp_is_an_estimate_not_a_panic() {
    let webp = b"RIFF\x0a\0\0\0WEBPVP8X\0\0";
    assert_eq!(webp.len(), 18);
    for api in APIS {
        let request = with_image(api, &b64(webp));
        if let Err(e) = count_request(&request, api, None, None) {
            assert!(clear(&e), "{api:?}: {e}");
        }
    }
}

/// A PNG header claiming 4-billion-pixel sides: Gemini's tile sum saturates (the call is
/// then refused by its context window), it does not wrap to a small count.
#[test]
fn huge_image_headers_saturate() {
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    png.extend(u32::MAX.to_be_bytes());
    png.extend(u32::MAX.to_be_bytes());
    png.extend([8, 6, 0, 0, 0]);
    let request = with_image(Api::Gemini, &b64(&png));
    let count = count_request(&request, Api::Gemini, Some("gemini-2.5-pro"), None).unwrap();
    assert!(count.tokens >= 1 << 40, "{}", count.tokens);
    // 2,300 of them sum past 2^64: the sum saturates, it does not wrap to a small count.
    let part = json!({"inlineData": {"mimeType": "image/png", "data": b64(&png)}});
    let many = json!({"contents": [{"role": "user", "parts": vec![part; 2300]}]});
    let count = count_request(&many, Api::Gemini, Some("gemini-2.5-pro"), None).unwrap();
    assert_eq!(count.tokens, u64::MAX);
}

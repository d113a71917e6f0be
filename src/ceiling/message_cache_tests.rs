//! The per-message count cache's tests: counts identical to uncached ones, bounded, keys apart.

use super::*;
use crate::ceiling::{count_request, Api};
use serde_json::json;

thread_local! {
    /// Counts on this thread without the cache (the reference for the property test).
    pub(super) static BYPASS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn uncached(request: &Value, api: Api) -> crate::ceiling::PromptCount {
    BYPASS.with(|b| b.set(true));
    let count = count_request(request, api, Some("gpt-5"), None).unwrap();
    BYPASS.with(|b| b.set(false));
    count
}

/// A growing conversation, recounted every turn as an engine sends it: each count equals
/// the uncached one, and from the second turn on the old messages come from the cache.
#[test]
fn a_growing_chat_counts_the_same_and_hits_the_cache() {
    let sentences = [
        "The quick brown fox jumps over the lazy dog; ",
        "fn main() { println!(\"{}\", 42); } // code ",
        "日本語のテキストと絵文字 🎉🎉 を数える。",
        "Ünïcödé and numbers 3.14159 2.71828 ",
    ];
    for api in [Api::OpenAiChat, Api::Anthropic, Api::OllamaChat] {
        let mut messages = Vec::new();
        for turn in 0..40 {
            let text: String = (0..turn % 7 + 6)
                .map(|i| sentences[(turn + i) % sentences.len()])
                .collect();
            let role = if turn % 2 == 0 { "user" } else { "assistant" };
            messages.push(json!({"role": role, "content": format!("{turn}: {text}")}));
            let request = json!({"model": "gpt-5", "messages": messages});
            let hits_before = hits();
            let cached = count_request(&request, api, Some("gpt-5"), None).unwrap();
            assert_eq!(cached, uncached(&request, api), "{api:?} turn {turn}");
            if turn > 0 {
                // Other tests share the cache; at least this chat's old messages hit.
                assert!(hits() - hits_before >= turn as u64, "{api:?} turn {turn}");
            }
        }
    }
    let input: Vec<Value> = (0..20)
        .map(|i| json!({"role": "user", "content": format!("{i} {}", sentences[0].repeat(8))}))
        .collect();
    let request = json!({"model": "gpt-5", "input": input});
    let first = count_request(&request, Api::OpenAiResponses, Some("gpt-5"), None).unwrap();
    assert_eq!(first, uncached(&request, Api::OpenAiResponses));
    let contents: Vec<Value> = (0..20)
        .map(|i| json!({"role": "user", "parts": [{"text": format!("{i} {}", sentences[1].repeat(8))}]}))
        .collect();
    let request = json!({"contents": contents});
    let first = count_request(&request, Api::Gemini, Some("gpt-5"), None).unwrap();
    assert_eq!(
        first,
        count_request(&request, Api::Gemini, Some("gpt-5"), None).unwrap()
    );
    assert_eq!(first, uncached(&request, Api::Gemini));
}

#[test]
fn bounded_and_keeps_what_is_used() {
    let long = "x".repeat(MIN_TEXT_BYTES);
    let hot = key(
        Site::OllamaChat,
        Encoding::O200kBase,
        None,
        &Value::from(long.clone()),
    )
    .expect("long enough to cache");
    put(
        hot,
        Entry {
            tokens: 7,
            exact: true,
        },
    );
    for i in 0..3 * CAPACITY {
        let k = key(
            Site::OllamaChat,
            Encoding::O200kBase,
            None,
            &Value::from(format!("{long}{i}")),
        );
        put(
            k.unwrap(),
            Entry {
                tokens: 1,
                exact: true,
            },
        );
        if i % (CAPACITY / 2) == 0 {
            assert_eq!(
                get(hot),
                Some(Entry {
                    tokens: 7,
                    exact: true
                })
            );
        }
    }
    assert!(entries() <= 2 * CAPACITY);
    assert_eq!(
        get(hot),
        Some(Entry {
            tokens: 7,
            exact: true
        })
    );
}

#[test]
fn keys_tell_sites_encodings_and_models_apart() {
    let m = Value::from("y".repeat(MIN_TEXT_BYTES));
    let keys = [
        key(Site::OpenAiChat, Encoding::O200kBase, None, &m),
        key(Site::Anthropic, Encoding::O200kBase, None, &m),
        key(Site::OpenAiChat, Encoding::Cl100kBase, None, &m),
        key(Site::OpenAiChat, Encoding::O200kBase, Some("gpt-5"), &m),
    ];
    let distinct: std::collections::HashSet<_> = keys.iter().collect();
    assert_eq!(distinct.len(), keys.len());
    assert_eq!(
        key(
            Site::OpenAiChat,
            Encoding::O200kBase,
            None,
            &Value::from("short")
        ),
        None
    );
}

/// Text that straddles the caching threshold: ASCII, Latin, CJK, emoji, spaces and digits.
fn text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let piece = prop::sample::select(vec![
        "the fox ",
        "Ünïcödé ",
        "日本語の",
        "🎉🎉 ",
        "  \n",
        "3.14159 ",
        "fn f() {} ",
        "'s ",
        "ſ",
    ]);
    prop::collection::vec(piece, 0..80).prop_map(|pieces| pieces.concat())
}

/// A message in a shape each API reads: plain text, text parts, or parts with other values
/// (numbers, nulls, booleans) the key must tell apart.
fn message() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let role = prop::sample::select(vec!["user", "assistant", "system"]);
    let part =
        (text(), any::<i32>(), any::<bool>(), 0u8..3).prop_map(|(t, n, b, kind)| match kind {
            0 => json!({"type": "text", "text": t}),
            1 => json!({"type": "text", "text": t, "n": n, "flag": b}),
            _ => json!({"text": t, "extra": null}),
        });
    let content = prop_oneof![
        text().prop_map(Value::from),
        prop::collection::vec(part, 0..3).prop_map(Value::from),
    ];
    (role, content).prop_map(|(role, content)| json!({"role": role, "content": content}))
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Any conversation, recounted every turn (some messages repeated inside it), counts the
    /// same with the cache as without it, at every site.
    #[test]
    fn any_growing_chat_counts_as_uncached(
        messages in proptest::collection::vec(message(), 1..10),
        repeat in proptest::prelude::any::<proptest::sample::Index>(),
    ) {
        let mut chat = messages.clone();
        chat.push(messages[repeat.index(messages.len())].clone());
        for api in [Api::OpenAiChat, Api::Anthropic, Api::OllamaChat, Api::OpenAiResponses, Api::Gemini] {
            for turn in 1..=chat.len() {
                let request = match api {
                    Api::OpenAiResponses => json!({"model": "gpt-5", "input": chat[..turn]}),
                    Api::Gemini => {
                        let contents: Vec<Value> = chat[..turn]
                            .iter()
                            .map(|m| json!({"role": m["role"], "parts": [{"text": m["content"].to_string()}]}))
                            .collect();
                        json!({"contents": contents})
                    }
                    _ => json!({"model": "gpt-5", "messages": chat[..turn]}),
                };
                let Ok(cached) = count_request(&request, api, Some("gpt-5"), None) else {
                    continue; // a shape this API refuses: refused the same without the cache
                };
                proptest::prop_assert_eq!(cached, uncached(&request, api), "{:?} turn {}", api, turn);
            }
        }
    }
}

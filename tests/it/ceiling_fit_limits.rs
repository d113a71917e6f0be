//! Fitting: router ceilings, the context-window pre-check under the policy and the registry,
//! embeddings, whether an answer was capped, and several answers sharing what is left.

use crate::ceiling_support;

use ceiling_support::*;
use serde_json::{json, Value};
use usage_guard::{count_request, fit, usage_capped, Api, FitOptions};
use usage_guard::{Error, Prices, Reason, UsageCeiling};

#[test]
fn router_ceilings_intersect() {
    let router = UsageCeiling {
        cost_micros: Some(50_000),
        rates: Some(Prices {
            input: 1_000_000,
            cached_input: 100_000,
            output: 4_000_000,
        }),
        ..ceiling(Some(20_000), 8000)
    };
    let routed = UsageCeiling {
        cost_micros: Some(80_000),
        rates: Some(Prices {
            input: 3_000_000,
            cached_input: 300_000,
            output: 15_000_000,
        }),
        min_output_tokens: 512,
        ..ceiling(Some(5_000), 16_000)
    };
    let both = router.intersect(&routed);
    assert_eq!(both.tokens, Some(5_000));
    assert_eq!(both.cost_micros, Some(50_000));
    assert_eq!(
        both.rates,
        Some(Prices {
            input: 3_000_000,
            cached_input: 300_000,
            output: 15_000_000
        })
    );
    assert_eq!(
        (both.max_output_tokens, both.min_output_tokens),
        (8000, 512)
    );
    assert_eq!(both, routed.intersect(&router));
    let request = json!({"model": "gpt-4o", "max_completion_tokens": 10_000, "messages": [{"role": "user", "content": text(5)}]});
    let r = run(&request, Api::OpenAiChat, &both).unwrap();
    let out = r.max_output_tokens.unwrap();
    let p = r.prompt_tokens;
    for c in [&router, &routed] {
        assert!(p + out <= c.tokens.unwrap());
        assert!(c.rates.unwrap().dearest_cost_micros(p, out) <= c.cost_micros.unwrap());
    }
    // An absent limit is no limit.
    let open = UsageCeiling {
        tokens: None,
        ..router.clone()
    };
    assert_eq!(open.intersect(&routed).tokens, Some(5_000));
}

#[test]
fn context_window_pre_check() {
    // gpt-4: an 8,192-token window.
    let huge = json!({"model": "gpt-4", "messages": [{"role": "user", "content": text(1000)}]});
    match run(&huge, Api::OpenAiChat, &ceiling(None, 8192)) {
        Err(Error::Refused(r)) => {
            assert_eq!(r.reason, Reason::ContextWindowExceeded);
            assert_eq!(r.amount, Some(8192));
            assert!(r.message.contains("8,192 tokens"), "{}", r.message);
            let http = r.to_http(usage_guard::HttpShape::OpenAi);
            assert_eq!(http.status, 400);
            assert_eq!(http.body["error"]["code"], json!("context_length_exceeded"));
        }
        other => panic!("{other:?}"),
    }
    let request = json!({"model": "gpt-4", "max_completion_tokens": 8000, "messages": [{"role": "user", "content": text(50)}]});
    let prompt = count_request(&request, Api::OpenAiChat, None, None)
        .unwrap()
        .tokens;
    // Default policy: the caller's cap is lowered to the room left in the window.
    let r = run(&request, Api::OpenAiChat, &ceiling(None, 8192)).unwrap();
    assert_eq!(r.max_output_tokens, Some(8192 - prompt));
    // Lowered, but by the context window, not by a usage limit: not capped.
    assert!(r.lowered && !r.output_capped);
    // require_full_output: the cap that would have to shrink is refused.
    let strict = FitOptions {
        require_full_output: true,
        ..FitOptions::default()
    };
    let err = fit(
        &request,
        &ceiling(None, 8192),
        Api::OpenAiChat,
        None,
        None,
        &strict,
    );
    assert_eq!(refused(err), Reason::ContextWindowExceeded);
    // ... and a cap the usage left would shrink is refused as not fitting.
    let err = fit(
        &request,
        &ceiling(Some(prompt + 1000), 8192),
        Api::OpenAiChat,
        None,
        None,
        &strict,
    );
    assert_eq!(refused(err), Reason::DoesNotFit);
    // A cap that fits passes untouched under require_full_output.
    let small = json!({"model": "gpt-4", "max_completion_tokens": 500, "messages": [{"role": "user", "content": text(50)}]});
    assert!(
        !fit(
            &small,
            &ceiling(None, 8192),
            Api::OpenAiChat,
            None,
            None,
            &strict
        )
        .unwrap()
        .lowered
    );
    // Capless: the assumed output is clamped to the room left.
    let capless = json!({"model": "gpt-4", "messages": [{"role": "user", "content": text(50)}]});
    let r = fit(
        &capless,
        &ceiling(None, 8192),
        Api::OpenAiChat,
        None,
        None,
        &strict,
    )
    .unwrap();
    assert_eq!(r.max_output_tokens, Some(8192 - prompt));
    // A declared input ceiling (gpt-5: 272,000 of a 400,000 window).
    let long = json!({"model": "gpt-5", "input": "word ".repeat(280_000)});
    assert_eq!(
        refused(run(&long, Api::OpenAiResponses, &ceiling(None, 8192))),
        Reason::ContextWindowExceeded
    );
}

#[test]
fn policy_model_entry_sets_the_window() {
    let policy = usage_guard::Policy::from_value(&json!({"models": {"tiny": {
        "provider": "ollama", "context_window": 2048, "max_output_tokens": 512}}}))
    .unwrap();
    let spec = policy.model("tiny").map(|m| &**m);
    let request = json!({"model": "tiny", "messages": [{"role": "user", "content": text(10)}]});
    let r = fit(
        &request,
        &ceiling(None, 8192),
        Api::OllamaChat,
        Some("tiny"),
        spec,
        &FitOptions::default(),
    )
    .unwrap();
    assert_eq!(
        r.max_output_tokens,
        Some(512),
        "never above the model's maximum"
    );
    let long = json!({"model": "tiny", "messages": [{"role": "user", "content": text(300)}]});
    let err = fit(
        &long,
        &ceiling(None, 8192),
        Api::OllamaChat,
        Some("tiny"),
        spec,
        &FitOptions::default(),
    );
    assert_eq!(refused(err), Reason::ContextWindowExceeded);
}

#[test]
fn embeddings_fit_or_are_refused_whole() {
    let request = json!({"model": "text-embedding-3-small", "input": ["alpha beta", "gamma"]});
    let n = count_request(&request, Api::OpenAiEmbeddings, None, None)
        .unwrap()
        .tokens;
    let r = run(&request, Api::OpenAiEmbeddings, &ceiling(Some(n), 0)).unwrap();
    assert_eq!(
        (r.request.clone(), r.max_output_tokens, r.lowered),
        (request.clone(), None, false)
    );
    assert_eq!(
        refused(run(
            &request,
            Api::OpenAiEmbeddings,
            &ceiling(Some(n - 1), 0)
        )),
        Reason::DoesNotFit
    );
    let long = json!({"model": "text-embedding-3-small", "input": text(1000)});
    assert_eq!(
        refused(run(&long, Api::OpenAiEmbeddings, &ceiling(None, 0))),
        Reason::ContextWindowExceeded
    );
    let ollama = json!({"model": "nomic-embed-text", "input": "hello"});
    assert!(run(&ollama, Api::OllamaEmbed, &ceiling(Some(100), 0)).is_ok());
}

#[test]
fn usage_capped_per_provider() {
    let cases: Vec<(Api, Value, Value, Value)> = vec![
        (
            Api::OpenAiChat,
            json!({"model": "gpt-4o", "max_completion_tokens": 4000, "messages": [{"role": "user", "content": "hi"}]}),
            json!({"choices": [{"finish_reason": "length"}]}),
            json!({"choices": [{"finish_reason": "stop"}]}),
        ),
        (
            Api::OpenAiResponses,
            json!({"model": "gpt-5", "max_output_tokens": 4000, "input": "hi"}),
            json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}),
            json!({"status": "completed"}),
        ),
        (
            Api::Anthropic,
            json!({"model": "claude-sonnet-4-5", "max_tokens": 4000, "messages": [{"role": "user", "content": "hi"}]}),
            json!({"stop_reason": "max_tokens"}),
            json!({"stop_reason": "end_turn"}),
        ),
        (
            Api::Gemini,
            json!({"generationConfig": {"maxOutputTokens": 4000}, "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
            json!({"candidates": [{"finishReason": "MAX_TOKENS"}]}),
            json!({"candidates": [{"finishReason": "STOP"}]}),
        ),
        (
            Api::OllamaChat,
            json!({"model": "llama3.1", "options": {"num_predict": 4000}, "messages": [{"role": "user", "content": "hi"}]}),
            json!({"done": true, "done_reason": "length"}),
            json!({"done": true, "done_reason": "stop"}),
        ),
    ];
    for (api, request, at_max, stopped) in cases {
        let capped = run(&request, api, &ceiling(Some(1000), 8192)).unwrap();
        assert!(usage_capped(&at_max, &capped, api), "{api:?}");
        assert!(!usage_capped(&stopped, &capped, api), "{api:?}");
        if api == Api::Anthropic {
            let event = json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}});
            assert!(usage_capped(&event, &capped, api));
        }
        // The caller's own maximum in force: a stop there is not the ceiling's doing.
        let own = run(&request, api, &ceiling(Some(100_000), 8192)).unwrap();
        assert!(!usage_capped(&at_max, &own, api), "{api:?}");
    }
}

#[test]
fn several_answers_share_what_is_left() {
    let request = json!({"model": "gpt-4o", "n": 4, "max_completion_tokens": 4000,
        "messages": [{"role": "user", "content": "Name a colour."}]});
    let prompt = effective_prompt(&request, Api::OpenAiChat, 0.05);
    let r = run(
        &request,
        Api::OpenAiChat,
        &ceiling(Some(prompt + 4000), 8192),
    )
    .unwrap();
    assert_eq!(r.max_output_tokens, Some(1000));
    // Four answers of at least 256 need 1,024 tokens.
    assert_eq!(
        refused(run(
            &request,
            Api::OpenAiChat,
            &ceiling(Some(prompt + 1000), 8192)
        )),
        Reason::DoesNotFit
    );
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "Name a colour."}]}],
        "generationConfig": {"candidateCount": 2, "maxOutputTokens": 4000}});
    let prompt = effective_prompt(&gemini, Api::Gemini, 0.05);
    let r = run(&gemini, Api::Gemini, &ceiling(Some(prompt + 3000), 8192)).unwrap();
    assert_eq!(
        r.request["generationConfig"]["maxOutputTokens"],
        json!(1500)
    );
}

/// Issue 31 item 6: a ceiling's output maximum is per answer (admission reserved it `n`
/// times); only what is left is shared among the answers.
#[test]
fn n_answers_share_only_what_is_left_and_a_call_that_fits_is_sent_unchanged() {
    use usage_guard::{fit, Api, FitOptions};
    let ceiling = |tokens: Option<u64>, max_out: u64| usage_guard::UsageCeiling {
        tokens,
        cost_micros: None,
        rates: None,
        max_output_tokens: max_out,
        min_output_tokens: 256,
        margin: 0.05,
    };
    let request = |n: u64, max: u64| {
        serde_json::json!({
            "model": "gpt-4o", "max_tokens": max, "n": n,
            "messages": [{"role": "user", "content": "hi"}],
        })
    };
    let fitted = |r: &serde_json::Value, c: &usage_guard::UsageCeiling| {
        fit(
            r,
            c,
            Api::OpenAiChat,
            Some("gpt-4o"),
            None,
            &FitOptions::default(),
        )
    };
    // n = 10, max_tokens = 50, room to spare: sent as given.
    let r = fitted(&request(10, 50), &ceiling(Some(100_000), 50)).unwrap();
    assert_eq!(r.max_output_tokens, Some(50));
    assert!(r.changes().is_empty(), "{:?}", r.changes());
    assert!(!r.output_capped);
    // n = 10, max_tokens = 5, no limits: admitted as given (was "room for 0 output tokens").
    let r = fitted(&request(10, 5), &ceiling(None, 5)).unwrap();
    assert_eq!(r.max_output_tokens, Some(5));
    assert!(r.changes().is_empty());
    // Less left than 4 × 1,000: what is left (after the prompt) is shared by the 4 answers.
    let prompt = r.prompt_tokens;
    let r = fitted(&request(4, 1000), &ceiling(Some(prompt + 1200), 1000)).unwrap();
    assert_eq!(
        r.max_output_tokens,
        Some(300),
        "4 answers × 300 ≤ the 1,200 left"
    );
}

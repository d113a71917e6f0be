//! Fitting calls into a usage ceiling, per provider: untouched, output lowered, thinking
//! lowered or turned off, refused, cost-bound, estimate with margin, router intersection and
//! the context-window pre-check under both policies.

use crate::ceiling_support;

use ceiling_support::*;
use serde_json::{json, Value};
use usage_guard::{count_request, Api};
use usage_guard::{Error, Prices, Reason, UsageCeiling};

#[test]
fn fits_untouched() {
    for (api, request, pointer) in requests(Some(500)) {
        let r = run(&request, api, &ceiling(Some(100_000), 8192)).unwrap();
        assert_eq!(r.request, request, "{api:?}");
        assert_eq!(r.max_output_tokens, Some(500), "{api:?}");
        assert!(!r.lowered && !r.output_capped, "{api:?}");
        assert_eq!(r.request.pointer(pointer), Some(&json!(500)));
    }
}

#[test]
fn output_lowered_in_the_providers_field() {
    for (api, request, pointer) in requests(Some(4000)) {
        let prompt = effective_prompt(&request, api, 0.05);
        let r = run(&request, api, &ceiling(Some(prompt + 1000), 8192)).unwrap();
        assert_eq!(r.max_output_tokens, Some(1000), "{api:?}");
        assert_eq!(r.request.pointer(pointer), Some(&json!(1000)), "{api:?}");
        assert!(r.lowered && r.output_capped, "{api:?}");
        // Nothing else changed.
        let mut back = r.request.clone();
        *back.pointer_mut(pointer).unwrap() = json!(4000);
        assert_eq!(back, request, "{api:?}");
    }
}

#[test]
fn capless_calls_get_the_ceilings_maximum() {
    for (api, request, pointer) in requests(None) {
        let r = run(&request, api, &ceiling(Some(1_000_000), 3000)).unwrap();
        assert_eq!(r.request.pointer(pointer), Some(&json!(3000)), "{api:?}");
        assert!(r.output_capped, "{api:?}");
    }
}

#[test]
fn refused_when_less_than_min_output_is_left() {
    for (api, request, _) in requests(Some(4000)) {
        let prompt = effective_prompt(&request, api, 0.05);
        assert_eq!(
            refused(run(&request, api, &ceiling(Some(prompt + 255), 8192))),
            Reason::DoesNotFit,
            "{api:?}"
        );
        assert!(
            run(&request, api, &ceiling(Some(prompt + 256), 8192)).is_ok(),
            "{api:?}"
        );
        assert_eq!(
            refused(run(&request, api, &ceiling(Some(prompt / 2), 8192))),
            Reason::DoesNotFit,
            "{api:?}"
        );
    }
    // A caller asking for less than min_output_tokens needs only that much.
    let request = json!({"model": "gpt-4o", "max_completion_tokens": 50, "messages": [{"role": "user", "content": "hi"}]});
    let prompt = effective_prompt(&request, Api::OpenAiChat, 0.05);
    let r = run(&request, Api::OpenAiChat, &ceiling(Some(prompt + 60), 8192)).unwrap();
    assert_eq!(r.max_output_tokens, Some(50));
}

#[test]
fn cost_bounds_the_output() {
    let rates = Prices {
        input: 2_500_000,
        cached_input: 1_250_000,
        output: 10_000_000,
    }; // $2.50 / $10 per M
    for (api, request, pointer) in requests(Some(4000)) {
        let prompt = effective_prompt(&request, api, 0.05);
        let prompt_cost = rates.dearest_cost_micros(prompt, 0);
        let c = UsageCeiling {
            cost_micros: Some(prompt_cost + 5000),
            rates: Some(rates),
            ..ceiling(None, 8192)
        };
        let r = run(&request, api, &c).unwrap();
        // 5,000 micro-dollars at $10 per million output tokens: 500 tokens.
        assert_eq!(r.request.pointer(pointer), Some(&json!(500)), "{api:?}");
        assert!(rates.dearest_cost_micros(prompt, 500) <= prompt_cost + 5000);
        assert!(rates.dearest_cost_micros(prompt, 501) > prompt_cost + 5000);
        let poor = UsageCeiling {
            cost_micros: Some(prompt_cost + 2000),
            ..c.clone()
        };
        match run(&request, api, &poor) {
            Err(Error::Refused(r)) => assert_eq!(
                (r.reason, r.metric.map(|m| m.as_str())),
                (Reason::DoesNotFit, Some("cost"))
            ),
            other => panic!("{api:?}: {other:?}"),
        }
    }
}

#[test]
fn estimates_keep_the_margin_free() {
    let request = json!({"model": "claude-sonnet-4-5", "max_tokens": 4000, "messages": [{"role": "user", "content": text(40)}]});
    let count = count_request(&request, Api::Anthropic, None, None).unwrap();
    assert!(!count.exact);
    let margin = (count.tokens as f64 * 0.10).ceil() as u64;
    let c = UsageCeiling {
        margin: 0.10,
        ..ceiling(Some(count.tokens + 1000), 8192)
    };
    let r = run(&request, Api::Anthropic, &c).unwrap();
    assert_eq!(r.max_output_tokens, Some(1000 - margin));
    assert!(margin > 0 && !r.prompt_exact);
    // An exact count keeps no margin.
    let exact = json!({"model": "gpt-4o", "max_completion_tokens": 4000, "messages": [{"role": "user", "content": text(40)}]});
    let n = count_request(&exact, Api::OpenAiChat, None, None)
        .unwrap()
        .tokens;
    let r = run(
        &exact,
        Api::OpenAiChat,
        &UsageCeiling {
            margin: 0.10,
            ..ceiling(Some(n + 1000), 8192)
        },
    )
    .unwrap();
    assert_eq!(r.max_output_tokens, Some(1000));
}

#[test]
fn anthropic_thinking_lowered_then_turned_off() {
    let request = json!({"model": "claude-sonnet-4-5", "max_tokens": 16000,
        "thinking": {"type": "enabled", "budget_tokens": 10000},
        "messages": [{"role": "user", "content": "Prove it."}]});
    let prompt = effective_prompt(&request, Api::Anthropic, 0.05);
    // Room for 5,000: max_tokens 5,000, budget 4,999.
    let r = run(
        &request,
        Api::Anthropic,
        &ceiling(Some(prompt + 5000), 16000),
    )
    .unwrap();
    assert_eq!(r.request["max_tokens"], json!(5000));
    assert_eq!(
        r.request["thinking"],
        json!({"type": "enabled", "budget_tokens": 4999})
    );
    assert_eq!(
        (r.thinking_budget, r.thinking_disabled, r.lowered),
        (Some(4999), false, true)
    );
    // Room for 1,025: the smallest budget (1,024) still fits below max_tokens.
    let r = run(
        &request,
        Api::Anthropic,
        &ceiling(Some(prompt + 1025), 16000),
    )
    .unwrap();
    assert_eq!(r.thinking_budget, Some(1024));
    // Room for 800: even 1,024 does not fit, so thinking is turned off.
    let r = run(
        &request,
        Api::Anthropic,
        &ceiling(Some(prompt + 800), 16000),
    )
    .unwrap();
    assert_eq!(r.request["max_tokens"], json!(800));
    assert_eq!(r.request["thinking"], json!({"type": "disabled"}));
    assert_eq!((r.thinking_budget, r.thinking_disabled), (None, true));
    // A budget that already fits is untouched.
    let r = run(
        &request,
        Api::Anthropic,
        &ceiling(Some(prompt + 12000), 16000),
    )
    .unwrap();
    assert_eq!(r.request["thinking"]["budget_tokens"], json!(10000));
}

#[test]
fn gemini_thinking_within_each_models_range() {
    let request = |model: &str, budget: i64, snake: bool| {
        let mut r = if snake {
            json!({"contents": [{"role": "user", "parts": [{"text": "Plan a trip."}]}],
                   "config": {"max_output_tokens": 8000, "thinking_config": {"thinking_budget": budget}}})
        } else {
            json!({"contents": [{"role": "user", "parts": [{"text": "Plan a trip."}]}],
                   "generationConfig": {"maxOutputTokens": 8000, "thinkingConfig": {"thinkingBudget": budget}}})
        };
        r["model"] = json!(model);
        r
    };
    let fit_with = |req: &Value, room: u64| {
        let prompt = effective_prompt(req, Api::Gemini, 0.05);
        let c = UsageCeiling {
            min_output_tokens: 64,
            ..ceiling(Some(prompt + room), 8000)
        };
        run(req, Api::Gemini, &c).unwrap()
    };
    // Flash: lowered below the output maximum.
    let r = fit_with(&request("gemini-2.5-flash", 6000, false), 2000);
    assert_eq!(
        r.request["generationConfig"]["thinkingConfig"]["thinkingBudget"],
        json!(1999)
    );
    assert_eq!(
        r.request["generationConfig"]["maxOutputTokens"],
        json!(2000)
    );
    // SDK snake_case spelling.
    let r = fit_with(&request("gemini-2.5-flash", 6000, true), 2000);
    assert_eq!(
        r.request["config"]["thinking_config"]["thinking_budget"],
        json!(1999)
    );
    assert_eq!(r.request["config"]["max_output_tokens"], json!(2000));
    // Flash-Lite's smallest budget is 512: below it, 0 turns thinking off.
    let r = fit_with(&request("gemini-2.5-flash-lite", 6000, false), 400);
    assert_eq!(
        r.request["generationConfig"]["thinkingConfig"]["thinkingBudget"],
        json!(0)
    );
    assert!(r.thinking_disabled);
    // Pro cannot turn thinking off: the budget stops at its minimum (128).
    let r = fit_with(&request("gemini-2.5-pro", 6000, false), 100);
    assert_eq!(
        r.request["generationConfig"]["thinkingConfig"]["thinkingBudget"],
        json!(128)
    );
    assert!(!r.thinking_disabled);
    assert_eq!(r.request["generationConfig"]["maxOutputTokens"], json!(100));
}

#[test]
fn openai_keeps_legacy_max_tokens_and_has_no_thinking_budget() {
    let request = json!({"model": "o3", "max_tokens": 9000, "reasoning_effort": "high",
        "messages": [{"role": "user", "content": "hi"}]});
    let prompt = effective_prompt(&request, Api::OpenAiChat, 0.05);
    let r = run(
        &request,
        Api::OpenAiChat,
        &ceiling(Some(prompt + 3000), 9000),
    )
    .unwrap();
    assert_eq!(r.request["max_tokens"], json!(3000));
    assert!(r.request.get("max_completion_tokens").is_none());
    assert_eq!(r.request["reasoning_effort"], json!("high"));
    assert_eq!(r.thinking_budget, None);
}

#[test]
fn chat_s_two_output_fields_must_agree_and_both_carry_the_fit() {
    let messages = json!([{"role": "user", "content": "hi"}]);
    let both = |legacy: u64, newer: u64| {
        json!({"model": "gpt-4o", "max_tokens": legacy, "max_completion_tokens": newer,
            "messages": messages})
    };
    let request = both(100_000, 5);
    let e = run(&request, Api::OpenAiChat, &ceiling(Some(1_000_000), 9000)).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("request.max_tokens") && text.contains("max_completion_tokens"));
    let request = both(9000, 9000);
    let prompt = effective_prompt(&request, Api::OpenAiChat, 0.05);
    let r = run(
        &request,
        Api::OpenAiChat,
        &ceiling(Some(prompt + 3000), 9000),
    )
    .unwrap();
    assert_eq!(r.request["max_tokens"], json!(3000));
    assert_eq!(r.request["max_completion_tokens"], json!(3000));
    let mut keys: Vec<String> = r.changes().keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["max_completion_tokens", "max_tokens"]);
    // Untouched when nothing is lowered; a null one is not set.
    let r = run(&request, Api::OpenAiChat, &ceiling(Some(1_000_000), 9000)).unwrap();
    assert_eq!(r.request, request);
    let request = json!({"model": "gpt-4o", "max_tokens": null, "max_completion_tokens": 9000,
        "messages": messages});
    let r = run(
        &request,
        Api::OpenAiChat,
        &ceiling(Some(prompt + 3000), 9000),
    )
    .unwrap();
    assert_eq!(r.request["max_tokens"], Value::Null);
}

#[test]
fn ollama_unlimited_num_predict_is_capped() {
    let request = json!({"model": "llama3.1", "options": {"num_predict": -1, "temperature": 0.2},
        "messages": [{"role": "user", "content": "hi"}]});
    let r = run(&request, Api::OllamaChat, &ceiling(Some(100_000), 2048)).unwrap();
    assert_eq!(
        r.request["options"],
        json!({"num_predict": 2048, "temperature": 0.2})
    );
    let bad = json!({"model": "llama3.1", "options": {"num_predict": "lots"}, "messages": []});
    match run(&bad, Api::OllamaChat, &ceiling(None, 100)) {
        Err(Error::InvalidArgument(f)) => assert_eq!(f.path, "request.options.num_predict"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn legacy_completions_reserve_the_default_16_and_share_among_prompts() {
    let api = Api::OpenAiCompletions;
    let capless = json!({"model": "gpt-4o", "prompt": "Say hello"});
    assert_eq!(
        usage_guard::requested_max_output(&capless, api).unwrap(),
        Some(16)
    );
    let r = run(&capless, api, &ceiling(Some(1_000_000), 8192)).unwrap();
    // 16 is the API's own default: nothing is written, nothing was lowered.
    assert_eq!(r.request, capless);
    assert_eq!(r.max_output_tokens, Some(16));
    assert!(!r.lowered);
    // Two prompts × n = 2: four answers share what is left.
    let many = json!({"model": "gpt-4o", "prompt": ["a", [1, 2]], "n": 2, "max_tokens": 2000});
    let prompt = effective_prompt(&many, api, 0.05);
    assert_eq!(
        prompt,
        count_request(&many, api, None, None).unwrap().tokens
    );
    let r = run(&many, api, &ceiling(Some(prompt + 4000), 8192)).unwrap();
    assert_eq!(r.request["max_tokens"], json!(1000));
    for bad in [
        json!({"prompt": 7}),
        json!({"prompt": [{"a": 1}]}),
        json!({}),
    ] {
        let e = count_request(&bad, api, Some("gpt-4o"), None).unwrap_err();
        assert!(e.to_string().contains("request.prompt"), "{e}");
    }
}

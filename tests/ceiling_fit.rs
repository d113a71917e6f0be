//! Fitting calls into a usage ceiling, per provider: untouched, output lowered, thinking
//! lowered or turned off, refused, cost-bound, estimate with margin, router intersection and
//! the context-window pre-check under both policies.

use serde_json::{json, Value};
use usage_guard::{count_request, fit, usage_capped, Api, FitOptions, FitResult};
use usage_guard::{Error, Prices, Reason, UsageCeiling};

fn ceiling(tokens: Option<u64>, max_out: u64) -> UsageCeiling {
    UsageCeiling {
        tokens,
        cost_micros: None,
        rates: None,
        max_output_tokens: max_out,
        min_output_tokens: 256,
        margin: 0.05,
    }
}

/// The prompt as fit takes it: the count, plus the margin when it is an estimate.
fn effective_prompt(request: &Value, api: Api, margin: f64) -> u64 {
    let c = count_request(request, api, None, None).unwrap();
    if c.exact {
        c.tokens
    } else {
        c.tokens + (c.tokens as f64 * margin).ceil() as u64
    }
}

fn run(request: &Value, api: Api, c: &UsageCeiling) -> Result<FitResult, Error> {
    fit(request, c, api, None, None, &FitOptions::default())
}

fn refused(result: Result<FitResult, Error>) -> Reason {
    match result {
        Err(Error::Refused(r)) => r.reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn text(n: usize) -> String {
    "Summarise the quarterly report for the board. ".repeat(n)
}

/// One request per API with an output maximum of `max` (None: no cap given).
fn requests(max: Option<u64>) -> Vec<(Api, Value, &'static str)> {
    let t = text(10);
    let mut out = vec![
        (
            Api::OpenAiChat,
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": t}]}),
            "/max_completion_tokens",
        ),
        (
            Api::OpenAiResponses,
            json!({"model": "gpt-5", "input": t}),
            "/max_output_tokens",
        ),
        (
            Api::Anthropic,
            json!({"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": t}]}),
            "/max_tokens",
        ),
        (
            Api::Gemini,
            json!({"contents": [{"role": "user", "parts": [{"text": t}]}]}),
            "/generationConfig/maxOutputTokens",
        ),
        (
            Api::OllamaChat,
            json!({"model": "llama3.1", "messages": [{"role": "user", "content": t}]}),
            "/options/num_predict",
        ),
        (
            Api::OllamaGenerate,
            json!({"model": "llama3.1", "prompt": t}),
            "/options/num_predict",
        ),
    ];
    if let Some(max) = max {
        for (_, request, pointer) in out.iter_mut() {
            let keys: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
            let mut at = &mut *request;
            for k in &keys[..keys.len() - 1] {
                at = at
                    .as_object_mut()
                    .unwrap()
                    .entry(k.to_string())
                    .or_insert(json!({}));
            }
            at[keys[keys.len() - 1]] = json!(max);
        }
    }
    out
}

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
                (r.reason, r.metric.map(|m| m.word())),
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
            assert!(r.message.contains("8192"), "{}", r.message);
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
    assert!(r.output_capped);
    // require_full_output: the cap that would have to shrink is refused.
    let strict = FitOptions {
        require_full_output: true,
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

#[test]
fn an_output_maximum_is_shared_among_the_answers_asked_for() {
    use usage_guard::{fit, Api, FitOptions};
    let ceiling = usage_guard::UsageCeiling {
        tokens: None,
        cost_micros: None,
        rates: None,
        max_output_tokens: 1000,
        min_output_tokens: 1,
        margin: 0.05,
    };
    let request = serde_json::json!({
        "model": "gpt-4o", "max_tokens": 1000, "n": 4,
        "messages": [{"role": "user", "content": "hi"}],
    });
    let fitted = fit(
        &request,
        &ceiling,
        Api::OpenAiChat,
        Some("gpt-4o"),
        None,
        &FitOptions::default(),
    )
    .unwrap();
    assert_eq!(
        fitted.max_output_tokens,
        Some(250),
        "4 answers × 250 ≤ the 1,000 reserved"
    );
}

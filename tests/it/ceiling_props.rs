//! Fit invariants for any request and ceiling: prompt (+ margin) + output maximum ≤ tokens,
//! cost at the rates ≤ cost_micros, and the output maximum never above the caller's, the
//! model's or the ceiling's.

use proptest::prelude::*;
use serde_json::{json, Value};
use usage_guard::{fit, known_model, Api, FitOptions};
use usage_guard::{Error, Prices, Reason, UsageCeiling};

fn call() -> impl Strategy<Value = (Api, Value, Option<u64>)> {
    let api = prop::sample::select(vec![
        Api::OpenAiChat,
        Api::OpenAiResponses,
        Api::Anthropic,
        Api::Gemini,
        Api::OllamaChat,
    ]);
    let model = prop::sample::select(vec![
        "gpt-4o",
        "gpt-4",
        "gpt-5",
        "claude-sonnet-4-5",
        "gemini-2.5-pro",
        "gemini-2.5-flash-lite",
        "llama3.1",
    ]);
    (api, model, ".{0,300}", prop::option::of(1u64..200_000), 1024u64..40_000, any::<bool>())
        .prop_map(|(api, model, text, cap, budget, think)| {
            let mut r = match api {
                Api::OpenAiChat => json!({"messages": [{"role": "user", "content": text}]}),
                Api::OpenAiResponses => json!({"input": text}),
                Api::Anthropic => json!({"messages": [{"role": "user", "content": text}], "max_tokens": cap.unwrap_or(4096)}),
                Api::Gemini => json!({"contents": [{"role": "user", "parts": [{"text": text}]}], "generationConfig": {}}),
                _ => json!({"messages": [{"role": "user", "content": text}], "options": {}}),
            };
            r["model"] = json!(model);
            let cap = if api == Api::Anthropic { Some(cap.unwrap_or(4096)) } else { cap };
            if let Some(c) = cap {
                match api {
                    Api::OpenAiChat => r["max_completion_tokens"] = json!(c),
                    Api::OpenAiResponses => r["max_output_tokens"] = json!(c),
                    Api::Gemini => r["generationConfig"]["maxOutputTokens"] = json!(c),
                    Api::OllamaChat => r["options"]["num_predict"] = json!(c),
                    _ => {}
                }
            }
            if api == Api::OpenAiChat && budget % 3 == 0 {
                r["n"] = json!(1 + budget % 4);
            }
            if think {
                match api {
                    Api::Anthropic => r["thinking"] = json!({"type": "enabled", "budget_tokens": budget}),
                    Api::Gemini => r["generationConfig"]["thinkingConfig"] = json!({"thinkingBudget": budget}),
                    _ => {}
                }
            }
            (api, r, cap)
        })
}

fn ceiling() -> impl Strategy<Value = UsageCeiling> {
    (
        prop::option::of(0u64..300_000),
        prop::option::of((
            0u64..5_000_000,
            0u64..20_000_000,
            0u64..20_000_000,
            1u64..80_000_000,
        )),
        1u64..150_000,
        0u64..2_000,
        prop::sample::select(vec![0.0, 0.05, 0.2]),
    )
        .prop_map(|(tokens, cost, max_out, min_out, margin)| UsageCeiling {
            tokens,
            cost_micros: cost.map(|c| c.0),
            rates: cost.map(|(_, input, cached_input, output)| Prices {
                input,
                cached_input,
                output,
            }),
            max_output_tokens: max_out,
            min_output_tokens: min_out,
            margin,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]
    #[test]
    fn fitted_calls_stay_within_the_ceiling((api, request, cap) in call(), c in ceiling()) {
        let r = match fit(&request, &c, api, None, None, &FitOptions::default()) {
            Ok(r) => r,
            Err(Error::Refused(r)) => {
                prop_assert!(matches!(r.reason, Reason::DoesNotFit | Reason::ContextWindowExceeded));
                return Ok(());
            }
            Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
        };
        let out = r.max_output_tokens.unwrap();
        prop_assert!(out >= 1);
        let prompt = if r.prompt_exact {
            r.prompt_tokens
        } else {
            r.prompt_tokens + (r.prompt_tokens as f64 * c.margin).ceil() as u64
        };
        let answers = request.get("n").and_then(Value::as_u64).unwrap_or(1);
        if let Some(t) = c.tokens {
            prop_assert!(prompt + out * answers <= t, "{prompt} + {out} × {answers} > {t}");
        }
        if let (Some(cost), Some(rates)) = (c.cost_micros, c.rates) {
            prop_assert!(rates.dearest_cost_micros(prompt, out * answers) <= cost);
        }
        prop_assert!(out <= c.max_output_tokens);
        if let Some(cap) = cap {
            prop_assert!(out <= cap);
        }
        let model = request["model"].as_str().unwrap();
        if let Some(max) = known_model(model).and_then(|k| k.max_output_tokens) {
            prop_assert!(out <= max);
        }
        if let Some(window) = known_model(model).and_then(|k| k.context_window) {
            prop_assert!(r.prompt_tokens + out <= window);
        }
        if api == Api::Anthropic {
            if let Some(b) = r.thinking_budget {
                prop_assert!((1024..out).contains(&b));
            }
        }
    }
}

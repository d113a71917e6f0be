//! Fitting a call into a usage ceiling: refuse what cannot fit before the provider sees it,
//! else lower the output maximum and the thinking budget in the fields the provider reads.

use serde_json::{json, Value};

use super::api::Api;
use super::fields::{choices, output_path, read_count, set};
use super::models::{known_model, ThinkingRange};
use super::prompt::{count_request, PromptCount};
use super::thinking::fit_thinking;
use crate::error::{Error, Result};
use crate::guard::domain::decide::UsageCeiling;
use crate::guard::domain::policy::ModelSpec;
use crate::guard::domain::refusal::{Reason, Refusal};
use crate::guard::domain::rule::Metric;

/// Options of [`fit()`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FitOptions {
    /// Refuse a caller's output cap that would have to shrink (to the context window or to
    /// what is left) instead of lowering it.
    pub require_full_output: bool,
}

/// A call fitted into a ceiling.
#[derive(Debug, Clone, PartialEq)]
pub struct FitResult {
    /// The request to send: the caller's, with the output maximum (and thinking) set.
    pub request: Value,
    /// The prompt's tokens as counted (without margin).
    pub prompt_tokens: u64,
    /// Whether `prompt_tokens` is exact.
    pub prompt_exact: bool,
    /// The output maximum set in `request` (`None` for embeddings). With the prompt (plus the
    /// margin for an estimate) it never exceeds the ceiling's `tokens` or, at its `rates`,
    /// `cost_micros`; and it is never above the caller's nor the model's maximum.
    pub max_output_tokens: Option<u64>,
    /// The thinking budget in force after fitting (Anthropic `budget_tokens`, Gemini
    /// `thinkingBudget`), `None` when the request sets none or thinking was turned off.
    pub thinking_budget: Option<u64>,
    /// True when the ceiling turned thinking off.
    pub thinking_disabled: bool,
    /// True when the output maximum in force is the ceiling's (below the caller's, or the
    /// model's when the caller gave none): an answer stopping there was capped by the ceiling.
    pub output_capped: bool,
    /// True when the ceiling lowered (or set below the default) anything in the request.
    pub lowered: bool,
}

/// The caller's output maximum in `request` for `api` (`None` when it sets none, and always
/// for embeddings). A value that is not a non-negative integer is an error naming the field.
pub fn requested_max_output(request: &Value, api: Api) -> Result<Option<u64>> {
    let Some(path) = output_path(request, api) else {
        return Ok(None);
    };
    let ollama = matches!(api, Api::OllamaChat | Api::OllamaGenerate);
    read_count(request, &path, ollama)
}

struct Limits {
    context_window: Option<u64>,
    max_input: Option<u64>,
    max_output: Option<u64>,
    thinking: Option<ThinkingRange>,
    name: String,
}

fn limits(api: Api, model: Option<&str>, spec: Option<&ModelSpec>) -> Limits {
    let id = model.or(spec.map(|s| &*s.id));
    let known = id.and_then(known_model);
    // The API decides the budget's rules; a Gemini model's range refines Gemini's.
    let thinking = match api {
        Api::Anthropic => Some(ThinkingRange::ANTHROPIC),
        Api::Gemini => known
            .and_then(|k| k.thinking)
            .filter(|t| *t != ThinkingRange::ANTHROPIC)
            .or(Some(ThinkingRange::GEMINI_UNKNOWN)),
        _ => None,
    };
    Limits {
        context_window: spec
            .and_then(|s| s.context_window)
            .or(known.and_then(|k| k.context_window)),
        max_input: spec
            .and_then(|s| s.max_input_tokens)
            .or(known.and_then(|k| k.max_input_tokens)),
        max_output: spec
            .and_then(|s| s.max_output_tokens)
            .or(known.and_then(|k| k.max_output_tokens)),
        thinking,
        name: spec
            .map(|s| s.display_name.clone())
            .filter(|n| !n.is_empty())
            .or(id.map(str::to_string))
            .unwrap_or_else(|| "the model".to_string()),
    }
}

fn refused(reason: Reason, metric: Option<Metric>, amount: Option<u64>, message: String) -> Error {
    Error::Refused(Box::new(Refusal {
        reason,
        limit_type: None,
        metric,
        amount,
        window: None,
        resets_at: None,
        retry_after_seconds: None,
        message,
    }))
}

fn context_refusal(amount: u64, message: String) -> Error {
    refused(
        Reason::ContextWindowExceeded,
        Some(Metric::Tokens),
        Some(amount),
        message,
    )
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Fits `request` (sent through `api` to `model`) into `ceiling`.
///
/// Guarantees, for the returned request: prompt (+ `margin` when counted as an estimate) +
/// output maximum × answers asked for (`n`, `candidateCount`) ≤ `ceiling.tokens`; cost of that at the dearest input rate and the output
/// rate ≤ `ceiling.cost_micros`; output maximum ≤ the caller's, the model's and the ceiling's
/// `max_output_tokens`, and ≤ the room left in the model's context window. Refuses with
/// `USAGE_LIMIT_DOES_NOT_FIT` when less than `min_output_tokens` (or the caller's smaller
/// maximum) is left for output, or embeddings input does not fit; refuses with
/// `CONTEXT_WINDOW_EXCEEDED` (HTTP 400) a prompt over the model's window or input limit.
pub fn fit(
    request: &Value,
    ceiling: &UsageCeiling,
    api: Api,
    model: Option<&str>,
    spec: Option<&ModelSpec>,
    options: &FitOptions,
) -> Result<FitResult> {
    if !(ceiling.margin.is_finite() && ceiling.margin >= 0.0) {
        return Err(Error::invalid(
            "ceiling.margin",
            ceiling.margin,
            "must be a finite number ≥ 0 (a fraction, 0.05 = 5%)",
        ));
    }
    if ceiling.cost_micros.is_some() && ceiling.rates.is_none() {
        return Err(Error::invalid(
            "ceiling.rates",
            "null",
            "is required when cost_micros is set (dollars per million tokens: input, cached_input, output)",
        ));
    }
    let model = model.or_else(|| request.get("model").and_then(Value::as_str));
    let PromptCount {
        tokens: prompt,
        exact,
        ..
    } = count_request(request, api, model, spec)?;
    let margin = if exact {
        0
    } else {
        (prompt as f64 * ceiling.margin).ceil() as u64
    };
    let prompt_eff = prompt.saturating_add(margin);
    let lim = limits(api, model, spec);
    let name = &lim.name;

    // The context-window pre-check: a prompt that cannot fit is refused with no round trip.
    if let Some(max_in) = lim.max_input {
        if prompt > max_in {
            return Err(context_refusal(
                max_in,
                format!(
                    "The prompt is {prompt} tokens, over {name}'s input limit of {max_in} tokens."
                ),
            ));
        }
    }
    if let Some(window) = lim.context_window {
        let over = if api.is_embeddings() {
            prompt > window
        } else {
            prompt >= window
        };
        if over {
            return Err(context_refusal(window, format!(
                "The prompt is {prompt} tokens and leaves no room in {name}'s context window of {window} tokens."
            )));
        }
    }

    let prompt_cost = ceiling.rates.map(|r| r.dearest_cost_micros(prompt_eff, 0));
    if let Some(tokens) = ceiling.tokens {
        if prompt_eff > tokens {
            return Err(refused(
                Reason::DoesNotFit,
                Some(Metric::Tokens),
                Some(tokens),
                format!(
                    "The prompt is {prompt} tokens{}; only {tokens} tokens are left.",
                    if margin > 0 {
                        format!(" ({prompt_eff} with the {margin}-token margin for an estimate)")
                    } else {
                        String::new()
                    }
                ),
            ));
        }
    }
    if let (Some(cost), Some(pc)) = (ceiling.cost_micros, prompt_cost) {
        if pc > cost {
            return Err(refused(
                Reason::DoesNotFit,
                Some(Metric::Cost),
                Some(cost),
                format!("The prompt costs {pc} micro-dollars; only {cost} are left."),
            ));
        }
    }
    if api.is_embeddings() {
        return Ok(FitResult {
            request: request.clone(),
            prompt_tokens: prompt,
            prompt_exact: exact,
            max_output_tokens: None,
            thinking_budget: None,
            thinking_disabled: false,
            output_capped: false,
            lowered: false,
        });
    }

    let caller = requested_max_output(request, api)?;
    // What the call would have without the ceiling, and what the ceiling allows.
    let natural = min_opt(caller, lim.max_output);
    // Every answer asked for (`n`, `candidateCount`) may use the whole output maximum, so
    // the ceiling's output maximum (what is reserved for output) is shared among them.
    let answers = choices(request, api)?;
    let per_answer = ceiling.max_output_tokens / answers;
    let desired = min_opt(natural, Some(per_answer)).unwrap_or(per_answer);
    let token_room = ceiling.tokens.map(|t| t - prompt_eff);
    let cost_room = match (ceiling.cost_micros, ceiling.rates, prompt_cost) {
        (Some(cost), Some(rates), Some(pc)) if rates.output > 0 => Some(
            ((cost - pc) as u128 * 1_000_000 / rates.output as u128).min(u64::MAX as u128) as u64,
        ),
        _ => None,
    };
    let ctx_room = lim
        .context_window
        .map(|w| w.saturating_sub(prompt_eff).max(1));
    let usage_room = min_opt(token_room, cost_room).map(|room| room / answers);
    let need = ceiling.min_output_tokens.min(desired).max(1);
    if let Some(room) = usage_room {
        if room < need {
            let by_cost = cost_room == Some(room) && token_room != Some(room);
            let (metric, amount) = if by_cost {
                (Metric::Cost, ceiling.cost_micros)
            } else {
                (Metric::Tokens, ceiling.tokens)
            };
            return Err(refused(
                Reason::DoesNotFit,
                Some(metric),
                amount,
                format!(
                    "The prompt is {prompt} tokens and leaves room for {room} output tokens, \
                 less than the {need} this call needs."
                ),
            ));
        }
    }
    let out = min_opt(min_opt(Some(desired), usage_room), ctx_room).unwrap_or(desired);
    if out == 0 {
        return Err(refused(
            Reason::DoesNotFit,
            Some(Metric::OutputTokens),
            Some(ceiling.max_output_tokens),
            format!("This call may produce no output tokens (the output maximum is 0) on {name}."),
        ));
    }
    if options.require_full_output {
        if let Some(asked) =
            min_opt(caller, lim.max_output).filter(|&a| caller.is_some() && out < a)
        {
            let window_bound = ctx_room == Some(out);
            return Err(if window_bound {
                context_refusal(
                    lim.context_window.unwrap_or(0),
                    format!(
                    "The prompt is {prompt} tokens; {name}'s context window of {} tokens leaves \
                     room for {out} output tokens, not the {asked} asked for.",
                    lim.context_window.unwrap_or(0)
                ),
                )
            } else {
                refused(
                    Reason::DoesNotFit,
                    Some(Metric::Tokens),
                    ceiling.tokens,
                    format!("What is left allows {out} output tokens, not the {asked} asked for."),
                )
            });
        }
    }

    let mut fitted = request.clone();
    let path = output_path(request, api).expect("not embeddings");
    if caller != Some(out) {
        set(&mut fitted, &path, json!(out));
    }
    // The ceiling's maximum is in force when the call's own is absent or higher.
    let output_capped = match natural {
        None => true,
        Some(n) => out < n,
    };
    let (thinking_budget, thinking_disabled, thinking_lowered) =
        fit_thinking(&mut fitted, api, out, lim.thinking)?;
    Ok(FitResult {
        request: fitted,
        prompt_tokens: prompt,
        prompt_exact: exact,
        max_output_tokens: Some(out),
        thinking_budget,
        thinking_disabled,
        output_capped,
        lowered: output_capped || thinking_lowered,
    })
}

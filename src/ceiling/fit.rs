//! Fitting a call into a usage ceiling: refuse what cannot fit before the provider sees it,
//! else lower the output maximum and the thinking budget in the fields the provider reads.

use serde_json::{json, Map, Value};

use super::api::Api;
use super::effort::fit_effort;
use super::fields::{field_error, read_count, set};
use super::fit_checks::{
    check_ceiling, check_left, check_window, context_refusal, limits, min_opt, refused, Limits,
    Prompt,
};
use super::prompt::{count_request, PromptCount};
use super::providers::{
    choices, negative_output_is_unlimited, other_output_path, output_path, thinking_path,
};
use super::thinking::fit_thinking;
use crate::error::{Error, Result};
use crate::guard::domain::decide::UsageCeiling;
use crate::guard::domain::policy::ModelSpec;
use crate::guard::domain::refusal::Reason;
use crate::guard::domain::room::cost_output_room;
use crate::guard::domain::rule::Metric;

/// Options of [`fit()`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FitOptions {
    /// Refuse a caller's output cap that would have to shrink (to the context window or to
    /// what is left) instead of lowering it.
    pub require_full_output: bool,
    /// The output maximum a call gets when neither the caller nor the policy's model entry
    /// sets one (the policy's `settings.default_max_output_tokens`); `None`: 8,192. Only what
    /// a usage limit lowers below it (or below the caller's or the model's maximum) is
    /// `output_capped`.
    pub default_max_output_tokens: Option<u64>,
}

/// The output maximum of a call that sets none, on a model whose maximum the policy does not
/// give (`settings.default_max_output_tokens`'s default).
pub(crate) const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 8192;

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
    /// True when a usage limit set the output maximum in force: the ceiling (what is left,
    /// or its `max_output_tokens`) lowered it below what the call has without usage limits —
    /// the caller's maximum, else the model's, else the default — and below the room the
    /// context window leaves. An answer stopping there was cut short by a usage limit. A
    /// model's own maximum or the default written into a capless call is not a cap.
    pub output_capped: bool,
    /// True when the ceiling lowered (or set below the default) anything in the request.
    pub lowered: bool,
    /// The top-level request keys whose values the fit changed.
    changed: Vec<&'static str>,
}

impl FitResult {
    /// Exactly the request keys to set on the caller's request to send the fitted call: the
    /// output maximum's field (its whole containing object for nested ones, such as Ollama's
    /// `options` or Gemini's `generationConfig`), the thinking budget, or thinking turned off,
    /// and `reasoning` when its `effort` was lowered (`openai.responses`).
    /// Empty when the fit changed nothing. The caller's request updated with these equals
    /// `request`.
    pub fn changes(&self) -> Map<String, Value> {
        self.changed
            .iter()
            .filter_map(|k| Some((k.to_string(), self.request.get(*k)?.clone())))
            .collect()
    }
}

/// The caller's output maximum in `request` for `api` (`None` when it sets none, and always
/// for embeddings; legacy completions without `max_tokens` get the API's own default, 16).
/// A value that is not a positive integer is an error naming the field (Ollama's negative
/// `num_predict` means no maximum), and so are two output maximum fields that disagree
/// (chat's `max_tokens` and `max_completion_tokens`).
pub fn requested_max_output(request: &Value, api: Api) -> Result<Option<u64>> {
    let Some(path) = output_path(request, api) else {
        return Ok(None);
    };
    other_output_path(request, api)?;
    let asked = read_count(request, &path, negative_output_is_unlimited(api))?;
    if asked == Some(0) {
        // A call that may write nothing is the caller's mistake, not a limit's.
        let field = format!("request.{}", path.join("."));
        return Err(field_error(&field, &Value::from(0), "must be at least 1"));
    }
    Ok(match api {
        Api::OpenAiCompletions => asked.or(Some(COMPLETIONS_DEFAULT_MAX_TOKENS)),
        _ => asked,
    })
}

/// What OpenAI's legacy completions write when `max_tokens` is absent.
const COMPLETIONS_DEFAULT_MAX_TOKENS: u64 = 16;

/// The output maximum chosen, with what the call asked for.
struct Output {
    out: u64,
    caller: Option<u64>,
    /// What the call would have without the ceiling: the caller's, capped by the model's.
    natural: Option<u64>,
    /// What the call would have with no usage limit: the caller's (else the policy model's,
    /// else the default), capped by the model's maximum and the context window's room.
    unlimited: u64,
}

/// The output maximum: the caller's, the model's and the ceiling's (shared among the answers
/// asked for), lowered to the room the tokens, the cost and the context window leave.
fn output_maximum(
    request: &Value,
    ceiling: &UsageCeiling,
    api: Api,
    p: &Prompt,
    lim: &Limits,
    options: &FitOptions,
) -> Result<Output> {
    let caller = requested_max_output(request, api)?;
    let natural = min_opt(caller, lim.max_output);
    let asked = caller
        .or(lim.policy_max_output)
        .or(options.default_max_output_tokens)
        .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS);
    let answers = choices(request, api)?;
    // The ceiling's output maximum is per answer (admission reserved it `answers` times):
    // only what is left is shared among the answers.
    let per_answer = ceiling.max_output_tokens;
    let desired = min_opt(natural, Some(per_answer)).unwrap_or(per_answer);
    let token_room = ceiling.tokens.map(|t| t - p.eff);
    let cost_room = match (ceiling.cost_micros, ceiling.rates, p.cost) {
        (Some(cost), Some(rates), Some(pc)) => cost_output_room(cost, pc, &rates),
        _ => None,
    };
    let ctx_room = lim.context_window.map(|w| w.saturating_sub(p.eff).max(1));
    let usage_room = min_opt(token_room, cost_room).map(|room| room / answers);
    let need = ceiling.min_output_tokens.min(desired).max(1);
    if let Some(room) = usage_room.filter(|&r| r < need) {
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
                "The prompt is {} tokens and leaves room for {room} output tokens, \
                 less than the {need} this call needs.",
                p.tokens
            ),
        ));
    }
    let out = min_opt(min_opt(Some(desired), usage_room), ctx_room).unwrap_or(desired);
    if out == 0 {
        return Err(refused(
            Reason::DoesNotFit,
            Some(Metric::OutputTokens),
            Some(ceiling.max_output_tokens),
            format!(
                "This call may produce no output tokens (the output maximum is 0) on {}.",
                lim.name
            ),
        ));
    }
    let o = Output {
        out,
        caller,
        natural,
        unlimited: min_opt(min_opt(natural, Some(asked)), ctx_room).unwrap_or(asked),
    };
    if options.require_full_output {
        check_full_output(&o, ctx_room, ceiling, p, lim)?;
    }
    Ok(o)
}

/// `require_full_output`: refuses instead of lowering a caller's output maximum.
fn check_full_output(
    o: &Output,
    ctx_room: Option<u64>,
    ceiling: &UsageCeiling,
    p: &Prompt,
    lim: &Limits,
) -> Result<()> {
    let Some(asked) = o.natural.filter(|&a| o.caller.is_some() && o.out < a) else {
        return Ok(());
    };
    let (out, name, window) = (o.out, &lim.name, lim.context_window.unwrap_or(0));
    Err(if ctx_room == Some(out) {
        context_refusal(
            window,
            format!(
                "The prompt is {} tokens; {name}'s context window of {window} tokens leaves \
                 room for {out} output tokens, not the {asked} asked for.",
                p.tokens
            ),
        )
    } else {
        refused(
            Reason::DoesNotFit,
            Some(Metric::Tokens),
            ceiling.tokens,
            format!("What is left allows {out} output tokens, not the {asked} asked for."),
        )
    })
}

/// Writes the output maximum and the thinking budget into a copy of `request`.
fn apply(
    request: &Value,
    api: Api,
    count: &PromptCount,
    lim: &Limits,
    o: Output,
) -> Result<FitResult> {
    let mut fitted = request.clone();
    let mut changed = Vec::new();
    let path = output_path(request, api).expect("not embeddings");
    if o.caller != Some(o.out) {
        set(&mut fitted, &path, json!(o.out));
        changed.push(path[0]);
        if let Some(other) = other_output_path(request, api)? {
            set(&mut fitted, &[other], json!(o.out));
            changed.push(other);
        }
    }
    // A usage limit cut the output when it is below what the call has without one.
    let output_capped = o.out < o.unlimited;
    let lowered = o.natural.is_none_or(|n| o.out < n);
    let (thinking_budget, thinking_disabled, thinking_lowered) =
        fit_thinking(&mut fitted, api, o.out, lim.thinking)?;
    if thinking_lowered {
        let key = thinking_path(request, api).expect("only APIs with thinking lower it")[0];
        if !changed.contains(&key) {
            changed.push(key);
        }
    }
    let effort_lowered = fit_effort(&mut fitted, api, o.out, output_capped);
    if effort_lowered {
        changed.push("reasoning");
    }
    Ok(FitResult {
        request: fitted,
        prompt_tokens: count.tokens,
        prompt_exact: count.exact,
        max_output_tokens: Some(o.out),
        thinking_budget,
        thinking_disabled,
        output_capped,
        lowered: lowered || thinking_lowered || effort_lowered,
        changed,
    })
}

/// Fits `request` (sent through `api` to `model`) into `ceiling`, counting its prompt first
/// with [`count_request`] (the policy's `spec` decides the encoding and exactness).
///
/// Guarantees, for the returned request: prompt (+ `margin` when counted as an estimate) +
/// output maximum × answers asked for (`n`, `candidateCount`) ≤ `ceiling.tokens`; cost of
/// that at the dearest input rate and the output rate ≤ `ceiling.cost_micros`; output
/// maximum ≤ the caller's, the model's and the ceiling's `max_output_tokens`, and ≤ the room
/// left in the model's context window. Refuses with `USAGE_LIMIT_DOES_NOT_FIT` when less than
/// `min_output_tokens` (or the caller's smaller maximum) is left for output, or embeddings
/// input does not fit; refuses with `CONTEXT_WINDOW_EXCEEDED` (HTTP 400) a prompt over the
/// model's window or input limit.
pub fn fit(
    request: &Value,
    ceiling: &UsageCeiling,
    api: Api,
    model: Option<&str>,
    spec: Option<&ModelSpec>,
    options: &FitOptions,
) -> Result<FitResult> {
    check_ceiling(ceiling)?;
    let model = model.or_else(|| request.get("model").and_then(Value::as_str));
    let count = count_request(request, api, model, spec)?;
    fit_counted(request, ceiling, api, model, spec, &count, options)
}

/// [`fit()`] with the prompt already counted (admission's `count`), so it is not counted
/// again: the same guarantees, for that count.
pub(crate) fn fit_counted(
    request: &Value,
    ceiling: &UsageCeiling,
    api: Api,
    model: Option<&str>,
    spec: Option<&ModelSpec>,
    count: &PromptCount,
    options: &FitOptions,
) -> Result<FitResult> {
    check_ceiling(ceiling)?;
    if !request.is_object() {
        return Err(Error::invalid(
            "request",
            request.to_string(),
            "must be a JSON object (a dict)",
        ));
    }
    let model = model.or_else(|| request.get("model").and_then(Value::as_str));
    let lim = limits(api, model, spec);
    let p = Prompt::new(count, ceiling);
    check_window(p.tokens, &lim, api.is_embeddings())?;
    check_left(&p, ceiling)?;
    if api.is_embeddings() {
        return Ok(FitResult {
            request: request.clone(),
            prompt_tokens: count.tokens,
            prompt_exact: count.exact,
            max_output_tokens: None,
            thinking_budget: None,
            thinking_disabled: false,
            output_capped: false,
            lowered: false,
            changed: Vec::new(),
        });
    }
    let o = output_maximum(request, ceiling, api, &p, &lim, options)?;
    apply(request, api, count, &lim, o)
}

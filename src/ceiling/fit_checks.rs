//! The checks before fitting: what the model allows, the prompt as the fit sees it, and the
//! refusals of a prompt that cannot fit (the context-window pre-check, what is left).

use super::api::Api;
use super::models::{known_model, KnownModel, ThinkingRange};
use super::prompt::PromptCount;
use crate::error::{Error, Result};
use crate::guard::domain::decide::UsageCeiling;
use crate::guard::domain::policy::ModelSpec;
use crate::guard::domain::refusal::{Reason, Refusal};
use crate::guard::domain::room::with_margin;
use crate::guard::domain::rule::Metric;

pub(super) struct Limits {
    pub(super) context_window: Option<u64>,
    pub(super) max_input: Option<u64>,
    pub(super) max_output: Option<u64>,
    /// The maximum the policy's model entry gives (what admission reserves for a capless
    /// call), without the registry's.
    pub(super) policy_max_output: Option<u64>,
    pub(super) thinking: Option<ThinkingRange>,
    pub(super) name: String,
}

pub(super) fn limits(api: Api, model: Option<&str>, spec: Option<&ModelSpec>) -> Limits {
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
    let (context_window, max_input) = window_limits(spec, known);
    Limits {
        context_window,
        max_input,
        max_output: spec
            .and_then(|s| s.max_output_tokens)
            .or(known.and_then(|k| k.max_output_tokens)),
        policy_max_output: spec.and_then(|s| s.max_output_tokens),
        thinking,
        name: spec
            .map(|s| s.display_name.clone())
            .filter(|n| !n.is_empty())
            .or(id.map(str::to_string))
            .unwrap_or_else(|| "the model".to_string()),
    }
}

/// The context window and input limit: the policy's entry, else the registry's. A policy
/// that gives the window gives the model's limits: the registry's input limit (derived from
/// the registry's own window) is not mixed in.
fn window_limits(
    spec: Option<&ModelSpec>,
    known: Option<&KnownModel>,
) -> (Option<u64>, Option<u64>) {
    let context_window = spec
        .and_then(|s| s.context_window)
        .or(known.and_then(|k| k.context_window));
    let max_input = match spec {
        Some(s) if s.context_window.is_some() => s.max_input_tokens,
        _ => spec
            .and_then(|s| s.max_input_tokens)
            .or(known.and_then(|k| k.max_input_tokens)),
    };
    (context_window, max_input)
}

pub(super) fn refused(
    reason: Reason,
    metric: Option<Metric>,
    amount: Option<u64>,
    message: String,
) -> Error {
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

pub(super) fn context_refusal(amount: u64, message: String) -> Error {
    refused(
        Reason::ContextWindowExceeded,
        Some(Metric::Tokens),
        Some(amount),
        message,
    )
}

pub(super) fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The prompt as the fit sees it.
pub(super) struct Prompt {
    pub(super) tokens: u64,
    pub(super) margin: u64,
    /// With the margin kept free for an estimate.
    pub(super) eff: u64,
    /// `eff` at the dearest input rate, when the ceiling has rates.
    pub(super) cost: Option<u64>,
}

impl Prompt {
    pub(super) fn new(count: &PromptCount, ceiling: &UsageCeiling) -> Prompt {
        let eff = with_margin(count.tokens, !count.exact, ceiling.margin);
        Prompt {
            tokens: count.tokens,
            margin: eff - count.tokens,
            eff,
            cost: ceiling.rates.map(|r| r.dearest_cost_micros(eff, 0)),
        }
    }
}

pub(super) fn check_ceiling(ceiling: &UsageCeiling) -> Result<()> {
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
    Ok(())
}

/// The context-window pre-check: a prompt that cannot fit is refused with no round trip.
/// Over the model's input limit, or filling its context window (over it, for embeddings,
/// which produce no output), is `CONTEXT_WINDOW_EXCEEDED`, named with the model's display
/// name and the window the policy (else the registry) gives.
pub(super) fn check_window(prompt: u64, lim: &Limits, embeddings: bool) -> Result<()> {
    let name = &lim.name;
    let tokens = |n: u64| Metric::Tokens.amount_phrase(n);
    if let Some(max_in) = lim.max_input.filter(|&m| prompt > m) {
        return Err(context_refusal(
            max_in,
            format!(
                "The prompt is {}, over {name}'s input limit of {}.",
                tokens(prompt),
                tokens(max_in)
            ),
        ));
    }
    if let Some(window) = lim.context_window {
        let over = if embeddings {
            prompt > window
        } else {
            prompt >= window
        };
        if over {
            return Err(context_refusal(
                window,
                format!(
                    "The prompt is {} and leaves no room for output in {name}'s context \
                     window of {}.",
                    tokens(prompt),
                    tokens(window)
                ),
            ));
        }
    }
    Ok(())
}

/// The context-window pre-check admission runs first, before any usage limit is read: a
/// prompt of `prompt_tokens` to `model` (with the policy's `spec`) that cannot fit its
/// window or input limit is refused with `CONTEXT_WINDOW_EXCEEDED` (HTTP 400), whoever
/// calls. `embeddings`: the call produces no output, so a prompt may fill the window.
pub(crate) fn check_context(
    prompt_tokens: u64,
    api: Api,
    model: Option<&str>,
    spec: Option<&ModelSpec>,
    embeddings: bool,
) -> Result<()> {
    // The hot path: a prompt that fits needs neither the model's name nor its other limits.
    let known = model.or(spec.map(|s| &*s.id)).and_then(known_model);
    let (window, max_input) = window_limits(spec, known);
    let over_input = max_input.is_some_and(|m| prompt_tokens > m);
    let over_window =
        window.is_some_and(|w| prompt_tokens > w || (!embeddings && prompt_tokens == w));
    if !over_input && !over_window {
        return Ok(());
    }
    check_window(prompt_tokens, &limits(api, model, spec), embeddings)
}

/// Refuses a prompt that alone is over the tokens or cost left.
pub(super) fn check_left(p: &Prompt, ceiling: &UsageCeiling) -> Result<()> {
    if let Some(tokens) = ceiling.tokens.filter(|&t| p.eff > t) {
        let with_margin = if p.margin > 0 {
            format!(
                " ({} with the {}-token margin for an estimate)",
                p.eff, p.margin
            )
        } else {
            String::new()
        };
        return Err(refused(
            Reason::DoesNotFit,
            Some(Metric::Tokens),
            Some(tokens),
            format!(
                "The prompt is {} tokens{with_margin}; only {tokens} tokens are left.",
                p.tokens
            ),
        ));
    }
    if let (Some(cost), Some(pc)) = (ceiling.cost_micros, p.cost) {
        if pc > cost {
            return Err(refused(
                Reason::DoesNotFit,
                Some(Metric::Cost),
                Some(cost),
                format!("The prompt costs {pc} micro-dollars; only {cost} are left."),
            ));
        }
    }
    Ok(())
}

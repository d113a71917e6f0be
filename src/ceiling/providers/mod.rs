//! One file per provider: where its requests keep the output maximum, the answer count and
//! the thinking budget; how its responses (and final stream events) report usage; and which
//! finish reason means "stopped at the output maximum"; and how it shapes a refusal
//! (`refusal.rs` holds what the shapes share). Everything else asks here, by [`Api`].

mod anthropic;
mod gemini;
mod ollama;
mod openai;
mod refusal;
mod text;

use crate::guard::domain::refusal::{Reason, Refusal};
#[cfg(feature = "gateway")]
pub(crate) use gemini::error_body as gemini_error_body;
pub use refusal::{HttpRefusal, HttpShape};
use refusal::{RefusalKind, MAX_CLIENT_RETRY_WAIT_SECONDS};
pub use text::answer_text;

use serde_json::Value;

use super::api::Api;
use crate::error::Result;

/// The usage a provider reported in a response or a final stream event, in its own fields
/// mapped to one shape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReportedUsage {
    /// Every input token, cached ones included (Anthropic's cache reads and writes added in).
    pub input_tokens: u64,
    /// Every output token, reasoning included.
    pub output_tokens: u64,
    /// The input tokens read from the provider's cache (a part of `input_tokens`).
    pub cached_input_tokens: u64,
    /// The output tokens spent thinking (a part of `output_tokens`), 0 when not reported.
    pub reasoning_tokens: u64,
}

/// The path (object keys) of the output maximum `request` carries, or the one to write;
/// `None` for embeddings (no output).
pub(crate) fn output_path(request: &Value, api: Api) -> Option<Vec<&'static str>> {
    match api {
        Api::OpenAiChat | Api::OpenAiResponses => Some(openai::output_path(request, api)),
        Api::OpenAiCompletions => Some(vec!["max_tokens"]),
        Api::Anthropic => Some(anthropic::OUTPUT_PATH.to_vec()),
        Api::Gemini => Some(gemini::output_path(request)),
        Api::OllamaChat | Api::OllamaGenerate => Some(ollama::OUTPUT_PATH.to_vec()),
        Api::OpenAiEmbeddings | Api::OllamaEmbed => None,
    }
}

/// Another top-level field `request` sets that `api`'s provider also reads as the output
/// maximum, beside [`output_path`]'s (chat's `max_tokens` beside `max_completion_tokens`): the
/// fit sets it to the same value, so the provider cannot read a larger one. An error naming
/// both when they disagree.
pub(crate) fn other_output_path(request: &Value, api: Api) -> Result<Option<&'static str>> {
    openai::other_output_path(request, api)
}

/// Whether a negative output maximum means "no limit" (Ollama's `-1`/`-2`).
pub(crate) fn negative_output_is_unlimited(api: Api) -> bool {
    matches!(api, Api::OllamaChat | Api::OllamaGenerate)
}

/// Refuses a request whose use admission cannot bound (OpenAI chat's `prediction`); the
/// counting and fitting functions take it, as diagnostics.
pub(crate) fn check_bounded(request: &Value, api: Api) -> Result<()> {
    match api {
        Api::OpenAiChat => openai::check_bounded(request),
        _ => Ok(()),
    }
}

/// How many answers the call asks for (OpenAI chat `n`, Gemini `candidateCount`; legacy
/// completions: `max(n, best_of)` per prompt of its `prompt` list), at least 1: each may
/// produce up to the output maximum.
pub(crate) fn choices(request: &Value, api: Api) -> Result<u64> {
    match api {
        Api::OpenAiChat => openai::choices(request),
        Api::OpenAiCompletions => openai::completion_choices(request),
        Api::Gemini => gemini::choices(request),
        _ => Ok(1),
    }
}

/// The path of the thinking budget (Anthropic `thinking.budget_tokens`, Gemini's
/// `thinkingConfig.thinkingBudget` in its config spelling); `None` where the API has none.
pub(crate) fn thinking_path(request: &Value, api: Api) -> Option<Vec<&'static str>> {
    match api {
        Api::Anthropic => Some(anthropic::THINKING_PATH.to_vec()),
        Api::Gemini => Some(gemini::thinking_path(request)),
        _ => None,
    }
}

/// The finish reasons `response` (a response, or a final stream chunk or event) carries,
/// one per answer.
pub(crate) fn finish_reasons(response: &Value, api: Api) -> Vec<&str> {
    match api {
        Api::OpenAiChat | Api::OpenAiCompletions | Api::OpenAiResponses => {
            openai::finish_reasons(response, api)
        }
        Api::Anthropic => anthropic::finish_reasons(response),
        Api::Gemini => gemini::finish_reasons(response),
        Api::OllamaChat | Api::OllamaGenerate => ollama::finish_reasons(response),
        Api::OpenAiEmbeddings | Api::OllamaEmbed => Vec::new(),
    }
}

/// Whether `reason` is `api`'s finish reason for "stopped at the output maximum" (chat
/// `length`, responses `max_output_tokens`, Anthropic `max_tokens`, Gemini `MAX_TOKENS`,
/// Ollama `length`).
pub fn stopped_at_max(reason: &str, api: Api) -> bool {
    let at_max = match api {
        Api::OpenAiChat | Api::OpenAiCompletions | Api::OllamaChat | Api::OllamaGenerate => {
            "length"
        }
        Api::OpenAiResponses => "max_output_tokens",
        Api::Anthropic => "max_tokens",
        Api::Gemini => return reason.eq_ignore_ascii_case("MAX_TOKENS"),
        Api::OpenAiEmbeddings | Api::OllamaEmbed => return false,
    };
    reason == at_max
}

/// The usage `response` reports (a response, or the stream event that carries the final
/// usage); `None` when it carries none. The one reading of provider usage, for the gateway
/// and the Python adapters alike, so that whatever a provider reports is billable (a bill
/// refused for its numbers would release the call unbilled): a count over 2^53 reads as
/// 2^53, a count that is not a whole number from 0 (negative, fractional, a string) as 0,
/// which the biller takes as unknown (the prompt as counted, the delivered output counted);
/// cached input is at most the input and reasoning at most the output. Each oddity is logged.
pub fn reported_usage(response: &Value, api: Api) -> Option<ReportedUsage> {
    let read = match api {
        Api::OpenAiChat | Api::OpenAiCompletions | Api::OpenAiResponses | Api::OpenAiEmbeddings => {
            openai::usage(response, api)
        }
        Api::Anthropic => anthropic::usage(response),
        Api::Gemini => gemini::usage(response),
        Api::OllamaChat | Api::OllamaGenerate | Api::OllamaEmbed => ollama::usage(response),
    };
    read.map(|u| consistent(u, api))
}

/// The most a reported count is read as: the largest amount a counter keeps exactly.
const MAX_COUNT: u64 = crate::guard::domain::policy::MAX_AMOUNT;

/// `u` with its sums held to [`MAX_COUNT`] and each part held to its whole, logging what
/// had to change.
fn consistent(mut u: ReportedUsage, api: Api) -> ReportedUsage {
    for (name, value) in [
        ("input tokens", &mut u.input_tokens),
        ("output tokens", &mut u.output_tokens),
    ] {
        if *value > MAX_COUNT {
            log::warn!(
                "provider usage: {} reported {value} {name} in all, more than 2^53: billed \
                 as {MAX_COUNT}",
                api.as_str()
            );
            *value = MAX_COUNT;
        }
    }
    if u.cached_input_tokens > u.input_tokens {
        log::warn!(
            "provider usage: {} reported {} cached input tokens of {} input tokens: billed as \
             {} cached",
            api.as_str(),
            u.cached_input_tokens,
            u.input_tokens,
            u.input_tokens
        );
        u.cached_input_tokens = u.input_tokens;
    }
    if u.reasoning_tokens > u.output_tokens {
        log::warn!(
            "provider usage: {} reported {} reasoning tokens of {} output tokens: the output \
             tokens are billed, {} of them recorded as reasoning",
            api.as_str(),
            u.reasoning_tokens,
            u.output_tokens,
            u.output_tokens
        );
        u.reasoning_tokens = u.output_tokens;
    }
    u
}

/// Where [`reported_usage`] looks in a response or stream event: the paths (object keys from
/// the top) it reads, and nothing else. A binding converts only these parts of an SDK object,
/// never the answer itself (an embeddings response's vectors, say).
pub fn usage_paths(api: Api) -> &'static [&'static [&'static str]] {
    match api {
        Api::OpenAiChat | Api::OpenAiCompletions | Api::OpenAiEmbeddings => &[&["usage"]],
        Api::OpenAiResponses => &[&["usage"], &["response", "usage"]],
        Api::Anthropic => &[&["usage"], &["message", "usage"]],
        Api::Gemini => &[&["usageMetadata"], &["usage_metadata"]],
        Api::OllamaChat | Api::OllamaGenerate | Api::OllamaEmbed => {
            &[&["prompt_eval_count"], &["eval_count"]]
        }
    }
}

/// The count at `pointer` as [`count`] reads it; 0 when absent.
fn n(value: &Value, pointer: &str) -> u64 {
    at(value, pointer)
        .and_then(|v| count(v, pointer))
        .unwrap_or(0)
}

/// `value.pointer(pointer)` without its copy of every token (a bill reads four counts).
fn at<'a>(value: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.contains('~') {
        return value.pointer(pointer);
    }
    let tokens = pointer.strip_prefix('/');
    if pointer.is_empty() {
        return Some(value);
    }
    tokens?.split('/').try_fold(value, |v, token| match v {
        Value::Object(map) => map.get(token),
        Value::Array(list) => {
            // As `Value::pointer` reads an index: no sign, no leading zero.
            let plain = !token.starts_with('+') && (!token.starts_with('0') || token.len() == 1);
            list.get(token.parse::<usize>().ok().filter(|_| plain)?)
        }
        _ => None,
    })
}

/// A reported count: `None` for null; a whole number from 0 (an integer, or a float with no
/// fraction) held to [`MAX_COUNT`]; anything else 0, which a biller takes as unknown. What
/// is not a plain count is logged (`what` names the field).
fn count(v: &Value, what: &str) -> Option<u64> {
    if v.is_null() {
        return None;
    }
    let whole = v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| *f >= 0.0 && f.fract() == 0.0)
            .map(|f| {
                if f >= MAX_COUNT as f64 {
                    u64::MAX
                } else {
                    f as u64
                }
            })
    });
    Some(match whole {
        Some(n) if n > MAX_COUNT => {
            log::warn!("provider usage: {what} = {v} is more than 2^53: read as {MAX_COUNT}");
            MAX_COUNT
        }
        Some(n) => n,
        None => {
            log::warn!(
                "provider usage: {what} = {v} is not a count (a whole number from 0): read as \
                 unknown, so the call is billed the prompt as counted and the output delivered"
            );
            0
        }
    })
}

impl Refusal {
    /// The refusal as an HTTP answer in a provider's error shape. A usage limit says when to
    /// come back (`retry-after` for a rate limit) or that retrying will not help
    /// (`x-should-retry: false`); room held by calls in progress says to retry after a
    /// moment (`retry-after`, `x-should-retry: true`); limits that cannot be checked (503) say to retry in a
    /// second; a request the limits can never admit answers 400 or 404.
    pub fn to_http(&self, provider: HttpShape) -> HttpRefusal {
        let kind = RefusalKind::of(self);
        let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
        if self.reason == Reason::HeldByCalls {
            // Calls in progress hold the room and give most of it back as they end: SDK
            // clients wait a moment and retry.
            let seconds = self.retry_after_seconds.unwrap_or(1).max(1);
            headers.push(("retry-after".to_string(), seconds.to_string()));
            headers.push(("x-should-retry".to_string(), "true".to_string()));
        } else if kind == RefusalKind::Limit {
            match self.retry_after_seconds.filter(|_| self.is_rate_limit()) {
                Some(seconds) => {
                    headers.push(("retry-after".to_string(), seconds.max(1).to_string()));
                    // SDKs that honour any Retry-After would hold the request that long.
                    if seconds > MAX_CLIENT_RETRY_WAIT_SECONDS {
                        headers.push(("x-should-retry".to_string(), "false".to_string()));
                    }
                }
                // A limit that lasts until tomorrow, or a call it never admits: tell SDK
                // clients not to retry.
                None => headers.push(("x-should-retry".to_string(), "false".to_string())),
            }
        }
        if kind == RefusalKind::Unavailable {
            // The store may answer again in a moment: a client (or its SDK) retries soon.
            let seconds = self.retry_after_seconds.unwrap_or(1).max(1);
            headers.push(("retry-after".to_string(), seconds.to_string()));
        }
        let body = match provider {
            HttpShape::OpenAi => openai::refusal_body(self, kind),
            HttpShape::Anthropic => anthropic::refusal_body(self, kind),
            HttpShape::Ollama => ollama::refusal_body(self),
            HttpShape::Gemini => gemini::refusal_body(self, kind),
        };
        HttpRefusal {
            status: kind.status(),
            headers,
            body,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// `at` finds what `Value::pointer` finds, for names, indexes, escapes and misses.
    #[test]
    fn at_reads_as_a_json_pointer_does() {
        let v = json!({
            "usage": {"prompt_tokens": 3, "details": {"cached": 1}, "list": [5, {"x": 6}]},
            "a/b": 1, "m~n": 2, "": {"": 7}, "0": 8,
        });
        let pointers = [
            "",
            "/",
            "//",
            "/usage",
            "/usage/prompt_tokens",
            "/usage/details/cached",
            "/usage/list/0",
            "/usage/list/1/x",
            "/usage/list/01",
            "/usage/list/+1",
            "/usage/list/2",
            "/usage/prompt_tokens/x",
            "/a~1b",
            "/m~0n",
            "/0",
            "usage",
            "/missing/x",
        ];
        for p in pointers {
            assert_eq!(super::at(&v, p), v.pointer(p), "{p:?}");
        }
    }
}

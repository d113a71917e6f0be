//! OpenAI's reasoning effort (`reasoning.effort` of the Responses API) fitted to a small
//! output maximum. Reasoning tokens count in `max_output_tokens`: a call whose maximum a usage
//! limit lowered, sent at a high effort, tends to spend it all reasoning and answer nothing
//! (`incomplete`, `max_output_tokens`). So when a limit set the maximum (the fit's
//! `output_capped`), the effort the caller asked for is lowered: below
//! [`MEDIUM_BELOW`] tokens to `low`, below [`HIGH_BELOW`] `high` and `xhigh` to `medium`.
//! Never raised, never written where the caller sent none (a model without reasoning refuses
//! the key), never below `low` (`minimal` and `none` are not accepted by every reasoning
//! model); other keys of `reasoning` (`summary`) are kept.

use serde_json::{json, Value};

use super::api::Api;

/// Output maxima below this get at most the `low` effort.
pub(crate) const MEDIUM_BELOW: u64 = 4096;
/// Output maxima below this get at most the `medium` effort.
pub(crate) const HIGH_BELOW: u64 = 16384;

/// Efforts from least to most (the ones this fit never lowers to come first).
const RANK: [&str; 6] = ["none", "minimal", "low", "medium", "high", "xhigh"];

/// Lowers `reasoning.effort` in `request` for the output maximum `out` a usage limit set
/// (`capped`); answers whether it changed.
pub(crate) fn fit_effort(request: &mut Value, api: Api, out: u64, capped: bool) -> bool {
    if api != Api::OpenAiResponses || !capped {
        return false;
    }
    let Some(asked) = request.pointer("/reasoning/effort").and_then(Value::as_str) else {
        return false;
    };
    let Some(rank) = RANK.iter().position(|e| *e == asked) else {
        return false; // an effort this fit does not know: the provider judges it
    };
    let most = if out < MEDIUM_BELOW {
        "low"
    } else if out < HIGH_BELOW {
        "medium"
    } else {
        return false;
    };
    let cap = RANK.iter().position(|e| *e == most).expect("in RANK");
    if rank <= cap {
        return false;
    }
    request["reasoning"]["effort"] = json!(most);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effort(asked: Value, api: Api, out: u64, capped: bool) -> (Value, bool) {
        let mut request = json!({"model": "o4-mini", "reasoning": asked});
        let changed = fit_effort(&mut request, api, out, capped);
        (request["reasoning"].clone(), changed)
    }

    #[test]
    fn lowered_only_when_a_limit_set_a_small_maximum() {
        let high = json!({"effort": "high", "summary": "auto"});
        let r = Api::OpenAiResponses;
        assert_eq!(
            effort(high.clone(), r, 1000, true),
            (json!({"effort": "low", "summary": "auto"}), true)
        );
        assert_eq!(
            effort(high.clone(), r, 8000, true).0,
            json!({"effort": "medium", "summary": "auto"})
        );
        assert_eq!(effort(high.clone(), r, 20000, true), (high.clone(), false));
        assert_eq!(effort(high.clone(), r, 1000, false), (high.clone(), false));
        assert_eq!(
            effort(high.clone(), Api::OpenAiChat, 1000, true),
            (high, false)
        );
        for kept in ["low", "minimal", "none", "turbo"] {
            let asked = json!({"effort": kept});
            assert_eq!(effort(asked.clone(), r, 10, true), (asked, false));
        }
        let mut none = json!({"model": "gpt-4o"});
        assert!(!fit_effort(&mut none, r, 10, true));
        assert_eq!(none, json!({"model": "gpt-4o"}));
    }
}

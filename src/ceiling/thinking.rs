//! Thinking budgets: kept below the output maximum within each provider's accepted range.

use serde_json::{json, Value};

use super::api::Api;
use super::fields::{field_error, get, read_count, set};
use super::models::ThinkingRange;
use super::providers::thinking_path;
use crate::error::Result;

/// Lowers the thinking budget below the output maximum `out`; returns (budget in force,
/// turned off, changed).
pub(crate) fn fit_thinking(
    request: &mut Value,
    api: Api,
    out: u64,
    range: Option<ThinkingRange>,
) -> Result<(Option<u64>, bool, bool)> {
    let Some(range) = range else {
        return Ok((None, false, false));
    };
    let limit = out.saturating_sub(1);
    match api {
        Api::Anthropic => {
            let enabled =
                request.pointer("/thinking/type").and_then(Value::as_str) == Some("enabled");
            if !enabled {
                return Ok((None, false, false));
            }
            let path = thinking_path(request, api).expect("Anthropic has a thinking budget");
            let Some(budget) = read_count(request, &path, false)? else {
                return Err(field_error(
                    "request.thinking.budget_tokens",
                    &Value::Null,
                    "is required when thinking is enabled; an integer ≥ 1024",
                ));
            };
            if budget <= limit {
                return Ok((Some(budget), false, false));
            }
            if limit >= range.min {
                set(request, &path, json!(limit));
                Ok((Some(limit), false, true))
            } else if range.can_disable {
                set(request, &["thinking"], json!({"type": "disabled"}));
                Ok((None, true, true))
            } else {
                Ok((Some(budget), false, false))
            }
        }
        Api::Gemini => {
            let path = thinking_path(request, api).expect("Gemini has a thinking budget");
            let Some(raw) = get(request, &path) else {
                return Ok((None, false, false));
            };
            let budget = match raw.as_i64() {
                Some(0) => return Ok((None, false, false)),
                Some(-1) if range.max == u64::MAX => return Ok((None, false, false)),
                Some(-1) => range.max,
                Some(n) if n > 0 => n as u64,
                _ => {
                    return Err(field_error(
                        &format!("request.{}", path.join(".")),
                        raw,
                        "must be an integer: -1 (dynamic), 0 (off) or a token budget",
                    ))
                }
            };
            if budget <= limit {
                return Ok((Some(budget), false, false));
            }
            if limit >= range.min {
                set(request, &path, json!(limit));
                Ok((Some(limit), false, true))
            } else if range.can_disable {
                set(request, &path, json!(0));
                Ok((None, true, true))
            } else {
                let lowest = range.min.min(budget);
                set(request, &path, json!(lowest));
                Ok((Some(lowest), false, lowest != budget))
            }
        }
        _ => Ok((None, false, false)),
    }
}

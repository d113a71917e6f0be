//! Where each API keeps its output maximum and thinking budget, read and written in place.

use serde_json::{Map, Value};

use super::api::Api;
use super::prompt::field_error;
use crate::error::Result;

/// Gemini's config object and its spelling: REST `generationConfig` (camelCase), or
/// `generation_config` / the SDK's `config` (snake_case).
const GEMINI_CONTAINERS: [(&str, bool); 3] = [
    ("generationConfig", true),
    ("generation_config", false),
    ("config", false),
];

fn gemini_container(request: &Value) -> (&'static str, bool) {
    GEMINI_CONTAINERS
        .iter()
        .copied()
        .find(|(k, _)| request.get(*k).is_some_and(Value::is_object))
        .unwrap_or(GEMINI_CONTAINERS[0])
}

/// The path (object keys) of the output maximum the request carries, or the one to write.
pub(crate) fn output_path(request: &Value, api: Api) -> Option<Vec<&'static str>> {
    Some(match api {
        Api::OpenAiChat => {
            let legacy = request.get("max_tokens").is_some_and(|v| !v.is_null())
                && request
                    .get("max_completion_tokens")
                    .is_none_or(Value::is_null);
            vec![if legacy {
                "max_tokens"
            } else {
                "max_completion_tokens"
            }]
        }
        Api::OpenAiResponses => vec!["max_output_tokens"],
        Api::Anthropic => vec!["max_tokens"],
        Api::Gemini => {
            let (container, camel) = gemini_container(request);
            vec![
                container,
                if camel {
                    "maxOutputTokens"
                } else {
                    "max_output_tokens"
                },
            ]
        }
        Api::OllamaChat | Api::OllamaGenerate => vec!["options", "num_predict"],
        Api::OpenAiEmbeddings | Api::OllamaEmbed => return None,
    })
}

/// How many answers the call asks for (OpenAI chat `n`, Gemini `candidateCount`): each may
/// produce up to the output maximum.
pub(crate) fn choices(request: &Value, api: Api) -> Result<u64> {
    let path: Vec<&str> = match api {
        Api::OpenAiChat => vec!["n"],
        Api::Gemini => {
            let (container, camel) = gemini_container(request);
            vec![
                container,
                if camel {
                    "candidateCount"
                } else {
                    "candidate_count"
                },
            ]
        }
        _ => return Ok(1),
    };
    Ok(read_count(request, &path, false)?.unwrap_or(1).max(1))
}

/// The Gemini thinking budget's path.
pub(crate) fn gemini_thinking_path(request: &Value) -> Vec<&'static str> {
    let (container, camel) = gemini_container(request);
    if camel {
        vec![container, "thinkingConfig", "thinkingBudget"]
    } else {
        vec![container, "thinking_config", "thinking_budget"]
    }
}

pub(crate) fn get<'a>(request: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(request, |v, k| v.get(*k))
        .filter(|v| !v.is_null())
}

pub(crate) fn set(request: &mut Value, path: &[&str], value: Value) {
    let mut at = request;
    for key in &path[..path.len() - 1] {
        let obj = at
            .as_object_mut()
            .expect("request objects are checked before writing");
        let entry = obj
            .entry(key.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        at = entry;
    }
    if let Some(obj) = at.as_object_mut() {
        obj.insert(path[path.len() - 1].to_string(), value);
    }
}

/// Reads a count field: a non-negative integer, or (`allow_negative`, Ollama's `-1`/`-2`
/// meaning "no limit") a negative one read as absent.
pub(crate) fn read_count(
    request: &Value,
    path: &[&str],
    allow_negative: bool,
) -> Result<Option<u64>> {
    let Some(v) = get(request, path) else {
        return Ok(None);
    };
    if let Some(n) = v.as_u64() {
        return Ok(Some(n));
    }
    if allow_negative && v.as_i64().is_some_and(|n| n < 0) {
        return Ok(None);
    }
    if let Some(f) = v.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0) {
        return Ok(Some(f as u64));
    }
    Err(field_error(
        &format!("request.{}", path.join(".")),
        v,
        if allow_negative {
            "must be an integer (negative for no limit)"
        } else {
            "must be a non-negative integer"
        },
    ))
}

//! Counting a request's prompt as it will be sent, per API shape.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::api::Api;
use super::count::{Counter, MESSAGE_FRAMING};
use super::fields::field_error;
use super::image::{anthropic_image_tokens, data_dimensions, data_len};
use super::message_cache::Site;
use super::models::tokenizer_for;
use super::prompt_gemini;
use super::prompt_openai;
use super::tokenizer::Encoding;
use crate::error::{Error, Result};
use crate::guard::domain::policy::ModelSpec;

/// A prompt's token count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptCount {
    /// Tokens the provider will count as input.
    pub tokens: u64,
    /// True when the count is exact: the model's own encoding, and only parts whose framing
    /// the provider documents. Otherwise an estimate (the ceiling keeps `margin` free).
    pub exact: bool,
    /// The encoding the text was counted with.
    pub encoding: Encoding,
}

/// How many prompts [`count_request`] counted in this process: a diagnostic that shows a
/// call's prompt is counted once.
static PROMPT_COUNTS: AtomicU64 = AtomicU64::new(0);

/// The number of prompt countings since the process started (every [`count_request`] call,
/// one per candidate of a routing group). A diagnostic: monotonic, never reset.
pub fn prompt_counts() -> u64 {
    PROMPT_COUNTS.load(Ordering::Relaxed)
}

/// Counts the prompt of `request` as `api` sends it, for `model` (a model id; the policy's
/// `spec` overrides the built-in registry's encoding and exactness). Errors name the field of
/// the request that has the wrong shape.
pub fn count_request(
    request: &Value,
    api: Api,
    model: Option<&str>,
    spec: Option<&ModelSpec>,
) -> Result<PromptCount> {
    PROMPT_COUNTS.fetch_add(1, Ordering::Relaxed);
    if !request.is_object() {
        return Err(field_error(
            "request",
            request,
            "must be a JSON object (a dict)",
        ));
    }
    let model = model.map(str::to_string).or_else(|| {
        request
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    let tokenizer = tokenizer_for(model.as_deref(), spec)?;
    let mut c = Counter {
        encoding: tokenizer.encoding,
        tokens: 0,
        exact: tokenizer.exact,
        model,
    };
    match api {
        Api::OpenAiChat => prompt_openai::chat(&mut c, request)?,
        Api::OpenAiCompletions => completions(&mut c, request)?,
        Api::OpenAiResponses => prompt_openai::responses(&mut c, request)?,
        Api::OpenAiEmbeddings => embeddings(&mut c, request, "input")?,
        Api::Anthropic => anthropic(&mut c, request)?,
        Api::Gemini => prompt_gemini::count(&mut c, request)?,
        Api::OllamaChat => ollama_chat(&mut c, request)?,
        Api::OllamaGenerate => ollama_generate(&mut c, request)?,
        Api::OllamaEmbed => {
            let field = if request.get("input").is_some() {
                "input"
            } else {
                "prompt"
            };
            embeddings(&mut c, request, field)?
        }
    }
    Ok(PromptCount {
        tokens: c.tokens,
        exact: c.exact,
        encoding: c.encoding,
    })
}

/// Embeddings input: a string, a list of strings, a list of token ids, or a list of lists of
/// token ids. No framing.
fn embeddings(c: &mut Counter, request: &Value, field: &str) -> Result<()> {
    let path = format!("request.{field}");
    let accepted = "must be a string, a list of strings, or a list of token-id lists";
    let input = request
        .get(field)
        .ok_or_else(|| Error::invalid(&path, "", format!("is required; {accepted}")))?;
    match input {
        Value::String(s) => c.text(s),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => c.text(s),
                    Value::Number(_) => c.add(1),
                    Value::Array(ids) if ids.iter().all(Value::is_number) => {
                        c.add(ids.len() as u64)
                    }
                    v => return Err(field_error(&format!("{path}[{i}]"), v, accepted)),
                }
            }
        }
        v => return Err(field_error(&path, v, accepted)),
    }
    Ok(())
}

/// Legacy completions: `prompt` (a string, a list of strings, a list of token ids or a list
/// of token-id lists: every prompt is sent as it is, no framing) and `suffix`.
fn completions(c: &mut Counter, request: &Value) -> Result<()> {
    let accepted = "must be a string, a list of strings, a list of token ids, or a list of \
                    token-id lists";
    // A list of token ids: one token each.
    let ids = |v: &Value| match v {
        Value::Array(ids) if ids.iter().all(Value::is_u64) => Some(ids.len() as u64),
        _ => None,
    };
    match request.get("prompt") {
        None => {
            return Err(Error::invalid(
                "request.prompt",
                "",
                format!("is required; {accepted}"),
            ))
        }
        Some(Value::String(s)) => c.text(s),
        Some(v) if ids(v).is_some() => c.add(ids(v).unwrap_or(0)),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match (item, ids(item)) {
                    (Value::String(s), _) => c.text(s),
                    (_, Some(n)) => c.add(n),
                    (v, None) => {
                        return Err(field_error(&format!("request.prompt[{i}]"), v, accepted))
                    }
                }
            }
        }
        Some(v) => return Err(field_error("request.prompt", v, accepted)),
    }
    match request.get("suffix") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => c.text(s),
        Some(v) => return Err(field_error("request.suffix", v, "must be a string")),
    }
    Ok(())
}

fn messages<'a>(request: &'a Value, field: &str) -> Result<&'a [Value]> {
    match request.get(field) {
        Some(Value::Array(items)) => Ok(items),
        Some(v) => Err(field_error(
            &format!("request.{field}"),
            v,
            "must be a list of messages",
        )),
        None => Err(Error::invalid(
            &format!("request.{field}"),
            "",
            "is required; a list of messages",
        )),
    }
}

/// Anthropic messages: `system`, `messages` (string or content blocks), `tools`. Claude's
/// tokenizer is not public, so this is an estimate unless the policy says otherwise.
fn anthropic(c: &mut Counter, request: &Value) -> Result<()> {
    match request.get("system") {
        Some(Value::String(s)) => c.text(s),
        Some(Value::Array(blocks)) => anthropic_blocks(c, blocks),
        _ => {}
    }
    for m in messages(request, "messages")? {
        c.message(Site::Anthropic, m, |c| {
            c.add(MESSAGE_FRAMING);
            match m.get("content") {
                Some(Value::String(s)) => c.text(s),
                Some(Value::Array(blocks)) => anthropic_blocks(c, blocks),
                _ => {}
            }
        });
    }
    c.add(MESSAGE_FRAMING);
    if let Some(Value::Array(tools)) = request.get("tools") {
        if !tools.is_empty() {
            // The tool-use system prompt Anthropic adds (346 tokens on current models).
            c.estimate(346);
        }
        for t in tools {
            for key in ["name", "description"] {
                if let Some(Value::String(s)) = t.get(key) {
                    c.text(s);
                }
            }
            if let Some(schema) = t.get("input_schema") {
                c.json(schema);
            }
        }
    }
    c.exact = false;
    Ok(())
}

fn anthropic_blocks(c: &mut Counter, blocks: &[Value]) {
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => c.text(b.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("thinking") => c.text(b.get("thinking").and_then(Value::as_str).unwrap_or("")),
            Some("image") => {
                let data = b.pointer("/source/data").and_then(Value::as_str);
                c.estimate(anthropic_image_tokens(data.and_then(data_dimensions)));
            }
            Some("document") => match b.pointer("/source/data") {
                Some(Value::String(d)) if b.pointer("/source/type") == Some(&"text".into()) => {
                    c.text(d)
                }
                // A PDF: about its text plus a page image per page; bytes / 4 as the estimate.
                Some(Value::String(d)) => c.estimate(data_len(d) / 4),
                _ => c.estimate(1600),
            },
            Some("tool_use") => {
                c.text(b.get("name").and_then(Value::as_str).unwrap_or(""));
                c.json(b.get("input").unwrap_or(&Value::Null));
            }
            Some("tool_result") => match b.get("content") {
                Some(Value::String(s)) => c.text(s),
                Some(Value::Array(inner)) => anthropic_blocks(c, inner),
                _ => {}
            },
            _ => c.json(b),
        }
    }
}

/// Ollama images: a model-dependent number of tokens; 768 as the estimate.
const OLLAMA_IMAGE: u64 = 768;

fn ollama_message(c: &mut Counter, m: &Value) {
    c.add(MESSAGE_FRAMING);
    for key in ["role", "content", "thinking"] {
        if let Some(Value::String(s)) = m.get(key) {
            c.text(s);
        }
    }
    if let Some(Value::Array(images)) = m.get("images") {
        c.estimate(OLLAMA_IMAGE * images.len() as u64);
    }
    if let Some(calls) = m.get("tool_calls") {
        c.json(calls);
    }
}

fn ollama_chat(c: &mut Counter, request: &Value) -> Result<()> {
    for m in messages(request, "messages")? {
        c.message(Site::OllamaChat, m, |c| ollama_message(c, m));
    }
    c.add(MESSAGE_FRAMING);
    if let Some(tools) = request.get("tools") {
        c.json(tools);
    }
    c.exact = false;
    Ok(())
}

fn ollama_generate(c: &mut Counter, request: &Value) -> Result<()> {
    match request.get("prompt") {
        Some(Value::String(s)) => c.text(s),
        Some(v) => return Err(field_error("request.prompt", v, "must be a string")),
        None => {}
    }
    for key in ["system", "suffix"] {
        if let Some(Value::String(s)) = request.get(key) {
            c.text(s);
        }
    }
    if let Some(Value::Array(images)) = request.get("images") {
        c.estimate(OLLAMA_IMAGE * images.len() as u64);
    }
    // The model's template wraps the prompt unless `raw` is set.
    if request.get("raw") != Some(&Value::Bool(true)) {
        c.add(2 * MESSAGE_FRAMING);
    }
    c.exact = false;
    Ok(())
}

/// Counts the prompt for a routing group: with each candidate's encoding, taking the largest
/// count (exact only when every candidate's count is). `candidates` are model ids with their
/// policy entries; an empty group is an error naming `model`.
pub fn count_request_for_group(
    request: &Value,
    api: Api,
    candidates: &[(&str, Option<&ModelSpec>)],
) -> Result<PromptCount> {
    let mut largest: Option<PromptCount> = None;
    for (model, spec) in candidates {
        let c = count_request(request, api, Some(model), *spec)?;
        largest = Some(match largest {
            None => c,
            Some(l) => PromptCount {
                exact: l.exact && c.exact,
                ..if c.tokens > l.tokens { c } else { l }
            },
        });
    }
    largest.ok_or_else(|| Error::invalid("model", "[]", "must name at least one candidate model"))
}

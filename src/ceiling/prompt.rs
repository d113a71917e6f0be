//! Counting a request's prompt as it will be sent, per API shape.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::api::Api;
use super::count::{Counter, MESSAGE_FRAMING};
use super::fields::{field_error, messages};
use super::image::{anthropic_image_tokens, data_dimensions, data_len};
use super::message_cache::Site;
use super::models::tokenizer_for;
use super::prompt_gemini;
use super::prompt_ollama;
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
        Api::OllamaChat => prompt_ollama::chat(&mut c, request)?,
        Api::OllamaGenerate => prompt_ollama::generate(&mut c, request)?,
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

/// Anthropic messages: `system`, `messages` (string or content blocks), `tools`,
/// `mcp_servers` (the servers' tool definitions are added to the prompt by Anthropic: their
/// entries are counted as JSON, an estimate of at least what was sent). Claude's tokenizer
/// is not public, so this is an estimate unless the policy says otherwise.
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
    match request.get("mcp_servers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(servers)) => {
            for server in servers {
                c.json(server);
            }
        }
        Some(v) => {
            return Err(field_error(
                "request.mcp_servers",
                v,
                "must be a list of MCP servers",
            ))
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

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::{count_request, Api};

    fn tokens(request: &Value, api: Api) -> u64 {
        count_request(request, api, None, None).unwrap().tokens
    }

    /// What adding `key: value` to `request` adds to its count.
    fn added(request: Value, api: Api, pointer: &str, value: Value) -> u64 {
        let mut with = request.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let at = if parent.is_empty() {
            &mut with
        } else {
            with.pointer_mut(parent).unwrap()
        };
        at.as_object_mut().unwrap().insert(key.into(), value);
        tokens(&with, api) - tokens(&request, api)
    }

    /// Some 2,000 tokens of text.
    fn big() -> String {
        "lorem ipsum dolor sit amet ".repeat(400)
    }

    #[test]
    fn ollama_generate_counts_context_ids_and_the_template() {
        let request = json!({"model": "llama3.2", "prompt": "hi"});
        let ids: Vec<u64> = (0..3000).collect();
        let api = Api::OllamaGenerate;
        assert_eq!(added(request.clone(), api, "/context", json!(ids)), 3000);
        let template = format!("{}{{{{ .Prompt }}}}", big());
        assert!(added(request.clone(), api, "/template", json!(template)) >= 2000);
        let refused = json!({"model": "llama3.2", "prompt": "hi", "context": "1 2 3"});
        let e = count_request(&refused, api, None, None).unwrap_err();
        assert!(e.to_string().contains("request.context"), "{e}");
    }

    #[test]
    fn responses_count_the_structured_output_schema() {
        let request = json!({"model": "gpt-4o", "input": "hi", "text": {}});
        let format = json!({"type": "json_schema", "name": "x",
                            "schema": {"type": "object", "description": big()}});
        let n = added(request, Api::OpenAiResponses, "/text/format", format);
        assert!(n >= 2000, "{n}");
    }

    #[test]
    fn anthropic_counts_its_mcp_servers() {
        let request = json!({"model": "claude-sonnet-4", "max_tokens": 10,
                             "messages": [{"role": "user", "content": "hi"}]});
        let servers = json!([{"type": "url", "url": "https://mcp.example.com/sse",
                              "name": big()}]);
        let n = added(request, Api::Anthropic, "/mcp_servers", servers);
        assert!(n >= 2000, "{n}");
    }
}

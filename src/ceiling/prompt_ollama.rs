//! Ollama prompt counting: chat messages and generate's prompt, system, suffix, template and
//! context, as estimates (a model's template and tokenizer are its own).

use serde_json::Value;

use super::count::{Counter, MESSAGE_FRAMING};
use super::fields::{field_error, messages};
use super::message_cache::Site;
use crate::error::Result;

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

pub(super) fn chat(c: &mut Counter, request: &Value) -> Result<()> {
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

/// Ollama generate: `prompt`, `system`, `suffix`, `template` (the caller's own template,
/// sent with the prompt), `context` (the token ids of an earlier exchange, fed to the model
/// before the prompt: one token each), `images`.
pub(super) fn generate(c: &mut Counter, request: &Value) -> Result<()> {
    match request.get("prompt") {
        Some(Value::String(s)) => c.text(s),
        Some(v) => return Err(field_error("request.prompt", v, "must be a string")),
        None => {}
    }
    for key in ["system", "suffix", "template"] {
        match request.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => c.text(s),
            Some(v) => {
                return Err(field_error(
                    &format!("request.{key}"),
                    v,
                    "must be a string",
                ))
            }
        }
    }
    match request.get("context") {
        None | Some(Value::Null) => {}
        Some(Value::Array(ids)) if ids.iter().all(Value::is_number) => c.add(ids.len() as u64),
        Some(v) => {
            return Err(field_error(
                "request.context",
                v,
                "must be a list of token ids",
            ))
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

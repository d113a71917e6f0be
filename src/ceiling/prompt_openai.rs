//! OpenAI prompt counting: chat completions as the OpenAI cookbook documents it (per-message
//! framing, names, tool definitions), responses as an estimate with the same framing.

use serde_json::{Map, Value};

use super::count::Counter;
use super::fields::field_error;
use super::image::{
    data_dimensions, data_len, openai_image_rates, openai_tile_tokens, openai_tile_worst,
};
use super::message_cache::Site;
use super::tokenizer::Encoding;
use crate::error::{Error, Result};

/// Every message is framed `<|start|>{role/name}\n{content}<|end|>\n`: 3 tokens.
const TOKENS_PER_MESSAGE: u64 = 3;
/// A `name` costs one token on top of its text.
const TOKENS_PER_NAME: u64 = 1;
/// Every reply is primed with `<|start|>assistant<|message|>`.
const REPLY_PRIMING: u64 = 3;

/// Chat completions: `messages`, `tools` (and legacy `functions`), `response_format`.
pub(crate) fn chat(c: &mut Counter, request: &Value) -> Result<()> {
    let messages = match request.get("messages") {
        Some(Value::Array(m)) => m,
        Some(v) => {
            return Err(field_error(
                "request.messages",
                v,
                "must be a list of messages",
            ))
        }
        None => {
            return Err(Error::invalid(
                "request.messages",
                "",
                "is required; a list of {role, content} messages",
            ))
        }
    };
    for (i, m) in messages.iter().enumerate() {
        let Value::Object(fields) = m else {
            return Err(field_error(
                &format!("request.messages[{i}]"),
                m,
                "must be an object with role and content",
            ));
        };
        c.message(Site::OpenAiChat, m, |c| {
            c.add(TOKENS_PER_MESSAGE);
            message_fields(c, fields);
        });
    }
    c.add(REPLY_PRIMING);
    let tools: Vec<&Value> = match (request.get("tools"), request.get("functions")) {
        (Some(Value::Array(t)), _) => t.iter().map(|t| t.get("function").unwrap_or(t)).collect(),
        (None, Some(Value::Array(f))) => f.iter().collect(),
        _ => Vec::new(),
    };
    function_definitions(c, &tools);
    if let Some(format) = request.get("response_format") {
        if format.get("type").and_then(Value::as_str) == Some("json_schema") {
            c.json(format.get("json_schema").unwrap_or(&Value::Null));
        }
    }
    Ok(())
}

fn message_fields(c: &mut Counter, fields: &Map<String, Value>) {
    for (key, value) in fields {
        match (key.as_str(), value) {
            (_, Value::String(s)) => {
                c.text(s);
                if key == "name" {
                    c.add(TOKENS_PER_NAME);
                }
            }
            ("content", Value::Array(parts)) => content_parts(c, parts),
            ("tool_calls", Value::Array(calls)) => {
                for call in calls {
                    let f = call.get("function").unwrap_or(call);
                    function_call(c, f);
                }
            }
            ("function_call", f) => function_call(c, f),
            (_, Value::Null) => {}
            (_, other) => c.json(other),
        }
    }
}

fn function_call(c: &mut Counter, f: &Value) {
    // Tool-call framing is not documented: name + arguments + 3 as the estimate.
    let name = f.get("name").and_then(Value::as_str).unwrap_or("");
    let args = f.get("arguments").and_then(Value::as_str).unwrap_or("");
    let n = c.encoding.count(name) + c.encoding.count(args) + 3;
    c.estimate(n);
}

/// Content parts of chat completions and responses.
fn content_parts(c: &mut Counter, parts: &[Value]) {
    for p in parts {
        let kind = p.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "text" | "input_text" | "output_text" | "refusal" => {
                let key = if kind == "refusal" { "refusal" } else { "text" };
                c.text(p.get(key).and_then(Value::as_str).unwrap_or(""));
            }
            "image_url" | "input_image" => {
                let (url, detail) = match p.get("image_url") {
                    Some(Value::Object(o)) => (
                        o.get("url").and_then(Value::as_str),
                        o.get("detail").and_then(Value::as_str),
                    ),
                    Some(Value::String(s)) => {
                        (Some(s.as_str()), p.get("detail").and_then(Value::as_str))
                    }
                    _ => (None, p.get("detail").and_then(Value::as_str)),
                };
                image(c, url, detail);
            }
            "input_audio" => {
                // About 10 tokens a second; ~1 token a kilobyte of encoded audio as the estimate.
                let data = p
                    .pointer("/input_audio/data")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                c.estimate(data_len(data) / 1000 + 1);
            }
            "file" | "input_file" => {
                let data = p
                    .pointer("/file/file_data")
                    .or_else(|| p.get("file_data"))
                    .and_then(Value::as_str);
                c.estimate(data.map_or(1000, |d| data_len(d) / 4));
            }
            _ => c.json(p),
        }
    }
}

fn image(c: &mut Counter, url: Option<&str>, detail: Option<&str>) {
    let (base, tile, documented) = openai_image_rates(c.model.as_deref());
    let low = detail == Some("low");
    let dims = url
        .filter(|u| u.starts_with("data:"))
        .and_then(data_dimensions);
    match dims {
        Some((w, h)) if documented => c.add(openai_tile_tokens(w, h, low, base, tile)),
        Some((w, h)) => c.estimate(openai_tile_tokens(w, h, low, base, tile)),
        None if low && documented => c.add(base),
        None => c.estimate(if low {
            base
        } else {
            openai_tile_worst(base, tile)
        }),
    }
}

/// Function definitions by the cookbook's rule: per function 7 (o200k_base) or 10 (cl100k_base)
/// plus `name:description`; per property list 3, per property 3 plus `name:type:description`;
/// an enum −3 plus 3 and its text per item; 12 once at the end. A schema outside that flat
/// shape is counted as its JSON text and marks the count an estimate.
pub(crate) fn function_definitions(c: &mut Counter, functions: &[&Value]) {
    if functions.is_empty() {
        return;
    }
    let func_init: i64 = match c.encoding {
        Encoding::O200kBase => 7,
        _ => 10,
    };
    let (prop_init, prop_key, enum_init, enum_item, func_end) = (3i64, 3i64, -3i64, 3i64, 12i64);
    let mut total: i64 = 0;
    let mut documented = true;
    for f in functions {
        total += func_init;
        let name = f.get("name").and_then(Value::as_str).unwrap_or("");
        let desc = match f.get("description") {
            Some(Value::String(d)) => d.as_str(),
            _ => {
                documented = false;
                ""
            }
        };
        let desc = desc.strip_suffix('.').unwrap_or(desc);
        total += c.encoding.count(&format!("{name}:{desc}")) as i64;
        let Some(params) = f.get("parameters") else {
            continue;
        };
        let props = params.get("properties").and_then(Value::as_object);
        let extra_keys = params.as_object().is_some_and(|o| {
            o.keys()
                .any(|k| !matches!(k.as_str(), "type" | "properties" | "required"))
        });
        if extra_keys {
            documented = false;
            c.json(params);
            continue;
        }
        let Some(props) = props.filter(|p| !p.is_empty()) else {
            continue;
        };
        total += prop_init;
        for (key, prop) in props {
            total += prop_key;
            let flat = prop.as_object().is_some_and(|o| {
                o.keys()
                    .all(|k| matches!(k.as_str(), "type" | "description" | "enum"))
                    && o.get("type").is_some_and(Value::is_string)
            });
            if !flat {
                documented = false;
                total += c.encoding.count(&format!("{key}:{prop}")) as i64;
                continue;
            }
            if let Some(Value::Array(items)) = prop.get("enum") {
                total += enum_init;
                for item in items {
                    total += enum_item;
                    match item {
                        Value::String(s) => total += c.encoding.count(s) as i64,
                        other => total += c.encoding.count(&other.to_string()) as i64,
                    }
                }
            }
            let ptype = prop.get("type").and_then(Value::as_str).unwrap_or("");
            let pdesc = prop
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("");
            let pdesc = pdesc.strip_suffix('.').unwrap_or(pdesc);
            total += c.encoding.count(&format!("{key}:{ptype}:{pdesc}")) as i64;
        }
    }
    total += func_end;
    c.add(total.max(0) as u64);
    if !documented {
        c.exact = false;
    }
}

/// Responses: `instructions`, `input` (a string or a list of items), `tools`, and the
/// structured output's schema (`text.format`, a `json_schema`: its name, description and
/// schema, as chat's `response_format`). OpenAI does not document its framing, so the chat
/// framing is used and the count is an estimate.
pub(crate) fn responses(c: &mut Counter, request: &Value) -> Result<()> {
    if let Some(Value::String(s)) = request.get("instructions") {
        c.add(TOKENS_PER_MESSAGE + 1);
        c.text(s);
    }
    match request.get("input") {
        Some(Value::String(s)) => {
            c.add(TOKENS_PER_MESSAGE + 1);
            c.text(s);
        }
        Some(Value::Array(items)) => {
            for item in items {
                c.message(Site::OpenAiResponses, item, |c| input_item(c, item));
            }
        }
        Some(v) => {
            return Err(field_error(
                "request.input",
                v,
                "must be a string or a list of input items",
            ))
        }
        None => {
            return Err(Error::invalid(
                "request.input",
                "",
                "is required; a string or a list of input items",
            ))
        }
    }
    c.add(REPLY_PRIMING);
    if let Some(Value::Array(tools)) = request.get("tools") {
        let functions: Vec<&Value> = tools
            .iter()
            .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"))
            .collect();
        function_definitions(c, &functions);
        for t in tools
            .iter()
            .filter(|t| t.get("type").and_then(Value::as_str) != Some("function"))
        {
            c.json(t);
        }
    }
    if let Some(format) = request.pointer("/text/format") {
        if format.get("type").and_then(Value::as_str) == Some("json_schema") {
            for key in ["name", "description", "schema"] {
                if let Some(v) = format.get(key) {
                    c.json(v);
                }
            }
        }
    }
    c.exact = false;
    Ok(())
}

/// One input item of a responses request, with its framing.
fn input_item(c: &mut Counter, item: &Value) {
    c.add(TOKENS_PER_MESSAGE);
    match item.get("type").and_then(Value::as_str) {
        Some("function_call") => function_call(c, item),
        Some("function_call_output") => c.json(item.get("output").unwrap_or(&Value::Null)),
        Some("message") | None => {
            if let Some(Value::String(r)) = item.get("role") {
                c.text(r);
            }
            match item.get("content") {
                Some(Value::String(s)) => c.text(s),
                Some(Value::Array(parts)) => content_parts(c, parts),
                _ => {}
            }
        }
        Some(_) => c.json(item),
    }
}

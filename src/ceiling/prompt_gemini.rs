//! Counting a Gemini `generateContent` prompt: the REST body (camelCase) or the SDK's
//! arguments (snake_case, with the system instruction and tools in its `config`).

use serde_json::Value;

use super::count::{Counter, MESSAGE_FRAMING};
use super::fields::field_error;
use super::image::{data_dimensions, data_len, gemini_image_tokens};
use super::message_cache::Site;
use crate::error::{Error, Result};

/// Gemini `generateContent`: `systemInstruction`, `contents`, `tools` (camelCase or
/// snake_case; the system instruction and tools at the top, as REST sends them, or in the
/// SDK's `config`). An estimate unless the policy says otherwise.
pub(super) fn count(c: &mut Counter, request: &Value) -> Result<()> {
    let config = request.get("config").filter(|v| v.is_object());
    let get = |a: &str, b: &str| {
        request
            .get(a)
            .or_else(|| request.get(b))
            .or_else(|| config.and_then(|c| c.get(a).or_else(|| c.get(b))))
    };
    if let Some(sys) = get("systemInstruction", "system_instruction") {
        gemini_content(c, sys);
    }
    let contents = request.get("contents");
    // The SDK also takes one content (or one part) where REST wants a list.
    let one = contents.filter(|v| v.is_object()).map(std::slice::from_ref);
    match contents {
        Some(Value::Array(_)) | Some(Value::Object(_)) => {
            let items = one.or(contents.and_then(Value::as_array).map(Vec::as_slice));
            for item in items.unwrap_or_default() {
                c.message(Site::Gemini, item, |c| {
                    c.add(MESSAGE_FRAMING);
                    gemini_content(c, item);
                });
            }
        }
        Some(Value::String(s)) => c.text(s),
        Some(v) => {
            return Err(field_error(
                "request.contents",
                v,
                "must be a list of contents (or one content, or text)",
            ))
        }
        None => {
            return Err(Error::invalid(
                "request.contents",
                "",
                "is required; a list of {role, parts}",
            ))
        }
    }
    if let Some(tools) = get("tools", "tools") {
        c.json(tools);
    }
    c.exact = false;
    Ok(())
}

/// A content: `{role, parts}`, text, or (the SDK takes one where a content goes) one part.
fn gemini_content(c: &mut Counter, content: &Value) {
    let parts = match content {
        Value::String(s) => return c.text(s),
        Value::Object(o) if !o.contains_key("parts") => std::slice::from_ref(content),
        Value::Object(_) => match content.get("parts") {
            Some(Value::Array(parts)) => parts.as_slice(),
            _ => return,
        },
        _ => return c.json(content),
    };
    for p in parts {
        if let Some(Value::String(t)) = p.get("text") {
            c.text(t);
        } else if let Some(d) = p.get("inlineData").or_else(|| p.get("inline_data")) {
            let mime = d
                .get("mimeType")
                .or_else(|| d.get("mime_type"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let data = d.get("data").and_then(Value::as_str).unwrap_or("");
            if mime.starts_with("image/") {
                c.estimate(gemini_image_tokens(data_dimensions(data)));
            } else {
                c.estimate(data_len(data) / 4);
            }
        } else if p.get("fileData").or_else(|| p.get("file_data")).is_some() {
            c.estimate(gemini_image_tokens(None));
        } else {
            c.json(p);
        }
    }
}

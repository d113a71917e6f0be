//! Whether an answer stopped at the output maximum the ceiling set.

use serde_json::Value;

use super::api::Api;
use super::fit::FitResult;

/// Whether `response` stopped at an output maximum the ceiling set: its finish reason says
/// the maximum was reached (chat `length`, responses `max_output_tokens`, Anthropic
/// `max_tokens`, Gemini `MAX_TOKENS`, Ollama `length`; a final streaming chunk or event works
/// too) and `fit` capped the output.
pub fn usage_capped(response: &Value, fit: &FitResult, api: Api) -> bool {
    if !fit.output_capped {
        return false;
    }
    let s = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    match api {
        Api::OpenAiChat => response
            .get("choices")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| s(c.get("finish_reason")).as_deref() == Some("length"))
            }),
        // A final response, or a streaming `response.incomplete` event carrying it.
        Api::OpenAiResponses => [
            "/incomplete_details/reason",
            "/response/incomplete_details/reason",
        ]
        .iter()
        .any(|p| s(response.pointer(p)).as_deref() == Some("max_output_tokens")),
        // A message, or a streaming `message_delta` event.
        Api::Anthropic => ["/stop_reason", "/delta/stop_reason"]
            .iter()
            .any(|p| s(response.pointer(p)).as_deref() == Some("max_tokens")),
        Api::Gemini => response
            .get("candidates")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter().any(|c| {
                    let r = s(c.get("finishReason").or_else(|| c.get("finish_reason")));
                    r.as_deref() == Some("MAX_TOKENS")
                })
            }),
        Api::OllamaChat | Api::OllamaGenerate => {
            s(response.get("done_reason")).as_deref() == Some("length")
        }
        Api::OpenAiEmbeddings | Api::OllamaEmbed => false,
    }
}

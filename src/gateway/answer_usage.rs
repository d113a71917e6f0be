//! A plain answer read for its bill: of an answer whose reported usage sits under a few
//! top-level keys (OpenAI's and Anthropic's), only those keys are built into a JSON value;
//! the rest (the choices, the text) is checked as JSON and skipped. The bill reads the
//! same usage from it as from the whole answer; the whole answer is parsed only when its
//! text must be counted (no usage reported, or no output count).

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

use crate::ceiling::Api;

/// The top-level keys `reported_usage` reads for `api`; `None`: it may read any.
fn usage_keys(api: Api) -> Option<&'static [&'static str]> {
    match api {
        Api::OpenAiChat | Api::OpenAiCompletions | Api::OpenAiEmbeddings => Some(&["usage"]),
        Api::OpenAiResponses => Some(&["usage", "response"]),
        Api::Anthropic => Some(&["usage", "message"]),
        _ => None,
    }
}

/// The answer as `reported_usage(_, api)` reads it: `None` when `bytes` are not JSON (as
/// `serde_json::from_slice::<Value>` would fail). An object keeps only the keys of
/// [`usage_keys`] (the last of a key given twice, as a whole parse keeps); anything else is
/// parsed whole.
pub(crate) fn usage_part(bytes: &[u8], api: Api) -> Option<Value> {
    if let Some(keys) = usage_keys(api) {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        if let Ok(v) = Kept(keys).deserialize(&mut de) {
            if de.end().is_ok() {
                return Some(v);
            }
        }
    }
    serde_json::from_slice::<Value>(bytes).ok()
}

/// An object with only the keys named; anything but an object is refused (and parsed whole
/// by the caller).
struct Kept(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Kept {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Kept {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(Name)? {
            if self.0.contains(&&*key) {
                out.insert(key.into_owned(), map.next_value::<Value>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Value::Object(out))
    }
}

/// An object's key, borrowed from the answer when it has no escapes.
struct Name;

impl<'de> DeserializeSeed<'de> for Name {
    type Value = Cow<'de, str>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Name {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::usage_part;
    use crate::ceiling::{reported_usage, Api};

    /// For every API and answer, the usage read from the part is the usage read from the
    /// whole answer, and an answer that is not JSON is `None` either way.
    #[test]
    fn the_part_reports_what_the_whole_answer_reports() {
        let answers = [
            r#"{"id":"x","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":9,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}}"#,
            r#"{"usage":{"prompt_tokens":1,"completion_tokens":1},"usage":{"prompt_tokens":7,"completion_tokens":5}}"#,
            r#"{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":4,"output_tokens":6,"cache_read_input_tokens":1}}"#,
            r#"{"message":{"usage":{"input_tokens":2,"output_tokens":8}}}"#,
            r#"{"response":{"usage":{"input_tokens":3,"output_tokens":4}}}"#,
            r#"{"output":[],"usage":{"input_tokens":5,"output_tokens":6,"output_tokens_details":{"reasoning_tokens":2}}}"#,
            r#"{"prompt_eval_count":3,"eval_count":4,"usageMetadata":{"promptTokenCount":2}}"#,
            r#"{"u\u0073age":{"prompt_tokens":6,"completion_tokens":1}}"#,
            r#"{"usage":null}"#,
            r#"[{"usage":{"prompt_tokens":1}}]"#,
            r#""usage""#,
            r#"{"usage":{"prompt_tokens":1}} trailing"#,
            r#"{"usage":{"prompt_tokens":1},"choices":[1,2,}"#,
            "",
        ];
        let apis = [
            Api::OpenAiChat,
            Api::OpenAiCompletions,
            Api::OpenAiEmbeddings,
            Api::OpenAiResponses,
            Api::Anthropic,
            Api::OllamaChat,
            Api::Gemini,
        ];
        for answer in answers {
            let whole = serde_json::from_slice::<serde_json::Value>(answer.as_bytes()).ok();
            for api in apis {
                let part = usage_part(answer.as_bytes(), api);
                assert_eq!(part.is_some(), whole.is_some(), "{api:?} {answer}");
                let read =
                    |v: &Option<serde_json::Value>| v.as_ref().and_then(|v| reported_usage(v, api));
                assert_eq!(read(&part), read(&whole), "{api:?} {answer}");
            }
        }
    }
}

//! A prompt count as it accumulates, part by part.

use serde_json::Value;

use super::tokenizer::Encoding;

/// Accumulates a count; anything not counted exactly marks the whole count an estimate.
pub(crate) struct Counter {
    pub encoding: Encoding,
    pub tokens: u64,
    pub exact: bool,
    /// The model id, for model-specific rules (image tokens).
    pub model: Option<String>,
}

impl Counter {
    pub(crate) fn text(&mut self, text: &str) {
        self.tokens += self.encoding.count(text);
    }
    pub(crate) fn add(&mut self, n: u64) {
        self.tokens += n;
    }
    /// Adds an estimate and marks the count as one.
    pub(crate) fn estimate(&mut self, n: u64) {
        self.tokens += n;
        self.exact = false;
    }
    /// Counts any JSON value's text (strings as themselves, the rest as compact JSON) as an
    /// estimate.
    pub(crate) fn json(&mut self, value: &Value) {
        let n = match value {
            Value::String(s) => self.encoding.count(s),
            Value::Null => 0,
            v => self.encoding.count(&v.to_string()),
        };
        self.estimate(n);
    }
}

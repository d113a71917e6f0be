//! A prompt count as it accumulates, part by part.

use serde_json::Value;

use super::message_cache::{self, Entry, Site};
use super::tokenizer::Encoding;

/// Framing tokens assumed per message where the provider does not document its template.
pub(super) const MESSAGE_FRAMING: u64 = 3;

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
        self.tokens = self.tokens.saturating_add(self.encoding.count(text));
    }
    /// Sums saturate: an image header is the caller's bytes and may claim any size.
    pub(crate) fn add(&mut self, n: u64) {
        self.tokens = self.tokens.saturating_add(n);
    }
    /// Adds an estimate and marks the count as one.
    pub(crate) fn estimate(&mut self, n: u64) {
        self.tokens = self.tokens.saturating_add(n);
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
    /// Counts one message with `count`, or adds its count from the per-message cache (see
    /// `message_cache`): the same message at the same site, encoding and model always counts
    /// the same, so a conversation re-sent every turn is tokenized only where it is new.
    pub(crate) fn message(&mut self, site: Site, message: &Value, count: impl FnOnce(&mut Self)) {
        let key = message_cache::key(site, self.encoding, self.model.as_deref(), message);
        if let Some(entry) = key.and_then(message_cache::get) {
            self.tokens = self.tokens.saturating_add(entry.tokens);
            self.exact &= entry.exact;
            return;
        }
        let (tokens_before, exact_before) = (self.tokens, self.exact);
        self.exact = true;
        count(self);
        let entry = Entry {
            tokens: self.tokens - tokens_before,
            exact: self.exact,
        };
        self.exact &= exact_before;
        if let Some(key) = key {
            message_cache::put(key, entry);
        }
    }
}

//! The `models` section: each model's provider, sizes, prices and prompt counting.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::values::{key_path, kind, Parser};

/// Tokenizer encodings a model may declare.
pub(crate) const ENCODINGS: [&str; 5] = [
    "o200k_base",
    "cl100k_base",
    "p50k_base",
    "p50k_edit",
    "r50k_base",
];

/// Which provider's API a model is called through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    OpenAi,
    Anthropic,
    Gemini,
    Ollama,
    Other,
}

impl Provider {
    /// Every provider word the policy accepts.
    pub const WORDS: [&'static str; 5] = ["openai", "anthropic", "gemini", "ollama", "other"];

    /// Parses a provider word.
    pub fn parse(word: &str) -> Option<Provider> {
        Some(match word {
            "openai" => Provider::OpenAi,
            "anthropic" => Provider::Anthropic,
            "gemini" => Provider::Gemini,
            "ollama" => Provider::Ollama,
            "other" => Provider::Other,
            _ => return None,
        })
    }

    /// The provider word.
    pub fn word(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Gemini => "gemini",
            Provider::Ollama => "ollama",
            Provider::Other => "other",
        }
    }
}

/// Prices in micro-dollars per million tokens (= pico-dollars a token), so that
/// `tokens × price / 1_000_000` is micro-dollars, exact in integers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prices {
    pub input: u64,
    pub cached_input: u64,
    pub output: u64,
}

impl Prices {
    /// The cost of a call in micro-dollars, rounded up to the next micro-dollar.
    /// `input_tokens` includes `cached_input_tokens`.
    pub fn cost_micros(
        &self,
        input_tokens: u64,
        cached_input_tokens: u64,
        output_tokens: u64,
    ) -> u64 {
        let cached = cached_input_tokens.min(input_tokens);
        let pico = (input_tokens - cached) as u128 * self.input as u128
            + cached as u128 * self.cached_input as u128
            + output_tokens as u128 * self.output as u128;
        pico.div_ceil(1_000_000).min(u64::MAX as u128) as u64
    }

    /// The most a call of this size can cost: input at the dearest input rate.
    pub fn dearest_cost_micros(&self, input_tokens: u64, output_tokens: u64) -> u64 {
        let input_rate = self.input.max(self.cached_input) as u128;
        let pico = input_tokens as u128 * input_rate + output_tokens as u128 * self.output as u128;
        pico.div_ceil(1_000_000).min(u64::MAX as u128) as u64
    }
}

/// Whether prompt counts for a model are exact (its own tokenizer) or an estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    Exact,
    Estimate,
}

/// A model entry of the policy.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    pub id: Arc<str>,
    pub display_name: String,
    pub provider: Provider,
    pub context_window: Option<u64>,
    pub max_input_tokens: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub prices: Prices,
    /// A router's own call skips the counters that span models.
    pub router: bool,
    /// The tokenizer encoding to count prompts with (e.g. `o200k_base`).
    pub encoding: Option<String>,
    pub counting: Option<Counting>,
    /// The models the gateway and the wrappers try, in order, when this one's provider is
    /// unavailable (breaker open, credential cooling) or fails retryably; each passes
    /// admission again.
    pub fallbacks: Vec<Arc<str>>,
}

const MODEL_KEYS: [&str; 10] = [
    "display_name",
    "provider",
    "context_window",
    "max_input_tokens",
    "max_output_tokens",
    "prices",
    "router",
    "encoding",
    "counting",
    "fallbacks",
];

impl Parser {
    /// The `models` table, in the document's order.
    pub(super) fn models(&mut self, value: &Value) -> Vec<Arc<ModelSpec>> {
        let Value::Object(map) = value else {
            self.error(
                "models",
                Some(value),
                format!("must be a table of models, not {}", kind(value)),
            );
            return Vec::new();
        };
        let mut models = Vec::new();
        let ids: HashSet<String> = map.keys().cloned().collect();
        for (id, entry) in map {
            let path = key_path("models", id);
            if id.trim().is_empty() {
                self.error(&path, None, "a model id must not be empty or blank");
                continue;
            }
            if let Some(fields) = self.table(&path, entry, &MODEL_KEYS) {
                let mut model = self.model(&path, id, fields);
                if let Some(v) = fields.get("fallbacks") {
                    model.fallbacks = self.fallbacks(&key_path(&path, "fallbacks"), id, v, &ids);
                }
                models.push(Arc::new(model));
            }
        }
        models
    }

    /// One model entry; each field is checked in the order of `MODEL_KEYS`, then the sizes
    /// against each other.
    fn model(&mut self, path: &str, id: &str, fields: &Map<String, Value>) -> ModelSpec {
        let field = |key: &str| (fields.get(key), key_path(path, key));
        let mut model = ModelSpec {
            id: Arc::from(id),
            display_name: id.to_string(),
            provider: Provider::Other,
            context_window: None,
            max_input_tokens: None,
            max_output_tokens: None,
            prices: Prices::default(),
            router: false,
            encoding: None,
            counting: None,
            fallbacks: Vec::new(),
        };
        if let (Some(v), p) = field("display_name") {
            model.display_name = self.string(&p, v).unwrap_or_default();
        }
        if let (Some(v), p) = field("provider") {
            model.provider = self.provider(&p, v);
        }
        for (key, slot) in [
            ("context_window", &mut model.context_window),
            ("max_input_tokens", &mut model.max_input_tokens),
            ("max_output_tokens", &mut model.max_output_tokens),
        ] {
            if let (Some(v), p) = field(key) {
                *slot = self.whole(&p, v, 1);
            }
        }
        if let (Some(v), p) = field("prices") {
            model.prices = self.prices(&p, v);
        }
        if let (Some(v), p) = field("router") {
            model.router = self.boolean(&p, v).unwrap_or(false);
        }
        if let (Some(v), p) = field("encoding") {
            model.encoding = self.encoding(&p, v);
        }
        if let (Some(v), p) = field("counting") {
            model.counting = self.counting(&p, v);
        }
        self.check_output_fits_context(path, fields, &model);
        model
    }

    /// A model's `fallbacks`: models of the policy, not the model itself.
    fn fallbacks(
        &mut self,
        path: &str,
        id: &str,
        value: &Value,
        ids: &HashSet<String>,
    ) -> Vec<Arc<str>> {
        let mut out: Vec<Arc<str>> = Vec::new();
        for (i, item) in self.list(path, value).iter().enumerate() {
            let item_path = format!("{path}[{i}]");
            let Some(fallback) = self.reference(&item_path, item, ids, "model") else {
                continue;
            };
            if &*fallback == id || out.contains(&fallback) {
                self.error(&item_path, Some(item), "repeats a model of the ladder");
                continue;
            }
            out.push(fallback);
        }
        out
    }

    fn provider(&mut self, path: &str, value: &Value) -> Provider {
        value.as_str().and_then(Provider::parse).unwrap_or_else(|| {
            self.error(
                path,
                Some(value),
                format!(
                    "is not a provider; accepted: {}",
                    Provider::WORDS.join(", ")
                ),
            );
            Provider::Other
        })
    }

    fn encoding(&mut self, path: &str, value: &Value) -> Option<String> {
        let found = value.as_str().filter(|e| ENCODINGS.contains(e));
        if found.is_none() {
            self.error(
                path,
                Some(value),
                format!(
                    "is not a known encoding; accepted: {}",
                    ENCODINGS.join(", ")
                ),
            );
        }
        found.map(str::to_string)
    }

    fn counting(&mut self, path: &str, value: &Value) -> Option<Counting> {
        match value.as_str() {
            Some("exact") => Some(Counting::Exact),
            Some("estimate") => Some(Counting::Estimate),
            _ => {
                self.error(path, Some(value), "accepted: exact, estimate");
                None
            }
        }
    }

    fn check_output_fits_context(
        &mut self,
        path: &str,
        fields: &Map<String, Value>,
        model: &ModelSpec,
    ) {
        if let (Some(window), Some(output)) = (model.context_window, model.max_output_tokens) {
            if output > window {
                self.error(
                    &key_path(path, "max_output_tokens"),
                    fields.get("max_output_tokens"),
                    format!("must not exceed context_window ({window})"),
                );
            }
        }
    }

    fn prices(&mut self, path: &str, value: &Value) -> Prices {
        let Some(fields) = self.table(path, value, &["input", "cached_input", "output"]) else {
            return Prices::default();
        };
        let get = |p: &mut Self, key: &str| {
            fields
                .get(key)
                .and_then(|v| p.dollars(&key_path(path, key), v, "dollars per million tokens"))
        };
        let input = get(self, "input").unwrap_or(0);
        let output = get(self, "output").unwrap_or(0);
        let cached_input = get(self, "cached_input").unwrap_or(input);
        Prices {
            input,
            cached_input,
            output,
        }
    }
}

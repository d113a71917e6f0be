//! The `models` section: each model's provider, sizes, prices and prompt counting.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::names::base;
use super::pricing::{PriceOrigin, Pricing};
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
    /// Every provider.
    pub const ALL: [Provider; 5] = [
        Provider::OpenAi,
        Provider::Anthropic,
        Provider::Gemini,
        Provider::Ollama,
        Provider::Other,
    ];

    /// Every provider word the policy accepts, in the order of `ALL`.
    pub const WORDS: [&'static str; 5] = {
        let mut words = [""; 5];
        let mut i = 0;
        while i < words.len() {
            words[i] = Provider::ALL[i].as_str();
            i += 1;
        }
        words
    };

    /// The provider word; `Display` and `FromStr` use it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Gemini => "gemini",
            Provider::Ollama => "ollama",
            Provider::Other => "other",
        }
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
    /// Its `prices`, else those of `settings.prices_file` or the built-in table.
    pub prices: Pricing,
    /// A router's own call skips the counters that span models.
    pub router: bool,
    /// The tokenizer encoding to count prompts with (e.g. `o200k_base`).
    pub encoding: Option<String>,
    pub counting: Option<Counting>,
    /// The models the gateway and the wrappers try, in order, when this one's provider is
    /// unavailable (breaker open, credential cooling) or fails retryably; each passes
    /// admission again.
    pub fallbacks: Vec<Arc<str>>,
    /// Other names callers use for the model (`aliases`): they resolve to it and count on
    /// its counters, as its snapshots and letter-case variants do (`names`).
    pub aliases: Vec<Arc<str>>,
}

const MODEL_KEYS: [&str; 11] = [
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
    "aliases",
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
                if let Some(v) = fields.get("aliases") {
                    model.aliases = self.aliases(&key_path(&path, "aliases"), v);
                }
                models.push(Arc::new(model));
            }
        }
        self.check_names(&models);
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
            prices: Pricing::default(),
            router: false,
            encoding: None,
            counting: None,
            fallbacks: Vec::new(),
            aliases: Vec::new(),
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
            model.prices = self.pricing(&p, v, &[], PriceOrigin::Policy);
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
        self.word(path, value, &Provider::WORDS, "provider")
            .map(|i| Provider::ALL[i])
            .unwrap_or(Provider::Other)
    }

    fn encoding(&mut self, path: &str, value: &Value) -> Option<String> {
        self.word(path, value, &ENCODINGS, "known encoding")
            .map(|i| ENCODINGS[i].to_string())
    }

    fn counting(&mut self, path: &str, value: &Value) -> Option<Counting> {
        match self.word(path, value, &["exact", "estimate"], "counting")? {
            0 => Some(Counting::Exact),
            _ => Some(Counting::Estimate),
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
}

/// Model names: their aliases, and the names that resolve alike.
impl Parser {
    /// A model's `aliases`: other names callers use for it (non-empty strings).
    pub(super) fn aliases(&mut self, path: &str, value: &Value) -> Vec<Arc<str>> {
        let mut out = Vec::new();
        for (i, item) in self.list(path, value).iter().enumerate() {
            if let Some(alias) = self.string(&format!("{path}[{i}]"), item) {
                out.push(Arc::from(alias.trim()));
            }
        }
        out
    }

    /// Reports every name (id or alias) that resolves like an earlier one: both would be one
    /// model's counters, so the policy could not say which it meant.
    pub(super) fn check_names(&mut self, models: &[Arc<ModelSpec>]) {
        let mut seen: HashMap<String, (usize, String)> = HashMap::new();
        for (i, m) in models.iter().enumerate() {
            let model_path = key_path("models", &m.id);
            let names = std::iter::once((m.id.clone(), model_path.clone())).chain(
                m.aliases
                    .iter()
                    .enumerate()
                    .map(|(j, a)| (a.clone(), format!("{model_path}.aliases[{j}]"))),
            );
            for (name, path) in names {
                let key = base(&name);
                match seen.get(&key) {
                    Some((j, first)) => {
                        let owner = if *j == i {
                            "this model".to_string()
                        } else {
                            format!("the model {}", models[*j].id)
                        };
                        let v = Value::from(&*name);
                        self.error(
                            &path,
                            Some(&v),
                            format!(
                                "is already a name of {owner} (at {first}): names are compared \
                                 ignoring letter case, spaces around them and a trailing \
                                 :latest; remove one"
                            ),
                        );
                    }
                    None => {
                        seen.insert(key, (i, path));
                    }
                }
            }
        }
    }
}

crate::guard::domain::words::words!(Provider);

//! Price tables: the built-in one (`src/guard/domain/prices.toml`, in the build) and the
//! operator's `settings.prices_file` (the same format, read with the policy, so a price is
//! updated without a rebuild). A model the policy gives no `prices` is priced from the file,
//! else from the built-in table; names resolve as model names do (`names`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use serde_json::Value;

use super::models::{ModelSpec, Provider};
use super::names::{base, without_snapshot};
use super::pricing::{PriceOrigin, Pricing};
use super::values::{key_path, kind, Parser};
use crate::error::FieldError;

/// The built-in table's text.
const BUILT_IN: &str = include_str!("../prices.toml");

/// The keys an entry has beside its prices.
const ENTRY_KEYS: [&str; 7] = [
    "provider", "aliases", "source", "as_of", "seen_in", "verified", "note",
];

/// One model of a price table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PricedModel {
    pub(crate) name: Arc<str>,
    pub(crate) provider: Provider,
    pub(crate) pricing: Pricing,
    pub(crate) as_of: String,
}

/// A price table, looked up by model name.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct PriceBook {
    entries: Vec<PricedModel>,
    names: HashMap<String, usize>,
}

impl PriceBook {
    /// The entry `name` resolves to: a name or alias of it, ignoring letter case, spaces, a
    /// trailing `:latest` and one snapshot suffix.
    pub(crate) fn find(&self, name: &str) -> Option<&PricedModel> {
        let b = base(name);
        let i = self
            .names
            .get(&b)
            .or_else(|| without_snapshot(&b).and_then(|rest| self.names.get(rest)))?;
        Some(&self.entries[*i])
    }

    /// How many models the table prices.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

impl ModelSpec {
    /// The entry of a model the policy does not declare but a price table prices.
    pub(crate) fn priced(entry: &PricedModel) -> ModelSpec {
        ModelSpec {
            id: entry.name.clone(),
            display_name: entry.name.to_string(),
            provider: entry.provider,
            context_window: None,
            max_input_tokens: None,
            max_output_tokens: None,
            prices: entry.pricing,
            router: false,
            encoding: None,
            counting: None,
            fallbacks: Vec::new(),
            aliases: Vec::new(),
        }
    }
}

/// The built-in price table (read once; a test checks it reads without an error).
pub(crate) fn built_in() -> &'static PriceBook {
    static BOOK: OnceLock<PriceBook> = OnceLock::new();
    BOOK.get_or_init(|| {
        read_text(BUILT_IN, "prices.toml", true, PriceOrigin::Table)
            .unwrap_or_else(|errors| panic!("the built-in price table is invalid: {errors:?}"))
    })
}

/// A table document from TOML (when `toml`) or JSON text, with one error per key a JSON
/// table gives twice (TOML refuses those itself): plain JSON parsing keeps the last, so a
/// second entry for a model would silently replace its price.
fn document(text: &str, toml: bool) -> Result<(Value, Vec<FieldError>), String> {
    if toml {
        toml::from_str::<toml::Value>(text)
            .map_err(|e| e.message().trim().replace('\n', "; "))
            .and_then(|v| serde_json::to_value(v).map_err(|e| e.to_string()))
            .map(|v| (v, Vec::new()))
    } else {
        super::json::parse_strict(text).map_err(|e| e.to_string())
    }
}

/// A price table from its text: TOML when `toml`, else JSON; every error with its path,
/// prefixed by `name`.
pub(crate) fn read_text(
    text: &str,
    name: &str,
    toml: bool,
    origin: PriceOrigin,
) -> Result<PriceBook, Vec<FieldError>> {
    let (value, repeated) = document(text, toml).map_err(|e| {
        vec![FieldError::new(
            name,
            "",
            format!("is not a valid price table: {e}"),
        )]
    })?;
    let repeated = repeated.into_iter().map(|e| FieldError {
        path: format!("{name}: {}", e.path),
        ..e
    });
    let mut p = Parser::new();
    let book = p.price_book(name, &value, origin);
    let found = p.finish(book).map(|(book, _)| book).map_err(|e| match e {
        crate::error::Error::Policy(errors) => errors,
        other => vec![FieldError::new(name, "", other.to_string())],
    });
    let repeated: Vec<FieldError> = repeated.collect();
    match found {
        Ok(_) if !repeated.is_empty() => Err(repeated),
        Err(rest) if !repeated.is_empty() => Err(repeated.into_iter().chain(rest).collect()),
        other => other,
    }
}

impl Parser {
    /// A price table document: `[models."<name>"]` entries of prices, `provider`, `aliases`
    /// and where the price comes from (`source`, `as_of`, `seen_in`, `verified`, `note`).
    pub(super) fn price_book(&mut self, at: &str, value: &Value, origin: PriceOrigin) -> PriceBook {
        let mut book = PriceBook::default();
        let Some(top) = self.table(at, value, &["models"]) else {
            return book;
        };
        let Some(models) = top.get("models") else {
            return book;
        };
        let models_path = format!("{at}: models");
        let Value::Object(models) = models else {
            let why = format!("must be a table of models, not {}", kind(models));
            self.error(&models_path, Some(models), why);
            return book;
        };
        let accepted: Vec<&str> = ENTRY_KEYS.to_vec();
        for (name, entry) in models {
            let path = key_path(&models_path, name);
            let pricing = self.pricing(&path, entry, &accepted, origin);
            let Some(fields) = entry.as_object() else {
                continue;
            };
            let provider = match fields.get("provider") {
                Some(v) => self
                    .word(
                        &key_path(&path, "provider"),
                        v,
                        &Provider::WORDS,
                        "provider",
                    )
                    .map(|i| Provider::ALL[i])
                    .unwrap_or(Provider::Other),
                None => Provider::Other,
            };
            let aliases = match fields.get("aliases") {
                Some(v) => self.aliases(&key_path(&path, "aliases"), v),
                None => Vec::new(),
            };
            let as_of = fields
                .get("as_of")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let i = book.entries.len();
            for n in std::iter::once(name.as_str()).chain(aliases.iter().map(|a| &**a)) {
                if book.names.insert(base(n), i).is_some() {
                    let v = Value::from(n);
                    self.error(&path, Some(&v), "names a model the table already prices");
                }
            }
            book.entries.push(PricedModel {
                name: Arc::from(name.as_str()),
                provider,
                pricing,
                as_of,
            });
        }
        book
    }
}

impl Parser {
    /// `settings.prices_file`, read: TOML when it ends in `.toml`, else JSON; a relative
    /// path from `base_dir` (the policy file's folder). Its errors are the policy's.
    pub(super) fn prices_file(
        &mut self,
        settings: &super::Settings,
        base_dir: Option<&std::path::Path>,
    ) -> Option<Arc<PriceBook>> {
        let file = settings.prices_file.as_deref()?;
        let path = match base_dir {
            Some(dir) if std::path::Path::new(file).is_relative() => dir.join(file),
            _ => std::path::PathBuf::from(file),
        };
        let shown = Value::from(file);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                let why = format!("cannot read the prices file {}: {e}", path.display());
                self.error("settings.prices_file", Some(&shown), why);
                return None;
            }
        };
        let toml = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("toml"));
        match document(&text, toml) {
            Ok((value, repeated)) => {
                for e in repeated {
                    self.error(&format!("{file}: {}", e.path), None, e.message);
                }
                Some(Arc::new(self.price_book(file, &value, PriceOrigin::File)))
            }
            Err(e) => {
                let why = format!("is not a valid price table ({}): {e}", path.display());
                self.error("settings.prices_file", Some(&shown), why);
                None
            }
        }
    }

    /// Gives each model with no `prices` of its own the price of `settings.prices_file`,
    /// else of the built-in table, found by its id or one of its aliases.
    pub(super) fn price_models(&mut self, policy: &mut super::Policy) {
        let file = policy.price_file.clone();
        for model in &mut policy.models {
            if model.prices.is_priced() {
                continue;
            }
            let names: Vec<Arc<str>> = std::iter::once(model.id.clone())
                .chain(model.aliases.clone())
                .collect();
            let found = [file.as_deref(), Some(built_in())]
                .into_iter()
                .flatten()
                .find_map(|book| names.iter().find_map(|n| book.find(n)));
            if let Some(entry) = found {
                Arc::make_mut(model).prices = entry.pricing;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_table_reads_and_prices_the_models_people_use() {
        let book = built_in();
        assert!(book.len() >= 40, "{}", book.len());
        for name in [
            "gpt-4o",
            "gpt-4o-2024-08-06",
            "GPT-4.1",
            "o4-mini",
            "gpt-5-mini",
            "claude-3-5-sonnet-20241022",
            "claude-sonnet-4-5-20250929",
            "claude-3-5-haiku-latest",
            "gemini-2.5-pro",
            "gemini-2.0-flash-001",
            "deepseek-reasoner",
            "meta-llama/Llama-3.3-70B-Instruct-Turbo",
            "mistral-large-latest",
            "qwen-max",
        ] {
            let found = book
                .find(name)
                .unwrap_or_else(|| panic!("{name} is not priced"));
            assert!(found.pricing.base.output > 0, "{name}");
            assert!(!found.as_of.is_empty(), "{name} has no date");
        }
        let pro = book.find("gemini-2.5-pro").unwrap().pricing;
        assert_eq!(pro.long_context.unwrap().above_input_tokens, 200_000);
        assert_eq!(book.find("gpt-4.1").unwrap().pricing.base.input, 2_000_000);
        assert!(book.find("gpt-9").is_none());
    }

    #[test]
    fn a_bad_file_names_the_field() {
        let bad = r#"{"models": {"m": {"input": -1, "outptu": 2, "provider": "opnai"}}}"#;
        let errors = read_text(bad, "prices.json", false, PriceOrigin::File).unwrap_err();
        let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert!(
            text.iter().any(|e| e.starts_with(
                "prices.json: models.m.outptu: unknown key (did you mean \"output\"?)"
            )),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|e| e.starts_with("prices.json: models.m.input: must be dollars")),
            "{text:?}"
        );
        assert!(
            text.iter().any(|e| e.contains("did you mean \"openai\"?")),
            "{text:?}"
        );
    }
}

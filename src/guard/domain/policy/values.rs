//! The readers every policy section shares: the parser that collects errors, and checked
//! reads of tables, lists, strings, whole numbers, dollars and references, each error naming
//! the field's path, the value and what is accepted.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::{Error, FieldError};
use crate::guard::domain::suggest::{hint, nearest_within};

/// The largest amount a rule may have: 2^53, so that every counter stays exact where a store
/// computes in doubles (Redis Lua).
pub const MAX_AMOUNT: u64 = 1 << 53;

/// Walks a document and collects every error instead of stopping at the first, and the
/// warnings: what is valid but probably not meant.
pub(super) struct Parser {
    errors: Vec<FieldError>,
    warnings: Vec<FieldError>,
    notes: Vec<FieldError>,
    /// The names of the models read so far, for the rules that name a model.
    pub(super) model_names: super::names::Names,
}

/// A field path: `limits.team[2].shared[0]`.
pub(super) fn key_path(parent: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let key = if plain {
        key.to_string()
    } else {
        serde_json::to_string(key).unwrap_or_default()
    };
    if parent.is_empty() {
        key
    } else {
        format!("{parent}.{key}")
    }
}

fn shown(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 80 {
        let cut: String = text.chars().take(77).collect();
        format!("{cut}...")
    } else {
        text
    }
}

/// What kind of value a document holds, as an error names it ("a table", "a list"...).
pub(super) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table",
    }
}

impl Parser {
    pub(super) fn new() -> Self {
        Parser {
            errors: Vec::new(),
            warnings: Vec::new(),
            notes: Vec::new(),
            model_names: Default::default(),
        }
    }

    /// `value` and the warnings when no error was reported, else every error reported, in
    /// order.
    pub(super) fn finish<T>(self, value: T) -> Result<(T, Vec<FieldError>), Error> {
        if self.errors.is_empty() {
            Ok((value, self.warnings))
        } else {
            Err(Error::Policy(self.errors))
        }
    }

    /// Records what is valid but probably not meant; the policy carries it.
    pub(super) fn warn(&mut self, path: &str, value: Option<&Value>, message: impl Into<String>) {
        self.warnings.push(FieldError::new(
            path,
            value.map(shown).unwrap_or_default(),
            message,
        ));
    }

    /// Records what a reader may take another way than the policy does (`"1d"` is a sliding
    /// 24 hours, not the calendar day); not a warning: `check --strict` passes it.
    pub(super) fn note(&mut self, path: &str, value: Option<&Value>, message: impl Into<String>) {
        self.notes.push(FieldError::new(
            path,
            value.map(shown).unwrap_or_default(),
            message,
        ));
    }

    /// The notes recorded so far.
    pub(super) fn take_notes(&mut self) -> Vec<FieldError> {
        std::mem::take(&mut self.notes)
    }

    pub(super) fn error(&mut self, path: &str, value: Option<&Value>, message: impl Into<String>) {
        self.errors.push(FieldError::new(
            path,
            value.map(shown).unwrap_or_default(),
            message,
        ));
    }

    /// A table whose keys must all be in `accepted`; reports each unknown key.
    pub(super) fn table<'v>(
        &mut self,
        path: &str,
        value: &'v Value,
        accepted: &[&str],
    ) -> Option<&'v Map<String, Value>> {
        let Value::Object(map) = value else {
            self.error(
                path,
                Some(value),
                format!("must be a table, not {}", kind(value)),
            );
            return None;
        };
        self.check_keys(path, map, accepted);
        Some(map)
    }

    /// Reports each key of `map` not in `accepted`.
    pub(super) fn check_keys(&mut self, path: &str, map: &Map<String, Value>, accepted: &[&str]) {
        for key in map.keys() {
            if !accepted.contains(&key.as_str()) {
                let hint = hint(key, accepted);
                self.error(
                    &key_path(path, key),
                    None,
                    format!("unknown key{hint}; accepted: {}", accepted.join(", ")),
                );
            }
        }
    }

    /// A word of a closed vocabulary, as its index in `accepted`; anything else is an error
    /// naming it a `what`, with the nearest accepted word when one is close, and the list.
    pub(super) fn word(
        &mut self,
        path: &str,
        value: &Value,
        accepted: &[&str],
        what: &str,
    ) -> Option<usize> {
        let text = value.as_str();
        if let Some(i) = text.and_then(|t| accepted.iter().position(|a| *a == t)) {
            return Some(i);
        }
        let hint = text.map(|t| hint(t, accepted)).unwrap_or_default();
        let article = if what.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        self.error(
            path,
            Some(value),
            format!(
                "is not {article} {what}{hint}; accepted: {}",
                accepted.join(", ")
            ),
        );
        None
    }

    pub(super) fn list<'v>(&mut self, path: &str, value: &'v Value) -> &'v [Value] {
        match value {
            Value::Array(items) => items,
            other => {
                self.error(
                    path,
                    Some(other),
                    format!("must be a list, not {}", kind(other)),
                );
                &[]
            }
        }
    }

    /// Refuses every key and string of the document holding a NUL character, each by its
    /// path: a policy's ids, labels and values reach the ledger's rows, which PostgreSQL
    /// refuses with one (and one such row holds up every row after it).
    pub(super) fn no_nul(&mut self, path: &str, value: &Value) {
        const WHY: &str = "must not contain a NUL character (\\u0000)";
        match value {
            Value::String(s) if s.contains('\0') => self.error(path, Some(value), WHY),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.no_nul(&format!("{path}[{i}]"), item);
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    let at = key_path(path, key);
                    if key.contains('\0') {
                        self.error(&at, None, format!("a key {WHY}"));
                    }
                    self.no_nul(&at, item);
                }
            }
            _ => {}
        }
    }

    pub(super) fn string(&mut self, path: &str, value: &Value) -> Option<String> {
        match value {
            Value::String(s) if s.contains('\0') => None, // (`no_nul` says so)
            Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
            Value::String(_) => {
                self.error(path, Some(value), "must not be empty or blank");
                None
            }
            other => {
                self.error(
                    path,
                    Some(other),
                    format!("must be a string, not {}", kind(other)),
                );
                None
            }
        }
    }

    pub(super) fn boolean(&mut self, path: &str, value: &Value) -> Option<bool> {
        let found = value.as_bool();
        if found.is_none() {
            self.error(path, Some(value), "must be true or false");
        }
        found
    }

    pub(super) fn required<'v>(
        &mut self,
        path: &str,
        map: &'v Map<String, Value>,
        key: &str,
    ) -> Option<&'v Value> {
        let found = map.get(key);
        if found.is_none() {
            self.error(&key_path(path, key), None, "is required");
        }
        found
    }

    /// A whole number in `min..=MAX_AMOUNT`.
    pub(super) fn whole(&mut self, path: &str, value: &Value, min: u64) -> Option<u64> {
        let n = match value {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            }),
            _ => None,
        };
        match n {
            Some(n) if n >= min && n <= MAX_AMOUNT => Some(n),
            _ => {
                self.error(
                    path,
                    Some(value),
                    format!("must be a whole number from {min} to {MAX_AMOUNT}"),
                );
                None
            }
        }
    }

    /// Dollars (a number ≥ 0) as integer micro-dollars.
    pub(super) fn dollars(&mut self, path: &str, value: &Value, what: &str) -> Option<u64> {
        let micros = value
            .as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(|f| (f * 1_000_000.0).round())
            .filter(|m| *m <= MAX_AMOUNT as f64);
        if micros.is_none() {
            self.error(
                path,
                Some(value),
                format!("must be {what}: a number of dollars, 0 or more"),
            );
        }
        micros.map(|m| m as u64)
    }

    /// A cost amount: dollars that do not round to $0 unless written as 0 (cost is counted in
    /// whole micro-dollars, so $0.0000004 would silently refuse every call).
    pub(super) fn cost_amount(&mut self, path: &str, value: &Value) -> Option<u64> {
        let micros = self.dollars(path, value, "an amount of cost")?;
        let written_zero = value.as_f64() == Some(0.0);
        if micros == 0 && !written_zero {
            self.error(
                path,
                Some(value),
                "rounds to $0: cost is counted in whole micro-dollars, so the least amount is \
                 0.000001 (write 0 to refuse every call on purpose)",
            );
            return None;
        }
        Some(micros)
    }

    /// The id of a `what` (model, team) the policy defines.
    pub(super) fn reference(
        &mut self,
        path: &str,
        value: &Value,
        known: &HashSet<String>,
        what: &str,
    ) -> Option<Arc<str>> {
        let id = self.string(path, value)?;
        if known.contains(&id) {
            return Some(Arc::from(id));
        }
        let mut names: Vec<&str> = known.iter().map(String::as_str).collect();
        names.sort_unstable();
        let accepted = if names.is_empty() {
            format!("the policy defines no {what}s")
        } else {
            format!("defined {what}s: {}", names.join(", "))
        };
        // Ids near each other are often other things (gpt-4, gpt-5): only another letter
        // case or spaces around get a suggestion.
        let hint = nearest_within(&id, &names, 0)
            .map(|n| format!(" (did you mean \"{n}\"?)"))
            .unwrap_or_default();
        self.error(
            path,
            Some(value),
            format!("is not a {what} of the policy{hint}; {accepted}"),
        );
        None
    }
}

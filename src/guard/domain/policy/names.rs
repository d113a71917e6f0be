//! Model names: the one resolution `admit` and every gateway endpoint use, so that another
//! name for a declared model is that model (its counters, its limits), never a free one.
//!
//! A name resolves to the declared model whose id or `aliases` it is, ignoring letter case,
//! spaces around it and Ollama's implicit `:latest` tag; failing that, the same with one
//! provider snapshot suffix taken off: a date (`-2024-08-06` as OpenAI writes it,
//! `-20241022` as Anthropic does, `@20241022` as Vertex AI does) or `-latest`. A declared
//! name always wins over a stripped one, so a policy may declare a snapshot of its own.

use std::collections::HashMap;
use std::sync::Arc;

/// A name as resolution compares it: trimmed, lower case, without a trailing `:latest`.
pub(crate) fn base(name: &str) -> String {
    let lower = name.trim().to_lowercase();
    match lower.strip_suffix(":latest") {
        Some(rest) if !rest.is_empty() => rest.to_string(),
        _ => lower,
    }
}

/// `base` without one snapshot suffix, when it has one.
pub(crate) fn without_snapshot(base: &str) -> Option<&str> {
    if let Some(rest) = base.strip_suffix("-latest") {
        return (!rest.is_empty()).then_some(rest);
    }
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let bytes = base.as_bytes();
    let n = bytes.len();
    // -YYYY-MM-DD
    if n > 11 && bytes[n - 11] == b'-' && bytes[n - 6] == b'-' && bytes[n - 3] == b'-' {
        let (y, m, d) = (&base[n - 10..n - 6], &base[n - 5..n - 3], &base[n - 2..]);
        if digits(y) && digits(m) && digits(d) && plausible(y, m, d) {
            return Some(&base[..n - 11]);
        }
    }
    // -YYYYMMDD or @YYYYMMDD
    if n > 9 && matches!(bytes[n - 9], b'-' | b'@') {
        let date = &base[n - 8..];
        if digits(date) && plausible(&date[..4], &date[4..6], &date[6..]) {
            return Some(&base[..n - 9]);
        }
    }
    None
}

/// A date of the years models have been dated in: a model named `-20001231` is a date, one
/// named `-12345678` is not.
fn plausible(y: &str, m: &str, d: &str) -> bool {
    let (Ok(y), Ok(m), Ok(d)) = (y.parse::<u32>(), m.parse::<u32>(), d.parse::<u32>()) else {
        return false;
    };
    (2000..=2099).contains(&y) && (1..=12).contains(&m) && (1..=31).contains(&d)
}

/// Every name of the declared models, by [`base`], to the model's index.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Names {
    by_name: HashMap<String, usize>,
    ids: Vec<Arc<str>>,
}

impl Names {
    /// The names of models given as (id, aliases), in order; validation has refused
    /// collisions, so the first model of a name keeps it.
    pub(crate) fn of<'a>(
        models: impl IntoIterator<Item = (&'a Arc<str>, &'a [Arc<str>])>,
    ) -> Names {
        let mut by_name = HashMap::new();
        let mut ids = Vec::new();
        for (i, (id, aliases)) in models.into_iter().enumerate() {
            for name in std::iter::once(id).chain(aliases) {
                by_name.entry(base(name)).or_insert(i);
            }
            ids.push(id.clone());
        }
        Names { by_name, ids }
    }

    /// The name a call on `name` counts as: the declared model's id, else the plain name
    /// ([`base`]) of a model the policy does not declare.
    pub(crate) fn canonical(&self, name: &str) -> Arc<str> {
        match self.find(name) {
            Some(i) => self.ids[i].clone(),
            None => Arc::from(base(name)),
        }
    }

    /// The index of the declared model `name` resolves to.
    pub(crate) fn find(&self, name: &str) -> Option<usize> {
        let b = base(name);
        if let Some(&i) = self.by_name.get(&b) {
            return Some(i);
        }
        without_snapshot(&b).and_then(|rest| self.by_name.get(rest).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases_ignore_case_spaces_and_latest_tags() {
        assert_eq!(base(" GPT-4o "), "gpt-4o");
        assert_eq!(base("llama:latest"), "llama");
        assert_eq!(base("llama3.1:8b"), "llama3.1:8b");
        assert_eq!(base(":latest"), ":latest");
    }

    #[test]
    fn snapshots_come_off_once() {
        assert_eq!(without_snapshot("gpt-4o-2024-08-06"), Some("gpt-4o"));
        assert_eq!(
            without_snapshot("claude-3-5-sonnet-20241022"),
            Some("claude-3-5-sonnet")
        );
        assert_eq!(
            without_snapshot("claude-3-5-sonnet@20241022"),
            Some("claude-3-5-sonnet")
        );
        assert_eq!(without_snapshot("gpt-4o-latest"), Some("gpt-4o"));
        assert_eq!(without_snapshot("gpt-4o"), None);
        assert_eq!(without_snapshot("model-12345678"), None);
        assert_eq!(without_snapshot("m-2024-13-01"), None);
        assert_eq!(without_snapshot("-latest"), None);
        assert_eq!(without_snapshot("-20241022"), None);
    }
}

//! What admission made of the provider request it was given: the prompt count and the fit.

use crate::ceiling::{Api, FitResult, PromptCount};

/// The request side of an admitted call: the API it is sent through, its prompt as counted
/// once at admission (`None` when the caller gave `prompt_tokens`), and how it was fitted
/// into the ticket's ceiling.
#[derive(Debug, Clone)]
pub(crate) struct AdmittedRequest {
    pub(crate) api: Api,
    pub(crate) prompt: Option<PromptCount>,
    pub(crate) fit: FitResult,
    /// The top-level request keys the fit set or changed, with their new values: what the
    /// caller must send instead of what it asked.
    pub(crate) changes: serde_json::Map<String, serde_json::Value>,
}

/// The top-level keys of `fitted` whose values differ from `original`'s.
pub(crate) fn changed_keys(
    original: &serde_json::Value,
    fitted: &serde_json::Value,
) -> serde_json::Map<String, serde_json::Value> {
    let Some(fitted) = fitted.as_object() else {
        return serde_json::Map::new();
    };
    fitted
        .iter()
        .filter(|(key, value)| original.get(key.as_str()) != Some(*value))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

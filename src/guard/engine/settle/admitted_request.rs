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
}

//! The usage ceiling: prompt counting and fitting a call into what is left (issue 3).
//!
//! A call is a provider request as JSON ([`serde_json::Value`]) and the API shape it is sent
//! in ([`Api`]). [`count_request`] counts the prompt as it will be sent; [`fit()`] fits the
//! call into a [`UsageCeiling`](crate::UsageCeiling): it refuses what cannot fit before any
//! provider sees it, and otherwise lowers the output maximum (and the thinking budget) in the
//! field that provider reads.

mod api;
mod capped;
mod count;
mod effort;
mod fields;
mod fit;
mod fit_checks;
mod image;
mod intersect;
mod message_cache;
mod models;
mod prompt;
mod prompt_gemini;
mod prompt_ollama;
mod prompt_openai;
mod providers;
mod thinking;
mod tokenizer;

pub use api::Api;
pub use capped::usage_capped;
pub(crate) use fit::fit_counted;
pub use fit::{fit, requested_max_output, FitOptions, FitResult};
pub(crate) use fit_checks::check_context;
pub use models::{known_model, tokenizer_for, KnownModel, ThinkingRange, Tokenizer};
pub use prompt::{count_request, count_request_for_group, prompt_counts, PromptCount};
pub(crate) use providers::check_bounded;
pub(crate) use providers::choices as answers;
#[cfg(feature = "gateway")]
pub(crate) use providers::gemini_error_body;
pub use providers::{
    answer_text, reported_usage, stopped_at_max, usage_paths, HttpRefusal, HttpShape, ReportedUsage,
};
pub use tokenizer::{count_tokens, Encoding};

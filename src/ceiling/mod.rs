//! The usage ceiling: prompt counting and fitting a call into what is left (issue 3).
//!
//! A call is a provider request as JSON ([`serde_json::Value`]) and the API shape it is sent
//! in ([`Api`]). [`count_request`] counts the prompt as it will be sent; [`fit()`] fits the
//! call into a [`UsageCeiling`](crate::UsageCeiling): it refuses what cannot fit before any
//! provider sees it, and otherwise lowers the output maximum (and the thinking budget) in the
//! field that provider reads.

mod api;
mod capped;
mod fields;
mod fit;
mod image;
mod intersect;
mod models;
mod openai;
mod prompt;
mod thinking;
mod tokenizer;

pub use api::Api;
pub use capped::usage_capped;
pub use fit::{fit, requested_max_output, FitOptions, FitResult};
pub use models::{known_model, KnownModel, ThinkingRange};
pub use prompt::{count_request, count_request_for_group, PromptCount};
pub use tokenizer::{count_tokens, tokenizer_for, Encoding, Tokenizer};

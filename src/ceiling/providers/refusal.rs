//! A refusal as an HTTP answer: its kind and status, shared by every provider; each
//! provider's file shapes the body in that provider's own error format (`Refusal::to_http`,
//! in `mod.rs`, puts them together), so an SDK client reads it as the provider's own.

use serde_json::Value;

use crate::guard::domain::refusal::{Reason, Refusal};

/// A rate-limit refusal that frees up later than this also says `x-should-retry: false`.
pub(super) const MAX_CLIENT_RETRY_WAIT_SECONDS: u64 = 60;

/// Which provider's error shape to answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpShape {
    OpenAi,
    Anthropic,
    Ollama,
    /// Google's `{"error": {"code", "message", "status"}}` (`RESOURCE_EXHAUSTED` 429, ...).
    Gemini,
}

impl HttpShape {
    /// Every shape, for `FromStr`.
    const ALL: [HttpShape; 4] = [
        HttpShape::OpenAi,
        HttpShape::Anthropic,
        HttpShape::Ollama,
        HttpShape::Gemini,
    ];

    /// `openai`, `anthropic`, `ollama` or `gemini` (also its `Display`; `FromStr` reads it).
    pub fn as_str(self) -> &'static str {
        match self {
            HttpShape::OpenAi => "openai",
            HttpShape::Anthropic => "anthropic",
            HttpShape::Ollama => "ollama",
            HttpShape::Gemini => "gemini",
        }
    }
}

crate::guard::domain::words::words!(HttpShape);

/// A refusal as an HTTP answer.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRefusal {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

/// What kind of answer a refusal is, for the provider files to shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RefusalKind {
    /// A usage limit: nothing (or not enough) left. 429.
    Limit,
    /// The counters cannot be checked. 503.
    Unavailable,
    /// The prompt does not fit the model's context window. 400.
    ContextWindow,
    /// The policy does not know the model. 404.
    ModelNotFound,
}

impl RefusalKind {
    pub(super) fn of(refusal: &Refusal) -> Self {
        match refusal.reason {
            Reason::Unavailable | Reason::Recovering => RefusalKind::Unavailable,
            Reason::ContextWindowExceeded => RefusalKind::ContextWindow,
            Reason::ModelNotFound => RefusalKind::ModelNotFound,
            Reason::LimitReached | Reason::DoesNotFit | Reason::HeldByCalls => RefusalKind::Limit,
        }
    }

    pub(super) fn status(self) -> u16 {
        match self {
            RefusalKind::Limit => 429,
            RefusalKind::Unavailable => 503,
            RefusalKind::ContextWindow => 400,
            RefusalKind::ModelNotFound => 404,
        }
    }
}

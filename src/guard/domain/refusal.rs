//! Refusals: why a call was refused, in words and in each provider's HTTP error shape.

use serde_json::{json, Value};

use super::clock::{iso8601, Millis};
use super::rule::{LimitType, Metric};
use super::window::Window;

/// Why a call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Reason {
    /// A rule the call must fit in has nothing left.
    LimitReached,
    /// Something is left, but not enough for this call.
    DoesNotFit,
    /// The counters could not be read or written.
    Unavailable,
    /// The prompt (or a required output) does not fit in the model's context window or
    /// input limit; refused before the provider sees it (HTTP 400).
    ContextWindowExceeded,
    /// The model is not one of the policy's and the policy refuses unknown models (HTTP 404).
    ModelNotFound,
}

impl Reason {
    /// The reason code users see.
    pub fn code(self) -> &'static str {
        match self {
            Reason::LimitReached => "USAGE_LIMIT_REACHED",
            Reason::DoesNotFit => "USAGE_LIMIT_DOES_NOT_FIT",
            Reason::Unavailable => "USAGE_LIMITS_UNAVAILABLE",
            Reason::ContextWindowExceeded => "CONTEXT_WINDOW_EXCEEDED",
            Reason::ModelNotFound => "MODEL_NOT_FOUND",
        }
    }
}

/// A rate-limit refusal that frees up later than this also says `x-should-retry: false`.
pub(crate) const MAX_CLIENT_RETRY_WAIT_SECONDS: u64 = 60;

/// The message of every refusal for unavailable counters.
pub(crate) const UNAVAILABLE_MESSAGE: &str = "Usage limits cannot be checked right now";

/// A refused call: the rule that refused it and when it resets.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Refusal {
    pub reason: Reason,
    /// The kind of limit that refused (`None` when unavailable).
    pub limit_type: Option<LimitType>,
    pub metric: Option<Metric>,
    pub amount: Option<u64>,
    pub window: Option<Window>,
    /// When the refusing rule next has room (`None` if unknown or never).
    pub resets_at: Option<Millis>,
    /// Whole seconds from the refusal until `resets_at` (rounded up).
    pub retry_after_seconds: Option<u64>,
    pub message: String,
}

impl Refusal {
    /// A refusal of a model the policy does not list (when it refuses unknown models).
    pub fn model_not_found(model: &str) -> Self {
        Refusal {
            reason: Reason::ModelNotFound,
            limit_type: None,
            metric: None,
            amount: None,
            window: None,
            resets_at: None,
            retry_after_seconds: None,
            message: format!("The model {model:?} does not exist or is not available here."),
        }
    }

    /// A refusal because the counters could not be reached.
    pub fn unavailable() -> Self {
        Refusal {
            reason: Reason::Unavailable,
            limit_type: None,
            metric: None,
            amount: None,
            window: None,
            resets_at: None,
            retry_after_seconds: None,
            message: UNAVAILABLE_MESSAGE.to_string(),
        }
    }

    /// True for minute and hour (sliding) rules.
    pub fn is_rate_limit(&self) -> bool {
        self.window.is_some_and(Window::is_rate_limit)
    }

    /// True when the counters could not be checked.
    pub fn unavailable_flag(&self) -> bool {
        self.reason == Reason::Unavailable
    }

    /// `resets_at` as ISO 8601 UTC.
    pub fn resets_at_iso(&self) -> Option<String> {
        self.resets_at.map(iso8601)
    }

    /// The error code of the HTTP answer: `rate_limit_exceeded` for minute/hour rules,
    /// `usage_limit_reached` for day-or-longer rules, `usage_limits_unavailable`.
    pub fn http_code(&self) -> &'static str {
        match self.reason {
            Reason::Unavailable => "usage_limits_unavailable",
            Reason::ContextWindowExceeded => "context_length_exceeded",
            Reason::ModelNotFound => "model_not_found",
            _ if self.is_rate_limit() => "rate_limit_exceeded",
            Reason::DoesNotFit | Reason::LimitReached => "usage_limit_reached",
        }
    }

    /// The refusal as an HTTP answer in a provider's error shape.
    pub fn to_http(&self, provider: HttpShape) -> HttpRefusal {
        match self.reason {
            Reason::ContextWindowExceeded => return self.invalid_request_http(provider, 400),
            Reason::ModelNotFound => return self.invalid_request_http(provider, 404),
            _ => {}
        }
        let unavailable = self.reason == Reason::Unavailable;
        let status = if unavailable { 503 } else { 429 };
        let code = self.http_code();
        let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
        if !unavailable {
            if self.is_rate_limit() {
                if let Some(seconds) = self.retry_after_seconds {
                    headers.push(("retry-after".to_string(), seconds.max(1).to_string()));
                    // SDKs that honour any Retry-After would hold the request that long.
                    if seconds > MAX_CLIENT_RETRY_WAIT_SECONDS {
                        headers.push(("x-should-retry".to_string(), "false".to_string()));
                    }
                }
            } else {
                // A limit that lasts until tomorrow: tell SDK clients not to retry.
                headers.push(("x-should-retry".to_string(), "false".to_string()));
            }
        }
        let body = match provider {
            HttpShape::OpenAi => json!({
                "error": {
                    "message": self.message,
                    "type": if unavailable { "api_error" } else { code },
                    "param": Value::Null,
                    "code": code,
                }
            }),
            HttpShape::Anthropic => json!({
                "type": "error",
                "error": {
                    "type": if unavailable { "api_error" } else { "rate_limit_error" },
                    "message": self.message,
                    "code": code,
                }
            }),
            HttpShape::Ollama => json!({ "error": self.message }),
        };
        HttpRefusal {
            status,
            headers,
            body,
        }
    }
}

impl Refusal {
    /// A refusal of the request itself, which waiting will not fix: a prompt over the
    /// context window (400, `context_length_exceeded`) or a model the policy does not know
    /// (404, `model_not_found`; Anthropic `not_found_error`).
    fn invalid_request_http(&self, provider: HttpShape, status: u16) -> HttpRefusal {
        let code = self.http_code();
        let (param, anthropic_type) = if self.reason == Reason::ModelNotFound {
            ("model", "not_found_error")
        } else {
            ("messages", "invalid_request_error")
        };
        let body = match provider {
            HttpShape::OpenAi => json!({
                "error": {
                    "message": self.message,
                    "type": "invalid_request_error",
                    "param": param,
                    "code": code,
                }
            }),
            HttpShape::Anthropic => json!({
                "type": "error",
                "error": { "type": anthropic_type, "message": self.message, "code": code }
            }),
            HttpShape::Ollama => json!({ "error": self.message }),
        };
        HttpRefusal {
            status,
            headers: vec![("content-type".to_string(), "application/json".to_string())],
            body,
        }
    }
}

/// Which provider's error shape to answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpShape {
    OpenAi,
    Anthropic,
    Ollama,
}

impl HttpShape {
    /// Parses `openai`, `anthropic` or `ollama`.
    pub fn parse(word: &str) -> Option<HttpShape> {
        match word {
            "openai" => Some(HttpShape::OpenAi),
            "anthropic" => Some(HttpShape::Anthropic),
            "ollama" => Some(HttpShape::Ollama),
            _ => None,
        }
    }
}

/// A refusal as an HTTP answer.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRefusal {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

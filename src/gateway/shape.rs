//! The endpoints the gateway serves and the provider error shape each answers in.

use axum::body::Body;
use axum::http::{header, HeaderName, HeaderValue, Response, StatusCode};
use bytes::Bytes;
use serde_json::{json, Value};

use crate::ceiling::{gemini_error_body, Api, HttpShape};
use crate::guard::domain::policy::Provider;

/// How a streamed answer is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Server-sent events (OpenAI, Anthropic): events end with a blank line.
    Sse,
    /// One JSON object a line (Ollama).
    Ndjson,
}

/// A model endpoint: its path, the API its requests are in, the error shape it answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) path: &'static str,
    pub(crate) api: Api,
    pub(crate) shape: HttpShape,
    pub(crate) framing: Framing,
    /// Whether a request without `stream` streams (Ollama's default).
    pub(crate) streams_by_default: bool,
}

impl Endpoint {
    pub(crate) const OPENAI_CHAT: Endpoint = Endpoint {
        path: "/v1/chat/completions",
        api: Api::OpenAiChat,
        shape: HttpShape::OpenAi,
        framing: Framing::Sse,
        streams_by_default: false,
    };
    pub(crate) const OPENAI_COMPLETIONS: Endpoint = Endpoint {
        path: "/v1/completions",
        api: Api::OpenAiCompletions,
        ..Endpoint::OPENAI_CHAT
    };
    pub(crate) const OPENAI_RESPONSES: Endpoint = Endpoint {
        path: "/v1/responses",
        api: Api::OpenAiResponses,
        ..Endpoint::OPENAI_CHAT
    };
    pub(crate) const OPENAI_EMBEDDINGS: Endpoint = Endpoint {
        path: "/v1/embeddings",
        api: Api::OpenAiEmbeddings,
        ..Endpoint::OPENAI_CHAT
    };
    pub(crate) const ANTHROPIC: Endpoint = Endpoint {
        path: "/v1/messages",
        api: Api::Anthropic,
        shape: HttpShape::Anthropic,
        framing: Framing::Sse,
        streams_by_default: false,
    };
    pub(crate) const OLLAMA_CHAT: Endpoint = Endpoint {
        path: "/api/chat",
        api: Api::OllamaChat,
        shape: HttpShape::Ollama,
        framing: Framing::Ndjson,
        streams_by_default: true,
    };
    pub(crate) const OLLAMA_GENERATE: Endpoint = Endpoint {
        path: "/api/generate",
        api: Api::OllamaGenerate,
        ..Endpoint::OLLAMA_CHAT
    };
    pub(crate) const OLLAMA_EMBED: Endpoint = Endpoint {
        path: "/api/embed",
        api: Api::OllamaEmbed,
        streams_by_default: false,
        ..Endpoint::OLLAMA_CHAT
    };

    /// Every model endpoint.
    pub(crate) const ALL: [Endpoint; 8] = [
        Endpoint::OPENAI_CHAT,
        Endpoint::OPENAI_COMPLETIONS,
        Endpoint::OPENAI_RESPONSES,
        Endpoint::OPENAI_EMBEDDINGS,
        Endpoint::ANTHROPIC,
        Endpoint::OLLAMA_CHAT,
        Endpoint::OLLAMA_GENERATE,
        Endpoint::OLLAMA_EMBED,
    ];

    /// The provider whose upstream serves a model the policy does not list.
    pub(crate) fn provider(self) -> Provider {
        self.api.provider()
    }

    /// Whether `provider`'s upstream serves this endpoint as it is (no translation): the
    /// endpoint's own provider, and for the OpenAI endpoints `other` (OpenAI-compatible
    /// servers).
    pub(crate) fn served_by(self, provider: Provider) -> bool {
        provider == self.provider()
            || (self.shape == HttpShape::OpenAi && provider == Provider::Other)
    }

    /// Whether the gateway asks a stream for its usage (`stream_options.include_usage`).
    pub(crate) fn asks_stream_usage(self) -> bool {
        matches!(self.api, Api::OpenAiChat | Api::OpenAiCompletions)
    }
}

/// What kind of error the gateway itself answers (not a usage refusal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Problem {
    /// 400: the body is not JSON, or a field has the wrong shape.
    BadRequest,
    /// 401: no key, or a key the gateway does not know.
    Unauthorized,
    /// 403: the key may not call this model.
    Forbidden,
    /// 408: the body did not arrive in time.
    RequestTimeout,
    /// 413: the body is larger than the gateway takes.
    TooLarge,
    /// 502: the provider could not be reached, or no upstream is configured for it.
    BadGateway,
    /// 502: the provider refused the operator's credential (its 401 or 403).
    CredentialsRejected,
    /// 502: the provider's answer is larger than the gateway reads whole.
    AnswerTooLarge,
    /// 503: the gateway is shutting down.
    Unavailable,
    /// 503: the gateway is at its connection limit.
    Busy,
    /// 504: the provider did not answer in time.
    Timeout,
}

impl Problem {
    fn status(self) -> StatusCode {
        match self {
            Problem::BadRequest => StatusCode::BAD_REQUEST,
            Problem::Unauthorized => StatusCode::UNAUTHORIZED,
            Problem::Forbidden => StatusCode::FORBIDDEN,
            Problem::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Problem::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Problem::BadGateway | Problem::CredentialsRejected | Problem::AnswerTooLarge => {
                StatusCode::BAD_GATEWAY
            }
            Problem::Unavailable | Problem::Busy => StatusCode::SERVICE_UNAVAILABLE,
            Problem::Timeout => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// The error `type` (OpenAI) and Anthropic's error type.
    fn words(self) -> (&'static str, &'static str, &'static str) {
        // (OpenAI type, OpenAI code, Anthropic type)
        match self {
            Problem::BadRequest => (
                "invalid_request_error",
                "invalid_request",
                "invalid_request_error",
            ),
            Problem::Unauthorized => (
                "invalid_request_error",
                "invalid_api_key",
                "authentication_error",
            ),
            Problem::Forbidden => (
                "invalid_request_error",
                "model_not_allowed",
                "permission_error",
            ),
            Problem::RequestTimeout => (
                "invalid_request_error",
                "request_timeout",
                "invalid_request_error",
            ),
            Problem::TooLarge => (
                "invalid_request_error",
                "request_too_large",
                "request_too_large",
            ),
            Problem::BadGateway => ("api_error", "upstream_unreachable", "api_error"),
            Problem::CredentialsRejected => {
                ("api_error", "provider_credentials_rejected", "api_error")
            }
            Problem::AnswerTooLarge => ("api_error", "answer_too_large", "api_error"),
            Problem::Unavailable => ("api_error", "shutting_down", "overloaded_error"),
            Problem::Busy => ("api_error", "too_many_connections", "overloaded_error"),
            Problem::Timeout => ("api_error", "upstream_timeout", "timeout_error"),
        }
    }

    /// The error as `shape` answers it.
    pub(crate) fn response(self, shape: HttpShape, message: &str) -> Response<Body> {
        let (kind, code, anthropic) = self.words();
        let body = match shape {
            HttpShape::OpenAi => json!({
                "error": {"message": message, "type": kind, "param": null, "code": code}
            }),
            HttpShape::Anthropic => json!({
                "type": "error", "error": {"type": anthropic, "message": message}
            }),
            HttpShape::Ollama => json!({ "error": message }),
            HttpShape::Gemini => gemini_error_body(self.status().as_u16(), message, Some(code)),
        };
        let mut response = json_response(self.status(), &body);
        if matches!(self, Problem::Unavailable | Problem::Busy) {
            // Another instance (or this one, restarted or less busy) takes it in a moment.
            let retry = HeaderValue::from_static("1");
            response.headers_mut().insert(header::RETRY_AFTER, retry);
        }
        response
    }
}

/// The event that ends a stream early (`code`: why), in `shape`'s stream: an OpenAI
/// `data: {"error": ...}` event, Anthropic's `event: error`, an Ollama `{"error": ...}` line.
/// The SDKs raise it as an error of the stream.
pub(crate) fn stream_error(shape: HttpShape, code: &str, message: &str) -> Bytes {
    let text = match shape {
        HttpShape::OpenAi => {
            let error =
                json!({"message": message, "type": "api_error", "param": null, "code": code});
            format!("data: {}\n\n", json!({ "error": error }))
        }
        HttpShape::Anthropic => {
            let error =
                json!({"type": "error", "error": {"type": "api_error", "message": message}});
            format!("event: error\ndata: {error}\n\n")
        }
        HttpShape::Ollama => format!("{}\n", json!({ "error": message })),
        HttpShape::Gemini => format!("data: {}\n\n", gemini_error_body(500, message, Some(code))),
    };
    Bytes::from(text)
}

/// A JSON answer.
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Sets each `(name, value)` header (skipping any that is not a valid header).
pub(crate) fn set_headers(response: &mut Response<Body>, headers: Vec<(String, String)>) {
    for (name, value) in headers {
        // The value's bytes are taken as they are (checked, not copied).
        if let (Some(n), Ok(v)) = (
            header_name(&name),
            HeaderValue::from_maybe_shared(Bytes::from(value)),
        ) {
            response.headers_mut().insert(n, v);
        }
    }
}

/// The names of the headers the gateway sets on every answer (its rate-limit headers, who
/// served it): made once, then shared (a name of another header is parsed and copied).
const OWN_HEADERS: [&str; 17] = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
    "ratelimit-policy",
    "ratelimit",
    "x-usage-restriction",
    "x-served-provider",
    "x-model-resolution",
];

/// `name` as a header name; `None` when it is not one.
fn header_name(name: &str) -> Option<HeaderName> {
    match OWN_HEADERS.iter().position(|n| *n == name) {
        Some(i) => Some(HeaderName::from_static(OWN_HEADERS[i])),
        None => HeaderName::from_bytes(name.as_bytes()).ok(),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderName;

    /// A name of the gateway's own headers is the name parsed; another is parsed as before,
    /// and what is no header name stays none.
    #[test]
    fn own_header_names_are_the_names_parsed() {
        let others = ["x-request-id", "Content-Type", "no spaces", ""];
        for name in super::OWN_HEADERS.iter().chain(&others) {
            let parsed = HeaderName::from_bytes(name.as_bytes()).ok();
            assert_eq!(super::header_name(name), parsed, "{name:?}");
        }
        assert!(super::header_name("no spaces").is_none());
    }
}

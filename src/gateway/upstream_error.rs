//! A provider's error answer as the caller gets it: the provider's status, error type, code
//! and parameter (what an SDK raises on and retries by), in the endpoint's shape, with the
//! gateway's own message. The provider's message is the operator's account speaking (an
//! organization id, its rate limits and usage, a proxy echoing the credential): it is passed
//! on only for a refusal of the request itself (400, 404, 409, 413, 422), and then with every
//! word that looks like an account id or a credential replaced.

use serde_json::{json, Value};

use crate::ceiling::{gemini_error_body, HttpShape};

/// At most this much of a provider's message is passed on.
const MAX_MESSAGE: usize = 1000;
/// What replaces a word that looks like an id or a credential.
const REDACTED: &str = "[redacted]";

/// The body the caller gets for a provider's error answer `body` with `status`, in `shape`.
/// `provider` names the provider; `secret` is the operator's credential for it, if any.
pub(crate) fn caller_body(
    shape: HttpShape,
    provider: &str,
    status: u16,
    body: &[u8],
    secret: Option<&str>,
) -> Value {
    let sent: Value = serde_json::from_slice(body).unwrap_or_default();
    let error = match sent.get("error") {
        Some(e @ Value::Object(_)) => e,
        _ => &sent,
    };
    let word = |key: &str| error.get(key).and_then(Value::as_str).and_then(identifier);
    let (kind, code, param) = (word("type"), word("code"), word("param"));
    let said = match code.or(kind) {
        Some(c) => format!("{status} {c}"),
        None => status.to_string(),
    };
    let mut message = match status {
        429 => format!(
            "The {provider} provider is rate limiting the gateway's calls ({said}); retry \
             after the time Retry-After gives"
        ),
        402 => format!("The {provider} provider refused the call for billing ({said})"),
        500.. => format!("The {provider} provider failed to answer the call ({said})"),
        _ => format!("The {provider} provider refused the request ({said})"),
    };
    let passed = matches!(status, 400 | 404 | 409 | 413 | 422);
    let theirs = error
        .get("message")
        .or_else(|| sent.get("error"))
        .and_then(Value::as_str);
    match theirs.filter(|_| passed) {
        Some(m) => {
            message.push_str(": ");
            message.push_str(&redact(m, secret));
        }
        None => message.push_str(". The provider's own message is not passed on."),
    }
    let fallback_kind = match status {
        429 => ("rate_limit_exceeded", "rate_limit_error"),
        500.. => ("api_error", "api_error"),
        _ => ("invalid_request_error", "invalid_request_error"),
    };
    match shape {
        HttpShape::OpenAi => json!({"error": {
            "message": message,
            "type": kind.unwrap_or(fallback_kind.0),
            "param": param,
            "code": code,
        }}),
        HttpShape::Anthropic => json!({
            "type": "error",
            "error": {"type": kind.unwrap_or(fallback_kind.1), "message": message},
        }),
        HttpShape::Ollama => json!({ "error": message }),
        HttpShape::Gemini => gemini_error_body(status, &message, code),
    }
}

/// `s` when it is a short identifier (an error type, code or parameter name), not an id.
pub(super) fn identifier(s: &str) -> Option<&str> {
    let plain = !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '[' | ']'));
    (plain && !secret_like(s, None)).then_some(s)
}

/// Whether a word looks like an account id or a credential: a known prefix (`sk-`, `org-`,
/// `proj_`, ...), the operator's credential or a part of it, or a long run of letters and
/// digits.
fn secret_like(word: &str, secret: Option<&str>) -> bool {
    let lower = word.to_ascii_lowercase();
    const PREFIXES: [&str; 12] = [
        "sk-", "sk_", "org-", "org_", "proj-", "proj_", "acct_", "acct-", "key-", "key_", "user-",
        "rk-",
    ];
    if PREFIXES.iter().any(|p| lower.contains(p)) {
        return true;
    }
    if let Some(secret) = secret.filter(|s| s.len() >= 8) {
        // The whole key, or a piece of it (a masked `sk-abc***wxyz` shows its ends).
        let pieces = word.split(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_');
        if pieces.filter(|p| p.len() >= 4).any(|p| secret.contains(p)) {
            return true;
        }
    }
    let letters = word.chars().filter(char::is_ascii_alphabetic).count();
    let digits = word.chars().filter(char::is_ascii_digit).count();
    word.len() >= 16 && letters > 0 && digits > 0
}

/// `message` with every word that looks like an id or a credential replaced, and numbers
/// after words that state an account's limits or use (`Limit 30000, Used 29000`), cut to
/// [`MAX_MESSAGE`].
fn redact(message: &str, secret: Option<&str>) -> String {
    let mut out = String::with_capacity(message.len().min(MAX_MESSAGE));
    let mut account_figure = false;
    for (i, word) in message.split_whitespace().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let bare = word.trim_matches(|c: char| !c.is_ascii_alphanumeric());
        let lower = bare.to_ascii_lowercase();
        let number = !bare.is_empty() && bare.chars().all(|c| c.is_ascii_digit() || c == '.');
        if secret_like(word, secret) || (account_figure && number) {
            out.push_str(REDACTED);
        } else {
            out.push_str(word);
        }
        account_figure = matches!(
            lower.as_str(),
            "limit" | "used" | "requested" | "remaining" | "quota" | "balance"
        );
        if out.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE;
            while !out.is_char_boundary(end) {
                end -= 1;
            }
            out.truncate(end);
            out.push_str("...");
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-UPSTREAM-SECRET-0123456789";

    fn text(v: &Value) -> String {
        v.to_string()
    }

    #[test]
    fn a_rate_limit_in_openai_wording_keeps_its_type_and_code_not_its_account() {
        let sent = json!({"error": {"message": "Rate limit reached for gpt-4o in organization \
            org-OPERATOR123 on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000.",
            "type": "tokens", "param": null, "code": "rate_limit_exceeded"}});
        let body = sent.to_string();
        let got = caller_body(HttpShape::OpenAi, "openai", 429, body.as_bytes(), Some(KEY));
        assert_eq!(got["error"]["type"], "tokens");
        assert_eq!(got["error"]["code"], "rate_limit_exceeded");
        for leak in ["org-OPERATOR123", "30000", "29000", "organization"] {
            assert!(!text(&got).contains(leak), "{leak} in {got}");
        }
    }

    #[test]
    fn a_5xx_echoing_the_key_passes_none_of_it() {
        let sent = json!({"error": {"message": format!(
            "proxy error: upstream rejected header Authorization: Bearer {KEY}")}});
        let body = sent.to_string();
        for shape in [HttpShape::OpenAi, HttpShape::Anthropic, HttpShape::Ollama] {
            let got = caller_body(shape, "openai", 500, body.as_bytes(), Some(KEY));
            assert!(!text(&got).contains("SECRET"), "{got}");
            assert!(!text(&got).contains("0123456789"), "{got}");
        }
        let anthropic = caller_body(HttpShape::Anthropic, "anthropic", 529, b"{}", None);
        assert_eq!(anthropic["error"]["type"], "api_error");
    }

    #[test]
    fn a_refused_request_keeps_its_message_redacted() {
        let sent = json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "max_tokens: 99999 > 8192 for key sk-ant-api03-abcdef (org org_ABC12345)"}});
        let body = sent.to_string();
        let got = caller_body(
            HttpShape::Anthropic,
            "anthropic",
            400,
            body.as_bytes(),
            None,
        );
        let message = got["error"]["message"].as_str().unwrap();
        assert_eq!(got["error"]["type"], "invalid_request_error");
        assert!(message.contains("max_tokens: 99999 > 8192"), "{message}");
        assert!(
            !message.contains("sk-ant") && !message.contains("ABC12345"),
            "{message}"
        );
        // A code that is not an identifier is not passed on.
        let odd = json!({"error": {"message": "x", "type": "invalid_request_error",
                                   "code": "sk-UPSTREAM-SECRET"}});
        let got = caller_body(
            HttpShape::OpenAi,
            "openai",
            400,
            odd.to_string().as_bytes(),
            None,
        );
        assert_eq!(got["error"]["code"], Value::Null);
    }
}

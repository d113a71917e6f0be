//! The provider side of one admitted call: send it upstream (bounded by the first-byte and
//! the total timeouts), then answer: a plain answer billed from its reported usage (or, when
//! that is missing or unreadable, the prompt and the delivered output counted), a stream
//! relayed as it arrives and billed when it ends, a call the upstream timed out on billed
//! the prompt (it had the request).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{header, HeaderValue, Response};
use bytes::Bytes;
use serde_json::Value;

use super::answer_usage::usage_part;
use super::headers::head;
use super::health::{credential, header_pairs, outcome};
use super::metrics::Metrics;
use super::proxy::App;
use super::relay::Call;
use super::shape::{set_headers, Endpoint, Problem};
use super::upstream::{self, read_bounded, Unread};
use super::upstream_error::caller_body;
use crate::ceiling::{answer_text, reported_usage, ReportedUsage};
use crate::guard::domain::health::Outcome;
use crate::guard::domain::policy::Upstream;
use crate::guard::engine::observe::health::ProviderHealth;

/// Why an upstream call brought no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unanswered {
    /// The upstream could not be reached or dropped the connection before answering: the
    /// provider's failure (its breaker counts it); nothing is billed.
    Unreachable,
    /// A streamed call's answer did not start within `gateway.upstream_first_byte_seconds`:
    /// the provider's failure; the prompt is billed (the provider had the request).
    FirstByte,
    /// A plain call's answer did not come within `gateway.upstream_timeout_seconds`: a long
    /// generation, which says nothing of the provider's health; the prompt is billed.
    Overran,
}

impl Unanswered {
    /// Whether the provider caused it (its breaker counts it, the next candidate may cure it).
    pub(crate) fn provider_failed(self) -> bool {
        self != Unanswered::Overran
    }
}

/// The provider side of one call.
pub(crate) struct Forward<'a> {
    /// The gateway (a stream read on after its client left counts as a running call).
    pub(crate) app: &'a Arc<App>,
    pub(crate) client: &'a reqwest::Client,
    pub(crate) metrics: &'a Metrics,
    pub(crate) endpoint: Endpoint,
    pub(crate) upstream: &'a Upstream,
    /// The longest a call may take (`gateway.upstream_timeout_seconds`).
    pub(crate) timeout: Duration,
    /// The longest a streamed call's answer may take to start
    /// (`gateway.upstream_first_byte_seconds`, at most `timeout`).
    pub(crate) first_byte: Duration,
    /// `gateway.max_event_bytes` and `gateway.max_answer_bytes`.
    pub(crate) max_event: usize,
    pub(crate) max_answer: usize,
}

/// What a call whose answer cannot be read is billed as (the provider wrote it): the output
/// maximum it was sent with; the input is left to the prompt as admission counted it.
fn as_sent(call: &Call) -> ReportedUsage {
    let output = call.ticket().fitted().and_then(|f| f.max_output_tokens);
    ReportedUsage {
        output_tokens: output.unwrap_or(0),
        ..ReportedUsage::default()
    }
}

impl Forward<'_> {
    /// Sends the call with `headers` (the caller's that may pass: `headers::to_upstream`).
    pub(crate) async fn send(
        &self,
        headers: &[(&'static str, HeaderValue)],
        body: Bytes,
        stream: bool,
    ) -> Result<reqwest::Response, Unanswered> {
        let request = upstream::request(self.client, self.upstream, self.endpoint.path, headers);
        let (wait, late) = if stream {
            (self.first_byte.min(self.timeout), Unanswered::FirstByte)
        } else {
            (self.timeout, Unanswered::Overran)
        };
        let started = Instant::now();
        let sent = tokio::time::timeout(wait, request.body(body).send()).await;
        self.metrics.upstream_seconds(started.elapsed());
        let status = match &sent {
            Ok(Ok(r)) => r.status().as_str().to_string(),
            Ok(Err(e)) if e.is_timeout() => "timeout".into(),
            Err(_) => "timeout".into(),
            Ok(Err(_)) => "unreachable".into(),
        };
        let word = self.upstream.provider.as_str();
        self.metrics.count(
            "usage_guard_gateway_upstream_responses",
            &[("provider", word), ("status", &status)],
        );
        match sent {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) if e.is_timeout() => Err(late),
            Ok(Err(e)) => {
                log::warn!("gateway: the {word} upstream failed: {e}");
                Err(Unanswered::Unreachable)
            }
            Err(_) => Err(late),
        }
    }

    /// Counts a call the upstream timed out on after it had the request (billed).
    fn timed_out(&self, stage: &str) {
        let word = self.upstream.provider.as_str();
        self.metrics.count(
            "usage_guard_gateway_upstream_timeouts",
            &[("provider", word), ("stage", stage)],
        );
    }

    /// The answer to a call the upstream did not answer: 502 (released) or 504 (the prompt
    /// billed: the provider had the request and may have worked on it).
    pub(crate) async fn unanswered(&self, why: Unanswered, call: Call) -> Response<Body> {
        let word = self.upstream.provider.as_str();
        let (problem, message) = match why {
            Unanswered::Unreachable => {
                call.release().await;
                let message = format!("The {word} upstream could not be reached");
                return Problem::BadGateway.response(self.endpoint.shape, &message);
            }
            Unanswered::FirstByte => (
                "first_byte",
                format!(
                    "The {word} upstream did not start its answer within {} s \
                     (gateway.upstream_first_byte_seconds)",
                    self.first_byte.min(self.timeout).as_secs()
                ),
            ),
            Unanswered::Overran => (
                "total",
                format!(
                    "The {word} upstream did not answer within {} s \
                     (gateway.upstream_timeout_seconds)",
                    self.timeout.as_secs()
                ),
            ),
        };
        self.timed_out(problem);
        let usage = call.usage(None, "");
        call.bill(usage, "upstream_timeout").await;
        Problem::Timeout.response(self.endpoint.shape, &message)
    }

    /// A provider's error answer, passed on with its status, its allowed headers
    /// (`Retry-After`, ...) and its error type and code, in the gateway's words
    /// (`upstream_error`: the provider's message speaks of the operator's account), and its
    /// outcome, recorded in `health` for `caller`; a 401 or 403, the provider refusing the
    /// operator's credential, becomes a 502 `provider_credentials_rejected` (the provider's
    /// text may quote the operator's key), logged for the operator.
    pub(crate) async fn failed(
        &self,
        upstream: reqwest::Response,
        health: &ProviderHealth,
        caller: &str,
    ) -> (Response<Body>, Outcome) {
        let (provider, cred) = (self.upstream.provider.as_str(), credential(self.upstream));
        let status = upstream.status().as_u16();
        let pairs = header_pairs(upstream.headers());
        let mut response = head(&upstream);
        let body = read_bounded(upstream, self.max_answer, self.timeout).await;
        let body = body.unwrap_or_default();
        let outcome = outcome(status, &body);
        health
            .record(provider, &cred, caller, outcome, &pairs)
            .await;
        if matches!(status, 401 | 403) {
            log::error!(
                "gateway: the {provider} upstream refused the credential {cred:?} with {status} \
                 ({}): check the key in that variable; callers get 502 \
                 provider_credentials_rejected",
                error_code(&body)
            );
            let message = format!(
                "The {provider} provider refused the gateway's credentials; the gateway's \
                 operator has been told"
            );
            let shape = self.endpoint.shape;
            return (
                Problem::CredentialsRejected.response(shape, &message),
                outcome,
            );
        }
        let secret = self
            .upstream
            .api_key_env
            .as_deref()
            .and_then(|v| std::env::var(v).ok());
        let shape = self.endpoint.shape;
        let theirs = caller_body(shape, provider, status, &body, secret.as_deref());
        let headers = response.headers_mut();
        headers.remove(header::CONTENT_ENCODING);
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        *response.body_mut() = Body::from(theirs.to_string());
        (response, outcome)
    }

    /// A successful answer: relayed as a stream or read whole, and billed.
    pub(crate) async fn answer(
        &self,
        upstream: reqwest::Response,
        mut call: Call,
        stream: bool,
        strip_usage: bool,
        extra: Vec<(String, String)>,
    ) -> Response<Body> {
        let request_id = ["x-request-id", "request-id"].iter().find_map(|h| {
            upstream
                .headers()
                .get(*h)?
                .to_str()
                .ok()
                .map(str::to_string)
        });
        call.set_request_id(request_id);
        let mut response = head(&upstream);
        set_headers(&mut response, extra);
        if stream {
            *response.body_mut() = self.relay(upstream, call, strip_usage);
            return response;
        }
        self.plain(upstream, call, response).await
    }

    /// A plain answer: read whole (up to `gateway.max_answer_bytes`), billed from its
    /// reported usage, passed on as it came. A count missing or unreadable is billed as
    /// counted: the prompt as admission counted it, the output from the answer's text.
    async fn plain(
        &self,
        upstream: reqwest::Response,
        call: Call,
        mut response: Response<Body>,
    ) -> Response<Body> {
        let word = self.upstream.provider.as_str();
        let failed = match read_bounded(upstream, self.max_answer, self.timeout).await {
            Ok(bytes) => {
                self.bill_answer(&bytes, call).await;
                *response.body_mut() = Body::from(bytes);
                return response;
            }
            Err(failed) => failed,
        };
        let (problem, ended, message) = match failed {
            Unread::TooLarge => {
                let usage = call.usage(Some(as_sent(&call)), "");
                call.bill(usage, "answer_too_large").await;
                let message = format!(
                    "The {word} upstream's answer is larger than {} bytes \
                     (gateway.max_answer_bytes)",
                    self.max_answer
                );
                log::warn!("gateway: {message}");
                return Problem::AnswerTooLarge.response(self.endpoint.shape, &message);
            }
            Unread::Timeout => {
                self.timed_out("body");
                (Problem::Timeout, "upstream_broke", "did not finish")
            }
            Unread::Broke => (Problem::BadGateway, "upstream_broke", "broke off"),
        };
        let usage = call.usage(None, "");
        call.bill(usage, ended).await;
        let message = format!("The {word} upstream {message} its answer");
        problem.response(self.endpoint.shape, &message)
    }

    /// Bills a plain answer read whole: its reported usage; a count missing or unreadable
    /// as counted (the prompt as admission counted it, the output from the answer's text,
    /// off the serving thread when long); an answer that is not JSON at all (compressed,
    /// another format), whose text cannot be read, as the prompt and the output maximum it
    /// was sent with: the provider served it.
    async fn bill_answer(&self, bytes: &[u8], call: Call) {
        let (api, word) = (self.endpoint.api, self.upstream.provider.as_str());
        // The usage's part of the answer; the whole is parsed only if its text is counted.
        let answer = usage_part(bytes, api);
        let reported = match &answer {
            Some(v) => reported_usage(v, api),
            None if !api.is_embeddings() => {
                log::warn!(
                    "gateway: the {word} answer is not readable JSON; billing the prompt as \
                     counted and the output maximum it was sent with"
                );
                Some(as_sent(&call))
            }
            None => None,
        };
        let counted = !api.is_embeddings() && reported.is_none_or(|r| r.output_tokens == 0);
        if reported.is_none() {
            log::warn!(
                "gateway: the {word} answer reported no usage; billing the prompt as \
                 counted and its output text counted"
            );
        }
        let whole = || serde_json::from_slice::<Value>(bytes).ok();
        let delivered = match (&answer, counted) {
            (Some(_), true) => whole().map_or_else(String::new, |v| answer_text(&v, api)),
            _ => String::new(),
        };
        let usage = call.usage_counted(reported, delivered).await;
        call.bill(usage, "complete").await;
    }
}

/// The error code (else type) of a provider's error body, for a log line (never its message,
/// which may quote the key).
fn error_code(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).unwrap_or_default();
    let error = v.get("error").unwrap_or(&v);
    ["code", "type"]
        .iter()
        .find_map(|k| error.get(*k).and_then(Value::as_str))
        .unwrap_or("no error code")
        .chars()
        .take(80)
        .collect()
}

//! The provider side of one admitted call: send it upstream (bounded by the upstream
//! timeout), then answer: an upstream error passed through with the ticket released, a plain
//! answer billed from its reported usage, a stream relayed as it arrives and billed when it
//! ends.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;

use super::metrics::Metrics;
use super::relay::{Call, Relay};
use super::shape::{set_headers, stream_error, Endpoint, Problem};
use super::upstream;
use crate::ceiling::{reported_usage, ReportedUsage};
use crate::guard::domain::policy::Upstream;

/// Response headers that describe the provider's connection, not the answer.
const HOP: [&str; 5] = [
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "upgrade",
];

/// The provider side of one call.
pub(crate) struct Forward<'a> {
    pub(crate) client: &'a reqwest::Client,
    pub(crate) metrics: &'a Metrics,
    pub(crate) endpoint: Endpoint,
    pub(crate) upstream: &'a Upstream,
    pub(crate) timeout: Duration,
    /// `gateway.max_event_bytes` and `gateway.max_answer_bytes`.
    pub(crate) max_event: usize,
    pub(crate) max_answer: usize,
}

/// Why an answer read whole was not.
pub(crate) enum Unread {
    /// Larger than `gateway.max_answer_bytes`.
    TooLarge,
    /// The upstream broke off (or stopped sending for the upstream timeout).
    Broke,
    Timeout,
}

/// The upstream's body, read whole as long as it is at most `limit` bytes and comes within
/// `timeout`; the rest is never buffered.
pub(crate) async fn read_bounded(
    upstream: reqwest::Response,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, Unread> {
    if upstream.content_length().is_some_and(|n| n > limit as u64) {
        return Err(Unread::TooLarge);
    }
    let read = async {
        let mut body = Vec::new();
        let mut chunks = upstream.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|_| Unread::Broke)?;
            if body.len() + chunk.len() > limit {
                return Err(Unread::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(body))
    };
    tokio::time::timeout(timeout, read)
        .await
        .unwrap_or(Err(Unread::Timeout))
}

impl Forward<'_> {
    pub(crate) async fn send(
        &self,
        caller: &HeaderMap,
        body: Bytes,
    ) -> Result<reqwest::Response, Problem> {
        let request = upstream::request(self.client, self.upstream, self.endpoint.path, caller);
        let started = Instant::now();
        let sent = tokio::time::timeout(self.timeout, request.body(body).send()).await;
        self.metrics.upstream_seconds(started.elapsed());
        let status = match &sent {
            Ok(Ok(r)) => r.status().as_str().to_string(),
            Ok(Err(e)) if e.is_timeout() => "timeout".into(),
            Err(_) => "timeout".into(),
            Ok(Err(_)) => "unreachable".into(),
        };
        self.metrics.count(
            "usage_guard_gateway_upstream_responses",
            &[
                ("provider", self.upstream.provider.word()),
                ("status", &status),
            ],
        );
        match sent {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) if e.is_timeout() => Err(Problem::Timeout),
            Ok(Err(e)) => {
                log::warn!(
                    "gateway: the {} upstream failed: {e}",
                    self.upstream.provider.word()
                );
                Err(Problem::BadGateway)
            }
            Err(_) => Err(Problem::Timeout),
        }
    }

    pub(crate) async fn answer(
        &self,
        answer: Result<reqwest::Response, Problem>,
        mut call: Call,
        stream: bool,
        strip_usage: bool,
        extra: Vec<(String, String)>,
    ) -> Response<Body> {
        let word = self.upstream.provider.word();
        let upstream = match answer {
            Ok(r) => r,
            Err(problem) => {
                call.release().await;
                let message = match problem {
                    Problem::Timeout => format!("The {word} upstream did not answer in time"),
                    _ => format!("The {word} upstream could not be reached"),
                };
                return problem.response(self.endpoint.shape, &message);
            }
        };
        let status = upstream.status();
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
        if !status.is_success() {
            // The provider refused or failed: it used nothing we can bill.
            call.release().await;
            let body = read_bounded(upstream, self.max_answer, self.timeout).await;
            *response.body_mut() = Body::from(body.unwrap_or_default());
            return response;
        }
        set_headers(&mut response, extra);
        if stream {
            *response.body_mut() = self.relay(upstream, call, strip_usage);
            return response;
        }
        self.plain(upstream, call, response).await
    }

    /// A plain answer: read whole (up to `gateway.max_answer_bytes`), billed from its
    /// reported usage, passed on as it came.
    async fn plain(
        &self,
        upstream: reqwest::Response,
        call: Call,
        mut response: Response<Body>,
    ) -> Response<Body> {
        let word = self.upstream.provider.word();
        let failed = match read_bounded(upstream, self.max_answer, self.timeout).await {
            Ok(bytes) => {
                let reported = serde_json::from_slice::<Value>(&bytes)
                    .ok()
                    .and_then(|v| reported_usage(&v, self.endpoint.api));
                if reported.is_none() {
                    log::warn!("gateway: the {word} answer reported no usage; billing the prompt");
                }
                let usage = call.usage(reported, "");
                call.bill(usage, "complete").await;
                *response.body_mut() = Body::from(bytes);
                return response;
            }
            Err(failed) => failed,
        };
        let (problem, ended, message) = match failed {
            Unread::TooLarge => {
                // The provider wrote it: billed as the output maximum it was sent with.
                let output = call.ticket().fitted().and_then(|f| f.max_output_tokens);
                let reported = ReportedUsage {
                    output_tokens: output.unwrap_or(0),
                    ..ReportedUsage::default()
                };
                let usage = call.usage(Some(reported), "");
                call.bill(usage, "answer_too_large").await;
                let message = format!(
                    "The {word} upstream's answer is larger than {} bytes \
                     (gateway.max_answer_bytes)",
                    self.max_answer
                );
                log::warn!("gateway: {message}");
                return Problem::AnswerTooLarge.response(self.endpoint.shape, &message);
            }
            Unread::Timeout => (Problem::Timeout, "upstream_broke", "did not finish"),
            Unread::Broke => (Problem::BadGateway, "upstream_broke", "broke off"),
        };
        let usage = call.usage(None, "");
        call.bill(usage, ended).await;
        let message = format!("The {word} upstream {message} its answer");
        problem.response(self.endpoint.shape, &message)
    }

    /// The streamed answer relayed as it arrives, billed when it ends. A stream the
    /// upstream breaks off, or whose event outgrows `gateway.max_event_bytes`, ends with an
    /// error event in the endpoint's shape (what came before it passed on whole).
    fn relay(&self, upstream: reqwest::Response, call: Call, strip_usage: bool) -> Body {
        let endpoint = self.endpoint;
        let relay = Relay::new(
            call,
            endpoint.api,
            endpoint.framing,
            strip_usage,
            self.max_event,
        );
        let source = upstream.bytes_stream().boxed();
        let (timeout, max_event) = (self.timeout, self.max_event);
        let word = self.upstream.provider.word();
        let events = futures::stream::unfold(
            (source, relay, false),
            move |(mut source, mut relay, done)| async move {
                if done {
                    return None;
                }
                let (out, ended, message) = loop {
                    match tokio::time::timeout(timeout, source.next()).await {
                        Ok(Some(Ok(chunk))) => match relay.feed(&chunk) {
                            (out, Ok(())) if out.is_empty() => continue,
                            (out, Ok(())) => return Some((Ok(out), (source, relay, false))),
                            (out, Err(_)) => {
                                let message = format!(
                                    "The {word} upstream sent an event larger than \
                                     {max_event} bytes (gateway.max_event_bytes): the answer \
                                     ends here"
                                );
                                break (out, "event_too_large", message);
                            }
                        },
                        Ok(None) => {
                            let rest = relay.rest();
                            relay.finish("complete").await;
                            if rest.is_empty() {
                                return None;
                            }
                            return Some((Ok(rest), (source, relay, true)));
                        }
                        Ok(Some(Err(_))) => {
                            let message = format!("The {word} upstream broke off its answer");
                            break (Bytes::new(), "upstream_broke", message);
                        }
                        Err(_) => {
                            let message = format!(
                                "The {word} upstream sent nothing for {} s: the answer ends \
                                 here",
                                timeout.as_secs()
                            );
                            break (Bytes::new(), "upstream_broke", message);
                        }
                    }
                };
                log::warn!("gateway: {message}");
                relay.finish(ended).await;
                let error = stream_error(endpoint.shape, ended, &message);
                let out = Bytes::from([&out[..], &error[..]].concat());
                Some((Ok::<_, std::io::Error>(out), (source, relay, true)))
            },
        );
        Body::from_stream(events)
    }
}

/// The provider's status and headers (without those of its connection), for the answer.
pub(crate) fn head(upstream: &reqwest::Response) -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() =
        StatusCode::from_u16(upstream.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    for (name, value) in upstream.headers() {
        if !HOP.contains(&name.as_str()) {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_str().as_bytes()),
                HeaderValue::from_bytes(value.as_bytes()),
            ) {
                response.headers_mut().insert(n, v);
            }
        }
    }
    response
}

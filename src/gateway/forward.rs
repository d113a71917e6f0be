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
use super::shape::{set_headers, Endpoint, Problem};
use super::upstream;
use crate::ceiling::reported_usage;
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
            let body = tokio::time::timeout(self.timeout, upstream.bytes()).await;
            *response.body_mut() = Body::from(body.ok().and_then(Result::ok).unwrap_or_default());
            return response;
        }
        set_headers(&mut response, extra);
        if stream {
            *response.body_mut() = self.relay(upstream, call, strip_usage);
            return response;
        }
        self.plain(upstream, call, response).await
    }

    /// A plain answer: read whole, billed from its reported usage, passed on as it came.
    async fn plain(
        &self,
        upstream: reqwest::Response,
        call: Call,
        mut response: Response<Body>,
    ) -> Response<Body> {
        let word = self.upstream.provider.word();
        match tokio::time::timeout(self.timeout, upstream.bytes()).await {
            Ok(Ok(bytes)) => {
                let reported = serde_json::from_slice::<Value>(&bytes)
                    .ok()
                    .and_then(|v| reported_usage(&v, self.endpoint.api));
                if reported.is_none() {
                    log::warn!("gateway: the {word} answer reported no usage; billing the prompt");
                }
                let usage = call.usage(reported, "");
                call.bill(usage, "complete").await;
                *response.body_mut() = Body::from(bytes);
                response
            }
            failed => {
                let problem = if failed.is_err() {
                    Problem::Timeout
                } else {
                    Problem::BadGateway
                };
                let usage = call.usage(None, "");
                call.bill(usage, "upstream_broke").await;
                problem.response(
                    self.endpoint.shape,
                    &format!("The {word} upstream broke off its answer"),
                )
            }
        }
    }

    /// The streamed answer relayed as it arrives, billed when it ends.
    fn relay(&self, upstream: reqwest::Response, call: Call, strip_usage: bool) -> Body {
        let relay = Relay::new(call, self.endpoint.api, self.endpoint.framing, strip_usage);
        let source = upstream.bytes_stream().boxed();
        let timeout = self.timeout;
        let events = futures::stream::unfold(
            (source, relay, false),
            move |(mut source, mut relay, done)| async move {
                if done {
                    return None;
                }
                loop {
                    match tokio::time::timeout(timeout, source.next()).await {
                        Ok(Some(Ok(chunk))) => {
                            let out = relay.feed(&chunk);
                            if !out.is_empty() {
                                return Some((Ok(out), (source, relay, false)));
                            }
                        }
                        Ok(None) => {
                            let rest = relay.rest();
                            relay.finish("complete").await;
                            if rest.is_empty() {
                                return None;
                            }
                            return Some((Ok(rest), (source, relay, true)));
                        }
                        _ => {
                            relay.finish("upstream_broke").await;
                            // An error aborts the connection at once: let the server flush
                            // what was already passed on first (it does when we wait).
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            let error = std::io::Error::other("the upstream broke off its answer");
                            return Some((Err(error), (source, relay, true)));
                        }
                    }
                }
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

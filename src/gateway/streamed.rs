//! A streamed answer relayed as it arrives; and, when its client goes away before it was
//! billed, read on in the background to its end, where the provider reports its usage, so the
//! call is billed what the provider bills (hidden reasoning included), not only the text the
//! client saw.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures::StreamExt;

use super::forward::Forward;
use super::proxy::{App, Running};
use super::relay::{Call, Relay};
use super::shape::stream_error;

impl Forward<'_> {
    /// The streamed answer relayed as it arrives, billed when it ends. A stream the
    /// upstream breaks off, or whose event outgrows `gateway.max_event_bytes`, ends with an
    /// error event in the endpoint's shape (what came before it passed on whole). A stream
    /// whose client goes away is read on to its end (its usage event), bounded, and billed
    /// from it ([`Streaming`]).
    pub(super) fn relay(&self, upstream: reqwest::Response, call: Call, strip_usage: bool) -> Body {
        let endpoint = self.endpoint;
        let relay = Relay::new(
            call,
            endpoint.api,
            endpoint.framing,
            strip_usage,
            self.max_event,
        );
        let (timeout, max_event) = (self.timeout, self.max_event);
        let streaming = Streaming {
            app: self.app.clone(),
            // Fused: a stream that ended, read on, ends at once.
            source: Some(upstream.bytes_stream().fuse().boxed()),
            relay: Some(relay),
            timeout,
            max_answer: self.max_answer,
        };
        let word = self.upstream.provider.as_str();
        let events = futures::stream::unfold(
            (streaming, false),
            move |(mut streaming, done)| async move {
                if done {
                    return None;
                }
                let (Some(source), Some(relay)) =
                    (streaming.source.as_mut(), streaming.relay.as_mut())
                else {
                    return None;
                };
                let (out, ended, message) = loop {
                    match tokio::time::timeout(timeout, source.next()).await {
                        Ok(Some(Ok(chunk))) => match relay.feed(&chunk) {
                            (out, Ok(())) if out.is_empty() => continue,
                            (out, Ok(())) => return Some((Ok(out), (streaming, false))),
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
                            return Some((Ok(rest), (streaming, true)));
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
                // Nothing more is read, even if the client leaves while this bills.
                streaming.source = None;
                relay.finish(ended).await;
                let error = stream_error(endpoint.shape, ended, &message);
                let out = Bytes::from([&out[..], &error[..]].concat());
                Some((Ok::<_, std::io::Error>(out), (streaming, true)))
            },
        );
        Body::from_stream(events)
    }
}

/// A streamed answer's upstream and its relay. Dropped before the call was billed (its
/// client went away: closed the connection, or stopped reading past the idle timeout), the
/// upstream is read on in the background, nothing more relayed, until it ends (the
/// provider's usage event comes last), for `gateway.upstream_timeout_seconds` at most
/// between two pieces and `gateway.max_answer_bytes` in all; the call is then billed from
/// the usage the provider reported, and only without one from the text it wrote (so a
/// client leaving once the visible answer is complete is still billed its hidden reasoning).
pub(super) struct Streaming {
    pub(super) app: Arc<App>,
    pub(super) source: Option<futures::stream::BoxStream<'static, reqwest::Result<Bytes>>>,
    pub(super) relay: Option<Relay>,
    pub(super) timeout: Duration,
    pub(super) max_answer: usize,
}

impl Drop for Streaming {
    fn drop(&mut self) {
        let (Some(source), Some(relay)) = (self.source.take(), self.relay.take()) else {
            return;
        };
        if !relay.unbilled() {
            return;
        }
        // Off a runtime (the serving thread's is gone) the relay bills what was delivered
        // as it drops.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Counted as a running call: a stop's drain waits for its bill.
        let running = Running::new(self.app.clone());
        let (timeout, max_answer) = (self.timeout, self.max_answer);
        runtime.spawn(async move {
            let _running = running;
            read_on(source, relay, timeout, max_answer).await;
        });
    }
}

/// Reads a stream whose client went away on to its end (bounded: see [`Streaming`]), then
/// bills it as `client_disconnected`.
async fn read_on(
    mut source: futures::stream::BoxStream<'static, reqwest::Result<Bytes>>,
    mut relay: Relay,
    timeout: Duration,
    max_answer: usize,
) {
    let mut read = 0usize;
    loop {
        match tokio::time::timeout(timeout, source.next()).await {
            Ok(Some(Ok(chunk))) => {
                read += chunk.len();
                let (_, fed) = relay.feed(&chunk);
                // Its last event read, the usage is known: no need to wait for the close.
                if fed.is_err() || read > max_answer || !relay.unbilled() {
                    break;
                }
            }
            Ok(None) => {
                relay.rest();
                break;
            }
            Ok(Some(Err(_))) | Err(_) => break,
        }
    }
    drop(source);
    relay.finish("client_disconnected").await;
}

//! An admitted call on its way back: billing it once (from the usage the provider reports,
//! else from what was delivered), and relaying a streamed answer event by event while
//! reading the usage and the delivered text out of it.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::framing::{Framer, TooLarge};
use super::otel::{CallSpan, Otel};
use super::otel_ids::now_ns;
use super::shape::Framing;
use super::stream_errors::redacted;
use super::stream_events::{delta_text, is_done, is_last, payload};
use crate::ceiling::{reported_usage, Api, Encoding, ReportedUsage};
use crate::guard::engine::settle::ticket::{BillInfo, Ticket, Usage};

/// Texts longer than this are counted off the serving thread.
pub(crate) const OFFLOAD_BYTES: usize = 64 * 1024;

/// An admitted call: its ticket, settled once by `bill` or `release`. Dropped unsettled
/// (the caller gave up before the provider answered), its ticket releases itself.
pub(crate) struct Call {
    ticket: Ticket,
    info: BillInfo,
    /// The OTLP export and the call's span, when `[gateway.otel]` is configured.
    span: Option<Box<(Arc<Otel>, CallSpan)>>,
}

impl Call {
    pub(crate) fn new(ticket: Ticket, info: BillInfo) -> Self {
        Call {
            ticket,
            info,
            span: None,
        }
    }

    /// The call with its OpenTelemetry span, for its bill's.
    pub(crate) fn traced(mut self, span: Option<(Arc<Otel>, CallSpan)>) -> Self {
        self.span = span.map(Box::new);
        self
    }

    pub(crate) fn ticket(&self) -> &Ticket {
        &self.ticket
    }

    /// Sets the provider's request id recorded with the bill.
    pub(crate) fn set_request_id(&mut self, id: Option<String>) {
        if id.is_some() {
            self.info.request_id = id;
        }
    }

    /// Bills `usage`; `ended` (`complete`, `client_disconnected`, `upstream_broke`,
    /// `event_too_large`, `answer_too_large`) goes into the ledger row's metadata.
    pub(crate) async fn bill(self, usage: Usage, ended: &str) {
        let mut info = self.info.clone();
        if let Some(Value::Object(m)) = info.metadata.as_mut() {
            m.insert("ended".into(), Value::from(ended));
        }
        let start_ns = now_ns();
        match self.ticket.bill_with(usage, info).await {
            Ok(Some(billed)) => {
                if let Some((otel, span)) = self.span.as_deref() {
                    otel.billed(span, start_ns, &billed);
                }
            }
            Ok(None) => {}
            Err(e) => log::warn!("gateway: billing ticket {} failed: {e}", self.ticket.id()),
        }
    }

    /// Gives the reservation back: the provider did no billable work.
    pub(crate) async fn release(self) {
        self.ticket.release().await;
    }

    /// The encoding the prompt was counted with.
    fn encoding(&self) -> Encoding {
        self.ticket
            .prompt()
            .map(|p| p.encoding)
            .unwrap_or(Encoding::O200kBase)
    }

    /// What to bill: the provider's report where it has one; else (no report, or a count
    /// `reported_usage` read as unknown: 0) the prompt as counted at admission and the
    /// delivered text counted (a stream that ended early, a plain answer without usage).
    pub(crate) fn usage(&self, reported: Option<ReportedUsage>, delivered: &str) -> Usage {
        self.usage_of(reported, self.encoding().count(delivered))
    }

    /// [`Call::usage`], a `delivered` text longer than [`OFFLOAD_BYTES`] counted on the
    /// runtime's blocking pool (the serving thread goes on serving meanwhile).
    pub(crate) async fn usage_counted(
        &self,
        reported: Option<ReportedUsage>,
        delivered: String,
    ) -> Usage {
        if delivered.len() <= OFFLOAD_BYTES {
            return self.usage(reported, &delivered);
        }
        let encoding = self.encoding();
        let counted = crate::runtime::offload(move || encoding.count(&delivered)).await;
        self.usage_of(reported, counted)
    }

    /// What to bill, the delivered text being `delivered` tokens.
    fn usage_of(&self, reported: Option<ReportedUsage>, delivered: u64) -> Usage {
        let r = reported.unwrap_or_default();
        let prompt = self.ticket.prompt().map(|p| p.tokens).unwrap_or(0);
        let input = if r.input_tokens > 0 {
            r.input_tokens
        } else {
            prompt
        };
        let output = r.output_tokens.max(delivered);
        Usage {
            input_tokens: input,
            output_tokens: output,
            cached_input_tokens: r.cached_input_tokens.min(input),
            reasoning_tokens: r.reasoning_tokens.min(output),
            cost_micros: None,
            compute_ms: None,
        }
    }
}

/// Reads a streamed answer event by event: passes each complete event on (holding back a
/// partial one until it completes), keeps the usage reported and the text delivered, and
/// bills the call when the stream ends, breaks, or is dropped (the client went away).
pub(crate) struct Relay {
    framer: Framer,
    reading: Reading,
    call: Option<Call>,
}

/// What the events read so far say.
struct Reading {
    api: Api,
    framing: Framing,
    /// Drop the usage-only chunk the gateway asked for (`include_usage`) on the caller's
    /// behalf: the caller did not ask for it.
    strip_usage: bool,
    reported: Option<ReportedUsage>,
    delivered: String,
    /// The stream's last event was read: what the provider reports is complete.
    ended: bool,
}

fn merge(a: Option<ReportedUsage>, b: ReportedUsage) -> ReportedUsage {
    let a = a.unwrap_or_default();
    ReportedUsage {
        input_tokens: a.input_tokens.max(b.input_tokens),
        output_tokens: a.output_tokens.max(b.output_tokens),
        cached_input_tokens: a.cached_input_tokens.max(b.cached_input_tokens),
        reasoning_tokens: a.reasoning_tokens.max(b.reasoning_tokens),
    }
}

impl Relay {
    /// A relay of `call`'s stream whose events may be `max_event` bytes at most.
    pub(crate) fn new(
        call: Call,
        api: Api,
        framing: Framing,
        strip_usage: bool,
        max_event: usize,
    ) -> Self {
        Relay {
            framer: Framer::new(framing, max_event),
            reading: Reading {
                api,
                framing,
                strip_usage,
                reported: None,
                delivered: String::new(),
                ended: false,
            },
            call: Some(call),
        }
    }

    /// Takes a chunk from the provider; returns the complete events to pass on, and
    /// `Err(TooLarge)` (beside the events before it) once an event outgrows the bound.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> (Bytes, Result<(), TooLarge>) {
        self.framer.push(chunk);
        let mut out = Vec::new();
        loop {
            match self.framer.next_event() {
                Ok(Some(event)) => match self.reading.inspect(event) {
                    Passed::Whole => out.extend_from_slice(event),
                    Passed::Nothing => {}
                    Passed::Rewritten(bytes) => out.extend_from_slice(&bytes),
                },
                Ok(None) => return (Bytes::from(out), Ok(())),
                Err(e) => return (Bytes::from(out), Err(e)),
            }
        }
    }

    /// Whatever is left in the buffer (a last event without its blank line).
    pub(crate) fn rest(&mut self) -> Bytes {
        let rest = self.framer.take_rest();
        if rest.is_empty() {
            return Bytes::new();
        }
        match self.reading.inspect(&rest) {
            Passed::Rewritten(bytes) => Bytes::from(bytes),
            // A last event without its blank line goes on as it came, unless an error.
            Passed::Whole | Passed::Nothing => Bytes::from(rest),
        }
    }

    /// Whether the call is still to be billed and its stream's last event not read yet (a
    /// relay dropped so is read on to learn the provider's usage: `streamed.rs`).
    pub(crate) fn unbilled(&self) -> bool {
        self.call.is_some() && !self.reading.ended
    }

    /// Bills the call: `ended` says how the stream ended. The call stays in the relay while
    /// a long delivered text is counted: a relay dropped meanwhile (its client gone) still
    /// bills it.
    pub(crate) async fn finish(&mut self, ended: &str) {
        let Some(call) = self.call.as_ref() else {
            return;
        };
        let delivered = self.reading.delivered.clone();
        let usage = call.usage_counted(self.reading.reported, delivered).await;
        if let Some(call) = self.call.take() {
            call.bill(usage, ended).await;
        }
    }
}

impl Reading {
    /// Reads one event; says what of it is passed on.
    fn inspect(&mut self, event: &[u8]) -> Passed {
        let Some(value) = payload(event, self.framing) else {
            self.ended |= self.framing == Framing::Sse && is_done(event);
            return Passed::Whole;
        };
        self.ended |= is_last(&value, self.api);
        if let Some(bytes) = redacted(event, &value, self.framing) {
            return Passed::Rewritten(bytes);
        }
        if let Some(u) = reported_usage(&value, self.api) {
            self.reported = Some(merge(self.reported, u));
            let usage_only = value
                .get("choices")
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty);
            if self.strip_usage && usage_only {
                return Passed::Nothing;
            }
        }
        delta_text(&value, self.api, &mut self.delivered);
        Passed::Whole
    }
}

/// What of an event is passed on to the caller.
enum Passed {
    Whole,
    /// Nothing: the usage-only chunk the gateway asked for on the caller's behalf.
    Nothing,
    /// An error event with the provider's message replaced (`stream_errors`).
    Rewritten(Vec<u8>),
}

/// A stream dropped before it ended (the client went away): bills what was delivered.
impl Drop for Relay {
    fn drop(&mut self) {
        let Some(call) = self.call.take() else {
            return;
        };
        let reported = self.reading.reported;
        let delivered = std::mem::take(&mut self.reading.delivered);
        if delivered.len() <= OFFLOAD_BYTES {
            let usage = call.usage(reported, &delivered);
            crate::runtime::run_or_spawn(async move {
                call.bill(usage, "client_disconnected").await;
            });
            return;
        }
        // A long text is counted on the shared runtime's blocking pool, not here.
        crate::runtime::shared().spawn(async move {
            let usage = call.usage_counted(reported, delivered).await;
            call.bill(usage, "client_disconnected").await;
        });
    }
}

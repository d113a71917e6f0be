//! OpenTelemetry for the gateway (`[gateway.otel]`): the same instruments and spans as the
//! Python `usage_guard.otel.instrument` (docs/opentelemetry.md), recorded as calls are
//! admitted and billed and exported through OTLP/HTTP (JSON) by a thread of their own on a
//! timer. Recording takes one short lock and never waits for the collector: spans wait in a
//! queue of `gateway.otel.max_queue` (past it new ones are dropped and counted), a collector
//! that is down or slow costs only the export thread its `export_timeout_seconds`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

use axum::http::HeaderMap;

use super::otel_ids::{now_ns, random_bytes, trace_parent};
use super::shape::Endpoint;
use crate::guard::domain::refusal::Refusal;
use crate::guard::engine::settle::billing::Billed;
use crate::guard::engine::settle::ticket::Ticket;
use crate::lock::Mutex;

/// An attribute's value.
#[derive(Debug, Clone, PartialEq, PartialOrd)]
pub(crate) enum Attr {
    Str(String),
    Int(i64),
}

/// Attributes, by key.
pub(crate) type Attrs = Vec<(String, Attr)>;

/// Bucket bounds of `gen_ai.client.token.usage` (the GenAI conventions' advice).
pub(crate) const TOKEN_BOUNDS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
/// Bucket bounds of `usage_guard.admission.duration`, seconds.
pub(crate) const SECONDS_BOUNDS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// One histogram data point, cumulative.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hist {
    pub(crate) buckets: Vec<u64>,
    pub(crate) count: u64,
    pub(crate) sum: f64,
}

impl Hist {
    fn record(&mut self, bounds: &[f64], value: f64) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; bounds.len() + 1];
        }
        let i = bounds
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(bounds.len());
        self.buckets[i] += 1;
        self.count += 1;
        self.sum += value;
    }
}

/// A finished span.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub(crate) name: &'static str,
    pub(crate) trace_id: [u8; 16],
    pub(crate) span_id: [u8; 8],
    pub(crate) parent: Option<[u8; 8]>,
    pub(crate) start_ns: u64,
    pub(crate) end_ns: u64,
    pub(crate) attributes: Attrs,
    /// `Some(message)`: status ERROR.
    pub(crate) error: Option<String>,
}

/// Values by attribute set.
pub(crate) type Points<T> = BTreeMap<Vec<(String, String)>, T>;

/// What the instruments hold between exports (cumulative since the gateway started), and
/// the spans waiting.
#[derive(Debug, Default)]
pub(crate) struct Recorded {
    /// Counters by instrument name and attribute set.
    pub(crate) sums: BTreeMap<&'static str, Points<f64>>,
    /// Histograms by instrument name and attribute set.
    pub(crate) hists: BTreeMap<&'static str, Points<Hist>>,
    pub(crate) spans: Vec<Span>,
}

/// The gateway's OpenTelemetry: what calls record, and the export thread's handle.
pub(crate) struct Otel {
    pub(crate) recorded: Mutex<Recorded>,
    pub(crate) max_queue: usize,
    /// Spans dropped because the queue was full.
    pub(crate) dropped: AtomicU64,
    pub(crate) started_ns: u64,
    pub(crate) exporter: Mutex<Option<Exporter>>,
}

/// The export thread's handle: stopping it ends the thread after a last export.
pub(crate) struct Exporter {
    pub(crate) stop: Sender<()>,
    /// Closed when the thread ends.
    pub(crate) done: Receiver<()>,
    /// How long the last export may take (its two requests).
    pub(crate) last: Duration,
}

/// A call's place in the caller's trace and its attributes, kept from admission to bill.
#[derive(Debug, Clone)]
pub(crate) struct CallSpan {
    trace_id: [u8; 16],
    parent: Option<[u8; 8]>,
    /// `gen_ai.*`: the instruments' attributes.
    base: Vec<(String, String)>,
    /// The span's attributes (the call's, and once admitted, the ticket's).
    attributes: Attrs,
}

/// `gen_ai.provider.name` and `gen_ai.operation.name` of an endpoint (as the Python
/// layer names its provider words).
fn provider_names(endpoint: Endpoint) -> (&'static str, &'static str) {
    let provider = match endpoint.provider().as_str() {
        "gemini" => "gcp.gemini",
        word => word,
    };
    let path = endpoint.path;
    let operation = if path.contains("embed") {
        "embeddings"
    } else if path == "/v1/completions" || path == "/api/generate" {
        "text_completion"
    } else {
        "chat"
    };
    (provider, operation)
}

fn str_attr(key: &str, value: impl Into<String>) -> (String, Attr) {
    (key.to_string(), Attr::Str(value.into()))
}

fn int_attr(key: &str, value: u64) -> (String, Attr) {
    (
        key.to_string(),
        Attr::Int(i64::try_from(value).unwrap_or(i64::MAX)),
    )
}

impl Otel {
    /// Exports what is left and ends the export thread, waiting for that last export at
    /// most its timeout (a collector that is down never holds a shutdown longer).
    pub(crate) fn stop(&self) {
        let exporter = self.exporter.lock().take();
        if let Some(exporter) = exporter {
            let _ = exporter.stop.send(());
            let _ = exporter.done.recv_timeout(exporter.last);
        }
    }

    /// A call on `endpoint` for `user` on `model`, in the caller's trace (`traceparent`).
    pub(crate) fn call(
        &self,
        endpoint: Endpoint,
        headers: &HeaderMap,
        user: &str,
        model: &str,
    ) -> CallSpan {
        let (trace_id, parent) = match trace_parent(headers) {
            Some((t, s)) => (t, Some(s)),
            None => (random_bytes(), None),
        };
        let (provider, operation) = provider_names(endpoint);
        let base: Vec<(String, String)> = vec![
            ("gen_ai.operation.name".into(), operation.into()),
            ("gen_ai.provider.name".into(), provider.into()),
            ("gen_ai.request.model".into(), model.into()),
        ];
        let mut attributes: Attrs = base
            .iter()
            .map(|(k, v)| (k.clone(), Attr::Str(v.clone())))
            .collect();
        attributes.push(str_attr("usage_guard.user", user));
        CallSpan {
            trace_id,
            parent,
            base,
            attributes,
        }
    }

    fn add(
        &self,
        recorded: &mut Recorded,
        name: &'static str,
        attrs: Vec<(String, String)>,
        n: f64,
    ) {
        *recorded
            .sums
            .entry(name)
            .or_default()
            .entry(attrs)
            .or_default() += n;
    }

    fn push_span(&self, recorded: &mut Recorded, span: Span) {
        if recorded.spans.len() < self.max_queue {
            recorded.spans.push(span);
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records an admission that started at `start_ns` and took `took`: the ticket, or the
    /// refusal, or (`Err(None)`) another error. Answers the call's span for its bill.
    pub(crate) fn admitted(
        &self,
        mut call: CallSpan,
        start_ns: u64,
        took: Duration,
        outcome: Result<&Ticket, Option<&Refusal>>,
    ) -> CallSpan {
        let mut span = Span {
            name: "usage_guard.admit",
            trace_id: call.trace_id,
            span_id: random_bytes(),
            parent: call.parent,
            start_ns,
            end_ns: start_ns.saturating_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX)),
            attributes: call.attributes.clone(),
            error: None,
        };
        let mut recorded = self.recorded.lock();
        recorded
            .hists
            .entry("usage_guard.admission.duration")
            .or_default()
            .entry(call.base.clone())
            .or_default()
            .record(&SECONDS_BOUNDS, took.as_secs_f64());
        match outcome {
            Ok(ticket) => {
                let admitted = admitted_attributes(ticket);
                span.attributes.extend(admitted.iter().cloned());
                call.attributes.extend(admitted);
                let mut attrs = call.base.clone();
                attrs.push(("outcome".into(), "admitted".into()));
                self.add(&mut recorded, "usage_guard.admissions", attrs, 1.0);
                let tokens = ticket
                    .reserved()
                    .into_iter()
                    .find(|(m, _)| m.figure_key() == "tokens");
                if let Some((_, n)) = tokens.filter(|(_, n)| *n > 0) {
                    self.add(
                        &mut recorded,
                        "usage_guard.reserved.tokens",
                        call.base.clone(),
                        n as f64,
                    );
                }
            }
            Err(Some(refusal)) => {
                let reason = refusal.reason.code().to_string();
                span.attributes.extend(refusal_attributes(refusal));
                span.error = Some(reason.clone());
                let mut attrs = call.base.clone();
                attrs.push(("outcome".into(), "refused".into()));
                attrs.push(("usage_guard.refused.reason".into(), reason));
                attrs.sort();
                self.add(&mut recorded, "usage_guard.admissions", attrs, 1.0);
            }
            Err(None) => span.error = Some("admission failed".into()),
        }
        self.push_span(&mut recorded, span);
        call
    }

    /// Records a bill of `call` that started at `start_ns`.
    pub(crate) fn billed(&self, call: &CallSpan, start_ns: u64, billed: &Billed) {
        let mut span = Span {
            name: "usage_guard.bill",
            trace_id: call.trace_id,
            span_id: random_bytes(),
            parent: call.parent,
            start_ns,
            end_ns: now_ns().max(start_ns),
            attributes: call.attributes.clone(),
            error: None,
        };
        span.attributes.extend([
            int_attr("gen_ai.usage.input_tokens", billed.input_tokens),
            int_attr("gen_ai.usage.output_tokens", billed.output_tokens),
            int_attr(
                "usage_guard.billed.reasoning_tokens",
                billed.reasoning_tokens,
            ),
            int_attr("usage_guard.billed.cost_micros", billed.cost_micros),
        ]);
        let mut recorded = self.recorded.lock();
        for (kind, n) in [
            ("input", billed.input_tokens),
            ("output", billed.output_tokens),
        ] {
            let mut attrs = call.base.clone();
            attrs.push(("gen_ai.token.type".into(), kind.into()));
            attrs.sort();
            recorded
                .hists
                .entry("gen_ai.client.token.usage")
                .or_default()
                .entry(attrs)
                .or_default()
                .record(&TOKEN_BOUNDS, n as f64);
        }
        let cost = billed.cost_micros as f64 / 1_000_000.0;
        self.add(
            &mut recorded,
            "usage_guard.billed.cost",
            call.base.clone(),
            cost,
        );
        self.push_span(&mut recorded, span);
    }
}

fn admitted_attributes(ticket: &Ticket) -> Attrs {
    let source = ticket.source();
    let mut out = vec![
        str_attr("usage_guard.source.type", source.kind.as_str()),
        str_attr("usage_guard.source.id", &*source.id),
        str_attr("usage_guard.ticket", ticket.id()),
    ];
    for (metric, amount) in ticket.reserved() {
        out.push(int_attr(
            &format!("usage_guard.reserved.{}", metric.figure_key()),
            amount,
        ));
    }
    let ceiling = ticket.ceiling();
    if let Some(tokens) = ceiling.tokens {
        out.push(int_attr("usage_guard.ceiling.tokens", tokens));
    }
    out.push(int_attr(
        "usage_guard.ceiling.max_output_tokens",
        ceiling.max_output_tokens,
    ));
    out
}

fn refusal_attributes(refusal: &Refusal) -> Attrs {
    let mut out = vec![str_attr(
        "usage_guard.refused.reason",
        refusal.reason.code(),
    )];
    if let Some(t) = refusal.limit_type {
        out.push(str_attr("usage_guard.refused.limit_type", t.name()));
    }
    if let Some(m) = refusal.metric {
        out.push(str_attr("usage_guard.refused.metric", m.as_str()));
    }
    if let Some(w) = refusal.window {
        out.push(str_attr("usage_guard.refused.window", w.to_string()));
    }
    if let Some(a) = refusal.amount {
        out.push(int_attr("usage_guard.refused.amount", a));
    }
    out
}

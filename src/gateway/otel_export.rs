//! The gateway's OTLP/HTTP export: a thread of its own that every
//! `gateway.otel.export_interval_seconds` takes the spans waiting and the instruments'
//! cumulative values (with the guard's and the gateway's metric families) and POSTs them as
//! OTLP JSON to `<endpoint>/v1/traces` and `<endpoint>/v1/metrics`, each within
//! `export_timeout_seconds`. A collector that is down or slow loses that export's spans
//! (metrics are cumulative: the next export carries them); no call ever waits for it.

use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{json, Value};

use super::metrics::Metrics;
use super::otel::{Attr, Exporter, Hist, Otel, Recorded, Span, SECONDS_BOUNDS, TOKEN_BOUNDS};
use super::otel_ids::now_ns;
use crate::guard::domain::policy::GatewayOtel;
use crate::guard::engine::guard::Guard;
use crate::guard::engine::observe::metrics::{MetricFamily, MetricKind};
use crate::lock::Mutex;

/// The gateway's OpenTelemetry when `settings` names an endpoint: exported by a thread of
/// its own from now on.
pub(crate) fn start(
    settings: &GatewayOtel,
    guard: Guard,
    metrics: Arc<Metrics>,
) -> Option<Arc<Otel>> {
    let endpoint = settings.endpoint.clone()?;
    let otel = Arc::new(Otel {
        recorded: Mutex::new(Recorded::default()),
        max_queue: usize::try_from(settings.max_queue).unwrap_or(usize::MAX),
        dropped: AtomicU64::new(0),
        started_ns: now_ns(),
        exporter: Mutex::new(None),
    });
    let exporter = spawn(
        Arc::downgrade(&otel),
        guard,
        metrics,
        endpoint,
        Duration::from_secs(settings.export_interval_seconds),
        Duration::from_secs(settings.export_timeout_seconds),
    );
    *otel.exporter.lock() = exporter;
    Some(otel)
}

/// Each instrument's unit and description (the names of docs/opentelemetry.md).
fn describe(name: &str) -> (&'static str, &'static str) {
    match name {
        "gen_ai.client.token.usage" => ("{token}", "Tokens billed per call"),
        "usage_guard.admissions" => ("{call}", "Admissions, by outcome"),
        "usage_guard.reserved.tokens" => ("{token}", "Tokens held at admission"),
        "usage_guard.billed.cost" => ("USD", "Cost billed"),
        "usage_guard.admission.duration" => (
            "s",
            "Time to admit a call, the store's round trips included",
        ),
        _ => ("", ""),
    }
}

/// Starts the export thread; `None` (logged) when it cannot start.
fn spawn(
    otel: Weak<Otel>,
    guard: Guard,
    metrics: Arc<Metrics>,
    endpoint: String,
    interval: Duration,
    timeout: Duration,
) -> Option<Exporter> {
    let (stop, stopping) = mpsc::channel::<()>();
    let (ended, done) = mpsc::channel::<()>();
    let started = crate::runtime::spawn_thread("usage-guard-otel".into(), move || {
        // Dropped when the thread ends, however it ends: `done` is then closed.
        let _ended = ended;
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => return log::error!("gateway: OTLP export cannot start: {e}"),
        };
        let client = match reqwest::Client::builder().timeout(timeout).build() {
            Ok(c) => c,
            Err(e) => return log::error!("gateway: OTLP export cannot start: {e}"),
        };
        let mut failing = false;
        loop {
            let last = !matches!(
                stopping.recv_timeout(interval),
                Err(RecvTimeoutError::Timeout)
            );
            let Some(otel) = otel.upgrade() else { return };
            let (metrics_body, traces_body) = bodies(&otel, &guard, &metrics);
            drop(otel);
            let sent = runtime.block_on(async {
                let m = post(&client, &endpoint, "/v1/metrics", metrics_body).await;
                let t = match traces_body {
                    Some(body) => post(&client, &endpoint, "/v1/traces", body).await,
                    None => Ok(()),
                };
                m.and(t)
            });
            match sent {
                Err(e) if !failing => {
                    failing = true;
                    log::warn!("gateway: OTLP export to {endpoint} failed (data dropped): {e}");
                }
                Err(e) => log::debug!("gateway: OTLP export to {endpoint} failed: {e}"),
                Ok(()) => failing = false,
            }
            if last {
                return;
            }
        }
    });
    match started {
        Ok(_) => Some(Exporter {
            stop,
            done,
            last: timeout * 2,
        }),
        Err(e) => {
            log::error!("gateway: OTLP export thread cannot start: {e}");
            None
        }
    }
}

async fn post(
    client: &reqwest::Client,
    endpoint: &str,
    path: &str,
    body: Value,
) -> Result<(), String> {
    let answer = client
        .post(format!("{endpoint}{path}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("{path}: {e}"))?;
    let status = answer.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("{path}: the collector answered {status}"))
    }
}

/// The metrics body, and the traces body when spans wait.
fn bodies(otel: &Otel, guard: &Guard, gateway: &Metrics) -> (Value, Option<Value>) {
    let now = now_ns();
    let (sums, hists, spans) = {
        let mut recorded = otel.recorded.lock();
        let spans = std::mem::take(&mut recorded.spans);
        (recorded.sums.clone(), recorded.hists.clone(), spans)
    };
    let start = otel.started_ns;
    let mut out: Vec<Value> = Vec::new();
    for (name, points) in &hists {
        let bounds: &[f64] = if *name == "gen_ai.client.token.usage" {
            &TOKEN_BOUNDS
        } else {
            &SECONDS_BOUNDS
        };
        let points: Vec<Value> = points
            .iter()
            .map(|(attrs, h)| histogram_point(attrs, h, bounds, start, now))
            .collect();
        out.push(metric(
            name,
            json!({"histogram": {"aggregationTemporality": 2, "dataPoints": points}}),
        ));
    }
    for (name, points) in &sums {
        let points: Vec<Value> = points
            .iter()
            .map(|(attrs, v)| number_point(attrs, *v, start, now))
            .collect();
        out.push(metric(name, sum(points)));
    }
    let dropped = otel.dropped.load(std::sync::atomic::Ordering::Relaxed) as f64;
    out.push(metric(
        "usage_guard.otel.dropped_spans",
        sum(vec![number_point(&[], dropped, start, now)]),
    ));
    let mut families = guard.metrics();
    families.extend(gateway.families());
    out.extend(families.iter().filter_map(|f| family(f, start, now)));
    let metrics = json!({"resourceMetrics": [{
        "resource": resource(),
        "scopeMetrics": [{"scope": scope(), "metrics": out}],
    }]});
    let traces = (!spans.is_empty()).then(|| {
        let spans: Vec<Value> = spans.iter().map(span).collect();
        json!({"resourceSpans": [{
            "resource": resource(),
            "scopeSpans": [{"scope": scope(), "spans": spans}],
        }]})
    });
    (metrics, traces)
}

fn resource() -> Value {
    json!({"attributes": [
        {"key": "service.name", "value": {"stringValue": "usage-guard-gateway"}},
    ]})
}

fn scope() -> Value {
    json!({"name": "usage_guard", "version": env!("CARGO_PKG_VERSION")})
}

fn metric(name: &str, data: Value) -> Value {
    let (unit, description) = describe(name);
    let mut m = json!({"name": name, "unit": unit, "description": description});
    if let (Value::Object(m), Value::Object(d)) = (&mut m, data) {
        m.extend(d);
    }
    m
}

fn sum(points: Vec<Value>) -> Value {
    json!({"sum": {"aggregationTemporality": 2, "isMonotonic": true, "dataPoints": points}})
}

fn string_attrs(attrs: &[(String, String)]) -> Value {
    attrs
        .iter()
        .map(|(k, v)| json!({"key": k, "value": {"stringValue": v}}))
        .collect()
}

fn number_point(attrs: &[(String, String)], value: f64, start: u64, now: u64) -> Value {
    json!({
        "attributes": string_attrs(attrs),
        "startTimeUnixNano": start.to_string(),
        "timeUnixNano": now.to_string(),
        "asDouble": value,
    })
}

fn histogram_point(
    attrs: &[(String, String)],
    h: &Hist,
    bounds: &[f64],
    start: u64,
    now: u64,
) -> Value {
    json!({
        "attributes": string_attrs(attrs),
        "startTimeUnixNano": start.to_string(),
        "timeUnixNano": now.to_string(),
        "count": h.count.to_string(),
        "sum": h.sum,
        "bucketCounts": h.buckets.iter().map(u64::to_string).collect::<Vec<_>>(),
        "explicitBounds": bounds,
    })
}

/// A counter or gauge family of `Guard::metrics` (or the gateway's) as `usage_guard.<name>`,
/// as the Python layer observes them; histograms are left out (recorded per call instead).
fn family(f: &MetricFamily, start: u64, now: u64) -> Option<Value> {
    let name = format!(
        "usage_guard.{}",
        f.name.strip_prefix("usage_guard_").unwrap_or(&f.name)
    );
    let points: Vec<Value> = f
        .samples
        .iter()
        .map(|s| number_point(&s.labels, s.value, start, now))
        .collect();
    let data = match f.kind {
        MetricKind::Counter => sum(points),
        MetricKind::Gauge => json!({"gauge": {"dataPoints": points}}),
        MetricKind::Histogram => return None,
    };
    let mut m = json!({"name": name, "unit": "", "description": f.help});
    if let (Value::Object(m), Value::Object(d)) = (&mut m, data) {
        m.extend(d);
    }
    Some(m)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn span(s: &Span) -> Value {
    let attributes: Vec<Value> = s
        .attributes
        .iter()
        .map(|(k, v)| match v {
            Attr::Str(t) => json!({"key": k, "value": {"stringValue": t}}),
            Attr::Int(n) => json!({"key": k, "value": {"intValue": n.to_string()}}),
        })
        .collect();
    let mut out = json!({
        "traceId": hex(&s.trace_id),
        "spanId": hex(&s.span_id),
        "name": s.name,
        "kind": 1,
        "startTimeUnixNano": s.start_ns.to_string(),
        "endTimeUnixNano": s.end_ns.to_string(),
        "attributes": attributes,
        "status": match &s.error {
            Some(m) => json!({"code": 2, "message": m}),
            None => json!({"code": 0}),
        },
    });
    if let Some(parent) = s.parent {
        out["parentSpanId"] = json!(hex(&parent));
    }
    out
}

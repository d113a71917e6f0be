//! The guard's metrics: its counts (`Stats`), refusals by reason and limit type, fitted
//! calls, tokens and cost billed, open holds and the admission latency, as Prometheus
//! metric families. The library (`Guard::metrics`, Python's `guard.metrics()` and its
//! `prometheus_client` collector) and the gateway's `GET /metrics` read the same counts from
//! here; the gateway adds its own (requests, upstreams) beside them.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::lock::Mutex;

use crate::fork::ForkLocal;
use crate::guard::domain::refusal::Refusal;
use crate::guard::engine::observe::stats::Stats;

/// Upper bounds (seconds) of the latency histograms' buckets.
pub(crate) const BUCKETS: [f64; 13] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0,
];

/// [`BUCKETS`] in nanoseconds (an observation is placed without floating point).
const BUCKET_NANOS: [u64; BUCKETS.len()] = {
    let mut out = [0u64; BUCKETS.len()];
    let mut i = 0;
    while i < BUCKETS.len() {
        out[i] = (BUCKETS[i] * 1e9) as u64;
        i += 1;
    }
    out
};

/// What a metric family is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations counted into buckets, with their count and sum.
    Histogram,
}

impl MetricKind {
    /// The Prometheus (and `prometheus_client`) word (also its `Display`).
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

crate::guard::domain::words::display_as_str!(MetricKind);

/// One sample of a family: its full name (`…_total`, `…_bucket`), its labels, its value.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSample {
    /// The sample's name (the family's, with `_total`, `_bucket`, `_sum` or `_count`).
    pub name: String,
    /// Label names and values, in order.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

/// A metric family: its name (without `_total` for counters), help, kind and samples.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricFamily {
    /// The family's name (`usage_guard_admitted`; counters' samples add `_total`).
    pub name: String,
    /// What it counts.
    pub help: String,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// Its samples.
    pub samples: Vec<MetricSample>,
}

impl MetricFamily {
    /// A counter family with one sample and no labels.
    pub fn counter(name: &str, help: &str, value: u64) -> Self {
        MetricFamily::labelled(name, help, vec![(Vec::new(), value)])
    }

    /// A counter family with one sample per label set.
    pub fn labelled(name: &str, help: &str, samples: Vec<(Vec<(String, String)>, u64)>) -> Self {
        MetricFamily {
            name: name.to_string(),
            help: help.to_string(),
            kind: MetricKind::Counter,
            samples: samples
                .into_iter()
                .map(|(labels, value)| MetricSample {
                    name: format!("{name}_total"),
                    labels,
                    value: value as f64,
                })
                .collect(),
        }
    }

    /// A gauge family with one sample and no labels.
    pub fn gauge(name: &str, help: &str, value: f64) -> Self {
        MetricFamily {
            name: name.to_string(),
            help: help.to_string(),
            kind: MetricKind::Gauge,
            samples: vec![MetricSample {
                name: name.to_string(),
                labels: Vec::new(),
                value,
            }],
        }
    }
}

/// A latency histogram over [`BUCKETS`], lock-free.
#[derive(Debug, Default)]
pub(crate) struct Histogram {
    /// Observations per bucket (not cumulative; the last one is over every bound).
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

/// What one bill adds to the billed totals.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BilledAmounts {
    pub(crate) input_tokens: u64,
    pub(crate) cached_input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) cost_micros: u64,
}

impl Histogram {
    /// Counts one observation.
    pub(crate) fn observe(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let i = BUCKET_NANOS
            .iter()
            .position(|b| nanos <= *b)
            .unwrap_or(BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The family `name`: cumulative buckets, `+Inf`, sum and count.
    pub(crate) fn family(&self, name: &str, help: &str) -> MetricFamily {
        let mut samples = Vec::with_capacity(BUCKETS.len() + 3);
        let mut seen = 0u64;
        let bounds = BUCKETS.iter().map(|b| b.to_string()).chain(["+Inf".into()]);
        for (bucket, bound) in self.buckets.iter().zip(bounds) {
            seen += bucket.load(Ordering::Relaxed);
            samples.push(MetricSample {
                name: format!("{name}_bucket"),
                labels: vec![("le".into(), bound)],
                value: seen as f64,
            });
        }
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        for (suffix, value) in [("_sum", sum), ("_count", seen as f64)] {
            samples.push(MetricSample {
                name: format!("{name}{suffix}"),
                labels: Vec::new(),
                value,
            });
        }
        MetricFamily {
            name: name.to_string(),
            help: help.to_string(),
            kind: MetricKind::Histogram,
            samples,
        }
    }
}

/// What the guard measures beside its `Stats`.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// Calls refused, by (reason code, limit type or "").
    /// This process's (a forked child copies the parent's when no parent thread held them
    /// at the fork, else starts from none).
    refusals: ForkLocal<Mutex<Refusals>>,
    fitted: AtomicU64,
    billed_input_tokens: AtomicU64,
    billed_cached_input_tokens: AtomicU64,
    billed_output_tokens: AtomicU64,
    billed_cost_micros: AtomicU64,
    /// Calls admitted with holds and not yet billed, released or dropped.
    open_holds: AtomicI64,
    admission: Histogram,
}

type Refusals = BTreeMap<(&'static str, &'static str), u64>;

impl Metrics {
    fn refusals(&self) -> &Mutex<Refusals> {
        self.refusals.get_with(|parent| {
            let copied = parent.and_then(|p| p.try_lock().map(|r| r.clone()));
            Mutex::new(copied.unwrap_or_default())
        })
    }

    /// Counts an admission's end: its latency, and a refusal by reason and limit type.
    pub(crate) fn admission(&self, took: Duration, refusal: Option<&Refusal>) {
        self.admission.observe(took);
        if let Some(r) = refusal {
            let limit_type = r.limit_type.map_or("", |l| l.name());
            *self
                .refusals()
                .lock()
                .entry((r.reason.code(), limit_type))
                .or_default() += 1;
        }
    }

    /// Counts a call whose output maximum the ceiling lowered.
    pub(crate) fn fitted(&self) {
        self.fitted.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds a bill's tokens and cost.
    pub(crate) fn billed(&self, billed: BilledAmounts) {
        let add = |c: &AtomicU64, n: u64| c.fetch_add(n, Ordering::Relaxed);
        add(&self.billed_input_tokens, billed.input_tokens);
        add(&self.billed_cached_input_tokens, billed.cached_input_tokens);
        add(&self.billed_output_tokens, billed.output_tokens);
        add(&self.billed_cost_micros, billed.cost_micros);
    }

    /// A call was admitted with holds.
    pub(crate) fn hold_opened(&self) {
        self.open_holds.fetch_add(1, Ordering::Relaxed);
    }

    /// A call with holds was billed, released or dropped.
    pub(crate) fn hold_closed(&self) {
        self.open_holds.fetch_sub(1, Ordering::Relaxed);
    }

    /// Every family: the stats' counts, then these.
    pub(crate) fn families(&self, stats: &Stats) -> Vec<MetricFamily> {
        let mut out: Vec<MetricFamily> = stats
            .snapshot()
            .into_iter()
            .map(|(name, value)| {
                let help = format!("Guard count: {}", name.replace('_', " "));
                MetricFamily::counter(&format!("usage_guard_{name}"), &help, value)
            })
            .collect();
        let refusals = self
            .refusals()
            .lock()
            .iter()
            .map(|((reason, limit_type), n)| {
                let labels = vec![
                    ("reason".to_string(), reason.to_string()),
                    ("limit_type".to_string(), limit_type.to_string()),
                ];
                (labels, *n)
            })
            .collect();
        out.push(MetricFamily::labelled(
            "usage_guard_refusals",
            "Calls refused, by reason code and limit type",
            refusals,
        ));
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let counts = [
            (
                "fitted",
                "Calls whose output maximum was lowered to fit",
                &self.fitted,
            ),
            (
                "billed_input_tokens",
                "Input tokens billed (cached included)",
                &self.billed_input_tokens,
            ),
            (
                "billed_cached_input_tokens",
                "Cached input tokens billed",
                &self.billed_cached_input_tokens,
            ),
            (
                "billed_output_tokens",
                "Output tokens billed",
                &self.billed_output_tokens,
            ),
            (
                "billed_cost_micros",
                "Cost billed, in millionths of the price unit",
                &self.billed_cost_micros,
            ),
        ];
        for (name, help, value) in counts {
            let name = format!("usage_guard_{name}");
            out.push(MetricFamily::counter(&name, help, read(value)));
        }
        out.push(MetricFamily::gauge(
            "usage_guard_open_holds",
            "Calls admitted with holds, not yet billed or released",
            self.open_holds.load(Ordering::Relaxed) as f64,
        ));
        out.push(self.admission.family(
            "usage_guard_admission_seconds",
            "Time to admit a call (read, decide, fit, reserve), refusals included",
        ));
        out
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus text exposition (format 0.0.4) of `families`.
pub(crate) fn render(families: &[MetricFamily]) -> String {
    let mut out = String::new();
    for family in families {
        let name = match family.kind {
            MetricKind::Counter => format!("{}_total", family.name),
            _ => family.name.clone(),
        };
        let _ = writeln!(out, "# HELP {name} {}", escape(&family.help));
        let _ = writeln!(out, "# TYPE {name} {}", family.kind.as_str());
        for sample in &family.samples {
            out.push_str(&sample.name);
            if !sample.labels.is_empty() {
                let labels: Vec<String> = sample
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                    .collect();
                let _ = write!(out, "{{{}}}", labels.join(","));
            }
            let _ = writeln!(out, " {}", sample.value);
        }
    }
    out
}

//! The gateway's counters, and `GET /metrics` in the Prometheus text format (with the
//! guard's own counts beside them).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::guard::engine::stats::Stats;

/// Upper bounds (seconds) of the latency histograms' buckets.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0,
];

#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// Counts by label set: `name{labels}` → value.
type Labelled = Mutex<BTreeMap<(&'static str, String), u64>>;

/// What the gateway counts.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    labelled: Labelled,
    /// Calls admitted and not yet billed or released.
    pub(crate) open: AtomicI64,
    pub(crate) fitted: AtomicU64,
    pub(crate) billed_input_tokens: AtomicU64,
    pub(crate) billed_output_tokens: AtomicU64,
    pub(crate) billed_cost_micros: AtomicU64,
    admission: Mutex<Histogram>,
    upstream: Mutex<Histogram>,
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// Adds one to `name` with `labels` (`key="value"` pairs, already joined).
    pub(crate) fn count(&self, name: &'static str, labels: &[(&str, &str)]) {
        let text = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect::<Vec<_>>()
            .join(",");
        *self.labelled.lock().entry((name, text)).or_default() += 1;
    }

    /// The counts of `name`, each with its labels (`key="value"` pairs, joined by commas).
    pub(crate) fn counts(&self, name: &str) -> Vec<(String, u64)> {
        self.labelled
            .lock()
            .iter()
            .filter(|((n, _), _)| *n == name)
            .map(|((_, labels), value)| (labels.clone(), *value))
            .collect()
    }

    /// Records how long an admission took.
    pub(crate) fn admission_seconds(&self, seconds: f64) {
        observe(&self.admission, seconds);
    }

    /// Records how long the upstream took to answer (its headers).
    pub(crate) fn upstream_seconds(&self, seconds: f64) {
        observe(&self.upstream, seconds);
    }

    /// The Prometheus text exposition of every count.
    pub(crate) fn render(&self, stats: &Stats) -> String {
        let mut out = String::new();
        for (name, value) in stats.snapshot() {
            let _ = writeln!(out, "# TYPE usage_guard_{name}_total counter");
            let _ = writeln!(out, "usage_guard_{name}_total {value}");
        }
        let simple = [
            ("usage_guard_gateway_fitted_total", "counter", &self.fitted),
            (
                "usage_guard_gateway_billed_input_tokens_total",
                "counter",
                &self.billed_input_tokens,
            ),
            (
                "usage_guard_gateway_billed_output_tokens_total",
                "counter",
                &self.billed_output_tokens,
            ),
            (
                "usage_guard_gateway_billed_cost_micros_total",
                "counter",
                &self.billed_cost_micros,
            ),
        ];
        for (name, kind, value) in simple {
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        let _ = writeln!(out, "# TYPE usage_guard_gateway_open_holds gauge");
        let _ = writeln!(
            out,
            "usage_guard_gateway_open_holds {}",
            self.open.load(Ordering::Relaxed)
        );
        let mut last = "";
        for ((name, labels), value) in self.labelled.lock().iter() {
            if *name != last {
                let _ = writeln!(out, "# TYPE {name} counter");
                last = name;
            }
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
        histogram(
            &mut out,
            "usage_guard_gateway_admission_seconds",
            &self.admission,
        );
        histogram(
            &mut out,
            "usage_guard_gateway_upstream_seconds",
            &self.upstream,
        );
        out
    }
}

fn observe(h: &Mutex<Histogram>, seconds: f64) {
    let mut h = h.lock();
    for (i, bound) in BUCKETS.iter().enumerate() {
        if seconds <= *bound {
            h.counts[i] += 1;
        }
    }
    h.count += 1;
    h.sum += seconds;
}

fn histogram(out: &mut String, name: &str, h: &Mutex<Histogram>) {
    let h = h.lock();
    let _ = writeln!(out, "# TYPE {name} histogram");
    for (i, bound) in BUCKETS.iter().enumerate() {
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {}", h.counts[i]);
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum {}", h.sum);
    let _ = writeln!(out, "{name}_count {}", h.count);
}

//! The gateway's own counters (requests by endpoint and status, admissions by endpoint,
//! upstream answers and latency), and `GET /metrics`: the guard's metric families
//! (`Guard::metrics`, the same the library reads) followed by these, in the Prometheus text
//! format.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::lock::Mutex;

use crate::guard::engine::guard::Guard;
use crate::guard::engine::observe::metrics::{render, Histogram, MetricFamily};

/// Counts by family and label set.
type Labelled = Mutex<BTreeMap<&'static str, BTreeMap<Vec<(String, String)>, u64>>>;

/// The gateway's counters' names and help, in the order they are rendered.
const FAMILIES: [(&str, &str); 6] = [
    (
        "usage_guard_gateway_requests",
        "Model calls answered by the gateway, by endpoint and HTTP status",
    ),
    (
        "usage_guard_gateway_admissions",
        "Model calls admitted by the gateway, by endpoint",
    ),
    (
        "usage_guard_gateway_upstream_responses",
        "Upstream answers, by provider and HTTP status (or timeout, unreachable)",
    ),
    (
        "usage_guard_gateway_upstream_timeouts",
        "Calls the upstream timed out on after it had them, billed the prompt and what was \
         delivered, by provider and stage (first_byte, total, body)",
    ),
    (
        "usage_guard_gateway_connections_refused",
        "Connections past gateway.max_connections: closed at once, or served the health \
         checks only",
    ),
    (
        "usage_guard_gateway_connections_spread",
        "Connections closed after an answer to spread calls over the serving threads (a \
         client's pool kept its calls on one thread's connections)",
    ),
];

/// What the gateway counts beside the guard.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    labelled: Labelled,
    upstream: Histogram,
}

impl Metrics {
    /// Adds one to the family `name` (one of [`FAMILIES`], without `_total`) with `labels`.
    pub(crate) fn count(&self, name: &'static str, labels: &[(&str, &str)]) {
        let mut labelled = self.labelled.lock();
        let family = labelled.entry(name).or_default();
        // A label set seen before (every call after a family's first few) is found
        // without copying its strings: a family holds a few dozen sets at most.
        let same = |set: &Vec<(String, String)>| {
            set.len() == labels.len()
                && set
                    .iter()
                    .zip(labels)
                    .all(|((k, v), (l, w))| k == l && v == w)
        };
        if let Some(n) = family.iter_mut().find(|(set, _)| same(set)).map(|(_, n)| n) {
            *n += 1;
            return;
        }
        let set = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        *family.entry(set).or_default() += 1;
    }

    /// Records how long the upstream took to answer (its headers).
    pub(crate) fn upstream_seconds(&self, took: Duration) {
        self.upstream.observe(took);
    }

    /// The gateway's families.
    pub(crate) fn families(&self) -> Vec<MetricFamily> {
        let labelled = self.labelled.lock();
        let mut out: Vec<MetricFamily> = FAMILIES
            .iter()
            .map(|(name, help)| {
                let samples = labelled
                    .get(name)
                    .map(|m| m.iter().map(|(l, n)| (l.clone(), *n)).collect())
                    .unwrap_or_default();
                MetricFamily::labelled(name, help, samples)
            })
            .collect();
        out.push(self.upstream.family(
            "usage_guard_gateway_upstream_seconds",
            "Time until the upstream answered (its headers)",
        ));
        out
    }

    /// The text of `GET /metrics`: the guard's families, then the gateway's.
    pub(crate) fn render(&self, guard: &Guard) -> String {
        let mut families = guard.metrics();
        families.extend(self.families());
        render(&families)
    }
}

//! The quota service's engine calls (`usage_guard.quota` builds on them): the counters of the
//! generic rules some attributes match, and recording use outside admission.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::admit_args::attributes_from_py;
use super::alive::attach_or_exiting;
use super::asyncio::{future_into_py, FirstPoll};
use super::guard::PyGuard;
use super::json::py_to_json;
use super::policy::PyPolicy;
use crate::error::Error;
use crate::guard::domain::clock::iso8601;
use crate::guard::domain::rule::Metric;
use crate::guard::engine::quota::{QuotaRecord, RuleCounter};

fn counters_to_py<'py>(py: Python<'py>, counters: &[RuleCounter]) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for c in counters {
        let d = PyDict::new(py);
        d.set_item("rule", &*c.name)?;
        d.set_item("metric", c.metric.as_str())?;
        d.set_item("window", c.window.to_string())?;
        d.set_item("budget", c.budget)?;
        d.set_item("used", c.used)?;
        d.set_item("reserved", c.held)?;
        d.set_item("left", c.left)?;
        d.set_item("resets_at", c.resets_at.map(iso8601))?;
        out.append(d)?;
    }
    Ok(out)
}

fn metric_of(word: &str) -> PyResult<Metric> {
    word.parse::<Metric>().map_err(|_| {
        let why = "is not a metric; accepted: requests, tokens, input_tokens, output_tokens, cost, compute_ms, concurrency";
        Error::invalid("metric", word, why).into()
    })
}

/// The counters (rule, metric, window, budget, used, reserved, left, resets_at; cost in
/// micro-dollars) of every generic rule the call attributes match, in one store read.
#[pyfunction]
#[pyo3(signature = (guard, user, attributes, prefix))]
fn _quota_counters<'py>(
    py: Python<'py>,
    guard: &Bound<'py, PyGuard>,
    user: Option<String>,
    attributes: Option<&Bound<'py, PyAny>>,
    prefix: String,
) -> PyResult<Bound<'py, PyList>> {
    let attributes = attributes_from_py(attributes)?;
    let guard = guard.get().inner.clone();
    let counters = py.detach(move || {
        crate::runtime::block_on(guard.rule_counters(user.as_deref(), &attributes, &prefix))
    })?;
    counters_to_py(py, &counters)
}

/// `_quota_counters` as a coroutine.
#[pyfunction]
#[pyo3(signature = (guard, user, attributes, prefix))]
fn _quota_counters_async<'py>(
    py: Python<'py>,
    guard: &Bound<'py, PyGuard>,
    user: Option<String>,
    attributes: Option<&Bound<'py, PyAny>>,
    prefix: String,
) -> PyResult<Bound<'py, PyAny>> {
    let attributes = attributes_from_py(attributes)?;
    let guard = guard.get().inner.clone();
    future_into_py(py, FirstPoll::Inline, async move {
        let counters = guard
            .rule_counters(user.as_deref(), &attributes, &prefix)
            .await?;
        attach_or_exiting(|py| counters_to_py(py, &counters).map(Bound::unbind))
    })
}

/// A `record` of the service as the engine's [`QuotaRecord`]: a dict of `user`,
/// `attributes`, `prefix`, `metric`, `amount` (micro-dollars for cost), `request_id`,
/// `dimension`, `model`, `executor`, `meta`.
fn text(spec: &Bound<'_, PyDict>, key: &str) -> PyResult<Option<String>> {
    match spec.get_item(key)? {
        Some(v) if !v.is_none() => Ok(Some(v.extract::<String>()?)),
        _ => Ok(None),
    }
}

fn record_of(spec: &Bound<'_, PyDict>) -> PyResult<QuotaRecord> {
    let missing = |key: &str| Error::invalid(key, "", "is required");
    let attributes = spec.get_item("attributes")?;
    Ok(QuotaRecord {
        user: text(spec, "user")?,
        attributes: attributes_from_py(attributes.as_ref())?,
        prefix: text(spec, "prefix")?.unwrap_or_default(),
        metric: metric_of(&text(spec, "metric")?.ok_or_else(|| missing("metric"))?)?,
        amount: match spec.get_item("amount")? {
            Some(v) => v.extract::<u64>()?,
            None => return Err(missing("amount").into()),
        },
        request_id: text(spec, "request_id")?.ok_or_else(|| missing("request_id"))?,
        dimension: text(spec, "dimension")?.unwrap_or_default(),
        model: text(spec, "model")?,
        executor: text(spec, "executor")?,
        meta: match spec.get_item("meta")? {
            Some(m) if !m.is_none() => Some(py_to_json(&m, "meta")?),
            _ => None,
        },
    })
}

/// Adds use outside admission to every matching rule on its metric, once per
/// `request_id`, and queues its ledger row; whether this call counted it.
#[pyfunction]
fn _quota_record(
    py: Python<'_>,
    guard: &Bound<'_, PyGuard>,
    record: &Bound<'_, PyDict>,
) -> PyResult<bool> {
    let record = record_of(record)?;
    let guard = guard.get().inner.clone();
    Ok(py.detach(move || crate::runtime::block_on(guard.record_rules(&record)))?)
}

/// `_quota_record` as a coroutine.
#[pyfunction]
fn _quota_record_async<'py>(
    py: Python<'py>,
    guard: &Bound<'py, PyGuard>,
    record: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    let record = record_of(record)?;
    let guard = guard.get().inner.clone();
    future_into_py(py, FirstPoll::Inline, async move {
        Ok(guard.record_rules(&record).await?)
    })
}

/// The policy the guard enforces now.
#[pyfunction]
fn _guard_policy(guard: &Bound<'_, PyGuard>) -> PyPolicy {
    PyPolicy {
        inner: guard.get().inner.policy(),
    }
}

/// Adds the quota functions to `_core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_quota_counters, m)?)?;
    m.add_function(wrap_pyfunction!(_quota_counters_async, m)?)?;
    m.add_function(wrap_pyfunction!(_quota_record, m)?)?;
    m.add_function(wrap_pyfunction!(_quota_record_async, m)?)?;
    m.add_function(wrap_pyfunction!(_guard_policy, m)?)?;
    super::quota_db::register(m)
}

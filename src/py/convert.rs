//! Conversions between Python objects and the core's types.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString};
use serde_json::Value;

use crate::error::Error;
use crate::guard::domain::clock::iso8601;
use crate::guard::domain::decide::UsageCeiling;
use crate::guard::domain::path::SourceRef;
use crate::guard::domain::policy::Prices;
use crate::guard::domain::view::{RuleView, UsageView};
use crate::guard::engine::ticket::{Billed, Recorded, Usage};

pub(crate) use super::json::{py_to_json, py_to_json_document};

/// JSON as Python objects.
pub(crate) fn json_to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(json_to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, json_to_py(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

fn dollars_per_million(micros_per_million: u64) -> f64 {
    micros_per_million as f64 / 1_000_000.0
}

/// Prices as `{"input", "cached_input", "output"}` in dollars per million tokens.
pub(crate) fn prices_to_py<'py>(py: Python<'py>, prices: &Prices) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("input", dollars_per_million(prices.input))?;
    d.set_item("cached_input", dollars_per_million(prices.cached_input))?;
    d.set_item("output", dollars_per_million(prices.output))?;
    Ok(d)
}

/// The `usage_ceiling` dict, with exactly the keys of enforcement.md.
pub(crate) fn ceiling_to_py<'py>(
    py: Python<'py>,
    c: &UsageCeiling,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("tokens", c.tokens)?;
    d.set_item("cost_micros", c.cost_micros)?;
    match &c.rates {
        Some(rates) => d.set_item("rates", prices_to_py(py, rates)?)?,
        None => d.set_item("rates", py.None())?,
    }
    d.set_item("max_output_tokens", c.max_output_tokens)?;
    d.set_item("min_output_tokens", c.min_output_tokens)?;
    d.set_item("margin", c.margin)?;
    Ok(d)
}

/// `{"type": "team", "id": "research"}`.
pub(crate) fn source_to_py<'py>(py: Python<'py>, s: &SourceRef) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("type", s.kind.word())?;
    d.set_item("id", &*s.id)?;
    Ok(d)
}

fn rule_view_to_py<'py>(py: Python<'py>, r: &RuleView) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("limit_type", r.limit_type.name())?;
    if let Some(team) = &r.team {
        d.set_item("team", team)?;
    }
    d.set_item("per_person", r.per_person)?;
    d.set_item("metric", r.metric.word())?;
    d.set_item("window", r.window.word())?;
    d.set_item("amount", r.amount)?;
    d.set_item("used", r.used)?;
    d.set_item("reserved", r.reserved)?;
    d.set_item("left", r.left)?;
    d.set_item("resets_at", r.resets_at.map(iso8601))?;
    Ok(d)
}

/// The usage view: `{"source", "rules", "ceilings", "restriction"}`.
pub(crate) fn view_to_py<'py>(py: Python<'py>, v: &UsageView) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("source", source_to_py(py, &v.source)?)?;
    let rules = PyList::empty(py);
    for r in &v.rules {
        rules.append(rule_view_to_py(py, r)?)?;
    }
    d.set_item("rules", rules)?;
    let ceilings = PyList::empty(py);
    for r in &v.ceilings {
        ceilings.append(rule_view_to_py(py, r)?)?;
    }
    d.set_item("ceilings", ceilings)?;
    match &v.restriction {
        Some(r) => {
            let rd = PyDict::new(py);
            rd.set_item("restricted_by", r.restricted_by.name())?;
            rd.set_item("metric", r.metric.word())?;
            rd.set_item("window", r.window.word())?;
            rd.set_item("current_value", r.current_value)?;
            rd.set_item("max_value", r.max_value)?;
            d.set_item("restriction", rd)?;
        }
        None => d.set_item("restriction", py.None())?,
    }
    Ok(d)
}

/// A whole number ≥ 0 from an optional Python int, with an error naming the argument.
pub(crate) fn whole(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    // The sentence starts with the argument's name: "max_tokens must be a whole number ...".
    // Built only on the error paths: this runs for every argument of every admit and bill.
    let accepted = || format!("{name} must be a whole number of 0 or more");
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        return Err(Error::wrong_type("", value.repr()?, accepted()).into());
    }
    value.extract::<u64>().map(Some).map_err(|_| {
        let given = value.repr().map(|r| r.to_string()).unwrap_or_default();
        Error::invalid("", given, accepted()).into()
    })
}

/// What a bill recorded, as a dict (`None` when the ticket had already settled).
pub(crate) fn billed_to_py<'py>(
    py: Python<'py>,
    billed: Option<Billed>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(b) = billed else { return Ok(None) };
    let d = PyDict::new(py);
    d.set_item("input_tokens", b.input_tokens)?;
    d.set_item("cached_input_tokens", b.cached_input_tokens)?;
    d.set_item("output_tokens", b.output_tokens)?;
    d.set_item("reasoning_tokens", b.reasoning_tokens)?;
    d.set_item("cost_micros", b.cost_micros)?;
    d.set_item("compute_ms", b.compute_ms)?;
    // True: in the counters; None: the store did not answer, retried in the background.
    let recorded = match b.recorded {
        Recorded::Yes => Some(true),
        Recorded::Pending => None,
    };
    d.set_item("recorded", recorded)?;
    Ok(Some(d))
}

/// What a ticket or batch holds, per metric.
pub(crate) fn reserved_to_py<'py>(
    py: Python<'py>,
    reserved: &[(crate::guard::domain::rule::Metric, u64)],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (metric, amount) in reserved {
        d.set_item(metric.word(), amount)?;
    }
    Ok(d)
}

/// A bill's usage from its Python arguments, each a whole number ≥ 0.
pub(crate) fn usage_from_py(
    input_tokens: &Bound<'_, PyAny>,
    output_tokens: &Bound<'_, PyAny>,
    cached_input_tokens: Option<&Bound<'_, PyAny>>,
    reasoning_tokens: Option<&Bound<'_, PyAny>>,
    cost_micros: Option<&Bound<'_, PyAny>>,
    compute_ms: Option<&Bound<'_, PyAny>>,
) -> PyResult<Usage> {
    Ok(Usage {
        input_tokens: whole("input_tokens", Some(input_tokens))?.unwrap_or(0),
        output_tokens: whole("output_tokens", Some(output_tokens))?.unwrap_or(0),
        cached_input_tokens: whole("cached_input_tokens", cached_input_tokens)?.unwrap_or(0),
        reasoning_tokens: whole("reasoning_tokens", reasoning_tokens)?.unwrap_or(0),
        cost_micros: whole("cost_micros", cost_micros)?,
        compute_ms: whole("compute_ms", compute_ms)?,
    })
}

/// A prompt count as `{"tokens", "exact", "encoding"}`.
pub(crate) fn prompt_count_to_py<'py>(
    py: Python<'py>,
    count: &crate::ceiling::PromptCount,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("tokens", count.tokens)?;
    d.set_item("exact", count.exact)?;
    d.set_item("encoding", count.encoding.word())?;
    Ok(d)
}

//! Conversions between Python objects and the core's types.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString};
use serde_json::Value;

use crate::error::Error;
use crate::guard::domain::clock::iso8601;
use crate::guard::domain::decide::UsageCeiling;
use crate::guard::domain::path::SourceRef;
use crate::guard::domain::policy::Prices;
use crate::guard::domain::view::{PersonView, RuleView, UsageView};
use crate::guard::engine::settle::ticket::{Billed, Recorded, Usage};

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
    d.set_item(intern!(py, "cost_micros"), c.cost_micros)?;
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
    d.set_item("type", s.kind.as_str())?;
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
    d.set_item("metric", r.metric.as_str())?;
    d.set_item("unit", r.metric.unit())?;
    d.set_item("window", r.window.to_string())?;
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
            rd.set_item("metric", r.metric.as_str())?;
            rd.set_item("unit", r.metric.unit())?;
            rd.set_item("window", r.window.to_string())?;
            rd.set_item("current_value", r.current_value)?;
            rd.set_item("max_value", r.max_value)?;
            d.set_item("restriction", rd)?;
        }
        None => d.set_item("restriction", py.None())?,
    }
    Ok(d)
}

/// A person's view across models: `{"user", "rules", "models"}`, `models` a dict of model
/// id to that model's usage view.
pub(crate) fn person_view_to_py<'py>(
    py: Python<'py>,
    user: Option<&str>,
    v: &PersonView,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("user", user)?;
    let rules = PyList::empty(py);
    for r in &v.rules {
        rules.append(rule_view_to_py(py, r)?)?;
    }
    d.set_item("rules", rules)?;
    let models = PyDict::new(py);
    for (model, view) in &v.models {
        models.set_item(&**model, view_to_py(py, view)?)?;
    }
    d.set_item("models", models)?;
    Ok(d)
}

/// The accepted range of a whole-number argument, as its error says it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Range {
    /// A count compared with the model's limits (`prompt_tokens`, `max_tokens`, ceiling
    /// fields): any `u64`; a prompt over the model's window is refused, not rejected.
    Count,
    /// An amount that goes into the counters (`bill`'s usage): up to 2**53, exact in every
    /// store.
    Amount,
}

impl Range {
    fn max(self) -> u64 {
        match self {
            Range::Count => u64::MAX,
            Range::Amount => crate::guard::domain::policy::MAX_AMOUNT,
        }
    }

    /// "a whole number from 0 to 9007199254740992 (2**53)".
    pub(crate) fn words(self) -> String {
        let bound = match self {
            Range::Count => "2**64-1",
            Range::Amount => "2**53",
        };
        format!("a whole number from 0 to {} ({bound})", self.max())
    }
}

/// A whole number in `range` from a Python int, with the one rule of every numeric
/// argument: another type (float, even `100.0`; str; bool) is a `TypeError`, an int out of
/// range a `ValueError`; both name the argument, the value and the accepted range.
pub(crate) fn whole_in(name: &str, value: &Bound<'_, PyAny>, range: Range) -> PyResult<u64> {
    // Messages are built only on the error paths: this runs for every admit and bill.
    let given = || value.repr().map(|r| r.to_string()).unwrap_or_default();
    if value.is_instance_of::<PyBool>() || !value.is_instance_of::<PyInt>() {
        let type_name = value
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        let accepted = format!("{name} must be {} (an int), not {type_name}", range.words());
        return Err(Error::wrong_type("", given(), accepted).into());
    }
    match value.extract::<u64>() {
        Ok(n) if n <= range.max() => Ok(n),
        _ => Err(Error::invalid("", given(), format!("{name} must be {}", range.words())).into()),
    }
}

/// `whole_in` for an optional argument: `None` stays `None`.
pub(crate) fn whole(
    name: &str,
    value: Option<&Bound<'_, PyAny>>,
    range: Range,
) -> PyResult<Option<u64>> {
    match value.filter(|v| !v.is_none()) {
        Some(v) => whole_in(name, v, range).map(Some),
        None => Ok(None),
    }
}

/// `whole_in` for a required argument: `None` is a `TypeError` (required means required).
pub(crate) fn required(name: &str, value: &Bound<'_, PyAny>, range: Range) -> PyResult<u64> {
    if value.is_none() {
        let accepted = format!("{name} is required: {} (an int), not None", range.words());
        return Err(Error::wrong_type("", "", accepted).into());
    }
    whole_in(name, value, range)
}

/// The keys of a bill's dict, in its order.
const BILLED_KEYS: [&str; 7] = [
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_micros",
    "compute_ms",
    "recorded",
];
static BILLED: PyOnceLock<Py<PyDict>> = PyOnceLock::new();

/// What a bill recorded, as a dict (`None` when the ticket had already settled).
pub(crate) fn billed_to_py<'py>(
    py: Python<'py>,
    billed: Option<Billed>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(b) = billed else { return Ok(None) };
    // A copy of a dict that has the 7 keys already (one allocation): a new dict grows its
    // table once on the way to 7 keys (~450 instructions, 4 % of a sync bill's).
    let d = BILLED
        .get_or_try_init(py, || {
            let keys = PyDict::new(py);
            for key in BILLED_KEYS {
                keys.set_item(PyString::intern(py, key), py.None())?;
            }
            PyResult::Ok(keys.unbind())
        })?
        .bind(py)
        .copy()?;
    d.set_item(intern!(py, "input_tokens"), b.input_tokens)?;
    d.set_item(intern!(py, "cached_input_tokens"), b.cached_input_tokens)?;
    d.set_item(intern!(py, "output_tokens"), b.output_tokens)?;
    d.set_item(intern!(py, "reasoning_tokens"), b.reasoning_tokens)?;
    d.set_item(intern!(py, "cost_micros"), b.cost_micros)?;
    d.set_item(intern!(py, "compute_ms"), b.compute_ms)?;
    // True: in the counters; None: not known yet (queued, or the store did not answer and
    // it is retried in the background).
    let recorded = match b.recorded {
        Recorded::Yes => Some(true),
        Recorded::Pending | Recorded::Queued => None,
    };
    d.set_item(intern!(py, "recorded"), recorded)?;
    Ok(Some(d))
}

/// What a ticket or batch holds, per metric.
pub(crate) fn reserved_to_py<'py>(
    py: Python<'py>,
    reserved: &[(crate::guard::domain::rule::Metric, u64)],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (metric, amount) in reserved {
        d.set_item(metric.figure_key(), amount)?;
    }
    Ok(d)
}

/// A bill's usage from its Python arguments, each a whole number from 0 to 2**53;
/// `input_tokens` and `output_tokens` are required (None is a `TypeError`).
pub(crate) fn usage_from_py(
    input_tokens: &Bound<'_, PyAny>,
    output_tokens: &Bound<'_, PyAny>,
    cached_input_tokens: Option<&Bound<'_, PyAny>>,
    reasoning_tokens: Option<&Bound<'_, PyAny>>,
    cost_micros: Option<&Bound<'_, PyAny>>,
    compute_ms: Option<&Bound<'_, PyAny>>,
) -> PyResult<Usage> {
    let a = Range::Amount;
    Ok(Usage {
        input_tokens: required("input_tokens", input_tokens, a)?,
        output_tokens: required("output_tokens", output_tokens, a)?,
        cached_input_tokens: whole("cached_input_tokens", cached_input_tokens, a)?.unwrap_or(0),
        reasoning_tokens: whole("reasoning_tokens", reasoning_tokens, a)?.unwrap_or(0),
        cost_micros: whole("cost_micros", cost_micros, a)?,
        compute_ms: whole("compute_ms", compute_ms, a)?,
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
    d.set_item("encoding", count.encoding.as_str())?;
    Ok(d)
}

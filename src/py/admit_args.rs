//! The arguments of `Guard.admit` as an `AdmitRequest` (with the call's `attributes` for
//! generic rules), and a ticket's warnings as Python dicts.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use super::convert::{py_to_json, whole, Range};
use super::provider::Provider;
use crate::error::Error;
use crate::guard::domain::decide::RuleWarning;
use crate::guard::engine::admit::admission::AdmitRequest;

/// `(prompt_tokens, max_tokens)` as given.
type Sizes<'a, 'py> = (Option<&'a Bound<'py, PyAny>>, Option<&'a Bound<'py, PyAny>>);

/// The request `Guard.admit` describes.
pub(crate) fn admit_request(
    user: Option<String>,
    model: String,
    request: Option<&Bound<'_, PyAny>>,
    (prompt_tokens, max_tokens): Sizes<'_, '_>,
    provider: Option<Provider>,
    attributes: Option<&Bound<'_, PyAny>>,
) -> PyResult<AdmitRequest> {
    let request = match request.filter(|r| !r.is_none()) {
        Some(body) => {
            let api = provider.unwrap_or_default().0;
            Some((py_to_json(body, "request")?, api))
        }
        None => None,
    };
    Ok(AdmitRequest {
        user,
        model,
        prompt_tokens: whole("prompt_tokens", prompt_tokens, Range::Count)?,
        prompt_is_estimate: false,
        max_output_tokens: whole("max_tokens", max_tokens, Range::Count)?,
        request,
        attributes: attributes_from_py(attributes)?,
    })
}

/// `attributes={"credential": "key-1", ...}`: a dict of strings (None or absent: none).
pub(crate) fn attributes_from_py(
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<(String, String)>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    let dict = value.cast::<PyDict>().map_err(|_| {
        let type_name = value
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        Error::wrong_type(
            "attributes",
            type_name,
            "must be a dict of attribute name to string value",
        )
    })?;
    let mut out = Vec::with_capacity(dict.len());
    for (key, v) in dict.iter() {
        let key: String = key.extract().map_err(|_| {
            Error::wrong_type(
                "attributes",
                key.repr().map(|r| r.to_string()).unwrap_or_default(),
                "keys must be attribute names (strings)",
            )
        })?;
        if v.cast::<PyString>().is_err() {
            let shown = v.repr().map(|r| r.to_string()).unwrap_or_default();
            let why = "must be a string";
            return Err(Error::wrong_type(&format!("attributes[{key:?}]"), shown, why).into());
        }
        out.push((key, v.extract::<String>()?));
    }
    Ok(out)
}

/// A ticket's warnings: dicts of rule, amount (the metric), unit, used, budget (integers in
/// the unit: micro-dollars for cost), threshold, action and would_refuse.
pub(crate) fn warnings_to_py<'py>(
    py: Python<'py>,
    warnings: &[RuleWarning],
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for w in warnings {
        list.append(warning_to_py(py, w)?)?;
    }
    Ok(list)
}

/// One warning (or event) as a dict.
pub(crate) fn warning_to_py<'py>(py: Python<'py>, w: &RuleWarning) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("rule", &*w.rule)?;
    d.set_item("amount", w.metric.as_str())?;
    d.set_item("unit", w.metric.unit())?;
    d.set_item("used", w.used)?;
    d.set_item("budget", w.budget)?;
    d.set_item("threshold", w.threshold)?;
    d.set_item("action", w.action.as_str())?;
    d.set_item("would_refuse", w.would_refuse)?;
    Ok(d)
}

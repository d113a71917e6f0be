//! The guard's counts for Python: `Guard.stats()` (the plain counts by name) and
//! `Guard.metrics()` (every metric family the gateway's `/metrics` serves, as data).

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::guard::engine::guard::Guard;

/// `{name: count}` of the guard's stats, with the settle steps.
pub(crate) fn stats<'py>(py: Python<'py>, guard: &Guard) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, value) in guard.stats().snapshot() {
        d.set_item(name, value)?;
    }
    // Store steps (Redis: pipelines) that sent the bills queued for the background.
    d.set_item("settle_steps", guard.settle_steps())?;
    Ok(d)
}

/// `{family: {"type", "help", "samples": [(name, {label: value}, value)]}}`.
pub(crate) fn families<'py>(py: Python<'py>, guard: &Guard) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for family in guard.metrics() {
        let samples = family
            .samples
            .iter()
            .map(|s| {
                let labels = PyDict::new(py);
                for (k, v) in &s.labels {
                    labels.set_item(k, v)?;
                }
                PyTuple::new(
                    py,
                    [
                        s.name.clone().into_pyobject(py)?.into_any(),
                        labels.into_any(),
                        s.value.into_pyobject(py)?.into_any(),
                    ],
                )
            })
            .collect::<PyResult<Vec<_>>>()?;
        let entry = PyDict::new(py);
        entry.set_item("type", family.kind.as_str())?;
        entry.set_item("help", &family.help)?;
        entry.set_item("samples", samples)?;
        out.set_item(&family.name, entry)?;
    }
    Ok(out)
}

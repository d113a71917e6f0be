//! `Policy`: a validated policy document.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::convert::py_to_json_document;
use crate::guard::domain::policy::Policy;

/// A validated policy. Every constructor reports all errors of a document at once
/// (`PolicyError.errors`).
#[pyclass(name = "Policy", module = "usage_guard._core", frozen)]
pub struct PyPolicy {
    pub inner: Arc<Policy>,
}

impl PyPolicy {
    fn wrap(policy: Policy) -> Self {
        Self {
            inner: Arc::new(policy),
        }
    }
}

#[pymethods]
impl PyPolicy {
    /// A policy from a dict of the document's shape.
    #[staticmethod]
    fn from_dict(py: Python<'_>, document: &Bound<'_, PyAny>) -> PyResult<Self> {
        let value = py_to_json_document(document)?;
        Ok(Self::wrap(py.detach(|| Policy::from_value(&value))?))
    }

    /// A policy from JSON text.
    #[staticmethod]
    fn from_json(py: Python<'_>, text: String) -> PyResult<Self> {
        Ok(Self::wrap(py.detach(|| Policy::from_json(&text))?))
    }

    /// A policy from TOML text.
    #[staticmethod]
    fn from_toml(py: Python<'_>, text: String) -> PyResult<Self> {
        Ok(Self::wrap(py.detach(|| Policy::from_toml(&text))?))
    }

    /// A policy file: `.toml` as TOML, anything else as JSON.
    #[staticmethod]
    fn load(py: Python<'_>, path: std::path::PathBuf) -> PyResult<Self> {
        Ok(Self::wrap(py.detach(|| Policy::load(&path))?))
    }

    /// The ids of the policy's models, in the document's order.
    #[getter]
    fn models<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.inner.models.iter().map(|m| m.id.to_string()))
    }

    /// The ids of the policy's teams.
    #[getter]
    fn teams<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.inner.teams.iter().map(|t| t.id.to_string()))
    }

    /// What the policy holds that is valid but probably not meant (an amount of 0, calls
    /// with no user unlimited by default), as `{"path", "value", "message"}` dicts like
    /// `PolicyError.errors`; the policy works as written.
    #[getter]
    fn warnings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for w in &self.inner.warnings {
            let d = PyDict::new(py);
            d.set_item("path", &w.path)?;
            d.set_item("value", &w.value)?;
            d.set_item("message", &w.message)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// The generic rules (`[[rules]]`), in policy order: `{"name", "sentence", "overlaps"}`,
    /// the rule in one sentence and the other rules a call can match at the same time.
    #[getter]
    fn rules<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        let rules = &self.inner.rules;
        for rule in rules {
            let d = PyDict::new(py);
            d.set_item("name", &*rule.name)?;
            d.set_item("sentence", rule.sentence())?;
            let overlaps = rules
                .iter()
                .filter(|other| other.name != rule.name && rule.overlaps(other))
                .map(|other| other.name.to_string());
            d.set_item("overlaps", PyList::new(py, overlaps)?)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// The `[gateway]` bounds in force, by key (`None`: derived when the gateway starts, or
    /// one serving thread per core): what docs/security.md's table of limits lists.
    #[getter]
    fn gateway_limits<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (name, value) in self.inner.gateway.limits() {
            d.set_item(name, value)?;
        }
        Ok(d)
    }

    /// `settings.enabled`: false turns the quota service's stored quotas off.
    #[getter]
    fn quotas_enabled(&self) -> bool {
        self.inner.settings.quotas_enabled
    }

    /// This policy with more generic rules (a list of `[[rules]]` tables) after its own; a
    /// rule named like one of the policy's is refused.
    fn with_rules(&self, py: Python<'_>, rules: &Bound<'_, PyAny>) -> PyResult<Self> {
        let value = py_to_json_document(rules)?;
        let base = self.inner.clone();
        Ok(Self::wrap(py.detach(move || base.with_rules(&value))?))
    }

    /// A model's display name (its id when the policy does not list it).
    fn display_name(&self, model: &str) -> String {
        self.inner
            .model(model)
            .map(|m| m.display_name.clone())
            .unwrap_or_else(|| model.to_string())
    }

    fn __repr__(&self) -> String {
        let p = &self.inner;
        format!(
            "Policy(models={}, teams={}, limits={})",
            p.models.len(),
            p.teams.len(),
            p.direct.len()
                + p.team.len()
                + p.public.len()
                + p.team_total.len()
                + p.model_total.len()
                + p.user_total.len()
                + usize::from(!p.platform.is_empty())
        )
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPolicy>()
}

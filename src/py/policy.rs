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
        field_errors(py, &self.inner.warnings)
    }

    /// What a reader may take another way than the policy does (a `"1d"` window is a sliding
    /// 24 hours, not the calendar day), as dicts like `warnings`; not warnings: `check
    /// --strict` passes them.
    #[getter]
    fn notes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        field_errors(py, &self.inner.notes)
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

    /// What losing the counter store's counters (Redis restarted empty) costs this policy's
    /// rules, in one sentence: refused until recovered, refilled from a ledger, or started
    /// over from 0. `usage-guard check` prints it.
    #[getter]
    fn restart_cost(&self) -> String {
        self.inner.restart_cost()
    }

    /// Each model's names as `{"id", "aliases", "prices"}`, in the document's order: the
    /// names a call resolves to it by (besides its snapshots, letter case and `:latest`), and
    /// where its price comes from (`"policy"`, `"file"`, `"table"`, or None: no price).
    #[getter]
    fn model_names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        use crate::guard::domain::policy::PriceOrigin;
        let list = PyList::empty(py);
        for m in &self.inner.models {
            let d = PyDict::new(py);
            d.set_item("id", &*m.id)?;
            let aliases: Vec<&str> = m.aliases.iter().map(|a| &**a).collect();
            d.set_item("aliases", aliases)?;
            let origin = match m.prices.origin {
                PriceOrigin::None => None,
                PriceOrigin::Policy => Some("policy"),
                PriceOrigin::File => Some("file"),
                PriceOrigin::Table => Some("table"),
            };
            d.set_item("prices", origin)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// `settings.unknown_models`: `"refuse"` (the default) or `"allow"`.
    #[getter]
    fn unknown_models(&self) -> &'static str {
        match self.inner.settings.unknown_models {
            crate::guard::domain::policy::UnknownModels::Allow => "allow",
            crate::guard::domain::policy::UnknownModels::Refuse => "refuse",
        }
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

/// `{"path", "value", "message"}` dicts.
fn field_errors<'py>(
    py: Python<'py>,
    errors: &[crate::error::FieldError],
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for w in errors {
        let d = PyDict::new(py);
        d.set_item("path", &w.path)?;
        d.set_item("value", &w.value)?;
        d.set_item("message", &w.message)?;
        list.append(d)?;
    }
    Ok(list)
}

/// The window `text` means, in the one window syntax of policies, generic rules and quota
/// policies, as its canonical word (`"1d"` → `"24 hours"`, `"day"` → `"day"`): two texts
/// name the same window when their words are equal. A `ValueError` says why anything else
/// is no window and what is accepted.
#[pyfunction]
fn _window_word(text: &str) -> PyResult<String> {
    use crate::guard::domain::window_words::{read, ACCEPTED};
    read(text).map(|w| w.to_string()).map_err(|why| {
        crate::error::Error::invalid("", "", format!("{why}; accepted: {ACCEPTED}")).into()
    })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(pyo3::wrap_pyfunction!(_window_word, m)?)?;
    m.add_class::<PyPolicy>()
}

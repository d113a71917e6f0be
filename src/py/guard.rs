//! `Guard`: admission (sync and asyncio), batches, usage, events. Every blocking call
//! releases the GIL; coroutines run on the crate's one tokio runtime.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::admit_args::{admit_request, attributes_from_py};
use super::alive::attach_or_exiting;
use super::asyncio::FirstPoll;
use super::batch::{admit_batch, resume_batch, PyBatchTicket};
use super::clock::PyManualClock;
use super::convert::{person_view_to_py, view_to_py};
use super::events::{listener, PyEventStream};
use super::ledger::{close_guard, extract_ledger};
use super::policy::PyPolicy;
use super::provider::Provider;
use super::store::extract_store;
use super::ticket::PyTicket;
use crate::guard::domain::clock::{Clock, SystemClock};
use crate::guard::engine::guard::Guard;

/// Admits model calls against a policy, on a counter store.
#[pyclass(name = "Guard", module = "usage_guard._core", frozen)]
pub struct PyGuard {
    /// The Rust guard (the gateway serves it).
    pub(crate) inner: Guard,
    /// The Python ledger object given (returned by `guard.ledger`).
    ledger: Option<Py<PyAny>>,
}

#[pymethods]
impl PyGuard {
    /// A guard over `policy` on `store` (a new `MemoryStore` when omitted), reading time
    /// from `clock` (the system clock when omitted), recording billed calls in `ledger`.
    #[new]
    #[pyo3(signature = (policy, store = None, clock = None, ledger = None))]
    fn new(
        policy: &Bound<'_, PyPolicy>,
        store: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyManualClock>>,
        ledger: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let clock: Arc<dyn Clock> = match clock {
            Some(c) => c.get().inner.clone(),
            None => Arc::new(SystemClock),
        };
        let policy = (*policy.get().inner).clone();
        let mut inner = Guard::new(policy, extract_store(store)?, clock);
        if let Some(l) = extract_ledger(ledger)? {
            inner = inner.with_ledger(l);
        }
        Ok(Self {
            inner,
            ledger: ledger.filter(|l| !l.is_none()).map(|l| l.clone().unbind()),
        })
    }

    /// The ledger given to the guard, or None.
    #[getter]
    fn ledger(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.ledger.as_ref().map(|l| l.clone_ref(py))
    }

    /// Writes every ledger row billed so far (the guard keeps working).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        close_guard(py, &self.inner)
    }

    /// Reserves for every request of a batch (dicts with `id` or `custom_id`,
    /// `prompt_tokens`, `max_tokens`) for 25 hours; raises `UsageLimitError` unless all fit.
    /// `attributes` are the batch's calls' (generic rules match and count on them).
    #[pyo3(signature = (user, model, requests, *, attributes = None))]
    fn admit_batch(
        &self,
        py: Python<'_>,
        user: String,
        model: String,
        requests: &Bound<'_, PyAny>,
        attributes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyBatchTicket> {
        let attributes = attributes_from_py(attributes)?;
        admit_batch(py, &self.inner, (user, model, attributes), requests)
    }

    /// A batch admitted by any guard on the same store, from its `state`.
    fn resume_batch(&self, state: &str) -> PyResult<PyBatchTicket> {
        resume_batch(&self.inner, state)
    }

    /// Admits a call before it runs, or raises `UsageLimitError`.
    #[pyo3(signature = (user, model, request = None, *, prompt_tokens = None, max_tokens = None, provider = None, attributes = None))]
    #[allow(clippy::too_many_arguments)]
    fn admit(
        &self,
        py: Python<'_>,
        user: Option<String>,
        model: String,
        request: Option<&Bound<'_, PyAny>>,
        prompt_tokens: Option<&Bound<'_, PyAny>>,
        max_tokens: Option<&Bound<'_, PyAny>>,
        provider: Option<Provider>,
        attributes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTicket> {
        super::errors::caught("Guard.admit", || {
            let sizes = (prompt_tokens, max_tokens);
            let req = admit_request(user, model, request, sizes, provider, attributes)?;
            let guard = self.inner.clone();
            let ticket = py.detach(move || guard.admit_blocking(req))?;
            Ok(PyTicket { inner: ticket })
        })
    }

    /// `admit` as a coroutine.
    #[pyo3(signature = (user, model, request = None, *, prompt_tokens = None, max_tokens = None, provider = None, attributes = None))]
    #[allow(clippy::too_many_arguments)]
    fn admit_async<'py>(
        &self,
        py: Python<'py>,
        user: Option<String>,
        model: String,
        request: Option<&Bound<'py, PyAny>>,
        prompt_tokens: Option<&Bound<'py, PyAny>>,
        max_tokens: Option<&Bound<'py, PyAny>>,
        provider: Option<Provider>,
        attributes: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let sizes = (prompt_tokens, max_tokens);
        let req = admit_request(user, model, request, sizes, provider, attributes)?;
        let guard = self.inner.clone();
        let first_poll = FirstPoll::unless_ledger(guard.ledger().is_some());
        super::asyncio::future_into_py(py, first_poll, async move {
            let ticket = guard.admit(req).await?;
            Ok(PyTicket { inner: ticket })
        })
    }

    /// The usage view of `user` on `model`: the source billed now, its rules with used,
    /// reserved, left and resets_at, the ceilings, and the rule closest to its amount.
    /// Without a model, the person's view across models: the rules that count them on every
    /// model and their view on each model where a rule of its own applies to them.
    #[pyo3(signature = (user, model = None))]
    fn usage<'py>(
        &self,
        py: Python<'py>,
        user: Option<String>,
        model: Option<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let guard = self.inner.clone();
        match model {
            Some(model) => {
                let view = py.detach(move || {
                    crate::runtime::block_on(guard.usage(user.as_deref(), &model))
                })?;
                view_to_py(py, &view)
            }
            None => {
                let who = user.clone();
                let view = py
                    .detach(move || crate::runtime::block_on(guard.usage_across(who.as_deref())))?;
                person_view_to_py(py, user.as_deref(), &view)
            }
        }
    }

    /// `usage` as a coroutine.
    #[pyo3(signature = (user, model = None))]
    fn usage_async<'py>(
        &self,
        py: Python<'py>,
        user: Option<String>,
        model: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let guard = self.inner.clone();
        let first_poll = FirstPoll::unless_ledger(guard.ledger().is_some());
        super::asyncio::future_into_py(py, first_poll, async move {
            match model {
                Some(model) => {
                    let view = guard.usage(user.as_deref(), &model).await?;
                    attach_or_exiting(|py| view_to_py(py, &view).map(Bound::unbind))
                }
                None => {
                    let view = guard.usage_across(user.as_deref()).await?;
                    let who = user.as_deref();
                    attach_or_exiting(|py| person_view_to_py(py, who, &view).map(Bound::unbind))
                }
            }
        })
    }

    /// Calls `callback(event)` for each event (a dict like `Ticket.warnings`' items, with
    /// id, at, kind, counter, principal and model): once per window, counter and threshold
    /// across every guard on the store.
    fn on_event(&self, callback: Py<PyAny>) {
        self.inner.on_event(listener(callback));
    }

    /// An async iterator of the events this guard sends from now on (the dicts `on_event`
    /// gets), buffering at most `buffer` unread ones: a reader behind loses the oldest
    /// (counted in `dropped`). Ends when the guard closes.
    #[pyo3(signature = (buffer = 1000))]
    fn events(&self, buffer: usize) -> PyEventStream {
        PyEventStream::new(self.inner.events(buffer))
    }

    /// Replaces the policy; cached paths are resolved again at their next use.
    fn set_policy(&self, policy: &Bound<'_, PyPolicy>) {
        self.inner.set_policy((*policy.get().inner).clone());
    }

    /// Lifts the epoch fence after the counter store lost its state: writes a new store epoch
    /// (with a ledger, counters are then filled again from it; without one, `attest=True`
    /// says the counters may be trusted as they are). Returns the new epoch's generation.
    #[pyo3(signature = (*, attest = false))]
    fn recover(&self, py: Python<'_>, attest: bool) -> PyResult<String> {
        let guard = self.inner.clone();
        Ok(py.detach(move || guard.recover_blocking(attest))?)
    }

    /// The policy's version: 1 at start, +1 at each `set_policy`.
    #[getter]
    fn policy_version(&self) -> u64 {
        self.inner.policy_version()
    }

    /// How many calls of this guard wait in a throttle queue now.
    #[getter]
    fn waiting(&self) -> u64 {
        self.inner.waiting()
    }

    /// Counts an operator can watch: admitted, refused, uncounted, unavailable, store
    /// errors, reserve retries, billed, released, settle failures.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        super::guard_metrics::stats(py, &self.inner)
    }

    /// Every metric family `GET /metrics` serves for this guard, as data.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        super::guard_metrics::families(py, &self.inner)
    }

    /// The same metrics in the Prometheus text format.
    fn metrics_text(&self) -> String {
        self.inner.metrics_text()
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.inner)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGuard>()?;
    super::ticket::register(m)
}

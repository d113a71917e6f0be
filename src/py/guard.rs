//! `Guard` and `Ticket`: admission, billing and release, sync and asyncio. Every blocking
//! call releases the GIL; coroutines run on the crate's one tokio runtime.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::admit_args::{admit_request, listener, warnings_to_py};
use super::asyncio::FirstPoll;
use super::clock::PyManualClock;
use super::convert::{
    billed_to_py, ceiling_to_py, json_to_py, prompt_count_to_py, py_to_json, reserved_to_py,
    source_to_py, usage_from_py, view_to_py,
};
use super::ledger::{
    admit_batch, bill_info, close_guard, extract_ledger, resume_batch, PyBatchTicket,
};
use super::policy::PyPolicy;
use super::provider::Provider;
use super::store::extract_store;
use crate::guard::domain::clock::{Clock, SystemClock};
use crate::guard::engine::guard::Guard;
use crate::guard::engine::ticket::{BillInfo, Ticket};

/// Admits model calls against a policy, on a counter store.
#[pyclass(name = "Guard", module = "usage_guard._core", frozen)]
pub struct PyGuard {
    /// The Rust guard (the gateway serves it).
    pub(crate) inner: Guard,
    /// The Python ledger object given (returned by `guard.ledger`).
    ledger: Option<Py<PyAny>>,
}

/// An admitted call: bill it with what it used, or release it.
#[pyclass(name = "Ticket", module = "usage_guard._core", frozen)]
pub struct PyTicket {
    inner: Ticket,
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
    fn admit_batch(
        &self,
        py: Python<'_>,
        user: String,
        model: String,
        requests: &Bound<'_, PyAny>,
    ) -> PyResult<PyBatchTicket> {
        admit_batch(py, &self.inner, user, model, requests)
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
        let sizes = (prompt_tokens, max_tokens);
        let req = admit_request(user, model, request, sizes, provider, attributes)?;
        let guard = self.inner.clone();
        let ticket = py.detach(move || guard.admit_blocking(req))?;
        Ok(PyTicket { inner: ticket })
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
    #[pyo3(signature = (user, model))]
    fn usage<'py>(
        &self,
        py: Python<'py>,
        user: Option<String>,
        model: String,
    ) -> PyResult<Bound<'py, PyDict>> {
        let guard = self.inner.clone();
        let view =
            py.detach(move || crate::runtime::block_on(guard.usage(user.as_deref(), &model)))?;
        view_to_py(py, &view)
    }

    /// `usage` as a coroutine.
    #[pyo3(signature = (user, model))]
    fn usage_async<'py>(
        &self,
        py: Python<'py>,
        user: Option<String>,
        model: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let guard = self.inner.clone();
        let first_poll = FirstPoll::unless_ledger(guard.ledger().is_some());
        super::asyncio::future_into_py(py, first_poll, async move {
            let view = guard.usage(user.as_deref(), &model).await?;
            Python::attach(|py| view_to_py(py, &view).map(Bound::unbind))
        })
    }

    /// Calls `callback(event)` for each event (a dict like `Ticket.warnings`' items): once
    /// per window, counter and threshold across every guard on the store.
    fn on_event(&self, callback: Py<PyAny>) {
        self.inner.on_event(listener(callback));
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

    /// Counts an operator can watch: admitted, refused, uncounted, unavailable, store
    /// errors, reserve retries, billed, released, settle failures.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        super::metrics::stats(py, &self.inner)
    }

    /// Every metric family `GET /metrics` serves for this guard, as data.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        super::metrics::families(py, &self.inner)
    }

    /// The same metrics in the Prometheus text format.
    fn metrics_text(&self) -> String {
        self.inner.metrics_text()
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.inner)
    }
}

#[pymethods]
impl PyTicket {
    /// The ticket's id, unique within its guard.
    #[getter]
    fn id(&self) -> &str {
        self.inner.id()
    }

    /// The source billed: `{"type": "direct" | "team" | "public", "id": ...}`.
    #[getter]
    fn source<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        source_to_py(py, self.inner.source())
    }

    /// The `usage_ceiling` dict: tokens, cost_micros, rates, max_output_tokens,
    /// min_output_tokens, margin.
    #[getter]
    fn ceiling<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        ceiling_to_py(py, self.inner.ceiling())
    }

    /// Generic rules past a soft threshold, or that would have refused (shadow mode): dicts
    /// of rule, amount, used, budget, threshold, action, would_refuse.
    #[getter]
    fn warnings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        warnings_to_py(py, self.inner.warnings())
    }

    /// The model admitted: the one asked for, or a `degrade` rule's `degrade_to`.
    #[getter]
    fn model(&self) -> &str {
        self.inner.model()
    }

    /// The model asked for when a `degrade` rule admitted another (`model`), else None.
    #[getter]
    fn degraded_from(&self) -> Option<&str> {
        self.inner.degraded_from()
    }

    /// What is held for the call, per metric.
    #[getter]
    fn reserved<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        reserved_to_py(py, &self.inner.reserved())
    }

    /// The request keys to send instead of the caller's, when admission was given the
    /// request (`{}` when nothing changes or there was no request).
    #[getter]
    fn fitted<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut changes = self.inner.fitted_changes().unwrap_or_default();
        if self.inner.degraded_from().is_some() {
            changes.insert("model".into(), self.inner.model().into());
        }
        json_to_py(py, &serde_json::Value::Object(changes))
    }

    /// The prompt as counted at admission: `{"tokens", "exact", "encoding"}`; None when the
    /// caller gave `prompt_tokens` or no request.
    #[getter]
    fn prompt<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        self.inner
            .prompt()
            .map(|count| prompt_count_to_py(py, count))
            .transpose()
    }

    /// Whether `response` (a provider answer or final stream event: an SDK object or a
    /// dict) stopped at the output maximum the ceiling set.
    fn capped(&self, response: &Bound<'_, PyAny>) -> PyResult<bool> {
        let json = py_to_json(response, "response")?;
        Ok(self.inner.capped(&json))
    }

    /// Whether the ticket was billed or released.
    #[getter]
    fn settled(&self) -> bool {
        self.inner.is_settled()
    }

    /// Admitted uncounted (the counter store was down and no rule could refuse).
    #[getter]
    fn uncounted(&self) -> bool {
        self.inner.is_uncounted()
    }

    /// Bills what the call used, replacing the whole reservation; returns what was billed,
    /// or None if the ticket had already settled. Cost comes from the model's prices unless
    /// given; compute time is measured from admission unless given. `request_id` and
    /// `metadata` (JSON-able) go into the ledger row. On Redis the settle is queued and
    /// sent in the background unless `wait` (docs/redis.md, "Bills in the background").
    #[pyo3(signature = (input_tokens, output_tokens, cached_input_tokens = None, cost_micros = None, compute_ms = None, *, reasoning_tokens = None, request_id = None, metadata = None, wait = false))]
    #[allow(clippy::too_many_arguments)]
    fn bill<'py>(
        &self,
        py: Python<'py>,
        input_tokens: &Bound<'py, PyAny>,
        output_tokens: &Bound<'py, PyAny>,
        cached_input_tokens: Option<&Bound<'py, PyAny>>,
        cost_micros: Option<&Bound<'py, PyAny>>,
        compute_ms: Option<&Bound<'py, PyAny>>,
        reasoning_tokens: Option<&Bound<'py, PyAny>>,
        request_id: Option<String>,
        metadata: Option<&Bound<'py, PyAny>>,
        wait: bool,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let usage = usage_from_py(
            input_tokens,
            output_tokens,
            cached_input_tokens,
            reasoning_tokens,
            cost_micros,
            compute_ms,
        )?;
        let info: BillInfo = bill_info(request_id, metadata)?;
        let ticket = self.inner.clone();
        let billed = py.detach(move || ticket.bill_with_options_blocking(usage, info, wait))?;
        billed_to_py(py, billed)
    }

    /// `bill` as a coroutine.
    #[pyo3(signature = (input_tokens, output_tokens, cached_input_tokens = None, cost_micros = None, compute_ms = None, *, reasoning_tokens = None, request_id = None, metadata = None, wait = false))]
    #[allow(clippy::too_many_arguments)]
    fn bill_async<'py>(
        &self,
        py: Python<'py>,
        input_tokens: &Bound<'py, PyAny>,
        output_tokens: &Bound<'py, PyAny>,
        cached_input_tokens: Option<&Bound<'py, PyAny>>,
        cost_micros: Option<&Bound<'py, PyAny>>,
        compute_ms: Option<&Bound<'py, PyAny>>,
        reasoning_tokens: Option<&Bound<'py, PyAny>>,
        request_id: Option<String>,
        metadata: Option<&Bound<'py, PyAny>>,
        wait: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let usage = usage_from_py(
            input_tokens,
            output_tokens,
            cached_input_tokens,
            reasoning_tokens,
            cost_micros,
            compute_ms,
        )?;
        let info = bill_info(request_id, metadata)?;
        let ticket = self.inner.clone();
        let first_poll = FirstPoll::unless_ledger(ticket.has_ledger());
        super::asyncio::future_into_py(py, first_poll, async move {
            let billed = ticket.bill_with_options(usage, info, wait).await?;
            Python::attach(|py| billed_to_py(py, billed).map(|d| d.map(Bound::unbind)))
        })
    }

    /// Gives the reservation back; returns False if the ticket had already settled.
    fn release(&self, py: Python<'_>) -> bool {
        let ticket = self.inner.clone();
        py.detach(move || ticket.release_blocking())
    }

    /// `release` as a coroutine.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let ticket = self.inner.clone();
        let first_poll = FirstPoll::unless_ledger(ticket.has_ledger());
        super::asyncio::future_into_py(py, first_poll, async move { Ok(ticket.release().await) })
    }

    fn __repr__(&self) -> String {
        let s = self.inner.source();
        format!(
            "Ticket(id={:?}, source={}:{}, settled={})",
            self.inner.id(),
            s.kind.word(),
            s.id,
            self.inner.is_settled()
        )
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGuard>()?;
    m.add_class::<PyTicket>()
}

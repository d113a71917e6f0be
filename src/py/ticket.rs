//! `Ticket`: an admitted call's holds, what it may send, and its bill or release, sync and
//! asyncio. Every blocking call releases the GIL.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::admit_args::warnings_to_py;
use super::alive::attach_or_exiting;
use super::asyncio::FirstPoll;
use super::convert::{
    billed_to_py, ceiling_to_py, json_to_py, prompt_count_to_py, py_to_json, reserved_to_py,
    source_to_py, usage_from_py,
};
use super::ledger::bill_info;
use crate::guard::engine::settle::ticket::{BillInfo, Ticket};

/// An admitted call: bill it with what it used, or release it.
#[pyclass(name = "Ticket", module = "usage_guard._core", frozen)]
pub struct PyTicket {
    pub(crate) inner: Ticket,
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
        super::errors::caught("Ticket.capped", || {
            let json = py_to_json(response, "response")?;
            Ok(self.inner.capped(&json))
        })
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
        super::errors::caught("Ticket.bill", || {
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
        })
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
            attach_or_exiting(|py| billed_to_py(py, billed).map(|d| d.map(Bound::unbind)))
        })
    }

    /// Gives the reservation back; returns False if the ticket had already settled.
    fn release(&self, py: Python<'_>) -> PyResult<bool> {
        self.inner.check_process()?;
        let ticket = self.inner.clone();
        Ok(py.detach(move || ticket.release_blocking()))
    }

    /// `release` as a coroutine.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.check_process()?;
        let ticket = self.inner.clone();
        let first_poll = FirstPoll::unless_ledger(ticket.has_ledger());
        super::asyncio::future_into_py(py, first_poll, async move { Ok(ticket.release().await) })
    }

    fn __repr__(&self) -> String {
        let s = self.inner.source();
        format!(
            "Ticket(id={:?}, source={}:{}, settled={})",
            self.inner.id(),
            s.kind.as_str(),
            s.id,
            self.inner.is_settled()
        )
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTicket>()
}

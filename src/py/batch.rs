//! Batches as Python objects: `guard.admit_batch` / `resume_batch` and the `BatchTicket`
//! they return.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::convert::{billed_to_py, reserved_to_py, source_to_py, usage_from_py, whole, Range};
use super::ledger::bill_info;
use crate::error::Error;
use crate::guard::engine::batch::batch_ticket::{BatchRequest, BatchTicket};
use crate::guard::engine::guard::Guard;

/// A submitted batch: bill each result once with `bill_part`, then `finish`.
#[pyclass(name = "BatchTicket", module = "usage_guard._core", frozen)]
pub struct PyBatchTicket {
    inner: BatchTicket,
}

fn batch_requests(requests: &Bound<'_, PyAny>) -> PyResult<Vec<BatchRequest>> {
    let mut out = Vec::new();
    for (i, item) in requests.try_iter()?.enumerate() {
        let item = item?;
        let d = item.cast::<PyDict>().map_err(|_| {
            Error::wrong_type(
                &format!("requests[{i}]"),
                item.get_type(),
                "must be a dict with id (or custom_id), prompt_tokens, max_tokens",
            )
        })?;
        let id = match d.get_item("id")?.or(d.get_item("custom_id")?) {
            Some(id) => id.str()?.to_string(),
            None => i.to_string(),
        };
        out.push(BatchRequest {
            id,
            prompt_tokens: whole(
                &format!("requests[{i}].prompt_tokens"),
                d.get_item("prompt_tokens")?.as_ref(),
                Range::Count,
            )?
            .unwrap_or(0),
            max_output_tokens: whole(
                &format!("requests[{i}].max_tokens"),
                d.get_item("max_tokens")?.as_ref(),
                Range::Count,
            )?,
        });
    }
    Ok(out)
}

/// `guard.admit_batch(user, model, requests, attributes=...)`.
pub(crate) fn admit_batch(
    py: Python<'_>,
    guard: &Guard,
    (user, model, attributes): (String, String, Vec<(String, String)>),
    requests: &Bound<'_, PyAny>,
) -> PyResult<PyBatchTicket> {
    let requests = batch_requests(requests)?;
    let g = guard.clone();
    let admitted = g.admit_batch_with(&user, &model, requests, attributes);
    let inner = py.detach(move || crate::runtime::block_on(admitted))?;
    Ok(PyBatchTicket { inner })
}

/// `guard.resume_batch(state)`.
pub(crate) fn resume_batch(guard: &Guard, state: &str) -> PyResult<PyBatchTicket> {
    Ok(PyBatchTicket {
        inner: guard.resume_batch(state)?,
    })
}

#[pymethods]
impl PyBatchTicket {
    /// The batch's id.
    #[getter]
    fn id(&self) -> &str {
        self.inner.id()
    }

    /// The source billed.
    #[getter]
    fn source<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        source_to_py(py, self.inner.source())
    }

    /// What the whole batch holds, per metric.
    #[getter]
    fn reserved<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        reserved_to_py(py, &self.inner.reserved())
    }

    /// The batch as JSON text, for `guard.resume_batch(state)` on any server.
    #[getter]
    fn state(&self) -> String {
        self.inner.state()
    }

    /// Bills one result the first time it is read on any server (returns what was billed),
    /// and gives back its share of the reservation; later reads return None.
    #[pyo3(signature = (result_id, input_tokens, output_tokens, cached_input_tokens = None, cost_micros = None, compute_ms = None, *, reasoning_tokens = None, request_id = None, metadata = None))]
    #[allow(clippy::too_many_arguments)]
    fn bill_part(
        &self,
        py: Python<'_>,
        result_id: String,
        input_tokens: &Bound<'_, PyAny>,
        output_tokens: &Bound<'_, PyAny>,
        cached_input_tokens: Option<&Bound<'_, PyAny>>,
        cost_micros: Option<&Bound<'_, PyAny>>,
        compute_ms: Option<&Bound<'_, PyAny>>,
        reasoning_tokens: Option<&Bound<'_, PyAny>>,
        request_id: Option<String>,
        metadata: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyDict>>> {
        let usage = usage_from_py(
            input_tokens,
            output_tokens,
            cached_input_tokens,
            reasoning_tokens,
            cost_micros,
            compute_ms,
        )?;
        let info = bill_info(request_id, metadata)?;
        let batch = self.inner.clone();
        let billed =
            py.detach(move || crate::runtime::block_on(batch.bill_part(&result_id, usage, info)))?;
        Ok(billed_to_py(py, billed)?.map(Bound::unbind))
    }

    /// Ends the batch: gives back the share of every result not billed. Returns how many
    /// shares this call gave back.
    fn finish(&self, py: Python<'_>) -> PyResult<usize> {
        let batch = self.inner.clone();
        Ok(py.detach(move || crate::runtime::block_on(batch.finish()))?)
    }

    fn __repr__(&self) -> String {
        format!("BatchTicket(id={:?})", self.inner.id())
    }
}

/// Adds the `BatchTicket` class to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyBatchTicket>()
}

//! Events as Python dicts: for `Guard.on_event` callbacks and the `EventStream` async
//! iterator of `Guard.events()`.

use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::admit_args::warning_to_py;
use super::alive::attach_or_exiting;
use super::asyncio::{future_into_py, FirstPoll};
use crate::guard::domain::clock::iso8601;
use crate::guard::domain::event::Event;
use crate::guard::engine::observe::event_stream::EventStream;

/// An event as a dict: the warning's keys (rule, amount, used, budget, threshold, action,
/// would_refuse) and id, at, kind, counter, principal, model.
pub(crate) fn event_to_py<'py>(py: Python<'py>, event: &Event) -> PyResult<Bound<'py, PyDict>> {
    let d = warning_to_py(py, &event.warning)?;
    d.set_item("id", &event.id)?;
    d.set_item("at", iso8601(event.at_ms))?;
    d.set_item("kind", event.kind.as_str())?;
    d.set_item("counter", event.key.render())?;
    d.set_item("principal", event.principal.as_deref())?;
    d.set_item("model", event.model.as_deref())?;
    Ok(d)
}

/// A Python callable as an event listener: called with the event's dict under the GIL; an
/// exception it raises is logged, never propagated into admission.
pub(crate) fn listener(callback: Py<PyAny>) -> impl Fn(&Event) + Send + Sync + 'static {
    move |event: &Event| {
        super::alive::attach(|py| {
            let called = event_to_py(py, event).and_then(|d| callback.call1(py, (d,)));
            if let Err(e) = called {
                log::warn!("usage_guard: an on_event callback raised: {e}");
            }
        });
    }
}

/// The events a guard sends, as an async iterator (`async for event in guard.events()`).
/// Waiting for the next event never blocks the event loop.
#[pyclass(name = "EventStream", module = "usage_guard._core", frozen)]
pub struct PyEventStream {
    inner: EventStream,
}

impl PyEventStream {
    pub(crate) fn new(inner: EventStream) -> Self {
        PyEventStream { inner }
    }
}

#[pymethods]
impl PyEventStream {
    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next event (a dict), once one goes out; `StopAsyncIteration` once the guard
    /// closed and every buffered event was read.
    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stream = self.inner.clone();
        future_into_py(py, FirstPoll::Inline, async move {
            match stream.next().await {
                Some(event) => attach_or_exiting(|py| event_to_py(py, &event).map(Bound::unbind)),
                None => Err(PyStopAsyncIteration::new_err(())),
            }
        })
    }

    /// Events this stream lost because its buffer was full (the oldest go first).
    #[getter]
    fn dropped(&self) -> u64 {
        self.inner.dropped()
    }

    /// Whether the stream ended (its guard closed, or `close()`).
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Ends this stream: the iteration stops after what it holds.
    fn close(&self) {
        self.inner.close();
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.inner)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEventStream>()
}

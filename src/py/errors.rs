//! The one error mapping: `From<Error> for PyErr`, into the exception hierarchy of
//! `usage_guard.errors` (`UsageLimitError` and its subclasses, `PolicyError`), `TypeError`,
//! `ValueError` and `LedgerError`. Every error the PyO3 layer raises is built here.

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyType};

use super::convert::json_to_py;
use super::provider::ErrorShape;
use crate::error::Error;
use crate::guard::domain::clock::iso8601;
use crate::guard::domain::refusal::{Reason, Refusal};

create_exception!(
    usage_guard._core,
    LedgerError,
    PyRuntimeError,
    "The usage ledger could not be opened, written or read."
);

create_exception!(
    usage_guard._core,
    InternalError,
    PyRuntimeError,
    "A bug in usage_guard's core (a panic) stopped the operation; nothing was half-applied \
     that the operation's own guarantees do not cover. Please report it with the message."
);

/// Runs the body of a Python entry point, turning a panic into `InternalError` (a
/// `RuntimeError`), never PyO3's `PanicException`, a `BaseException` that escapes
/// `except Exception`. Every parser of caller bytes is total (a `ValueError` naming the
/// field): this is the last guard. Costs nothing until a panic (an unwinding landing pad).
pub(crate) fn caught<T>(what: &str, work: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
        .unwrap_or_else(|panic| Err(internal_error(what, panic.as_ref())))
}

/// The `InternalError` of a panic in `what`, with the panic's message.
pub(crate) fn internal_error(what: &str, panic: &(dyn std::any::Any + Send)) -> PyErr {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_string());
    log::error!("usage_guard: internal error in {what}: {message}");
    InternalError::new_err(format!(
        "usage_guard internal error in {what}: {message} (a bug: please report it)"
    ))
}

/// Why a call was refused, as carried by `UsageLimitError.refusal`.
#[pyclass(name = "Refusal", module = "usage_guard._core", frozen)]
pub struct PyRefusal {
    inner: Refusal,
}

#[pymethods]
impl PyRefusal {
    /// `USAGE_LIMIT_REACHED`, `USAGE_LIMIT_DOES_NOT_FIT`, `USAGE_LIMIT_HELD`,
    /// `USAGE_LIMITS_UNAVAILABLE`, ...
    #[getter]
    fn reason(&self) -> &'static str {
        self.inner.reason.code()
    }

    #[getter]
    fn limit_type(&self) -> Option<&'static str> {
        self.inner.limit_type.map(|l| l.name())
    }

    #[getter]
    fn metric(&self) -> Option<&'static str> {
        self.inner.metric.map(|m| m.as_str())
    }

    #[getter]
    fn amount(&self) -> Option<u64> {
        self.inner.amount
    }

    #[getter]
    fn window(&self) -> Option<String> {
        self.inner.window.map(|w| w.to_string())
    }

    #[getter]
    fn is_rate_limit(&self) -> bool {
        self.inner.is_rate_limit()
    }

    #[getter]
    fn resets_at(&self) -> Option<String> {
        self.inner.resets_at.map(iso8601)
    }

    #[getter]
    fn retry_after(&self) -> Option<u64> {
        self.inner.retry_after_seconds
    }

    #[getter]
    fn unavailable(&self) -> bool {
        self.inner.unavailable_flag()
    }

    #[getter]
    fn message(&self) -> &str {
        &self.inner.message
    }

    /// `(status, headers, body)` in the provider's error shape: `openai`, `anthropic` or
    /// `ollama`.
    #[pyo3(signature = (provider = ErrorShape::default()), text_signature = "($self, provider='openai')")]
    fn to_http<'py>(
        &self,
        py: Python<'py>,
        provider: ErrorShape,
    ) -> PyResult<(u16, Bound<'py, PyDict>, Bound<'py, PyAny>)> {
        let http = self.inner.to_http(provider.0);
        let headers = PyDict::new(py);
        for (k, v) in &http.headers {
            headers.set_item(k, v)?;
        }
        Ok((http.status, headers, json_to_py(py, &http.body)?))
    }

    /// Pickles as its fields (JSON), so a refusal, and the `UsageLimitError` carrying it,
    /// crosses processes (Celery, multiprocessing) whole.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, (String,))> {
        let state = serde_json::to_string(&self.inner)
            .map_err(|e| Error::invalid("refusal", "", e.to_string()))?;
        let rebuild = py
            .import("usage_guard._core")?
            .getattr("_refusal_from_state")?;
        Ok((rebuild, (state,)))
    }

    fn __repr__(&self) -> String {
        format!(
            "Refusal({}, {:?})",
            self.inner.reason.code(),
            self.inner.message
        )
    }
}

/// A refusal from its pickled state (`Refusal.__reduce__`).
#[pyfunction]
fn _refusal_from_state(state: &str) -> PyResult<PyRefusal> {
    let inner: Refusal = serde_json::from_str(state)
        .map_err(|e| Error::invalid("state", state, format!("is not a pickled Refusal: {e}")))?;
    Ok(PyRefusal { inner })
}

static USAGE_LIMIT_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static DOES_NOT_FIT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static HELD: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static UNAVAILABLE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CONTEXT_WINDOW: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static POLICY_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static MODEL_NOT_FOUND: PyOnceLock<Py<PyType>> = PyOnceLock::new();

const ERRORS_MODULE: &str = "usage_guard.errors";

fn refusal_error(py: Python<'_>, refusal: Refusal) -> PyResult<PyErr> {
    let class = match refusal.reason {
        Reason::LimitReached => USAGE_LIMIT_ERROR.import(py, ERRORS_MODULE, "UsageLimitError")?,
        Reason::DoesNotFit => DOES_NOT_FIT.import(py, ERRORS_MODULE, "UsageLimitDoesNotFit")?,
        Reason::HeldByCalls => HELD.import(py, ERRORS_MODULE, "UsageLimitHeld")?,
        Reason::Unavailable | Reason::Recovering => {
            UNAVAILABLE.import(py, ERRORS_MODULE, "UsageLimitsUnavailable")?
        }
        Reason::ContextWindowExceeded => {
            CONTEXT_WINDOW.import(py, ERRORS_MODULE, "ContextWindowExceeded")?
        }
        Reason::ModelNotFound => MODEL_NOT_FOUND.import(py, ERRORS_MODULE, "ModelNotFound")?,
    };
    let message = refusal.message.clone();
    let carried = Py::new(py, PyRefusal { inner: refusal })?;
    Ok(PyErr::from_value(class.call1((message, carried))?))
}

fn policy_error(
    py: Python<'_>,
    error: &Error,
    fields: &[crate::error::FieldError],
) -> PyResult<PyErr> {
    let class = POLICY_ERROR.import(py, ERRORS_MODULE, "PolicyError")?;
    let list = PyList::empty(py);
    for f in fields {
        let d = PyDict::new(py);
        d.set_item("path", &f.path)?;
        d.set_item("value", &f.value)?;
        d.set_item("message", &f.message)?;
        list.append(d)?;
    }
    Ok(PyErr::from_value(class.call1((error.to_string(), list))?))
}

impl From<Error> for PyErr {
    fn from(error: Error) -> PyErr {
        // Also made on the runtime's threads (a coroutine's error), where Python may be exiting.
        super::alive::attach(|py| {
            let built = match &error {
                Error::Policy(fields) => policy_error(py, &error, fields),
                Error::Refused(refusal) => refusal_error(py, (**refusal).clone()),
                Error::InvalidArgument(_) => Ok(PyValueError::new_err(error.to_string())),
                Error::WrongType(_) => Ok(PyTypeError::new_err(error.to_string())),
                Error::Ledger(message) => Ok(LedgerError::new_err(message.clone())),
            };
            built.unwrap_or_else(|e| e)
        })
        .unwrap_or_else(super::alive::exiting)
    }
}

/// Panics with `message` inside the entry points' guard: the last guard's own check, that a
/// panic reaches Python as `InternalError`, never as a `BaseException`. A diagnostic.
#[pyfunction]
fn _panic(message: String) -> PyResult<()> {
    caught("_panic", || panic!("{message}"))
}

/// `_panic` in a coroutine, polled on the runtime: the future resolves with `InternalError`.
#[pyfunction]
fn _panic_async(py: Python<'_>, message: String) -> PyResult<Bound<'_, PyAny>> {
    let first_poll = super::asyncio::FirstPoll::OnRuntime;
    super::asyncio::future_into_py(py, first_poll, async move {
        if !message.is_empty() {
            panic!("{message}");
        }
        Ok(())
    })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_panic, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_async, m)?)?;
    m.add("LedgerError", m.py().get_type::<LedgerError>())?;
    m.add("InternalError", m.py().get_type::<InternalError>())?;
    m.add_function(wrap_pyfunction!(_refusal_from_state, m)?)?;
    m.add_class::<PyRefusal>()
}

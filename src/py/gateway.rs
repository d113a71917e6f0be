//! `Gateway`: the HTTP gateway (`usage-guard serve`) started from Python. It runs on the
//! crate's runtime; `wait` releases the GIL, so Python's signal handlers (Ctrl-C) run
//! between waits.

use std::time::Duration;

use pyo3::prelude::*;

use super::guard::PyGuard;
use crate::gateway::{Gateway, GatewayOptions};

/// A running gateway in front of the policy's providers, on a guard.
#[pyclass(name = "Gateway", module = "usage_guard._core", frozen)]
pub struct PyGateway {
    inner: Gateway,
}

#[pymethods]
impl PyGateway {
    /// Starts serving `guard` on `listen` (`HOST:PORT`; port 0 picks a free one). With
    /// `dashboard_only`, only the dashboard, the admin API and the health checks (no model
    /// endpoints, no provider keys needed).
    #[new]
    #[pyo3(signature = (guard, listen = "127.0.0.1:8080", *, dashboard_only = false))]
    fn new(
        py: Python<'_>,
        guard: &Bound<'_, PyGuard>,
        listen: &str,
        dashboard_only: bool,
    ) -> PyResult<Self> {
        let guard = guard.get().inner.clone();
        let options = GatewayOptions {
            listen: listen.to_string(),
            dashboard_only,
        };
        let inner = py.detach(move || Gateway::start(guard, options))?;
        Ok(Self { inner })
    }

    /// The host it listens on.
    #[getter]
    fn host(&self) -> String {
        self.inner.address().ip().to_string()
    }

    /// The port it listens on.
    #[getter]
    fn port(&self) -> u16 {
        self.inner.address().port()
    }

    /// `http://HOST:PORT`.
    #[getter]
    fn url(&self) -> String {
        format!("http://{}", self.inner.address())
    }

    /// The text `GET /metrics` answers (Prometheus format).
    fn metrics(&self) -> String {
        self.inner.metrics_text()
    }

    /// Stops taking calls (new ones get 503); running ones finish (up to
    /// `gateway.drain_seconds`), are billed, and the ledger is flushed. Returns at once:
    /// `wait()` for the end.
    fn shutdown(&self) {
        self.inner.shutdown();
    }

    /// Waits up to `timeout` seconds (forever when None) for the gateway to stop; True once
    /// it has.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> bool {
        let timeout = timeout.map(|t| Duration::from_secs_f64(t.max(0.0)));
        py.detach(|| self.inner.wait(timeout))
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGateway>()
}

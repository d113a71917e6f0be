//! Counter stores as Python objects, and the one place `Guard(store=...)` is read.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::error::Error;
use crate::guard::store::{CounterStore, MemoryStore};

/// Counters in this process's memory (the embedded default).
#[pyclass(name = "MemoryStore", module = "usage_guard._core", frozen)]
pub struct PyMemoryStore {
    pub inner: Arc<MemoryStore>,
}

#[pymethods]
impl PyMemoryStore {
    #[new]
    fn new() -> Self {
        Self {
            inner: Arc::new(MemoryStore::new()),
        }
    }

    /// How many counters the store holds now.
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!("MemoryStore(counters={})", self.inner.len())
    }
}

/// The store behind a Python store object (`None` means a new in-memory store).
pub(crate) fn extract_store(store: Option<&Bound<'_, PyAny>>) -> PyResult<Arc<dyn CounterStore>> {
    let Some(store) = store.filter(|s| !s.is_none()) else {
        return Ok(Arc::new(MemoryStore::new()));
    };
    if let Ok(memory) = store.cast::<PyMemoryStore>() {
        return Ok(memory.get().inner.clone());
    }
    if let Ok(redis) = store.cast::<super::redis_store::PyRedisStore>() {
        return Ok(redis.get().store.clone());
    }
    Err(Error::wrong_type(
        "store",
        store.get_type(),
        "accepted: a MemoryStore or a RedisStore",
    )
    .into())
}

/// Waits (at most `timeout` seconds in all) for every guard's bills queued for the
/// background; returns how many were still queued (registered with `atexit`).
#[pyfunction]
fn _flush_settles(py: Python<'_>, timeout: f64) -> u64 {
    let limit = std::time::Duration::from_secs_f64(timeout.clamp(0.0, 60.0));
    py.detach(move || crate::guard::engine::guard::flush_all_blocking(limit))
}

/// Puts the core's SIGTERM flush in place of the handler SIGTERM has now (the package's
/// Python-level one); returns whether it is armed (false off Unix).
#[pyfunction]
fn _arm_sigterm() -> bool {
    #[cfg(unix)]
    return crate::guard::engine::settle::on_sigterm::arm();
    #[cfg(not(unix))]
    false
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyMemoryStore>()?;
    m.add_function(wrap_pyfunction!(_arm_sigterm, m)?)?;
    m.add_function(wrap_pyfunction!(_flush_settles, m)?)
}

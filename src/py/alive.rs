//! Entering Python from a thread of ours (the runtime's workers, or a Python thread inside
//! `detach`) only while the interpreter is not exiting.
//!
//! At exit CPython runs the `atexit` hooks, then finalizes while daemon threads and the
//! runtime's workers may still be busy: a bill settling, a waiter polling its queue, a store
//! error being logged. `Python::attach` after finalization panics in pyo3 ("the Python
//! interpreter is not initialized"), and one during finalization may end the thread inside
//! CPython. So a hook of ours, run after every hook registered later (the package's flushes
//! among them: `atexit` runs the last registered first), marks Python as exiting, and from
//! then on these threads neither log nor call back: Python's own `logging.shutdown` has
//! closed the handlers by then anyway.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::{ffi, wrap_pyfunction};

static EXITING: AtomicBool = AtomicBool::new(false);

/// Marks Python as exiting (registered with `atexit` when the module loads).
#[pyfunction]
fn _python_exiting() {
    EXITING.store(true, Ordering::Release);
}

/// Whether this process's Python may still be entered.
fn alive() -> bool {
    // SAFETY: `Py_IsInitialized` may be called at any time, from any thread.
    !EXITING.load(Ordering::Acquire) && unsafe { ffi::Py_IsInitialized() } != 0
}

/// Runs `f` attached to Python, with this thread's state kept (`thread_state`); `None`, and
/// `f` not run, once Python is exiting.
pub(crate) fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    if !alive() {
        return None;
    }
    super::thread_state::keep();
    Python::try_attach(f)
}

/// `attach` for work that answers a Python value: once Python is exiting, a `RuntimeError`
/// (made without entering Python) that nobody is left to see.
pub(crate) fn attach_or_exiting<T>(
    f: impl for<'py> FnOnce(Python<'py>) -> PyResult<T>,
) -> PyResult<T> {
    attach(f).unwrap_or_else(|| Err(exiting()))
}

/// The error of work that ends once Python is exiting.
pub(crate) fn exiting() -> PyErr {
    PyRuntimeError::new_err("the Python interpreter is exiting")
}

/// Rust `log` records to Python `logging` (`pyo3_log`), dropped once Python is exiting.
struct UntilExit(pyo3_log::Logger);

impl log::Log for UntilExit {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        alive() && self.0.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        if alive() {
            self.0.log(record);
        }
    }

    fn flush(&self) {}
}

/// Sends Rust `log` records to Python `logging` under the `usage_guard` logger (targets are
/// module paths such as `usage_guard::guard::engine::guard`) until Python exits, and registers
/// the exit hook. Another extension may have installed a logger already; then ours stays out
/// of the way.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let hook = wrap_pyfunction!(_python_exiting, m)?;
    m.py().import("atexit")?.call_method1("register", (hook,))?;
    if let Ok(logger) = pyo3_log::Logger::new(m.py(), pyo3_log::Caching::LoggersAndLevels) {
        // `install` would box the logger itself; its level is pyo3_log's default, Debug.
        if log::set_boxed_logger(Box::new(UntilExit(logger))).is_ok() {
            log::set_max_level(log::LevelFilter::Debug);
        }
    }
    Ok(())
}

//! Entering Python from a thread of ours (the runtime's workers, or a Python thread inside
//! `detach`) only while the interpreter is not exiting.
//!
//! At exit CPython runs the `atexit` hooks, then finalizes while daemon threads and the
//! runtime's workers may still be busy: a bill settling, a waiter polling its queue, a store
//! error being logged. `Python::attach` after finalization panics in pyo3 ("the Python
//! interpreter is not initialized"), and one during finalization may end the thread inside
//! CPython. So a hook of ours, run after every hook registered later (the package's flushes
//! among them: `atexit` runs the last registered first), marks Python as exiting, lets the
//! entries already under way finish, and from then on these threads neither log nor call
//! back: Python's own `logging.shutdown` has closed the handlers by then anyway.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::{ffi, wrap_pyfunction};

static EXITING: AtomicBool = AtomicBool::new(false);
/// Entries into Python under way (`Entry`).
static ENTRIES: AtomicUsize = AtomicUsize::new(0);
/// How long the exit hook waits for the entries under way: one stuck in a callback of the
/// host's must not hold the exit up, nor an entry a forked child inherited from a parent
/// thread that was under way at the fork (that thread is gone: the count never drops).
const EXIT_WAIT: Duration = Duration::from_secs(1);

/// Marks Python as exiting (registered with `atexit` when the module loads), then waits,
/// without the GIL, for the entries that passed the check before: each may be waiting for
/// the GIL, and must have it before finalization starts.
#[pyfunction]
fn _python_exiting(py: Python<'_>) {
    EXITING.store(true, SeqCst);
    py.detach(|| {
        let deadline = Instant::now() + EXIT_WAIT;
        while ENTRIES.load(SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// One entry into Python under way: counted before the check, so the exit hook either sees
/// it or it sees the hook's mark (both are `SeqCst`).
struct Entry;

impl Entry {
    fn begin() -> Option<Entry> {
        ENTRIES.fetch_add(1, SeqCst);
        let entry = Entry;
        // SAFETY: `Py_IsInitialized` may be called at any time, from any thread.
        let alive = !EXITING.load(SeqCst) && unsafe { ffi::Py_IsInitialized() } != 0;
        alive.then_some(entry)
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        ENTRIES.fetch_sub(1, SeqCst);
    }
}

/// Runs `f` attached to Python, with this thread's state kept (`thread_state`); `None`, and
/// `f` not run, once Python is exiting.
pub(crate) fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    let _entry = Entry::begin()?;
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

/// Rust `log` records to Python `logging` (`pyo3_log`), dropped once Python is exiting. The
/// `pyo3_log` logger, and with it Python's `logging` (~8 ms of imports), is made at the first
/// record, not when the module loads: most processes never log.
struct UntilExit(OnceLock<Option<pyo3_log::Logger>>);

impl UntilExit {
    /// The logger, made on first use; `None` if `logging` could not be imported.
    fn logger(&self, py: Python<'_>) -> Option<&pyo3_log::Logger> {
        if self.0.get().is_none() {
            // Not `get_or_init`: a thread waiting in it would hold its Python thread state
            // while the one inside imports (and may wait for that thread's GIL).
            let made = pyo3_log::Logger::new(py, pyo3_log::Caching::LoggersAndLevels).ok();
            let _ = self.0.set(made);
        }
        self.0.get().and_then(Option::as_ref)
    }
}

impl log::Log for UntilExit {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        !EXITING.load(SeqCst)
            && attach(|py| self.logger(py).is_some_and(|l| l.enabled(metadata))).unwrap_or(false)
    }

    fn log(&self, record: &log::Record<'_>) {
        // `pyo3_log` attaches again inside: then only counted, on a thread state kept.
        attach(|py| self.logger(py).map(|l| l.log(record)));
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
    // `set_boxed_logger` rather than pyo3_log's `install`, which would make the logger now;
    // the level is pyo3_log's default, Debug.
    if log::set_boxed_logger(Box::new(UntilExit(OnceLock::new()))).is_ok() {
        log::set_max_level(log::LevelFilter::Debug);
    }
    Ok(())
}

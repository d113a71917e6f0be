//! Coroutines for asyncio, without a thread hop when none is needed. Each call hands back an
//! `asyncio.Future` of the running loop. Work that completes without waiting (every in-memory
//! store operation) is polled once, inline, and the future comes back already resolved:
//! awaiting it does not even yield to the loop. Other work runs on the crate's shared runtime
//! (as it is in this process: a forked child has its own) and resolves the future on the
//! loop's thread, with the other results finished meanwhile (`asyncio_batch`: one
//! `call_soon_threadsafe` a batch). Cancelling the future drops the Rust work where it stands,
//! so what that work holds is given back by its own drop.

use std::future::Future;
use std::task::{Context, Poll, Waker};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::{intern, IntoPyObjectExt};

use super::asyncio_batch::{resolve, LoopResults};

static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// A coroutine's work with a panic in any poll turned into `InternalError`: the future
/// always resolves, and never with PyO3's `PanicException` (a `BaseException`).
/// The work is held inline (one allocation per coroutine, the box of `Caught`).
struct Caught<F>(F);

impl<F: Future<Output = PyResult<T>>, T> Future for Caught<F> {
    type Output = PyResult<T>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: structural pinning of the one field: `Caught` never moves it out, has no
        // `Drop` of its own, and is `Unpin` only when the work is.
        let inner = unsafe { self.map_unchecked_mut(|c| &mut c.0) };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.poll(cx))).unwrap_or_else(
            |panic| {
                Poll::Ready(Err(super::errors::internal_error(
                    "a coroutine",
                    panic.as_ref(),
                )))
            },
        )
    }
}

/// Whether the work may be polled on the caller's thread (the event loop's) before it is
/// handed to the runtime: only when nothing in it can block a thread (no ledger write or
/// read: those wait on a queue or a database).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstPoll {
    Inline,
    OnRuntime,
}

impl FirstPoll {
    /// `Inline` unless the guard writes to or reads from a ledger.
    pub(crate) fn unless_ledger(has_ledger: bool) -> Self {
        if has_ledger {
            FirstPoll::OnRuntime
        } else {
            FirstPoll::Inline
        }
    }
}

/// Aborts the runtime task of a future that was cancelled (its done-callback).
#[pyclass(frozen)]
struct AbortOnCancel(tokio::task::AbortHandle);

#[pymethods]
impl AbortOnCancel {
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        if future
            .call_method0(intern!(future.py(), "cancelled"))?
            .is_truthy()?
        {
            self.0.abort();
        }
        Ok(())
    }
}

/// The loop and the future a runtime task holds, dropped with the GIL held (also when the
/// task is aborted). A `Py` dropped without the GIL goes to pyo3's pool of deferred decrefs,
/// behind a lock: a `fork()` in that instant would leave the lock held for ever in the child,
/// whose next `Python::attach` waits on it.
struct WithGil(Option<(Py<PyAny>, Py<PyAny>)>);

impl Drop for WithGil {
    fn drop(&mut self) {
        // Usually taken already: the task resolved the future with them.
        let Some(refs) = self.0.take() else {
            return;
        };
        let mut refs = Some(refs);
        super::alive::attach(|_| drop(refs.take()));
        // Once Python is exiting, they are left to the process's end.
        std::mem::forget(refs);
    }
}

/// `(ok, value)`: the result converted, or the exception to set.
fn outcome<T>(py: Python<'_>, out: PyResult<T>) -> (bool, Py<PyAny>)
where
    T: for<'py> IntoPyObject<'py>,
{
    match out.and_then(|v| v.into_py_any(py)) {
        Ok(value) => (true, value),
        Err(e) => (false, e.into_value(py).into_any()),
    }
}

/// An `asyncio.Future` of the running loop that resolves to what `work` returns (see the
/// module's note for when it is polled where).
pub(crate) fn future_into_py<F, T>(
    py: Python<'_>,
    first_poll: FirstPoll,
    work: F,
) -> PyResult<Bound<'_, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    let get_loop = GET_RUNNING_LOOP.get_or_try_init(py, || {
        py.import("asyncio")?
            .getattr("get_running_loop")
            .map(Bound::unbind)
    })?;
    let event_loop = get_loop.call0(py)?.into_bound(py);
    let future = event_loop.call_method0(intern!(py, "create_future"))?;
    let runtime = crate::runtime::shared();
    let mut work = Box::pin(Caught(work));
    if first_poll == FirstPoll::Inline {
        let polled = py.detach(|| {
            let _context = runtime.enter();
            work.as_mut().poll(&mut Context::from_waker(Waker::noop()))
        });
        if let Poll::Ready(out) = polled {
            let (ok, value) = outcome(py, out);
            resolve(&future, ok, value.bind(py))?;
            return Ok(future);
        }
    }
    let results = LoopResults::of(&event_loop);
    let mut held = WithGil(Some((event_loop.clone().unbind(), future.clone().unbind())));
    let task = runtime.spawn(async move {
        let out = work.await;
        let Some((loop_ref, future_ref)) = held.0.take() else {
            return;
        };
        // The result goes to the loop's thread with the others finished meanwhile
        // (`asyncio_batch`); it is made a Python object there.
        results.push(future_ref, Box::new(move |py| outcome(py, out)), loop_ref);
    });
    future
        .call_method1(
            intern!(py, "add_done_callback"),
            (AbortOnCancel(task.abort_handle()),),
        )
        .map_err(|e| PyRuntimeError::new_err(format!("asyncio future: {e}")))?;
    Ok(future)
}

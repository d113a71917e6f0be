//! A Python thread state kept for the life of each runtime thread that calls into Python.
//!
//! `Python::attach` on a thread Python never saw makes a thread state and deletes it again
//! when it lets go, every time. CPython up to 3.11 makes one under the runtime's `HEAD_LOCK`
//! without holding the GIL; a `fork()` by another thread in that instant leaves the lock held
//! in the child, which then deadlocks inside `os.fork()` itself (`PyOS_AfterFork_Child` takes
//! the lock before it re-creates it: CPython gh-112275, fixed in 3.12). The runtime's workers
//! resolve asyncio futures and call event listeners many times a second, so a process forking
//! under asyncio load met that instant (the fork stress test's child hung in `os.fork()` in
//! about 1 run of 4). Kept for good, the thread state is made once per thread.

use std::cell::Cell;

use pyo3::ffi;

thread_local! {
    static KEPT: Cell<bool> = const { Cell::new(false) };
}

/// Gives this thread a Python thread state that lives as long as the thread, unless it has
/// one already (a Python thread). Call it where the GIL is not held, before `Python::attach`
/// on a thread of the runtime.
pub(crate) fn keep() {
    if KEPT.with(Cell::get) {
        return;
    }
    KEPT.with(|k| k.set(true));
    // SAFETY: the interpreter is initialised (this module is loaded by it). A thread with no
    // thread state holds no GIL; `PyGILState_Ensure` makes one and takes the GIL, and
    // `PyEval_SaveThread` gives the GIL back while the thread state stays the thread's (its
    // gilstate count stays 1, so later `PyGILState_Release` calls never delete it).
    unsafe {
        if ffi::Py_IsInitialized() == 0 || !ffi::PyGILState_GetThisThreadState().is_null() {
            return;
        }
        let _state = ffi::PyGILState_Ensure();
        ffi::PyEval_SaveThread();
    }
}

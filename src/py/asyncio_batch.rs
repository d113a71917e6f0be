//! Results of runtime tasks handed to their event loop in batches. Each result used to enter
//! Python from a runtime worker and call `call_soon_threadsafe` on its own: a GIL handoff
//! with the loop's thread (futex waits and context switches on both sides) and a write to the
//! loop's self-pipe, per call. Here a finished task queues its result for its loop; the first
//! result of a batch sends one drain (`call_soon_threadsafe`), and every result finished
//! before the drain runs on the loop's thread rides with it, without entering Python.
//!
//! The queue of a loop is found through the loop's thread (asyncio runs one loop per thread
//! at a time), without a global map. The thread keeps only a weak reference, so a thread's
//! exit drops nothing that needs Python: the queue lives while a task or a drain holds it.
//! Its last holder is usually a drain, dropped by Python on the loop's thread; a task
//! cancelled or outrun by its drain may let go last, from a runtime worker, which then enters
//! Python to drop it (as `asyncio::WithGil` does). It holds the loop, so the loop it names
//! cannot be another object at the same address. A drain that never runs (its loop closed first, or
//! `call_soon_threadsafe` refused) drops the results with the GIL when Python drops it: a
//! ticket in one gives its holds back, as when a single result was dropped before.
//!
//! `fork()`: a queue belongs to the fork generation that made it; a child never locks or
//! drops its parent's (src/fork.rs), whose lock a parent thread may have held at the fork.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use pyo3::intern;
use pyo3::prelude::*;

use crate::lock::Mutex;

/// Resolves an asyncio future on the loop's thread with `value` (its result when `ok`, else
/// the exception to set); does nothing to a future already done (cancelled meanwhile).
pub(super) fn resolve(
    future: &Bound<'_, PyAny>,
    ok: bool,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    if future
        .call_method0(intern!(future.py(), "done"))?
        .is_truthy()?
    {
        return Ok(());
    }
    let method = if ok { "set_result" } else { "set_exception" };
    future.call_method1(method, (value,))?;
    Ok(())
}

/// Makes a finished task's Python result (with the GIL): `(ok, value)` for `resolve`.
pub(crate) type Outcome = Box<dyn FnOnce(Python<'_>) -> (bool, Py<PyAny>) + Send>;

/// What waits for the loop's thread. Every Python object here is dropped with the GIL: by a
/// drain, or by `LoopResults::drop`.
#[derive(Default)]
struct Batch {
    done: Vec<(Py<PyAny>, Outcome)>,
    /// A drain is on its way to the loop (sent, not run yet).
    sent: bool,
    /// The loop references of the tasks that did not send the drain.
    spare: Vec<Py<PyAny>>,
}

/// One event loop's finished results.
pub(crate) struct LoopResults {
    event_loop: Option<Py<PyAny>>,
    generation: u64,
    batch: Mutex<Batch>,
}

thread_local! {
    /// The queue of the loop this thread runs (or last ran), while anything holds it.
    static CURRENT: RefCell<Weak<LoopResults>> = const { RefCell::new(Weak::new()) };
}

impl LoopResults {
    /// The queue of `event_loop`, the loop running on this thread: the one in use, or a new
    /// one (none in use, the loop is another, or the process was forked since).
    pub(crate) fn of(event_loop: &Bound<'_, PyAny>) -> Arc<LoopResults> {
        let generation = crate::fork::generation();
        let (results, other) = CURRENT.with(|cell| {
            let mut slot = cell.borrow_mut();
            let kept = slot.upgrade();
            if let Some(kept) = &kept {
                let same = kept.event_loop.as_ref().is_some_and(|l| l.is(event_loop));
                if same && kept.generation == generation {
                    return (kept.clone(), None);
                }
            }
            let fresh = Arc::new(LoopResults {
                event_loop: Some(event_loop.clone().unbind()),
                generation,
                batch: Mutex::new(Batch::default()),
            });
            *slot = Arc::downgrade(&fresh);
            (fresh, kept)
        });
        // Let go once the slot is free again: should it be the last holder, its drop enters
        // Python (and a parent's, in a forked child, forgets what it holds).
        drop(other);
        results
    }

    /// Queues `future`'s outcome for the loop's thread (from a runtime task); sends a drain
    /// unless one is on its way. `event_loop` is the task's reference to the loop. The task's
    /// hold on the queue goes into the drain it sends, or is let go while a drain on its way
    /// holds the queue.
    pub(crate) fn push(
        self: Arc<Self>,
        future: Py<PyAny>,
        outcome: Outcome,
        event_loop: Py<PyAny>,
    ) {
        let send = {
            let mut batch = self.batch.lock();
            batch.done.push((future, outcome));
            if batch.sent {
                batch.spare.push(event_loop);
                None
            } else {
                batch.sent = true;
                Some(event_loop)
            }
        };
        let Some(event_loop) = send else {
            return;
        };
        let mut held = Some((event_loop, self));
        super::alive::attach(|py| {
            let (event_loop, results) = held.take().expect("taken once");
            let drain = Drain {
                results,
                ran: AtomicBool::new(false),
            };
            let sent = Py::new(py, drain).and_then(|drain| {
                event_loop.call_method1(py, intern!(py, "call_soon_threadsafe"), (drain,))
            });
            if let Err(e) = sent {
                // The loop closed before the work finished: nobody is left to tell. (The
                // drain, dropped unrun, dropped what waited.)
                log::debug!("asyncio results had no loop to go to: {e}");
            }
        });
        // Once Python is exiting, the references are left to the process's end.
        std::mem::forget(held);
    }

    /// Takes what waits, and lets the next result send a drain.
    fn take(&self) -> Batch {
        let mut batch = self.batch.lock();
        std::mem::take(&mut *batch)
    }
}

impl Drop for LoopResults {
    fn drop(&mut self) {
        let refs = (self.event_loop.take(), std::mem::take(self.batch.get_mut()));
        if self.generation != crate::fork::generation() {
            // A parent's results, in a forked child: its tickets are the parent's to bill or
            // give back, not the child's to drop.
            std::mem::forget(refs);
            return;
        }
        let mut refs = Some(refs);
        super::alive::attach(|_| drop(refs.take()));
        // Once Python is exiting, they are left to the process's end.
        std::mem::forget(refs);
    }
}

/// The callback a batch sends to its loop: resolves every future queued by then.
#[pyclass(frozen)]
struct Drain {
    results: Arc<LoopResults>,
    ran: AtomicBool,
}

#[pymethods]
impl Drain {
    fn __call__(&self, py: Python<'_>) {
        if self.ran.swap(true, Ordering::AcqRel)
            || self.results.generation != crate::fork::generation()
        {
            return;
        }
        let batch = self.results.take();
        for (future, outcome) in batch.done {
            let (ok, value) = outcome(py);
            if let Err(e) = resolve(future.bind(py), ok, value.bind(py)) {
                log::debug!("an asyncio future could not take its result: {e}");
            }
        }
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        // Unrun (its loop closed first, or it was never sent): what waited is dropped here,
        // with the GIL (a pyclass is dropped by Python); a result that finishes later sends
        // a drain of its own, which meets the same end.
        if !self.ran.load(Ordering::Acquire) && self.results.generation == crate::fork::generation()
        {
            drop(self.results.take());
        }
    }
}

"""Every way a Python worker ends flushes the bills queued for the background and the ledger
rows queued for the writer, within the exit budget (5 s for the bills, then 5 s for the
rows; a database that does not answer does not keep the process). A bill that returns after
the flush began (a daemon thread billing while the interpreter ends) waits for its row's
commit, so it is not lost unseen.

- Normal exit and `sys.exit`: an `atexit` hook.
- SIGTERM under the default handler: a handler, installed at import only while SIGTERM has
  the default disposition (a handler the host installed, or SIG_IGN, is left alone), flushes
  and then ends the process by SIGTERM as before (exit status -15, which pools and
  supervisors read), rather than raising `SystemExit` into code that may swallow it. The
  core's own handler does the work, on a thread of its own (`_arm_sigterm`): a Python-level
  handler runs only when the main thread runs bytecode again, which a main thread asleep in
  a lock's C wait may never do (a `Pool` worker so terminated never ended). Python's
  `signal.getsignal` still shows `_on_sigterm`, which a host's handler may chain to.
- The children of `multiprocessing` (`Process`, `Pool`, `concurrent.futures`' process pool)
  and billiard's (Celery prefork) end with `os._exit`, which skips `atexit`: a
  `multiprocessing.util.Finalize` (run by the child's `_exit_function`) is armed in each
  child, through `os.register_at_fork` and `register_after_fork` (the child clears the
  finalizers it inherited); billiard's pool workers leave through `Worker._do_exit` without
  running the finalizers, so that exit flushes first.

`os._exit` (other than the above) and SIGKILL cannot be hooked: a worker that may end so
bills with `bill(..., wait=True)`, which returns once the store took the bill.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import Any

from ._core import _arm_sigterm, _flush_ledgers, _flush_settles

#: How long an exit waits for the bills queued for the background, retries included.
EXIT_BUDGET_S = 5.0


def _error(message: str, *args: object) -> None:
    # `logging` is imported when there is something to say (~8 ms a process rarely needs).
    import logging

    logging.getLogger("usage_guard").error(message, *args)


def flush_at_exit(how: str) -> None:
    """Sends the bills queued for the background (Redis), waiting at most `EXIT_BUDGET_S`
    for them and their retries, then writes every ledger row billed so far. Logs what was
    left (with no handler configured, Python's last-resort handler prints it on stderr)."""
    left = _flush_settles(EXIT_BUDGET_S)
    if left:
        _error(
            "at %s: %d queued or retried bills were not settled within %.0f s",
            how,
            left,
            EXIT_BUDGET_S,
        )
    for error in _flush_ledgers(EXIT_BUDGET_S):
        _error("at %s: %s", how, error)


def _at_exit() -> None:
    flush_at_exit("exit")


def _on_sigterm(signum: int, frame: Any) -> None:
    """Flushes, then ends the process by the signal's default action, as it would have."""
    try:
        flush_at_exit("SIGTERM")
    finally:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    raise SystemExit(128 + signum)  # the signal is blocked in this thread: end anyway


def _install_sigterm() -> None:
    """Installs the SIGTERM handler when SIGTERM has its default disposition (only the main
    thread may install one), then lets the core take it over."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
        _arm_sigterm()


def rearm_sigterm() -> None:
    """Where SIGTERM's Python-level handler is the package's again, the core takes it over
    again: after code that installed a handler of its own for a while put the package's back
    (`serve`), and in a forked child (whose exit thread starts with the first thread the core
    starts there; until then nothing is queued, and SIGTERM ends the child as the default
    would)."""
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            _arm_sigterm()


class _Armed:
    """The object `register_after_fork` keeps its callback for (a weak reference)."""

    pid = 0


_ARMED = _Armed()


def _finalize(util: Any) -> None:
    """Arms the flush in this process's `multiprocessing` finalizers (once a process)."""
    if _ARMED.pid != os.getpid():
        _ARMED.pid = os.getpid()
        util.Finalize(None, flush_at_exit, args=("multiprocessing child exit",), exitpriority=-50)


def _arm_multiprocessing() -> None:
    """Arms the flush in the finalizers of a `multiprocessing` child: now (this process may
    be one: spawn and forkserver import the package in the child), and after the child's
    bootstrap has cleared the finalizers it inherited (`register_after_fork`)."""
    util = sys.modules.get("multiprocessing.util")
    if util is None:
        return
    util.register_after_fork(_ARMED, lambda _: _finalize(util))
    parent = getattr(sys.modules.get("multiprocessing.process"), "parent_process", None)
    if parent is not None and parent() is not None:
        _finalize(util)


def _arm_billiard() -> None:
    """billiard's pool workers end in `Worker._do_exit` by `os._exit`, without running the
    finalizers: that exit flushes first (patched in the forked child only)."""
    pool = sys.modules.get("billiard.pool")
    worker = getattr(pool, "Worker", None)
    do_exit = getattr(worker, "_do_exit", None)
    if do_exit is None or getattr(do_exit, "_usage_guard_flushes", False):
        return

    def _do_exit(self: Any, *args: Any, **kwargs: Any) -> Any:
        flush_at_exit("billiard worker exit")
        return do_exit(self, *args, **kwargs)

    _do_exit._usage_guard_flushes = True  # type: ignore[attr-defined]
    worker._do_exit = _do_exit  # type: ignore[union-attr]


def _after_fork_in_child() -> None:
    rearm_sigterm()
    _arm_multiprocessing()
    _arm_billiard()


def install() -> None:
    """Registers every exit hook (called once, when the package is imported)."""
    atexit.register(_at_exit)
    _install_sigterm()
    _arm_multiprocessing()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)

"""The HTTP gateway: OpenAI, Anthropic and Ollama endpoints in front of the providers, on a
guard (see docs/gateway.md).

    guard = ug.Guard(ug.Policy.load("policy.toml"), store=ug.RedisStore("redis://..."))
    ug.serve(guard, listen="127.0.0.1:8080")   # blocks; Ctrl-C or SIGTERM drains and returns

`Gateway(guard, listen)` starts one in the background (tests, notebooks): `.url`,
`.shutdown()`, `.wait(timeout)`.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Callable, Optional

from . import _exits
from ._core import Gateway, Guard

__all__ = ["Gateway", "serve"]


class _Stop(Exception):
    """SIGTERM, raised in the main thread so that `serve` drains like on Ctrl-C."""


def _raise_stop(signum: int, frame: Optional[FrameType]) -> None:
    raise _Stop()


def log_to_stderr_unless_configured() -> None:
    """For the CLI's servers: INFO records to stderr with their time, unless the root logger
    has handlers already. `logging` is imported here, not with the CLI."""
    import logging

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")


def serve(
    guard: Guard,
    listen: str = "127.0.0.1:8080",
    *,
    on_ready: Optional[Callable[[Gateway], None]] = None,
    dashboard_only: bool = False,
) -> None:
    """Serves `guard` on `listen` until Ctrl-C (KeyboardInterrupt) or SIGTERM, then stops
    taking calls (new ones get 503), lets running ones finish (up to `gateway.drain_seconds`),
    bills them, flushes the ledger and returns. The GIL is released while it waits.
    `on_ready(gateway)` is called once it listens. `dashboard_only`: only the dashboard, the
    admin API and the health checks (docs/dashboard.md)."""
    gateway = Gateway(guard, listen, dashboard_only=dashboard_only)
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_stop) if main else None
    try:
        if on_ready is not None:
            on_ready(gateway)
        while not gateway.wait(0.2):
            pass
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        gateway.shutdown()
        gateway.wait()
        if main:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            _exits.rearm_sigterm()  # the package's handler back in the core's hands

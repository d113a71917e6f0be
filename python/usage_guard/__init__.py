"""usage_guard: meter and enforce usage limits on LLM model calls.

import usage_guard as ug
guard = ug.Guard(ug.Policy.load("policy.toml"))
ticket = guard.admit("alice", "gpt-5", prompt_tokens=1200, max_tokens=4000)
...  # call the model within ticket.ceiling
ticket.bill(input_tokens=1100, output_tokens=800)
"""

import atexit
from typing import TYPE_CHECKING, Any

from ._core import (
    BatchTicket,
    EventStream,
    FitResult,
    Guard,
    InternalError,
    LedgerError,
    ManualClock,
    MemoryStore,
    Policy,
    PostgresLedger,
    RedisStore,
    Refusal,
    SqliteLedger,
    Ticket,
    __version__,
    _flush_ledgers,
    _flush_settles,
    count_prompt,
    count_tokens,
    fit,
    intersect_ceilings,
    usage_capped,
)
from .errors import (
    ContextWindowExceeded,
    ModelNotFound,
    PolicyError,
    ProviderUnavailable,
    UsageLimitDoesNotFit,
    UsageLimitError,
    UsageLimitHeld,
    UsageLimitsUnavailable,
)
from .gateway import Gateway, serve

if TYPE_CHECKING:
    from .quota import Decision, PolicyInUse, QuotaPolicyError, QuotaService

# The quota service's module is imported on first use, not with the package: it brings asyncio
# and the rest of its imports (~60 ms), which a process that only admits and bills never needs.
_LAZY = {
    "Decision": "quota",
    "PolicyInUse": "quota",
    "QuotaPolicyError": "quota",
    "QuotaService": "quota",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def _flush_ledgers_at_exit() -> None:
    """Writes every ledger row billed so far; logs what could not be written (with no
    handler configured, Python's last-resort handler prints it on stderr)."""
    for error in _flush_ledgers():
        import logging

        logging.getLogger("usage_guard").error("at exit: %s", error)


def _flush_settles_at_exit() -> None:
    """Sends the bills queued for the background (Redis), and lets the retries of bills the
    store did not answer run, waiting at most 5 s in all."""
    left = _flush_settles(5.0)
    if left:
        import logging

        logging.getLogger("usage_guard").error(
            "at exit: %d queued or retried bills were not settled within 5 s", left
        )


# A clean interpreter exit settles every queued bill, then writes every ledger row billed so
# far (atexit runs the last registered first).
atexit.register(_flush_ledgers_at_exit)
atexit.register(_flush_settles_at_exit)

__all__ = [
    "ContextWindowExceeded",
    "Decision",
    "PolicyInUse",
    "QuotaPolicyError",
    "QuotaService",
    "ModelNotFound",
    "ProviderUnavailable",
    "FitResult",
    "BatchTicket",
    "EventStream",
    "Gateway",
    "Guard",
    "InternalError",
    "LedgerError",
    "ManualClock",
    "MemoryStore",
    "Policy",
    "PolicyError",
    "PostgresLedger",
    "RedisStore",
    "Refusal",
    "SqliteLedger",
    "Ticket",
    "UsageLimitDoesNotFit",
    "UsageLimitError",
    "UsageLimitHeld",
    "UsageLimitsUnavailable",
    "__version__",
    "count_prompt",
    "count_tokens",
    "fit",
    "intersect_ceilings",
    "serve",
    "usage_capped",
]

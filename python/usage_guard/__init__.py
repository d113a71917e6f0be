"""usage_guard: meter and enforce usage limits on LLM model calls.

import usage_guard as ug
guard = ug.Guard(ug.Policy.load("policy.toml"))
ticket = guard.admit("alice", "gpt-5", prompt_tokens=1200, max_tokens=4000)
...  # call the model within ticket.ceiling
ticket.bill(input_tokens=1100, output_tokens=800)
"""

from typing import TYPE_CHECKING, Any

from . import _exits
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


# Every way the process ends flushes the queued bills, then the ledger rows: normal exit,
# `sys.exit`, SIGTERM under the default handler, the children of multiprocessing and billiard
# (`_exits`); `os._exit` and SIGKILL cannot be hooked (`bill(..., wait=True)` there).
_exits.install()

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

"""usage_guard: meter and enforce usage limits on LLM model calls.

import usage_guard as ug
guard = ug.Guard(ug.Policy.load("policy.toml"))
ticket = guard.admit("alice", "gpt-5", prompt_tokens=1200, max_tokens=4000)
...  # call the model within ticket.ceiling
ticket.bill(input_tokens=1100, output_tokens=800)
"""

from ._core import (
    FitResult,
    Guard,
    ManualClock,
    MemoryStore,
    Policy,
    RedisStore,
    Refusal,
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
    PolicyError,
    UsageLimitDoesNotFit,
    UsageLimitError,
    UsageLimitsUnavailable,
)

__all__ = [
    "ContextWindowExceeded",
    "FitResult",
    "Guard",
    "ManualClock",
    "MemoryStore",
    "Policy",
    "PolicyError",
    "RedisStore",
    "Refusal",
    "Ticket",
    "UsageLimitDoesNotFit",
    "UsageLimitError",
    "UsageLimitsUnavailable",
    "__version__",
    "count_prompt",
    "count_tokens",
    "fit",
    "intersect_ceilings",
    "usage_capped",
]

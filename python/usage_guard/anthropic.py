"""Guarded Anthropic clients (the adapter lives in `usage_guard._adapter.anthropic`).

from anthropic import Anthropic
from usage_guard.anthropic import GuardedAnthropic

client = GuardedAnthropic(Anthropic(), guard, user="alice")
with client.messages.stream(model=..., max_tokens=4096, messages=[...]) as stream:
    for text in stream.text_stream:
        ...
stream.usage_limits     # set when the block exits
"""

from ._adapter.anthropic import MESSAGES, GuardedAnthropic, GuardedAsyncAnthropic

__all__ = ["GuardedAnthropic", "GuardedAsyncAnthropic", "MESSAGES"]

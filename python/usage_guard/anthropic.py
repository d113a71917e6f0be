"""Guarded Anthropic clients (the adapter lives in `usage_guard._adapter.anthropic`).

from anthropic import Anthropic
from usage_guard.anthropic import GuardedAnthropic

client = GuardedAnthropic(Anthropic(), guard, user="alice")
with client.messages.stream(model=..., max_tokens=4096, messages=[...]) as stream:
    for text in stream.text_stream:
        ...
stream.usage_limits     # set when the block exits

Typed in `anthropic.pyi`: the clients as the SDK's, answers as the SDK's types with the
guard's attributes (`GuardedMessage`, ...; `usage_guard.types.GuardedAnswer`).
"""

from ._adapter.anthropic import MESSAGES, GuardedAnthropic, GuardedAsyncAnthropic
from ._adapter.names import STREAMS, module_getattr, resources

# The answer, stream and resource types `anthropic.pyi` declares, as their run-time classes.
__getattr__ = module_getattr(
    __name__,
    {
        "GuardedMessage": ("anthropic.types", "Message"),
        "GuardedMessageStream": ("anthropic.lib.streaming", "MessageStream"),
        "GuardedAsyncMessageStream": ("anthropic.lib.streaming", "AsyncMessageStream"),
        "GuardedMessageStreamManager": ("usage_guard._adapter.anthropic", "_StreamManager"),
        "GuardedAsyncMessageStreamManager": ("usage_guard._adapter.anthropic", "_StreamManager"),
        **STREAMS,
        **resources("GuardedMessages", "GuardedAsyncMessages"),
    },
)

__all__ = ["GuardedAnthropic", "GuardedAsyncAnthropic", "MESSAGES"]

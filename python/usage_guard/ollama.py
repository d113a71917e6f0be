"""Guarded Ollama clients (the adapter lives in `usage_guard._adapter.ollama`).

import ollama
from usage_guard.ollama import GuardedOllama

client = GuardedOllama(ollama.Client(), guard, user="alice")
reply = client.chat("llama3.2", messages=[...])
reply.usage_limits

Typed in `ollama.pyi`: the clients as the SDK's, answers as the SDK's types with the guard's
attributes (`GuardedChatResponse`, ...; `usage_guard.types.GuardedAnswer`).
"""

from ._adapter.names import STREAMS, module_getattr
from ._adapter.ollama import CHAT, EMBED, GENERATE, GuardedAsyncOllama, GuardedOllama

# The answer and stream types `ollama.pyi` declares, as their run-time classes.
__getattr__ = module_getattr(
    __name__,
    {
        "GuardedChatResponse": ("ollama", "ChatResponse"),
        "GuardedGenerateResponse": ("ollama", "GenerateResponse"),
        "GuardedEmbedResponse": ("ollama", "EmbedResponse"),
        **STREAMS,
    },
)

__all__ = ["GuardedOllama", "GuardedAsyncOllama", "CHAT", "GENERATE", "EMBED"]

"""Guarded Ollama clients (the adapter lives in `usage_guard._adapter.ollama`).

import ollama
from usage_guard.ollama import GuardedOllama

client = GuardedOllama(ollama.Client(), guard, user="alice")
reply = client.chat("llama3.2", messages=[...])
reply.usage_limits
"""

from ._adapter.ollama import CHAT, EMBED, GENERATE, GuardedAsyncOllama, GuardedOllama

__all__ = ["GuardedOllama", "GuardedAsyncOllama", "CHAT", "GENERATE", "EMBED"]

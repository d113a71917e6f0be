"""Guarded OpenAI clients (the adapter lives in `usage_guard._adapter.openai`).

from openai import OpenAI
from usage_guard.openai import GuardedOpenAI

client = GuardedOpenAI(OpenAI(), guard, user="alice")
reply = client.chat.completions.create(model="gpt-5", messages=[...])
reply.usage_limits      # the usage view, with "capped"
"""

from ._adapter.openai import (
    CHAT,
    COMPLETIONS,
    EMBEDDINGS,
    RESPONSES,
    GuardedAsyncOpenAI,
    GuardedOpenAI,
)

__all__ = ["GuardedOpenAI", "GuardedAsyncOpenAI", "CHAT", "RESPONSES", "COMPLETIONS", "EMBEDDINGS"]

"""Guarded OpenAI clients (the adapter lives in `usage_guard._adapter.openai`).

from openai import OpenAI
from usage_guard.openai import GuardedOpenAI

client = GuardedOpenAI(OpenAI(), guard, user="alice")
reply = client.chat.completions.create(model="gpt-5", messages=[...])
reply.usage_limits      # the usage view, with "capped"

Typed in `openai.pyi`: the clients as the SDK's, answers as the SDK's types with the guard's
attributes (`GuardedChatCompletion`, ...; `usage_guard.types.GuardedAnswer`).
"""

from ._adapter.names import STREAMS, module_getattr, resources
from ._adapter.openai import (
    CHAT,
    COMPLETIONS,
    EMBEDDINGS,
    RESPONSES,
    GuardedAsyncOpenAI,
    GuardedOpenAI,
)

# The answer, stream and resource types `openai.pyi` declares, as their run-time classes.
__getattr__ = module_getattr(
    __name__,
    {
        "GuardedChatCompletion": ("openai.types.chat", "ChatCompletion"),
        "GuardedResponse": ("openai.types.responses", "Response"),
        "GuardedCompletion": ("openai.types", "Completion"),
        "GuardedEmbeddings": ("openai.types", "CreateEmbeddingResponse"),
        **STREAMS,
        **resources(
            "GuardedChat",
            "GuardedCompletions",
            "GuardedResponses",
            "GuardedLegacyCompletions",
            "GuardedEmbeddingsResource",
            "GuardedAsyncChat",
            "GuardedAsyncCompletions",
            "GuardedAsyncResponses",
            "GuardedAsyncLegacyCompletions",
            "GuardedAsyncEmbeddingsResource",
        ),
    },
)

__all__ = ["GuardedOpenAI", "GuardedAsyncOpenAI", "CHAT", "RESPONSES", "COMPLETIONS", "EMBEDDINGS"]

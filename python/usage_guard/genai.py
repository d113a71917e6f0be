"""Guarded Google Gen AI clients, for Gemini (the adapter lives in
`usage_guard._adapter.genai`). Needs the `google-genai` package:
`pip install 'usage-guard[genai]'`.

from google import genai
from usage_guard.genai import GuardedGenAI

client = GuardedGenAI(genai.Client(), guard, user="alice")
reply = client.models.generate_content(model="gemini-2.5-flash", contents="Hi")
reply.usage_limits
async_reply = await client.aio.models.generate_content(model=..., contents=...)
chat = client.chats.create(model=...)  # each request it sends is guarded

Typed in `genai.pyi`: the clients as the SDK's, answers as the SDK's types with the guard's
attributes (`GuardedGenerateContentResponse`; `usage_guard.types.GuardedAnswer`).
"""

try:
    import google.genai  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by the wheel smoke test
    raise ImportError(
        "usage_guard.genai needs the google-genai package: "
        "pip install 'usage-guard[genai]' (or pip install google-genai)"
    ) from exc

from ._adapter.genai import GENERATE, GENERATE_STREAM, GuardedAsyncGenAI, GuardedGenAI
from ._adapter.names import STREAMS, module_getattr

_ADAPTER = "usage_guard._adapter.genai"

# The answer, stream and resource types `genai.pyi` declares, as their run-time classes.
__getattr__ = module_getattr(
    __name__,
    {
        "GuardedGenerateContentResponse": ("google.genai.types", "GenerateContentResponse"),
        "GuardedEmbedContentResponse": ("google.genai.types", "EmbedContentResponse"),
        **STREAMS,
        "GuardedModels": (_ADAPTER, "GuardedModels"),
        "GuardedAsyncModels": (_ADAPTER, "GuardedAsyncModels"),
    },
)

__all__ = ["GuardedGenAI", "GuardedAsyncGenAI", "GENERATE", "GENERATE_STREAM"]

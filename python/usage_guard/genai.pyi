"""Types of the guarded Google Gen AI clients (the module re-exports
`usage_guard._adapter.genai`).

For a type checker a guarded client is the `genai.Client` it wraps: what it does not guard
passes through at run time and types as the SDK's; `models.generate_content` and
`generate_content_stream` (and `aio`'s) take the SDK's parameters (plus `user` and
`usage_attributes`) and answer the SDK's types with the guard's attributes
(`usage_guard.types.GuardedAnswer`; streams `GuardedStreamAnswer`), and `embed_content` too.
`chats` are the SDK's, sending through the guarded `models`. At run time the clients are
proxies, not subclasses: `isinstance(client, genai.Client)` is False (their `models` are
the SDK's `Models` / `AsyncModels` subclasses).
"""

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Optional, TypeVar

from google import genai
from google.genai import types
from google.genai.client import AsyncClient
from google.genai.models import AsyncModels, Models

from ._adapter.call import Api
from ._answers import Answer, StreamAnswer
from ._core import Guard

__all__ = ["GuardedGenAI", "GuardedAsyncGenAI", "GENERATE", "GENERATE_STREAM"]

GENERATE: Api
GENERATE_STREAM: Api

_T = TypeVar("_T")

# The SDK's answer and streams with the guard's attributes (at run time: the SDK's class, and
# usage_guard's stream proxies).
class GuardedGenerateContentResponse(types.GenerateContentResponse, Answer): ...
class GuardedEmbedContentResponse(types.EmbedContentResponse, Answer): ...

class GuardedStream(Iterator[_T], StreamAnswer):
    def __next__(self) -> _T: ...
    def close(self) -> None: ...

class GuardedAsyncStream(AsyncIterator[_T], StreamAnswer):
    async def __anext__(self) -> _T: ...
    async def close(self) -> None: ...
    async def aclose(self) -> None: ...

class GuardedModels(Models):
    def generate_content(
        self,
        *,
        model: str,
        contents: types.ContentListUnionDict,
        config: Optional[types.GenerateContentConfigOrDict] = None,
        user: Optional[str] = None,
        usage_attributes: Optional[Mapping[str, str]] = None,
    ) -> GuardedGenerateContentResponse: ...
    def generate_content_stream(
        self,
        *,
        model: str,
        contents: types.ContentListUnionDict,
        config: Optional[types.GenerateContentConfigOrDict] = None,
        user: Optional[str] = None,
        usage_attributes: Optional[Mapping[str, str]] = None,
    ) -> GuardedStream[types.GenerateContentResponse]: ...
    def embed_content(
        self,
        *,
        model: str,
        contents: types.ContentListUnion,
        config: Optional[types.EmbedContentConfigOrDict] = None,
        user: Optional[str] = None,
        usage_attributes: Optional[Mapping[str, str]] = None,
    ) -> GuardedEmbedContentResponse: ...

class GuardedAsyncModels(AsyncModels):
    async def generate_content(
        self,
        *,
        model: str,
        contents: types.ContentListUnionDict,
        config: Optional[types.GenerateContentConfigOrDict] = None,
        user: Optional[str] = None,
        usage_attributes: Optional[Mapping[str, str]] = None,
    ) -> GuardedGenerateContentResponse: ...
    async def generate_content_stream(
        self,
        *,
        model: str,
        contents: types.ContentListUnionDict,
        config: Optional[types.GenerateContentConfigOrDict] = None,
        user: Optional[str] = None,
        usage_attributes: Optional[Mapping[str, str]] = None,
    ) -> GuardedAsyncStream[types.GenerateContentResponse]: ...
    async def embed_content(
        self,
        *,
        model: str,
        contents: types.ContentListUnion,
        config: Optional[types.EmbedContentConfigOrDict] = None,
        user: Optional[str] = None,
        usage_attributes: Optional[Mapping[str, str]] = None,
    ) -> GuardedEmbedContentResponse: ...

class GuardedAsyncGenAI(AsyncClient):
    """`GuardedGenAI`'s `aio`: the guarded methods are coroutines."""

    def __init__(
        self,
        client: AsyncClient,
        guard: Guard,
        user: Optional[str] = None,
        fallbacks: Optional[list[str]] = None,
        credential: str = "default",
    ) -> None: ...
    @property
    def client(self) -> AsyncClient: ...
    @property
    def guard(self) -> Guard: ...
    @property
    def models(self) -> GuardedAsyncModels: ...
    def for_user(self, user: Optional[str]) -> GuardedAsyncGenAI: ...

class GuardedGenAI(genai.Client):
    """A `genai.Client` whose Gemini calls are guarded (`models`, and `aio`'s)."""

    def __init__(
        self,
        client: genai.Client,
        guard: Guard,
        user: Optional[str] = None,
        fallbacks: Optional[list[str]] = None,
        credential: str = "default",
    ) -> None: ...
    @property
    def client(self) -> genai.Client: ...
    @property
    def guard(self) -> Guard: ...
    @property
    def models(self) -> GuardedModels: ...
    @property
    def aio(self) -> GuardedAsyncGenAI: ...
    def for_user(self, user: Optional[str]) -> GuardedGenAI: ...

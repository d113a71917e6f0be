"""Types of the guarded OpenAI clients (the module re-exports `usage_guard._adapter.openai`).

For a type checker a guarded client is the SDK client it wraps: what it does not guard passes
through to the wrapped client at run time and types as the SDK's; the guarded methods take
the SDK's own request TypedDicts (plus `usage_attributes`) and answer the SDK's types with
the guard's attributes (`usage_guard.types.GuardedAnswer`), streams the SDK's streams with
them (`GuardedStreamAnswer`). At run time the clients and streams are proxies, not
subclasses: `isinstance(client, openai.OpenAI)` is False.
"""

from collections.abc import Mapping
from typing import Any, Optional, TypeVar, Union, overload

import openai
from openai import AsyncStream, NotGiven, Omit, Stream, Timeout
from openai.resources import AsyncCompletions as _AsyncLegacy
from openai.resources import AsyncEmbeddings, Embeddings
from openai.resources import Completions as _Legacy
from openai.resources.chat import AsyncChat, AsyncCompletions, Chat, Completions
from openai.resources.responses import AsyncResponses, Responses
from openai.types import Completion, CreateEmbeddingResponse
from openai.types import completion_create_params as _legacy
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.chat import completion_create_params as _chat
from openai.types.embedding_create_params import EmbeddingCreateParams
from openai.types.responses import Response, ResponseStreamEvent
from openai.types.responses import response_create_params as _responses
from typing_extensions import TypedDict, Unpack

from ._adapter.call import Api
from ._answers import Answer, StreamAnswer
from ._core import Guard

__all__ = ["GuardedOpenAI", "GuardedAsyncOpenAI", "CHAT", "RESPONSES", "COMPLETIONS", "EMBEDDINGS"]

CHAT: Api
RESPONSES: Api
COMPLETIONS: Api
EMBEDDINGS: Api

_T = TypeVar("_T")

# The SDK's answers with the guard's attributes (at run time: the SDK's classes).
class GuardedChatCompletion(ChatCompletion, Answer): ...
class GuardedResponse(Response, Answer): ...
class GuardedCompletion(Completion, Answer): ...
class GuardedEmbeddings(CreateEmbeddingResponse, Answer): ...

# The SDK's streams with the guard's attributes, set when the stream ends.
class GuardedStream(Stream[_T], StreamAnswer): ...
class GuardedAsyncStream(AsyncStream[_T], StreamAnswer): ...

class _Options(TypedDict, total=False):
    """The SDK's request options, and the attributes the policy's generic rules read."""

    extra_headers: Optional[Mapping[str, Union[str, Omit]]]
    extra_query: Optional[Mapping[str, object]]
    extra_body: Optional[object]
    timeout: Union[float, Timeout, None, NotGiven]
    usage_attributes: Mapping[str, str]

class _ChatPlain(_chat.CompletionCreateParamsNonStreaming, _Options, total=False): ...
class _ChatStream(_chat.CompletionCreateParamsStreaming, _Options, total=False): ...
class _ResponsesPlain(_responses.ResponseCreateParamsNonStreaming, _Options, total=False): ...
class _ResponsesStream(_responses.ResponseCreateParamsStreaming, _Options, total=False): ...
class _LegacyPlain(_legacy.CompletionCreateParamsNonStreaming, _Options, total=False): ...
class _LegacyStream(_legacy.CompletionCreateParamsStreaming, _Options, total=False): ...
class _Embeddings(EmbeddingCreateParams, _Options, total=False): ...

# -- sync ---------------------------------------------------------------------------------------

class GuardedCompletions(Completions):
    @overload  # type: ignore[override]
    def create(self, **kwargs: Unpack[_ChatPlain]) -> GuardedChatCompletion: ...
    @overload
    def create(self, **kwargs: Unpack[_ChatStream]) -> GuardedStream[ChatCompletionChunk]: ...

class GuardedChat(Chat):
    @property
    def completions(self) -> GuardedCompletions: ...

class GuardedResponses(Responses):
    @overload  # type: ignore[override]
    def create(self, **kwargs: Unpack[_ResponsesPlain]) -> GuardedResponse: ...
    @overload
    def create(self, **kwargs: Unpack[_ResponsesStream]) -> GuardedStream[ResponseStreamEvent]: ...

class GuardedLegacyCompletions(_Legacy):
    @overload  # type: ignore[override]
    def create(self, **kwargs: Unpack[_LegacyPlain]) -> GuardedCompletion: ...
    @overload
    def create(self, **kwargs: Unpack[_LegacyStream]) -> GuardedStream[Completion]: ...

class GuardedEmbeddingsResource(Embeddings):
    def create(self, **kwargs: Unpack[_Embeddings]) -> GuardedEmbeddings: ...  # type: ignore[override]

class GuardedOpenAI(openai.OpenAI):
    """An `openai.OpenAI` (or `AzureOpenAI`) whose model calls are guarded."""

    def __init__(
        self,
        client: openai.OpenAI,
        guard: Guard,
        user: Optional[str] = None,
        fallbacks: Optional[list[str]] = None,
        credential: str = "default",
    ) -> None: ...
    @property
    def client(self) -> openai.OpenAI: ...
    @property
    def guard(self) -> Guard: ...
    @property
    def chat(self) -> GuardedChat: ...
    @property
    def responses(self) -> GuardedResponses: ...
    @property
    def completions(self) -> GuardedLegacyCompletions: ...
    @property
    def embeddings(self) -> GuardedEmbeddingsResource: ...
    def with_options(self, **options: Any) -> GuardedOpenAI: ...
    def copy(self, **options: Any) -> GuardedOpenAI: ...
    def for_user(self, user: Optional[str]) -> GuardedOpenAI: ...

# -- async --------------------------------------------------------------------------------------

class GuardedAsyncCompletions(AsyncCompletions):
    @overload  # type: ignore[override]
    async def create(self, **kwargs: Unpack[_ChatPlain]) -> GuardedChatCompletion: ...
    @overload
    async def create(
        self, **kwargs: Unpack[_ChatStream]
    ) -> GuardedAsyncStream[ChatCompletionChunk]: ...

class GuardedAsyncChat(AsyncChat):
    @property
    def completions(self) -> GuardedAsyncCompletions: ...

class GuardedAsyncResponses(AsyncResponses):
    @overload  # type: ignore[override]
    async def create(self, **kwargs: Unpack[_ResponsesPlain]) -> GuardedResponse: ...
    @overload
    async def create(
        self, **kwargs: Unpack[_ResponsesStream]
    ) -> GuardedAsyncStream[ResponseStreamEvent]: ...

class GuardedAsyncLegacyCompletions(_AsyncLegacy):
    @overload  # type: ignore[override]
    async def create(self, **kwargs: Unpack[_LegacyPlain]) -> GuardedCompletion: ...
    @overload
    async def create(self, **kwargs: Unpack[_LegacyStream]) -> GuardedAsyncStream[Completion]: ...

class GuardedAsyncEmbeddingsResource(AsyncEmbeddings):
    async def create(self, **kwargs: Unpack[_Embeddings]) -> GuardedEmbeddings: ...  # type: ignore[override]

class GuardedAsyncOpenAI(openai.AsyncOpenAI):
    """`GuardedOpenAI` around an `openai.AsyncOpenAI`: the guarded methods are coroutines."""

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        guard: Guard,
        user: Optional[str] = None,
        fallbacks: Optional[list[str]] = None,
        credential: str = "default",
    ) -> None: ...
    @property
    def client(self) -> openai.AsyncOpenAI: ...
    @property
    def guard(self) -> Guard: ...
    @property
    def chat(self) -> GuardedAsyncChat: ...
    @property
    def responses(self) -> GuardedAsyncResponses: ...
    @property
    def completions(self) -> GuardedAsyncLegacyCompletions: ...
    @property
    def embeddings(self) -> GuardedAsyncEmbeddingsResource: ...
    def with_options(self, **options: Any) -> GuardedAsyncOpenAI: ...
    def copy(self, **options: Any) -> GuardedAsyncOpenAI: ...
    def for_user(self, user: Optional[str]) -> GuardedAsyncOpenAI: ...

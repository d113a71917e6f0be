"""Types of the guarded Ollama clients (the module re-exports `usage_guard._adapter.ollama`).

For a type checker a guarded client is the `ollama.Client` it wraps: what it does not guard
passes through at run time and types as the SDK's; `chat`, `generate` and `embed` take the
SDK's parameters (plus `user` and `usage_attributes`) and answer the SDK's types with the
guard's attributes (`usage_guard.types.GuardedAnswer`; streams `GuardedStreamAnswer`). At
run time the clients are proxies, not subclasses: `isinstance(client, ollama.Client)` is
False. Ollama's SDK declares no request TypedDicts, so its parameters are restated here (as
of ollama 0.6): one the SDK adds later types as an unexpected keyword until they are.
"""

from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, Optional, TypeVar, Union, overload

import ollama
from ollama import ChatResponse, EmbedResponse, GenerateResponse, Image, Message, Options, Tool
from pydantic.json_schema import JsonSchemaValue
from typing_extensions import TypedDict, Unpack

from ._adapter.call import Api
from ._answers import Answer, StreamAnswer
from ._core import Guard

__all__ = ["GuardedOllama", "GuardedAsyncOllama", "CHAT", "GENERATE", "EMBED"]

CHAT: Api
GENERATE: Api
EMBED: Api

_T = TypeVar("_T")

# The SDK's answers and streams with the guard's attributes (at run time: the SDK's classes,
# and usage_guard's stream proxies).
class GuardedChatResponse(ChatResponse, Answer): ...
class GuardedGenerateResponse(GenerateResponse, Answer): ...
class GuardedEmbedResponse(EmbedResponse, Answer): ...

class GuardedStream(Iterator[_T], StreamAnswer):
    def __next__(self) -> _T: ...
    def close(self) -> None: ...

class GuardedAsyncStream(AsyncIterator[_T], StreamAnswer):
    async def __anext__(self) -> _T: ...
    async def close(self) -> None: ...
    async def aclose(self) -> None: ...

class _Guard(TypedDict, total=False):
    user: str
    usage_attributes: Mapping[str, str]

_Format = Optional[Union[Literal["", "json"], JsonSchemaValue]]
_Options = Optional[Union[Mapping[str, Any], Options]]
_Messages = Optional[Sequence[Union[Mapping[str, Any], Message]]]

class _Chat(_Guard, total=False):
    tools: Optional[Sequence[Union[Mapping[str, Any], Tool, Callable[..., Any]]]]
    think: Optional[Union[bool, str]]
    logprobs: Optional[bool]
    top_logprobs: Optional[int]
    format: _Format
    options: _Options
    keep_alive: Optional[Union[float, str]]

class _Generate(_Guard, total=False):
    system: str
    template: str
    context: Optional[Sequence[int]]
    think: Optional[Union[bool, str]]
    logprobs: Optional[bool]
    top_logprobs: Optional[int]
    raw: bool
    format: _Format
    images: Optional[Sequence[Union[str, bytes, Image]]]
    options: _Options
    keep_alive: Optional[Union[float, str]]
    width: Optional[int]
    height: Optional[int]
    steps: Optional[int]

class _Embed(_Guard, total=False):
    truncate: Optional[bool]
    options: _Options
    keep_alive: Optional[Union[float, str]]
    dimensions: Optional[int]

class GuardedOllama(ollama.Client):
    """An `ollama.Client` whose `chat`, `generate` and `embed` are guarded."""

    def __init__(
        self,
        client: ollama.Client,
        guard: Guard,
        user: Optional[str] = None,
        fallbacks: Optional[list[str]] = None,
        credential: str = "default",
    ) -> None: ...
    @property
    def client(self) -> ollama.Client: ...
    @property
    def guard(self) -> Guard: ...
    def for_user(self, user: Optional[str]) -> GuardedOllama: ...
    @overload  # type: ignore[override]
    def chat(
        self,
        model: str = "",
        messages: _Messages = None,
        *,
        stream: Literal[False] = False,
        **kwargs: Unpack[_Chat],
    ) -> GuardedChatResponse: ...
    @overload
    def chat(
        self,
        model: str = "",
        messages: _Messages = None,
        *,
        stream: Literal[True],
        **kwargs: Unpack[_Chat],
    ) -> GuardedStream[ChatResponse]: ...
    @overload  # type: ignore[override]
    def generate(
        self,
        model: str = "",
        prompt: str = "",
        suffix: str = "",
        *,
        stream: Literal[False] = False,
        **kwargs: Unpack[_Generate],
    ) -> GuardedGenerateResponse: ...
    @overload
    def generate(
        self,
        model: str = "",
        prompt: str = "",
        suffix: str = "",
        *,
        stream: Literal[True],
        **kwargs: Unpack[_Generate],
    ) -> GuardedStream[GenerateResponse]: ...
    def embed(  # type: ignore[override]
        self, model: str = "", input: Union[str, Sequence[str]] = "", **kwargs: Unpack[_Embed]
    ) -> GuardedEmbedResponse: ...

class GuardedAsyncOllama(ollama.AsyncClient):
    """`GuardedOllama` around an `ollama.AsyncClient`: the guarded methods are coroutines."""

    def __init__(
        self,
        client: ollama.AsyncClient,
        guard: Guard,
        user: Optional[str] = None,
        fallbacks: Optional[list[str]] = None,
        credential: str = "default",
    ) -> None: ...
    @property
    def client(self) -> ollama.AsyncClient: ...
    @property
    def guard(self) -> Guard: ...
    def for_user(self, user: Optional[str]) -> GuardedAsyncOllama: ...
    @overload  # type: ignore[override]
    async def chat(
        self,
        model: str = "",
        messages: _Messages = None,
        *,
        stream: Literal[False] = False,
        **kwargs: Unpack[_Chat],
    ) -> GuardedChatResponse: ...
    @overload
    async def chat(
        self,
        model: str = "",
        messages: _Messages = None,
        *,
        stream: Literal[True],
        **kwargs: Unpack[_Chat],
    ) -> GuardedAsyncStream[ChatResponse]: ...
    @overload  # type: ignore[override]
    async def generate(
        self,
        model: str = "",
        prompt: str = "",
        suffix: str = "",
        *,
        stream: Literal[False] = False,
        **kwargs: Unpack[_Generate],
    ) -> GuardedGenerateResponse: ...
    @overload
    async def generate(
        self,
        model: str = "",
        prompt: str = "",
        suffix: str = "",
        *,
        stream: Literal[True],
        **kwargs: Unpack[_Generate],
    ) -> GuardedAsyncStream[GenerateResponse]: ...
    async def embed(  # type: ignore[override]
        self, model: str = "", input: Union[str, Sequence[str]] = "", **kwargs: Unpack[_Embed]
    ) -> GuardedEmbedResponse: ...

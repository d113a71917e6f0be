"""Types of the guarded Anthropic clients (the module re-exports
`usage_guard._adapter.anthropic`).

For a type checker a guarded client is the SDK client it wraps: what it does not guard passes
through to the wrapped client at run time and types as the SDK's; `messages.create` and
`messages.stream` take the SDK's own request TypedDicts (plus `user` and `usage_attributes`)
and answer the SDK's types with the guard's attributes (`usage_guard.types.GuardedAnswer`;
streams `GuardedStreamAnswer`). At run time the clients are proxies, not subclasses:
`isinstance(client, anthropic.Anthropic)` is False.
"""

from collections.abc import Mapping
from types import TracebackType
from typing import Any, Optional, TypeVar, Union, overload

import anthropic
from anthropic import AsyncStream, NotGiven, Omit, Stream, Timeout
from anthropic.lib.streaming import AsyncMessageStream, MessageStream
from anthropic.resources import AsyncMessages, Messages
from anthropic.types import Message, RawMessageStreamEvent
from anthropic.types import message_create_params as _params
from typing_extensions import TypedDict, Unpack

from ._adapter.call import Api
from ._answers import Answer, StreamAnswer
from ._core import Guard

__all__ = ["GuardedAnthropic", "GuardedAsyncAnthropic", "MESSAGES"]

MESSAGES: Api

_T = TypeVar("_T")

# The SDK's answers and streams with the guard's attributes (at run time: the SDK's
# message and message streams, and usage_guard's stream proxy).
class GuardedMessage(Message, Answer): ...
class GuardedStream(Stream[_T], StreamAnswer): ...
class GuardedAsyncStream(AsyncStream[_T], StreamAnswer): ...
class GuardedMessageStream(MessageStream[None], StreamAnswer): ...
class GuardedAsyncMessageStream(AsyncMessageStream[None], StreamAnswer): ...

class _Options(TypedDict, total=False):
    """The SDK's request options, the guard's user, and the attributes the policy's generic
    rules read."""

    extra_headers: Optional[Mapping[str, Union[str, Omit]]]
    extra_query: Optional[Mapping[str, object]]
    extra_body: Optional[object]
    timeout: Union[float, Timeout, None, NotGiven]
    user: str
    usage_attributes: Mapping[str, str]

class _Plain(_params.MessageCreateParamsNonStreaming, _Options, total=False): ...
class _Streaming(_params.MessageCreateParamsStreaming, _Options, total=False): ...
class _StreamParams(_params.MessageCreateParamsBase, _Options, total=False): ...

class GuardedMessageStreamManager:
    """`messages.stream(...)`: admitted on entry, billed on exit."""

    def __enter__(self) -> GuardedMessageStream: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

class GuardedAsyncMessageStreamManager:
    """`messages.stream(...)` of the async client: admitted on entry, billed on exit."""

    async def __aenter__(self) -> GuardedAsyncMessageStream: ...
    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

class GuardedMessages(Messages):
    @overload  # type: ignore[override]
    def create(self, **kwargs: Unpack[_Plain]) -> GuardedMessage: ...
    @overload
    def create(self, **kwargs: Unpack[_Streaming]) -> GuardedStream[RawMessageStreamEvent]: ...
    def stream(self, **kwargs: Unpack[_StreamParams]) -> GuardedMessageStreamManager: ...  # type: ignore[override]

class GuardedAsyncMessages(AsyncMessages):
    @overload  # type: ignore[override]
    async def create(self, **kwargs: Unpack[_Plain]) -> GuardedMessage: ...
    @overload
    async def create(
        self, **kwargs: Unpack[_Streaming]
    ) -> GuardedAsyncStream[RawMessageStreamEvent]: ...
    def stream(self, **kwargs: Unpack[_StreamParams]) -> GuardedAsyncMessageStreamManager: ...  # type: ignore[override]

class GuardedAnthropic(anthropic.Anthropic):
    """An `anthropic.Anthropic` whose `messages.create` / `messages.stream` are guarded."""

    def __init__(
        self,
        client: anthropic.Anthropic,
        guard: Guard,
        user: Optional[str] = None,
        fallbacks: Optional[list[str]] = None,
        credential: str = "default",
    ) -> None: ...
    @property
    def client(self) -> anthropic.Anthropic: ...
    @property
    def guard(self) -> Guard: ...
    @property
    def messages(self) -> GuardedMessages: ...
    def with_options(self, **options: Any) -> GuardedAnthropic: ...
    def copy(self, **options: Any) -> GuardedAnthropic: ...
    def for_user(self, user: Optional[str]) -> GuardedAnthropic: ...

class GuardedAsyncAnthropic(anthropic.AsyncAnthropic):
    """`GuardedAnthropic` around an `anthropic.AsyncAnthropic`: `messages.create` is a
    coroutine and `messages.stream(...)` an async context manager."""

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        guard: Guard,
        user: Optional[str] = None,
        fallbacks: Optional[list[str]] = None,
        credential: str = "default",
    ) -> None: ...
    @property
    def client(self) -> anthropic.AsyncAnthropic: ...
    @property
    def guard(self) -> Guard: ...
    @property
    def messages(self) -> GuardedAsyncMessages: ...
    def with_options(self, **options: Any) -> GuardedAsyncAnthropic: ...
    def copy(self, **options: Any) -> GuardedAsyncAnthropic: ...
    def for_user(self, user: Optional[str]) -> GuardedAsyncAnthropic: ...

"""The OpenAI SDK's other ways to stream, guarded like `create`:

- `with_streaming_response.create` / `.parse` (the OpenAI Agents SDK streams Responses through
  it): a context manager that admits and fits on entry. A plain answer is read and billed on
  entry (the caller's `parse()` gets the same object); a streamed one's `parse()` answers the
  guarded stream, billed as it is read, and the body's raw readers are refused.
- the helpers `chat.completions.stream(...)` and `responses.stream(...)` (LangChain's
  structured-output streaming calls `beta.chat.completions.stream`): the SDK's helper is run
  over the guarded resource, so its request goes through the guarded `create(stream=True)`;
  the helper's stream gets the `usage_*` attributes when it settles, at the latest when its
  block exits."""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

from .call import Api, Call, attach_pending
from .flow import GuardedClient, Proxy, run_async, run_sync
from .sealed import _BODY, seal
from .streams import AsyncGuardedStream, GuardedStream

__all__ = ["guarded_helper", "guarded_streaming", "read_answer", "read_body", "streamed_answer"]


class _Read:
    """A plain answer of `with_streaming_response`, read on entry (an async response parses
    only with an await, which billing cannot do): the raw response, and what its parse()
    answered or raised."""

    def __init__(self, response: Any, parsed: Any = None, error: Optional[BaseException] = None):
        self.response, self.parsed, self.error = response, parsed, error


def read_answer(read: _Read) -> Any:
    """`Api.answer` of the streaming-response methods (a plain answer)."""
    if read.error is not None:
        raise read.error
    return read.parsed


def read_body(read: _Read) -> Any:
    """`Api.unread` of the streaming-response methods: the JSON the provider sent."""
    return read.response.http_response.json()


class _StreamedResponse:
    """A streamed raw response (`with_streaming_response.create(stream=True)`): `parse()`
    answers the guarded stream; headers, status and the request id pass through; the body is
    read only through the stream."""

    def __init__(self, call: Call, inner: Any):
        self._call = call
        self._inner = inner
        self._stream: Any = None
        self._ended = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in _BODY:
            raise TypeError(
                f"{name}: the body of a guarded streamed response is read through parse(), "
                "whose stream bills what it delivers"
            )
        value = getattr(self._inner, name)
        return seal(value) if name == "http_response" else value

    def __repr__(self) -> str:
        return f"<guarded {self._inner!r}>"


class _SyncStreamedResponse(_StreamedResponse):
    def parse(self, **kwargs: Any) -> Any:
        if self._stream is None:
            self._stream = GuardedStream(self._call, self._inner.parse(**kwargs))
        return self._stream

    def _end(self) -> None:
        """Bills what the stream delivered; a stream never parsed delivered nothing."""
        if self._stream is not None:
            self._stream.close()
        elif not self._ended:
            self._call.ticket.release()
        self._ended = True


class _AsyncStreamedResponse(_StreamedResponse):
    async def parse(self, **kwargs: Any) -> Any:
        if self._stream is None:
            self._stream = AsyncGuardedStream(self._call, await self._inner.parse(**kwargs))
        return self._stream

    async def _end(self) -> None:
        if self._stream is not None:
            await self._stream.close()
        elif not self._ended:
            await self._call.ticket.release_async()
        self._ended = True


def streamed_answer(call: Call, result: Any, is_async: bool) -> Any:
    """`Api.stream_answer` of the streaming-response methods."""
    return _AsyncStreamedResponse(call, result) if is_async else _SyncStreamedResponse(call, result)


class _StreamingResponse:
    """`with_streaming_response.<method>(...)`: admits on entry (`run_sync` / `run_async`,
    down the fallback ladder when there is one) and closes, then bills, on exit."""

    def __init__(
        self,
        owner: GuardedClient,
        api: Api,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ):
        self._owner, self._api, self._fn = owner, api, fn
        self._args, self._kwargs = args, kwargs
        self._manager: Any = None
        self._response: Any = None

    def _open(self, **kwargs: Any) -> Any:
        self._manager = self._fn(**kwargs)
        response = self._manager.__enter__()
        if kwargs.get("stream"):
            return response
        try:
            return _Read(response, response.parse())
        except Exception as exc:
            return _Read(response, error=exc)

    async def _aopen(self, **kwargs: Any) -> Any:
        self._manager = self._fn(**kwargs)
        response = await self._manager.__aenter__()
        if kwargs.get("stream"):
            return response
        try:
            return _Read(response, await response.parse())
        except Exception as exc:
            return _Read(response, error=exc)

    def _entered(self, result: Any) -> Any:
        self._response = result.response if isinstance(result, _Read) else result
        return self._response

    def __enter__(self) -> Any:
        try:
            result = run_sync(self._owner, self._api, self._open, self._args, self._kwargs)
        except BaseException:
            # Raised after the response was opened (billing it, reading it): the block never
            # runs, so its exit would never close the HTTP response.
            if self._manager is not None:
                self._manager.__exit__(*sys.exc_info())
            raise
        return self._entered(result)

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._manager is not None:
                self._manager.__exit__(*exc)
        finally:
            if isinstance(self._response, _SyncStreamedResponse):
                self._response._end()

    async def __aenter__(self) -> Any:
        try:
            result = await run_async(self._owner, self._api, self._aopen, self._args, self._kwargs)
        except BaseException:
            if self._manager is not None:  # as in __enter__
                await self._manager.__aexit__(*sys.exc_info())
            raise
        return self._entered(result)

    async def __aexit__(self, *exc: Any) -> None:
        try:
            if self._manager is not None:
                await self._manager.__aexit__(*exc)
        finally:
            if isinstance(self._response, _AsyncStreamedResponse):
                await self._response._end()


def guarded_streaming(owner: GuardedClient, api: Api, resource: Any) -> Any:
    """`resource.with_streaming_response` with `create` (and `parse`, where the SDK has it)
    guarded."""
    sdk = resource.with_streaming_response

    def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
        def method(*args: Any, **kwargs: Any) -> _StreamingResponse:
            return _StreamingResponse(owner, api, fn, args, kwargs)

        method.__doc__ = fn.__doc__
        return method

    names = [name for name in ("create", "parse") if hasattr(sdk, name)]
    return Proxy(sdk, **{name: guarded(getattr(sdk, name)) for name in names})


class _HelperStream:
    """The context manager an SDK stream helper returns, with the guarded streams its
    request made (`made`): they echo their `usage_*` attributes to the helper's stream, and
    are closed (and so billed) when the block exits."""

    def __init__(self, manager: Any, made: list[Any]):
        self._manager, self._made = manager, made

    def _entered(self, stream: Any) -> Any:
        attach_pending(stream)
        for guarded in self._made:
            guarded._echo = stream
        return stream

    def __enter__(self) -> Any:
        return self._entered(self._manager.__enter__())

    def __exit__(self, *exc: Any) -> None:
        try:
            self._manager.__exit__(*exc)
        finally:
            for guarded in self._made:
                guarded.close()

    async def __aenter__(self) -> Any:
        return self._entered(await self._manager.__aenter__())

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self._manager.__aexit__(*exc)
        finally:
            for guarded in self._made:
                await guarded.close()


def guarded_helper(owner: GuardedClient, guarded: Any, sdk: Any) -> Optional[Callable[..., Any]]:
    """The SDK's `stream(...)` helper of `sdk` (a chat completions or responses resource)
    run over `guarded` (its guarded proxy), whose `create` it calls; None when the SDK has
    no such helper."""
    helper = getattr(type(sdk), "stream", None)
    if helper is None:
        return None
    create = guarded.create

    def stream(*args: Any, **kwargs: Any) -> _HelperStream:
        made: list[Any] = []
        attributes = kwargs.pop("usage_attributes", None)
        extra = {} if attributes is None else {"usage_attributes": attributes}

        def record(*a: Any, **kw: Any) -> Any:
            made.append(create(*a, **kw, **extra))
            return made[-1]

        async def record_async(*a: Any, **kw: Any) -> Any:
            made.append(await create(*a, **kw, **extra))
            return made[-1]

        resource = Proxy(guarded, create=record_async if owner._is_async else record)
        return _HelperStream(helper(resource, *args, **kwargs), made)

    stream.__doc__ = helper.__doc__
    return stream

"""Anthropic SDK plumbing: `messages.create` (plain and `stream=True`), `messages.stream(...)`,
`messages.parse` and the raw twins, on `messages` and `beta.messages`, are admitted (counted,
and the output maximum and thinking budget fitted, in the core) and billed; the ways the guard
cannot meter (streaming-response twins, the tool runner, batch jobs) are refused; everything
else passes through.

    from anthropic import Anthropic
    from usage_guard.anthropic import GuardedAnthropic

    client = GuardedAnthropic(Anthropic(), guard, user="alice")
    with client.messages.stream(model=..., max_tokens=4096, messages=[...]) as stream:
        for text in stream.text_stream:
            ...
    stream.usage_limits     # set when the block exits
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Optional

from .call import (
    Api,
    Call,
    StreamState,
    Usage,
    attach_pending,
    begin_async,
    begin_sync,
    g,
    reported,
    settle_async,
    settle_sync,
)
from .flow import GuardedClient, Proxy
from .sealed import seal_stream
from .twins import no_raw_stream, parsed, raw_body, refused

__all__ = ["GuardedAnthropic", "GuardedAsyncAnthropic", "MESSAGES"]


def _usage(carrier: Any) -> Optional[Usage]:
    """What a message, or a `message_start` / `message_delta` event, reports (the core adds
    Anthropic's cache reads and writes into the input)."""
    return reported(MESSAGES.word, carrier)


def _thinking(message: Any) -> str:
    return "".join(
        g(b, "thinking", default="")
        for b in g(message, "content", default=())
        if g(b, "type") == "thinking"
    )


def _observe(state: StreamState, event: Any) -> None:
    kind = g(event, "type")
    if kind == "message_start":
        if (started := _usage(event)) is not None:
            state.input_tokens = started.input_tokens
            state.cached_input_tokens = started.cached_input_tokens
    elif kind == "content_block_delta":
        delta = g(event, "delta")
        dtype = g(delta, "type")
        if dtype == "text_delta":
            state.text.append(g(delta, "text", default=""))
        elif dtype == "thinking_delta":
            state.reasoning_text.append(g(delta, "thinking", default=""))
        elif dtype == "input_json_delta":
            state.text.append(g(delta, "partial_json", default=""))
    elif kind == "message_delta":
        final = _usage(event) or Usage()
        # The delta's counts are cumulative, and any it leaves out (the input, or only the
        # cache reads) stand as message_start reported them: each the larger, as the SDK's
        # accumulator and the gateway merge them.
        final.input_tokens = max(final.input_tokens, state.input_tokens or 0)
        final.cached_input_tokens = max(final.cached_input_tokens, state.cached_input_tokens)
        state.usage = final
        reason = g(event, "delta", "stop_reason")
        state.finish_reason = str(reason) if reason else None


MESSAGES = Api(
    word="anthropic",
    finish_reasons=lambda m: [str(r)] if (r := g(m, "stop_reason")) else [],
    reasoning_text=_thinking,
    observe=_observe,
)
# `with_raw_response.create`: billed from the parsed answer (from the JSON sent, when the SDK
# cannot parse it); a raw stream, whose events the guard would never see, is refused.
MESSAGES_RAW = replace(MESSAGES, observe=None, answer=parsed, unread=raw_body, check=no_raw_stream)
# `parse` (structured output), sent through its raw twin: an answer that does not validate is
# billed from the JSON the provider sent (called directly, it left nothing to bill).
MESSAGES_PARSE = replace(MESSAGES_RAW, returns_answer=True, check=None)


def _raw_parse(messages: Any, is_async: bool) -> Any:
    """The raw twin of `messages.parse`: the SDK's (`beta.messages`), or made with the SDK's
    own wrapper; None when neither is at hand (then `parse` is guarded as it is)."""
    raw = messages.with_raw_response
    if hasattr(raw, "parse"):
        return raw.parse
    try:
        from anthropic import _response

        wrap = (
            _response.async_to_raw_response_wrapper
            if is_async
            else _response.to_raw_response_wrapper
        )
    except (ImportError, AttributeError):  # pragma: no cover - another SDK layout
        return None
    return wrap(messages.parse)


def _snapshot_state(stream: Any) -> tuple[StreamState, bool]:
    """What a `MessageStream` received, from its accumulated message; (state, completed)."""
    state = StreamState()
    try:
        message = stream._current_snapshot_or_none()
    except AttributeError:  # an SDK without the private accessor: the public property asserts
        try:
            message = stream.current_message_snapshot
        except Exception:
            message = None
    if message is None:
        return state, False
    state.chunks = 1
    if (started := _usage(message)) is not None:
        state.input_tokens = started.input_tokens
        state.cached_input_tokens = started.cached_input_tokens
    for block in g(message, "content", default=()):
        kind = g(block, "type")
        if kind == "text":
            state.text.append(g(block, "text", default=""))
        elif kind == "thinking":
            state.reasoning_text.append(g(block, "thinking", default=""))
        elif kind == "tool_use":
            # As the arguments streamed (compact, characters as they are, not \u escapes,
            # which count several tokens each): the count is a floor on the bill.
            arguments = g(block, "input", default={})
            state.text.append(json.dumps(arguments, ensure_ascii=False, separators=(",", ":")))
    stop = g(message, "stop_reason")
    if stop is not None:
        state.usage = _usage(message) or Usage()
        state.finish_reason = str(stop)
    return state, stop is not None


class _StreamManager:
    """`messages.stream(...)`: admits and fits on entry, bills on exit from what arrived."""

    def __init__(
        self, owner: GuardedClient, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ):
        self._owner, self._fn, self._args, self._kwargs = owner, fn, args, kwargs
        self._call: Optional[Call] = None
        self._manager: Any = None
        self._stream: Any = None

    def _open(self, call: Call) -> Any:
        self._call = call
        self._manager = self._fn(**call.kwargs)
        return self._manager

    def _close(self) -> tuple[Optional[Usage], bool]:
        assert self._call is not None
        state, completed = _snapshot_state(self._stream)
        return self._call.stream_usage(state, completed), self._call.stream_capped(state)

    def __enter__(self) -> Any:
        call = begin_sync(self._owner, MESSAGES, self._args, self._kwargs)
        try:
            self._stream = self._open(call).__enter__()
        except BaseException:
            call.ticket.release()
            raise
        seal_stream(self._stream)  # billed from what it accumulates: no body read around it
        attach_pending(self._stream)
        return self._stream

    def __exit__(self, *exc: Any) -> None:
        try:
            self._manager.__exit__(*exc)
        finally:
            usage, capped = self._close()
            assert self._call is not None
            settle_sync(self._call, usage, self._stream, capped)

    async def __aenter__(self) -> Any:
        call = await begin_async(self._owner, MESSAGES, self._args, self._kwargs)
        try:
            self._stream = await self._open(call).__aenter__()
        except BaseException:
            await call.ticket.release_async()
            raise
        seal_stream(self._stream)
        attach_pending(self._stream)
        return self._stream

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self._manager.__aexit__(*exc)
        finally:
            usage, capped = self._close()
            assert self._call is not None
            await settle_async(self._call, usage, self._stream, capped)


class _GuardedAnthropicClient(GuardedClient):
    """What the sync and async guarded Anthropic clients share: the guarded messages
    and `beta.messages` (`_messages`)."""

    def __init__(
        self,
        client: Any,
        guard: Any,
        user: Optional[str] = None,
        fallbacks: Optional[list[str]] = None,
        credential: str = "default",
    ):
        super().__init__(client, guard, user, fallbacks, credential)
        self.messages = self._messages(client.messages)
        # The beta messages API (Pydantic AI calls it) takes and answers the same shapes.
        beta = self._messages(client.beta.messages)
        self.beta = Proxy(client.beta, messages=beta)
        # The same twins reached from the client (`client.with_raw_response.messages`, and
        # under `beta`) are the guarded resources' own.
        for twin in ("with_raw_response", "with_streaming_response"):
            sdk = getattr(client, twin, None)
            if sdk is None:
                continue
            sdk_beta = getattr(sdk, "beta", None)
            overrides: dict[str, Any] = {"messages": getattr(self.messages, twin)}
            if sdk_beta is not None:
                overrides["beta"] = Proxy(sdk_beta, messages=getattr(beta, twin))
            setattr(self, twin, Proxy(sdk, **overrides))

    def _messages(self, messages: Any) -> Proxy:
        """`messages` (or `beta.messages`) guarded: `create`, `parse`, `stream(...)` and the
        raw twins; the streaming-response twins, the tool runner and batch jobs, which the
        guard cannot meter, refused; `count_tokens` and the rest pass."""

        def stream(*args: Any, **kwargs: Any) -> _StreamManager:
            return _StreamManager(self, messages.stream, args, kwargs)

        stream.__doc__ = messages.stream.__doc__
        raw = messages.with_raw_response
        streaming = messages.with_streaming_response
        guarded = {
            "create": self._guarded(MESSAGES, messages.create),
            "stream": stream,
            "with_raw_response": Proxy(
                raw,
                **{
                    name: self._guarded(MESSAGES_RAW, getattr(raw, name))
                    for name in ("create", "parse")
                    if hasattr(raw, name)
                },
                **_refusing_batches(raw),
            ),
            "with_streaming_response": Proxy(
                streaming,
                **{
                    name: refused(
                        f"messages.with_streaming_response.{name}",
                        f"call messages.{name}, or messages.stream(...) to stream",
                    )
                    for name in ("create", "parse")
                    if hasattr(streaming, name)
                },
                **_refusing_batches(streaming),
            ),
            **_refusing_batches(messages),
        }
        if hasattr(messages, "parse"):
            raw_parse = _raw_parse(messages, self._is_async)
            guarded["parse"] = (
                self._guarded(MESSAGES, messages.parse)
                if raw_parse is None
                else self._guarded(MESSAGES_PARSE, raw_parse)
            )
        if hasattr(messages, "tool_runner"):
            guarded["tool_runner"] = refused(
                "messages.tool_runner (its calls go through the SDK's own client)",
                "call messages.create in your own tool loop",
            )
        return Proxy(messages, **guarded)


def _refusing_batches(owner: Any) -> dict[str, Proxy]:
    """`owner.batches` with `create` refused, as an override (none where the SDK has no
    batches): a batch job's calls run later, unseen by the guard, with no usage to bill;
    retrieve, list, results, cancel and delete pass."""
    batches = getattr(owner, "batches", None)
    if batches is None:
        return {}
    how = "send the requests one by one through messages.create"
    return {"batches": Proxy(batches, create=refused("messages.batches.create (a batch job)", how))}


class GuardedAnthropic(_GuardedAnthropicClient):
    """An `anthropic.Anthropic` whose `messages.create` / `messages.stream` are guarded.

    `user` is the default user; a call's `user=` keyword overrides it and is not sent.
    """


class GuardedAsyncAnthropic(_GuardedAnthropicClient):
    """`GuardedAnthropic` around an `anthropic.AsyncAnthropic`: `messages.create` is a
    coroutine and `messages.stream(...)` an async context manager."""

    _is_async = True

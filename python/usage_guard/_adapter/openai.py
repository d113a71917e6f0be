"""OpenAI SDK plumbing: `chat.completions.create`, `responses.create`, the legacy
`completions.create` (plain and streaming) and `embeddings.create` are admitted (counted
and fitted in the core) and billed, and so are chat's and responses' `parse`, their
`with_raw_response` and `with_streaming_response` twins and `stream(...)` helpers
(`openai_streams`), reached from the client, `chat` or `beta.chat`; everything else passes
through.

    from openai import OpenAI
    from usage_guard.openai import GuardedOpenAI

    client = GuardedOpenAI(OpenAI(), guard, user="alice")
    reply = client.chat.completions.create(model="gpt-5", messages=[...])
    reply.usage_limits      # the usage view, with "capped"
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Optional

from .call import Api, StreamState, g, reported
from .flow import GuardedClient, Proxy
from .openai_streams import (
    guarded_helper,
    guarded_streaming,
    read_answer,
    read_body,
    streamed_answer,
)

__all__ = [
    "GuardedOpenAI",
    "GuardedAsyncOpenAI",
    "CHAT",
    "RESPONSES",
    "COMPLETIONS",
    "EMBEDDINGS",
]


def _observe_choices(
    state: StreamState, chunk: Any, word: str, texts: Callable[[Any], list[str]]
) -> None:
    """One chunk of a choices-shaped stream (chat, legacy completions): each choice's text
    (`texts` reads it), its finish reason, and the usage when the chunk carries it."""
    for choice in g(chunk, "choices", default=()):
        state.text.extend(t for t in texts(choice) if t)
        reason = g(choice, "finish_reason")
        if reason:
            state.finish_reason = str(reason)
    if g(chunk, "usage") is not None:
        state.usage = reported(word, chunk)


def _chat_texts(choice: Any) -> list[str]:
    delta = g(choice, "delta")
    calls = g(delta, "tool_calls", default=()) or ()
    return [g(delta, "content")] + [g(call, "function", "arguments") for call in calls]


def _chat_observe(state: StreamState, chunk: Any) -> None:
    _observe_choices(state, chunk, CHAT.word, _chat_texts)


def _completions_observe(state: StreamState, chunk: Any) -> None:
    _observe_choices(state, chunk, COMPLETIONS.word, lambda choice: [g(choice, "text")])


def _chat_stream_setup(kwargs: dict[str, Any]) -> bool:
    options = kwargs.get("stream_options")
    options = dict(options) if isinstance(options, dict) else {}
    asked = bool(options.get("include_usage"))
    options["include_usage"] = True
    kwargs["stream_options"] = options
    return not asked


def _usage_only(chunk: Any) -> bool:
    """The final chunk `include_usage` adds: no choices, only usage."""
    return not g(chunk, "choices") and g(chunk, "usage") is not None


_TEXT_EVENTS = (
    "response.output_text.delta",
    "response.function_call_arguments.delta",
    "response.refusal.delta",
)
_REASONING_EVENTS = ("response.reasoning_text.delta", "response.reasoning_summary_text.delta")
_END_EVENTS = ("response.completed", "response.incomplete", "response.failed")


def _responses_observe(state: StreamState, event: Any) -> None:
    kind = g(event, "type")
    if kind in _TEXT_EVENTS:
        state.text.append(g(event, "delta", default=""))
    elif kind in _REASONING_EVENTS:
        state.reasoning_text.append(g(event, "delta", default=""))
    elif kind in _END_EVENTS:
        response = g(event, "response")
        if g(response, "usage") is not None:
            state.usage = reported(RESPONSES.word, event)
        reason = g(response, "incomplete_details", "reason")
        state.finish_reason = str(reason) if reason else None


def _responses_reasons(response: Any) -> list[str]:
    reason = g(response, "incomplete_details", "reason")
    return [str(reason)] if reason else []


def _chat_reasons(response: Any) -> list[str]:
    return [str(r) for c in g(response, "choices", default=()) if (r := g(c, "finish_reason"))]


def _no_background(request: dict[str, Any], stream: bool) -> None:
    """A background response is written after `create` returns and read with
    `responses.retrieve`, which no guarded call sees: refused rather than left unbilled."""
    if request.get("background"):
        raise ValueError(
            f"background: {request['background']!r} is not accepted on a guarded client: a "
            "background response is produced after create() returns and fetched with "
            "responses.retrieve(), so the guard can neither bill its output nor hold its "
            "reservation; call without background (stream=True for a long answer)"
        )


def _no_raw_stream(request: dict[str, Any], stream: bool) -> None:
    """A raw stream's chunks are read by the caller, never by the guard: refused rather than
    sent unmetered (`with_raw_response.create`, plain, is guarded)."""
    if stream:
        raise TypeError(
            "stream: with_raw_response.create(stream=True) is not guarded; call "
            "create(stream=True) on the guarded client (its stream is metered)"
        )


def _no_raw_background_stream(request: dict[str, Any], stream: bool) -> None:
    _no_raw_stream(request, stream)
    _no_background(request, stream)


# Chat and legacy completions read `stream_options` from the keywords (usage is asked for).
_STREAM_KEYWORDS = ("stream", "stream_options")

CHAT = Api(
    word="openai",
    finish_reasons=_chat_reasons,
    observe=_chat_observe,
    stream_setup=_chat_stream_setup,
    extra_chunk=_usage_only,
    keywords=_STREAM_KEYWORDS,
)
RESPONSES = Api(
    word="openai.responses",
    finish_reasons=_responses_reasons,
    observe=_responses_observe,
    check=_no_background,
)
COMPLETIONS = Api(
    word="openai.completions",
    finish_reasons=_chat_reasons,
    observe=_completions_observe,
    stream_setup=_chat_stream_setup,
    extra_chunk=_usage_only,
    keywords=_STREAM_KEYWORDS,
)
EMBEDDINGS = Api(
    word="openai.embeddings",
    embeddings=True,
)


def _parsed(raw: Any) -> Any:
    """The answer of a raw response (`with_raw_response.create`): parsed once, and cached by
    the SDK, so the caller's own `parse()` gets the same object, with the guard's attributes."""
    return raw.parse()


def _raw_body(raw: Any) -> Any:
    """The answer as the provider sent it (its JSON), read off a raw response."""
    return raw.http_response.json()


# `with_raw_response.create` (LangChain's ChatOpenAI calls it): billed from the parsed answer
# (from the JSON sent, when the SDK cannot parse it); a raw stream is refused.
CHAT_RAW = Api(
    word=CHAT.word,
    finish_reasons=_chat_reasons,
    answer=_parsed,
    unread=_raw_body,
    keywords=_STREAM_KEYWORDS,
    check=_no_raw_stream,
)
RESPONSES_RAW = Api(
    word=RESPONSES.word,
    finish_reasons=_responses_reasons,
    answer=_parsed,
    unread=_raw_body,
    check=_no_raw_background_stream,
)
# Structured-output `parse`, sent through its raw twin (`with_raw_response.parse`): when the
# SDK's parse of the answer fails (the structured answer does not validate, or was cut short
# by the output maximum), the provider's answer is still at hand and billed; a `parse` called
# directly leaves nothing to bill but the error. The caller gets what `parse` returns.
CHAT_PARSE = replace(CHAT_RAW, returns_answer=True, check=None)
RESPONSES_PARSE = replace(RESPONSES_RAW, returns_answer=True, check=_no_background)
# `with_streaming_response.create` / `.parse` (the OpenAI Agents SDK streams through it): a
# plain answer is read on entry and billed; a stream is its parse(), billed as it is read.
CHAT_STREAMING = replace(CHAT, answer=read_answer, unread=read_body, stream_answer=streamed_answer)
RESPONSES_STREAMING = replace(
    RESPONSES, answer=read_answer, unread=read_body, stream_answer=streamed_answer
)


def _guarded_raw(client: GuardedClient, api: Api, resource: Any) -> dict[str, Any]:
    """The guarded methods of `resource.with_raw_response`: `create`, and `parse` where the
    SDK has it."""
    raw = resource.with_raw_response
    names = ("create", "parse") if hasattr(raw, "parse") else ("create",)
    return {name: client._guarded(api, getattr(raw, name)) for name in names}


def _guarded_resource(
    client: GuardedClient, resource: Any, apis: tuple[Api, Api, Api, Api]
) -> tuple[Proxy, Proxy, Proxy]:
    """`resource` (chat completions or responses) with `create`, `parse`, their raw and
    streaming-response twins and the `stream(...)` helper guarded, given its (plain, raw,
    parse, streaming) `Api`s; (resource, with_raw_response, with_streaming_response)."""
    plain, raw_api, parse_api, streaming_api = apis
    # Structured-output `parse` takes and answers the same shapes as `create`; it is sent
    # through its raw twin (`parse_api`), which is guarded too.
    raw = Proxy(resource.with_raw_response, **_guarded_raw(client, raw_api, resource))
    streaming = guarded_streaming(client, streaming_api, resource)
    methods: dict[str, Any] = {
        "create": client._guarded(plain, resource.create),
        "with_raw_response": raw,
        "with_streaming_response": streaming,
    }
    if "parse" in raw.__dict__:
        methods["parse"] = client._guarded(parse_api, resource.with_raw_response.parse)
    guarded = Proxy(resource, **methods)
    helper = guarded_helper(client, guarded, resource)
    if helper is not None:
        guarded.__dict__["stream"] = helper
    return guarded, raw, streaming


class _GuardedOpenAIClient(GuardedClient):
    """What the sync and async guarded OpenAI clients share: the guarded resources."""

    def __init__(
        self,
        client: Any,
        guard: Any,
        user: Optional[str] = None,
        fallbacks: Optional[list[str]] = None,
        credential: str = "default",
    ):
        super().__init__(client, guard, user, fallbacks, credential)
        chat = client.chat
        completions, raw_chat, streaming_chat = _guarded_resource(
            self, chat.completions, (CHAT, CHAT_RAW, CHAT_PARSE, CHAT_STREAMING)
        )
        responses, raw_responses, streaming_responses = _guarded_resource(
            self,
            client.responses,
            (RESPONSES, RESPONSES_RAW, RESPONSES_PARSE, RESPONSES_STREAMING),
        )
        # The same calls reached from the client, from `chat` or from `beta.chat` (LangChain
        # streams structured output with `beta.chat.completions.stream`) are guarded alike.
        self.with_raw_response = Proxy(
            client.with_raw_response,
            chat=Proxy(client.with_raw_response.chat, completions=raw_chat),
            responses=raw_responses,
        )
        self.with_streaming_response = Proxy(
            client.with_streaming_response,
            chat=Proxy(client.with_streaming_response.chat, completions=streaming_chat),
            responses=streaming_responses,
        )
        self.chat = Proxy(
            chat,
            completions=completions,
            with_raw_response=Proxy(chat.with_raw_response, completions=raw_chat),
            with_streaming_response=Proxy(chat.with_streaming_response, completions=streaming_chat),
        )
        # `beta.chat` is the main `chat` in today's SDK (parse and stream on both): guarded
        # as it. An older SDK's beta-only resource passes through as it was.
        beta = getattr(client, "beta", None)
        beta_chat = getattr(beta, "chat", None)
        if type(getattr(beta_chat, "completions", None)) is type(chat.completions):
            self.beta = Proxy(beta, chat=self.chat)
        self.responses = responses
        self.completions = Proxy(
            client.completions, create=self._guarded(COMPLETIONS, client.completions.create)
        )
        self.embeddings = Proxy(
            client.embeddings, create=self._guarded(EMBEDDINGS, client.embeddings.create)
        )


class GuardedOpenAI(_GuardedOpenAIClient):
    """An `openai.OpenAI` (or `AzureOpenAI`) whose model calls are guarded.

    `user` is the default user; a call's `user=` keyword overrides it and is not sent.
    `fallbacks` are models tried in order when the one asked for is unavailable (its
    provider's breaker open, `credential` cooling down) or fails retryably; each passes
    admission again, and the answer's `usage_resolution` says when a fallback served it.
    """


class GuardedAsyncOpenAI(_GuardedOpenAIClient):
    """`GuardedOpenAI` around an `openai.AsyncOpenAI`: the guarded methods are coroutines."""

    _is_async = True

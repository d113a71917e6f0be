"""OpenAI SDK plumbing: `chat.completions.create`, `responses.create` (also as
`beta.responses`), the legacy `completions.create` (plain and streaming) and
`embeddings.create` are admitted (counted and fitted in the core) and billed, and so are
chat's and responses' `parse`, all of their `with_raw_response` and `with_streaming_response`
twins and the `stream(...)` helpers (`openai_streams`), reached from the client, `chat` or
`beta.chat`. Responses' `compact` and `connect` and `batches.create` generate where no guarded
call sees it: refused (`openai_refusals`). Everything else passes through.

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
from .openai_refusals import guarded_batches, refuse_unmetered
from .openai_streams import (
    guarded_helper,
    guarded_streaming,
    read_answer,
    read_body,
    streamed_answer,
)
from .twins import no_raw_stream, parsed, raw_body

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
    said = [g(delta, "content"), g(delta, "refusal"), g(delta, "audio", "transcript")]
    return said + [g(call, "function", "arguments") for call in calls]


def _chat_observe(state: StreamState, chunk: Any) -> None:
    _observe_choices(state, chunk, CHAT.word, _chat_texts)
    # The reasoning OpenAI-compatible servers stream before the answer (DeepSeek, vLLM:
    # `reasoning_content`; OpenRouter: `reasoning`): counted for a stream cut off before its
    # usage chunk, as the gateway counts it.
    for choice in g(chunk, "choices", default=()):
        delta = g(choice, "delta")
        reasoning = g(delta, "reasoning_content") or g(delta, "reasoning")
        if isinstance(reasoning, str) and reasoning:
            state.reasoning_text.append(reasoning)


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


def _no_raw_background_stream(request: dict[str, Any], stream: bool) -> None:
    no_raw_stream(request, stream)
    _no_background(request, stream)


def _no_multi_agent(request: dict[str, Any], stream: bool) -> None:
    """`beta.responses`' server-hosted multi-agent run spawns subagents with no bound on
    their number or depth, which the fitted output maximum does not cover: refused."""
    _no_background(request, stream)
    agents = request.get("multi_agent")
    if isinstance(agents, dict) and agents.get("enabled"):
        raise ValueError(
            "multi_agent: a multi-agent response is not accepted on a guarded client: its "
            "subagents are not bounded by the output maximum the guard fits; call without "
            "multi_agent"
        )


def _no_raw_multi_agent_stream(request: dict[str, Any], stream: bool) -> None:
    no_raw_stream(request, stream)
    _no_multi_agent(request, stream)


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


# `with_raw_response.create` (LangChain's ChatOpenAI calls it): billed from the parsed answer
# (from the JSON sent, when the SDK cannot parse it); a raw stream is refused.
CHAT_RAW = Api(
    word=CHAT.word,
    finish_reasons=_chat_reasons,
    answer=parsed,
    unread=raw_body,
    keywords=_STREAM_KEYWORDS,
    check=no_raw_stream,
)
RESPONSES_RAW = Api(
    word=RESPONSES.word,
    finish_reasons=_responses_reasons,
    answer=parsed,
    unread=raw_body,
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
# The legacy completions' and the embeddings' twins, guarded as chat's.
COMPLETIONS_RAW = replace(CHAT_RAW, word=COMPLETIONS.word)
COMPLETIONS_STREAMING = replace(
    COMPLETIONS, answer=read_answer, unread=read_body, stream_answer=streamed_answer
)
EMBEDDINGS_RAW = replace(EMBEDDINGS, answer=parsed, unread=raw_body)
EMBEDDINGS_STREAMING = replace(
    EMBEDDINGS, answer=read_answer, unread=read_body, stream_answer=streamed_answer
)
# `beta.responses.create` takes the main `responses.create`'s request (and `multi_agent`,
# refused when enabled) and answers its shapes (usage, stream events): guarded as it.
_BETA_RESPONSES = (
    replace(RESPONSES, check=_no_multi_agent),
    replace(RESPONSES_RAW, check=_no_raw_multi_agent_stream),
    replace(RESPONSES_PARSE, check=_no_multi_agent),  # no `parse` in beta today
    replace(RESPONSES_STREAMING, check=_no_multi_agent),
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
    """`resource` (chat completions, responses, legacy completions, embeddings) with
    `create`, `parse`, their raw and streaming-response twins and the `stream(...)` helper
    guarded, where the SDK has them, given its (plain, raw, parse, streaming) `Api`s;
    (resource, with_raw_response, with_streaming_response)."""
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


# The resources guarded whole, by their name on the client: (plain, raw, parse, streaming).
_RESOURCES = {
    "responses": (RESPONSES, RESPONSES_RAW, RESPONSES_PARSE, RESPONSES_STREAMING),
    "completions": (COMPLETIONS, COMPLETIONS_RAW, COMPLETIONS_RAW, COMPLETIONS_STREAMING),
    "embeddings": (EMBEDDINGS, EMBEDDINGS_RAW, EMBEDDINGS_RAW, EMBEDDINGS_STREAMING),
}


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
        # (resource, with_raw_response, with_streaming_response) of each resource guarded.
        guarded = {
            name: _guarded_resource(self, getattr(client, name), apis)
            for name, apis in _RESOURCES.items()
        }
        refuse_unmetered("responses", *guarded["responses"])
        guarded["batches"] = guarded_batches(client)
        self.chat = Proxy(
            chat,
            completions=completions,
            with_raw_response=Proxy(chat.with_raw_response, completions=raw_chat),
            with_streaming_response=Proxy(chat.with_streaming_response, completions=streaming_chat),
        )
        for name, (resource, _, _) in guarded.items():
            setattr(self, name, resource)
        # The same calls reached from the client, from `chat` or from `beta.chat` (LangChain
        # streams structured output with `beta.chat.completions.stream`) are guarded alike.
        raw = {name: twins[1] for name, twins in guarded.items()}
        streaming = {name: twins[2] for name, twins in guarded.items()}
        beta = self._guarded_beta(client)
        if beta is not None:
            self.beta = beta
            raw["beta"], streaming["beta"] = beta.with_raw_response, beta.with_streaming_response
        self.with_raw_response = Proxy(
            client.with_raw_response,
            chat=Proxy(client.with_raw_response.chat, completions=raw_chat),
            **raw,
        )
        self.with_streaming_response = Proxy(
            client.with_streaming_response,
            chat=Proxy(client.with_streaming_response.chat, completions=streaming_chat),
            **streaming,
        )

    def _guarded_beta(self, client: Any) -> Optional[Proxy]:
        """`beta`, its `responses` guarded like the main `responses` (`compact` and `connect`
        refused) from it and from its twins, and its `chat` the guarded `chat` when it is the
        main `chat` (in today's SDK, parse and stream on both; an older SDK's beta-only chat
        passes through as it was). None when the SDK has no `beta`."""
        beta = getattr(client, "beta", None)
        if beta is None:
            return None
        overrides: dict[str, Any] = {}
        beta_chat = getattr(beta, "chat", None)
        if type(getattr(beta_chat, "completions", None)) is type(client.chat.completions):
            overrides["chat"] = self.chat
        sdk_responses = getattr(beta, "responses", None)
        if sdk_responses is not None:
            responses, raw, streaming = _guarded_resource(self, sdk_responses, _BETA_RESPONSES)
            refuse_unmetered("beta.responses", responses, raw, streaming)
            overrides["responses"] = responses
            overrides["with_raw_response"] = Proxy(beta.with_raw_response, responses=raw)
            overrides["with_streaming_response"] = Proxy(
                beta.with_streaming_response, responses=streaming
            )
        else:
            overrides["with_raw_response"] = beta.with_raw_response
            overrides["with_streaming_response"] = beta.with_streaming_response
        return Proxy(beta, **overrides)


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

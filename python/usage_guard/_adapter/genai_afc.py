"""Gemini's automatic function calling (AFC), metered turn by turn.

With Python functions as `tools`, the SDK's `generate_content` runs a loop inside one call:
it sends the request, runs the functions the model called, sends their results back, up to
`automatic_function_calling.maximum_remote_calls` requests. Guarded as one call, only the
first request would be admitted and only the last answer billed. So the guarded
`generate_content` runs that loop itself, each model turn a guarded call of its own (sent
with AFC off: one request each), admitted before it is sent and billed from its own
`usage_metadata`; a turn the guard refuses, or the provider fails, raises with the turns
before it billed. The functions are run by the SDK's own helpers, as its loop runs them.

`generate_content_stream` with AFC on is refused: its chunks come from several requests in
one stream. `chats.create(...).send_message_stream` runs AFC itself, one guarded stream per
turn."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from google.genai import _extra_utils, _mcp_utils, types
from google.genai import _transformers as transformers

__all__ = ["afc_async", "afc_sync", "refuse_stream_afc"]

_HOW = (
    "call chats.create(...).send_message_stream (which runs the functions itself, each model "
    "turn metered) or generate_content (the same, not streamed), or set "
    "automatic_function_calling={'disable': True} and run the functions yourself"
)


def _functions(config: Any, is_async: bool, vertex: bool = False) -> dict[str, Any]:
    """The Python functions AFC would run for `config`; empty when AFC is off for it (turned
    off, no functions, or tools it cannot run beside them: then the SDK sends one request).
    `vertex`: the client is Vertex AI's, whose async calls run MCP servers' tools (refused
    here: their turns would run inside one call)."""
    if not config or _extra_utils.should_disable_afc(config):
        return {}
    tools = _tools(config)
    sessions = bool(tools) and _mcp_utils.has_mcp_session_usage(tools)
    servers = is_async and vertex and _extra_utils.has_agent_platform_mcp_servers(config)
    if sessions or servers:
        raise TypeError(
            "usage_guard: MCP tools with automatic function calling are not metered turn by "
            "turn; use client.aio.chats.create(...).send_message, or set "
            "automatic_function_calling={'disable': True}"
        )
    incompatible = _extra_utils.find_afc_incompatible_tool_indexes(
        config, is_agent_platform=is_async and vertex
    )
    if incompatible:
        return {}
    functions: dict[str, Any] = _extra_utils.get_function_map(
        config, is_caller_method_async=is_async
    )
    return functions


def _tools(config: Any) -> Any:
    return config.get("tools") if isinstance(config, dict) else getattr(config, "tools", None)


def _one_turn(config: Any) -> Any:
    """`config` with AFC off, for one model turn (the SDK then sends one request)."""
    off = types.AutomaticFunctionCallingConfig(disable=True)
    if isinstance(config, types.GenerateContentConfig):
        return config.model_copy(update={"automatic_function_calling": off})
    return {**dict(config), "automatic_function_calling": off}


def _called(response: Any) -> Any:
    """The model's content when it has parts (function calls to answer), else None."""
    candidates = getattr(response, "candidates", None)
    content = candidates[0].content if candidates else None
    return content if content is not None and content.parts else None


class _Turns:
    """The loop's state: what is sent next, the history, the requests left."""

    def __init__(self, kwargs: dict[str, Any]):
        self.kwargs = kwargs
        self.config = kwargs["config"]
        self.contents = kwargs.get("contents")
        self.left = int(_extra_utils.get_max_remote_calls_afc(self.config))
        self.history: list[Any] = []
        self.turn_config = _one_turn(self.config)

    def request(self) -> dict[str, Any]:
        self.left -= 1
        return {**self.kwargs, "contents": self.contents, "config": self.turn_config}

    def called(self, response: Any) -> Any:
        """The model's function-call content to answer, or None when the loop ends."""
        return _called(response) if self.left > 0 else None

    def answered(self, called: Any, parts: list[Any]) -> None:
        contents = list(transformers.t_contents(self.contents))
        if not self.history:
            self.history.extend(contents)
        reply = types.Content(role="user", parts=parts)
        self.contents = [*contents, called, reply]
        self.history += [called, reply]

    def finish(self, response: Any) -> Any:
        if self.history and _extra_utils.should_append_afc_history(self.config):
            response.automatic_function_calling_history = self.history
        return response


def afc_sync(guarded: Callable[..., Any]) -> Callable[..., Any]:
    """`guarded` (a guarded `generate_content`) running AFC turn by turn, each turn guarded."""

    def generate_content(**kwargs: Any) -> Any:
        functions = _functions(kwargs["config"], is_async=False)
        if not functions:
            return guarded(**kwargs)
        turns = _Turns(kwargs)
        while True:
            response = guarded(**turns.request())
            called = turns.called(response)
            parts = _extra_utils.get_function_response_parts(response, functions) if called else []
            if not parts:
                return turns.finish(response)
            turns.answered(called, parts)

    generate_content.__doc__ = guarded.__doc__
    return generate_content


def afc_async(
    guarded: Callable[..., Awaitable[Any]], vertex: bool = False
) -> Callable[..., Awaitable[Any]]:
    """`afc_sync` for `client.aio` (functions may be coroutine functions, as the SDK's);
    `vertex`: the client is Vertex AI's (`_functions`)."""

    async def generate_content(**kwargs: Any) -> Any:
        functions = _functions(kwargs["config"], is_async=True, vertex=vertex)
        if not functions:
            return await guarded(**kwargs)
        turns = _Turns(kwargs)
        while True:
            response = await guarded(**turns.request())
            called = turns.called(response)
            parts = (
                await _extra_utils.get_function_response_parts_async(response, functions)
                if called
                else []
            )
            if not parts:
                return turns.finish(response)
            turns.answered(called, parts)

    generate_content.__doc__ = guarded.__doc__
    return generate_content


def refuse_stream_afc(kwargs: dict[str, Any], is_async: bool) -> None:
    """Refuses `generate_content_stream` with AFC on (TypeError), before anything is sent."""
    if _functions(kwargs["config"], is_async):
        raise TypeError(
            "usage_guard: generate_content_stream with Python functions as tools and automatic "
            "function calling on streams several requests as one, which the guard cannot "
            f"admit and bill one by one; {_HOW}"
        )

"""Guarded Ollama clients: `chat`, `generate` (plain and streaming) and `embed` are admitted,
fitted (`options.num_predict`) and billed; everything else passes through.

    import ollama
    from usage_guard.ollama import GuardedOllama

    client = GuardedOllama(ollama.Client(), guard, user="alice")
    reply = client.chat("llama3.2", messages=[...])
    reply.usage_limits
"""

from __future__ import annotations

from typing import Any, Optional

from ._wrap import Api, GuardedClient, StreamState, Usage, g

__all__ = ["GuardedOllama", "GuardedAsyncOllama", "CHAT", "GENERATE", "EMBED"]


def _num_predict(request: dict[str, Any]) -> Optional[int]:
    n = (request.get("options") or {}).get("num_predict")
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


def _usage(r: Any) -> Usage:
    return Usage(
        input_tokens=g(r, "prompt_eval_count", default=0),
        output_tokens=g(r, "eval_count", default=0),
    )


def _observer(text_path: tuple[str, ...], thinking_path: tuple[str, ...]) -> Any:
    def observe(state: StreamState, chunk: Any) -> None:
        text = g(chunk, *text_path)
        if text:
            state.text.append(text)
        thinking = g(chunk, *thinking_path)
        if thinking:
            state.reasoning_text.append(thinking)
        if g(chunk, "done"):
            state.usage = _usage(chunk)
            state.final = {"done_reason": g(chunk, "done_reason")}

    return observe


def _api(
    word: str, text: tuple[str, ...], thinking: tuple[str, ...], positional: tuple[str, ...]
) -> Api:
    return Api(
        word=word,
        output_max=_num_predict,
        fit_keys=("options",),
        usage=_usage,
        outcome=lambda r: {"done_reason": g(r, "done_reason")},
        reasoning_text=lambda r: g(r, *thinking, default=""),
        observe=_observer(text, thinking),
        positional=positional,
        lazy_stream=True,
    )


CHAT = _api("ollama", ("message", "content"), ("message", "thinking"), ("model", "messages"))
GENERATE = _api("ollama.generate", ("response",), ("thinking",), ("model", "prompt", "suffix"))
EMBED = Api(
    word="ollama.embed",
    output_max=lambda r: 0,
    fit_keys=(),
    usage=lambda r: Usage(input_tokens=g(r, "prompt_eval_count", default=0)),
    positional=("model", "input"),
    embeddings=True,
)


class GuardedOllama(GuardedClient):
    """An `ollama.Client` whose `chat`, `generate` and `embed` are guarded.

    `user` is the default user; a call's `user=` keyword overrides it and is not sent.
    """

    def __init__(self, client: Any, guard: Any, user: Optional[str] = None):
        super().__init__(client, guard, user)
        self.chat = self._guarded(CHAT, client.chat)
        self.generate = self._guarded(GENERATE, client.generate)
        self.embed = self._guarded(EMBED, client.embed)


class GuardedAsyncOllama(GuardedOllama):
    """`GuardedOllama` around an `ollama.AsyncClient`: the guarded methods are coroutines."""

    _is_async = True

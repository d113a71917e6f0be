"""Ollama SDK plumbing: `chat`, `generate` (plain and streaming) and `embed` are admitted
(counted, and `options.num_predict` fitted, in the core) and billed; the legacy `embeddings` is
refused; everything else passes through.

    import ollama
    from usage_guard.ollama import GuardedOllama

    client = GuardedOllama(ollama.Client(), guard, user="alice")
    reply = client.chat("llama3.2", messages=[...])
    reply.usage_limits
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from .call import Api, StreamState, g, reported
from .flow import GuardedClient
from .twins import refused

__all__ = ["GuardedOllama", "GuardedAsyncOllama", "CHAT", "GENERATE", "EMBED"]


def _observer(
    word: str, text_path: tuple[str, ...], thinking_path: tuple[str, ...]
) -> Callable[[StreamState, Any], None]:
    def observe(state: StreamState, chunk: Any) -> None:
        text = g(chunk, *text_path)
        if text:
            state.text.append(text)
        thinking = g(chunk, *thinking_path)
        if thinking:
            state.reasoning_text.append(thinking)
        if g(chunk, "done"):
            state.usage = reported(word, chunk)
            reason = g(chunk, "done_reason")
            state.finish_reason = str(reason) if reason else None

    return observe


def _api(
    word: str, text: tuple[str, ...], thinking: tuple[str, ...], positional: tuple[str, ...]
) -> Api:
    return Api(
        word=word,
        finish_reasons=lambda r: [str(d)] if (d := g(r, "done_reason")) else [],
        reasoning_text=lambda r: g(r, *thinking, default=""),
        observe=_observer(word, text, thinking),
        positional=positional,
        lazy_stream=True,
    )


CHAT = _api("ollama", ("message", "content"), ("message", "thinking"), ("model", "messages"))
GENERATE = _api("ollama.generate", ("response",), ("thinking",), ("model", "prompt", "suffix"))
EMBED = Api(
    word="ollama.embed",
    positional=("model", "input"),
    embeddings=True,
)


class _GuardedOllamaClient(GuardedClient):
    """What the sync and async guarded Ollama clients share: the guarded methods."""

    def __init__(
        self,
        client: Any,
        guard: Any,
        user: Optional[str] = None,
        fallbacks: Optional[list[str]] = None,
        credential: str = "default",
    ):
        super().__init__(client, guard, user, fallbacks, credential)
        self.chat = self._guarded(CHAT, client.chat)
        self.generate = self._guarded(GENERATE, client.generate)
        self.embed = self._guarded(EMBED, client.embed)
        # The legacy embeddings endpoint (one `prompt`, no usage reported): refused rather
        # than passed through unmetered.
        self.embeddings = refused("embeddings (the legacy endpoint)", "call embed(model, input)")


class GuardedOllama(_GuardedOllamaClient):
    """An `ollama.Client` whose `chat`, `generate` and `embed` are guarded.

    `user` is the default user; a call's `user=` keyword overrides it and is not sent.
    """


class GuardedAsyncOllama(_GuardedOllamaClient):
    """`GuardedOllama` around an `ollama.AsyncClient`: the guarded methods are coroutines."""

    _is_async = True

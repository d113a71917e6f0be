"""Google Gen AI SDK (`google-genai`) plumbing: `models.generate_content` and
`models.generate_content_stream`, and their `client.aio` twins, are admitted (the prompt
counted, `max_output_tokens` and `thinking_config.thinking_budget` fitted, in the core) and
billed from `usage_metadata`; everything else (`count_tokens`, files, caches, ...) passes
through.

    from google import genai
    from usage_guard.genai import GuardedGenAI

    client = GuardedGenAI(genai.Client(), guard, user="alice")
    reply = client.models.generate_content(model="gemini-2.5-flash", contents="Hi")
    reply.usage_limits
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from google.genai import types

from .call import Api, StreamState, g, reported
from .flow import GuardedClient, Proxy

__all__ = ["GuardedGenAI", "GuardedAsyncGenAI", "GENERATE", "GENERATE_STREAM"]

WORD = "gemini"

# The fields of the config admission may fit (the rest of the caller's config is sent as given).
_FITTED = ("max_output_tokens", "thinking_config")


def _reason(candidate: Any) -> Optional[str]:
    reason = g(candidate, "finish_reason")
    return None if reason is None else str(getattr(reason, "value", reason))


def _reasons(response: Any) -> list[str]:
    return [r for c in g(response, "candidates", default=()) if (r := _reason(c))]


def _parts(response: Any, thought: bool) -> list[str]:
    return [
        str(text)
        for c in g(response, "candidates", default=()) or ()
        for p in g(c, "content", "parts", default=()) or ()
        if (text := g(p, "text")) and bool(g(p, "thought")) == thought
    ]


def _observe(state: StreamState, chunk: Any) -> None:
    state.text.extend(_parts(chunk, thought=False))
    state.reasoning_text.extend(_parts(chunk, thought=True))
    for candidate in g(chunk, "candidates", default=()) or ():
        reason = _reason(candidate)
        if reason:
            state.finish_reason = reason
    if g(chunk, "usage_metadata") is not None:  # cumulative: the last one is the call's
        state.usage = reported(WORD, chunk)


def _thinking(value: Any) -> Any:
    return value if value is None else types.ThinkingConfig.model_validate(value)


def _apply_fitted(kwargs: dict[str, Any], fitted: dict[str, Any]) -> None:
    """Sets the fitted output maximum and thinking budget inside the caller's own config (a
    dict or a `GenerateContentConfig`), so that what admission did not change (tools as
    Python functions, a response schema class, bytes) is sent exactly as given."""
    fitted = dict(fitted)
    new = fitted.pop("config", None)
    kwargs.update(fitted)  # the model, when a `degrade` rule sent another
    if not isinstance(new, dict):
        return
    changes = {k: new[k] for k in _FITTED if k in new}
    config = kwargs.get("config")
    if isinstance(config, types.GenerateContentConfig):
        if "thinking_config" in changes:
            changes["thinking_config"] = _thinking(changes["thinking_config"])
        kwargs["config"] = config.model_copy(update=changes)
    else:
        kwargs["config"] = {**dict(config or {}), **changes}


GENERATE = Api(
    word=WORD,
    finish_reasons=_reasons,
    reasoning_text=lambda r: "".join(_parts(r, thought=True)),
    observe=_observe,
    apply_fitted=_apply_fitted,
)
GENERATE_STREAM = Api(
    word=WORD,
    finish_reasons=_reasons,
    observe=_observe,
    apply_fitted=_apply_fitted,
    streaming=True,
    lazy_stream=True,  # the SDK's stream is a generator: sent at the first chunk
)


# What metering reads in the REST body, by its camelCase name (the SDK also accepts the
# snake_case one in `extra_body`): the prompt's fields, and in the generation config the
# output maximum, the answer count and the thinking budget.
_METERED_BODY = ("contents", "systemInstruction", "tools")
_METERED_GENERATION = ("maxOutputTokens", "candidateCount", "thinkingConfig")


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def _metered_keys(extra: Any, where: str) -> list[str]:
    """The keys of an `extra_body` (Gemini's REST shape) that metering reads, as paths."""
    if not isinstance(extra, dict):
        return []
    top = _METERED_BODY + tuple(map(_snake, _METERED_BODY))
    found = [f"{where}.{k}" for k in top if k in extra]
    for name in ("generationConfig", "generation_config"):
        generation = extra.get(name)
        if isinstance(generation, dict):
            keys = _METERED_GENERATION + tuple(map(_snake, _METERED_GENERATION))
            found += [f"{where}.{name}.{k}" for k in keys if k in generation]
    return found


def refuse_metered_extra_body(http_options: Any, where: str) -> None:
    """Refuses an `extra_body` (the SDK merges it over the request body it built from the
    config, recursively) that carries a field metering reads: the guard would count and fit
    the config's value while the provider received another. Raises ValueError naming it."""
    extra = g(http_options, "extra_body")
    found = _metered_keys(extra, f"{where}.extra_body")
    if found:
        raise ValueError(
            f"{found[0]}: {where}.extra_body may not set what the guard counts or fits "
            "(contents, system instruction, tools, max_output_tokens, candidate_count, "
            "thinking_config); pass it as the argument or config field of the same name, "
            "where it is counted and fitted"
        )


def _model_name(model: Any) -> Any:
    """`models/<id>`, the resource name, is the model `<id>` (the SDK sends both to the same
    endpoint): admission reads the id the policy declares."""
    if isinstance(model, str) and model.startswith("models/"):
        return model[len("models/") :]
    return model


def _with_config(guarded: Callable[..., Any]) -> Callable[..., Any]:
    """`guarded` given a config even when the caller gave none: admission writes the fitted
    output maximum into the request's config, which must be the SDK's `config`. The model's
    resource name is read as its id; an `extra_body` setting a metered field is refused."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("config") is None:
            kwargs["config"] = {}
        if "model" in kwargs:
            kwargs["model"] = _model_name(kwargs["model"])
        refuse_metered_extra_body(g(kwargs["config"], "http_options"), "config.http_options")
        return guarded(*args, **kwargs)

    call.__doc__ = guarded.__doc__
    return call


class _GuardedGenAIClient(GuardedClient):
    """What the sync and async guarded clients share: the guarded `models`."""

    def __init__(
        self,
        client: Any,
        guard: Any,
        user: Optional[str] = None,
        fallbacks: Optional[list[str]] = None,
        credential: str = "default",
    ):
        super().__init__(client, guard, user, fallbacks, credential)
        # The client's own http_options are merged into every request too (a private field
        # of the SDK's: read when there).
        options = g(client, "_api_client", "_http_options")
        refuse_metered_extra_body(options, "http_options")
        models = client.models
        self.models = Proxy(
            models,
            generate_content=_with_config(self._guarded(GENERATE, models.generate_content)),
            generate_content_stream=_with_config(
                self._guarded(GENERATE_STREAM, models.generate_content_stream)
            ),
        )


class GuardedAsyncGenAI(_GuardedGenAIClient):
    """`GuardedGenAI`'s `aio`: around a `genai.client.AsyncClient`, the guarded methods are
    coroutines (`generate_content_stream` answers an async iterator, as the SDK's does)."""

    _is_async = True


class GuardedGenAI(_GuardedGenAIClient):
    """A `genai.Client` whose `models.generate_content` and `generate_content_stream` are
    guarded, and whose `aio` is a `GuardedAsyncGenAI`.

    `user` is the default user; a call's `user=` keyword overrides it and is not sent.
    """

    def __init__(
        self,
        client: Any,
        guard: Any,
        user: Optional[str] = None,
        fallbacks: Optional[list[str]] = None,
        credential: str = "default",
    ):
        super().__init__(client, guard, user, fallbacks, credential)
        self.aio = GuardedAsyncGenAI(client.aio, guard, user, fallbacks, credential)

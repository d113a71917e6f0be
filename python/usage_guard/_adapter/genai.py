"""Google Gen AI SDK (`google-genai`) plumbing: `models.generate_content` and
`models.generate_content_stream`, and their `client.aio` twins, are admitted (the prompt
counted, `max_output_tokens` and `thinking_config.thinking_budget` fitted, in the core) and
billed from `usage_metadata`; automatic function calling runs turn by turn, each turn a
guarded call (`genai_afc`); `chats` send through the guarded `models`; `embed_content` is
counted and billed as input; the generating resources the guard cannot meter (batch jobs,
the Interactions and Live APIs) are refused; everything else (`count_tokens`, files,
caches, ...) passes through.

    from google import genai
    from usage_guard.genai import GuardedGenAI

    client = GuardedGenAI(genai.Client(), guard, user="alice")
    reply = client.models.generate_content(model="gemini-2.5-flash", contents="Hi")
    reply.usage_limits
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Optional

from google.genai import _transformers as transformers
from google.genai import types
from google.genai.chats import AsyncChats, Chats
from google.genai.models import AsyncModels, Models

from .call import Api, StreamState, g, reported
from .flow import GuardedClient, Proxy
from .genai_afc import afc_async, afc_sync, refuse_stream_afc
from .genai_config import prepare, refuse_metered_extra_body
from .twins import refused

__all__ = [
    "GuardedGenAI",
    "GuardedAsyncGenAI",
    "GuardedModels",
    "GuardedAsyncModels",
    "GENERATE",
    "GENERATE_STREAM",
    "EMBED",
]

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


def _no_extra_body(kwargs: dict[str, Any]) -> None:
    """An embedding request's `extra_body` could add texts the guard never counted."""
    if g(kwargs.get("config"), "http_options", "extra_body") is not None:
        raise ValueError(
            "config.http_options.extra_body: embed_content may not carry an extra_body (it "
            "could add texts the guard does not count); pass the texts as `contents`"
        )


def _texts(contents: Any) -> list[str]:
    """The texts of an embedding request, which the guard counts; anything else (an image,
    a file) is refused (TypeError): it would be embedded and billed, never counted."""
    texts = []
    for content in transformers.t_contents(contents):
        for part in content.parts or ():
            if part.text is None:
                raise TypeError(
                    "usage_guard: embed_content meters text only; this part is not text: "
                    f"{part!r:.80}"
                )
            texts.append(part.text)
    return texts


# `embed_content`: its texts counted (as `input`, by the core's embeddings counting) and
# billed as input; Gemini reports no usage for embeddings, so the count is what is billed.
EMBED = Api(word="openai.embeddings", embeddings=True, apply_fitted=_apply_fitted)


def _embed(guarded: Callable[..., Any], models: Any) -> Callable[..., Any]:
    def embed_content(**kwargs: Any) -> Any:
        kwargs = prepare(kwargs, types.EmbedContentConfig)
        _no_extra_body(kwargs)
        # The client's own extra_body is merged into the request too.
        if g(models, "_api_client", "_http_options", "extra_body"):
            raise ValueError(
                "http_options.extra_body: embed_content is refused on a client whose "
                "http_options carry an extra_body (it could add texts the guard does not "
                "count); embed through a client without one"
            )
        return guarded(input=_texts(kwargs.get("contents")), **kwargs)

    embed_content.__doc__ = guarded.__doc__
    return embed_content


def _without_input(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The SDK method, given the keywords less `input` (what admission counted)."""
    return lambda input, **kwargs: fn(**kwargs)  # noqa: A006


def _generate(guarded: Callable[..., Any], afc: Callable[..., Any]) -> Callable[..., Any]:
    run = afc(guarded)

    def generate_content(**kwargs: Any) -> Any:
        return run(**prepare(kwargs, types.GenerateContentConfig))

    generate_content.__doc__ = guarded.__doc__
    return generate_content


def _stream(guarded: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
    def generate_content_stream(**kwargs: Any) -> Any:
        kwargs = prepare(kwargs, types.GenerateContentConfig)
        refuse_stream_afc(kwargs, is_async)
        return guarded(**kwargs)

    generate_content_stream.__doc__ = guarded.__doc__
    return generate_content_stream


def _guarded_methods(owner: GuardedClient, models: Any) -> dict[str, Callable[..., Any]]:
    """The guarded methods of `models` (the SDK's `Models` or `AsyncModels`)."""
    is_async = owner._is_async
    vertex = bool(getattr(getattr(models, "_api_client", None), "vertexai", False))
    return {
        "generate_content": _generate(
            owner._guarded(GENERATE, models.generate_content),
            partial(afc_async, vertex=vertex) if is_async else afc_sync,
        ),
        "generate_content_stream": _stream(
            owner._guarded(GENERATE_STREAM, models.generate_content_stream), is_async
        ),
        "embed_content": _embed(
            owner._guarded(EMBED, _without_input(models.embed_content)), models
        ),
    }


class _GuardedModelsBase:
    """What the sync and async guarded `models` share: built over the SDK's own API client,
    the guarded methods of `_guarded_methods` set on the instance."""

    def __init__(self, models: Any, owner: GuardedClient):
        super().__init__(models._api_client)  # type: ignore[call-arg]
        self._inner = models
        vars(self).update(_guarded_methods(owner, models))

    def __repr__(self) -> str:
        return f"<guarded {self._inner!r}>"


class GuardedModels(_GuardedModelsBase, Models):
    """The client's `models`, guarded: `generate_content` (automatic function calling turn by
    turn), `generate_content_stream` and `embed_content`; the rest is the SDK's, over the same
    API client. An SDK `Models`, so that the SDK's chats take it (they check)."""


class GuardedAsyncModels(_GuardedModelsBase, AsyncModels):
    """`GuardedModels` for `client.aio`: the guarded methods are coroutines."""


_GENERATE_INSTEAD = "call models.generate_content (or chats), which are metered"


class _GuardedGenAIClient(GuardedClient):
    """What the sync and async guarded clients share: the guarded `models` and `chats`, and
    the generating resources the guard cannot meter refused."""

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
        if isinstance(models, AsyncModels):
            self.models: Any = GuardedAsyncModels(models, self)
        elif isinstance(models, Models):
            self.models = GuardedModels(models, self)
        else:  # not the SDK's (a stand-in): its guarded methods, the rest passing through
            self.models = Proxy(models, **_guarded_methods(self, models))

    @property
    def chats(self) -> Any:
        """The SDK's chats over the guarded `models`: each request a chat sends (each model
        turn of its automatic function calling too) is admitted and billed."""
        if isinstance(self.models, GuardedAsyncModels):
            return AsyncChats(modules=self.models)
        if isinstance(self.models, GuardedModels):
            return Chats(modules=self.models)
        raise TypeError(
            "usage_guard: chats need the SDK's own models resource, which this client does "
            "not have; call models.generate_content with the history as contents"
        )

    @property
    def interactions(self) -> Any:
        """Refused: the Interactions API generates outside the metered `models` calls
        (`create`, its raw and streaming twins and `do_request`); get, cancel, delete pass."""
        resource = self.client.interactions
        refuse = refused("interactions.create (the Interactions API)", _GENERATE_INSTEAD)
        twins = {
            name: Proxy(getattr(resource, name), create=refuse)
            for name in ("with_raw_response", "with_streaming_response")
            if hasattr(resource, name)
        }
        return Proxy(resource, create=refuse, do_request=refuse, **twins)

    @property
    def batches(self) -> Any:
        """`batches` with `create` and `create_embeddings` refused (their requests run later,
        unseen by the guard, with no usage to bill); get, list, cancel, delete pass."""
        how = "send the requests one by one through models.generate_content / embed_content"
        return Proxy(
            self.client.batches,
            create=refused("batches.create (a batch job)", how),
            create_embeddings=refused("batches.create_embeddings (a batch job)", how),
        )

    @property
    def live(self) -> Any:
        """`live` with `connect` refused: a Live API session generates unmetered."""
        return Proxy(
            self.client.live, connect=refused("live.connect (the Live API)", _GENERATE_INSTEAD)
        )


class GuardedAsyncGenAI(_GuardedGenAIClient):
    """`GuardedGenAI`'s `aio`: around a `genai.client.AsyncClient`, the guarded methods are
    coroutines (`generate_content_stream` answers an async iterator, as the SDK's does)."""

    _is_async = True


class GuardedGenAI(_GuardedGenAIClient):
    """A `genai.Client` whose `models.generate_content`, `generate_content_stream` and
    `embed_content` are guarded, whose `chats` send through them, and whose `aio` is a
    `GuardedAsyncGenAI`.

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

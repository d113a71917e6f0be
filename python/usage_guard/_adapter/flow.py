"""The one guarded-call flow behind every provider wrapper: admit (count + fit) → call → bill.

A provider module (openai.py, anthropic.py, ollama.py) only describes its SDK with an `Api`:
how usage reads from an SDK response, how a stream chunk adds up. Where a request keeps its
output maximum and thinking budget, counting the prompt and fitting it are the core's, done
once in admission. Everything else — sending the fitted keys, releasing on a provider error,
billing once from the reported usage, billing what a broken or abandoned stream produced,
attaching `usage_limits` / `usage_restriction` — lives once: the steps in `call`, driven here
by a sync and an async driver that share every step that does not wait (the stream wrappers
are `streams`'; they are re-exported here).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional

from .. import _core
from ..errors import UsageLimitError
from .call import Api, Call, begin_async, begin_sync
from .finish import give_back_async, give_back_sync, settle_answer_async, settle_answer_sync
from .ladder import Ladder
from .streams import AsyncGuardedStream, GuardedStream

__all__ = ["AsyncGuardedStream", "GuardedClient", "GuardedStream", "Proxy"]


# -- the sync driver ---------------------------------------------------------------------------


def run_sync(
    owner: GuardedClient,
    api: Api,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    if owner._fallbacks is not None:
        return run_ladder_sync(owner, api, fn, args, kwargs)
    call = begin_sync(owner, api, args, kwargs)
    try:
        result = fn(**call.kwargs)
    except BaseException as exc:
        give_back_sync(call, exc)
        raise
    return finish_sync(call, result)


def finish_sync(call: Call, result: Any) -> Any:
    if call.stream:
        if call.api.stream_answer is not None:
            return call.api.stream_answer(call, result, False)
        return GuardedStream(call, result)
    return settle_answer_sync(call, result)


def run_ladder_sync(
    owner: GuardedClient,
    api: Api,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """`run_sync` down the call's fallback ladder (`ladder`)."""
    ladder = Ladder(owner, api, args, kwargs)
    for i, (model, provider) in enumerate(ladder.rungs):
        if not ladder.available(provider):
            continue
        try:
            call = begin_sync(owner, api, (), ladder.kwargs_for(model))
        except UsageLimitError as exc:
            if i == 0:
                raise
            ladder.refused.append(exc)
            continue
        if not ladder.available(provider, take=True):
            call.ticket.release()
            continue
        try:
            result = fn(**call.kwargs)
        except BaseException as exc:
            give_back_sync(call, exc)
            if ladder.failed(exc, provider, last=i + 1 == len(ladder.rungs)):
                continue
            raise
        ladder.succeeded(provider)
        result = finish_sync(call, result)
        ladder.mark(result, i, model)
        return result
    raise ladder.exhausted()


# -- the async driver --------------------------------------------------------------------------


async def run_async(
    owner: GuardedClient,
    api: Api,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    if owner._fallbacks is not None:
        return await run_ladder_async(owner, api, fn, args, kwargs)
    call = await begin_async(owner, api, args, kwargs)
    try:
        result = await fn(**call.kwargs)
    except BaseException as exc:
        await give_back_async(call, exc)
        raise
    return await finish_async(call, result)


async def finish_async(call: Call, result: Any) -> Any:
    if call.stream:
        if call.api.stream_answer is not None:
            return call.api.stream_answer(call, result, True)
        return AsyncGuardedStream(call, result)
    return await settle_answer_async(call, result)


async def run_ladder_async(
    owner: GuardedClient,
    api: Api,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """`run_ladder_sync` for asyncio. The health checks may read the store (every 500 ms):
    they run in a worker thread (the core releases the GIL), never on the loop."""
    ladder = Ladder(owner, api, args, kwargs)
    for i, (model, provider) in enumerate(ladder.rungs):
        if not await asyncio.to_thread(ladder.available, provider):
            continue
        try:
            call = await begin_async(owner, api, (), ladder.kwargs_for(model))
        except UsageLimitError as exc:
            if i == 0:
                raise
            ladder.refused.append(exc)
            continue
        if not await asyncio.to_thread(ladder.available, provider, True):
            await call.ticket.release_async()
            continue
        try:
            result = await fn(**call.kwargs)
        except BaseException as exc:
            await give_back_async(call, exc)
            last = i + 1 == len(ladder.rungs)
            if await asyncio.to_thread(ladder.failed, exc, provider, last):
                continue
            raise
        await asyncio.to_thread(ladder.succeeded, provider)
        result = await finish_async(call, result)
        ladder.mark(result, i, model)
        return result
    raise ladder.exhausted()


# -- the client proxies ------------------------------------------------------------------------


class Proxy:
    """Passes every attribute through to `target`, except the ones given."""

    def __init__(self, target: Any, **overrides: Any):
        self._target = target
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        if name == "_target":
            raise AttributeError(name)
        return getattr(self._target, name)

    def __repr__(self) -> str:
        return f"<guarded {self._target!r}>"


class GuardedClient:
    """Base of the guarded clients: holds the guard and the default user; everything not
    guarded passes through to the wrapped client."""

    _is_async = False

    def __init__(
        self,
        client: Any,
        guard: Any,
        user: Optional[str] = None,
        fallbacks: Optional[list[str]] = None,
        credential: str = "default",
    ):
        # Not `_client`: SDK code reads a client's own `_client` (its HTTP client), which
        # passes through (Pydantic AI's `max_retries` hands it to `with_options`).
        self._wrapped = client
        self._guard: _core.Guard = guard
        self._guard_user = user
        # None: no ladder (and no health tracking); a list: the models tried in order after
        # the one asked for, against the guard's provider health.
        self._fallbacks: Optional[list[str]] = None if fallbacks is None else list(fallbacks)
        # The name the provider's key is tracked under for cooldowns (never the key).
        self._credential = credential

    @property
    def client(self) -> Any:
        """The wrapped client (unguarded)."""
        return self._wrapped

    @property
    def guard(self) -> Any:
        return self._guard

    def __getattr__(self, name: str) -> Any:
        if name in ("_wrapped", "_guard", "_guard_user", "_fallbacks", "_credential"):
            raise AttributeError(name)
        return getattr(self._wrapped, name)

    def with_options(self, **options: Any) -> Any:
        """The wrapped client's `with_options(...)`, guarded the same way."""
        return self._same(self._wrapped.with_options(**options), self._guard_user)

    def copy(self, **options: Any) -> Any:
        """The wrapped client's `copy(...)`, guarded the same way."""
        return self._same(self._wrapped.copy(**options), self._guard_user)

    def for_user(self, user: Optional[str]) -> Any:
        """The same client and guard, with another default user."""
        return self._same(self._wrapped, user)

    def _same(self, client: Any, user: Optional[str]) -> Any:
        return type(self)(client, self._guard, user, self._fallbacks, self._credential)

    def _guarded(self, api: Api, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` as a guarded call (a coroutine function on async clients)."""
        if self._is_async:

            async def guarded_async(*args: Any, **kwargs: Any) -> Any:
                return await run_async(self, api, fn, args, kwargs)

            guarded_async.__doc__ = fn.__doc__
            return guarded_async

        def guarded(*args: Any, **kwargs: Any) -> Any:
            return run_sync(self, api, fn, args, kwargs)

        guarded.__doc__ = fn.__doc__
        return guarded

    def __repr__(self) -> str:
        return f"<{type(self).__name__} user={self._guard_user!r} client={self._wrapped!r}>"

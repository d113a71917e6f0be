"""The one guarded-call flow behind every provider wrapper: admit → fit → call → bill.

A provider wrapper (openai.py, anthropic.py, ollama.py) only describes its API with an `Api`:
where the output maximum lives, how usage reads from a response, how a stream chunk adds up.
Everything else — counting the prompt, admitting, fitting into `ticket.ceiling`, releasing on
a provider error, billing once from the reported usage, billing what a broken or abandoned
stream produced, attaching `usage_limits` / `usage_restriction` — lives here, once, in a sync
and an async driver that share every step that does not wait.
"""

from __future__ import annotations

import base64
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from . import _core

log = logging.getLogger("usage_guard")

__all__ = ["Api", "Usage", "StreamState", "GuardedClient", "Proxy", "g"]

# SDK-only keyword arguments: they configure the HTTP call, they are not the request.
_SDK_OPTIONS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})


def g(obj: Any, *path: Any, default: Any = None) -> Any:
    """`obj.a.b` or `obj["a"]["b"]`, whichever the object is; `default` when absent or None."""
    for key in path:
        if obj is None:
            return default
        if isinstance(obj, dict):
            obj = obj.get(key)
        elif isinstance(key, int):
            try:
                obj = obj[key]
            except (IndexError, KeyError, TypeError):
                return default
        else:
            obj = getattr(obj, key, None)
    return default if obj is None else obj


def _not_given(value: Any) -> bool:
    # openai.NOT_GIVEN / anthropic.NOT_GIVEN / omit sentinels, without importing the SDKs.
    return type(value).__name__ in ("NotGiven", "Omit")


def jsonable(value: Any) -> Any:
    """The request as plain JSON values (SDK models dumped, bytes as base64, sentinels dropped)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items() if not _not_given(v)}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, type):  # e.g. a pydantic class as `response_format`
        return value.__name__
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return jsonable(dump(exclude_none=True))
        except Exception:
            return str(value)
    if hasattr(value, "keys"):
        return {str(k): jsonable(value[k]) for k in value.keys()}
    return str(value)


@dataclass
class Usage:
    """What a call used, as the provider reported it (or as counted for a cut-off stream)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass
class StreamState:
    """What a stream delivered so far."""

    chunks: int = 0
    text: list[str] = field(default_factory=list)
    reasoning_text: list[str] = field(default_factory=list)
    input_tokens: Optional[int] = None  # reported before the end (Anthropic message_start)
    cached_input_tokens: int = 0
    usage: Optional[Usage] = None  # the final reported usage
    final: dict[str, Any] = field(default_factory=dict)  # for usage_capped


@dataclass
class Api:
    """How one provider API is guarded."""

    word: str  # the ceiling's provider word: "openai", "openai.responses", ...
    output_max: Callable[[dict[str, Any]], Optional[int]]  # the caller's output maximum
    fit_keys: tuple[str, ...]  # request keys that fit() may change
    usage: Callable[[Any], Usage]  # the usage of a plain response
    outcome: Callable[[Any], dict[str, Any]] = lambda r: {}  # why it stopped, for usage_capped
    observe: Optional[Callable[[StreamState, Any], None]] = None  # one stream chunk
    # Asks for usage in the stream; True when the caller had not, so that chunks carrying only
    # usage (`extra_chunk`) are kept from the caller, who did not expect them.
    stream_setup: Optional[Callable[[dict[str, Any]], bool]] = None
    extra_chunk: Callable[[Any], bool] = lambda chunk: False
    reasoning_text: Optional[Callable[[Any], str]] = None  # thinking text, when not reported
    positional: tuple[str, ...] = ()  # names of positional arguments, in order
    lazy_stream: bool = False  # the request is sent at the first chunk (Ollama generators)
    embeddings: bool = False


# -- the prompt count: one place to change when Guard.admit counts the request itself ----------

# The ceiling's default `margin`: what `fit` keeps free when the prompt count is an estimate.
ESTIMATE_MARGIN = 0.05


def admission(
    api: Api, model: str, request: dict[str, Any], max_tokens: Optional[int]
) -> tuple[dict[str, Any], str]:
    """The keyword arguments of `Guard.admit` for this call, and the prompt's encoding
    (used to count the output of a stream that is cut off)."""
    count = _core.count_prompt(request, provider=api.word, model=model)
    tokens = int(count["tokens"])
    if not count["exact"]:
        # Reserve the margin `fit` keeps free for an estimate, so that it comes off what is
        # left, not off the caller's output maximum.
        tokens += math.ceil(tokens * ESTIMATE_MARGIN)
    kwargs = {
        "prompt_tokens": tokens,
        "max_tokens": 0 if api.embeddings else max_tokens,
        "provider": api.word,
    }
    return kwargs, count["encoding"]


# -- one call ----------------------------------------------------------------------------------


class Call:
    """One guarded call: its request, ticket and fit, and the pure steps between the waits."""

    def __init__(
        self, owner: GuardedClient, api: Api, args: tuple[Any, ...], kwargs: dict[str, Any]
    ):
        kwargs = dict(kwargs)
        for name, value in zip(api.positional, args):
            if name in kwargs:
                raise TypeError(f"got multiple values for argument {name!r}")
            kwargs[name] = value
        if len(args) > len(api.positional):
            raise TypeError(f"too many positional arguments ({len(args)})")
        self.user: Optional[str] = kwargs.pop("user", owner._guard_user)
        self.guard = owner._guard
        self.api = api
        self.kwargs = kwargs
        self.model = str(kwargs.get("model") or "")
        self.stream = bool(kwargs.get("stream")) and not api.embeddings
        self.request = {
            k: jsonable(v) for k, v in kwargs.items() if k not in _SDK_OPTIONS and not _not_given(v)
        }
        self.ticket: Any = None
        self.fitted: Any = None
        self.encoding = "o200k_base"
        self.started = 0.0
        self.hide_extra_chunks = False

    def shown(self, state: StreamState, chunk: Any) -> bool:
        """Observes a stream chunk; False when it is one of ours the caller should not see."""
        state.chunks += 1
        if self.api.observe is not None:
            self.api.observe(state, chunk)
        return not (self.hide_extra_chunks and self.api.extra_chunk(chunk))

    def admit_kwargs(self) -> dict[str, Any]:
        kwargs, self.encoding = admission(
            self.api, self.model, self.request, self.api.output_max(self.request)
        )
        return kwargs

    def fit(self, ticket: Any) -> None:
        """Fits the request into the ticket's ceiling (raises before the provider sees it)."""
        self.ticket = ticket
        self.fitted = _core.fit(
            self.request, ticket.ceiling, provider=self.api.word, model=self.model
        )
        fitted = self.fitted.request
        for key in self.api.fit_keys:
            if key in fitted and fitted[key] != self.request.get(key):
                self.kwargs[key] = fitted[key]
        if self.stream and self.api.stream_setup is not None:
            self.hide_extra_chunks = self.api.stream_setup(self.kwargs)
        self.started = time.monotonic()

    def compute_ms(self) -> int:
        return max(0, int((time.monotonic() - self.started) * 1000))

    def bill_kwargs(self, usage: Usage) -> dict[str, Any]:
        output = max(0, usage.output_tokens)
        inp = max(0, usage.input_tokens)
        return {
            "input_tokens": inp,
            "output_tokens": output,
            "cached_input_tokens": min(max(0, usage.cached_input_tokens), inp),
            "compute_ms": self.compute_ms(),
            "reasoning_tokens": min(max(0, usage.reasoning_tokens), output),
        }

    def response_usage(self, response: Any) -> Usage:
        usage = self.api.usage(response)
        if not usage.reasoning_tokens and self.api.reasoning_text is not None:
            usage.reasoning_tokens = self.count([self.api.reasoning_text(response)])
        return usage

    def capped(self, response: Any) -> bool:
        if self.fitted is None or self.api.embeddings:
            return False
        return bool(_core.usage_capped(response, self.fitted, provider=self.api.word))

    def count(self, parts: list[str]) -> int:
        text = "".join(parts)
        return _core.count_tokens(text, self.encoding) if text else 0

    def stream_usage(self, state: StreamState, completed: bool) -> Optional[Usage]:
        """What a stream is billed: the reported usage when it ended with one; else the input
        plus the output received (counted). None: nothing was sent or produced, release."""
        if completed and state.usage is not None:
            if not state.usage.reasoning_tokens and state.reasoning_text:
                state.usage.reasoning_tokens = self.count(state.reasoning_text)
            return state.usage
        if state.chunks == 0 and (self.api.lazy_stream or not completed):
            return None
        prompt = self.fitted.prompt_tokens if self.fitted is not None else 0
        reasoning = self.count(state.reasoning_text)
        return Usage(
            input_tokens=state.input_tokens if state.input_tokens is not None else prompt,
            cached_input_tokens=state.cached_input_tokens,
            output_tokens=self.count(state.text) + reasoning,
            reasoning_tokens=reasoning,
        )

    def stream_capped(self, state: StreamState) -> bool:
        return bool(state.final) and self.capped(state.final)


def attach(
    obj: Any, view: Optional[dict[str, Any]], capped: bool, billed: Optional[dict[str, Any]] = None
) -> None:
    """Sets `usage_limits` (the usage view with `capped`), `usage_restriction` and
    `usage_billed` (what the call was billed) on `obj`."""
    limits = dict(view or {})
    limits["capped"] = capped
    values = (
        ("usage_limits", limits),
        ("usage_restriction", limits.get("restriction")),
        ("usage_billed", billed),
    )
    for name, value in values:
        try:
            object.__setattr__(obj, name, value)
        except (AttributeError, TypeError):  # pragma: no cover - objects without a __dict__
            log.debug("usage_guard: cannot attach %s to %r", name, type(obj))


def _settle_error(what: str, exc: BaseException) -> None:
    log.warning("usage_guard: %s failed: %s", what, exc)


# -- the sync driver ---------------------------------------------------------------------------


def begin_sync(owner: GuardedClient, api: Api, args: tuple, kwargs: dict) -> Call:
    """Admits and fits a call; a call that does not fit is released and raises."""
    call = Call(owner, api, args, kwargs)
    ticket = call.guard.admit(call.user, call.model, **call.admit_kwargs())
    try:
        call.fit(ticket)
    except BaseException:
        ticket.release()
        raise
    return call


def run_sync(
    owner: GuardedClient, api: Api, fn: Callable[..., Any], args: tuple, kwargs: dict
) -> Any:
    call = begin_sync(owner, api, args, kwargs)
    try:
        result = fn(**call.kwargs)
    except BaseException:
        call.ticket.release()
        raise
    if call.stream:
        return GuardedStream(call, result)
    settle_sync(call, call.response_usage(result), result, call.capped(api.outcome(result)))
    return result


def settle_sync(call: Call, usage: Optional[Usage], target: Any, capped: bool) -> None:
    if usage is None:
        call.ticket.release()
        return
    billed = view = None
    try:
        billed = call.ticket.bill(**call.bill_kwargs(usage))
        view = call.guard.usage(call.user, call.model)
    except Exception as exc:  # the call has run: log, never throw
        _settle_error("bill", exc)
    attach(target, view, capped, billed)


class GuardedStream:
    """A provider stream that bills when it ends, breaks, is closed or is dropped."""

    def __init__(self, call: Call, inner: Any):
        self._call = call
        self._inner = inner
        self._iter: Any = None
        self._state = StreamState()
        self._settled = False
        self.usage_limits: Optional[dict[str, Any]] = None
        self.usage_restriction: Optional[dict[str, Any]] = None
        self.usage_billed: Optional[dict[str, Any]] = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __iter__(self) -> GuardedStream:
        return self

    def __next__(self) -> Any:
        if self._iter is None:
            self._iter = iter(self._inner)
        while True:
            try:
                chunk = next(self._iter)
            except StopIteration:
                self._settle(completed=True)
                raise
            except BaseException:
                self._settle(completed=False)
                raise
            if self._call.shown(self._state, chunk):
                return chunk

    def _settle(self, completed: bool) -> None:
        if self._settled:
            return
        self._settled = True
        call, state = self._call, self._state
        settle_sync(call, call.stream_usage(state, completed), self, call.stream_capped(state))

    def close(self) -> None:
        try:
            close = getattr(self._inner, "close", None)
            if callable(close):
                close()
        finally:
            self._settle(completed=False)

    def __enter__(self) -> GuardedStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not getattr(self, "_settled", True):
                self._settle(completed=False)
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


# -- the async driver --------------------------------------------------------------------------


async def begin_async(owner: GuardedClient, api: Api, args: tuple, kwargs: dict) -> Call:
    """`begin_sync` for asyncio."""
    call = Call(owner, api, args, kwargs)
    ticket = await call.guard.admit_async(call.user, call.model, **call.admit_kwargs())
    try:
        call.fit(ticket)
    except BaseException:
        await ticket.release_async()
        raise
    return call


async def run_async(
    owner: GuardedClient, api: Api, fn: Callable[..., Any], args: tuple, kwargs: dict
) -> Any:
    call = await begin_async(owner, api, args, kwargs)
    try:
        result = await fn(**call.kwargs)
    except BaseException:
        await call.ticket.release_async()
        raise
    if call.stream:
        return AsyncGuardedStream(call, result)
    await settle_async(call, call.response_usage(result), result, call.capped(api.outcome(result)))
    return result


async def settle_async(call: Call, usage: Optional[Usage], target: Any, capped: bool) -> None:
    if usage is None:
        await call.ticket.release_async()
        return
    billed = view = None
    try:
        billed = await call.ticket.bill_async(**call.bill_kwargs(usage))
        view = await call.guard.usage_async(call.user, call.model)
    except Exception as exc:
        _settle_error("bill", exc)
    attach(target, view, capped, billed)


class AsyncGuardedStream:
    """An async provider stream that bills when it ends, breaks, is closed or is dropped."""

    def __init__(self, call: Call, inner: Any):
        self._call = call
        self._inner = inner
        self._iter: Any = None
        self._state = StreamState()
        self._settled = False
        self.usage_limits: Optional[dict[str, Any]] = None
        self.usage_restriction: Optional[dict[str, Any]] = None
        self.usage_billed: Optional[dict[str, Any]] = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __aiter__(self) -> AsyncGuardedStream:
        return self

    async def __anext__(self) -> Any:
        if self._iter is None:
            self._iter = self._inner.__aiter__()
        while True:
            try:
                chunk = await self._iter.__anext__()
            except StopAsyncIteration:
                await self._settle(completed=True)
                raise
            except BaseException:
                await self._settle(completed=False)
                raise
            if self._call.shown(self._state, chunk):
                return chunk

    async def _settle(self, completed: bool) -> None:
        if self._settled:
            return
        self._settled = True
        call, state = self._call, self._state
        await settle_async(
            call, call.stream_usage(state, completed), self, call.stream_capped(state)
        )

    async def close(self) -> None:
        try:
            close = getattr(self._inner, "aclose", None) or getattr(self._inner, "close", None)
            if callable(close):
                await close()
        finally:
            await self._settle(completed=False)

    aclose = close

    async def __aenter__(self) -> AsyncGuardedStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __del__(self) -> None:
        # No loop to await on here: bill with the blocking call (it releases the GIL).
        try:
            if not getattr(self, "_settled", True):
                self._settled = True
                call, state = self._call, self._state
                settle_sync(call, call.stream_usage(state, False), self, call.stream_capped(state))
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


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

    def __init__(self, client: Any, guard: Any, user: Optional[str] = None):
        self._client = client
        self._guard = guard
        self._guard_user = user

    @property
    def client(self) -> Any:
        """The wrapped client (unguarded)."""
        return self._client

    @property
    def guard(self) -> Any:
        return self._guard

    def __getattr__(self, name: str) -> Any:
        if name in ("_client", "_guard", "_guard_user"):
            raise AttributeError(name)
        return getattr(self._client, name)

    def with_options(self, **options: Any) -> Any:
        """The wrapped client's `with_options(...)`, guarded the same way."""
        return type(self)(self._client.with_options(**options), self._guard, self._guard_user)

    def copy(self, **options: Any) -> Any:
        """The wrapped client's `copy(...)`, guarded the same way."""
        return type(self)(self._client.copy(**options), self._guard, self._guard_user)

    def for_user(self, user: Optional[str]) -> Any:
        """The same client and guard, with another default user."""
        return type(self)(self._client, self._guard, user)

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
        return f"<{type(self).__name__} user={self._guard_user!r} client={self._client!r}>"

"""One guarded call, step by step: the request as JSON, the prompt count and admission, the
fit into `ticket.ceiling`, what it is billed (from a response or a stream), and settling it.
`_wrap` drives these steps, sync and async; the provider modules describe their API as an
`Api`."""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional

from . import _core

if TYPE_CHECKING:
    from ._wrap import GuardedClient

log = logging.getLogger("usage_guard")


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
def admission(api: Api, request: dict[str, Any], max_tokens: Optional[int]) -> dict[str, Any]:
    """The keyword arguments of `Guard.admit` for this call: the guard counts the prompt
    from the request itself (with the policy's encoding, and the margin kept free for an
    estimate)."""
    return {
        "request": request,
        "provider": api.word,
        "max_tokens": 0 if api.embeddings else max_tokens,
    }


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
        self._encoding: Optional[str] = None
        self.started = 0.0
        self.hide_extra_chunks = False

    def shown(self, state: StreamState, chunk: Any) -> bool:
        """Observes a stream chunk; False when it is one of ours the caller should not see."""
        state.chunks += 1
        if self.api.observe is not None:
            self.api.observe(state, chunk)
        return not (self.hide_extra_chunks and self.api.extra_chunk(chunk))

    def admit_kwargs(self) -> dict[str, Any]:
        return admission(self.api, self.request, self.api.output_max(self.request))

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

    @property
    def encoding(self) -> str:
        """The prompt's encoding, to count output text (only needed when a stream is cut off
        or a provider does not report thinking tokens)."""
        if self._encoding is None:
            count = _core.count_prompt(self.request, provider=self.api.word, model=self.model)
            self._encoding = str(count["encoding"])
        return self._encoding

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


# -- admitting and settling ------------------------------------------------------------------


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


# -- the same, for asyncio ---------------------------------------------------------------------


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

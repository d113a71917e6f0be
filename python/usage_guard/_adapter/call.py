"""One guarded call, step by step: the request as JSON, admission (which counts the prompt
once and fits the request into what is left, in the core), the fitted keys sent, what the
call is billed (from a response or a stream), and settling it. `flow` drives these steps,
sync and async; the provider modules describe their SDK with an `Api`."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .. import _core
from .body import jsonable, not_given, place_fitted, sent_request
from .owner import Owner

log = logging.getLogger("usage_guard")


# The encoding to count a cut-off stream's text with when admission counted no prompt.
_DEFAULT_ENCODING = "o200k_base"


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


@dataclass
class Usage:
    """What a call used, as the provider reported it (or as counted for a cut-off stream)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0


def reported(word: str, carrier: Any) -> Optional[Usage]:
    """The usage `carrier` (a response, or the stream event with the final usage) reports,
    read by the core's provider module for `word`; None when it carries none. Never raises:
    the call has run."""
    try:
        usage = _core.reported_usage(carrier, word)  # type: ignore[arg-type]
    except Exception as exc:
        log.warning("usage_guard: cannot read the reported usage: %s", exc)
        return None
    return None if usage is None else Usage(**usage)


@dataclass
class StreamState:
    """What a stream delivered so far."""

    chunks: int = 0
    text: list[str] = field(default_factory=list)
    reasoning_text: list[str] = field(default_factory=list)
    input_tokens: Optional[int] = None  # reported before the end (Anthropic message_start)
    cached_input_tokens: int = 0
    usage: Optional[Usage] = None  # the reported usage (the last, when reported cumulatively)
    finish_reason: Optional[str] = None  # why it stopped, for `ticket.capped`
    # The provider's generator was run outside the guarded iterator: what it delivered is
    # unknown, so the call is billed its prompt rather than released (`streams`).
    unobserved: bool = False


@dataclass
class Api:
    """How one provider SDK method is guarded: its provider word, and its SDK plumbing (usage
    objects, stream chunks). Where the request keeps its fields is the core's business."""

    word: str  # the core's provider word: "openai", "openai.responses", ...
    # Why a plain response stopped, one reason per answer, read off the SDK object as is.
    finish_reasons: Callable[[Any], list[str]] = lambda response: []
    observe: Optional[Callable[[StreamState, Any], None]] = None  # one stream chunk
    # Asks for usage in the stream; True when the caller had not, so that chunks carrying only
    # usage (`extra_chunk`) are kept from the caller, who did not expect them.
    stream_setup: Optional[Callable[[dict[str, Any]], bool]] = None
    extra_chunk: Callable[[Any], bool] = lambda chunk: False
    reasoning_text: Optional[Callable[[Any], str]] = None  # thinking text, when not reported
    positional: tuple[str, ...] = ()  # names of positional arguments, in order
    lazy_stream: bool = False  # the request is sent at the first chunk (Ollama generators)
    embeddings: bool = False
    # The answer a plain call's usage is read from and attached to, from what the SDK
    # method returned (a raw response's parsed answer); absent: the returned object itself.
    answer: Optional[Callable[[Any], Any]] = None
    streaming: bool = False  # the method always streams (Gemini's generate_content_stream)
    # Sends the keys admission fitted (`ticket.fitted`) in the call's keyword arguments;
    # absent: they replace the caller's (Gemini sets two fields inside the caller's config).
    apply_fitted: Optional[Callable[[dict[str, Any], dict[str, Any]], None]] = None
    # Keys taken out of `extra_body` into the keywords: the stream plumbing reads them there
    # (and the SDK streams only for the `stream` keyword). Other keys stay where given.
    keywords: tuple[str, ...] = ("stream",)
    # Refuses (raises) a request the guard cannot meter, given the body as it will be sent
    # and whether it streams; nothing is admitted or sent.
    check: Optional[Callable[[dict[str, Any], bool], None]] = None
    # The guarded method answers what `answer` read (a `parse` sent through its raw twin),
    # not the raw object the SDK method returned.
    returns_answer: bool = False
    # The answer as the provider sent it (a dict), read off what the SDK method returned, for
    # when `answer` raises: the provider answered and the SDK's own reading failed (a
    # structured answer that does not validate), so the call is billed, not released.
    unread: Optional[Callable[[Any], Any]] = None
    # What a streaming call answers, from what the SDK method returned and whether the client
    # is async (a streamed raw response whose parse() gives the stream); absent: the guarded
    # stream over it (`streams`).
    stream_answer: Optional[Callable[[Call, Any, bool], Any]] = None


class Call:
    """One guarded call: its request and ticket, and the pure steps between the waits."""

    def __init__(self, owner: Owner, api: Api, args: tuple[Any, ...], kwargs: dict[str, Any]):
        kwargs = dict(kwargs)
        for name, value in zip(api.positional, args):
            if name in kwargs:
                raise TypeError(f"got multiple values for argument {name!r}")
            kwargs[name] = value
        if len(args) > len(api.positional):
            raise TypeError(f"too many positional arguments ({len(args)})")
        # A per-call `user=None` means the client's user, never "no user": dropping every
        # limit is the policy's choice (settings.anonymous), not a keyword's.
        call_user: Optional[str] = kwargs.pop("user", None)
        if not_given(call_user):  # a framework passing the SDK's `omit` (Pydantic AI)
            call_user = None
        self.user: Optional[str] = owner._guard_user if call_user is None else call_user
        # The call's attributes for the policy's generic rules (credential, session, ...).
        self.attributes: Optional[dict[str, str]] = kwargs.pop("usage_attributes", None)
        self.guard: _core.Guard = owner._guard
        self.api = api
        self.kwargs = kwargs
        # What admission reads is the body the SDK will send: `extra_body` merged in.
        self.request = sent_request(kwargs, api.keywords)
        self.model = str(self.request.get("model") or "")
        self.stream = (api.streaming or bool(kwargs.get("stream"))) and not api.embeddings
        if api.check is not None:
            api.check(self.request, self.stream)
        self.ticket: Any = None
        self.started = 0.0
        self.hide_extra_chunks = False

    def admit_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of `Guard.admit`: the request itself. The guard counts its
        prompt once (with the policy's model entry), reads its output maximum and fits it."""
        return {
            "request": self.request,
            "provider": self.api.word,
            "attributes": self.attributes,
        }

    def shown(self, state: StreamState, chunk: Any) -> bool:
        """Observes a stream chunk; False when it is one of ours the caller should not see."""
        state.chunks += 1
        if self.api.observe is not None:
            self.api.observe(state, chunk)
        return not (self.hide_extra_chunks and self.api.extra_chunk(chunk))

    def admitted(self, ticket: Any) -> None:
        """Takes the ticket: sends the keys admission fitted instead of the caller's."""
        self.ticket = ticket
        if self.api.apply_fitted is not None:
            self.api.apply_fitted(self.kwargs, ticket.fitted)
        else:
            place_fitted(self.kwargs, ticket.fitted)
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
        """What a plain answer is billed: its reported usage; a count it lacks (or the core
        read as unknown: 0) is counted, the prompt as admission counted it and the output
        from the answer's text, so that a call the provider served is never billed nothing."""
        usage = reported(self.api.word, response) or Usage()
        if usage.input_tokens <= 0:
            usage.input_tokens = int(self._prompt().get("tokens") or 0)
        if usage.output_tokens <= 0 and not self.api.embeddings:
            usage.output_tokens = self.count([self.answer_text(response)])
        if not usage.reasoning_tokens and self.api.reasoning_text is not None:
            usage.reasoning_tokens = self.count([self.api.reasoning_text(response)])
        return usage

    def answer_text(self, response: Any) -> str:
        """The output text of a plain answer, read by the core. Never raises: the call has run."""
        try:
            dump = getattr(response, "model_dump", None)
            # An SDK object whose fields the provider filled oddly dumps without warnings.
            data = dump(exclude_none=True, warnings=False) if callable(dump) else response
            return _core.answer_text(jsonable(data), self.api.word)  # type: ignore[arg-type]
        except Exception as exc:
            log.warning("usage_guard: cannot read the answer's text: %s", exc)
            return ""

    def capped(self, reasons: Any) -> bool:
        """Whether the answer stopped at the output maximum the ceiling set, from its finish
        reason (or one per answer). Never raises: the call has run."""
        if self.ticket is None or self.api.embeddings or not reasons:
            return False
        try:
            return bool(self.ticket.capped(reasons))
        except Exception as exc:
            log.debug("usage_guard: cannot read why the answer stopped: %s", exc)
            return False

    def response_capped(self, response: Any) -> bool:
        """`capped` for a plain response."""
        try:
            reasons = self.api.finish_reasons(response)
        except Exception as exc:
            log.debug("usage_guard: cannot read why the answer stopped: %s", exc)
            return False
        return self.capped(reasons)

    def _prompt(self) -> dict[str, Any]:
        prompt = self.ticket.prompt if self.ticket is not None else None
        return dict(prompt) if prompt else {}

    @property
    def encoding(self) -> str:
        """The encoding admission counted the prompt with, to count output text (only needed
        when a stream is cut off or a provider does not report thinking tokens)."""
        return str(self._prompt().get("encoding") or _DEFAULT_ENCODING)

    def count(self, parts: list[str]) -> int:
        text = "".join(parts)
        return _core.count_tokens(text, self.encoding) if text else 0

    def stream_usage(self, state: StreamState, completed: bool) -> Optional[Usage]:
        """What a stream is billed: the reported usage when it ended with one; else the input
        plus the output received (counted), each count raised to what the chunks already
        reported (Gemini reports its usage on every chunk, thoughts and the prompt's real size
        included; Anthropic's message_delta the output). None: nothing was sent or produced,
        release."""
        prompt = int(self._prompt().get("tokens") or 0)
        if completed and state.usage is not None:
            usage = state.usage
            if usage.input_tokens <= 0:  # not reported, or read as unknown
                usage.input_tokens = state.input_tokens if state.input_tokens else prompt
            # What was delivered is billed, however little was reported (as the gateway
            # bills a stream): the larger of the report and the count of the text streamed.
            reasoning = self.count(state.reasoning_text) if state.reasoning_text else 0
            counted = (self.count(state.text) if state.text else 0) + reasoning
            # (Not with legacy completions' `echo`: the text streamed begins with the prompt.)
            if not self.kwargs.get("echo"):
                usage.output_tokens = max(usage.output_tokens, counted)
            if not usage.reasoning_tokens and reasoning:
                usage.reasoning_tokens = reasoning
            return usage
        if state.chunks == 0 and (self.api.lazy_stream or not completed):
            return Usage(input_tokens=prompt) if state.unobserved else None
        reasoning = self.count(state.reasoning_text)
        usage = Usage(
            input_tokens=state.input_tokens if state.input_tokens is not None else prompt,
            cached_input_tokens=state.cached_input_tokens,
            output_tokens=self.count(state.text) + reasoning,
            reasoning_tokens=reasoning,
        )
        if state.usage is not None:
            # Each count the larger: never less than counted, nor than the provider reported.
            # The cached input stays as counted (more of it would cost less).
            usage.input_tokens = max(usage.input_tokens, state.usage.input_tokens)
            usage.output_tokens = max(usage.output_tokens, state.usage.output_tokens)
            usage.reasoning_tokens = max(usage.reasoning_tokens, state.usage.reasoning_tokens)
        return usage

    def stream_capped(self, state: StreamState) -> bool:
        return self.capped(state.finish_reason)


def attach(
    obj: Any,
    view: Optional[dict[str, Any]],
    capped: bool,
    billed: Optional[dict[str, Any]] = None,
    warnings: Optional[list[dict[str, Any]]] = None,
    degraded_from: Optional[str] = None,
) -> None:
    """Sets `usage_limits` (the usage view with `capped`), `usage_restriction`,
    `usage_billed` (what the call was billed), `usage_warnings` (the ticket's warnings) and
    `usage_degraded` (the model asked for, when a `degrade` rule sent another; else None)
    on `obj`, and `usage_resolution` to None unless a fallback ladder set it
    (`usage_guard.types.GuardedAnswer`)."""
    limits = dict(view or {})
    limits["capped"] = capped
    values: list[tuple[str, Any]] = [
        ("usage_limits", limits),
        ("usage_restriction", limits.get("restriction")),
        ("usage_billed", billed),
        ("usage_warnings", list(warnings or [])),
        ("usage_degraded", degraded_from),
    ]
    if "usage_resolution" not in getattr(obj, "__dict__", {}):
        values.append(("usage_resolution", None))
    _set(obj, values)


def _set(obj: Any, values: list[tuple[str, Any]]) -> None:
    for name, value in values:
        try:
            object.__setattr__(obj, name, value)
        except (AttributeError, TypeError):  # pragma: no cover - objects without a __dict__
            log.debug("usage_guard: cannot attach %s to %r", name, type(obj))


def attach_pending(obj: Any) -> None:
    """Sets the `usage_*` attributes of a stream not billed yet: None, and no warnings
    (`usage_guard.types.GuardedStreamAnswer`)."""
    _set(
        obj,
        [
            ("usage_limits", None),
            ("usage_restriction", None),
            ("usage_billed", None),
            ("usage_warnings", []),
            ("usage_degraded", None),
            ("usage_resolution", None),
        ],
    )


def _settle_error(what: str, exc: BaseException) -> None:
    log.warning("usage_guard: %s failed: %s", what, exc)


def begin_sync(owner: Owner, api: Api, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
    """Admits the call; admission refuses (raises) a call that does not fit."""
    call = Call(owner, api, args, kwargs)
    ticket = call.guard.admit(call.user, call.model, **call.admit_kwargs())
    try:
        call.admitted(ticket)
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
        view = call.guard.usage(call.user, call.ticket.model)
    except Exception as exc:  # the call has run: log, never throw
        _settle_error("bill", exc)
    attach(target, view, capped, billed, call.ticket.warnings, call.ticket.degraded_from)


async def begin_async(
    owner: Owner, api: Api, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Call:
    """`begin_sync` for asyncio."""
    call = Call(owner, api, args, kwargs)
    ticket = await call.guard.admit_async(call.user, call.model, **call.admit_kwargs())
    try:
        call.admitted(ticket)
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
        view = await call.guard.usage_async(call.user, call.ticket.model)
    except Exception as exc:
        _settle_error("bill", exc)
    attach(target, view, capped, billed, call.ticket.warnings, call.ticket.degraded_from)

"""A LiteLLM `CustomLogger` that puts a guard's exact limits on LiteLLM SDK calls:
`litellm.callbacks = [UsageGuardHandler(guard)]`. Needs the `litellm` package:
`pip install 'usage-guard[litellm]'`.

Metered: completions, text completions, the Responses API and embeddings, async
(`acompletion`, `atext_completion`, `aresponses`, `aembedding`, and the Router's) and sync.
Each is admitted before it is sent (the prompt counted, the output maximum fitted into the
request), billed from the usage LiteLLM reports when it succeeds (a stream at its end), and
released when it fails, by the call's `litellm_call_id`. A refusal raises `UsageLimitError` to
the caller; nothing is sent. Any other call type that reaches the handler's hook (image
generation, speech, ...) is refused with `TypeError` rather than sent unmetered.

Async calls, and a sync `litellm.responses`, are admitted in `async_pre_call_deployment_hook`.
A sync `litellm.completion`, `text_completion` or `embedding` runs no hook a `CustomLogger`
can change or stop a call from (`log_pre_api_call`'s exceptions are swallowed): importing this
module wraps the three functions of the `litellm` module, which admit first. LiteLLM's
pre-call rules run only for some message lists (a first message that is a dict with
"content"), so they cannot be the only gate; importing this module also adds a rule to
`litellm.pre_call_rules` that admits a sync completion the wrapper did not (a caller holding
LiteLLM's own function), from LiteLLM's call setup, where the call's arguments
are. The sync success and failure events bill and release. Where LiteLLM's call setup is not
found (another LiteLLM layout), that rule refuses the call with `TypeError` rather than let
it go unmetered.

A stream left before its end reports neither success nor failure: its hold is released when
LiteLLM's logging object of the call (or the sync stream) is collected (what it delivered is
not billed).

`handler` is one for LiteLLM's `callbacks:` setting, its guard loaded on first use from the
policy file named by `USAGE_GUARD_POLICY` (and `USAGE_GUARD_REDIS`, a Redis URL, to share
counters between processes).
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import uuid
import weakref
from types import FrameType
from typing import Any, Callable, Optional

try:
    import litellm
    from litellm.integrations.custom_logger import CustomLogger
except ImportError as exc:  # pragma: no cover - exercised by the wheel smoke test
    raise ImportError(
        "usage_guard.litellm needs the litellm package: "
        "pip install 'usage-guard[litellm]' (or pip install litellm)"
    ) from exc

from ._adapter.litellm_calls import admission_of, call_id_of, fit, kind_of, usage_of
from ._core import Guard, Policy, RedisStore

__all__ = ["UsageGuardHandler", "handler"]


class UsageGuardHandler(CustomLogger):
    """Admits, fits and bills LiteLLM model calls with `guard` (loaded from
    `USAGE_GUARD_POLICY` when None). The user is the call's `user`, else the proxy key's user
    (`metadata.user_api_key_user_id`), else `user`."""

    def __init__(self, guard: Optional[Guard] = None, user: Optional[str] = None) -> None:
        super().__init__()
        self._guard = guard
        self._user = user
        self._tickets: dict[str, Any] = {}
        self._lock = threading.Lock()

    @property
    def guard(self) -> Guard:
        """The guard (from `USAGE_GUARD_POLICY` on first use when none was given)."""
        with self._lock:
            if self._guard is None:
                path = os.environ.get("USAGE_GUARD_POLICY")
                if not path:
                    raise RuntimeError(
                        "USAGE_GUARD_POLICY: is not set; name the policy file "
                        "usage_guard.litellm.handler loads (or pass UsageGuardHandler(guard))"
                    )
                redis = os.environ.get("USAGE_GUARD_REDIS")
                store = RedisStore(redis) if redis else None
                self._guard = Guard(Policy.load(path), store=store)
            return self._guard

    @guard.setter
    def guard(self, guard: Guard) -> None:
        # LiteLLM keeps the callbacks it first saw for its success and failure events: a
        # process keeps one handler and may give it another guard (a new policy, a test).
        with self._lock:
            self._guard = guard

    def _who(self, kwargs: dict[str, Any]) -> Optional[str]:
        metadata = kwargs.get("metadata") or (kwargs.get("litellm_params") or {}).get("metadata")
        proxy_user = (metadata or {}).get("user_api_key_user_id")
        return kwargs.get("user") or proxy_user or self._user

    async def async_pre_call_deployment_hook(
        self, kwargs: dict[str, Any], call_type: Any
    ) -> Optional[dict[str, Any]]:
        """Admits the call and writes the fitted output maximum into it; refuses a call type
        it does not meter."""
        kind = kind_of(call_type)
        call_id = call_id_of(kwargs)
        admission = admission_of(kind, kwargs)
        model = str(kwargs.get("model") or "").split("/", 1)[-1]
        ticket = await self.guard.admit_async(
            self._who(kwargs), model, request=admission.request, provider=admission.provider
        )
        kwargs = dict(kwargs)
        fit(kwargs, admission, ticket.fitted)
        self._hold(call_id, ticket, kwargs.get("litellm_logging_obj"))
        return kwargs

    def _hold(self, call_id: str, ticket: Any, logging_obj: Any) -> None:
        """Keeps `ticket` for the call's success or failure event; released when LiteLLM's
        logging object of the call (or the stream handed back) goes away without either (a
        stream abandoned before its end reports neither)."""
        with self._lock:
            self._tickets[call_id] = ticket
        if logging_obj is not None:
            weakref.finalize(logging_obj, self._abandoned, call_id)

    def _abandoned(self, call_id: str) -> None:
        with self._lock:
            ticket = self._tickets.pop(call_id, None)
        if ticket is not None:
            ticket.release()

    def admit_sync(
        self, kwargs: dict[str, Any], logging_obj: Any = None, kind: str = "completion"
    ) -> None:
        """Admits a sync call and writes the fitted output maximum into `kwargs` (LiteLLM's
        own dict of the call's arguments, changed in place)."""
        call_id = call_id_of(kwargs)
        admission = admission_of(kind, kwargs)
        model = str(kwargs.get("model") or "").split("/", 1)[-1]
        ticket = self.guard.admit(
            self._who(kwargs), model, request=admission.request, provider=admission.provider
        )
        fit(kwargs, admission, ticket.fitted)
        self._hold(call_id, ticket, logging_obj)

    def abandoned_with(self, kwargs: dict[str, Any], stream: Any) -> None:
        """Releases the call's hold when `stream` (what a sync call handed back) is collected
        before its end was billed."""
        try:
            weakref.finalize(stream, self._abandoned, call_id_of(kwargs))
        except TypeError:  # an answer that cannot be weakly referenced: billed on success
            pass

    def _take(self, kwargs: dict[str, Any]) -> Any:
        with self._lock:
            return self._tickets.pop(str(kwargs.get("litellm_call_id")), None)

    async def async_log_success_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        """Bills the call's reported usage (a stream's, at its end)."""
        ticket = self._take(kwargs)
        if ticket is not None:
            await ticket.bill_async(**usage_of(response_obj))

    def log_success_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        """Bills a sync call's reported usage (a stream's, at its end)."""
        ticket = self._take(kwargs)
        if ticket is not None:
            ticket.bill(**usage_of(response_obj))

    def log_failure_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        """Releases a sync call that failed (nothing billed)."""
        ticket = self._take(kwargs)
        if ticket is not None:
            ticket.release()

    async def async_log_failure_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        """Releases a call that failed (nothing billed)."""
        ticket = self._take(kwargs)
        if ticket is not None:
            await ticket.release_async()


# For LiteLLM's `callbacks: usage_guard.litellm.handler`.
handler = UsageGuardHandler()


def _setup_frame() -> Optional[FrameType]:
    """LiteLLM's `function_setup` frame of the call being set up (it runs the rules)."""
    frame: Optional[FrameType] = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "function_setup" and code.co_filename.endswith("utils.py"):
            return frame
        frame = frame.f_back
    return None


def _handlers() -> list[UsageGuardHandler]:
    return [c for c in litellm.callbacks if isinstance(c, UsageGuardHandler)]


def _meter_sync_calls(text: str) -> bool:
    """A LiteLLM pre-call rule: admits a sync completion with each `UsageGuardHandler` in
    `litellm.callbacks` (async ones are admitted by the handler's async hook), and refuses
    another sync call type LiteLLM runs the rules for (`anthropic_messages`)."""
    handlers = _handlers()
    if not handlers:
        return True
    frame = _setup_frame()
    if frame is None:
        raise TypeError(
            "usage_guard.litellm: cannot meter this sync LiteLLM call (LiteLLM's call setup "
            "was not found); use litellm.acompletion"
        )
    if frame.f_locals.get("is_async_call", True):
        return True
    kwargs = frame.f_locals.get("kwargs")
    if isinstance(kwargs, dict) and _admitted(handlers, kwargs):
        return True  # admitted by the wrapped `litellm.completion` (_metered_sync)
    kind = kind_of(frame.f_locals.get("original_function"))
    if not isinstance(kwargs, dict):
        raise TypeError(
            "usage_guard.litellm: cannot meter this sync LiteLLM call (its arguments were "
            "not found in LiteLLM's call setup); use litellm.acompletion"
        )
    _admit_each(handlers, kwargs, frame.f_locals.get("logging_obj"), kind)
    return True


def _admitted(handlers: list[UsageGuardHandler], kwargs: dict[str, Any]) -> bool:
    """Whether the call (by its `litellm_call_id`) holds a ticket of every handler already."""
    call_id = str(kwargs.get("litellm_call_id"))
    return all(call_id in h._tickets for h in handlers)


def _admit_each(
    handlers: list[UsageGuardHandler], kwargs: dict[str, Any], logging_obj: Any, kind: str
) -> None:
    """Admits a sync call with every handler, or with none: one refusing gives the others'
    holds back."""
    try:
        for h in handlers:
            h.admit_sync(kwargs, logging_obj, kind)
    except BaseException:
        for h in handlers:
            h._abandoned(str(kwargs.get("litellm_call_id")))
        raise


def _arguments(signature: inspect.Signature, args: Any, kwargs: Any) -> dict[str, Any]:
    """A call's arguments by name (its `**kwargs` among them), to call the function with."""
    bound = signature.bind(*args, **kwargs)
    named: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL and value:
            raise TypeError(f"{name}: {len(value)} extra positional arguments; name them")
        if kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        elif kind is not inspect.Parameter.VAR_POSITIONAL:
            named[name] = value
    return named


def _metered_sync(fn: Callable[..., Any], kind: str) -> Callable[..., Any]:
    """LiteLLM's sync `text_completion` / `embedding` admitted before the call. LiteLLM runs
    neither the async hook nor the pre-call rules for them, and no logger can change or stop
    a call: the function itself, as `litellm.<name>`, is wrapped. The success and failure
    events bill and release, as for any call (by the `litellm_call_id` set here)."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def metered(*args: Any, **kwargs: Any) -> Any:
        handlers = _handlers()
        if not handlers or kwargs.get("a" + kind):  # async: the handler's hook admits it
            return fn(*args, **kwargs)
        arguments = _arguments(signature, args, kwargs)
        arguments["litellm_call_id"] = arguments.get("litellm_call_id") or str(uuid.uuid4())
        _admit_each(handlers, arguments, None, kind)
        try:
            result = fn(**arguments)
        except BaseException:  # released, unless the failure event did it already
            for h in handlers:
                h._abandoned(arguments["litellm_call_id"])
            raise
        if arguments.get("stream"):
            for h in handlers:
                h.abandoned_with(arguments, result)
        return result

    metered._usage_guard_metered = True  # type: ignore[attr-defined]
    return metered


if _meter_sync_calls not in litellm.pre_call_rules:
    litellm.pre_call_rules.append(_meter_sync_calls)
# `completion` too: LiteLLM runs the pre-call rules only for some message lists (not one that
# starts with a turn without "content", nor one of `Message` objects), so the rule alone
# would let those through unmetered; it stays for callers holding LiteLLM's own function.
_SYNC = (("completion", "completion"), ("text_completion", "text_completion"))
for _name, _kind in (*_SYNC, ("embedding", "embedding")):
    if not getattr(getattr(litellm, _name), "_usage_guard_metered", False):
        setattr(litellm, _name, _metered_sync(getattr(litellm, _name), _kind))

"""A LiteLLM `CustomLogger` that puts a guard's exact limits on LiteLLM SDK calls:
`litellm.callbacks = [UsageGuardHandler(guard)]`. Needs the `litellm` package:
`pip install 'usage-guard[litellm]'`.

Each async completion (`litellm.acompletion`, and the Router's) is admitted before it is sent
(`async_pre_call_deployment_hook`: the prompt counted, the output maximum fitted into the
request), billed from the usage LiteLLM reports when it succeeds (a stream at its end), and
released when it fails, by the call's `litellm_call_id`. A refusal raises
`UsageLimitError` to the caller; nothing is sent.

A sync `litellm.completion` runs no hook a `CustomLogger` can change or stop a call from
(`log_pre_api_call`'s exceptions are swallowed): importing this module adds a rule to
`litellm.pre_call_rules`, which LiteLLM runs for both, and which admits and fits a sync call
(from LiteLLM's call setup, where the call's arguments are) while a `UsageGuardHandler` is in
`litellm.callbacks`; the sync success and failure events bill and release it. Where that setup
is not found (another LiteLLM layout), a sync call is refused with `TypeError` rather than
sent unmetered.

A stream left before its end reports neither success nor failure: its hold is released when
LiteLLM's logging object of the call is collected (what it delivered is not billed).

`handler` is one for LiteLLM's `callbacks:` setting, its guard loaded on first use from the
policy file named by `USAGE_GUARD_POLICY` (and `USAGE_GUARD_REDIS`, a Redis URL, to share
counters between processes).
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from types import FrameType
from typing import Any, Optional

try:
    import litellm
    from litellm.integrations.custom_logger import CustomLogger
except ImportError as exc:  # pragma: no cover - exercised by the wheel smoke test
    raise ImportError(
        "usage_guard.litellm needs the litellm package: "
        "pip install 'usage-guard[litellm]' (or pip install litellm)"
    ) from exc

from ._adapter.call import jsonable
from ._core import Guard, Policy, RedisStore

__all__ = ["UsageGuardHandler", "handler"]

# The request fields admission reads (the prompt, the output maximum, the answer count).
_REQUEST = ("messages", "tools", "functions", "max_tokens", "max_completion_tokens", "n")
_COMPLETIONS = ("acompletion", "completion")


def _call_type(value: Any) -> str:
    return str(getattr(value, "value", value) or "")


def _usage(response: Any) -> dict[str, int]:
    """The bill of LiteLLM's answer (its OpenAI-shaped usage)."""
    usage = getattr(response, "usage", None)
    prompt = int(getattr(usage, "prompt_tokens", None) or 0)
    output = int(getattr(usage, "completion_tokens", None) or 0)
    details = getattr(usage, "prompt_tokens_details", None)
    thinking = getattr(usage, "completion_tokens_details", None)
    return {
        "input_tokens": prompt,
        "output_tokens": output,
        "cached_input_tokens": min(int(getattr(details, "cached_tokens", 0) or 0), prompt),
        "reasoning_tokens": min(int(getattr(thinking, "reasoning_tokens", 0) or 0), output),
    }


class UsageGuardHandler(CustomLogger):
    """Admits, fits and bills LiteLLM completions with `guard` (loaded from
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
        """Admits the call and writes the fitted output maximum into it."""
        if _call_type(call_type) not in _COMPLETIONS:
            return None
        model = str(kwargs.get("model") or "").split("/", 1)[-1]
        request = {k: jsonable(kwargs[k]) for k in _REQUEST if kwargs.get(k) is not None}
        ticket = await self.guard.admit_async(
            self._who(kwargs), model, request=request, provider="openai"
        )
        kwargs = dict(kwargs)
        kwargs.update(ticket.fitted)
        self._hold(kwargs, ticket, kwargs.get("litellm_logging_obj"))
        return kwargs

    def _hold(self, kwargs: dict[str, Any], ticket: Any, logging_obj: Any) -> None:
        """Keeps `ticket` for the call's success or failure event; released when LiteLLM's
        logging object of the call goes away without either (a stream abandoned before
        its end reports neither)."""
        call_id = str(kwargs.get("litellm_call_id"))
        with self._lock:
            self._tickets[call_id] = ticket
        if logging_obj is not None:
            weakref.finalize(logging_obj, self._abandoned, call_id)

    def _abandoned(self, call_id: str) -> None:
        with self._lock:
            ticket = self._tickets.pop(call_id, None)
        if ticket is not None:
            ticket.release()

    def admit_sync(self, kwargs: dict[str, Any], logging_obj: Any = None) -> None:
        """Admits a sync call and writes the fitted output maximum into `kwargs` (LiteLLM's
        own dict of the call's arguments, changed in place)."""
        model = str(kwargs.get("model") or "").split("/", 1)[-1]
        request = {k: jsonable(kwargs[k]) for k in _REQUEST if kwargs.get(k) is not None}
        ticket = self.guard.admit(self._who(kwargs), model, request=request, provider="openai")
        kwargs.update(ticket.fitted)
        self._hold(kwargs, ticket, logging_obj)

    def _take(self, kwargs: dict[str, Any]) -> Any:
        with self._lock:
            return self._tickets.pop(str(kwargs.get("litellm_call_id")), None)

    async def async_log_success_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        """Bills the call's reported usage (a stream's, at its end)."""
        ticket = self._take(kwargs)
        if ticket is not None:
            await ticket.bill_async(**_usage(response_obj))

    def log_success_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        """Bills a sync call's reported usage (a stream's, at its end)."""
        ticket = self._take(kwargs)
        if ticket is not None:
            ticket.bill(**_usage(response_obj))

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


def _meter_sync_calls(text: str) -> bool:
    """A LiteLLM pre-call rule: admits a sync completion with each `UsageGuardHandler` in
    `litellm.callbacks` (async ones are admitted by the handler's async hook)."""
    handlers = [c for c in litellm.callbacks if isinstance(c, UsageGuardHandler)]
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
    if str(frame.f_locals.get("original_function")) not in _COMPLETIONS or not isinstance(
        kwargs, dict
    ):
        return True
    for h in handlers:
        h.admit_sync(kwargs, frame.f_locals.get("logging_obj"))
    return True


if _meter_sync_calls not in litellm.pre_call_rules:
    litellm.pre_call_rules.append(_meter_sync_calls)

"""A LiteLLM `CustomLogger` that puts a guard's exact limits on LiteLLM SDK calls:
`litellm.callbacks = [UsageGuardHandler(guard)]`. Needs the `litellm` package:
`pip install 'usage-guard[litellm]'`.

Each async completion (`litellm.acompletion`, and the Router's) is admitted before it is sent
(`async_pre_call_deployment_hook`: the prompt counted, the output maximum fitted into the
request), billed from the usage LiteLLM reports when it succeeds (a stream at its end), and
released when it fails, by the call's `litellm_call_id`. A refusal raises
`UsageLimitError` to the caller; nothing is sent.

`handler` is one for LiteLLM's `callbacks:` setting, its guard loaded on first use from the
policy file named by `USAGE_GUARD_POLICY` (and `USAGE_GUARD_REDIS`, a Redis URL, to share
counters between processes).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Optional

try:
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
        with self._lock:
            self._tickets[str(kwargs.get("litellm_call_id"))] = ticket
        return kwargs

    def _take(self, kwargs: dict[str, Any]) -> Any:
        with self._lock:
            return self._tickets.pop(str(kwargs.get("litellm_call_id")), None)

    async def async_log_success_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        """Bills the call's reported usage (a stream's, at its end)."""
        ticket = self._take(kwargs)
        if ticket is None:
            return
        usage = getattr(response_obj, "usage", None)
        prompt = getattr(usage, "prompt_tokens", None) or 0
        output = getattr(usage, "completion_tokens", None) or 0
        details = getattr(usage, "prompt_tokens_details", None)
        thinking = getattr(usage, "completion_tokens_details", None)
        await ticket.bill_async(
            input_tokens=int(prompt),
            output_tokens=int(output),
            cached_input_tokens=min(int(getattr(details, "cached_tokens", 0) or 0), int(prompt)),
            reasoning_tokens=min(int(getattr(thinking, "reasoning_tokens", 0) or 0), int(output)),
        )

    async def async_log_failure_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        """Releases a call that failed (nothing billed)."""
        ticket = self._take(kwargs)
        if ticket is not None:
            await ticket.release_async()


# For LiteLLM's `callbacks: usage_guard.litellm.handler`.
handler = UsageGuardHandler()

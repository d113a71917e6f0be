"""The wrappers' fallback ladder (`GuardedOpenAI(..., fallbacks=[...])`): the model asked
for, then each fallback, tried in order against the guard's live provider health (the same
book, and store notes, the gateway uses). Every candidate passes admission again: one that
would overspend is skipped, never spent through. A candidate whose provider fails retryably
(5xx, timeout, connection fault), limits the rate or runs out of billing hands the call to
the next one; each outcome is recorded. `flow` drives it, sync and async."""

from __future__ import annotations

import json
from typing import Any, Optional

from .. import _core
from ..errors import ProviderUnavailable, UsageLimitError
from .call import Api
from .owner import Owner

# Outcomes the next candidate may cure (a caller mistake would fail on every one).
_CURABLE = ("retryable", "rate_limited", "billing")


def failure(exc: BaseException) -> Optional[tuple[Optional[int], Optional[str], list[Any]]]:
    """What a provider SDK's exception means for health: (status, error text, headers), with
    no status for a timeout or a connection fault; None for anything else (not recorded)."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        pairs = [(str(k), str(v)) for k, v in headers.items()] if headers is not None else []
        body = getattr(exc, "body", None)
        text = json.dumps(body, default=str) if body is not None else str(exc)
        return status, text, pairs
    name = type(exc).__name__
    if (
        isinstance(exc, (TimeoutError, ConnectionError))
        or "Timeout" in name
        or "Connection" in name
    ):
        return None, None, []
    return None


class Ladder:
    """One call's way down its ladder: the candidates, and what each hop met."""

    def __init__(self, owner: Owner, api: Api, args: tuple[Any, ...], kwargs: dict[str, Any]):
        self.guard = owner._guard
        self.credential: str = owner._credential
        self.kwargs = dict(zip(api.positional, args))
        self.kwargs.update(kwargs)
        # Who calls, for the breaker (it opens only on failures of more than one caller).
        self.caller = str(self.kwargs.get("user") or owner._guard_user or "")
        self.asked = str(self.kwargs.get("model") or "")
        default = api.word.split(".")[0]
        first = _core.model_ladder(self.guard, self.asked, default)[0]
        fallbacks = [f for f in owner._fallbacks or () if f != self.asked]
        self.rungs = [first] + [_core.model_ladder(self.guard, f, default)[0] for f in fallbacks]
        self.attempted = False
        self.refused: list[UsageLimitError] = []
        self.unavailable: list[dict[str, Any]] = []
        self.error: Optional[BaseException] = None

    def kwargs_for(self, model: str) -> dict[str, Any]:
        return {**self.kwargs, "model": model}

    def available(self, provider: str, take: bool = False) -> bool:
        """Whether the provider's credential may take the call (noting why not)."""
        why = _core.provider_available(self.guard, provider, self.credential, take)
        if why is not None:
            self.unavailable.append(why)
        return why is None

    def succeeded(self, provider: str) -> None:
        _core.provider_record(self.guard, provider, self.credential, 200, caller=self.caller)

    def failed(self, exc: BaseException, provider: str, last: bool) -> bool:
        """Records a failed attempt; True when the next candidate should take the call."""
        seen = failure(exc)
        if seen is None:
            return False
        status, error, headers = seen
        recorded = _core.provider_record(
            self.guard, provider, self.credential, status, error, headers, caller=self.caller
        )
        if recorded["outcome"] in _CURABLE and not last:
            self.attempted, self.error = True, exc
            return True
        return False

    def mark(self, result: Any, index: int, model: str) -> None:
        """Sets `usage_resolution` on the answer: `fallback(a -> b, pre-attempt,
        unavailable)` when a fallback served it, else None."""
        resolution = None
        if index > 0:
            stage = "post-attempt" if self.attempted else "pre-attempt"
            resolution = f"fallback({self.asked} -> {model}, {stage}, unavailable)"
        try:
            object.__setattr__(result, "usage_resolution", resolution)
        except (AttributeError, TypeError):  # pragma: no cover - objects without a __dict__
            pass

    def exhausted(self) -> BaseException:
        """What to raise once no candidate is left: the last refusal when admission refused
        one (none was affordable), else the last failure, else `ProviderUnavailable`."""
        if self.refused:
            return self.refused[-1]
        if self.error is not None:
            return self.error
        return ProviderUnavailable(
            f"every candidate for {self.asked!r} is unavailable (breaker open or credential "
            "cooling down)",
            self.unavailable,
        )

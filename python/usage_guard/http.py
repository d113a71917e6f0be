"""HTTP shapes for a gateway in front of a model: rate-limit headers on successful answers, and
refusals in each provider's error shape.

    try:
        ticket = guard.admit(user, model, prompt_tokens=n)
    except UsageLimitError as e:
        status, hdrs, body = refusal(e, "openai")        # or e.to_http("openai")
    ...
    response.headers.update(headers(ticket, guard.usage(user, model)))
"""

from __future__ import annotations

from typing import Any, Optional

from . import _core
from .errors import UsageLimitError
from .types import ErrorShape

__all__ = ["headers", "refusal", "PROVIDERS"]

# The error shapes `to_http` answers in.
PROVIDERS: tuple[ErrorShape, ...] = ("openai", "anthropic", "ollama", "gemini")

_TOKEN_METRICS = ("tokens",)


def _view_of(source: Any) -> Optional[dict[str, Any]]:
    """The usage view in `source`: a view dict, or an object carrying `usage_limits`."""
    if isinstance(source, dict) and "rules" in source:
        return source
    view = getattr(source, "usage_limits", None)
    return view if isinstance(view, dict) else None


def _least_left(view: dict[str, Any], metrics: tuple[str, ...]) -> Optional[int]:
    lefts = [
        r["left"]
        for r in list(view.get("rules") or []) + list(view.get("ceilings") or [])
        if r.get("metric") in metrics and r.get("left") is not None
    ]
    return min(lefts) if lefts else None


def headers(ticket: Any = None, usage: Any = None, *, now: Any = None) -> dict[str, str]:
    """`x-ratelimit-remaining-requests` / `x-ratelimit-remaining-tokens`, and the IETF
    `RateLimit-Policy` / `RateLimit` fields, for a successful answer.

    `ticket` is a `Ticket` (its ceiling's `tokens` is what was left at admission), and/or
    `usage` is the usage view (`guard.usage(...)`, or a guarded response carrying
    `usage_limits`), which gives the least left over every requests and tokens rule now. A
    header is left out when no rule limits that measure. A ticket may itself be a usage view or
    a guarded response. A ticket a `degrade` rule admitted on another model (or a guarded
    response carrying `usage_degraded`) adds `X-Degraded: <asked for> -> <sent>`.

    The IETF fields come from a usage view only (a ticket's ceiling has no window): one item
    per policy (`"requests"`, `"tokens"`, `"cost"`, the tightest rule of each), each naming
    its unit in `qu` (`"tokens"`; cost in `"micro_usd"`), written by the same core function
    as the gateway's. `t` (seconds to reset) is counted from `now` (an ISO 8601 instant or a
    datetime; the system clock when absent: pass the guard's clock time under a
    `ManualClock`).
    """
    view = _view_of(usage) if usage is not None else None
    if view is None and ticket is not None:
        view = _view_of(ticket)
    out: dict[str, str] = {}
    requests = _least_left(view, ("requests",)) if view else None
    tokens = _least_left(view, _TOKEN_METRICS) if view else None
    ceiling = getattr(ticket, "ceiling", None) if ticket is not None else None
    if tokens is None and isinstance(ceiling, dict) and ceiling.get("tokens") is not None:
        tokens = ceiling["tokens"]
    if requests is not None:
        out["x-ratelimit-remaining-requests"] = str(max(0, requests))
    if tokens is not None:
        out["x-ratelimit-remaining-tokens"] = str(max(0, tokens))
    if view:
        rules = list(view.get("rules") or []) + list(view.get("ceilings") or [])
        for name, value in _core.ratelimit_fields(rules, now):
            out["RateLimit-Policy" if name == "ratelimit-policy" else "RateLimit"] = value
    # A `degrade` rule answered with another model: say which one was asked for.
    degraded = getattr(ticket, "degraded_from", None) or getattr(ticket, "usage_degraded", None)
    if isinstance(degraded, str):
        out["X-Degraded"] = f"{degraded} -> {getattr(ticket, 'model', '')}".rstrip(" ->")
    return out


def refusal(
    error: UsageLimitError, provider: ErrorShape = "openai"
) -> tuple[int, dict[str, str], Any]:
    """`(status, headers, body)` of a refusal in `provider`'s error shape (openai, anthropic,
    ollama, gemini): `error.to_http(provider)`. A rate-limit refusal whose Retry-After is over a
    minute also says `x-should-retry: false`, so SDK clients hand it straight back instead
    of sleeping through it (the Anthropic SDK would, however long it is). A refusal by the
    holds of calls in progress (`UsageLimitHeld`) says `retry-after: 5` and
    `x-should-retry: true`: the room comes back as those calls end."""
    if not isinstance(error, UsageLimitError):
        raise TypeError(
            f"error: must be a UsageLimitError (or a subclass), not {type(error).__name__}"
        )
    if provider not in PROVIDERS:
        raise ValueError(f"provider: {provider!r} is not one of {', '.join(PROVIDERS)}")
    status, headers, body = error.to_http(provider)
    return status, dict(headers), body

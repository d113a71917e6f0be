"""The quota service's calls as pure functions: amounts in their dimension's unit, the call a
subject makes, the decision over the counters read, instants."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

from .model import (
    RULE_PREFIX,
    Subject,
    metric_of,
    parse_subject,
    rule_name,
    same_window,
    window_of,
)

if TYPE_CHECKING:
    from ..types import EffectiveLimit, QuotaUsage, Unit

LOG = logging.getLogger("usage_guard.quota")
Instant = Union[str, dt.datetime, dt.date, None]
# The assignments in force: (subject type, id, limits).
InForce = list[tuple[str, str, dict[str, dict[str, Any]]]]


@dataclass(frozen=True)
class Decision:
    """What `check` answers: whether `amount` fits every quota that applies, what is left
    in the dimension's `unit` (None: no quota applies), when the binding window resets (ISO 8601
    UTC) and, when refused, why (`quota_exceeded: ...`, with what was left and asked)."""

    allowed: bool
    remaining: Optional[int]
    reset_at: Optional[str]
    reason: Optional[str]
    unit: Unit
    """The unit of `remaining`: `micro_usd` (ai.cost), `tokens`, `requests` or `calls`."""


# The unit of each metric's figures (docs/policy.md, "Units"): cost in integer micro-dollars.
UNITS: dict[str, Unit] = {
    "tokens": "tokens",
    "input_tokens": "tokens",
    "output_tokens": "tokens",
    "cost": "micro_usd",
    "requests": "requests",
    "compute_ms": "ms",
    "concurrency": "calls",
}


def unit_of(dimension: str) -> Unit:
    """The unit of a dimension's figures: `micro_usd` for ai.cost, `tokens`, `requests`,
    `calls` (ai.concurrency)."""
    return UNITS[metric_of(dimension)]


def units_of(dimension: str, amount: Any, field: str = "amount") -> int:
    """An amount in the dimension's unit (whole micro-dollars for ai.cost), checked."""
    metric_of(dimension)
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount != amount:
        raise ValueError(f"{field}: {amount!r} is not an amount; accepted: a number >= 0")
    if amount < 0:
        raise ValueError(f"{field}: {amount!r} is negative; accepted: a number >= 0")
    if amount == float("inf"):
        raise ValueError(f"{field}: {amount!r} is not an amount; accepted: a finite number")
    if amount != int(amount):
        what = (
            "whole micro-dollars for ai.cost (1000000 is $1)"
            if unit_of(dimension) == "micro_usd"
            else f"a whole number for {dimension}"
        )
        raise ValueError(f"{field}: {amount!r} is not whole; accepted: {what}")
    return int(amount)


def limit_units(dimension: str, limit: float) -> int:
    """A limit as a policy document writes it (dollars for ai.cost) in the dimension's unit."""
    return int(round(limit * 1_000_000)) if unit_of(dimension) == "micro_usd" else int(limit)


def spoken(dimension: str, units: int) -> str:
    """A figure as a sentence says it: `$1.25` (ai.cost, to the micro-dollar), `1,000`."""
    if unit_of(dimension) != "micro_usd":
        return f"{units:,}"
    dollars, rest = divmod(units, 1_000_000)
    cents = f"{rest:06d}".rstrip("0").ljust(2, "0")
    return f"${dollars:,}.{cents}"


def instant_ms(when: Instant) -> int:
    if when is None:
        return 0
    if isinstance(when, str):
        try:
            when = dt.datetime.fromisoformat(when.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"effective_from: {when!r} is not an instant; accepted: ISO 8601 such as "
                "'2026-12-01T00:00:00Z', a date such as '2026-12-01' (midnight UTC), a "
                "datetime, a date, or None (now)"
            ) from None
    if isinstance(when, dt.date) and not isinstance(when, dt.datetime):
        when = dt.datetime(when.year, when.month, when.day)  # a date: midnight UTC
    if not isinstance(when, dt.datetime):
        raise ValueError(
            f"effective_from: {when!r} is not an instant; accepted: str, datetime, date, None"
        )
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp() * 1000)


def call_of(
    subject: Subject,
    dimension: str,
    team: Optional[str],
    role: Optional[str],
    user: Optional[str],
) -> tuple[Optional[str], dict[str, str], str]:
    """The call a subject makes (with the memberships it carries): the principal, the
    attributes, and the prefix of the rules of `dimension`."""
    metric_of(dimension)
    kind, ident = parse_subject(subject)
    attrs: dict[str, str] = {}
    if team is not None:
        attrs["team"] = team
    if role is not None:
        attrs["role"] = role
    if kind == "user":
        user = ident
    elif kind == "team":
        attrs["team"] = ident
    else:
        attrs["role"] = ident
        if user is None:
            raise ValueError(
                f"user: {subject!r}'s limits count per member; accepted: user='<id>' naming "
                "the member"
            )
    if not dimension.startswith("ai."):
        attrs["endpoint"] = dimension
    return user, attrs, f"{RULE_PREFIX}{dimension} "


def record_spec(
    subject: Subject,
    dimension: str,
    amount: Any,
    model: Optional[str],
    executor: Optional[str],
    request_id: str,
    meta: Any,
    team: Optional[str],
    role: Optional[str],
    user: Optional[str],
) -> dict[str, Any]:
    """A `record` as the engine's call takes it (`_core._quota_record`), checked."""
    if not isinstance(request_id, str) or not request_id:
        raise ValueError(
            f"request_id: {request_id!r} is not a request id; accepted: a non-empty string"
        )
    units = units_of(dimension, amount)
    if unit_of(dimension) == "calls":
        raise ValueError(
            f"dimension: {dimension!r} cannot be recorded: it counts calls while they run"
            " (admission holds it, the bill gives it back); accepted: a dimension of use,"
            " such as ai.tokens.total, ai.cost, ai.rate"
        )
    u, attrs, prefix = call_of(subject, dimension, team, role, user)
    return {
        "user": u,
        "attributes": attrs,
        "prefix": prefix,
        "metric": metric_of(dimension),
        "amount": units,
        "request_id": request_id,
        "dimension": dimension,
        "model": model,
        "executor": executor,
        "meta": meta,
    }


def decide(dimension: str, units: int, counters: list[dict[str, Any]]) -> Decision:
    """The decision on `units` over the counters of the rules that apply."""
    unit = unit_of(dimension)
    if not counters:
        return Decision(True, None, None, None, unit)
    binding = min(counters, key=lambda c: c["left"])
    short = [c for c in counters if c["left"] < units]
    if not short:
        return Decision(True, binding["left"], binding["resets_at"], None, unit)
    worst = max(short, key=lambda c: c["resets_at"] or "")
    # "quota <dimension> <kind>:<id>" (rule_name): a dimension has no space, an id may.
    subject = worst["rule"][len(RULE_PREFIX) :].split(" ", 1)[1]
    reason = (
        f"quota_exceeded: {subject} has {spoken(dimension, worst['left'])} of "
        f"{spoken(dimension, worst['budget'])} {dimension} left"
        + (f" this {worst['window']}" if worst["window"] else "")
        + f"; {spoken(dimension, units)} asked"
    )
    return Decision(False, binding["left"], worst["resets_at"], reason, unit)


def limit_of(in_force: InForce, kind: str, ident: str, dimension: str) -> Optional[dict[str, Any]]:
    """The limit assigned to the subject on `dimension`, if any."""
    for k, i, limits in in_force:
        if (k, i) == (kind, ident) and dimension in limits:
            return dict(limits[dimension])
    return None


def usage_view(
    in_force: InForce, subject: Subject, dimension: str, window: Any, counters: list[dict[str, Any]]
) -> QuotaUsage:
    """The subject's own counter as `usage` answers it."""
    kind, ident = parse_subject(subject)
    own = [c for c in counters if c["rule"] == rule_name(dimension, kind, ident)]
    limit = limit_of(in_force, kind, ident, dimension)
    if window is not None:
        window_of("window", window)
        limit_window = limit.get("window") if limit else None
        if limit_window is None or not same_window(limit_window, window):
            accepted = limit.get("window") if limit else "none: no limit is assigned"
            raise ValueError(
                f"window: {window!r} is not the window of {kind}:{ident}'s {dimension} "
                f"limit; accepted: {accepted}"
            )
    unit = unit_of(dimension)
    if not own:
        return {"used": None, "limit": None, "remaining": None, "reset_at": None, "unit": unit}
    c = own[0]
    return {
        "used": c["used"] + c["reserved"],
        "limit": c["budget"],
        "remaining": c["left"],
        "reset_at": c["resets_at"],
        "unit": unit,
    }


def effective(
    in_force: InForce, subject: Subject, dimension: str, team: Optional[str], role: Optional[str]
) -> Optional[EffectiveLimit]:
    """The smallest limit of the subject and the memberships it carries on `dimension` (a
    user's own limit replaces the role's default)."""
    metric_of(dimension)
    kind, ident = parse_subject(subject)
    candidates = [(kind, ident)]
    if team is not None and kind != "team":
        candidates.append(("team", team))
    own = kind == "user" and limit_of(in_force, kind, ident, dimension) is not None
    if role is not None and kind != "role" and not own:
        # A user's own limit replaces their role's default.
        candidates.append(("role", role))
    found: list[EffectiveLimit] = []
    for k, i in candidates:
        limit = limit_of(in_force, k, i, dimension)
        if limit is not None:
            found.append(
                {
                    "limit": limit_units(dimension, limit["limit"]),
                    "window": limit.get("window"),
                    "subject": f"{k}:{i}",
                    "unit": unit_of(dimension),
                }
            )
    return min(found, key=lambda f: f["limit"]) if found else None


def disabled_by(file_on: bool, stored_on: bool) -> Optional[str]:
    """Why the quotas are off, or None when they are on."""
    if not file_on:
        return "settings.enabled = false in the policy file"
    if not stored_on:
        return "disabled in the quota database (QuotaService.disable())"
    return None


def poll(ref: weakref.ref[Any], stop: threading.Event, seconds: float) -> None:
    """Every `seconds`: reload the service when the store's version moved or an assignment
    came due (`_poll_once`); stops when the service is gone or `stop` is set."""
    failing = None
    while not stop.wait(seconds):
        service = ref()
        if service is None:
            return
        try:
            service._poll_once()
            failing = None
        except Exception as e:  # noqa: BLE001 - a store or database outage: try again later
            # Said once per cause (at 4 polls a second), again when it changes.
            if str(e) != failing:
                LOG.warning("quota poll failed (retried every %s s): %s", seconds, e)
            failing = str(e)
        del service

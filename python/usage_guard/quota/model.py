"""The quota service's data model (docs/quotas.md): subjects, dimensions, windows and
limits, and how a policy assigned to a subject compiles into generic rules."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from math import inf
from typing import Any, Optional, Union

from .._core import Policy, _window_word
from ..errors import PolicyError

SUBJECT_TYPES = ("team", "user", "role")

# Dimension -> the rule amount (metric) it counts.
AI_DIMENSIONS = {
    "ai.tokens.total": "tokens",
    "ai.tokens.input": "input_tokens",
    "ai.tokens.output": "output_tokens",
    "ai.cost": "cost",
    "ai.rate": "requests",
    "ai.concurrency": "concurrency",
    "tools.invocations": "requests",
}
RULE_PREFIX = "quota "
# The counter every guard on the store polls to see a policy change.
VERSION_RULE = "quota-version"
VERSION_ENDPOINT = "usage-guard:quota-version"

Subject = Union[str, tuple[str, str]]


def parse_subject(subject: Subject) -> tuple[str, str]:
    """`"team:eng"` or `("team", "eng")` -> `("team", "eng")`; anything else a ValueError
    naming the value and the accepted types."""
    if isinstance(subject, tuple) and len(subject) == 2:
        kind, ident = subject
    elif isinstance(subject, str) and ":" in subject:
        kind, ident = subject.split(":", 1)
    else:
        raise ValueError(
            f"subject: {subject!r} is not a subject; accepted: 'team:<id>', 'user:<id>', "
            "'role:<id>' or a (type, id) tuple"
        )
    if kind not in SUBJECT_TYPES:
        raise ValueError(
            f"subject: {kind!r} is not a subject type; accepted: team, user, role (got {subject!r})"
        )
    if not isinstance(ident, str) or not ident.strip():
        raise ValueError(f"subject: the id of {subject!r} must be a non-blank string")
    return kind, ident


def metric_of(dimension: str) -> str:
    """The rule amount a dimension counts: the AI ones as mapped, any other (a dotted name such
    as `tools.invocations`) is counted as `requests` of its own counter."""
    if dimension in AI_DIMENSIONS:
        return AI_DIMENSIONS[dimension]
    dotted = isinstance(dimension, str) and re.fullmatch(
        r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)+", dimension
    )
    if not dotted or dimension.startswith("ai."):
        raise ValueError(
            f"dimension: {dimension!r} is not a dimension; accepted: "
            f"{', '.join(AI_DIMENSIONS)}, or a dotted lower-case name outside 'ai.' such as "
            "'tools.writes'"
        )
    return "requests"


def window_of(field: str, window: Any) -> Optional[str]:
    """A quotas.md window as a rule window: the policy's one window syntax (`"day"`,
    `"month"`, `"60s"`, `"10m"`, `"10 minutes"`, `"30 days"`: docs/policy.md, "Windows"),
    checked by the same parser; a bare calendar word is the calendar period, any form with a
    number a sliding window."""
    if window is None:
        return None
    if not isinstance(window, str):
        raise ValueError(f"{field}: {window!r} is not a window: a window is a string")
    try:
        _window_word(window)
    except ValueError as e:
        raise ValueError(f"{field}: {window!r} {e}") from None
    return window


def same_window(a: str, b: str) -> bool:
    """Whether two window texts name the same window (`"1d"` and `"24h"` do)."""
    return bool(_window_word(a) == _window_word(b))


class QuotaPolicyError(ValueError):
    """A quota policy refused, with every problem found at once: `errors` holds one message
    each (field, value, what is accepted); the text is the one message, or their count and
    each on its own line."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        text = errors[0] if len(errors) == 1 else f"{len(errors)} errors:\n" + "\n".join(errors)
        super().__init__(text)


def check_limits(limits: Any) -> dict[str, dict[str, Any]]:
    """A policy's `limits` JSON, checked: each dimension a table of `limit` (>= 0) and
    `window` (none for `ai.concurrency`, required otherwise). A `QuotaPolicyError` lists
    every problem of every dimension."""
    if not isinstance(limits, Mapping) or not limits:
        raise QuotaPolicyError(
            [f"limits: {limits!r} must be a non-empty mapping of dimension to {{limit, window}}"]
        )
    out: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    for dimension, spec in limits.items():
        checked = _dimension(dimension, spec, errors)
        if checked is not None:
            out[dimension] = checked
    if not errors:
        errors = engine_problems("user", "any", out)
    if errors:
        raise QuotaPolicyError(errors)
    return out


def engine_problems(kind: str, ident: str, limits: dict[str, dict[str, Any]]) -> list[str]:
    """What the guard's own policy checker refuses in the rules `limits` compile into for the
    subject `kind:ident` (a limit past 2^53, a cost that rounds to $0), each named by its
    quota field; [] when it takes them. So nothing is stored, or installed, that a guard
    would refuse (one such rule would stop every service from loading the others)."""
    rules = compile_rules([(kind, ident, limits)], None)
    try:
        Policy.from_dict({"rules": rules})
    except PolicyError as e:
        # rules[0] is the version rule; rules[i] is the i-th dimension of `limits`.
        dimensions = [""] + list(limits)
        out = []
        for error in e.errors:
            found = re.fullmatch(r"rules\[(\d+)\]\.?(.*)", error["path"])
            at = int(found.group(1)) if found else 0
            if not found or not 0 < at < len(dimensions):
                field = error["path"]
            elif found.group(2).startswith("applies_when."):
                field = "subject"
            elif found.group(2) == "budget":
                field = f"limits[{dimensions[at]!r}].limit"
            else:
                field = f"limits[{dimensions[at]!r}] ({found.group(2)})"
            out.append(f"{field}: {error['message']} (got {error['value']})")
        return out
    return []


def _dimension(dimension: Any, spec: Any, errors: list[str]) -> Optional[dict[str, Any]]:
    """One dimension's limit, checked (None, with its problems added to `errors`, when bad)."""
    field = f"limits[{dimension!r}]"
    before = len(errors)
    metric: Optional[str] = None
    try:
        metric = metric_of(dimension)
    except ValueError as e:
        errors.append(f"{field}: {e}")
    if not isinstance(spec, Mapping) or "limit" not in spec:
        errors.append(f"{field}: {spec!r} must be a table with 'limit' (and 'window')")
        return None
    keys = {"limit", "window"} | _QUEUE_KEYS.get(dimension, set())
    unknown = sorted(set(spec) - keys, key=repr)
    if unknown:
        named = ", ".join(repr(k) for k in unknown)
        verb = "is not a key" if len(unknown) == 1 else "are not keys"
        errors.append(f"{field}: {named} {verb}; accepted: {', '.join(sorted(keys))}")
    limit = spec["limit"]
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 <= limit < inf:
        errors.append(f"{field}.limit: {limit!r} must be a number >= 0")
    elif metric not in (None, "cost") and limit != int(limit):
        errors.append(f"{field}.limit: {limit!r} must be a whole number")
    window = spec.get("window")
    if metric == "concurrency":
        if window is not None:
            errors.append(f"{field}.window: ai.concurrency takes no window (got {window!r})")
    elif window is None:
        errors.append(f"{field}.window: is required for {dimension}")
    else:
        try:
            window_of(f"{field}.window", window)
        except ValueError as e:
            errors.append(str(e))
    queue = _queue_options(dimension, field, spec, errors) if dimension in _QUEUE_KEYS else {}
    if len(errors) > before:
        return None
    return {"limit": limit, **({"window": window} if window is not None else {}), **queue}


# The keys of the dimensions that wait in a queue (ai.concurrency always; ai.rate unless
# `on_rate` is `reject`).
_QUEUE_KEYS = {
    "ai.rate": {"on_rate", "max_wait", "max_queue"},
    "ai.concurrency": {"max_wait", "max_queue"},
}


def _queue_options(
    dimension: str, field: str, spec: Mapping[str, Any], errors: list[str]
) -> dict[str, Any]:
    """`on_rate` (`ai.rate` only: `enqueue`, wait in the queue for room, the default;
    `reject`), `max_wait` (whole seconds a call may wait, 1 to 3600, default 10) and
    `max_queue` (calls that may wait at once per counter, 1 to 100000, default 100); their
    problems go to `errors`."""
    out: dict[str, Any] = {}
    if dimension == "ai.rate":
        on_rate = spec.get("on_rate", "enqueue")
        if on_rate not in ("enqueue", "reject"):
            errors.append(f"{field}.on_rate: {on_rate!r} is not a word; accepted: enqueue, reject")
        out["on_rate"] = on_rate
    max_wait = spec.get("max_wait", 10)
    if isinstance(max_wait, bool) or not isinstance(max_wait, int) or not 1 <= max_wait <= 3600:
        errors.append(
            f"{field}.max_wait: {max_wait!r} is not a wait; accepted: whole seconds, 1 to 3600"
        )
    max_queue = spec.get("max_queue", 100)
    if (
        isinstance(max_queue, bool)
        or not isinstance(max_queue, int)
        or not 1 <= max_queue <= 100_000
    ):
        errors.append(
            f"{field}.max_queue: {max_queue!r} is not a queue length; accepted: whole number "
            "of calls, 1 to 100000"
        )
    return {**out, "max_wait": max_wait, "max_queue": max_queue}


def rule_name(dimension: str, kind: str, ident: str) -> str:
    """The generic rule a subject's limit on a dimension compiles into."""
    return f"{RULE_PREFIX}{dimension} {kind}:{ident}"


def compile_rules(
    assigned: list[tuple[str, str, dict[str, dict[str, Any]]]], warn_at: Optional[float] = 0.8
) -> list[dict[str, Any]]:
    """The `[[rules]]` of the assigned limits (subject type, id, limits): a team's limit is
    one counter for the team; a user's, one for the user (`principal`); a role's, one per
    member (`count_by = ["principal"]`) — a default every member of the role has, unless the
    member has their own limit on that dimension (`applies_unless`). `warn_at`: the
    soft threshold (a fraction of the limit) at which the guard's events fire, once per
    window, subject and dimension (None: none)."""
    rules: list[dict[str, Any]] = [
        {
            "name": VERSION_RULE,
            "applies_when": {"endpoint": VERSION_ENDPOINT},
            "amount": "requests",
            "budget": 1 << 53,
            "window": "year",
            "action": "warn",
        }
    ]
    attribute = {"team": "team", "user": "principal", "role": "role"}
    # A user's own limit on a dimension replaces their roles' defaults on it.
    own: dict[str, list[str]] = {}
    for kind, ident, limits in assigned:
        if kind == "user":
            for dimension in limits:
                own.setdefault(dimension, []).append(ident)
    for kind, ident, limits in assigned:
        for dimension, spec in limits.items():
            when: dict[str, Any] = {attribute[kind]: ident}
            if not dimension.startswith("ai."):
                when["endpoint"] = dimension
            rule: dict[str, Any] = {
                "name": rule_name(dimension, kind, ident),
                "applies_when": when,
                "amount": metric_of(dimension),
                "budget": spec["limit"],
            }
            if kind == "role":
                rule["count_by"] = ["principal"]
                if own.get(dimension):
                    rule["applies_unless"] = {"principal": sorted(own[dimension])}
            if warn_at is not None and dimension != "ai.concurrency":
                rule["warn_at"] = [warn_at]
            if dimension == "ai.concurrency" or spec.get("on_rate", "reject") == "enqueue":
                rule["action"] = "throttle"
                rule["throttle_max_wait"] = spec.get("max_wait", 10)
                rule["throttle_max_queue"] = spec.get("max_queue", 100)
            window = window_of("window", spec.get("window"))
            if window is not None:
                rule["window"] = window
            rules.append(rule)
    return rules


def enforceable(
    base: Any,
    in_force: list[tuple[str, str, dict[str, dict[str, Any]]]],
    warn_at: Optional[float],
) -> list[tuple[str, str, dict[str, dict[str, Any]]]]:
    """The assignments whose rules the guard accepts over `base` (the policy they are added
    to); each other one is logged (an error, naming the subject and why) and left out, so one
    bad stored row (written by hand, or by an older version) does not keep the others, or
    the service, from loading."""
    out = []
    for kind, ident, limits in in_force:
        try:
            problems = engine_problems(kind, ident, limits)
            if not problems:
                base.with_rules(compile_rules([(kind, ident, limits)], warn_at))
        except (PolicyError, ValueError, KeyError, TypeError) as e:
            problems = [str(e)]
        if problems:
            logging.getLogger("usage_guard.quota").error(
                "the quota policy assigned to %s:%s is not enforced (unassign it, or update "
                "its policy): %s",
                kind,
                ident,
                "; ".join(problems),
            )
        else:
            out.append((kind, ident, limits))
    return out

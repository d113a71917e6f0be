"""Refusals cross processes whole: `UsageLimitError` and its subclasses pickle and unpickle
with every field (Celery results, multiprocessing), and `ug.http.refusal` refuses what is
not a refusal with a clear TypeError."""

from __future__ import annotations

import pickle
from typing import Any, Callable

import pytest
import usage_guard as ug
import usage_guard.http

POLICY = {
    "models": {"m": {"display_name": "M", "max_output_tokens": 100}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "m",
                "rules": [
                    {"metric": "tokens", "amount": 150, "window": "day"},
                    {"metric": "requests", "amount": 2, "window": "minute"},
                ],
            }
        ]
    },
}

FIELDS = (
    "message",
    "reason",
    "limit_type",
    "metric",
    "amount",
    "window",
    "is_rate_limit",
    "resets_at",
    "retry_after",
    "unavailable",
)


def _refused(make_guard: Callable[..., ug.Guard], spent: int, **kwargs: Any) -> ug.UsageLimitError:
    guard = make_guard(POLICY)
    guard.admit("alice", "m", prompt_tokens=10, max_tokens=10).bill(spent, 0)
    with pytest.raises(ug.UsageLimitError) as refused:
        guard.admit("alice", "m", **kwargs)
    return refused.value


@pytest.mark.parametrize(
    "spent, kwargs, kind",
    [
        (150, {"prompt_tokens": 10, "max_tokens": 10}, ug.UsageLimitError),  # nothing left
        (20, {"prompt_tokens": 500, "max_tokens": 10}, ug.UsageLimitDoesNotFit),
    ],
)
def test_a_refusal_pickles_with_every_field(
    make_guard: Callable[..., ug.Guard], spent: int, kwargs: dict[str, Any], kind: type
) -> None:
    error = _refused(make_guard, spent, **kwargs)
    assert type(error) is kind
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(error, protocol=protocol))
        assert type(back) is type(error)
        for field in FIELDS:
            assert getattr(back, field) == getattr(error, field), field
        assert back.to_http("anthropic") == error.to_http("anthropic")
        assert str(back) == str(error)


def test_policy_errors_pickle_with_their_list() -> None:
    with pytest.raises(ug.PolicyError) as bad:
        ug.Policy.from_dict({"models": {"m": {"display_name": 1}}})
    back = pickle.loads(pickle.dumps(bad.value))
    assert back.errors == bad.value.errors and back.errors
    assert str(back) == str(bad.value)


def test_http_refusal_refuses_what_is_not_a_refusal() -> None:
    with pytest.raises(TypeError, match="error: must be a UsageLimitError.*ValueError"):
        usage_guard.http.refusal(ValueError())  # type: ignore[arg-type]


@pytest.mark.parametrize("seconds", [1e300, -1e300, 9e15])
def test_the_manual_clock_refuses_to_leave_the_calendar(seconds: float) -> None:
    clock = ug.ManualClock("2026-11-30T08:00:00Z")
    with pytest.raises(ValueError, match="seconds: moves the clock outside the years 1 to 9999"):
        clock.advance(seconds)
    assert clock.now() == "2026-11-30T08:00:00Z"  # nothing half-applied
    clock.advance(days=1)
    assert clock.now() == "2026-12-01T08:00:00Z"


def test_a_refusal_has_its_http_status_and_a_message_frameworks_may_rewrite(
    make_guard: Callable[..., ug.Guard],
) -> None:
    """LiteLLM's proxy answers an exception with its `status_code` and rewrites its
    `message`: a refusal answers 429 (not 500), and its refusal survives the rewrite."""
    refused = _refused(make_guard, 150, prompt_tokens=10, max_tokens=10)
    assert refused.status_code == refused.to_http()[0] == 429
    refused.message = "litellm: " + refused.message
    assert str(refused).startswith("litellm: ") and refused.reason == "USAGE_LIMIT_REACHED"

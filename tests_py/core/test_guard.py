"""The Python surface of the guard, driven by a manual clock on the in-memory store."""

from __future__ import annotations

import asyncio
import copy
from typing import Any, Callable

import pytest
import usage_guard as ug

GPT5: dict[str, Any] = {
    "display_name": "GPT-5",
    "provider": "openai",
    "context_window": 400000,
    "max_output_tokens": 128000,
    "prices": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
}

MakeGuard = Callable[..., ug.Guard]

CLAUDE: dict[str, Any] = {
    "display_name": "Claude Sonnet",
    "provider": "anthropic",
    "max_output_tokens": 64000,
    "prices": {"input": 3.0, "cached_input": 0.3, "output": 15.0},
}


def tokens(amount: int, window: str = "day") -> dict[str, Any]:
    return {"metric": "tokens", "amount": amount, "window": window}


def requests(amount: int, window: str = "day") -> dict[str, Any]:
    return {"metric": "requests", "amount": amount, "window": window}


def policy(**limits: Any) -> dict[str, Any]:
    """Models gpt-5, claude-sonnet and the router auto; teams research (alice, bob),
    support (bob, carol) and sales (erin); the given limits."""
    return {
        "models": {
            "gpt-5": copy.deepcopy(GPT5),
            "claude-sonnet": copy.deepcopy(CLAUDE),
            "auto": {"display_name": "Auto", "router": True},
        },
        "teams": {
            "research": {"display_name": "Research", "members": ["alice", "bob"]},
            "support": {"display_name": "Support", "members": ["bob", "carol"]},
            "sales": {"display_name": "Sales", "members": ["erin"]},
        },
        "limits": limits,
    }


def direct(user: str, model: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"user": user, "model": model, "rules": list(rules)}


def rule_view(view: dict[str, Any], limit_type: str, metric: str = "tokens") -> dict[str, Any]:
    found = [
        r
        for r in view["rules"] + view["ceilings"]
        if r["limit_type"] == limit_type and r["metric"] == metric
    ]
    assert len(found) == 1, view
    return found[0]


def refused(call: Callable[[], Any]) -> ug.UsageLimitError:
    with pytest.raises(ug.UsageLimitError) as info:
        call()
    return info.value


# --- refusals ------------------------------------------------------------------------------


def test_direct_limit_refusal(make_guard: MakeGuard, clock: ug.ManualClock) -> None:
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", tokens(100_000))]))
    ticket = guard.admit("alice", "gpt-5", prompt_tokens=1_000, max_tokens=4_000)
    assert ticket.source == {"type": "direct", "id": "alice"}
    ticket.bill(input_tokens=1_000, output_tokens=99_000)
    clock.set("2026-11-30T15:30:00Z")
    error = refused(lambda: guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=100))
    assert type(error) is ug.UsageLimitError
    assert str(error) == (
        "You have used your 100,000 tokens a day on GPT-5. It resets at 2026-12-01T00:00:00Z."
    )
    assert error.reason == "USAGE_LIMIT_REACHED"
    assert error.limit_type == "direct"
    assert error.metric == "tokens"
    assert error.amount == 100_000
    assert error.window == "day"
    assert error.is_rate_limit is False
    assert error.unavailable is False
    assert error.resets_at == "2026-12-01T00:00:00Z"
    assert error.retry_after == 8 * 3600 + 30 * 60
    assert guard.stats()["refused"] == 1


def test_hour_rule_refusal_is_a_rate_limit(make_guard: MakeGuard, clock: ug.ManualClock) -> None:
    guard = make_guard(policy(platform={"rules": [requests(2, "hour")]}))
    clock.set("2026-11-30T14:00:00Z")
    for _ in range(2):
        guard.admit("alice", "gpt-5", max_tokens=10).bill(input_tokens=1, output_tokens=1)
    clock.set("2026-11-30T14:20:00Z")
    error = refused(lambda: guard.admit("alice", "claude-sonnet", max_tokens=10))
    assert error.limit_type == "platform"
    assert error.is_rate_limit is True
    assert str(error).startswith("You have used your 2 requests an hour on the platform.")
    # Both requests sit in the 14:00 bucket: room comes back once half of it has slid out
    # of the window, at 15:30 (the previous bucket's share, rounded up: 2 x 30/60 = 1 < 2).
    assert error.resets_at == "2026-11-30T15:30:00Z"
    assert error.retry_after == 70 * 60
    clock.set("2026-11-30T15:29:59Z")
    assert refused(lambda: guard.admit("alice", "gpt-5", max_tokens=10)).limit_type == "platform"
    clock.set(error.resets_at)
    guard.admit("alice", "claude-sonnet", max_tokens=10).release()


def test_to_http_shapes(make_guard: MakeGuard, clock: ug.ManualClock) -> None:
    guard = make_guard(
        policy(
            direct=[direct("alice", "gpt-5", tokens(1_000))],
            platform={"rules": [requests(1, "hour")]},
        )
    )
    clock.set("2026-11-30T14:00:00Z")
    guard.admit("alice", "gpt-5", max_tokens=500).bill(input_tokens=100, output_tokens=900)
    first = refused(lambda: guard.admit("alice", "gpt-5", max_tokens=10))
    assert first.limit_type == "platform"  # the ceiling refuses before the source is looked at
    clock.set("2026-11-30T17:00:00Z")  # the hour rule has room again; the day rule has not
    day = refused(lambda: guard.admit("alice", "gpt-5", max_tokens=10))
    assert (day.limit_type, day.is_rate_limit) == ("direct", False)
    message = "You have used your 1,000 tokens a day on GPT-5. It resets at 2026-12-01T00:00:00Z."

    status, headers, body = day.to_http("openai")
    assert status == 429
    assert headers.get("x-should-retry") == "false"
    assert "retry-after" not in headers
    assert body == {
        "error": {
            "message": message,
            "type": "usage_limit_reached",
            "param": None,
            "code": "usage_limit_reached",
        }
    }
    status, headers, body = day.to_http("anthropic")
    assert status == 429 and headers.get("x-should-retry") == "false"
    assert body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": message, "code": "usage_limit_reached"},
    }
    status, headers, body = day.to_http("ollama")
    assert (status, body) == (429, {"error": message})
    assert headers.get("x-should-retry") == "false"

    guard.admit("alice", "claude-sonnet", max_tokens=10).bill(input_tokens=1, output_tokens=1)
    hour = refused(lambda: guard.admit("alice", "claude-sonnet", max_tokens=10))
    assert (hour.limit_type, hour.is_rate_limit) == ("platform", True)
    assert hour.retry_after is not None and hour.retry_after > 0
    for provider in ("openai", "anthropic", "ollama"):
        status, headers, body = hour.to_http(provider)
        assert status == 429
        assert headers["retry-after"] == str(hour.retry_after)
        # A wait over a minute also tells SDKs not to hold the request that long.
        assert ("x-should-retry" in headers) == (hour.retry_after > 60)
    assert hour.to_http("openai")[2]["error"]["code"] == "rate_limit_exceeded"
    assert hour.to_http("anthropic")[2]["error"]["code"] == "rate_limit_exceeded"
    with pytest.raises(ValueError, match="accepted: openai, anthropic, ollama, gemini"):
        hour.to_http("bedrock")


def test_ceilings_refuse_even_when_the_source_has_room(make_guard: MakeGuard) -> None:
    guard = make_guard(
        policy(
            direct=[direct("alice", "gpt-5", tokens(1_000_000))],
            model_total=[{"model": "gpt-5", "rules": [tokens(5_000)]}],
        )
    )
    guard.admit("bob", "gpt-5", max_tokens=100).bill(input_tokens=0, output_tokens=5_000)
    error = refused(lambda: guard.admit("alice", "gpt-5", max_tokens=100))
    assert error.limit_type == "model_total"
    assert str(error) == (
        "GPT-5 has used its 5,000 tokens a day. It resets at 2026-12-01T00:00:00Z."
    )
    # Another model is not behind that ceiling.
    guard.admit("alice", "claude-sonnet", max_tokens=100).release()


# --- sources: teams, public, pass-on --------------------------------------------------------


def test_exhausted_team_passes_the_call_to_the_next_team_then_public(make_guard: MakeGuard) -> None:
    guard = make_guard(
        policy(
            team=[
                {"team": "research", "model": "gpt-5", "shared": [tokens(1_000)]},
                {"team": "support", "model": "gpt-5", "shared": [tokens(2_000)]},
            ],
            public=[{"model": "gpt-5", "shared": [tokens(100_000)]}],
        )
    )
    first = guard.admit("bob", "gpt-5", prompt_tokens=100, max_tokens=500)
    assert first.source == {"type": "team", "id": "research"}
    first.bill(input_tokens=100, output_tokens=900)  # research: 1,000 of 1,000
    second = guard.admit("bob", "gpt-5", prompt_tokens=100, max_tokens=500)
    assert second.source == {"type": "team", "id": "support"}
    second.bill(input_tokens=1_000, output_tokens=1_000)  # support: 2,000 of 2,000
    third = guard.admit("bob", "gpt-5", prompt_tokens=100, max_tokens=500)
    assert third.source == {"type": "public", "id": "gpt-5"}
    third.release()
    # alice is in research only: the next source for her is public use.
    assert guard.admit("alice", "gpt-5", max_tokens=10).source["type"] == "public"
    # carol is in support only, and it is exhausted for her too.
    assert guard.usage("carol", "gpt-5")["source"] == {"type": "public", "id": "gpt-5"}


def test_team_refusal_names_only_the_callers_teams(make_guard: MakeGuard) -> None:
    guard = make_guard(
        policy(
            team=[
                {"team": "research", "model": "claude-sonnet", "shared": [tokens(1_000)]},
                {"team": "sales", "model": "claude-sonnet", "shared": [tokens(1_000)]},
            ]
        )
    )
    guard.admit("alice", "claude-sonnet", max_tokens=10).bill(input_tokens=0, output_tokens=1_000)
    guard.admit("erin", "claude-sonnet", max_tokens=10).bill(input_tokens=0, output_tokens=1_000)
    for user, mine, other in (("alice", "Research", "Sales"), ("erin", "Sales", "Research")):
        error = refused(lambda u=user: guard.admit(u, "claude-sonnet", max_tokens=10))
        assert error.limit_type == "team"
        assert str(error) == (
            f"Team {mine} has used its 1,000 tokens a day on Claude Sonnet. "
            "It resets at 2026-12-01T00:00:00Z."
        )
        assert other not in str(error)
        for provider in ("openai", "anthropic", "ollama"):
            assert other not in str(error.to_http(provider))
    # carol is in no team with a limit on the model: no limits apply to her.
    guard.admit("carol", "claude-sonnet", max_tokens=10).release()


def test_team_total_passes_the_call_on(make_guard: MakeGuard) -> None:
    cent = {"metric": "cost", "amount": 0.01, "window": "month"}
    guard = make_guard(
        policy(
            team=[{"team": "research", "model": "gpt-5", "shared": [tokens(1_000_000)]}],
            team_total=[{"team": "research", "rules": [cent]}],
            public=[{"model": "gpt-5", "shared": [tokens(1_000_000)]}],
        )
    )
    ticket = guard.admit("alice", "gpt-5", max_tokens=1_000)
    assert ticket.source == {"type": "team", "id": "research"}
    assert ticket.ceiling["cost_micros"] == 10_000
    billed = ticket.bill(input_tokens=0, output_tokens=1_000)
    assert billed is not None and billed["cost_micros"] == 10_000
    assert guard.admit("bob", "gpt-5", max_tokens=10).source == {"type": "public", "id": "gpt-5"}


def test_public_each_person_counter_is_kept_by_a_later_direct_limit(
    make_guard: MakeGuard,
) -> None:
    public = {"model": "gpt-5", "each_person": [tokens(20_000)]}
    guard = make_guard(policy(public=[public]))
    ticket = guard.admit("dave", "gpt-5", prompt_tokens=1_000, max_tokens=20_000)
    assert ticket.source == {"type": "public", "id": "gpt-5"}
    assert ticket.ceiling["tokens"] == 20_000
    assert ticket.ceiling["max_output_tokens"] == 19_000  # capped below the 20,000 asked
    ticket.bill(input_tokens=1_000, output_tokens=14_000)
    # dave is moved from public use to a direct limit: he keeps the day's 15,000.
    guard.set_policy(ug.Policy.from_dict(policy(direct=[direct("dave", "gpt-5", tokens(20_000))])))
    view = guard.usage("dave", "gpt-5")
    assert view["source"] == {"type": "direct", "id": "dave"}
    assert (view["rules"][0]["used"], view["rules"][0]["left"]) == (15_000, 5_000)
    ticket = guard.admit("dave", "gpt-5", prompt_tokens=1_000, max_tokens=10_000)
    assert ticket.source == {"type": "direct", "id": "dave"}
    assert ticket.ceiling["max_output_tokens"] == 4_000


def test_router_model_skips_counters_that_span_models(make_guard: MakeGuard) -> None:
    guard = make_guard(
        policy(
            user_total=[{"user": "alice", "rules": [requests(1)]}],
            platform={"rules": [requests(1, "hour")]},
            model_total=[{"model": "auto", "rules": [requests(2)]}],
        )
    )
    guard.admit("alice", "gpt-5", max_tokens=10).bill(input_tokens=1, output_tokens=1)
    # Both all-models ceilings are used up; the refusal names the one that frees up last.
    assert refused(lambda: guard.admit("alice", "gpt-5")).limit_type == "user_total"
    view = guard.usage("alice", "auto")
    assert [r["limit_type"] for r in view["ceilings"]] == ["model_total"]
    routed = guard.admit("alice", "auto", max_tokens=10)
    assert routed.reserved == {"requests": 1}  # only the router's own model total
    routed.bill(input_tokens=1, output_tokens=1)
    # Nothing of the router's call reached the person's all-models counters.
    assert refused(lambda: guard.admit("alice", "claude-sonnet")).limit_type == "user_total"
    view = guard.usage("alice", "claude-sonnet")
    assert rule_view(view, "user_total", "requests")["used"] == 1
    assert rule_view(view, "platform", "requests")["used"] == 1


# --- no limits ------------------------------------------------------------------------------


def test_call_without_a_user_has_no_limits(make_guard: MakeGuard) -> None:
    store = ug.MemoryStore()
    guard = make_guard(
        policy(model_total=[{"model": "gpt-5", "rules": [tokens(0)]}]),
        store=store,
    )
    assert refused(lambda: guard.admit("alice", "gpt-5")).limit_type == "model_total"
    ticket = guard.admit(None, "gpt-5", prompt_tokens=100, max_tokens=1_000)
    assert ticket.source == {"type": "public", "id": "gpt-5"}
    assert ticket.reserved == {}
    assert ticket.ceiling["tokens"] is None and ticket.ceiling["cost_micros"] is None
    assert ticket.bill(input_tokens=100, output_tokens=1_000) is not None
    assert guard.usage(None, "gpt-5")["rules"] == []
    assert guard.usage(None, "gpt-5")["ceilings"] == []
    assert len(store) == 0


def test_unlimited_path_never_touches_the_store(make_guard: MakeGuard) -> None:
    store = ug.MemoryStore()
    guard = make_guard(
        policy(direct=[direct("alice", "gpt-5", tokens(1_000))]),
        store=store,
    )
    ticket = guard.admit("bob", "gpt-5", prompt_tokens=100, max_tokens=50_000)
    assert ticket.source == {"type": "public", "id": "gpt-5"}
    assert ticket.ceiling == {
        "tokens": None,
        "cost_micros": None,
        "rates": None,
        "max_output_tokens": 50_000,
        "min_output_tokens": 256,
        "margin": 0.05,
    }
    assert ticket.bill(input_tokens=100, output_tokens=40_000) is not None
    view = guard.usage("bob", "gpt-5")
    assert view == {
        "source": {"type": "public", "id": "gpt-5"},
        "rules": [],
        "ceilings": [],
        "restriction": None,
    }
    guard.admit("bob", "auto").release()
    assert len(store) == 0
    guard.admit("alice", "gpt-5", max_tokens=10).bill(input_tokens=1, output_tokens=1)
    assert len(store) > 0


# --- the path cache -------------------------------------------------------------------------


def test_set_policy_takes_effect_at_once(make_guard: MakeGuard) -> None:
    guard = make_guard(policy())
    assert guard.policy_version == 1
    assert guard.admit("alice", "gpt-5").source == {"type": "public", "id": "gpt-5"}
    guard.set_policy(ug.Policy.from_dict(policy(direct=[direct("alice", "gpt-5", tokens(10))])))
    assert guard.policy_version == 2
    # Same instant: the cached path (30 s) is not reused under the new policy.
    ticket = guard.admit("alice", "gpt-5", max_tokens=5)
    assert ticket.source == {"type": "direct", "id": "alice"}
    ticket.bill(input_tokens=0, output_tokens=10)
    assert refused(lambda: guard.admit("alice", "gpt-5")).limit_type == "direct"
    guard.set_policy(ug.Policy.from_dict(policy()))
    assert guard.policy_version == 3
    guard.admit("alice", "gpt-5").release()


def test_a_lowered_limit_says_what_calls_in_progress_hold(make_guard: MakeGuard) -> None:
    """The refusal tells the held figure as it is, above a limit lowered meanwhile (it
    said the new amount)."""
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", tokens(10_000))]))
    ticket = guard.admit("alice", "gpt-5", prompt_tokens=1_000, max_tokens=7_000)
    guard.set_policy(ug.Policy.from_dict(policy(direct=[direct("alice", "gpt-5", tokens(5_000))])))
    refusal = refused(lambda: guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=10))
    assert "You have 8,000 tokens held by calls in progress" in str(refusal), str(refusal)
    ticket.release()


# --- bill and release -----------------------------------------------------------------------


def test_bill_replaces_the_reservation(make_guard: MakeGuard) -> None:
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", tokens(100_000))]))
    ticket = guard.admit("alice", "gpt-5", prompt_tokens=1_200, max_tokens=4_000)
    assert ticket.reserved["tokens"] == 5_200
    assert ticket.ceiling["tokens"] == 5_200
    view = rule_view(guard.usage("alice", "gpt-5"), "direct")
    assert (view["used"], view["reserved"], view["left"]) == (0, 5_200, 94_800)
    assert not ticket.settled
    billed = ticket.bill(input_tokens=1_100, output_tokens=800)
    assert billed is not None and billed["recorded"] is True
    assert ticket.settled
    view = rule_view(guard.usage("alice", "gpt-5"), "direct")
    assert (view["used"], view["reserved"], view["left"]) == (1_900, 0, 98_100)


def test_bill_past_the_amount_is_kept(make_guard: MakeGuard) -> None:
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", tokens(1_000))]))
    ticket = guard.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=200)
    assert ticket.reserved["tokens"] == 300
    ticket.bill(input_tokens=500, output_tokens=2_500)
    view = rule_view(guard.usage("alice", "gpt-5"), "direct")
    assert (view["used"], view["reserved"], view["left"]) == (3_000, 0, 0)
    assert refused(lambda: guard.admit("alice", "gpt-5")).limit_type == "direct"


def test_restriction_reports_use_past_the_amount(make_guard: MakeGuard) -> None:
    # usageRestriction's currentValue is the use counted, not clipped to the amount: a
    # person 2,000 tokens over must not be shown as exactly at the limit.
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", tokens(1_000))]))
    guard.admit("alice", "gpt-5", max_tokens=200).bill(input_tokens=500, output_tokens=2_500)
    restriction = guard.usage("alice", "gpt-5")["restriction"]
    assert (restriction["current_value"], restriction["max_value"]) == (3_000, 1_000)


def test_release_gives_the_reservation_back(make_guard: MakeGuard) -> None:
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", tokens(1_000))]))
    ticket = guard.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=900)
    assert rule_view(guard.usage("alice", "gpt-5"), "direct")["left"] == 0
    assert refused(lambda: guard.admit("alice", "gpt-5")).limit_type == "direct"
    assert ticket.release() is True
    assert ticket.settled
    view = rule_view(guard.usage("alice", "gpt-5"), "direct")
    assert (view["used"], view["reserved"], view["left"]) == (0, 0, 1_000)
    assert guard.stats()["released"] == 1


def test_a_ticket_settles_once(make_guard: MakeGuard) -> None:
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", tokens(100_000))]))
    billed_then_released = guard.admit("alice", "gpt-5", max_tokens=100)
    assert billed_then_released.bill(input_tokens=10, output_tokens=20) is not None
    assert billed_then_released.release() is False
    billed_twice = guard.admit("alice", "gpt-5", max_tokens=100)
    assert billed_twice.bill(input_tokens=10, output_tokens=20) is not None
    assert billed_twice.bill(input_tokens=10, output_tokens=20) is None
    released_then_billed = guard.admit("alice", "gpt-5", max_tokens=100)
    assert released_then_billed.release() is True
    assert released_then_billed.release() is False
    assert released_then_billed.bill(input_tokens=10, output_tokens=20) is None
    assert rule_view(guard.usage("alice", "gpt-5"), "direct")["used"] == 60
    stats = guard.stats()
    assert (stats["admitted"], stats["billed"], stats["released"]) == (3, 2, 1)


def test_cost_from_prices_in_exact_micro_dollars(make_guard: MakeGuard) -> None:
    cost = {"metric": "cost", "amount": 100.0, "window": "month"}
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", cost)]))
    ticket = guard.admit("alice", "gpt-5", prompt_tokens=1_000, max_tokens=3_000)
    # Held at the dearest rates: 1,000 × $1.25/M + 3,000 × $10/M.
    assert ticket.reserved["cost_micros"] == 31_250
    assert ticket.ceiling["cost_micros"] == 31_250
    assert ticket.ceiling["rates"] == {"input": 1.25, "cached_input": 0.125, "output": 10.0}
    billed = ticket.bill(input_tokens=1_000, output_tokens=3_000, cached_input_tokens=400)
    # 600 × 1.25 + 400 × 0.125 + 3,000 × 10 = 750 + 50 + 30,000 micro-dollars.
    assert billed is not None and billed["cost_micros"] == 30_800
    assert rule_view(guard.usage("alice", "gpt-5"), "direct", "cost")["used"] == 30_800
    # Fractions of a micro-dollar round up.
    one = guard.admit("alice", "gpt-5", max_tokens=1).bill(input_tokens=1, output_tokens=0)
    assert one is not None and one["cost_micros"] == 2
    # A cost given by the caller is billed as given.
    given = guard.admit("alice", "gpt-5", max_tokens=1).bill(1, 1, cost_micros=7)
    assert given is not None and given["cost_micros"] == 7
    assert rule_view(guard.usage("alice", "gpt-5"), "direct", "cost")["used"] == 30_809


def test_compute_ms_is_measured_from_admission(
    make_guard: MakeGuard, clock: ug.ManualClock
) -> None:
    compute = {"metric": "compute_ms", "amount": 10_000, "window": "hour"}
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", compute)]))
    ticket = guard.admit("alice", "gpt-5", max_tokens=10)
    assert "compute_ms" not in ticket.reserved  # checked before, never reserved
    clock.advance(2.5)
    billed = ticket.bill(input_tokens=5, output_tokens=5)
    assert billed is not None and billed["compute_ms"] == 2_500
    given = guard.admit("alice", "gpt-5", max_tokens=10).bill(5, 5, compute_ms=7_500)
    assert given is not None and given["compute_ms"] == 7_500
    assert rule_view(guard.usage("alice", "gpt-5"), "direct", "compute_ms")["used"] == 10_000
    assert refused(lambda: guard.admit("alice", "gpt-5")).metric == "compute_ms"


def test_requests_rule_holds_one_at_admission(make_guard: MakeGuard) -> None:
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", requests(2))]))
    first = guard.admit("alice", "gpt-5", max_tokens=10)
    second = guard.admit("alice", "gpt-5", max_tokens=10)
    assert first.reserved == {"requests": 1}
    view = rule_view(guard.usage("alice", "gpt-5"), "direct", "requests")
    assert (view["used"], view["reserved"], view["left"]) == (0, 2, 0)
    assert refused(lambda: guard.admit("alice", "gpt-5")).metric == "requests"
    first.bill(input_tokens=1, output_tokens=1)
    second.release()
    view = rule_view(guard.usage("alice", "gpt-5"), "direct", "requests")
    assert (view["used"], view["reserved"], view["left"]) == (1, 0, 1)


# --- windows and holds ----------------------------------------------------------------------


def test_sliding_window_worked_example(make_guard: MakeGuard, clock: ug.ManualClock) -> None:
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", tokens(2_000, "hour"))]))
    clock.set("2026-11-30T13:30:00Z")
    guard.admit("alice", "gpt-5", max_tokens=100).bill(input_tokens=200, output_tokens=1_000)
    clock.set("2026-11-30T14:05:00Z")
    guard.admit("alice", "gpt-5", max_tokens=100).bill(input_tokens=100, output_tokens=400)
    clock.set("2026-11-30T14:20:00Z")
    view = rule_view(guard.usage("alice", "gpt-5"), "direct")
    # 500 + 1,200 × 40/60 = 1,300 counted; 700 left.
    assert (view["window"], view["used"], view["left"]) == ("hour", 1_300, 700)
    ticket = guard.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=5_000)
    assert ticket.ceiling["tokens"] == 700
    assert ticket.ceiling["max_output_tokens"] == 600


def test_sliding_window_resets_when_enough_of_the_previous_bucket_slid_out(
    make_guard: MakeGuard, clock: ug.ManualClock
) -> None:
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", tokens(2_000, "hour"))]))
    clock.set("2026-11-30T13:30:00Z")
    guard.admit("alice", "gpt-5", max_tokens=10).bill(input_tokens=200, output_tokens=1_000)
    clock.set("2026-11-30T14:05:00Z")
    guard.admit("alice", "gpt-5", max_tokens=10).bill(input_tokens=1_100, output_tokens=100)
    clock.set("2026-11-30T14:20:00Z")
    # 1,200 + ceil(1,200 x 40/60) = 2,000: nothing left until ceil(1,200 x (3,600 - s)/3,600)
    # drops to 799, at s = 1,203 seconds past 14:00.
    error = refused(lambda: guard.admit("alice", "gpt-5", max_tokens=10))
    assert str(error) == (
        "You have used your 2,000 tokens an hour on GPT-5. It resets at 2026-11-30T14:20:03Z."
    )
    assert (error.is_rate_limit, error.retry_after) == (True, 3)
    status, headers, body = error.to_http("openai")
    assert (status, headers["retry-after"], body["error"]["code"]) == (
        429,
        "3",
        "rate_limit_exceeded",
    )
    clock.set("2026-11-30T14:20:02Z")
    assert rule_view(guard.usage("alice", "gpt-5"), "direct")["left"] == 0
    clock.set("2026-11-30T14:20:03Z")
    assert rule_view(guard.usage("alice", "gpt-5"), "direct")["left"] == 1


def test_holds_expire_after_15_minutes(make_guard: MakeGuard, clock: ug.ManualClock) -> None:
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", tokens(1_000))]))
    lost = guard.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=900)
    assert lost.reserved["tokens"] == 1_000
    clock.advance(minutes=14)
    assert rule_view(guard.usage("alice", "gpt-5"), "direct")["reserved"] == 1_000
    assert refused(lambda: guard.admit("alice", "gpt-5")).limit_type == "direct"
    clock.advance(minutes=2)
    view = rule_view(guard.usage("alice", "gpt-5"), "direct")
    assert (view["used"], view["reserved"], view["left"]) == (0, 0, 1_000)
    guard.admit("alice", "gpt-5", max_tokens=900).release()
    # A late bill of the lost call still counts its real use, and takes back nothing else.
    assert lost.bill(input_tokens=100, output_tokens=100) is not None
    view = rule_view(guard.usage("alice", "gpt-5"), "direct")
    assert (view["used"], view["reserved"], view["left"]) == (200, 0, 800)


def test_usage_goes_in_the_bucket_of_the_moment_of_billing(
    make_guard: MakeGuard, clock: ug.ManualClock
) -> None:
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", tokens(1_000))]))
    clock.set("2026-11-30T23:59:00Z")
    ticket = guard.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=900)
    clock.set("2026-12-01T00:01:00Z")
    ticket.bill(input_tokens=100, output_tokens=800)
    view = rule_view(guard.usage("alice", "gpt-5"), "direct")
    assert (view["used"], view["left"], view["resets_at"]) == (900, 100, "2026-12-02T00:00:00Z")


# --- the usage view -------------------------------------------------------------------------


def test_restriction_is_the_rule_closest_to_its_amount(make_guard: MakeGuard) -> None:
    guard = make_guard(
        policy(
            direct=[direct("alice", "gpt-5", tokens(10_000))],
            model_total=[{"model": "gpt-5", "rules": [tokens(1_000_000)]}],
            platform={"rules": [requests(3, "hour")]},
        )
    )
    assert guard.usage("alice", "gpt-5")["restriction"]["current_value"] == 0
    guard.admit("alice", "gpt-5", max_tokens=10).bill(input_tokens=500, output_tokens=500)
    assert guard.usage("alice", "gpt-5")["restriction"] == {
        "restricted_by": "platform",
        "metric": "requests",
        "unit": "requests",
        "window": "hour",
        "current_value": 1,
        "max_value": 3,
    }
    guard.admit("alice", "gpt-5", max_tokens=10).bill(input_tokens=3_000, output_tokens=3_000)
    assert guard.usage("alice", "gpt-5")["restriction"] == {
        "restricted_by": "direct",
        "metric": "tokens",
        "unit": "tokens",
        "window": "day",
        "current_value": 7_000,
        "max_value": 10_000,
    }


def test_usage_view_names_the_source_that_admission_bills(make_guard: MakeGuard) -> None:
    # A direct limit with nothing left refuses (it does not pass the call on), so the
    # view must not claim the call would be billed to the person's team.
    guard = make_guard(
        policy(
            direct=[direct("alice", "gpt-5", tokens(1_000))],
            team=[{"team": "research", "model": "gpt-5", "shared": [tokens(100_000)]}],
        )
    )
    guard.admit("alice", "gpt-5", max_tokens=10).bill(input_tokens=0, output_tokens=1_000)
    assert refused(lambda: guard.admit("alice", "gpt-5")).limit_type == "direct"
    view = guard.usage("alice", "gpt-5")
    assert view["source"] == {"type": "direct", "id": "alice"}
    assert [(r["limit_type"], r["left"]) for r in view["rules"]] == [("direct", 0)]


# --- bad arguments --------------------------------------------------------------------------


def test_bad_arguments_raise_clear_errors_and_settle_nothing(make_guard: MakeGuard) -> None:
    store = ug.MemoryStore()
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", tokens(1_000))]), store=store)
    with pytest.raises(
        ValueError,
        match=r"prompt_tokens must be a whole number from 0 to 18446744073709551615 "
        r"\(2\*\*64-1\) \(got -5\)",
    ):
        guard.admit("alice", "gpt-5", prompt_tokens=-5)
    with pytest.raises(
        TypeError,
        match=r"max_tokens must be a whole number from 0 to .* \(an int\), not float "
        r"\(got 1.5\)",
    ):
        guard.admit("alice", "gpt-5", max_tokens=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="user: must not be empty"):
        guard.admit("", "gpt-5")
    assert len(store) == 0
    assert guard.stats()["admitted"] == 0

    ticket = guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=90)
    with pytest.raises(ValueError) as info:
        ticket.bill(input_tokens=10, output_tokens=5, cached_input_tokens=20)
    assert str(info.value) == ("cached_input_tokens: must not exceed input_tokens (10) (got 20)")
    with pytest.raises(ValueError, match=r"output_tokens must be a whole number from 0 to 9007"):
        ticket.bill(input_tokens=10, output_tokens=-1)
    with pytest.raises(ValueError, match="reasoning_tokens: must not exceed output_tokens"):
        ticket.bill(input_tokens=10, output_tokens=5, reasoning_tokens=6)
    assert not ticket.settled
    view = rule_view(guard.usage("alice", "gpt-5"), "direct")
    assert (view["used"], view["reserved"]) == (0, 100)
    assert ticket.bill(input_tokens=10, output_tokens=5) is not None
    assert rule_view(guard.usage("alice", "gpt-5"), "direct")["used"] == 15


# --- asyncio --------------------------------------------------------------------------------


async def test_async_admit_bill_release(make_guard: MakeGuard) -> None:
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", tokens(1_000))]))
    ticket = await guard.admit_async("alice", "gpt-5", prompt_tokens=100, max_tokens=400)
    assert isinstance(ticket, ug.Ticket)
    assert ticket.source == {"type": "direct", "id": "alice"}
    other = await guard.admit_async("alice", "gpt-5", prompt_tokens=100, max_tokens=400)
    billed = await ticket.bill_async(input_tokens=100, output_tokens=300)
    assert billed is not None and billed["output_tokens"] == 300
    assert await ticket.bill_async(input_tokens=100, output_tokens=300) is None
    assert await other.release_async() is True
    assert await other.release_async() is False
    view = rule_view(await guard.usage_async("alice", "gpt-5"), "direct")
    assert (view["used"], view["reserved"], view["left"]) == (400, 0, 600)
    await (await guard.admit_async("alice", "gpt-5", max_tokens=600)).bill_async(0, 600)
    with pytest.raises(ug.UsageLimitError) as info:
        await guard.admit_async("alice", "gpt-5")
    assert info.value.limit_type == "direct"


async def test_async_calls_run_concurrently(make_guard: MakeGuard) -> None:
    guard = make_guard(policy(direct=[direct("alice", "gpt-5", requests(5))]))
    results = await asyncio.gather(
        *(guard.admit_async("alice", "gpt-5", max_tokens=10) for _ in range(8)),
        return_exceptions=True,
    )
    tickets = [r for r in results if isinstance(r, ug.Ticket)]
    refusals = [r for r in results if isinstance(r, ug.UsageLimitError)]
    assert (len(tickets), len(refusals)) == (5, 3)
    assert all(not isinstance(r, ug.UsageLimitError) or r.metric == "requests" for r in results)
    await asyncio.gather(*(t.release_async() for t in tickets))
    assert rule_view(guard.usage("alice", "gpt-5"), "direct", "requests")["left"] == 5


def test_admit_counts_the_request_it_is_given(make_guard: MakeGuard) -> None:
    guard = make_guard(
        policy(direct=[direct("alice", "gpt-5", tokens(100_000))], public=[]),
    )
    chat = {
        "model": "gpt-5",
        "messages": [{"role": "user", "content": "Count me exactly, please."}],
        "max_completion_tokens": 700,
    }
    exact = ug.count_prompt(chat, provider="openai", model="gpt-5")
    assert exact["exact"] is True
    ticket = guard.admit("alice", "gpt-5", chat, provider="openai")
    assert ticket.ceiling["tokens"] == exact["tokens"] + 700
    assert ticket.ceiling["max_output_tokens"] == 700
    ticket.release()
    # An estimated count (Anthropic framing is not published) is held with the margin the
    # client keeps free, so fitting the call does not lower the caller's output.
    message = {"model": "claude-sonnet", "max_tokens": 300, "messages": chat["messages"]}
    estimate = ug.count_prompt(message, provider="anthropic", model="claude-sonnet")
    assert estimate["exact"] is False
    guard = make_guard(policy(direct=[direct("alice", "claude-sonnet", tokens(100_000))]))
    ticket = guard.admit("alice", "claude-sonnet", message, provider="anthropic")
    margin = -(-estimate["tokens"] * 5 // 100)
    assert ticket.ceiling["tokens"] == estimate["tokens"] + margin + 300
    fitted = ug.fit(message, ticket.ceiling, provider="anthropic", model="claude-sonnet")
    assert fitted.max_output_tokens == 300 and not fitted.lowered
    with pytest.raises(ValueError, match="provider"):
        guard.admit("alice", "claude-sonnet", message, provider="antropic")

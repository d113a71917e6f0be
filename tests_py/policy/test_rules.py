"""Generic rules (`[[rules]]`) through the Python API: admit with attributes on the memory
store and on a real redis-server, warn, block, soft thresholds and shadow mode."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, get_args

import pytest
import usage_guard as ug
from redis_harness import RedisServer
from usage_guard import http, types

MODELS = {
    "gpt-4o": {
        "provider": "openai",
        "context_window": 128000,
        "prices": {"input": 2.5, "output": 10.0},
    },
    "gpt-4o-mini": {"provider": "openai", "prices": {"input": 0.15, "output": 0.6}},
}


def policy(*rules: dict[str, Any], mode: str = "enforce") -> dict[str, Any]:
    return {"models": MODELS, "settings": {"mode": mode}, "rules": list(rules)}


PER_CREDENTIAL = {
    "name": "two a day per credential on gpt-4o in prod",
    "applies_when": {"model": "gpt-4o", "environment": ["prod", "staging"]},
    "count_by": ["credential"],
    "amount": "requests",
    "budget": 2,
    "window": {"kind": "calendar", "count": 1, "unit": "day", "anchor_zone": "Europe/Paris"},
    "warn_at": [0.5],
}


def prod(credential: str) -> dict[str, str]:
    return {"credential": credential, "environment": "prod"}


def stores(redis_server: RedisServer) -> list[Any]:
    return [ug.MemoryStore(), ug.RedisStore(redis_server.url, prefix="rules")]


def test_block_per_credential_on_memory_and_redis(
    redis_server: RedisServer, make_guard: Callable[..., ug.Guard]
) -> None:
    for store in stores(redis_server):
        guard = make_guard(policy(PER_CREDENTIAL), store=store)
        first = guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes=prod("k1"))
        assert first.warnings == [
            {
                "rule": PER_CREDENTIAL["name"],
                "amount": "requests",
                "unit": "requests",
                "used": 1,
                "budget": 2,
                "threshold": 0.5,
                "action": "block",
                "would_refuse": False,
            }
        ]
        assert set(first.warnings[0]) == set(types.RuleWarning.__annotations__)
        # A ticket dropped gives its hold back: keep it (the call is running).
        second = guard.admit("bob", "gpt-4o", prompt_tokens=10, attributes=prod("k1"))
        assert second.warnings[0]["used"] == 2
        with pytest.raises(ug.UsageLimitError) as refused:
            guard.admit("carol", "gpt-4o", prompt_tokens=10, attributes=prod("k1"))
        err = refused.value
        assert err.limit_type == "rule"
        assert err.limit_type in get_args(types.LimitType)
        assert "2 requests a calendar day from 00:00 Europe/Paris" in str(err)
        assert "for this credential" in str(err)
        # Another credential, another environment, another model: not this counter.
        guard.admit("carol", "gpt-4o", prompt_tokens=10, attributes=prod("k2"))
        guard.admit("carol", "gpt-4o", prompt_tokens=10, attributes={"credential": "k1"})
        guard.admit("carol", "gpt-4o-mini", prompt_tokens=10, attributes=prod("k1"))


def test_the_zoned_day_resets_at_local_midnight(
    make_guard: Callable[..., ug.Guard], clock: ug.ManualClock
) -> None:
    guard = make_guard(policy(PER_CREDENTIAL))
    for _ in range(2):
        ticket = guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes=prod("k1"))
        ticket.bill(input_tokens=10, output_tokens=5)
    with pytest.raises(ug.UsageLimitError) as refused:
        guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes=prod("k1"))
    # 08:00 UTC on Nov 30 is 09:00 in Paris: the day resets at 23:00 UTC.
    assert refused.value.resets_at == "2026-11-30T23:00:00Z"
    clock.set("2026-11-30T23:00:00Z")
    guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes=prod("k1"))


def test_warn_counts_and_continues(make_guard: Callable[..., ug.Guard]) -> None:
    rule = dict(PER_CREDENTIAL, action="warn", warn_at=[])
    guard = make_guard(policy(rule))
    tickets = [
        guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes=prod("k1")) for _ in range(3)
    ]
    assert [t.warnings for t in tickets[:2]] == [[], []]
    (warning,) = tickets[2].warnings
    assert (warning["used"], warning["budget"], warning["threshold"]) == (3, 2, 1.0)
    assert warning["would_refuse"] is False


def test_shadow_mode_reports_what_would_have_been_refused(
    make_guard: Callable[..., ug.Guard],
) -> None:
    guard = make_guard(policy(PER_CREDENTIAL, mode="shadow"))
    tickets = [
        guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes=prod("k1")) for _ in range(3)
    ]
    refused = tickets[2].warnings[-1]
    assert refused["would_refuse"] is True
    assert refused["action"] == "block"
    assert (refused["used"], refused["budget"]) == (3, 2)


def test_cost_warnings_are_in_dollars(make_guard: Callable[..., ug.Guard]) -> None:
    rule = {
        "name": "cost per agent",
        "count_by": ["agent"],
        "amount": "cost",
        "budget": 1.0,
        "window": "month",
        "warn_at": [0.0001],
    }
    guard = make_guard(policy(rule))
    ticket = guard.admit(
        "alice", "gpt-4o", prompt_tokens=1000, max_tokens=1000, attributes={"agent": "a"}
    )
    (warning,) = ticket.warnings
    # Held: 1,000 input tokens at $2.50/M and 1,000 output at $10/M, in micro-dollars.
    assert (warning["used"], warning["budget"], warning["unit"]) == (12_500, 1_000_000, "micro_usd")


def test_async_admit_takes_attributes(make_guard: Callable[..., ug.Guard]) -> None:
    guard = make_guard(policy(PER_CREDENTIAL))

    async def run() -> None:
        held = [
            await guard.admit_async("alice", "gpt-4o", prompt_tokens=10, attributes=prod("k1"))
            for _ in range(2)
        ]
        assert [t.warnings[0]["used"] for t in held] == [1, 2]
        with pytest.raises(ug.UsageLimitError):
            await guard.admit_async("alice", "gpt-4o", prompt_tokens=10, attributes=prod("k1"))

    asyncio.run(run())


def test_bad_attributes_are_refused_by_name(make_guard: Callable[..., ug.Guard]) -> None:
    guard = make_guard(policy(PER_CREDENTIAL))
    with pytest.raises(ValueError, match="is not an attribute; accepted: scope, principal"):
        guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes={"credentail": "k"})
    with pytest.raises(ValueError, match="comes from the call"):
        guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes={"model": "x"})
    # The model's provider: naming another would step out of every rule by provider.
    for provider in ("anthropic", "OpenAI", "openai"):
        with pytest.raises(ValueError, match="provider the model's policy provider"):
            guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes={"provider": provider})
    with pytest.raises(TypeError, match="must be a string"):
        guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes={"credential": 3})
    with pytest.raises(TypeError, match="attributes"):
        guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes=["credential"])


def test_bad_rules_name_their_paths() -> None:
    bad = dict(PER_CREDENTIAL, action="halt_session")
    bad["window"] = {"kind": "calendar", "unit": "month", "anchor_zone": "Europe/Pariss"}
    with pytest.raises(ug.PolicyError) as err:
        ug.Policy.from_dict(policy(bad))
    text = str(err.value)
    assert "rules[0].window.anchor_zone: is not an IANA time zone" in text
    assert "rules[0].action_duration_seconds: is required" in text


def test_a_rule_on_a_value_no_call_can_have_is_an_error() -> None:
    """A provider the policy has no word for, or (unknown models refused) a model it does
    not declare: the rule would silently limit nothing."""
    for when, path, says in (
        ({"provider": "opnai"}, "rules[0].applies_when.provider", 'did you mean "openai"'),
        ({"provider": "OpenAI"}, "rules[0].applies_when.provider", "accepted: openai"),
        ({"model": ["gpt-4o", "gtp-5"]}, "rules[0].applies_when.model[1]", "is not a model"),
    ):
        with pytest.raises(ug.PolicyError) as err:
            ug.Policy.from_dict(policy(dict(PER_CREDENTIAL, applies_when=when)))
        [error] = err.value.errors
        assert error["path"] == path and says in error["message"], error
    unless = dict(PER_CREDENTIAL, applies_unless={"model": "gpt-5"})
    with pytest.raises(ug.PolicyError, match="rules\\[0\\].applies_unless.model"):
        ug.Policy.from_dict(policy(unless))
    # Any name of a declared model is one; with unknown models allowed, any model may be.
    ug.Policy.from_dict(policy(dict(PER_CREDENTIAL, applies_when={"model": "GPT-4o-2024-08-06"})))
    allowed = policy(dict(PER_CREDENTIAL, applies_when={"model": "gpt-5"}))
    allowed["settings"]["unknown_models"] = "allow"
    ug.Policy.from_dict(allowed)


HALT = {
    "name": "runaway session",
    "count_by": ["session"],
    "amount": "requests",
    "budget": 2,
    "window": "minute",
    "action": "halt_session",
    "action_duration_seconds": 600,
}

OTHER_PROCESS = """
import sys, usage_guard as ug
policy = ug.Policy.from_json(sys.argv[2])
guard = ug.Guard(policy, store=ug.RedisStore(sys.argv[1], prefix="halt"),
                 clock=ug.ManualClock(sys.argv[3]))
for session in ("s1", "s2"):
    try:
        guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes={"session": session})
        print(session, "admitted")
    except ug.UsageLimitError as e:
        print(session, "refused", e.resets_at)
"""


def test_a_halt_is_seen_by_another_process(
    redis_server: RedisServer, clock: ug.ManualClock
) -> None:
    import json
    import subprocess
    import sys

    document = policy(HALT)
    guard = ug.Guard(
        ug.Policy.from_dict(document),
        store=ug.RedisStore(redis_server.url, prefix="halt"),
        clock=clock,
    )
    held = [
        guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes={"session": "s1"})
        for _ in range(2)
    ]
    with pytest.raises(ug.UsageLimitError):
        guard.admit("alice", "gpt-4o", prompt_tokens=10, attributes={"session": "s1"})
    for ticket in held:
        ticket.release()
    # Five minutes later, in another process: s1 is halted until 08:10, s2 is not.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            OTHER_PROCESS,
            redis_server.url,
            json.dumps(document),
            "2026-11-30T08:05:00Z",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split("\n")[:2] == [
        "s1 refused 2026-11-30T08:10:00Z",
        "s2 admitted",
    ], done.stderr


def test_degrade_sends_the_cheaper_model(make_guard: Callable[..., ug.Guard]) -> None:
    rule = {
        "name": "gpt-4o per agent",
        "applies_when": {"model": "gpt-4o"},
        "count_by": ["agent"],
        "amount": "requests",
        "budget": 1,
        "window": "day",
        "action": "degrade",
        "degrade_to": "gpt-4o-mini",
    }
    guard = make_guard(policy(rule))
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    first = guard.admit("alice", "gpt-4o", request, attributes={"agent": "a"})
    assert (first.model, first.degraded_from) == ("gpt-4o", None)
    assert "model" not in first.fitted
    second = guard.admit("alice", "gpt-4o", request, attributes={"agent": "a"})
    assert (second.model, second.degraded_from) == ("gpt-4o-mini", "gpt-4o")
    assert second.fitted["model"] == "gpt-4o-mini"
    assert http.headers(second)["X-Degraded"] == "gpt-4o -> gpt-4o-mini"
    assert "X-Degraded" not in http.headers(first)


def test_events_go_out_once_across_three_guards_on_redis(
    redis_server: RedisServer, clock: ug.ManualClock
) -> None:
    rule = dict(PER_CREDENTIAL, budget=10, warn_at=[0.3, 0.6])
    seen: list[dict[str, Any]] = []
    guards = []
    for _ in range(3):
        guard = ug.Guard(
            ug.Policy.from_dict(policy(rule)),
            store=ug.RedisStore(redis_server.url, prefix="events"),
            clock=clock,
        )
        guard.on_event(seen.append)
        guards.append(guard)
    held = [
        guards[i % 3].admit("alice", "gpt-4o", prompt_tokens=10, attributes=prod("k1"))
        for i in range(8)
    ]
    assert [(e["rule"], e["threshold"], e["used"]) for e in seen] == [
        (rule["name"], 0.3, 3),
        (rule["name"], 0.6, 6),
    ]
    assert all(len(t.warnings) == 1 for t in held[2:])

    def raising(event: Any) -> None:
        raise RuntimeError("a broken listener")

    # A listener that raises is logged; admission goes on and the other listeners run.
    guards[0].on_event(raising)
    held += [
        guards[0].admit("alice", "gpt-4o", prompt_tokens=10, attributes=prod("k2"))
        for _ in range(3)
    ]
    assert len(seen) == 3 and seen[2]["used"] == 3

"""Provider health in the gateway, against fake providers scripted to fail: the breaker
(opens after five recorded calls with half or more retryable failures, stays open 10 s,
three half-open probes close it), credential cooldowns with every timing header and the
clamp, the fallback ladder re-admitting each candidate (an overspending fallback is
skipped), 402 when none is affordable, probes, metrics, and one breaker shared by two
gateways on Redis. Time is the guard's manual clock."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, Optional

import httpx
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from provider_support import reserved

ALICE = "sk-alice-secret"
ALICE_CI = "sk-alice-ci-secret"  # a second key: one key's failures alone never open a breaker
ADMIN = "adm-health"
ASK = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 100}
FAIL_500 = (500, {}, {"error": {"message": "boom", "type": "server_error"}})
BAD_400 = (400, {}, {"error": {"message": "bad messages", "type": "invalid_request_error"}})


def _limit(model: str) -> dict[str, Any]:
    return {
        "user": "alice",
        "model": model,
        "rules": [{"metric": "cost", "amount": 1.0, "window": "month"}],
    }


def health_policy(primary: FakeProvider, backup: FakeProvider) -> dict[str, Any]:
    """gpt-4o (openai, on `primary`) falls back to pricey (whose prompt alone costs more
    than $1 a month) then backup-mini (on `backup`); solo has no fallback."""
    cheap = {"input": 0.15, "output": 0.6}
    models = {
        "gpt-4o": {"provider": "openai", "prices": cheap, "fallbacks": ["pricey", "backup-mini"]},
        "solo": {"provider": "openai", "prices": cheap},
        "only-pricey": {"provider": "openai", "prices": cheap, "fallbacks": ["pricey"]},
        "pricey": {"provider": "other", "prices": {"input": 500000.0, "output": 500000.0}},
        "backup-mini": {"provider": "other", "prices": cheap},
    }
    return {
        "models": models,
        "limits": {"direct": [_limit(m) for m in models]},
        "providers": {"openai": {"base_url": primary.url}, "other": {"base_url": backup.url}},
        "gateway": {
            "keys": {
                "alice": {"key": ALICE, "principal": "alice"},
                "alice-ci": {"key": ALICE_CI, "principal": "alice"},
            },
            "admin_token_env": "UG_HEALTH_ADMIN",
        },
    }


@pytest.fixture(scope="module")
def providers() -> Iterator[tuple[FakeProvider, FakeProvider]]:
    with FakeProvider() as primary, FakeProvider() as backup:
        yield primary, backup


@pytest.fixture
def primary(providers: tuple[FakeProvider, FakeProvider]) -> FakeProvider:
    providers[0].reset()
    return providers[0]


@pytest.fixture
def backup(providers: tuple[FakeProvider, FakeProvider]) -> FakeProvider:
    providers[1].reset()
    return providers[1]


@pytest.fixture
def start(primary, backup, clock, monkeypatch) -> Iterator[Any]:
    """`start(store=None)` → (guard, gateway) on the manual clock; stopped after the test."""
    monkeypatch.setenv("UG_HEALTH_ADMIN", ADMIN)
    running: list[ug.Gateway] = []

    def make(store: Any = None) -> tuple[ug.Guard, ug.Gateway]:
        policy = ug.Policy.from_dict(health_policy(primary, backup))
        guard = ug.Guard(policy, store=store, clock=clock)
        gateway = ug.Gateway(guard, "127.0.0.1:0")
        running.append(gateway)
        return guard, gateway

    yield make
    for g in running:
        g.shutdown()
        assert g.wait(10)


# Alice's two keys take turns: the failures of one key alone never open a breaker.
_KEYS = itertools.cycle([ALICE, ALICE_CI])


def chat(gateway: ug.Gateway, model: str, path: str = "/v1/chat/completions") -> httpx.Response:
    return httpx.post(
        f"{gateway.url}{path}",
        json={"model": model, **ASK},
        headers={"authorization": f"Bearer {next(_KEYS)}"},
        timeout=30,
    )


def breaker_line(state: str) -> str:
    return f'usage_guard_provider_breaker_state{{provider="openai",state="{state}"}} 1'


def test_five_retryable_failures_open_the_breaker_then_three_probes_close_it(primary, start, clock):
    guard, gateway = start()
    primary.script = [FAIL_500] * 4 + ["drop"]
    statuses = [chat(gateway, "solo").status_code for _ in range(5)]
    assert statuses == [500] * 4 + [502]  # passed through; a connection fault is 502
    assert breaker_line("open") in gateway.metrics()
    refused = chat(gateway, "solo")
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "provider_unavailable"
    assert refused.headers["retry-after"] == "10"
    assert len(primary.requests) == 5  # the open breaker kept the sixth call away
    clock.advance(9.5)
    assert chat(gateway, "solo").status_code == 503
    clock.advance(0.5)
    for _ in range(3):
        r = chat(gateway, "solo")
        assert r.status_code == 200 and r.headers["x-served-provider"] == "openai"
    assert breaker_line("closed") in gateway.metrics()
    assert len(primary.requests) == 8


def test_a_failed_half_open_probe_opens_it_again(primary, start, clock):
    guard, gateway = start()
    primary.script = [FAIL_500] * 5
    for _ in range(5):
        chat(gateway, "solo")
    clock.advance(10)
    primary.script = [FAIL_500]
    assert chat(gateway, "solo").status_code == 500
    again = chat(gateway, "solo")
    assert again.status_code == 503 and again.headers["retry-after"] == "10"


def test_caller_mistakes_never_open_it(primary, start):
    guard, gateway = start()
    primary.script = [BAD_400] * 8
    assert [chat(gateway, "solo").status_code for _ in range(8)] == [400] * 8
    assert chat(gateway, "solo").status_code == 200
    assert breaker_line("closed") in gateway.metrics()


def _http_date(clock: ug.ManualClock, seconds: int) -> str:
    import email.utils

    return email.utils.formatdate(clock.now_ms() / 1000 + seconds, usegmt=True)


COOLDOWNS = [
    ("retry-after seconds", {"Retry-After": "7"}, 7),
    ("retry-after-ms", {"retry-after-ms": "1500"}, 2),
    (
        "openai resets",
        {"x-ratelimit-reset-requests": "1m30s", "x-ratelimit-reset-tokens": "6ms"},
        1,
    ),
    ("anthropic reset", {"anthropic-ratelimit-tokens-reset": "2026-11-30T08:00:42Z"}, 42),
    ("no timing", {"x-ratelimit-remaining-requests": "0"}, 5),
    ("clamped", {"retry-after": "3600"}, 300),
]


@pytest.mark.parametrize("headers,wait", [c[1:] for c in COOLDOWNS], ids=[c[0] for c in COOLDOWNS])
def test_a_429_cools_the_credential_for_the_time_the_provider_asks(
    primary, start, headers, wait, caplog
):
    caplog.set_level("INFO", logger="usage_guard")
    guard, gateway = start()
    primary.script = [(429, headers, {"error": {"code": "rate_limit_exceeded"}})]
    assert chat(gateway, "solo").status_code == 429
    cooled = chat(gateway, "solo")
    assert cooled.status_code == 503
    assert cooled.headers["retry-after"] == str(wait)
    assert len(primary.requests) == 1
    metrics = gateway.metrics()
    assert breaker_line("closed") in metrics  # a 429 is no breaker failure
    assert (
        'usage_guard_provider_credential_cooled{provider="openai",credential="default",'
        'reason="rate_limited"} 1' in metrics
    )
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "cools down" in logged
    if wait == 300:
        assert "asked for 3600000 ms" in logged and "clamped to 300000 ms" in logged


def test_retry_after_as_an_http_date(primary, start, clock):
    guard, gateway = start()
    primary.script = [(429, {"Retry-After": _http_date(clock, 20)}, {})]
    chat(gateway, "solo")
    assert chat(gateway, "solo").headers["retry-after"] == "20"


def test_billing_exhaustion_cools_the_key_as_billing(primary, start):
    guard, gateway = start()
    body = {"error": {"code": "insufficient_quota", "message": "You exceeded your quota"}}
    primary.script = [(429, {}, body)]
    chat(gateway, "solo")
    assert 'reason="billing"} 1' in gateway.metrics()
    assert chat(gateway, "solo").status_code == 503


def test_the_ladder_skips_an_overspending_fallback(primary, backup, start):
    guard, gateway = start()
    primary.script = [(429, {"retry-after": "30"}, {})]
    first = chat(gateway, "gpt-4o")
    assert first.status_code == 200
    assert first.headers["x-served-provider"] == "other"
    resolution = "fallback(gpt-4o -> backup-mini, post-attempt, unavailable)"
    assert first.headers["x-model-resolution"] == resolution
    second = chat(gateway, "gpt-4o")
    assert second.headers["x-model-resolution"] == (
        "fallback(gpt-4o -> backup-mini, pre-attempt, unavailable)"
    )
    # pricey would have overspent: it was never sent; backup-mini got the renamed call
    assert [b["model"] for b in backup.bodies("/v1/chat/completions")] == ["backup-mini"] * 2
    assert len(primary.requests) == 1
    assert reserved(guard, "alice", "pricey", "cost") == 0
    view = guard.usage("alice", "backup-mini")
    assert view["rules"][0]["used"] > 0


def test_a_healthy_model_is_served_without_a_fallback(primary, backup, start):
    guard, gateway = start()
    r = chat(gateway, "gpt-4o")
    assert r.status_code == 200 and r.headers["x-served-provider"] == "openai"
    assert "x-model-resolution" not in r.headers
    assert backup.requests == []


def test_402_budget_exhausted_when_no_affordable_candidate_remains(primary, backup, start):
    guard, gateway = start()
    primary.script = [FAIL_500] * 5
    for _ in range(5):
        chat(gateway, "solo")
    openai_shape = chat(gateway, "only-pricey")
    assert openai_shape.status_code == 402
    error = openai_shape.json()["error"]
    assert (error["code"], error["type"]) == ("budget_exhausted", "insufficient_quota")
    assert "pricey" in error["message"] and openai_shape.headers["x-should-retry"] == "false"
    anthropic_shape = chat(gateway, "only-pricey", "/v1/messages")
    assert anthropic_shape.status_code == 402
    assert anthropic_shape.json()["error"]["type"] == "billing_error"
    assert backup.requests == []


def test_one_breaker_for_the_fleet_on_redis(primary, start, clock, redis_server):
    _, a = start(ug.RedisStore(redis_server.url, prefix="fleet"))
    _, b = start(ug.RedisStore(redis_server.url, prefix="fleet"))
    assert chat(b, "solo").status_code == 200
    primary.script = [FAIL_500] * 5
    for _ in range(5):
        chat(a, "solo")
    clock.advance(1)  # well within the 10 s open: b reads the shared note again
    seen = chat(b, "solo")
    assert seen.status_code == 503 and seen.headers["retry-after"] == "9"
    assert len(primary.requests) == 6
    assert breaker_line("open") in b.metrics()


def probe(gateway: ug.Gateway, provider: str, token: Optional[str] = ADMIN) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.post(f"{gateway.url}/admin/providers/{provider}/probe", headers=headers)


def test_a_probe_is_a_one_token_call_recorded_like_any(primary, start):
    guard, gateway = start()
    assert probe(gateway, "openai", token="wrong").status_code == 401
    assert probe(gateway, "gemini").status_code == 404
    ok = probe(gateway, "openai").json()
    assert (ok["outcome"], ok["status"], ok["health"]["breaker"]) == ("success", 200, "closed")
    assert primary.requests[0].body["max_tokens"] == 1
    primary.script = [FAIL_500] * 6
    answers = [probe(gateway, "openai").json() for _ in range(5)]
    assert [a["outcome"] for a in answers] == ["retryable"] * 5
    # The probes are one caller's (the operator's): alone, they do not open the breaker.
    assert answers[-1]["health"]["breaker"] == "closed"
    assert chat(gateway, "solo").status_code == 500  # a key's failure beside them opens it
    assert probe(gateway, "openai").json()["health"]["breaker"] == "open"
    assert chat(gateway, "solo").status_code == 503

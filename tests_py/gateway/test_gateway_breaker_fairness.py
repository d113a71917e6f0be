"""A caller cannot take a provider away from others: only failures the provider caused count
toward its breaker (a plain call running past `upstream_timeout_seconds` is a long generation,
not one), and one key's failures alone never open it. Mallory's slow long calls time out
while Alice keeps being served (never a 503); streams whose answer does not start within
`upstream_first_byte_seconds` are the provider's failures, and from two keys they open it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import usage_guard as ug
from fake_provider import FakeProvider, Recorded
from provider_support import policy, prompt_tokens, reserved, used

KEYS = {"alice": "sk-alice-fair", "mallory": "sk-mallory-fair", "bob": "sk-bob-fair"}
MESSAGES = [{"role": "user", "content": "Say hello."}]
SLOW_S = 1.6  # how long the fake takes on a call marked `x_slow`: past both timeouts (1 s)


def fair_policy(fake: FakeProvider, **timeouts: int) -> dict[str, Any]:
    doc = policy(users=tuple(KEYS))
    doc["providers"] = {"openai": {"base_url": fake.url}}
    doc["gateway"] = {
        "upstream_timeout_seconds": 1,
        **timeouts,
        "keys": {name: {"key": key, "principal": name} for name, key in KEYS.items()},
    }
    return doc


@pytest.fixture
def start(fake: FakeProvider) -> Iterator[Any]:
    """`start(**timeouts)` → (guard, gateway); the fake takes SLOW_S on calls with `x_slow`."""

    def slow(request: Recorded) -> None:
        if isinstance(request.body, dict) and request.body.get("x_slow"):
            time.sleep(SLOW_S)

    fake.on_request = slow
    running: list[ug.Gateway] = []

    def make(**timeouts: int) -> tuple[ug.Guard, ug.Gateway]:
        guard = ug.Guard(ug.Policy.from_dict(fair_policy(fake, **timeouts)))
        running.append(ug.Gateway(guard, "127.0.0.1:0"))
        return guard, running[-1]

    yield make
    for g in running:
        g.shutdown()
        assert g.wait(10)


def chat(gateway: ug.Gateway, who: str, **extra: Any) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 20, **extra}
    headers = {"authorization": f"Bearer {KEYS[who]}"}
    return httpx.post(f"{gateway.url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def breaker(gateway: ug.Gateway, state: str) -> bool:
    return f'usage_guard_provider_breaker_state{{provider="openai",state="{state}"}} 1' in (
        gateway.metrics()
    )


def while_alice_calls(gateway: ug.Gateway, slow: Any) -> list[int]:
    """Runs `slow()` six times at once while Alice calls every 0.3 s (a few times: fewer
    successes than the six failures, which would open a breaker counting them); Alice's
    statuses, with three calls after the slow ones ended."""
    statuses: list[int] = []
    done = threading.Event()

    def alice() -> None:
        while not done.is_set():
            statuses.append(chat(gateway, "alice").status_code)
            time.sleep(0.3)

    runner = threading.Thread(target=alice)
    runner.start()
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: slow(), range(6)))
    for _ in range(3):
        statuses.append(chat(gateway, "alice").status_code)
    done.set()
    runner.join()
    assert [a.status_code for a in answers] == [504] * 6
    return statuses


def test_one_key_s_long_generations_never_take_the_provider_from_another(fake, start):
    guard, gateway = start()
    statuses = while_alice_calls(gateway, lambda: chat(gateway, "mallory", x_slow=True))
    assert statuses and set(statuses) == {200}
    assert breaker(gateway, "closed")
    # Each timed-out call is billed its prompt (the provider had it), and counted.
    prompt = prompt_tokens({"model": "gpt-4o", "messages": MESSAGES}, "openai", "gpt-4o")
    assert used(guard, "mallory", "gpt-4o") == 6 * prompt
    assert reserved(guard, "mallory", "gpt-4o") == 0
    line = 'usage_guard_gateway_upstream_timeouts_total{provider="openai",stage="total"} 6'
    assert line in gateway.metrics()


def test_streams_that_never_start_are_the_provider_s_failure_but_one_key_s_alone_open_nothing(
    fake, start
):
    guard, gateway = start(upstream_first_byte_seconds=1)

    def stalled(who: str) -> httpx.Response:
        return chat(gateway, who, x_slow=True, stream=True)

    statuses = while_alice_calls(gateway, lambda: stalled("mallory"))
    assert set(statuses) == {200} and breaker(gateway, "closed")
    line = 'usage_guard_gateway_upstream_timeouts_total{provider="openai",stage="first_byte"} 6'
    assert line in gateway.metrics()
    # A second key's stalled streams make them failures of more than one caller: it opens.
    with ThreadPoolExecutor(6) as pool:
        assert [r.status_code for r in pool.map(lambda _: stalled("bob"), range(6))] == [504] * 6
    assert breaker(gateway, "open")
    refused = chat(gateway, "alice")
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "provider_unavailable"

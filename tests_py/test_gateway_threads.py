"""The gateway's serving threads (`gateway.threads`): each has its own event loop and its own
upstream connections, calls on every thread share one budget, and a shutdown still waits
for a call whose client went away while the provider worked (it is billed, not dropped)."""

from __future__ import annotations

import time

import httpx
import pytest
import usage_guard as ug
from provider_support import reserved, used
from test_gateway import ALICE, MESSAGES, at_once_within_budget, gateway_policy


def start(fake_provider, threads: int, **kw) -> tuple[ug.Guard, ug.Gateway]:  # type: ignore[no-untyped-def]
    document = gateway_policy(fake_provider, **kw)
    document["gateway"]["threads"] = threads
    guard = ug.Guard(ug.Policy.from_dict(document))
    return guard, ug.Gateway(guard, "127.0.0.1:0")


@pytest.mark.parametrize("threads", [1, 3])
def test_calls_on_every_thread_share_one_budget(fake, threads):
    """Many connections at once (spread over the threads by whoever accepts first): what is
    billed stays within the budget and equals what the calls reported."""
    guard, gateway = start(fake, threads, tokens_a_day=900)
    fake.output_tokens = 200
    try:
        at_once_within_budget(guard, gateway, 24)
    finally:
        gateway.shutdown()
        assert gateway.wait(10)


def test_shutdown_waits_for_a_call_whose_client_went_away(fake):
    """The client gives up while the provider works; the gateway is then shut down. The call
    runs on to the provider's answer and is billed from its usage (a serving thread's event
    loop is not torn down under it)."""
    guard, gateway = start(fake, 2)
    fake.delay = 1.0
    with pytest.raises(httpx.TimeoutException):
        httpx.post(
            f"{gateway.url}/v1/chat/completions",
            headers={"authorization": f"Bearer {ALICE}"},
            json={"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 50},
            timeout=0.3,
        )
    assert reserved(guard, "alice", "gpt-4o") > 0
    gateway.shutdown()
    assert gateway.wait(10)
    deadline = time.monotonic() + 5
    while reserved(guard, "alice", "gpt-4o") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert used(guard, "alice", "gpt-4o") == 21 + 12
    assert reserved(guard, "alice", "gpt-4o") == 0


def test_threads_must_be_a_whole_number_in_range():
    for bad in (0, 257, 2.5, "2", True):
        with pytest.raises(ug.PolicyError) as e:
            ug.Policy.from_dict({"gateway": {"threads": bad}})
        assert "gateway.threads: must be a whole number from 1 to 256" in str(e.value)

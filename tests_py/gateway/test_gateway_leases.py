"""`usage-guard serve --lease-above`: the gateway leases the Model Total every call shares;
every call's use reaches the counter once, and SIGTERM gives the leases back."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from redis_harness import RedisServer
from serve_support import serve
from test_gateway import ALICE, MESSAGES, gateway_policy


def leased_policy(fake: FakeProvider) -> dict[str, Any]:
    document = gateway_policy(fake)
    document["limits"]["model_total"] = [
        {"model": "gpt-4o", "rules": [{"metric": "tokens", "amount": 10_000_000, "window": "day"}]}
    ]
    return document


def test_the_gateway_leases_the_model_total_and_gives_it_back_at_sigterm(
    fake: FakeProvider, redis_server: RedisServer, tmp_path: Path
) -> None:
    document = leased_policy(fake)
    args = ("--store", redis_server.url, "--slot-groups", "--lease-above", "0")
    with serve(document, tmp_path, args=args) as (proc, url):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=ALICE, max_retries=0, timeout=5)
        total = 0
        for _ in range(20):
            reply = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=20)
            assert reply.usage is not None
            total += reply.usage.total_tokens
        leases = redis_server.cli("--scan", "--pattern", "{ug:2:m:gpt-4o}:t:lease-*").split()
        assert leases, "the gateway took no lease"
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    store = ug.RedisStore(redis_server.url, "ug", slot_groups=True)
    watcher = ug.Guard(ug.Policy.from_dict(document), store=store)
    model = watcher.usage("alice", "gpt-4o")["ceilings"][0]
    assert (model["used"], model["reserved"]) == (total, 0)


@pytest.mark.parametrize("store", ["memory"])
def test_lease_above_without_a_redis_store_is_refused(store: str, tmp_path: Path) -> None:
    import subprocess

    path = tmp_path / "p.json"
    path.write_text('{"models": {"m": {"provider": "openai"}}}')
    command = [sys.executable, "-m", "usage_guard.cli", "serve", "--policy", str(path)]
    command += ["--store", store, "--lease-above", "0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--lease-above needs a Redis store" in done.stderr

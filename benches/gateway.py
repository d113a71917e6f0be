"""The gateway's added latency: the same chat completions sent straight to the fake provider
and through `usage-guard serve` in front of it (admission, fit, forward, relay, bill), at 1,
16 and 64 concurrent clients, plain and streamed. Prints p50/p99 of both and the difference.

Run: .venv/bin/python benches/gateway.py [--requests N]

The fake provider (tests_py/fake_provider.py) runs in its own process; the gateway runs in
this one on the crate's runtime (the in-memory store, a Direct Limit with a tokens and a
requests rule, no ledger); the clients are threads with one keep-alive connection each. All
three share this machine's cores, so the figures are an upper bound on what the gateway adds.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import usage_guard as ug

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-bench"
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Say hello."}]}
FAKE = """
import sys, time
sys.path.insert(0, {path!r})
from fake_provider import FakeProvider
f = FakeProvider()
# Without this, Python's server and the client wait on delayed ACKs (~40 ms a call).
f._server.RequestHandlerClass.disable_nagle_algorithm = True
f._server.socket.listen(256)  # socketserver's backlog of 5 resets 64 clients connecting at once
f.start()
print(f.port, flush=True)
time.sleep(3600)
"""


def policy(fake_url: str) -> ug.Policy:
    rules = [
        {"metric": "tokens", "amount": 10**12, "window": "day"},
        {"metric": "requests", "amount": 10**12, "window": "10 minutes"},
    ]
    return ug.Policy.from_dict(
        {
            "models": {"gpt-4o": {"provider": "openai", "max_output_tokens": 16384}},
            "limits": {"direct": [{"user": "alice", "model": "gpt-4o", "rules": rules}]},
            "settings": {"anonymous": "refuse"},
            "providers": {"openai": {"base_url": fake_url}},
            "gateway": {"keys": {"bench": {"key": KEY, "principal": "alice"}}},
        }
    )


def run(url: str, clients: int, per_client: int, stream: bool) -> list[float]:
    """Latencies (seconds) of `clients` × `per_client` calls (streamed: to the last byte)."""
    body = {**BODY, "stream": stream}
    headers = {"authorization": f"Bearer {KEY}"}

    def client(_: int) -> list[float]:
        out = []
        with httpx.Client(timeout=30) as http:
            for _ in range(per_client):
                start = time.perf_counter()
                with http.stream("POST", url, json=body, headers=headers) as r:
                    for _ in r.iter_bytes():
                        pass
                    assert r.status_code == 200, r.status_code
                out.append(time.perf_counter() - start)
        return out

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        return [t for ts in pool.map(client, range(clients)) for t in ts]


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--requests", type=int, default=1600, help="calls per run (default 1600)")
    n = args.parse_args().requests
    fake = subprocess.Popen(
        [sys.executable, "-c", FAKE.format(path=str(ROOT / "tests_py"))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert fake.stdout is not None
        fake_url = f"http://127.0.0.1:{fake.stdout.readline().strip()}"
        gateway = ug.Gateway(ug.Guard(policy(fake_url)), "127.0.0.1:0")
        rows: list[Any] = []
        for stream in (False, True):
            for clients in (1, 16, 64):
                per = max(5, n // clients)
                # warm both paths (connections, tokenizer)
                run(f"{fake_url}/v1/chat/completions", clients, 2, stream)
                run(f"{gateway.url}/v1/chat/completions", clients, 2, stream)
                started = time.perf_counter()
                direct = run(f"{fake_url}/v1/chat/completions", clients, per, stream)
                through = run(f"{gateway.url}/v1/chat/completions", clients, per, stream)
                rate = len(through) / (time.perf_counter() - started) * 2
                rows.append((stream, clients, direct, through, rate))
        gateway.shutdown()
        gateway.wait(30)
    finally:
        fake.kill()
        fake.wait()
    print(
        f"{'mode':8} {'clients':>7} {'calls/s':>8} {'direct p50':>11} {'p99':>8} "
        f"{'gateway p50':>12} {'p99':>8} {'added p50':>10} {'added p99':>10}"
    )
    for stream, clients, direct, through, rate in rows:
        d50, d99, g50, g99 = (pct(direct, 50), pct(direct, 99), pct(through, 50), pct(through, 99))
        print(
            f"{'stream' if stream else 'plain':8} {clients:>7} {rate:>8.0f} "
            f"{d50 * 1e3:>9.2f}ms {d99 * 1e3:>6.2f}ms {g50 * 1e3:>10.2f}ms {g99 * 1e3:>6.2f}ms "
            f"{(g50 - d50) * 1e3:>8.2f}ms {(g99 - d99) * 1e3:>8.2f}ms"
        )
    print("goal (issue 15): p99 added <= 1 ms at 500 calls/s; LiteLLM proxy: not installed here")
    return 0


if __name__ == "__main__":
    sys.exit(main())

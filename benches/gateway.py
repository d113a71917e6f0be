"""The gateway's added latency: the same chat completions sent straight to the fake provider,
through `usage-guard serve` in front of it (admission, fit, forward, relay, bill), and through
LiteLLM's proxy in front of the same fake provider when it is installed, at 1, 16 and 64
concurrent clients, plain and streamed, then paced at 500 calls/s (the issue's goal: p99
added <= 1 ms at 500 requests/s). Prints p50/p99 of each, what each proxy adds, and the
ratio of LiteLLM's addition to the gateway's.

Run: .venv/bin/python benches/gateway.py [--requests N] [--litellm PATH|none]

Python clients cannot hold 500 calls/s with sub-millisecond precision on two cores: the goal
itself is measured by benches/gateway_load.rs (open loop, a Rust client and a Rust fake
upstream; `make bench` runs both).

The fake provider (tests_py/fake_provider.py) runs in its own process; the gateway runs in
this one on the crate's runtime (the in-memory store, a Direct Limit with a tokens and a
requests rule, no ledger); LiteLLM's proxy (`litellm --config`, one uvicorn worker, a master
key, no database) in its own process; the clients are threads with one keep-alive connection
each. All share this machine's cores, so the figures are an upper bound on what each adds.
LiteLLM is looked for at --litellm, then $UG_BENCH_LITELLM, then the proxy venv the test
suite makes (`.venv-litellm-proxy`, pinned in tests_py/litellm-proxy-requirements.txt), then
`litellm` on PATH.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

import httpx
import usage_guard as ug

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-bench"
LITELLM_KEY = "sk-litellm-bench-7f3a9c2e5b1d4a8f"
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Say hello."}]}
PACED_RATE = 500
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
LITELLM_CONFIG = """
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: {fake_url}/v1
      api_key: sk-fake
general_settings:
  master_key: {key}
litellm_settings:
  telemetry: false
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


def call(http: httpx.Client, url: str, body: dict[str, Any], key: str) -> float:
    """One call's latency (seconds; streamed: to the last byte)."""
    start = time.perf_counter()
    with http.stream("POST", url, json=body, headers={"authorization": f"Bearer {key}"}) as r:
        for _ in r.iter_bytes():
            pass
        assert r.status_code == 200, r.status_code
    return time.perf_counter() - start


def run(url: str, key: str, clients: int, per_client: int, stream: bool) -> list[float]:
    """Latencies of `clients` × `per_client` calls, each client calling back to back."""
    body = {**BODY, "stream": stream}

    def client(_: int) -> list[float]:
        with httpx.Client(timeout=30) as http:
            return [call(http, url, body, key) for _ in range(per_client)]

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        return [t for ts in pool.map(client, range(clients)) for t in ts]


def paced(url: str, key: str, rate: int, seconds: float, stream: bool) -> tuple[list[float], float]:
    """Latencies of calls started at `rate` a second for `seconds` (open loop: 32 clients,
    each starting its calls on its share of the schedule), and the rate reached."""
    body = {**BODY, "stream": stream}
    clients, total = 32, int(rate * seconds)
    start = time.perf_counter() + 0.2
    lock, out = threading.Lock(), []

    def client(i: int) -> None:
        mine = []
        with httpx.Client(timeout=30) as http:
            for n in range(i, total, clients):
                wait = start + n / rate - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                mine.append(call(http, url, body, key))
        with lock:
            out.extend(mine)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, total / (time.perf_counter() - start)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def start_fake() -> tuple[subprocess.Popen[str], str]:
    fake = subprocess.Popen(
        [sys.executable, "-c", FAKE.format(path=str(ROOT / "tests_py"))],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert fake.stdout is not None
    return fake, f"http://127.0.0.1:{fake.stdout.readline().strip()}"


def find_litellm(given: Optional[str]) -> Optional[str]:
    if given == "none":
        return None
    suite_venv = ROOT / ".venv-litellm-proxy" / "bin" / "litellm"
    made = str(suite_venv) if suite_venv.exists() else None
    return given or os.environ.get("UG_BENCH_LITELLM") or made or shutil.which("litellm")


def start_litellm(binary: str, fake_url: str, port: int) -> subprocess.Popen[bytes]:
    """LiteLLM's proxy in front of the fake provider; returns once it answers."""
    config = Path(tempfile.mkdtemp()) / "litellm.yaml"
    config.write_text(LITELLM_CONFIG.format(fake_url=fake_url, key=LITELLM_KEY))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    args = [binary, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(
        args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=config.parent
    )
    for _ in range(240):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health/liveliness").status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"litellm exited with {proc.returncode}")
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("litellm did not answer within 120 s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def measure(targets: dict[str, tuple[str, str]], n: int, seconds: float) -> list[Any]:
    """Rows (mode, clients or "500/s", {target: (latencies, calls/s)})."""
    rows: list[Any] = []
    for stream in (False, True):
        for clients in (1, 16, 64):
            per = max(5, n // clients)
            got = {}
            for name, (url, key) in targets.items():
                run(url, key, clients, 2, stream)  # warm (connections, tokenizer)
                started = time.perf_counter()
                latencies = run(url, key, clients, per, stream)
                got[name] = (latencies, len(latencies) / (time.perf_counter() - started))
            rows.append((stream, str(clients), got))
        got = {
            name: paced(url, key, PACED_RATE, seconds, stream)
            for name, (url, key) in targets.items()
        }
        rows.append((stream, f"{PACED_RATE}/s", got))
    return rows


def report(rows: list[Any], proxies: list[str]) -> None:
    head = f"{'mode':7} {'clients':>7} {'direct p50':>10} {'p99':>7}"
    for p in proxies:
        head += f" | {p + ' calls/s':>16} {'p50':>7} {'p99':>7} {'added p50':>9} {'p99':>7}"
    if "litellm" in proxies:
        head += f" | {'litellm/gateway added p50':>25} {'p99':>6}"
    print(head)
    ms = 1e3
    for stream, clients, got in rows:
        direct = got["direct"][0]
        d50, d99 = pct(direct, 50), pct(direct, 99)
        mode = "stream" if stream else "plain"
        line = f"{mode:7} {clients:>7} {d50 * ms:>8.2f}ms {d99 * ms:>5.2f}ms"
        added = {}
        for p in proxies:
            lat, rate = got[p]
            p50, p99 = pct(lat, 50), pct(lat, 99)
            added[p] = (p50 - d50, p99 - d99)
            line += (
                f" | {rate:>16.0f} {p50 * ms:>5.2f}ms {p99 * ms:>5.2f}ms"
                f" {(p50 - d50) * ms:>7.2f}ms {(p99 - d99) * ms:>5.2f}ms"
            )
        if "litellm" in proxies:
            g, li = added["gateway"], added["litellm"]
            ratio = [f"{a / b:.1f}x" if b > 0 else "-" for a, b in zip(li, g)]
            line += f" | {ratio[0]:>25} {ratio[1]:>6}"
        print(line)


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--requests", type=int, default=1600, help="calls per run (default 1600)")
    args.add_argument("--seconds", type=float, default=4.0, help="seconds of each paced run")
    args.add_argument("--litellm", help="the litellm binary, or 'none' to leave it out")
    opts = args.parse_args()
    fake, fake_url = start_fake()
    litellm: Optional[subprocess.Popen[bytes]] = None
    why_not = ""
    try:
        gateway = ug.Gateway(ug.Guard(policy(fake_url)), "127.0.0.1:0")
        targets = {
            "direct": (f"{fake_url}/v1/chat/completions", KEY),
            "gateway": (f"{gateway.url}/v1/chat/completions", KEY),
        }
        binary = find_litellm(opts.litellm)
        if binary is None:
            why_not = "LiteLLM proxy: not installed (--litellm, $UG_BENCH_LITELLM, PATH)"
        else:
            port = free_port()
            try:
                litellm = start_litellm(binary, fake_url, port)
                url = f"http://127.0.0.1:{port}/v1/chat/completions"
                targets["litellm"] = (url, LITELLM_KEY)
            except (OSError, RuntimeError) as e:
                why_not = f"LiteLLM proxy: could not start {binary}: {e}"
        rows = measure(targets, opts.requests, opts.seconds)
        gateway.shutdown()
        gateway.wait(30)
    finally:
        if litellm is not None:
            litellm.kill()
            litellm.wait()
        fake.kill()
        fake.wait()
    report(rows, [t for t in targets if t != "direct"])
    print(
        f"goal (issue 15): gateway p99 added <= 1 ms at {PACED_RATE} calls/s: measured by "
        "benches/gateway_load.rs (open loop, Rust client and upstream); the Python clients' "
        f"{PACED_RATE}/s rows above are an upper bound"
    )
    if why_not:
        print(why_not)
    return 0


if __name__ == "__main__":
    sys.exit(main())

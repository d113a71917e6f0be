"""The admin JSON the dashboard draws, over HTTP: usage series from a seeded SQLite (and
PostgreSQL) ledger equal the ledger's own queries bucket by bucket, live counters equal
`Guard.usage` (holds included), refusals by reason equal the metrics, the page and assets
are served from the binary, the token is needed, and `usage-guard dashboard` serves a
library deployment on Redis with no model endpoints."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import usage_guard as ug
from postgres_harness import pg_url  # noqa: F401 (fixture)
from redis_harness import RedisServer

TOKEN = "adm-dashboard-test"
EVIL = '<img src=x onerror="window.__xss=1">'
START = "2026-11-30T08:00:00Z"
MODELS: dict[str, Any] = {
    "gpt-4o": {"provider": "openai", "prices": {"input": 2.5, "output": 10.0}},
    "gpt-4o-mini": {"provider": "openai", "prices": {"input": 0.15, "output": 0.6}},
}
POLICY: dict[str, Any] = {
    "models": MODELS,
    "teams": {"research": {"members": ["alice", "bob", EVIL]}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "gpt-4o",
                "rules": [
                    {"metric": "tokens", "amount": 100000, "window": "day"},
                    {"metric": "requests", "amount": 50, "window": "hour"},
                ],
            },
            {
                "user": "carol",
                "model": "gpt-4o",
                "rules": [{"metric": "requests", "amount": 0, "window": "day"}],
            },
        ],
        "team": [
            {
                "team": "research",
                "model": "gpt-4o-mini",
                "shared": [{"metric": "tokens", "amount": 1000000, "window": "day"}],
            }
        ],
    },
    "providers": {"openai": {"base_url": "http://127.0.0.1:9"}},
    "gateway": {
        "admin_token_env": "UG_DASHBOARD_TEST_TOKEN",
        "keys": {"carol-key": {"key": "sk-carol", "principal": "carol"}},
    },
}


def spend(guard: ug.Guard, user: str, model: str, n: int, inp: int, out: int) -> None:
    for _ in range(n):
        t = guard.admit(user, model, prompt_tokens=inp, max_tokens=out)
        assert t.bill(input_tokens=inp, output_tokens=out, wait=True) is not None


def seed(guard: ug.Guard, clock: Any = None) -> ug.Ticket:
    """Calls over two hours (three when a clock is given); returns a ticket still open."""
    spend(guard, "alice", "gpt-4o", 3, 1000, 200)
    spend(guard, "bob", "gpt-4o-mini", 2, 300, 50)
    spend(guard, EVIL, "gpt-4o-mini", 1, 10, 5)
    if clock is not None:
        clock.advance(hours=2)
    spend(guard, "alice", "gpt-4o", 2, 500, 100)
    spend(guard, "bob", "gpt-4o-mini", 1, 70, 30)
    held = guard.admit("alice", "gpt-4o", prompt_tokens=100, max_tokens=50)
    ledger = guard.ledger
    assert ledger is not None
    ledger.flush()
    return held


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("UG_DASHBOARD_TEST_TOKEN", TOKEN)
    return TOKEN


@pytest.fixture
def seeded(token: str, tmp_path: Path) -> Iterator[tuple[ug.Guard, ug.Gateway, ug.Ticket]]:
    """A gateway on a guard (manual clock) whose SQLite ledger holds the seeded calls."""
    clock = ug.ManualClock(START)
    ledger = ug.SqliteLedger(str(tmp_path / "usage.db"))
    guard = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ledger)
    held = seed(guard, clock)
    gateway = ug.Gateway(guard, "127.0.0.1:0")
    try:
        yield guard, gateway, held
    finally:
        held.release()
        gateway.shutdown()
        assert gateway.wait(10)


def get(gateway: ug.Gateway, path: str, token: str = TOKEN) -> Any:
    r = httpx.get(gateway.url + path, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    return r.json()


def counters_match_usage(counters: list[dict[str, Any]], guard: ug.Guard) -> int:
    """Every counter row equals what `Guard.usage` reads now; returns how many rules."""
    seen = 0
    for row in counters:
        view = guard.usage(row["principal"], row["model"])
        assert row["source"] == {"type": view["source"]["type"], "id": view["source"]["id"]}
        keys = ("metric", "window", "used", "reserved", "left")
        got = [tuple(r[k] for k in keys) for r in row["rules"]]
        want = [tuple(r[k] for k in keys) for r in view["rules"]]
        assert got == want, (row["principal"], row["model"])
        seen += len(got)
    return seen


def test_series_equal_the_ledgers_query_bucket_by_bucket(seeded: Any) -> None:
    guard, gateway, _ = seeded
    s = get(gateway, "/admin/usage/series?bucket=hour&group=user")
    # the manual clock is at 10:00: 24 whole hours ending with the one holding now
    assert (s["since"], s["until"]) == ("2026-11-29T11:00:00Z", "2026-11-30T11:00:00Z")
    assert len(s["t"]) == 24 and s["t"][1] - s["t"][0] == 3600
    assert [x["key"] for x in s["series"]] == [EVIL, "alice", "bob"]
    ledger = guard.ledger
    for i in range(len(s["t"])):
        since = f"2026-11-{29 + (11 + i) // 24}T{(11 + i) % 24:02d}:00:00Z"
        hour = ledger.query(since=since, until=_next(since), group_by=["user"])
        want = {g["user"]: (g["tokens"], g["cost_micros"], g["requests"]) for g in hour}
        for line in s["series"]:
            got = (line["tokens"][i], line["cost_micros"][i], line["requests"][i])
            assert got == want.get(line["key"], (0, 0, 0)), (line["key"], since)
    alice = next(x for x in s["series"] if x["key"] == "alice")
    assert sum(alice["tokens"]) == 3 * 1200 + 2 * 600 and sum(alice["requests"]) == 5
    totals = ledger.query(since=s["since"], until=s["until"], group_by=["user"])
    assert [(t["key"], t["tokens"], t["cost_micros"], t["requests"]) for t in s["totals"]] == [
        (g["user"], g["tokens"], g["cost_micros"], g["requests"]) for g in totals
    ]
    days = get(gateway, "/admin/usage/series?bucket=day&group=team")
    assert len(days["t"]) == 30 and days["until"] == "2026-12-01T00:00:00Z"
    assert [(x["key"], sum(x["requests"])) for x in days["series"]] == [("research", 4), (None, 5)]


def test_a_series_answers_the_50_groups_with_the_most_tokens(seeded: Any) -> None:
    # Every group used to get its lines: a ledger of 20,000 users made a 121 MB answer.
    guard, gateway, _ = seeded
    for i in range(60):
        spend(guard, f"u{i:02d}", "gpt-4o-mini", 1, 100 + i, 1)
    guard.ledger.flush()
    s = get(gateway, "/admin/usage/series?bucket=day&group=user")
    every = guard.ledger.query(since=s["since"], until=s["until"], group_by=["user"])
    largest = sorted(every, key=lambda g: -g["tokens"])[:50]
    assert s["groups"] == len(every) == 63
    kept = [g["user"] for g in every if g in largest]  # the ledger's order
    assert [x["key"] for x in s["series"]] == kept == [t["key"] for t in s["totals"]]
    assert kept[:3] == ["alice", "bob", "u12"] and EVIL not in kept and "u11" not in kept


def test_an_admin_body_is_not_read_without_the_token(seeded: Any) -> None:
    # The body was read (up to 2 MB) before the token was checked: anyone could make the
    # server hold memory, a connection at a time. A body sent in part is answered at once.
    _, gateway, _ = seeded
    host, port = gateway.url.removeprefix("http://").split(":")
    for path in ("/admin/policy", "/admin/keys/x"):
        with socket.create_connection((host, int(port)), timeout=5) as c:
            head = f"PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1500000\r\n\r\n"
            c.sendall(head.encode() + b"{" * 1000)
            assert c.recv(4096).startswith(b"HTTP/1.1 401"), path


def test_an_admin_token_set_with_blanks_around_it_signs_in(
    seeded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, gateway, _ = seeded
    monkeypatch.setenv("UG_DASHBOARD_TEST_TOKEN", f"  {TOKEN}\n")
    assert get(gateway, "/admin/refusals") is not None


def _next(since: str) -> str:
    day, hour = int(since[8:10]), int(since[11:13]) + 1
    return f"2026-11-{day + hour // 24}T{hour % 24:02d}:00:00Z"


def test_bad_series_arguments_are_400(seeded: Any) -> None:
    _, gateway, _ = seeded
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for query, words in [
        ("bucket=week", "accepted: hour, day"),
        ("group=day", "accepted: user, team, model"),
        ("since=yesterday", "ISO 8601"),
        ("bucket=hour&since=2020-01-01T00:00:00Z", "at most 1000 buckets"),
    ]:
        r = httpx.get(f"{gateway.url}/admin/usage/series?{query}", headers=auth)
        assert r.status_code == 400 and words in r.json()["error"], (query, r.text)


def test_counters_are_live_and_equal_guard_usage(seeded: Any) -> None:
    guard, gateway, held = seeded
    c = get(gateway, "/admin/dashboard/counters")
    pairs = [(r["principal"], r["model"]) for r in c["counters"]]
    assert pairs == [
        (EVIL, "gpt-4o-mini"),
        ("alice", "gpt-4o"),
        ("alice", "gpt-4o-mini"),
        ("bob", "gpt-4o-mini"),
        ("carol", "gpt-4o"),
    ]
    assert counters_match_usage(c["counters"], guard) == 6
    alice = c["counters"][1]["rules"]
    assert alice[0]["reserved"] == 150 and alice[0]["used"] == 4800
    assert alice[0]["resets_at"] == "2026-12-01T00:00:00Z"
    held.release()
    after = get(gateway, "/admin/dashboard/counters?user=alice")
    assert [r["model"] for r in after["counters"]] == ["gpt-4o", "gpt-4o-mini"]
    assert after["counters"][0]["rules"][0]["reserved"] == 0


def test_refusals_by_reason_equal_the_metrics(seeded: Any) -> None:
    guard, gateway, _ = seeded
    empty = get(gateway, "/admin/refusals")
    assert empty["by_reason"] == [] and empty["guard"]["refused"] == 0
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(2):
        r = httpx.post(
            gateway.url + "/v1/chat/completions",
            json=body,
            headers={"Authorization": "Bearer sk-carol"},
        )
        assert r.status_code == 429, r.text
    got = get(gateway, "/admin/refusals")
    m = re.search(
        r'usage_guard_refusals_total\{reason="(\w+)",limit_type="(\w+)"\} (\d+)',
        gateway.metrics(),
    )
    assert m is not None
    assert got["by_reason"] == [
        {"reason": m.group(1), "limit_type": m.group(2), "count": int(m.group(3))}
    ]
    assert got["by_reason"][0]["count"] == 2 and got["guard"]["refused"] == 2


def test_the_page_and_assets_come_from_the_binary_and_data_needs_the_token(seeded: Any) -> None:
    _, gateway, _ = seeded
    page = httpx.get(gateway.url + "/dashboard")
    assert page.status_code == 200 and "<title>usage-guard dashboard</title>" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["referrer-policy"] == "no-referrer"
    assert "http://" not in page.text and "https://" not in page.text
    uplot = httpx.get(gateway.url + "/dashboard/assets/uPlot.iife.min.js")
    assert uplot.status_code == 200 and "uPlot" in uplot.text
    assert uplot.headers["content-type"].startswith("text/javascript")
    assert "MIT" in httpx.get(gateway.url + "/dashboard/assets/uPlot.LICENSE").text
    assert httpx.get(gateway.url + "/dashboard/assets/nope.js").status_code == 404
    for path in ("/admin/usage/series", "/admin/dashboard/counters", "/admin/refusals"):
        assert httpx.get(gateway.url + path).status_code == 401
        bad = {"Authorization": "Bearer wrong"}
        assert httpx.get(gateway.url + path, headers=bad).status_code == 401


def test_usage_guard_dashboard_serves_a_library_deployment_on_redis(
    redis_server: RedisServer, token: str, tmp_path: Path
) -> None:
    unset_key = {"base_url": "http://127.0.0.1:9", "api_key_env": "UG_UNSET_KEY"}
    policy = dict(POLICY, providers={"openai": unset_key})
    (tmp_path / "policy.json").write_text(json.dumps(policy))
    db = tmp_path / "usage.db"
    # the application's guard: real clock, the shared Redis store, the ledger file
    app_ledger = ug.SqliteLedger(str(db))
    store = ug.RedisStore(redis_server.url)
    guard = ug.Guard(ug.Policy.from_dict(policy), store=store, ledger=app_ledger)
    held = seed(guard)
    proc = subprocess.Popen(
        [sys.executable, "-m", "usage_guard.cli", "dashboard", "--policy", "policy.json"]
        + ["--store", redis_server.url, "--ledger", f"sqlite:///{db}", "--listen", "127.0.0.1:0"],
        cwd=tmp_path,
        env={**os.environ, "UG_DASHBOARD_TEST_TOKEN": token},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"(http://\S+)/dashboard", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = m.group(1)
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.get(url + "/dashboard").status_code == 200
        assert httpx.post(url + "/v1/chat/completions", json={}).status_code == 404
        c = httpx.get(url + "/admin/dashboard/counters", headers=auth).json()
        # the dashboard's own guard reads the application's counters: the hold too
        assert counters_match_usage(c["counters"], guard) == 6
        assert c["counters"][1]["rules"][0]["reserved"] == 150
        s = httpx.get(url + "/admin/usage/series?group=model", headers=auth).json()
        want = app_ledger.query(since=s["since"], until=s["until"], group_by=["model"])
        assert [(t["key"], t["tokens"], t["requests"]) for t in s["totals"]] == [
            (g["model"], g["tokens"], g["requests"]) for g in want
        ]
        assert sum(t["requests"] for t in s["totals"]) == 9
    finally:
        held.release()
        proc.terminate()
        assert proc.wait(30) == 0
    assert proc.stderr is not None and token not in proc.stderr.read()


def test_usage_guard_dashboard_without_a_token_variable_exits_1(tmp_path: Path) -> None:
    (tmp_path / "policy.json").write_text('{"models": {"m": {"provider": "openai"}}}')
    (tmp_path / "usage.db").write_bytes(b"")
    run = subprocess.run(
        [sys.executable, "-m", "usage_guard.cli", "dashboard", "--policy", "policy.json"]
        + ["--ledger", "usage.db", "--listen", "127.0.0.1:0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert "admin_token_env" in run.stderr


def test_hourly_series_on_postgresql_equal_its_query(pg_url: Any, token: str) -> None:  # noqa: F811
    """The hour bucket is SQL of each dialect: PostgreSQL's agrees with its own query."""
    clock = ug.ManualClock(START)
    ledger = ug.PostgresLedger(pg_url())
    guard = ug.Guard(ug.Policy.from_dict(POLICY), clock=clock, ledger=ledger)
    held = seed(guard, clock)
    held.release()
    gateway = ug.Gateway(guard, "127.0.0.1:0", dashboard_only=True)
    try:
        s = get(gateway, "/admin/usage/series?bucket=hour&group=model")
        nonzero = {}
        for line in s["series"]:
            for i, tokens in enumerate(line["tokens"]):
                if tokens:
                    nonzero[(line["key"], s["t"][i])] = tokens
        eight, ten = 1796025600, 1796025600 + 7200  # 2026-11-30 08:00 and 10:00 UTC
        assert nonzero == {
            ("gpt-4o", eight): 3 * 1200,
            ("gpt-4o", ten): 2 * 600,
            ("gpt-4o-mini", eight): 2 * 350 + 15,
            ("gpt-4o-mini", ten): 100,
        }
        at_ten = ledger.query(since="2026-11-30T10:00:00Z", until="2026-11-30T11:00:00Z")
        assert sum(g["tokens"] for g in at_ten) == 1300
    finally:
        gateway.shutdown()
        assert gateway.wait(10)

"""docs/gateway.md runs as written: `usage-guard serve` (the real CLI, in its own process)
with the doc's policy in front of the fake provider; each `curl` command of the doc is run
and answers the status the doc gives; SIGTERM drains and exits 0 with the calls in the
ledger. This is the suite's curl smoke test."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_provider import FakeProvider

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "gateway.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, re.S)


def commands() -> list[tuple[str, int]]:
    """Each `curl` command of the doc (continuation lines joined) with the status after it."""
    found = []
    for block in blocks("sh"):
        text = block.replace("\\\n", " ")
        lines = text.splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"# → (\d{3})", line)
            if m:
                found.append((lines[i - 1].strip(), int(m.group(1))))
    return found


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str, FakeProvider, Path]]:
    fake = FakeProvider().start()
    policy = blocks("toml")[0].replace("https://api.openai.com", fake.url)
    (tmp_path / "policy.toml").write_text(policy)
    ledger = tmp_path / "usage.db"
    env = {**os.environ, "OPENAI_API_KEY": "sk-upstream-secret", "UG_ADMIN_TOKEN": "adm-doc"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "usage_guard.cli", "serve", "--policy", "policy.toml"]
        + ["--ledger", f"sqlite:///{ledger}", "--listen", "127.0.0.1:0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://\S+)", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        yield proc, m.group(1), fake, ledger
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        fake.stop()


def test_the_docs_policy_is_valid_and_its_commands_are_there():
    assert len(commands()) == 15
    assert any("stream" in c for c, _ in commands())


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_every_curl_command_answers_as_documented_and_sigterm_drains(served):
    proc, url, fake, ledger = served
    for command, status in commands():
        run = command.replace("http://127.0.0.1:8080", url) + " -o /dev/null -w '%{http_code}'"
        out = subprocess.run(
            ["bash", "-c", run],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "UG_ADMIN_TOKEN": "adm-doc"},
        )
        assert out.returncode == 0, (command, out.stderr)
        assert out.stdout.strip() == str(status), (command, out.stdout)
    # the two admitted chat calls (and the probe's one-token call) reached the provider with
    # the provider's key, not the caller's
    sent = [r for r in fake.requests if r.path == "/v1/chat/completions"]
    assert len(sent) == 3 and sent[-1].body["max_tokens"] == 1
    assert all(r.headers["authorization"] == "Bearer sk-upstream-secret" for r in sent)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert proc.stdout is not None and "stopped" in proc.stdout.read()
    with sqlite3.connect(ledger) as db:
        rows = db.execute(
            "SELECT user_id, model, input_tokens, output_tokens, metadata FROM usage_ledger"
        ).fetchall()
    assert sorted(r[:4] for r in rows) == sorted(
        [("alice", "gpt-4o", 21, 12)] * 2 + [("alice", "gpt-3.5-turbo-instruct", 21, 12)]
    )
    assert [r.body.get("max_tokens") for r in fake.requests if r.path == "/v1/completions"] == [20]
    meta = [json.loads(r[4]) for r in rows]
    assert all(m["key"] == "alice-laptop" and m["credential"] == "laptop" for m in meta)
    assert sorted(m["stream"] for m in meta) == [False, False, True]
    # and the keys never reached the logs
    assert proc.stderr is not None
    logged = proc.stderr.read()
    assert "sk-alice-laptop" not in logged and "sk-upstream-secret" not in logged
    assert "listening on" in logged

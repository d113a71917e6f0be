"""`usage-guard quota ...` and `usage-guard init --preset ...` on a SQLite ledger file."""

from __future__ import annotations

import json
from typing import Any

import pytest
from usage_guard.cli import main
from usage_guard.cli_quota import PRESETS


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_init_writes_and_stores_a_preset(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    db, out = str(tmp_path / "l.db"), str(tmp_path / "small.json")
    code, text = run(
        capsys, "init", "--preset", "small", "--out", out, "--ledger", db, "--assign", "role:member"
    )
    assert code == 0 and "stored preset-small, assigned to role:member" in text
    with open(out, encoding="utf-8") as f:
        assert json.load(f) == {"name": "preset-small", "limits": PRESETS["small"]}
    code, text = run(capsys, "quota", "--ledger", db, "--json", "list")
    listed = json.loads(text)
    assert [(p["name"], p["subjects"]) for p in listed] == [("preset-small", ["role:member"])]
    assert listed[0]["limits"]["ai.concurrency"] == {"limit": 2, "max_wait": 10, "max_queue": 100}


def test_quota_commands(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "l.db")
    run(capsys, "init", "--preset", "medium", "--out", str(tmp_path / "m.json"), "--ledger", db)
    q = ("quota", "--ledger", db)
    limits = json.dumps({"ai.tokens.total": {"limit": 100, "window": "day"}})
    assert run(capsys, *q, "create", "tiny", "--limits", limits)[0] == 0
    assert run(capsys, *q, "assign", "tiny", "user:alice")[0] == 0
    code, text = run(capsys, *q, "list")
    assert text.splitlines()[0].split() == ["POLICY", "LIMITS", "ASSIGNED", "TO"]
    assert "tiny" in text and "ai.tokens.total=100/day" in text and "user:alice" in text
    code, text = run(capsys, *q, "show", "tiny")
    assert code == 0 and "assigned to: user:alice" in text
    code, text = run(capsys, *q, "--json", "check", "user:alice", "ai.tokens.total", "101")
    assert code == 1 and json.loads(text)["reason"].startswith("quota_exceeded: user:alice")
    code, text = run(capsys, *q, "--json", "usage", "user:alice", "--dimension", "ai.tokens.total")
    assert json.loads(text)["ai.tokens.total"]["limit"] == 100
    code, text = run(capsys, *q, "delete", "tiny")
    assert code == 1 and "'tiny' is assigned to user:alice" in text
    code, text = run(capsys, *q, "assign", "tiny", "group:x")
    assert code == 1 and "'group' is not a subject type" in text
    code, text = run(capsys, *q, "show", "nope")
    assert code == 1 and "defined: preset-medium, tiny" in text


def test_the_off_switch_from_the_cli(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "l.db")
    run(capsys, "init", "--preset", "large", "--out", str(tmp_path / "l.json"), "--ledger", db)
    code, text = run(capsys, "quota", "--ledger", db, "disable")
    assert code == 0 and "enabled=False" in text
    code, text = run(capsys, "quota", "--ledger", db, "--json", "status")
    assert json.loads(text)["enabled"] is False
    code, text = run(capsys, "quota", "--ledger", db, "enable")
    assert "enabled=True" in text

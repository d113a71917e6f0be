"""`usage-guard quota ...` and `usage-guard init --preset ...` on a SQLite ledger file."""

from __future__ import annotations

import json
from typing import Any

import pytest
import usage_guard as ug
from usage_guard.cli import main
from usage_guard.cli.quota import PRESETS


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


def test_a_refused_check_says_what_was_asked_and_what_is_left(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "l.db")
    run(capsys, "init", "--preset", "small", "--out", str(tmp_path / "s.json"), "--ledger", db)
    q = ("quota", "--ledger", db)
    limits = json.dumps({"ai.tokens.total": {"limit": 100, "window": "day"}})
    run(capsys, *q, "create", "tiny", "--limits", limits)
    run(capsys, *q, "assign", "tiny", "user:alice")
    code, text = run(capsys, *q, "check", "user:alice", "ai.tokens.total", "500000")
    assert code == 1
    assert text.startswith(
        "refused: quota_exceeded: user:alice has 100 of 100 ai.tokens.total left this day; "
        "500,000 asked (resets 2026-"
    ), text
    code, text = run(capsys, *q, "--json", "check", "user:alice", "ai.tokens.total", "500000")
    answer = json.loads(text)
    assert (answer["asked"], answer["remaining"], answer["unit"]) == (500_000, 100, "tokens")
    code, text = run(capsys, *q, "check", "user:alice", "ai.tokens.total", "40")
    assert code == 0 and text.startswith("allowed: 40 ai.tokens.total fits; 100 left (resets ")
    # Cost in micro-dollars on the command line, dollars in the sentence.
    code, text = run(capsys, *q, "check", "user:alice", "ai.cost", "0.5")
    assert code == 1 and "0.5 is not whole; accepted: whole micro-dollars for ai.cost" in text


def test_create_reports_every_error_at_once(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "l.db")
    run(capsys, "init", "--preset", "small", "--out", str(tmp_path / "s.json"), "--ledger", db)
    bad = {
        "ai.rate": {"limit": -1, "window": "fortnight", "max_wait": 0, "bogus": 1},
        "ai.concurrency": {"limit": 2.5, "window": "day"},
        "ai.tokens": {"limit": 10, "window": "day"},
    }
    code, text = run(capsys, "quota", "--ledger", db, "create", "p", "--limits", json.dumps(bad))
    assert code == 1
    lines = text.splitlines()
    assert lines[0] == "error: 7 errors:", text
    for expected in (
        "limits['ai.rate']: 'bogus' is not a key; accepted: limit, max_queue, max_wait, "
        "on_rate, window",
        "limits['ai.rate'].limit: -1 must be a number >= 0",
        "limits['ai.rate'].window: 'fortnight' is not a window",
        "limits['ai.rate'].max_wait: 0 is not a wait",
        "limits['ai.concurrency'].limit: 2.5 must be a whole number",
        "limits['ai.concurrency'].window: ai.concurrency takes no window (got 'day')",
        "limits['ai.tokens']: dimension: 'ai.tokens' is not a dimension",
    ):
        assert any(line.startswith(expected) for line in lines[1:]), (expected, text)
    code, text = run(capsys, "quota", "--ledger", db, "--json", "list")
    assert [p["name"] for p in json.loads(text)] == ["preset-small"]  # nothing stored


def test_the_library_lists_every_error_too() -> None:
    q = ug.QuotaService(ug.Guard(ug.Policy.from_dict({"models": {}})), poll=False)
    with pytest.raises(ug.QuotaPolicyError) as refused:
        q.create_policy(" ", {"ai.rate": {"limit": 1}, "ai.cost": {"window": "day"}})
    assert refused.value.errors == [
        "name: ' ' is not a policy name; accepted: a non-empty string",
        "limits['ai.rate'].window: is required for ai.rate",
        "limits['ai.cost']: {'window': 'day'} must be a table with 'limit' (and 'window')",
    ]
    assert isinstance(refused.value, ValueError) and q.policies() == []


def test_create_takes_limits_from_a_file(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    db, preset = str(tmp_path / "l.db"), tmp_path / "quota-small.json"
    assert run(capsys, "init", "--preset", "small", "--out", str(preset))[0] == 0
    run(capsys, "init", "--preset", "medium", "--out", str(tmp_path / "m.json"), "--ledger", db)
    q = ("quota", "--ledger", db)
    # The document init wrote: its name is the policy's.
    code, text = run(capsys, *q, "create", "--limits", f"@{preset}")
    assert code == 0 and text.startswith("created preset-small: ai.tokens.total=2000000/month")
    # A file of limits alone, under the name given.
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"ai.rate": {"limit": 5, "window": "60s"}}), encoding="utf-8")
    code, text = run(capsys, *q, "create", "five", "--limits", f"@{bare}")
    assert code == 0 and "created five: ai.rate=5/60s" in text
    code, text = run(capsys, *q, "create", "x", "--limits", f"@{tmp_path / 'none.json'}")
    assert code == 1 and f"--limits: cannot read '{tmp_path / 'none.json'}'" in text
    bare.write_text("{not json", encoding="utf-8")
    code, text = run(capsys, *q, "create", "x", "--limits", f"@{bare}")
    assert code == 1 and f"--limits '{bare}': not JSON (Expecting property name" in text
    code, text = run(capsys, *q, "create", "--limits", '{"ai.rate": {"limit": 1, "window": "1m"}}')
    assert code == 1 and "name: give NAME, or @file.json of a document with a 'name'" in text


def test_init_and_assign_replace_a_policy_only_when_told(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    db, out = str(tmp_path / "l.db"), str(tmp_path / "s.json")
    run(capsys, "init", "--preset", "medium", "--out", str(tmp_path / "m.json"), "--ledger", db)
    q = ("quota", "--ledger", db)
    run(capsys, *q, "assign", "preset-medium", "role:member")
    init = ("init", "--preset", "small", "--out", out, "--ledger", db, "--assign", "role:member")
    code, text = run(capsys, *init)
    assert code == 1
    assert "role:member has the policy 'preset-medium' assigned; give --replace" in text
    code, text = run(capsys, *q, "--json", "list")
    assert [(p["name"], p["subjects"]) for p in json.loads(text)] == [
        ("preset-medium", ["role:member"])
    ], "nothing was changed"
    code, text = run(capsys, *init, "--replace")
    assert code == 0
    assert "stored preset-small, assigned to role:member (replacing preset-medium" in text
    # Again: the same preset on the same subject replaces nothing.
    code, text = run(capsys, *init)
    assert code == 0 and text.splitlines()[-1] == "stored preset-small, assigned to role:member"
    # quota assign asks the same.
    code, text = run(capsys, *q, "assign", "preset-medium", "role:member")
    assert code == 1 and "give --replace to assign 'preset-medium' in its place" in text
    code, text = run(capsys, *q, "assign", "preset-medium", "role:member", "--replace")
    assert code == 0 and text.strip() == (
        "assigned preset-medium to role:member (replacing preset-small)"
    )
    # A stored preset with other limits is overwritten only with --replace.
    run(capsys, *q, "unassign", "role:member")
    run(capsys, *q, "delete", "preset-small")
    limits = json.dumps({"ai.rate": {"limit": 1, "window": "60s"}})
    run(capsys, *q, "create", "preset-small", "--limits", limits)
    code, text = run(capsys, "init", "--preset", "small", "--out", out, "--ledger", db)
    assert code == 1 and "a policy 'preset-small' is stored already with other limits" in text
    code, text = run(capsys, "init", "--preset", "small", "--out", out, "--ledger", db, "--replace")
    assert code == 0 and "(replacing the limits of preset-small)" in text


def test_bad_input_and_unreachable_ledgers_are_errors_not_tracebacks(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "l.db")
    ug.SqliteLedger(db).flush()
    q = ("quota", "--ledger", db)
    twice = '{"ai.tokens.total": {"limit": 5, "window": "day"}, "ai.tokens.total": {"limit": 9}}'
    code, text = run(capsys, *q, "create", "dup", "--limits", twice)
    assert code == 1 and "'ai.tokens.total' is given twice in one JSON object" in text
    code, text = run(capsys, *q, "check", "user:alice", "ai.tokens.total", "inf")
    assert code == 1 and "amount: inf is not an amount" in text
    unreachable = "postgres://app:S3cret@127.0.0.1:1/usage"
    code, text = run(capsys, "quota", "--ledger", unreachable, "list")
    assert code == 1 and text.startswith("error: cannot connect") and "S3cret" not in text
    with pytest.raises(SystemExit):
        main(["audit", "--ledger", db, "--limit", "-1"])
    assert "'-1' is not a count" in capsys.readouterr().err
    # init checks before it stores: --assign without a ledger, an output it cannot write.
    code, text = run(capsys, "init", "--preset", "small", "--assign", "role:member")
    assert code == 1 and "--assign role:member: assigning needs --ledger" in text
    out = str(tmp_path / "missing" / "q.json")
    code, text = run(capsys, "init", "--preset", "small", "--out", out, "--ledger", db)
    assert code == 1 and "No such file or directory" in text
    assert run(capsys, *q, "--json", "list")[1].strip() == "[]"
    # A store that refuses (the name taken with other limits) leaves the file as it was.
    edited = tmp_path / "quota-small.json"
    edited.write_text("mine", encoding="utf-8")
    other = json.dumps({"ai.tokens.total": {"limit": 1, "window": "day"}})
    assert run(capsys, *q, "create", "preset-small", "--limits", other)[0] == 0
    code, text = run(capsys, "init", "--preset", "small", "--out", str(edited), "--ledger", db)
    assert code == 1 and "nothing was changed" in text
    assert edited.read_text(encoding="utf-8") == "mine"


def test_a_refusal_names_a_subject_whose_id_has_a_space(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "l.db")
    ug.SqliteLedger(db).flush()
    q = ("quota", "--ledger", db)
    limits = json.dumps({"ai.tokens.total": {"limit": 5, "window": "day"}})
    assert run(capsys, *q, "create", "p", "--limits", limits)[0] == 0
    assert run(capsys, *q, "assign", "p", "team:data science")[0] == 0
    code, text = run(capsys, *q, "--json", "check", "team:data science", "ai.tokens.total", "10")
    assert json.loads(text)["reason"].startswith("quota_exceeded: team:data science has 5")


def test_a_stores_url_password_is_not_echoed() -> None:
    with pytest.raises(ValueError) as caught:
        ug.RedisStore("redis://:S3cretPw#1@127.0.0.1:6379/0")
    assert "S3cretPw" not in str(caught.value) and "redis://:***@127.0.0.1" in str(caught.value)
    with pytest.raises(ValueError) as caught:
        ug.RedisStore.cluster(["redis://u:S3cretPw@127.0.0.1:99999"])
    assert "S3cretPw" not in str(caught.value)

"""`--ledger` URLs read as SQLAlchemy reads them: `sqlite:///rel.db` from the working
directory, `sqlite:////abs.db` absolute, `sqlite://` in memory; every other form is an error
naming the URL, and a missing file or directory names the file that was meant."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug
from usage_guard.cli import main
from usage_guard.ledger_url import open_ledger, sqlite_path

POLICY: dict[str, Any] = {
    "models": {"gpt-5": {"provider": "openai", "prices": {"input": 1.0, "output": 2.0}}},
    "limits": {"platform": {"rules": [{"metric": "requests", "amount": 100, "window": "day"}]}},
}


def ledger_with_one_call(path: Path) -> None:
    guard = ug.Guard(ug.Policy.from_dict(POLICY), ledger=ug.SqliteLedger(str(path)))
    guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=5).bill(
        input_tokens=10, output_tokens=5
    )
    guard.close()


def usage_json(capsys: pytest.CaptureFixture[str], url: str) -> tuple[int, str]:
    code = main(["usage", "--ledger", url, "--group-by", "user", "--json"])
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///usage.db", "usage.db"),
        ("sqlite:///data/usage.db", "data/usage.db"),
        ("sqlite:////var/lib/usage.db", "/var/lib/usage.db"),
        ("sqlite://", ":memory:"),
        ("sqlite:///:memory:", ":memory:"),
        ("usage.db", "usage.db"),
        ("/var/lib/usage.db", "/var/lib/usage.db"),
    ],
)
def test_sqlite_urls_follow_sqlalchemy(url: str, path: str) -> None:
    assert sqlite_path(url) == path


def test_three_slashes_open_the_file_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger_with_one_call(tmp_path / "usage.db")
    monkeypatch.chdir(tmp_path)
    code, out = usage_json(capsys, "sqlite:///usage.db")
    assert code == 0, out
    assert [(r["user"], r["requests"]) for r in map(json.loads, out.splitlines())] == [("alice", 1)]
    # Four slashes: the absolute path, from anywhere.
    monkeypatch.chdir("/")
    code, out = usage_json(capsys, f"sqlite:///{tmp_path / 'usage.db'}")
    assert code == 0 and json.loads(out)["requests"] == 1, out


def test_a_missing_ledger_names_the_file_meant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out = usage_json(capsys, "sqlite:///nope.db")
    assert code == 2
    assert f"no ledger at 'nope.db' (from 'sqlite:///nope.db'), that is '{tmp_path}/nope.db'" in out
    assert not (tmp_path / "nope.db").exists(), "reading must not create an empty ledger"


def test_serve_creates_the_file_but_not_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    open_ledger("sqlite:///new.db", create=True).close()
    assert (tmp_path / "new.db").is_file() and not os.path.exists("/new.db")
    with pytest.raises(FileNotFoundError) as missing:
        open_ledger("sqlite:///no/such/dir/new.db", create=True)
    message = str(missing.value)
    assert f"no directory '{tmp_path}/no/such/dir'" in message
    assert "'no/such/dir/new.db' (from 'sqlite:///no/such/dir/new.db')" in message
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("sqlite://host/usage.db", "a SQLite URL has no host (got 'host')"),
        ("sqlite:usage.db", "a SQLite URL starts with sqlite:///"),
        ("sqlite::memory:", "a SQLite URL starts with sqlite:///"),
        ("sqlite:///usage.db?mode=ro", "SQLite URLs take no query parameters"),
        ("mysql://db/usage", "'mysql' is not a ledger scheme"),
    ],
)
def test_other_forms_are_refused_naming_the_url(url: str, why: str) -> None:
    with pytest.raises(ValueError) as refused:
        open_ledger(url, create=True)
    assert str(refused.value).startswith(f"--ledger {url!r}: {why}")
    assert "accepted: sqlite:///relative.db (from the working directory)" in str(refused.value)


def test_the_cli_says_what_it_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = usage_json(capsys, "sqlite://host/usage.db")
    assert code == 2 and "a SQLite URL has no host" in out

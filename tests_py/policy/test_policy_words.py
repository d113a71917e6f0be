"""One window syntax everywhere a window is written (issue 32, item 2), errors that suggest
the word meant (item 6), and a team budget that applies or says why not (issue 31, item 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug
from usage_guard.cli import main
from usage_guard.quota.model import check_limits, compile_rules

MODELS = {
    "gpt-4o": {"provider": "openai", "prices": {"input": 2.5, "output": 10.0}},
    "gpt-4o-mini": {"provider": "openai", "prices": {"input": 0.15, "output": 0.6}},
}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(
        [sys.executable, "-m", "usage_guard.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def errors_of(document: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ug.PolicyError) as e:
        ug.Policy.from_dict(document)
    return {err["path"]: err["message"] for err in e.value.errors}


def direct(window: str, amount: int = 2, metric: str = "requests") -> dict[str, Any]:
    return {
        "models": MODELS,
        "limits": {
            "direct": [
                {
                    "user": "alice",
                    "model": "gpt-4o",
                    "rules": [{"metric": metric, "amount": amount, "window": window}],
                }
            ]
        },
        "settings": {"anonymous": "refuse"},
    }


def generic(window: Any, budget: int = 2) -> dict[str, Any]:
    return {
        "models": MODELS,
        "rules": [{"name": "r", "amount": "requests", "budget": budget, "window": window}],
        "settings": {"anonymous": "refuse"},
    }


def spend(guard: ug.Guard, n: int = 1) -> None:
    for _ in range(n):
        guard.admit("alice", "gpt-4o", prompt_tokens=1, max_tokens=1).bill(
            input_tokens=1, output_tokens=1
        )


def refused(guard: ug.Guard) -> bool:
    try:
        guard.admit("alice", "gpt-4o", prompt_tokens=1, max_tokens=1).release()
    except ug.UsageLimitError:
        return True
    return False


# --------------------------------------------------------------- one window syntax


SLIDING_24H = ["1d", "1 day", "24h", "24 hours", "86400s", "1440m", "1440 minutes"]


@pytest.mark.parametrize("make", [direct, generic], ids=["limit kinds", "generic rules"])
@pytest.mark.parametrize("window", SLIDING_24H)
def test_every_24_hour_form_is_the_same_sliding_window(
    make: Any, window: str, clock: ug.ManualClock
) -> None:
    guard = ug.Guard(ug.Policy.from_dict(make(window)), clock=clock)
    spend(guard, 2)
    assert refused(guard)
    # A calendar day would reset at midnight (16 h on); a sliding 24 h still counts them.
    clock.advance(hours=16)
    assert refused(guard)
    clock.advance(days=2)
    assert not refused(guard)


@pytest.mark.parametrize("make", [direct, generic], ids=["limit kinds", "generic rules"])
def test_day_is_the_calendar_day(make: Any, clock: ug.ManualClock) -> None:
    guard = ug.Guard(ug.Policy.from_dict(make("day")), clock=clock)
    spend(guard, 2)
    assert refused(guard)
    clock.advance(hours=16)  # 08:00 + 16 h: past midnight UTC
    assert not refused(guard)


@pytest.mark.parametrize(
    ("window", "seconds"),
    [
        ("minute", 60),
        ("60s", 60),
        ("10m", 600),
        ("10 minutes", 600),
        ("2w", 1_209_600),
        ("2 weeks", 1_209_600),
        ("30d", 2_592_000),
        ("30 days", 2_592_000),
        ("hour", 3600),
    ],
)
def test_short_and_word_forms_read_alike(window: str, seconds: int) -> None:
    word = ug._core._window_word(window)
    assert word == ug._core._window_word(f"{seconds} seconds")
    ug.Policy.from_dict(direct(window))
    ug.Policy.from_dict(generic(window))


@pytest.mark.parametrize(
    ("window", "why"),
    [
        ("1 month", 'a month has no fixed length, so it cannot slide; write "month"'),
        ("2 years", '"365 days" for a sliding 365 days'),
        ("0m", "a window of 0 counts nothing"),
        ("daily", 'did you mean "day"?'),
        ("10 mins", 'did you mean "10 minutes"?'),
        ("Day", 'did you mean "day"? window words are lower case'),
    ],
)
def test_what_is_no_window_says_why_everywhere(window: str, why: str) -> None:
    for make in (direct, generic):
        [message] = errors_of(make(window)).values()
        assert why in message and "accepted: day, week, month, year (calendar, UTC)" in message
    with pytest.raises(ValueError) as e:
        check_limits({"ai.rate": {"limit": 1, "window": window}})
    assert why in str(e.value) and str(e.value).startswith(f"limits['ai.rate'].window: {window!r}")


@pytest.mark.parametrize("window", ["minute", "10 minutes", "1 day", "60s", "30d", "week"])
def test_quota_policies_take_every_form(window: str, clock: ug.ManualClock, tmp_path: Path) -> None:
    limits = check_limits({"ai.rate": {"limit": 1, "window": window, "on_rate": "reject"}})
    [rule] = compile_rules([("user", "alice", limits)])[1:]
    assert rule["window"] == window
    guard = ug.Guard(
        ug.Policy.from_dict({"models": MODELS}),
        clock=clock,
        ledger=ug.SqliteLedger(str(tmp_path / "l.db")),
    )
    quotas = ug.QuotaService(guard, clock=clock, poll=False)
    quotas.create_policy("p", limits)
    quotas.assign("p", "user:alice")
    assert quotas.check("user:alice", "ai.rate", 1).allowed
    quotas.record("user:alice", "ai.rate", 1, request_id="one")
    assert not quotas.check("user:alice", "ai.rate", 1).allowed
    # `usage` takes any spelling of the limit's window.
    other = {
        "minute": "60s",
        "10 minutes": "10m",
        "1 day": "24h",
        "60s": "1 minute",
        "30d": "30 days",
        "week": "week",
    }[window]
    assert quotas.usage("user:alice", "ai.rate", other)["used"] == 1
    quotas.close()
    guard.close()


def test_the_cli_takes_every_form(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "l.db")
    main(["init", "--preset", "small", "--out", str(tmp_path / "s.json"), "--ledger", db])
    for name, window in (("a", "10 minutes"), ("b", "1d"), ("c", "minute"), ("d", "30d")):
        limits = json.dumps({"ai.rate": {"limit": 5, "window": window}})
        assert main(["quota", "--ledger", db, "create", name, "--limits", limits]) == 0
    capsys.readouterr()
    bad = json.dumps({"ai.rate": {"limit": 5, "window": "1 month"}})
    assert main(["quota", "--ledger", db, "create", "e", "--limits", bad]) == 1
    assert "a month has no fixed length" in "".join(capsys.readouterr())


def test_check_notes_that_a_numbered_day_slides(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(direct("1d")))
    done = run_cli("check", "--strict", str(path))
    assert done.returncode == 0, done.stdout  # a note is not a warning
    assert (
        "note: limits.direct[0].rules[0].window: is a sliding window of 1 day (the last 1 day "
        'at each call), not the calendar day: write "day" for the calendar day (from 00:00 UTC) '
        '(got "1d")'
    ) in done.stdout.splitlines()
    assert ug.Policy.from_dict(direct("day")).notes == []


# --------------------------------------------------------------- errors that suggest


@pytest.mark.parametrize(
    ("document", "path", "suggestion"),
    [
        ({"setting": {}}, "setting", '"settings"'),
        (direct("day", metric="token"), "limits.direct[0].rules[0].metric", '"tokens"'),
        (direct("daily"), "limits.direct[0].rules[0].window", '"day"'),
        (
            {
                "models": MODELS,
                "limits": {"direct": [{"user": "a", "modle": "gpt-4o", "rules": []}]},
            },
            "limits.direct[0].modle",
            '"model"',
        ),
        (
            {
                **generic("day"),
                "rules": [{**generic("day")["rules"][0], "applies_when": {"modle": "x"}}],
            },
            "rules[0].applies_when.modle",
            '"model"',
        ),
        ({"models": {"m": {"provider": "openia"}}}, "models.m.provider", '"openai"'),
        ({"models": {"m": {"prise": {}}}}, "models.m.prise", '"prices"'),
        ({"settings": {"unknown_models": "refuze"}}, "settings.unknown_models", '"refuse"'),
        ({"settings": {"mode": "Shadow"}}, "settings.mode", '"shadow"'),
        ({"settings": {"fail_open": ["cots"]}}, "settings.fail_open[0]", '"cost"'),
        (
            {**generic("day"), "rules": [{**generic("day")["rules"][0], "action": "blok"}]},
            "rules[0].action",
            '"block"',
        ),
        (
            {**generic("day"), "rules": [{**generic("day")["rules"][0], "amount": "request"}]},
            "rules[0].amount",
            '"requests"',
        ),
        (
            generic({"kind": "rolling", "count": 2, "unit": "minuts"}),
            "rules[0].window.unit",
            '"minutes"',
        ),
        (
            direct("day") | {"models": {"GPT-4o": MODELS["gpt-4o"]}},
            "limits.direct[0].model",
            '"GPT-4o"',
        ),
    ],
)
def test_an_unknown_word_gets_the_nearest_accepted_one(
    document: dict[str, Any], path: str, suggestion: str
) -> None:
    message = errors_of(document)[path]
    assert f"(did you mean {suggestion}?)" in message, message
    assert "accepted:" in message or "defined models:" in message


def test_far_words_and_near_ids_get_no_guess() -> None:
    assert "did you mean" not in errors_of(direct("fortnight"))["limits.direct[0].rules[0].window"]
    doc = direct("day")
    doc["limits"]["direct"][0]["model"] = "gpt-4"  # near gpt-4o, but another model
    assert "did you mean" not in errors_of(doc)["limits.direct[0].model"]


# --------------------------------------------------------------- a team budget applies


def team_total_alone() -> dict[str, Any]:
    return {
        "models": MODELS,
        "teams": {"eng": {"members": ["alice", "bob"]}},
        "limits": {
            "team_total": [
                {"team": "eng", "rules": [{"metric": "cost", "amount": 1.0, "window": "month"}]}
            ]
        },
        "settings": {"anonymous": "refuse"},
    }


def test_a_team_total_with_no_team_limit_is_refused_showing_the_rule_meant(
    tmp_path: Path, clock: ug.ManualClock
) -> None:
    message = errors_of(team_total_alone())["limits.team_total[0]"]
    assert "no [[limits.team]] bills eng, so it would never apply" in message
    assert (
        '[[rules]] name = "eng total", applies_when = { team = "eng" }, amount = "cost", '
        'budget = 1, window = "month"'
    ) in message
    path = tmp_path / "p.json"
    path.write_text(json.dumps(team_total_alone()))
    done = run_cli("check", "--strict", str(path))
    assert done.returncode == 1 and "limits.team_total[0]: a team_total counts only" in done.stdout
    # The rule shown does what the author meant: every member's calls, on every model.
    meant = team_total_alone()
    del meant["limits"]
    meant["rules"] = [
        {
            "name": "eng total",
            "applies_when": {"team": "eng"},
            "amount": "cost",
            "budget": 1.0,
            "window": "month",
        }
    ]
    guard = ug.Guard(ug.Policy.from_dict(meant), clock=clock)
    calls = [("alice", "gpt-4o", 100_000, 50_000), ("bob", "gpt-4o-mini", 1_000_000, 0)]
    calls.append(("alice", "gpt-4o-mini", 1_000_000, 0))
    for user, model, input_tokens, output_tokens in calls:  # $0.75, $0.15, $0.15: past $1
        guard.admit(user, model, prompt_tokens=10, max_tokens=10).bill(
            input_tokens=input_tokens, output_tokens=output_tokens
        )
    with pytest.raises(ug.UsageLimitError) as e:
        guard.admit("bob", "gpt-4o", prompt_tokens=10, max_tokens=10)
    assert e.value.limit_type == "rule"
    # Someone outside the team is not counted.
    guard.admit("carol", "gpt-4o", prompt_tokens=10, max_tokens=10).release()


def test_a_team_total_beside_its_team_limit_stays_valid() -> None:
    doc = team_total_alone()
    doc["limits"]["team"] = [
        {
            "team": "eng",
            "model": "gpt-4o",
            "shared": [{"metric": "tokens", "amount": 9, "window": "day"}],
        }
    ]
    ug.Policy.from_dict(doc)


def test_a_sliding_window_after_a_burst_at_its_bucket_end(clock: ug.ManualClock) -> None:
    """What policy.md says a sliding window lets through at worst: the whole amount in the
    last second of a bucket, then a call every second while it admits one. Within the
    window's length just under twice the amount pass, within half of it about 1.5 times; a
    calendar window would let the second amount through at once."""
    guard = ug.Guard(ug.Policy.from_dict(direct("10 minutes", amount=10)), clock=clock)
    clock.advance(seconds=599)  # 08:09:59, the last second of the 08:00 bucket
    spend(guard, 10)
    admitted = [0] * 10  # seconds after the burst
    for second in range(1, 600):
        clock.advance(seconds=1)
        if not refused(guard):
            spend(guard)
            admitted.append(second)
    assert 10 < len(admitted) < 20, admitted
    half = max(sum(1 for s in admitted if start <= s < start + 300) for start in range(300))
    assert half <= 15, admitted

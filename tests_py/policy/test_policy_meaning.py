"""Policies that say what they mean: no limit that grants what it seems to deny, warnings for
what can be meant, and calls with no user counted as the policy chooses (issue 11, 5 and 6)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from usage_guard.openai import GuardedOpenAI

GPT5: dict[str, Any] = {
    "display_name": "GPT-5",
    "provider": "openai",
    "max_output_tokens": 128000,
    "prices": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
}
WINDOWS = (
    "day, week, month, year (calendar, UTC); minute, hour, or a number and a unit: "
    '"10 minutes", "24 hours", "30 days", "2 weeks", or short: "60s", "10m", "24h", "30d", '
    '"2w" (sliding)'
)
ANONYMOUS_UNSET = (
    "settings.anonymous",
    "",
    "is not set, so calls with no user (user=None) run with no limits; set it to "
    '"unlimited" to mean that, "refuse", or a user id to count them as',
)


def rule(**fields: Any) -> dict[str, Any]:
    return {"metric": "tokens", "amount": 1000, "window": "day", **fields}


def doc(limits: Any = None, **top: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "models": {"gpt-5": copy.deepcopy(GPT5)},
        "teams": {"research": {"members": ["alice", "bob"]}},
    }
    if limits is not None:
        d["limits"] = limits
    d.update(top)
    return d


def errors_of(document: Any) -> list[tuple[str, str, str]]:
    with pytest.raises(ug.PolicyError) as info:
        ug.Policy.from_dict(document)
    return [(e["path"], e["value"], e["message"]) for e in info.value.errors]


def warnings_of(policy: ug.Policy) -> list[tuple[str, str, str]]:
    return [(w["path"], w["value"], w["message"]) for w in policy.warnings]


# --- limits that grant what they seem to deny ----------------------------------------------


NO_RULES = (
    "must list at least one rule: a limit with no rules limits nothing (remove the limit to "
    "leave its calls to the next source)"
)


def test_a_limit_with_an_empty_rule_list_is_an_error() -> None:
    # mallory with `rules = []` next to a 150 tokens/day public limit was unlimited.
    document = doc(
        {
            "direct": [{"user": "mallory", "model": "gpt-5", "rules": []}],
            "public": [{"model": "gpt-5", "each_person": [rule(amount=150)]}],
            "model_total": [{"model": "gpt-5", "rules": []}],
            "platform": {"rules": []},
        }
    )
    assert errors_of(document) == [
        ("limits.direct[0].rules", "[]", NO_RULES),
        ("limits.model_total[0].rules", "[]", NO_RULES),
        ("limits.platform.rules", "[]", NO_RULES),
    ]


def test_a_team_or_public_limit_with_no_rules_is_an_error() -> None:
    document = doc(
        {
            "team": [
                {"team": "research", "model": "gpt-5"},
            ],
            "public": [{"model": "gpt-5", "shared": [], "each_person": []}],
        }
    )
    assert errors_of(document) == [
        (
            "limits.team[0]",
            "",
            "lists no rules: give shared or each_member at least one rule (a limit with no "
            "rules limits nothing)",
        ),
        (
            "limits.public[0]",
            "",
            "lists no rules: give shared or each_person at least one rule (a limit with no "
            "rules limits nothing)",
        ),
    ]
    # One of the two lists is enough.
    ug.Policy.from_dict(
        doc({"team": [{"team": "research", "model": "gpt-5", "each_member": [rule()]}]})
    )


def test_a_key_given_twice_in_json_is_an_error_with_its_path(tmp_path: Path) -> None:
    text = (
        '{"models": {"gpt-5": {"provider": "openai", "provider": "openai"}},'
        ' "limits": {"direct": [{"user": "mallory", "model": "gpt-5", "rules": ['
        '{"metric": "tokens", "amount": 150, "window": "day"}]}]},'
        ' "limits": {"platform": {"rules": '
        '[{"metric": "requests", "amount": 9, "window": "hour"}]}},'
        ' "settings": {"margin": 5}}'
    )
    twice = "is given twice in one table; JSON parsers keep only the last, so give it once"
    expected = [
        ("models.gpt-5.provider", "", twice),
        ("limits", "", twice),
        ("settings.margin", "5", "must be a fraction from 0 up to (not including) 1"),
    ]
    with pytest.raises(ug.PolicyError) as info:
        ug.Policy.from_json(text)
    assert [(e["path"], e["value"], e["message"]) for e in info.value.errors] == expected
    path = tmp_path / "twice.json"
    path.write_text(text)
    with pytest.raises(ug.PolicyError) as info:
        ug.Policy.load(path)
    assert [(e["path"], e["value"], e["message"]) for e in info.value.errors] == expected
    # Deep in a list, too; the same key in two different tables is fine.
    deep = (
        '{"limits": {"user_total": [{"user": "a", "user": "b", "rules": '
        '[{"metric": "tokens", "amount": 1, "window": "day"}]}]}}'
    )
    with pytest.raises(ug.PolicyError) as info:
        ug.Policy.from_json(deep)
    assert [e["path"] for e in info.value.errors] == ["limits.user_total[0].user"]
    ug.Policy.from_json(
        json.dumps(doc({"direct": [{"user": "a", "model": "gpt-5", "rules": [rule()]}]}))
    )


def test_a_blank_model_or_team_id_is_an_error() -> None:
    document = doc(models={"": copy.deepcopy(GPT5), "  ": {}}, teams={"": {"members": ["a"]}})
    assert errors_of(document) == [
        ('models.""', "", "a model id must not be empty or blank"),
        ('models."  "', "", "a model id must not be empty or blank"),
        ('teams.""', "", "a team id must not be empty or blank"),
    ]


@pytest.mark.parametrize(
    ("window", "message"),
    [
        ("minutes", f'is not a window (it needs a number: "10 minutes"); accepted: {WINDOWS}'),
        ("hours", f'is not a window (it needs a number: "10 hours"); accepted: {WINDOWS}'),
        (
            "Day",
            f'is not a window (did you mean "day"? window words are lower case, with no spaces '
            f"around them); accepted: {WINDOWS}",
        ),
        (
            "10 Minutes",
            f'is not a window (did you mean "10 minutes"? window words are lower case, with no '
            f"spaces around them); accepted: {WINDOWS}",
        ),
        (
            " day",
            f'is not a window (did you mean "day"? window words are lower case, with no spaces '
            f"around them); accepted: {WINDOWS}",
        ),
        ("second", f'is not a window (write "1 second" or "1s"); accepted: {WINDOWS}'),
    ],
)
def test_window_words_are_exact(window: str, message: str) -> None:
    document = doc({"direct": [{"user": "a", "model": "gpt-5", "rules": [rule(window=window)]}]})
    assert errors_of(document) == [
        ("limits.direct[0].rules[0].window", json.dumps(window), message)
    ]


def test_window_words_that_are_accepted() -> None:
    for window in ("minute", "hour", "1 minute", "10 minutes", "2 hours", "30 seconds", "day"):
        document = doc(
            {"direct": [{"user": "a", "model": "gpt-5", "rules": [rule(window=window)]}]}
        )
        ug.Policy.from_dict(document)


def test_a_cost_amount_that_rounds_to_zero_is_an_error() -> None:
    document = doc(
        {"direct": [{"user": "a", "model": "gpt-5", "rules": [rule(metric="cost", amount=4e-7)]}]}
    )
    assert errors_of(document) == [
        (
            "limits.direct[0].rules[0].amount",
            "4e-7",
            "rounds to $0: cost is counted in whole micro-dollars, so the least amount is "
            "0.000001 (write 0 to refuse every call on purpose)",
        )
    ]
    # Half a micro-dollar and more rounds to one: accepted, and counted as 1.
    ug.Policy.from_dict(
        doc(
            {
                "direct": [
                    {"user": "a", "model": "gpt-5", "rules": [rule(metric="cost", amount=6e-7)]}
                ]
            }
        )
    )


def test_an_amount_of_zero_is_a_warning() -> None:
    document = doc(
        {
            "direct": [
                {
                    "user": "a",
                    "model": "gpt-5",
                    "rules": [rule(metric="cost", amount=0), rule(metric="requests", amount=0)],
                }
            ]
        },
        settings={"anonymous": "unlimited"},
    )
    policy = ug.Policy.from_dict(document)
    zero = "is 0: every call this rule counts is refused"
    assert warnings_of(policy) == [
        ("limits.direct[0].rules[0].amount", "0", zero),
        ("limits.direct[0].rules[1].amount", "0", zero),
    ]
    assert ug.Policy.from_dict(doc({}, settings={"anonymous": "refuse"})).warnings == []


def test_anonymous_left_unset_is_a_warning_when_the_policy_limits_anything() -> None:
    limited = doc({"platform": {"rules": [rule()]}})
    assert warnings_of(ug.Policy.from_dict(limited)) == [ANONYMOUS_UNSET]
    for choice in ("unlimited", "refuse", "service"):
        chosen = ug.Policy.from_dict({**limited, "settings": {"anonymous": choice}})
        assert chosen.warnings == []
    assert ug.Policy.from_dict(doc()).warnings == []  # nothing is limited for anyone
    # A user id is taken as written, but one that reads as a misspelt word is said.
    for near, word in (("Refuse", "refuse"), ("unlimted", "unlimited"), (" REFUSE", "refuse")):
        chosen = ug.Policy.from_dict({**limited, "settings": {"anonymous": near}})
        assert warnings_of(chosen) == [
            (
                "settings.anonymous",
                json.dumps(near),
                f"counts calls with no user as the user {json.dumps(near)}; did you mean "
                f'"{word}"? (a user id is taken as written)',
            )
        ]
    for bad in ("", "  ", 3, None):
        assert errors_of({**limited, "settings": {"anonymous": bad}}) == [
            (
                "settings.anonymous",
                json.dumps(bad),
                'accepted: "unlimited" (calls with no user have no limits), "refuse", or the '
                "id of the user to count them as",
            )
        ]


# --- usage-guard check: warnings, --strict ------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(
        [sys.executable, "-m", "usage_guard.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_cli_check_prints_warnings_and_strict_fails_on_them(tmp_path: Path) -> None:
    path = tmp_path / "zero.json"
    path.write_text(
        json.dumps(doc({"direct": [{"user": "a", "model": "gpt-5", "rules": [rule(amount=0)]}]}))
    )
    expected = [
        "warning: limits.direct[0].rules[0].amount: is 0: every call this rule counts is "
        "refused (got 0)",
        "warning: settings.anonymous: is not set, so calls with no user (user=None) run with "
        'no limits; set it to "unlimited" to mean that, "refuse", or a user id to count them as',
    ]
    models = (
        "models: gpt-5 (priced by the policy); each also by a snapshot name (-2024-08-06, "
        "-20241022, -latest), with :latest, in any letter case; other models: refused"
    )
    done = run_cli("check", str(path))
    assert done.returncode == 0, done.stderr
    head = f"{path}: valid (1 model: gpt-5; 1 team: research), 2 warnings"
    restart = (
        "restart: if the counter store loses its counters (Redis restarted empty): tokens per "
        "day refilled from the guard's ledger; without a ledger they start over from 0 (up to "
        "one more full allowance; settings.fenced_metrics refuses them instead)"
    )
    assert done.stdout.splitlines() == [head, models, restart, *expected]
    done = run_cli("check", "--strict", str(path))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"{head} (--strict: failing)", models, restart, *expected]
    # No warnings: --strict passes; errors fail either way.
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps(doc({}, settings={"anonymous": "refuse"})))
    assert run_cli("check", "--strict", str(clean)).returncode == 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc({"direct": [{"user": "a", "model": "gpt-5", "rules": []}]})))
    assert run_cli("check", str(bad)).returncode == 1


def test_cli_check_the_example_policy_has_no_warnings() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "policy.toml"
    done = run_cli("check", "--strict", str(example))
    assert done.returncode == 0, done.stdout
    assert "warning" not in done.stdout


# --- calls with no user ---------------------------------------------------------------------


def limited(anonymous: Any = None) -> ug.Policy:
    document = doc(
        {
            "direct": [{"user": "alice", "model": "gpt-5", "rules": [rule(amount=50_000)]}],
            "public": [{"model": "gpt-5", "each_person": [rule(amount=150)]}],
        }
    )
    if anonymous is not None:
        document["settings"] = {"anonymous": anonymous}
    return ug.Policy.from_dict(document)


def test_anonymous_unlimited_is_the_default_and_can_be_chosen(clock: ug.ManualClock) -> None:
    for policy in (limited(), limited("unlimited")):
        guard = ug.Guard(policy, clock=clock)
        ticket = guard.admit(None, "gpt-5", prompt_tokens=1_000, max_tokens=1_000)
        assert ticket.reserved == {}
        assert guard.usage(None, "gpt-5")["rules"] == []
        ticket.release()


def test_anonymous_refuse(clock: ug.ManualClock) -> None:
    guard = ug.Guard(limited("refuse"), clock=clock)
    message = (
        "user: is required: this policy refuses calls with no user "
        '(settings.anonymous = "refuse"); pass the id of the person calling (got None)'
    )
    with pytest.raises(ValueError) as info:
        guard.admit(None, "gpt-5", prompt_tokens=10, max_tokens=10)
    assert str(info.value) == message
    with pytest.raises(ValueError):
        guard.usage(None, "gpt-5")
    guard.admit("bob", "gpt-5", prompt_tokens=10, max_tokens=10).release()


def test_anonymous_counted_as_a_user(clock: ug.ManualClock) -> None:
    guard = ug.Guard(limited("platform-anon"), clock=clock)
    ticket = guard.admit(None, "gpt-5", prompt_tokens=100, max_tokens=10)
    assert ticket.source == {"type": "public", "id": "gpt-5"}
    ticket.bill(input_tokens=100, output_tokens=10)
    [view] = guard.usage("platform-anon", "gpt-5")["rules"]
    assert (view["amount"], view["used"]) == (150, 110)
    assert guard.usage(None, "gpt-5") == guard.usage("platform-anon", "gpt-5")
    with pytest.raises(ug.UsageLimitError):
        guard.admit(None, "gpt-5", prompt_tokens=100, max_tokens=10)


@pytest.mark.parametrize("user", ["   ", "\t", ""])
def test_a_blank_user_is_not_a_user(clock: ug.ManualClock, user: str) -> None:
    guard = ug.Guard(limited("unlimited"), clock=clock)
    for call in (
        lambda: guard.admit(user, "gpt-5", prompt_tokens=10, max_tokens=10),
        lambda: guard.usage(user, "gpt-5"),
        lambda: guard.admit_batch(user, "gpt-5", [{"id": "1", "prompt_tokens": 1}]),
    ):
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value).startswith("user: must not be empty")
        assert json.dumps(user) in str(info.value)


# --- a guarded client's user ----------------------------------------------------------------


def test_user_none_on_a_call_means_the_clients_user(
    server: FakeProvider, clock: ug.ManualClock
) -> None:
    server.reset()
    server.output_tokens, server.input_tokens = 12, 21
    guard = ug.Guard(limited("unlimited"), clock=clock)
    sdk = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-test", max_retries=0)
    client = GuardedOpenAI(sdk, guard, user="alice")
    messages = [{"role": "user", "content": "Hi"}]
    reply = client.chat.completions.create(
        model="gpt-5", messages=messages, max_completion_tokens=100, user=None
    )
    assert reply.usage_limits["source"] == {"type": "direct", "id": "alice"}
    [view] = guard.usage("alice", "gpt-5")["rules"]
    assert view["used"] == 33
    assert "user" not in server.bodies("/v1/chat/completions")[0]
    # A client made with no user: a call with no user is the policy's anonymous call.
    anonymous = GuardedOpenAI(sdk, ug.Guard(limited("refuse"), clock=clock))
    with pytest.raises(ValueError, match="settings.anonymous"):
        anonymous.chat.completions.create(model="gpt-5", messages=messages)


def test_an_int_past_64_bits_is_a_policy_error_with_the_others() -> None:
    """Not a bare ValueError that `except ug.PolicyError` misses and that hides the
    document's other errors."""
    document = doc({"platform": {"rules": [rule(amount=2**64), rule(amount=-1, window="week")]}})
    with pytest.raises(ug.PolicyError) as e:
        ug.Policy.from_dict(document)
    paths = [err["path"] for err in e.value.errors]
    assert paths == ["limits.platform.rules[0].amount", "limits.platform.rules[1].amount"]

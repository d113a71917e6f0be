"""Policy validation: a closed vocabulary, every error named by its path, all at once."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug

GPT5: dict[str, Any] = {
    "display_name": "GPT-5",
    "provider": "openai",
    "context_window": 400000,
    "max_output_tokens": 128000,
    "prices": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
}

WINDOWS = (
    "day, week, month, year (calendar, UTC); minute, hour, or a number and a unit: "
    '"10 minutes", "24 hours", "30 days", "2 weeks", or short: "60s", "10m", "24h", "30d", '
    '"2w" (sliding)'
)
METRICS = "tokens, input_tokens, output_tokens, cost, requests, compute_ms, concurrency"
MODEL_KEYS = (
    "display_name, provider, context_window, max_input_tokens, max_output_tokens, prices, "
    "router, encoding, counting, fallbacks, aliases"
)
WHOLE = "must be a whole number from 0 to 9007199254740992"

VALID_TOML = """
[models.gpt-5]
display_name = "GPT-5"
provider = "openai"
context_window = 400000
max_output_tokens = 128000
prices = { input = 1.25, cached_input = 0.125, output = 10.0 }

[teams.research]
members = ["alice", "bob"]

[[limits.direct]]
user = "alice"
model = "gpt-5"
rules = [{ metric = "tokens", amount = 100000, window = "day" }]

[[limits.team]]
team = "research"
model = "gpt-5"
shared = [{ metric = "cost", amount = 50.0, window = "month" }]
each_member = [{ metric = "requests", amount = 60, window = "10 minutes" }]

[[limits.public]]
model = "gpt-5"
each_person = [{ metric = "tokens", amount = 20000, window = "day" }]

[limits.platform]
rules = [{ metric = "requests", amount = 600, window = "hour" }]
"""


VALID_DICT: dict[str, Any] = {
    "models": {"gpt-5": GPT5},
    "teams": {"research": {"members": ["alice", "bob"]}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "gpt-5",
                "rules": [{"metric": "tokens", "amount": 100000, "window": "day"}],
            }
        ],
        "team": [
            {
                "team": "research",
                "model": "gpt-5",
                "shared": [{"metric": "cost", "amount": 50.0, "window": "month"}],
                "each_member": [{"metric": "requests", "amount": 60, "window": "10 minutes"}],
            }
        ],
        "public": [
            {
                "model": "gpt-5",
                "each_person": [{"metric": "tokens", "amount": 20000, "window": "day"}],
            }
        ],
        "platform": {"rules": [{"metric": "requests", "amount": 600, "window": "hour"}]},
    },
}


def rule(**fields: Any) -> dict[str, Any]:
    return {"metric": "tokens", "amount": 1000, "window": "day", **fields}


def doc(**top: Any) -> dict[str, Any]:
    """A valid base document (one model, one team) with `top` keys replaced or added."""
    d: dict[str, Any] = {
        "models": {"gpt-5": copy.deepcopy(GPT5)},
        "teams": {"research": {"members": ["alice", "bob"]}},
    }
    d.update(top)
    return d


def direct(*rules: dict[str, Any], user: str = "alice", model: str = "gpt-5") -> dict[str, Any]:
    return {"user": user, "model": model, "rules": list(rules)}


def model(**fields: Any) -> dict[str, Any]:
    return {"gpt-5": {**copy.deepcopy(GPT5), **fields}}


def errors_of(call: Any, *args: Any) -> list[tuple[str, str, str]]:
    with pytest.raises(ug.PolicyError) as info:
        call(*args)
    assert isinstance(info.value, ValueError)
    return [(e["path"], e["value"], e["message"]) for e in info.value.errors]


# (id, document, [(path, value, message), ...]) — the exact errors expected, in order.
MALFORMED: list[tuple[str, dict[str, Any], list[tuple[str, str, str]]]] = [
    (
        "unknown-top-level-key",
        doc(limit={}),
        [
            (
                "limit",
                "",
                'unknown key (did you mean "limits"?); accepted: models, teams, limits, settings, '
                "rules, scopes, providers, gateway",
            )
        ],
    ),
    (
        "unknown-model-key",
        {"models": model(temperature=0.2)},
        [("models.gpt-5.temperature", "", f"unknown key; accepted: {MODEL_KEYS}")],
    ),
    (
        "bad-provider",
        {"models": model(provider="azure")},
        [
            (
                "models.gpt-5.provider",
                '"azure"',
                "is not a provider; accepted: openai, anthropic, gemini, ollama, other",
            )
        ],
    ),
    (
        "negative-price",
        {"models": model(prices={"input": -1, "output": 10.0})},
        [
            (
                "models.gpt-5.prices.input",
                "-1",
                "must be dollars per million tokens: a number of dollars, 0 or more",
            )
        ],
    ),
    (
        "unknown-metric",
        doc(limits={"direct": [direct(rule(metric="words"))]}),
        [
            (
                "limits.direct[0].rules[0].metric",
                '"words"',
                f"is not a metric; accepted: {METRICS}",
            )
        ],
    ),
    (
        "bad-window-word",
        doc(
            limits={
                "team": [
                    {"team": "research", "model": "gpt-5", "shared": [rule()]},
                    {"team": "research", "model": "gpt-5", "shared": [rule(window="fortnight")]},
                ]
            }
        ),
        [
            (
                "limits.team[1].shared[0].window",
                '"fortnight"',
                f"is not a window; accepted: {WINDOWS}",
            ),
            (
                "limits.team[1]",
                "",
                "a team limit for research on gpt-5 is already defined at limits.team[0]",
            ),
        ],
    ),
    (
        "zero-length-window",
        doc(limits={"direct": [direct(rule(window="0 minutes"))]}),
        [
            (
                "limits.direct[0].rules[0].window",
                '"0 minutes"',
                'is not a window: a window of 0 counts nothing (the least is "1 second"); '
                f"accepted: {WINDOWS}",
            )
        ],
    ),
    (
        "missing-window",
        doc(limits={"public": [{"model": "gpt-5", "shared": [{"metric": "tokens", "amount": 5}]}]}),
        [
            (
                "limits.public[0].shared[0].window",
                "",
                f"is required; accepted: {WINDOWS}",
            )
        ],
    ),
    (
        "concurrency-with-window",
        doc(
            limits={"direct": [direct({"metric": "concurrency", "amount": 2, "window": "minute"})]}
        ),
        [
            (
                "limits.direct[0].rules[0].window",
                '"minute"',
                "a concurrency rule has no window; remove it",
            )
        ],
    ),
    (
        "fractional-token-amount",
        doc(limits={"direct": [direct(rule(amount=10.5))]}),
        [("limits.direct[0].rules[0].amount", "10.5", WHOLE)],
    ),
    (
        "string-token-amount",
        doc(limits={"direct": [direct(rule(amount="1000"))]}),
        [("limits.direct[0].rules[0].amount", '"1000"', WHOLE)],
    ),
    (
        "negative-amount",
        doc(limits={"model_total": [{"model": "gpt-5", "rules": [rule(amount=-1)]}]}),
        [("limits.model_total[0].rules[0].amount", "-1", WHOLE)],
    ),
    (
        "negative-cost-amount",
        doc(limits={"user_total": [{"user": "bob", "rules": [rule(metric="cost", amount=-2.5)]}]}),
        [
            (
                "limits.user_total[0].rules[0].amount",
                "-2.5",
                "must be an amount of cost: a number of dollars, 0 or more",
            )
        ],
    ),
    (
        "undefined-team",
        doc(limits={"team_total": [{"team": "sales", "rules": [rule()]}]}),
        [
            (
                "limits.team_total[0].team",
                '"sales"',
                "is not a team of the policy; defined teams: research",
            )
        ],
    ),
    (
        "undefined-model",
        doc(limits={"direct": [direct(rule(), model="gpt-4")]}),
        [
            (
                "limits.direct[0].model",
                '"gpt-4"',
                "is not a model of the policy; defined models: gpt-5",
            )
        ],
    ),
    (
        "duplicate-direct-limit",
        doc(limits={"direct": [direct(rule()), direct(rule(amount=5))]}),
        [
            (
                "limits.direct[1]",
                "",
                "a direct limit for alice on gpt-5 is already defined at limits.direct[0]",
            )
        ],
    ),
    (
        "duplicate-rule-in-one-limit",
        doc(limits={"user_total": [{"user": "alice", "rules": [rule(), rule(amount=5)]}]}),
        [
            (
                "limits.user_total[0].rules[1]",
                "",
                "a tokens rule over day is already at limits.user_total[0].rules[0]; "
                "one limit has one rule per metric and window",
            )
        ],
    ),
    (
        "team-members-not-a-list",
        doc(teams={"research": {"members": "alice"}}),
        [("teams.research.members", '"alice"', "must be a list, not a string")],
    ),
    (
        "team-member-listed-twice",
        doc(teams={"research": {"members": ["alice", "alice"]}}),
        [("teams.research.members[1]", '"alice"', "is listed twice")],
    ),
    (
        "team-without-members",
        doc(teams={"research": {"display_name": "Research"}}),
        [("teams.research.members", "", "is required")],
    ),
    (
        "margin-out-of-range",
        doc(settings={"margin": 1.5}),
        [("settings.margin", "1.5", "must be a fraction from 0 up to (not including) 1")],
    ),
    (
        "unknown-platform-key",
        doc(limits={"platform": {"rules": [rule()], "users": ["alice"]}}),
        [("limits.platform.users", "", "unknown key; accepted: rules")],
    ),
    (
        "output-above-context-window",
        {"models": model(context_window=1000, max_output_tokens=2000)},
        [("models.gpt-5.max_output_tokens", "2000", "must not exceed context_window (1000)")],
    ),
]


@pytest.mark.parametrize(
    ("document", "expected"),
    [pytest.param(d, e, id=i) for i, d, e in MALFORMED],
)
def test_malformed_document_reports_exact_errors(
    document: dict[str, Any], expected: list[tuple[str, str, str]]
) -> None:
    assert errors_of(ug.Policy.from_dict, document) == expected
    # The same document as JSON text gets the same errors.
    assert errors_of(ug.Policy.from_json, json.dumps(document)) == expected


def test_malformed_documents_are_distinct() -> None:
    assert len(MALFORMED) >= 15
    assert len({json.dumps(d, sort_keys=True) for _, d, _ in MALFORMED}) == len(MALFORMED)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[models\nx = 1\n",
            "not valid TOML: invalid table header; expected `.`, `]` at line 1 column 8",
        ),
        (
            "models = {\n",
            "not valid TOML: invalid inline table; expected `}` at line 1 column 11",
        ),
    ],
)
def test_bad_toml_syntax(text: str, message: str) -> None:
    assert errors_of(ug.Policy.from_toml, text) == [("", "", message)]


def test_bad_toml_syntax_says_where() -> None:
    # A syntax error in a long policy file must say where it is, as JSON errors do.
    text = VALID_TOML + "\n[[limits.direct]\nuser = 'bob'\n"
    [(path, _, message)] = errors_of(ug.Policy.from_toml, text)
    assert path == ""
    assert message.startswith("not valid TOML: ")
    line = text.split("\n").index("[[limits.direct]") + 1  # line 30
    assert f"line {line}" in message, message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"models": {', "not valid JSON: EOF while parsing an object at line 1 column 12"),
        ('{"models": {},}', "not valid JSON: trailing comma at line 1 column 15"),
    ],
)
def test_bad_json_syntax(text: str, message: str) -> None:
    assert errors_of(ug.Policy.from_json, text) == [("", "", message)]


def test_document_that_is_not_a_table() -> None:
    assert errors_of(ug.Policy.from_json, "[1]") == [("", "[1]", "must be a table, not a list")]


def test_every_error_of_a_document_is_reported_at_once() -> None:
    document = {
        "models": model(provider="azure", temperature=1),
        "teams": {"research": {"members": "alice"}},
        "limits": {
            "direct": [direct(rule(metric="words"), model="gpt-4")],
            "team": [{"team": "sales", "model": "gpt-5", "shared": [rule(window="fortnight")]}],
            "model_total": [{"model": "gpt-5", "rules": [rule(amount=-1)]}],
        },
        "settings": {"margin": -0.1},
        "extra": True,
    }
    with pytest.raises(ug.PolicyError) as info:
        ug.Policy.from_dict(document)
    paths = sorted(e["path"] for e in info.value.errors)
    assert paths == sorted(
        [
            "extra",
            "models.gpt-5.temperature",
            "models.gpt-5.provider",
            "teams.research.members",
            "settings.margin",
            "limits.direct[0].model",
            "limits.direct[0].rules[0].metric",
            "limits.team[0].team",
            "limits.team[0].shared[0].window",
            "limits.model_total[0].rules[0].amount",
        ]
    )
    text = str(info.value)
    assert text.startswith("the policy has 10 errors:")
    assert "  limits.team[0].team: is not a team of the policy; defined teams: research" in text
    assert '(got "sales")' in text


def test_constructors_agree_on_a_valid_document(tmp_path: Path) -> None:
    as_dict = VALID_DICT
    toml_file = tmp_path / "policy.toml"
    toml_file.write_text(VALID_TOML)
    json_file = tmp_path / "policy.json"
    json_file.write_text(json.dumps(as_dict))
    policies = [
        ug.Policy.from_dict(as_dict),
        ug.Policy.from_json(json.dumps(as_dict)),
        ug.Policy.from_toml(VALID_TOML),
        ug.Policy.load(toml_file),
        ug.Policy.load(str(json_file)),
    ]
    clock = ug.ManualClock("2026-11-30T08:00:00Z")
    seen = []
    for policy in policies:
        assert policy.models == ["gpt-5"]
        assert policy.teams == ["research"]
        assert policy.display_name("gpt-5") == "GPT-5"
        guard = ug.Guard(policy, clock=clock)
        sources = [guard.admit(u, "gpt-5", prompt_tokens=10).source for u in ("alice", "bob")]
        usage = guard.usage("carol", "gpt-5")
        seen.append((sources, usage))
    assert seen[0][0] == [{"type": "direct", "id": "alice"}, {"type": "team", "id": "research"}]
    assert seen[0][1]["source"] == {"type": "public", "id": "gpt-5"}
    assert all(s == seen[0] for s in seen[1:])


def test_a_non_finite_number_is_one_policy_error_among_all() -> None:
    # NaN in a dict is a bad value like any other: a PolicyError naming the field, reported
    # with the document's other errors.
    document = doc(
        limits={"direct": [direct(rule(amount=float("nan")))]},
        settings={"margin": 7},
    )
    with pytest.raises(ug.PolicyError) as info:
        ug.Policy.from_dict(document)
    paths = {e["path"] for e in info.value.errors}
    assert paths == {"settings.margin", "limits.direct[0].rules[0].amount"}


def test_models_and_teams_are_listed_in_the_documents_order() -> None:
    # Policy.models is documented as "the ids of the policy's models, in the document's order".
    policy = ug.Policy.from_toml(
        "[models.zeta]\n[models.alpha]\n[teams.ops]\nmembers = []\n[teams.dev]\nmembers = []\n"
    )
    assert policy.models == ["zeta", "alpha"]
    assert policy.teams == ["ops", "dev"]


def test_load_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    [(path, value, message)] = errors_of(ug.Policy.load, missing)
    assert (path, value) == ("", str(missing))
    assert message.startswith("cannot read the policy file: ")


def test_cost_amounts_are_micro_dollars() -> None:
    document = doc(limits={"direct": [direct(rule(metric="cost", amount=0.000001))]})
    guard = ug.Guard(ug.Policy.from_dict(document), clock=ug.ManualClock("2026-11-30T08:00:00Z"))
    [view] = guard.usage("alice", "gpt-5")["rules"]
    assert (view["metric"], view["amount"]) == ("cost", 1)


# --- usage-guard check -------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(
        [sys.executable, "-m", "usage_guard.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_cli_check_a_valid_policy(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(VALID_TOML)
    done = run_cli("check", str(good))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{good}: valid")
    assert "1 model" in done.stdout and "1 team" in done.stdout


def test_cli_check_the_example_policy() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "policy.toml"
    done = run_cli("check", str(example))
    assert done.returncode == 0, done.stderr
    assert "3 models" in done.stdout and "2 teams" in done.stdout


def test_cli_check_prints_every_error_one_per_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            doc(
                limits={"direct": [direct(rule(metric="words"), model="gpt-4")]},
                settings={"margin": 2},
            )
        )
    )
    done = run_cli("check", str(bad))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines == [
        f"{bad}: 3 errors",
        "settings.margin: must be a fraction from 0 up to (not including) 1 (got 2)",
        'limits.direct[0].model: is not a model of the policy; defined models: gpt-5 (got "gpt-4")',
        f'limits.direct[0].rules[0].metric: is not a metric; accepted: {METRICS} (got "words")',
    ]


def test_cli_check_bad_syntax_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("models = {\n")
    done = run_cli("check", str(bad))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"{bad}: 1 error",
        "not valid TOML: invalid inline table; expected `}` at line 1 column 11",
    ]
    done = run_cli("check", str(tmp_path / "missing.toml"))
    assert done.returncode == 1
    assert "cannot read the policy file" in done.stdout


def test_cli_help() -> None:
    done = run_cli("--help")
    assert done.returncode == 0
    assert "demo" in done.stdout and "check" in done.stdout
    done = run_cli()
    assert done.returncode == 2


def test_cli_demo_runs_a_deterministic_day() -> None:
    done = run_cli("demo")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out == run_cli("demo").stdout  # seeded: the same day every time
    calls, usage = out.split("Final usage per rule at ")
    assert "capped to " in calls
    assert "(team:research passed it on)" in calls
    assert (
        "refused USAGE_LIMIT_REACHED: You have used your 100,000 tokens a day on GPT-5. "
        "It resets at 2026-12-01T00:00:00Z." in calls
    )
    assert "Team Support has used its 400,000 tokens a day on Claude Sonnet." in calls
    for user in ("alice", "bob", "carol", "dave"):
        assert f"\n{user} " in usage
    support = [line.split() for line in usage.splitlines() if "team support" in line]
    assert len(support) == 2  # bob's and carol's view of the team's shared rule
    assert all(
        cells[-4:] == ["400,000", "400,000", "0", "2026-12-01T00:00:00Z"] for cells in support
    )


def test_cli_example_policy_is_the_shipped_example() -> None:
    from usage_guard.cli import EXAMPLE_POLICY

    example = Path(__file__).resolve().parents[2] / "examples" / "policy.toml"
    assert EXAMPLE_POLICY == example.read_text()

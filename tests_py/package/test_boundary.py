"""The typed Python boundary: the TypedDicts of `usage_guard.types` have exactly the keys the
core writes, `Provider` lists exactly the words the core accepts, and every bad argument is a
TypeError or ValueError naming the argument, the value and what is accepted."""

from __future__ import annotations

import re
from typing import Any, get_args

import pytest
import usage_guard as ug
from usage_guard import types

METRICS = get_args(types.Metric)

# Every metric on one direct rule set, a team rule and a public rule, so every key of every
# dict appears at least once.
POLICY: dict[str, Any] = {
    "models": {
        "gpt-5": {
            "provider": "openai",
            "context_window": 400_000,
            "max_output_tokens": 8_000,
            "prices": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
        }
    },
    "teams": {"research": {"members": ["bob"]}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "gpt-5",
                "rules": [
                    {"metric": m, "amount": 10.0 if m == "cost" else 1_000_000, "window": "day"}
                    for m in METRICS
                    if m != "concurrency"
                ]
                + [{"metric": "concurrency", "amount": 10}],
            }
        ],
        "team": [
            {
                "team": "research",
                "model": "gpt-5",
                "shared": [{"metric": "tokens", "amount": 100_000, "window": "day"}],
            }
        ],
        "model_total": [
            {"model": "gpt-5", "rules": [{"metric": "tokens", "amount": 10**8, "window": "day"}]}
        ],
    },
}


def keys_of(typed_dict: Any) -> tuple[frozenset[str], frozenset[str]]:
    """(required keys, all keys) of a TypedDict class."""
    required = frozenset(typed_dict.__required_keys__)
    return required, required | frozenset(typed_dict.__optional_keys__)


def assert_shape(value: Any, typed_dict: Any) -> None:
    required, every = keys_of(typed_dict)
    assert isinstance(value, dict), value
    assert required <= set(value) <= every, (typed_dict.__name__, sorted(value))


@pytest.fixture
def guard(clock: ug.ManualClock) -> ug.Guard:
    return ug.Guard(ug.Policy.from_dict(POLICY), clock=clock)


def test_ceiling_source_reserved_billed_match_their_typed_dicts(guard: ug.Guard) -> None:
    ticket = guard.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=200)
    assert set(ticket.ceiling) == keys_of(types.Ceiling)[1]
    rates = ticket.ceiling["rates"]
    assert rates is not None and set(rates) == keys_of(types.Rates)[1]
    assert set(ticket.source) == keys_of(types.Source)[1]
    assert ticket.source["type"] in get_args(types.SourceType)
    # Every metric is held, so the reservation has every key Reserved declares.
    assert set(ticket.reserved) == keys_of(types.Reserved)[1]
    billed = ticket.bill(input_tokens=90, output_tokens=150)
    assert billed is not None and set(billed) == keys_of(types.Billed)[1]


def test_batch_dicts_match_their_typed_dicts(guard: ug.Guard) -> None:
    batch = guard.admit_batch(
        "alice", "gpt-5", [{"id": "a", "prompt_tokens": 10, "max_tokens": 20}]
    )
    assert set(batch.source) == keys_of(types.Source)[1]
    assert set(batch.reserved) <= keys_of(types.Reserved)[1]
    billed = batch.bill_part("a", 10, 5)
    assert billed is not None and set(billed) == keys_of(types.Billed)[1]


def test_usage_view_matches_its_typed_dicts(guard: ug.Guard) -> None:
    guard.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=200).bill(100, 50)
    view = guard.usage("alice", "gpt-5")
    assert set(view) == keys_of(types.UsageView)[1]
    assert set(view["source"]) == keys_of(types.Source)[1]
    assert view["rules"] and view["ceilings"]
    for rule in view["rules"] + view["ceilings"]:
        assert_shape(rule, types.RuleUsage)
        assert rule["metric"] in METRICS
        assert rule["limit_type"] in get_args(types.LimitType)
    restriction = view["restriction"]
    assert restriction is not None and set(restriction) == keys_of(types.Restriction)[1]
    # The optional key: only team rules carry `team`.
    team_view = guard.usage("bob", "gpt-5")
    team_rules = [r for r in team_view["rules"] if r["limit_type"] == "team"]
    assert team_rules and all(r.get("team") == "research" for r in team_rules)
    assert set(keys_of(types.RuleUsage)[1] - keys_of(types.RuleUsage)[0]) == {"team"}


def test_prompt_count_and_intersection_match_their_typed_dicts(guard: ug.Guard) -> None:
    count = ug.count_prompt({"messages": [{"role": "user", "content": "hi"}]}, "openai")
    assert set(count) == keys_of(types.PromptCount)[1]
    ceiling = guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=20).ceiling
    assert set(ug.intersect_ceilings(ceiling, ceiling)) == keys_of(types.Ceiling)[1]


def accepted_words(message: str) -> set[str]:
    """The words after 'accepted:' in an error message."""
    found = re.search(r"accepted: ([^()]+)", message)
    assert found, message
    return {w.strip() for w in found.group(1).split(",")}


def test_provider_literal_is_exactly_what_the_core_accepts(guard: ug.Guard) -> None:
    request = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}
    for word in get_args(types.Provider):
        try:  # every Literal word is accepted (the request may not fit that API's shape)
            ug.count_prompt(request, word)
        except ValueError as e:
            assert not str(e).startswith("provider:"), (word, str(e))
    with pytest.raises(ValueError) as bad:
        guard.admit("alice", "gpt-5", request, provider="openai.chats")  # type: ignore[arg-type]
    message = str(bad.value)
    assert message.startswith("provider:") and '"openai.chats"' in message
    # The canonical words the error lists are all in the Literal (which adds the aliases).
    assert accepted_words(message) <= set(get_args(types.Provider))
    assert "openai.responses" in accepted_words(message)


def test_provider_of_the_wrong_type_is_a_type_error_naming_it(guard: ug.Guard) -> None:
    with pytest.raises(TypeError, match=r"provider: must be a str; accepted: openai, "):
        guard.admit("alice", "gpt-5", {"messages": []}, provider=3)  # type: ignore[arg-type]


def test_error_shape_literal_is_exactly_what_to_http_accepts(guard: ug.Guard) -> None:
    tight = ug.Guard(
        ug.Policy.from_dict(
            {
                "models": {"m": {"provider": "openai"}},
                "limits": {
                    "direct": [
                        {
                            "user": "alice",
                            "model": "m",
                            "rules": [{"metric": "requests", "amount": 1, "window": "day"}],
                        }
                    ]
                },
            }
        )
    )
    running = tight.admit("alice", "m", prompt_tokens=1, max_tokens=1)  # kept: holds the one
    with pytest.raises(ug.UsageLimitError) as refused:
        running = tight.admit("alice", "m", prompt_tokens=1, max_tokens=1)  # kept: holds the one
    for shape in get_args(types.ErrorShape):
        status, _headers, _body = refused.value.to_http(shape)
        assert status == 429
    assert not running.settled
    with pytest.raises(ValueError) as bad:
        refused.value.to_http("bedrock")  # type: ignore[arg-type]
    assert str(bad.value).startswith("provider:") and '"bedrock"' in str(bad.value)
    assert accepted_words(str(bad.value)) == set(get_args(types.ErrorShape))


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (
            lambda g: g.admit("alice", "gpt-5", prompt_tokens=-1),
            ValueError,
            r"prompt_tokens must be a whole number from 0 to 18446744073709551615 \(2\*\*64-1\) "
            r"\(got -1\)",
        ),
        (
            lambda g: g.admit("alice", "gpt-5", max_tokens="9"),
            TypeError,
            r"max_tokens must be a whole number from 0 to 18446744073709551615 \(2\*\*64-1\) "
            r"\(an int\), not str \(got '9'\)",
        ),
        (
            lambda g: g.admit("alice", "gpt-5", {"messages": [{1: "x"}]}),
            TypeError,
            r"request\.messages\[0\]: keys must be strings \(got <class 'int'>\)",
        ),
        (
            lambda g: g.admit("alice", "gpt-5", {"n": float("nan")}),
            ValueError,
            r"request\.n: must be a finite number \(got NaN\)",
        ),
        (
            lambda g: g.admit("alice", "gpt-5", {"n": object()}),
            TypeError,
            r"request\.n: cannot use this type here; accepted: dict, list",
        ),
        (
            lambda g: g.admit_batch("alice", "gpt-5", ["x"]),
            TypeError,
            r"requests\[0\]: must be a dict with id",
        ),
        (
            lambda g: ug.Guard(ug.Policy.from_dict({}), store=3),
            TypeError,
            r"store: accepted: a MemoryStore or a RedisStore \(got <class 'int'>\)",
        ),
        (
            lambda g: ug.ManualClock("yesterday"),
            ValueError,
            r'start: is not a date or an ISO 8601 instant; accepted: .* \(got "yesterday"\)',
        ),
        (
            lambda g: ug.ManualClock(3),
            TypeError,
            r"start: must be an ISO 8601 string, a datetime or a date \(got <class 'int'>\)",
        ),
        (
            lambda g: ug.ManualClock().advance(float("inf")),
            ValueError,
            r"seconds: the total of seconds, minutes, hours and days must be a finite",
        ),
        (
            lambda g: ug.SqliteLedger().query(group_by=["week"]),
            ValueError,
            r'group_by: is not a grouping; accepted: user, team, model, day \(got "week"\)',
        ),
        (
            lambda g: ug.RedisStore.cluster("redis://127.0.0.1:1"),
            TypeError,
            r"urls: must be a list of node URLs",
        ),
        (
            lambda g: ug.RedisStore("not a url"),
            ValueError,
            r"url: cannot set up a Redis store: .* \(got not a url\)",
        ),
    ],
)
def test_bad_arguments_name_the_argument_the_value_and_what_is_accepted(
    guard: ug.Guard, call: Any, error: type[Exception], pattern: str
) -> None:
    with pytest.raises(error, match=pattern) as raised:
        call(guard)
    assert type(raised.value) is error  # TypeError stays TypeError, ValueError ValueError

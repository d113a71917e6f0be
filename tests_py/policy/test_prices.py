"""A cost limit always has a price to count (issue 31, item 3): the built-in price table, a
prices file the policy points to (updated without a rebuild), tiered long-context prices
billed right at the edge, and a cost rule over an unpriced model refused when read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug

ONE_M = 1_000_000


def cost_used(guard: ug.Guard, user: str, model: str) -> int:
    """What the one cost rule on `user`'s path on `model` has counted."""
    view = guard.usage(user, model)
    [used] = [int(r["used"]) for r in view["rules"] + view["ceilings"] if r["metric"] == "cost"]
    return used


def call(guard: ug.Guard, model: str, input_tokens: int, output_tokens: int, **kw: Any) -> None:
    """A small admission billed a large use (bill replaces the hold, even past it)."""
    guard.admit("alice", model, prompt_tokens=10, max_tokens=10).bill(
        input_tokens=input_tokens, output_tokens=output_tokens, **kw
    )


def test_a_cost_rule_on_a_model_without_prices_counts_the_table_price(
    clock: ug.ManualClock,
) -> None:
    # The scenario: $5 a day on a model the policy gives no prices.
    doc = {
        "models": {"gpt-4.1-mini": {"provider": "openai"}},
        "limits": {
            "direct": [
                {
                    "user": "alice",
                    "model": "gpt-4.1-mini",
                    "rules": [{"metric": "cost", "amount": 5.0, "window": "day"}],
                }
            ]
        },
        "settings": {"anonymous": "refuse"},
    }
    guard = ug.Guard(ug.Policy.from_dict(doc), clock=clock)
    for _ in range(3):
        call(guard, "gpt-4.1-mini", ONE_M, ONE_M)
    # $0.40 + $1.60 a call, from the table: $6 counted, and the day's $5 is spent.
    assert cost_used(guard, "alice", "gpt-4.1-mini") == 3 * 2_000_000
    with pytest.raises(ug.UsageLimitError) as e:
        guard.admit("alice", "gpt-4.1-mini", prompt_tokens=10, max_tokens=10)
    assert e.value.limit_type == "direct"


@pytest.mark.parametrize("declared", [True, False])
def test_a_user_total_cost_cap_counts_gpt_4_1_calls(clock: ug.ManualClock, declared: bool) -> None:
    doc: dict[str, Any] = {
        "limits": {
            "user_total": [
                {"user": "alice", "rules": [{"metric": "cost", "amount": 50.0, "window": "day"}]}
            ]
        },
        "settings": {"anonymous": "refuse"},
    }
    if declared:
        doc["models"] = {"gpt-4.1": {"provider": "openai"}}
    else:
        doc["settings"]["unknown_models"] = "allow"
    guard = ug.Guard(ug.Policy.from_dict(doc), clock=clock)
    for _ in range(3):
        call(guard, "gpt-4.1", 10 * ONE_M, 0)
    assert cost_used(guard, "alice", "gpt-4.1") == 3 * 20 * ONE_M  # $2 per million input
    with pytest.raises(ug.UsageLimitError) as e:
        guard.admit("alice", "gpt-4.1-2025-04-14", prompt_tokens=10, max_tokens=10)
    assert e.value.limit_type == "user_total"


def test_an_undeclared_model_no_table_prices_is_refused_under_a_cost_cap(
    clock: ug.ManualClock,
) -> None:
    doc = {
        "limits": {"platform": {"rules": [{"metric": "cost", "amount": 1.0, "window": "day"}]}},
        "settings": {"anonymous": "refuse", "unknown_models": "allow"},
    }
    policy = ug.Policy.from_dict(doc)
    assert any(
        w["path"] == "settings.unknown_models" and "counts cost across models" in w["message"]
        for w in policy.warnings
    )
    guard = ug.Guard(policy, clock=clock)
    with pytest.raises(ug.ModelNotFound) as e:
        guard.admit("alice", "my-private-model", prompt_tokens=10, max_tokens=10)
    assert "has no known price" in str(e.value)
    # Without a cost rule on its path the same model is admitted (nothing to price).
    no_cost = ug.Policy.from_dict({"settings": {"unknown_models": "allow"}})
    ug.Guard(no_cost, clock=clock).admit("alice", "my-private-model", prompt_tokens=1).release()


def test_a_cost_rule_over_an_unpriced_model_is_refused_when_read() -> None:
    doc = {
        "models": {"my-model": {"provider": "other"}, "router": {"router": True}},
        "limits": {
            "platform": {"rules": [{"metric": "cost", "amount": 1.0, "window": "day"}]},
        },
    }
    with pytest.raises(ug.PolicyError) as e:
        ug.Policy.from_dict(doc)
    [error] = e.value.errors  # the router's own call skips the platform limit
    assert error["path"] == "models.my-model.prices"
    assert "the platform limit counts the cost of this model's calls" in error["message"]
    assert "give prices = { input = ..., output = ... }" in error["message"]
    # A price of 0 is a price.
    doc["models"]["my-model"]["prices"] = {"input": 0, "output": 0}
    ug.Policy.from_dict(doc)


def test_a_prices_file_prices_models_and_is_read_again_with_the_policy(
    tmp_path: Path, clock: ug.ManualClock
) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."my-model"]\ninput = 1.0\noutput = 4.0\nsource = "ours"\n')
    policy_file = tmp_path / "policy.json"
    doc = {
        "models": {"my-model": {"provider": "openai"}, "gpt-4o": {"provider": "openai"}},
        "limits": {
            "user_total": [
                {"user": "alice", "rules": [{"metric": "cost", "amount": 100.0, "window": "day"}]}
            ]
        },
        "settings": {"anonymous": "refuse", "prices_file": "prices.toml"},
    }
    policy_file.write_text(json.dumps(doc))
    guard = ug.Guard(ug.Policy.load(str(policy_file)), clock=clock)
    call(guard, "my-model", ONE_M, ONE_M)
    call(guard, "gpt-4o", ONE_M, 0)  # not in the file: the built-in table's $2.50
    assert cost_used(guard, "alice", "my-model") == 5 * ONE_M + 2_500_000
    # A new price is a new file and a policy read again: no rebuild.
    prices.write_text('[models."my-model"]\ninput = 2.0\noutput = 4.0\n')
    guard.set_policy(ug.Policy.load(str(policy_file)))
    call(guard, "my-model", ONE_M, 0)
    assert cost_used(guard, "alice", "my-model") == 7 * ONE_M + 2_500_000


def test_a_bad_or_missing_prices_file_is_an_error_naming_it(tmp_path: Path) -> None:
    doc = {"settings": {"prices_file": str(tmp_path / "nope.toml")}}
    with pytest.raises(ug.PolicyError) as e:
        ug.Policy.from_dict(doc)
    [error] = e.value.errors
    assert (
        error["path"] == "settings.prices_file"
        and "cannot read the prices file" in (error["message"])
    )
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"models": {"m": {"input": "free", "outptu": 1}}}))
    with pytest.raises(ug.PolicyError) as e:
        ug.Policy.from_dict({"settings": {"prices_file": str(bad)}})
    paths = {err["path"]: err["message"] for err in e.value.errors}
    assert paths[f"{bad}: models.m.outptu"].startswith('unknown key (did you mean "output"?)')
    assert f"{bad}: models.m.input" in paths


def tiered(clock: ug.ManualClock, **prices: Any) -> ug.Guard:
    doc = {
        "models": {"long": {"provider": "gemini", **prices}},
        "limits": {
            "direct": [
                {
                    "user": "alice",
                    "model": "long",
                    "rules": [{"metric": "cost", "amount": 1000.0, "window": "day"}],
                }
            ]
        },
        "settings": {"anonymous": "refuse"},
    }
    return ug.Guard(ug.Policy.from_dict(doc), clock=clock)


LONG = {
    "prices": {
        "input": 1.25,
        "output": 10.0,
        "long_context": {"above_input_tokens": 200_000, "input": 2.5, "output": 15.0},
    }
}


def test_a_long_context_tier_bills_the_whole_call_past_its_edge(clock: ug.ManualClock) -> None:
    guard = tiered(clock, **LONG)
    call(guard, "long", 200_000, 1_000)  # at the edge: the base rates
    assert cost_used(guard, "alice", "long") == 250_000 + 10_000
    call(guard, "long", 200_001, 1_000)  # one over: every token at the long rates
    assert cost_used(guard, "alice", "long") == 260_000 + 500_003 + 15_000
    # The hold of a long prompt is at the long rates too.
    ticket = guard.admit("alice", "long", prompt_tokens=300_000, max_tokens=1_000)
    assert ticket.reserved["cost_micros"] == 750_000 + 15_000
    ticket.release()


def test_the_built_in_table_bills_gemini_2_5_pro_by_its_tier(clock: ug.ManualClock) -> None:
    doc = {
        "models": {"gemini-2.5-pro": {"provider": "gemini"}},
        "limits": {"platform": {"rules": [{"metric": "cost", "amount": 1000.0, "window": "day"}]}},
        "settings": {"anonymous": "refuse"},
    }
    guard = ug.Guard(ug.Policy.from_dict(doc), clock=clock)
    call(guard, "gemini-2.5-pro", 200_000, 0)
    call(guard, "gemini-2.5-pro", 400_000, 0)
    assert cost_used(guard, "alice", "gemini-2.5-pro") == 250_000 + 1_000_000


def test_reasoning_billed_at_its_own_rate(clock: ug.ManualClock) -> None:
    guard = tiered(clock, prices={"input": 0, "output": 1.0, "reasoning": 4.0})
    call(guard, "long", 0, ONE_M, reasoning_tokens=ONE_M // 4)
    assert cost_used(guard, "alice", "long") == 750_000 + 1_000_000
    with pytest.raises(ug.PolicyError) as e:
        tiered(clock, prices={"input": 1, "output": 1, "long_context": {"input": 2}})
    messages = {err["path"]: err["message"] for err in e.value.errors}
    assert messages["models.long.prices.long_context.above_input_tokens"] == "is required"
    assert messages["models.long.prices.long_context.output"] == "is required"


def test_check_names_the_unpriced_model_trap(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        '[models.mine]\nprovider = "other"\n\n[[limits.user_total]]\nuser = "alice"\n'
        'rules = [{ metric = "cost", amount = 5.0, window = "day" }]\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "usage_guard.cli", "check", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "models.mine.prices: is required: the user_total for alice counts the cost" in (
        done.stdout
    )


def test_a_price_table_must_give_both_rates(tmp_path: Path) -> None:
    """A rate left out would price that side of every call at 0: a cost cap over the model
    would count nothing for it."""
    doc: dict[str, Any] = {
        "models": {"my-model": {"provider": "openai", "prices": {"input": 2.5}}},
        "limits": {
            "user_total": [
                {"user": "alice", "rules": [{"metric": "cost", "amount": 1.0, "window": "day"}]}
            ]
        },
        "settings": {"anonymous": "refuse"},
    }
    for prices, missing in (({"input": 2.5}, ["output"]), ({}, ["input", "output"])):
        doc["models"]["my-model"]["prices"] = prices
        with pytest.raises(ug.PolicyError) as e:
            ug.Policy.from_dict(doc)
        paths = {err["path"]: err["message"] for err in e.value.errors}
        for key in missing:
            assert paths[f"models.my-model.prices.{key}"] == "is required"
    # A prices file's entry, too.
    partial = tmp_path / "prices.toml"
    partial.write_text('[models."my-model"]\noutput = 4.0\n')
    del doc["models"]["my-model"]["prices"]
    doc["settings"]["prices_file"] = str(partial)
    with pytest.raises(ug.PolicyError) as e:
        ug.Policy.from_dict(doc)
    assert [err["path"] for err in e.value.errors] == [f"{partial}: models.my-model.input"]


def test_a_model_given_twice_in_a_json_prices_file_is_an_error(tmp_path: Path) -> None:
    """JSON parsers keep the last of two entries: the second would silently replace the
    first's price (here with 0)."""
    prices = tmp_path / "prices.json"
    prices.write_text(
        '{"models": {"my-ft": {"input": 3.0, "output": 12.0}, "my-ft": {"input": 0, "output": 0}}}'
    )
    doc = {"models": {"my-ft": {"provider": "openai"}}, "settings": {"prices_file": str(prices)}}
    with pytest.raises(ug.PolicyError) as e:
        ug.Policy.from_dict(doc)
    [error] = e.value.errors
    assert error["path"] == f"{prices}: models.my-ft"
    assert error["message"].startswith("is given twice in one table")


@pytest.mark.parametrize(
    ("model", "dollars"), [("gpt-4o-2024-05-13", 20), ("gpt-4o-2024-08-06", 12.5)]
)
def test_a_snapshot_with_its_own_price_is_priced_by_it(
    clock: ug.ManualClock, model: str, dollars: float
) -> None:
    # gpt-4o's first snapshot kept its launch price ($5 / $15): it was priced as gpt-4o.
    doc = {
        "models": {model: {"provider": "openai"}},
        "limits": {
            "direct": [
                {
                    "user": "alice",
                    "model": model,
                    "rules": [{"metric": "cost", "amount": 100.0, "window": "day"}],
                }
            ]
        },
    }
    guard = ug.Guard(ug.Policy.from_dict(doc), clock=clock)
    call(guard, model, ONE_M, ONE_M)
    assert cost_used(guard, "alice", model) == dollars * 1_000_000

"""Shared pieces of the provider tests: the policy, and reading what a guard billed."""

from __future__ import annotations

import math
import time
from typing import Any, Optional

import usage_guard as ug

MODELS: dict[str, dict[str, Any]] = {
    "gpt-4o": {
        "provider": "openai",
        "max_output_tokens": 16384,
        "prices": {"input": 2.5, "cached_input": 1.25, "output": 10.0},
    },
    "text-embedding-3-small": {"provider": "openai", "prices": {"input": 0.02, "output": 0.0}},
    "claude-haiku-4-5": {
        "provider": "anthropic",
        "max_output_tokens": 64000,
        "prices": {"input": 3.0, "cached_input": 0.3, "output": 15.0},
    },
    # Local models cost nothing: a price of 0 says so (a cost rule needs a price).
    "llama3.2": {
        "provider": "ollama",
        "max_output_tokens": 8192,
        "prices": {"input": 0, "output": 0},
    },
    "nomic-embed-text": {"provider": "ollama", "prices": {"input": 0, "output": 0}},
}


def policy(
    tokens_a_day: int = 1_000_000, users: tuple[str, ...] = ("alice", "bob"), **extra: Any
) -> dict[str, Any]:
    """Every user gets `tokens_a_day` tokens a day on every model (a Direct Limit), and a
    generous cost rule so that cost is metered too; `extra` rules are added to each limit."""
    rules = [
        {"metric": "tokens", "amount": tokens_a_day, "window": "day"},
        {"metric": "cost", "amount": 1000.0, "window": "month"},
    ] + list(extra.get("rules", []))
    return {
        "models": {name: {"display_name": name, **spec} for name, spec in MODELS.items()},
        "limits": {
            "direct": [
                {"user": user, "model": model, "rules": rules} for user in users for model in MODELS
            ]
        },
    }


def used(guard: ug.Guard, user: str, model: str, metric: str = "tokens") -> int:
    """What `user` has used of `metric` on `model` (billed, not reserved)."""
    view = guard.usage(user, model)
    for rule in view["rules"]:
        if rule["metric"] == metric:
            return int(rule["used"])
    raise AssertionError(f"no {metric} rule in {view}")


def reserved(guard: ug.Guard, user: str, model: str, metric: str = "tokens") -> int:
    view = guard.usage(user, model)
    return sum(int(r["reserved"]) for r in view["rules"] if r["metric"] == metric)


def settled(guard: ug.Guard, model: str, seconds: float = 5.0, user: str = "alice") -> bool:
    """Waits up to `seconds` for `user`'s holds on `model` to be given back: a gateway bills a
    stream after relaying its last event, so its client may read the end before the bill."""
    deadline = time.monotonic() + seconds
    while reserved(guard, user, model) and time.monotonic() < deadline:
        time.sleep(0.02)
    return reserved(guard, user, model) == 0


def cost_micros(
    prices: dict[str, float], input_tokens: int, output_tokens: int, cached: int = 0
) -> int:
    per_million = (
        (input_tokens - cached) * prices["input"]
        + cached * prices.get("cached_input", prices["input"])
        + output_tokens * prices["output"]
    )
    return math.ceil(per_million)  # dollars per million × tokens = micro-dollars, rounded up


def prompt_tokens(request: dict[str, Any], provider: str, model: Optional[str] = None) -> int:
    return int(ug._core.count_prompt(request, provider=provider, model=model)["tokens"])


def room(
    left: int, request: dict[str, Any], provider: str, model: str, margin: float = 0.05
) -> int:
    """The output maximum `fit` leaves when `left` tokens are left: the prompt, plus the margin
    when the count is an estimate, comes off first."""
    count = ug._core.count_prompt(request, provider=provider, model=model)
    kept = 0 if count["exact"] else math.ceil(count["tokens"] * margin)
    return left - int(count["tokens"]) - kept

"""Another name for the same model is not a free model (issue 30, item 1): a declared model's
aliases, provider snapshot names, Ollama's `:latest`, letter case and spaces around all
resolve to the declared model and use its counters, in `Guard.admit` and at every gateway
endpoint; an undeclared model is refused by default; the upstream gets the caller's name."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import ollama
import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider

KEY = "sk-alice-secret"
MESSAGES = [{"role": "user", "content": "Say hello a few times."}]
NAMES = ["gpt-4o-2024-08-06", "GPT-4o", " gpt-4o ", "gpt-4o-latest", "4o"]


def names_policy(tokens: int = 100, aliases: bool = False, **settings: Any) -> dict[str, Any]:
    """alice has 100 tokens a day on gpt-4o (a Direct Limit; with `aliases`, also named
    "4o"), on claude-sonnet-4-5 and on llama (Ollama's)."""
    rules = [{"metric": "tokens", "amount": tokens, "window": "day"}]
    return {
        "models": {
            "gpt-4o": {"provider": "openai", **({"aliases": ["4o"]} if aliases else {})},
            "claude-sonnet-4-5": {"provider": "anthropic"},
            "llama": {"provider": "ollama"},
        },
        "limits": {
            "direct": [
                {"user": "alice", "model": m, "rules": rules}
                for m in ("gpt-4o", "claude-sonnet-4-5", "llama")
            ]
        },
        "settings": {"anonymous": "refuse", **settings},
    }


def used(guard: ug.Guard, model: str) -> int:
    [rule] = [r for r in guard.usage("alice", model)["rules"] if r["metric"] == "tokens"]
    return int(rule["used"])


def test_every_name_of_a_declared_model_counts_on_its_counters(clock: ug.ManualClock) -> None:
    guard = ug.Guard(ug.Policy.from_dict(names_policy(aliases=True)), clock=clock)
    for name in NAMES:
        ticket = guard.admit("alice", name, prompt_tokens=10, max_tokens=10)
        assert ticket.model == "gpt-4o"
        ticket.bill(input_tokens=10, output_tokens=10)
    assert used(guard, "gpt-4o") == 100
    assert used(guard, "GPT-4O-2024-11-20") == 100  # usage resolves the same way
    for name in ["gpt-4o", *NAMES]:
        with pytest.raises(ug.UsageLimitError) as e:
            guard.admit("alice", name, prompt_tokens=10, max_tokens=10)
        assert e.value.limit_type == "direct", name
        assert not isinstance(e.value, ug.ModelNotFound)


def test_the_issue_scenario_alice_refused_on_every_spelling(clock: ug.ManualClock) -> None:
    guard = ug.Guard(ug.Policy.from_dict(names_policy()), clock=clock)
    guard.admit("alice", "gpt-4o", prompt_tokens=50, max_tokens=50).bill(
        input_tokens=50, output_tokens=50
    )
    for name in ["gpt-4o", "gpt-4o-2024-08-06", "GPT-4o", " gpt-4o "]:
        with pytest.raises(ug.UsageLimitError) as e:
            guard.admit("alice", name, prompt_tokens=1, max_tokens=1)
        assert e.value.reason == "USAGE_LIMIT_REACHED", name
    assert used(guard, "gpt-4o") == 100


def test_ollama_latest_tag_and_anthropic_dates_are_the_model(clock: ug.ManualClock) -> None:
    guard = ug.Guard(ug.Policy.from_dict(names_policy()), clock=clock)
    for name in ("llama:latest", "llama", "LLAMA:latest"):
        guard.admit("alice", name, prompt_tokens=20, max_tokens=10).bill(
            input_tokens=20, output_tokens=10
        )
    assert used(guard, "llama") == 90
    for name in ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5@20250929"):
        assert guard.admit("alice", name, prompt_tokens=1, max_tokens=1).model == (
            "claude-sonnet-4-5"
        )


def test_an_undeclared_model_is_refused_by_default(clock: ug.ManualClock) -> None:
    guard = ug.Guard(ug.Policy.from_dict(names_policy()), clock=clock)
    for name in ("gpt-4o-mini", "llama2", "gpt-4o-2024-13-40", "gpt-4o-turbo"):
        with pytest.raises(ug.ModelNotFound) as e:
            guard.admit("alice", name, prompt_tokens=1, max_tokens=1)
        assert e.value.to_http("openai")[0] == 404
    # Allowing them is an explicit choice; they are billed to public use with no limit.
    allowing = ug.Guard(ug.Policy.from_dict(names_policy(unknown_models="allow")), clock=clock)
    ticket = allowing.admit("alice", " Some-Model ", prompt_tokens=1, max_tokens=1)
    assert ticket.model == "some-model" and ticket.source["type"] == "public"


def test_colliding_names_are_refused_naming_both() -> None:
    doc = names_policy(aliases=True)
    doc["models"]["gpt-4o-mini"] = {"provider": "openai", "aliases": ["4O", "mini"]}
    doc["models"]["GPT-4o"] = {"provider": "openai"}
    doc["models"]["llama:latest"] = {"provider": "ollama"}
    with pytest.raises(ug.PolicyError) as e:
        ug.Policy.from_dict(doc)
    found = {err["path"]: err["message"] for err in e.value.errors}
    assert (
        "the model gpt-4o (at models.gpt-4o.aliases[0])" in found["models.gpt-4o-mini.aliases[0]"]
    )
    assert "the model gpt-4o (at models.gpt-4o)" in found["models.GPT-4o"]
    assert "the model llama (at models.llama)" in found['models."llama:latest"']
    assert "models.gpt-4o-mini.aliases[1]" not in found


def test_a_rule_on_a_model_counts_its_other_names(clock: ug.ManualClock) -> None:
    doc = names_policy(tokens=10_000, aliases=True)
    doc["rules"] = [
        {
            "name": "two on 4o",
            "applies_when": {"model": "GPT-4o-2024-08-06"},
            "amount": "requests",
            "budget": 2,
            "window": "day",
        }
    ]
    guard = ug.Guard(ug.Policy.from_dict(doc), clock=clock)
    for name in ("4o", "gpt-4o"):
        guard.admit("alice", name, prompt_tokens=1, max_tokens=1).bill(
            input_tokens=1, output_tokens=1
        )
    with pytest.raises(ug.UsageLimitError) as e:
        guard.admit("alice", "gpt-4o-latest", prompt_tokens=1, max_tokens=1)
    assert e.value.limit_type == "rule"


def test_check_lists_each_model_s_names_and_warns_when_undeclared_escape(tmp_path: Path) -> None:
    doc = names_policy(aliases=True, unknown_models="allow")
    path = tmp_path / "p.json"
    path.write_text(__import__("json").dumps(doc))
    done = subprocess.run(
        [sys.executable, "-m", "usage_guard.cli", "check", "--strict", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = done.stdout
    assert done.returncode == 1, out
    assert "models: gpt-4o (also 4o; " in out and "llama (" in out
    assert "-2024-08-06" in out and ":latest" in out
    assert 'settings.unknown_models: is "allow" beside per-model limits' in out
    assert "escapes them" in out


# ---------------------------------------------------------------- through the gateway


@pytest.fixture
def gateway(fake: FakeProvider, clock: ug.ManualClock) -> Iterator[tuple[ug.Guard, ug.Gateway]]:
    doc = names_policy(tokens=40)
    doc["providers"] = {p: {"base_url": fake.url} for p in ("openai", "anthropic", "ollama")}
    doc["gateway"] = {"keys": {"alice": {"key": KEY, "principal": "alice"}}}
    guard = ug.Guard(ug.Policy.from_dict(doc), clock=clock)
    running = ug.Gateway(guard, "127.0.0.1:0")
    yield guard, running
    running.shutdown()
    assert running.wait(10)


def test_the_gateway_counts_every_spelling_on_the_model(fake: FakeProvider, gateway: Any) -> None:
    guard, running = gateway
    client = openai.OpenAI(base_url=f"{running.url}/v1", api_key=KEY, max_retries=0)
    client.chat.completions.create(model="GPT-4o-2024-08-06", messages=MESSAGES, max_tokens=5)
    # The upstream got the snapshot the caller asked for; the use is gpt-4o's: 21 in, and
    # the 12 out the fake reports clamped to the 5 reserved.
    assert fake.requests[0].body["model"] == "GPT-4o-2024-08-06"
    assert used(guard, "gpt-4o") == 26
    for name in ["gpt-4o", "gpt-4o-2024-08-06", "GPT-4o", " gpt-4o ", "gpt-4o-latest"]:
        with pytest.raises(openai.RateLimitError) as e:
            client.chat.completions.create(model=name, messages=MESSAGES, max_tokens=5)
        assert e.value.response.json()["error"]["code"] == "usage_limit_reached", name
    assert len(fake.requests) == 1


def test_the_gateway_refuses_an_undeclared_model_in_each_shape(
    fake: FakeProvider, gateway: Any
) -> None:
    _, running = gateway
    client = openai.OpenAI(base_url=f"{running.url}/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    body = e.value.response.json()
    assert body["error"]["code"] == "model_not_found" and body["error"]["param"] == "model"
    claude = anthropic.Anthropic(base_url=running.url, api_key=KEY, max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as a:
        claude.messages.create(model="claude-opus-9", max_tokens=5, messages=MESSAGES)
    assert a.value.response.json()["error"]["type"] == "not_found_error"
    local = ollama.Client(host=running.url, headers={"authorization": f"Bearer {KEY}"})
    with pytest.raises(ollama.ResponseError) as o:
        local.chat(model="mistral", messages=MESSAGES)
    assert o.value.status_code == 404
    assert fake.requests == []


def test_the_gateway_resolves_ollama_latest(fake: FakeProvider, gateway: Any) -> None:
    guard, running = gateway
    local = ollama.Client(host=running.url, headers={"authorization": f"Bearer {KEY}"})
    local.chat(model="llama:latest", messages=MESSAGES, options={"num_predict": 5})
    assert fake.requests[0].body["model"] == "llama:latest"
    assert used(guard, "llama") == 26
    with pytest.raises(ollama.ResponseError) as e:
        local.chat(model="llama", messages=MESSAGES, options={"num_predict": 5})
    assert e.value.status_code == 429


def test_the_gateway_doc_example_policy_passes_check_strict(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "gateway.md").read_text()
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    assert "[gateway.keys." in example  # the example policy of the page, not another block
    path = tmp_path / "policy.toml"
    path.write_text(example)
    done = subprocess.run(
        [sys.executable, "-m", "usage_guard.cli", "check", "--strict", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout
    assert "other models: refused" in done.stdout

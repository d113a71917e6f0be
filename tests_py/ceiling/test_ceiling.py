"""The usage ceiling from Python: counting, fitting per provider, refusals, usage_capped,
router intersection, and a ticket's ceiling fitted into a real call."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import usage_guard as ug

GPT5: dict[str, Any] = {
    "display_name": "GPT-5",
    "provider": "openai",
    "context_window": 400000,
    "max_output_tokens": 128000,
    "prices": {"input": 1.25, "cached_input": 0.125, "output": 10.0},
}


def ceiling(tokens: int | None, max_out: int = 8192, **kw: Any) -> dict[str, Any]:
    c: dict[str, Any] = {
        "tokens": tokens,
        "cost_micros": None,
        "rates": None,
        "max_output_tokens": max_out,
        "min_output_tokens": 256,
        "margin": 0.05,
    }
    c.update(kw)
    return c


COOKBOOK = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate "
        "jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities "
        "for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client "
        "deliverable.",
    },
]


@pytest.mark.parametrize(
    ("model", "expected"),
    [("gpt-4", 129), ("gpt-3.5-turbo", 129), ("gpt-4o", 124), ("gpt-4o-mini", 124)],
)
def test_cookbook_counts(model: str, expected: int) -> None:
    count = ug.count_prompt({"model": model, "messages": COOKBOOK})
    assert count == {
        "tokens": expected,
        "exact": True,
        "encoding": "cl100k_base" if expected == 129 else "o200k_base",
    }


def test_count_tokens() -> None:
    assert ug.count_tokens("tiktoken is great!") == 6
    assert ug.count_tokens("お誕生日おめでとう", "cl100k_base") == 9
    long = "A long prompt that releases the GIL. " * 10_000
    framed = ug.count_prompt({"model": "gpt-4o", "messages": [{"role": "user", "content": long}]})
    assert ug.count_tokens(long) == framed["tokens"] - 7 > 70_000
    with pytest.raises(ValueError, match="encoding.*accepted: o200k_base.*o300k"):
        ug.count_tokens("x", "o300k")
    with pytest.raises(TypeError, match="text: must be a str"):
        ug.count_tokens(b"bytes")  # type: ignore[arg-type]


def test_count_prompt_estimates_for_unknown_tokenizers() -> None:
    count = ug.count_prompt(
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
        },
        provider="anthropic",
    )
    assert count["exact"] is False and count["tokens"] > 0


def test_policy_declares_encoding() -> None:
    policy = ug.Policy.from_dict(
        {"models": {"house": {"provider": "other", "encoding": "cl100k_base", "counting": "exact"}}}
    )
    count = ug.count_prompt({"model": "house", "messages": COOKBOOK}, policy=policy)
    assert count == {"tokens": 129, "exact": True, "encoding": "cl100k_base"}


CASES: list[tuple[str, dict[str, Any], Callable[[dict[str, Any]], Any]]] = [
    (
        "openai",
        {
            "model": "gpt-4o",
            "max_completion_tokens": 4000,
            "messages": [{"role": "user", "content": "hello " * 50}],
        },
        lambda r: r["max_completion_tokens"],
    ),
    (
        "openai",
        {
            "model": "gpt-4o",
            "max_tokens": 4000,
            "messages": [{"role": "user", "content": "hello " * 50}],
        },
        lambda r: r["max_tokens"],
    ),
    (
        "openai.responses",
        {"model": "gpt-5", "max_output_tokens": 4000, "input": "hello " * 50},
        lambda r: r["max_output_tokens"],
    ),
    (
        "anthropic",
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 4000,
            "messages": [{"role": "user", "content": "hello " * 50}],
        },
        lambda r: r["max_tokens"],
    ),
    (
        "gemini",
        {
            "contents": [{"role": "user", "parts": [{"text": "hello " * 50}]}],
            "generationConfig": {"maxOutputTokens": 4000},
        },
        lambda r: r["generationConfig"]["maxOutputTokens"],
    ),
    (
        "ollama",
        {
            "model": "llama3.1",
            "options": {"num_predict": 4000},
            "messages": [{"role": "user", "content": "hello " * 50}],
        },
        lambda r: r["options"]["num_predict"],
    ),
    (
        "ollama.generate",
        {"model": "llama3.1", "options": {"num_predict": 4000}, "prompt": "hello " * 50},
        lambda r: r["options"]["num_predict"],
    ),
]


@pytest.mark.parametrize(("provider", "request_", "field"), CASES)
def test_fit_per_provider(
    provider: str, request_: dict[str, Any], field: Callable[[dict[str, Any]], Any]
) -> None:
    count = ug.count_prompt(request_, provider=provider)
    prompt = count["tokens"] if count["exact"] else count["tokens"] + -(-count["tokens"] * 5 // 100)
    # Fits untouched.
    roomy = ug.fit(request_, ceiling(100_000), provider=provider)
    assert roomy.request == request_ and not roomy.lowered and roomy.max_output_tokens == 4000
    # Lowered in the provider's own field.
    tight = ug.fit(request_, ceiling(prompt + 1000), provider=provider)
    assert field(tight.request) == 1000 == tight.max_output_tokens
    assert tight.lowered and tight.output_capped
    assert request_ == dict(request_)  # the caller's request is not changed in place
    assert field(request_) == 4000
    # Refused before any provider sees it.
    with pytest.raises(ug.UsageLimitDoesNotFit) as info:
        ug.fit(request_, ceiling(prompt + 100), provider=provider)
    assert info.value.reason == "USAGE_LIMIT_DOES_NOT_FIT"
    assert isinstance(info.value, ug.UsageLimitError)


def test_anthropic_thinking() -> None:
    req = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 16000,
        "thinking": {"type": "enabled", "budget_tokens": 10000},
        "messages": [{"role": "user", "content": "Prove it."}],
    }
    count = ug.count_prompt(req, provider="anthropic")["tokens"]
    prompt = count + -(-count * 5 // 100)
    lowered = ug.fit(req, ceiling(prompt + 3000, 16000), provider="anthropic")
    assert lowered.request["thinking"] == {"type": "enabled", "budget_tokens": 2999}
    assert lowered.thinking_budget == 2999
    off = ug.fit(req, ceiling(prompt + 900, 16000), provider="anthropic")
    assert off.request["thinking"] == {"type": "disabled"} and off.thinking_disabled
    assert off.request["max_tokens"] == 900


def test_cost_bound() -> None:
    req = {
        "model": "gpt-4o",
        "max_completion_tokens": 4000,
        "messages": [{"role": "user", "content": "hi"}],
    }
    prompt = ug.count_prompt(req)["tokens"]
    rates = {"input": 2.5, "cached_input": 1.25, "output": 10.0}
    prompt_cost = -(-prompt * 2_500_000 // 1_000_000)
    r = ug.fit(req, ceiling(None, cost_micros=prompt_cost + 3000, rates=rates))
    assert r.max_output_tokens == 300


def test_context_window_refusal_http_shape() -> None:
    req = {"model": "gpt-4", "messages": [{"role": "user", "content": "word " * 9000}]}
    with pytest.raises(ug.ContextWindowExceeded) as info:
        ug.fit(req, ceiling(None))
    status, _headers, body = info.value.to_http("openai")
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"
    assert "8,192 tokens" in str(info.value)
    capped = {
        "model": "gpt-4",
        "max_completion_tokens": 8000,
        "messages": [{"role": "user", "content": "word " * 500}],
    }
    assert (
        ug.fit(capped, ceiling(None)).max_output_tokens == 8192 - ug.count_prompt(capped)["tokens"]
    )
    with pytest.raises(ug.ContextWindowExceeded):
        ug.fit(capped, ceiling(None), require_full_output=True)


def test_usage_capped() -> None:
    req = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4000,
        "messages": [{"role": "user", "content": "hi"}],
    }
    capped = ug.fit(req, ceiling(1000), provider="anthropic")
    assert ug.usage_capped({"stop_reason": "max_tokens"}, capped)
    assert not ug.usage_capped({"stop_reason": "end_turn"}, capped)
    own = ug.fit(req, ceiling(100_000), provider="anthropic")
    assert not ug.usage_capped({"stop_reason": "max_tokens"}, own)


def test_intersect_ceilings() -> None:
    a = ceiling(
        20_000, 8000, cost_micros=50_000, rates={"input": 1.0, "cached_input": 0.1, "output": 4.0}
    )
    b = ceiling(
        5_000, 16_000, cost_micros=80_000, rates={"input": 3.0, "cached_input": 0.3, "output": 15.0}
    )
    both = ug.intersect_ceilings(a, b)
    assert (
        both["tokens"] == 5_000
        and both["cost_micros"] == 50_000
        and both["max_output_tokens"] == 8000
    )
    assert both["rates"] == {"input": 3.0, "cached_input": 0.3, "output": 15.0}


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="provider.*accepted: openai"):
        ug.fit({}, ceiling(1), provider="azure")
    with pytest.raises(ValueError, match="request.messages"):
        ug.fit({"model": "gpt-4o"}, ceiling(1000))
    with pytest.raises(ValueError, match="ceiling.max_output_tokens"):
        ug.fit({"model": "gpt-4o", "messages": []}, {"tokens": 5})
    with pytest.raises(ValueError, match="ceiling.tokenz"):
        ug.fit({"model": "gpt-4o", "messages": []}, {"tokenz": 5, "max_output_tokens": 5})
    with pytest.raises(ValueError, match="request.max_completion_tokens"):
        ug.fit({"model": "gpt-4o", "max_completion_tokens": "many", "messages": []}, ceiling(1000))


def test_ticket_ceiling_fits_the_call(make_guard: Callable[..., ug.Guard]) -> None:
    guard = make_guard(
        {
            "models": {"gpt-5": GPT5},
            "limits": {
                "direct": [
                    {
                        "user": "alice",
                        "model": "gpt-5",
                        "rules": [{"metric": "tokens", "amount": 3000, "window": "day"}],
                    }
                ]
            },
        }
    )
    req = {
        "model": "gpt-5",
        "max_completion_tokens": 8000,
        "messages": [{"role": "user", "content": "hello " * 100}],
    }
    prompt = ug.count_prompt(req)["tokens"]
    ticket = guard.admit("alice", "gpt-5", prompt_tokens=prompt, max_tokens=8000)
    fitted = ug.fit(req, ticket.ceiling)
    assert prompt + fitted.max_output_tokens <= 3000
    assert fitted.request["max_completion_tokens"] == fitted.max_output_tokens < 8000
    ticket.release()


def test_long_counts_release_the_gil() -> None:
    import threading

    ticks = 0
    stop = False

    def spin() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1

    t = threading.Thread(target=spin)
    t.start()
    try:
        text = "Tokens are counted with the GIL released. " * 100_000
        before = ticks
        ug.count_tokens(text)
        during = ticks - before
    finally:
        stop = True
        t.join()
    # Holding the GIL for the whole count would leave the other thread (almost) no turns.
    assert during > 10_000, during


def test_routing_group_counts_the_largest() -> None:
    req = {"messages": [{"role": "user", "content": "お誕生日おめでとう 東京 データ 用户 限额"}]}
    gpt4 = ug.count_prompt(req, model="gpt-4")
    group = ug.count_prompt(req, model=["gpt-4o", "gpt-4"])
    assert group == gpt4 and gpt4["tokens"] > ug.count_prompt(req, model="gpt-4o")["tokens"]
    with pytest.raises(TypeError, match="model: must be a model id"):
        ug.count_prompt(req, model=3)  # type: ignore[arg-type]

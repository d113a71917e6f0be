"""Property tests: for any request and ceiling, a fitted call's prompt + output maximum stays
within `tokens`, its cost at the rates within `cost_micros`, and its output maximum never
rises above the caller's, the model's or the ceiling's."""

from __future__ import annotations

import math
from typing import Any, Optional

import usage_guard as ug
from hypothesis import given, settings
from hypothesis import strategies as st

MODELS = {
    "openai": ["gpt-4o", "gpt-4", "gpt-5", "o3"],
    "openai.responses": ["gpt-5", "gpt-4.1"],
    "anthropic": ["claude-sonnet-4-5", "claude-opus-4-1", "claude-3-5-haiku"],
    "gemini": ["gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite"],
    "ollama": ["llama3.1"],
    "ollama.generate": ["llama3.1"],
}
MODEL_MAX = {
    "gpt-4o": 16384,
    "gpt-4": 8192,
    "gpt-5": 128000,
    "o3": 100000,
    "gpt-4.1": 32768,
    "claude-sonnet-4-5": 64000,
    "claude-opus-4-1": 32000,
    "claude-3-5-haiku": 8192,
    "gemini-2.5-pro": 65536,
    "gemini-2.5-flash": 65536,
    "gemini-2.5-flash-lite": 65536,
}

text = st.text(max_size=400)
maybe_max = st.one_of(st.none(), st.integers(min_value=1, max_value=200_000))


@st.composite
def calls(draw: Any) -> tuple[str, dict[str, Any], Optional[int]]:
    provider = draw(st.sampled_from(sorted(MODELS)))
    model = draw(st.sampled_from(MODELS[provider]))
    messages = [
        {"role": draw(st.sampled_from(["user", "assistant"])), "content": draw(text)}
        for _ in range(draw(st.integers(1, 4)))
    ]
    cap = draw(maybe_max)
    req: dict[str, Any]
    if provider == "openai":
        req = {"model": model, "messages": messages}
        if cap is not None:
            req[draw(st.sampled_from(["max_tokens", "max_completion_tokens"]))] = cap
    elif provider == "openai.responses":
        req = {"model": model, "input": messages}
        if cap is not None:
            req["max_output_tokens"] = cap
    elif provider == "anthropic":
        req = {"model": model, "messages": messages, "max_tokens": cap or 4096}
        cap = cap or 4096
        if draw(st.booleans()):
            req["thinking"] = {"type": "enabled", "budget_tokens": draw(st.integers(1024, 50_000))}
    elif provider == "gemini":
        req = {
            "model": model,
            "contents": [{"role": "user", "parts": [{"text": m["content"]}]} for m in messages],
            "generationConfig": {},
        }
        if cap is not None:
            req["generationConfig"]["maxOutputTokens"] = cap
        if draw(st.booleans()):
            req["generationConfig"]["thinkingConfig"] = {
                "thinkingBudget": draw(st.integers(1, 30_000))
            }
    elif provider == "ollama":
        req = {
            "model": model,
            "messages": messages,
            "options": {"num_predict": cap if cap is not None else -1},
        }
    else:
        req = {
            "model": model,
            "prompt": draw(text),
            "options": {} if cap is None else {"num_predict": cap},
        }
    return provider, req, cap


@st.composite
def ceilings(draw: Any) -> dict[str, Any]:
    with_cost = draw(st.booleans())
    return {
        "tokens": draw(st.one_of(st.none(), st.integers(0, 300_000))),
        "cost_micros": draw(st.integers(0, 5_000_000)) if with_cost else None,
        "rates": {
            "input": draw(st.floats(0, 20, allow_nan=False)),
            "cached_input": draw(st.floats(0, 20, allow_nan=False)),
            "output": draw(st.floats(0.01, 80, allow_nan=False)),
        }
        if with_cost
        else None,
        "max_output_tokens": draw(st.integers(1, 150_000)),
        "min_output_tokens": draw(st.integers(0, 2_000)),
        "margin": draw(st.sampled_from([0.0, 0.05, 0.2])),
    }


@settings(max_examples=400, deadline=None)
@given(calls(), ceilings())
def test_fitted_calls_stay_within_the_ceiling(
    call: tuple[str, dict[str, Any], Optional[int]], c: dict[str, Any]
) -> None:
    provider, req, cap = call
    try:
        r = ug.fit(req, c, provider=provider)
    except ug.UsageLimitError as e:
        assert e.reason in ("USAGE_LIMIT_DOES_NOT_FIT", "CONTEXT_WINDOW_EXCEEDED")
        return
    out = r.max_output_tokens
    assert out is not None and out >= 1
    prompt = (
        r.prompt_tokens
        if r.prompt_exact
        else r.prompt_tokens + math.ceil(r.prompt_tokens * c["margin"])
    )
    if c["tokens"] is not None:
        assert prompt + out <= c["tokens"]
    if c["cost_micros"] is not None:
        rate = {k: round(v * 1_000_000) for k, v in c["rates"].items()}
        pico = prompt * max(rate["input"], rate["cached_input"]) + out * rate["output"]
        assert -(-pico // 1_000_000) <= c["cost_micros"]
    assert out <= c["max_output_tokens"]
    if cap is not None:
        assert out <= cap
    assert out <= MODEL_MAX.get(req.get("model", ""), out)
    if r.thinking_budget is not None and provider == "anthropic":
        assert 1024 <= r.thinking_budget < out


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=2000), st.sampled_from(["o200k_base", "cl100k_base"]))
def test_counts_are_additive_over_messages(t: str, enc: str) -> None:
    model = "gpt-4o" if enc == "o200k_base" else "gpt-4"
    one = ug.count_prompt({"model": model, "messages": [{"role": "user", "content": t}]})
    assert one["tokens"] == ug.count_tokens(t, enc) + ug.count_tokens("user", enc) + 6

"""Every refusal is the right one (issue 11): `capped` only when a usage limit cut the answer,
the context window first for everyone, sliding rules that say when enough will be free (or
that it never will), and one rule for every numeric argument."""

from __future__ import annotations

from typing import Any, Callable

import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from usage_guard.openai import GuardedOpenAI

MESSAGES = [{"role": "user", "content": "Write on and on."}]

POLICY: dict[str, Any] = {
    "models": {
        # No token rule anywhere: only requests are limited.
        "gpt-4o": {"display_name": "GPT-4o", "max_output_tokens": 16384},
        # Priced (fractions of a micro-dollar a token), with a cost rule only: the output
        # room comes from the cost held, which must pay for the whole maximum.
        "gpt-4.1": {
            "display_name": "GPT-4.1",
            "max_output_tokens": 32768,
            "prices": {"input": 0.15, "output": 0.6},
        },
        # In the policy without a maximum: admission reserves the default.
        "gpt-5": {"display_name": "GPT-5", "context_window": 400000},
        "tight": {"display_name": "Tight", "max_output_tokens": 4000},
    },
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "gpt-4o",
                "rules": [{"metric": "requests", "amount": 100, "window": "day"}],
            },
            {
                "user": "alice",
                "model": "gpt-4.1",
                "rules": [{"metric": "cost", "amount": 1000.0, "window": "month"}],
            },
            {
                "user": "alice",
                "model": "gpt-5",
                "rules": [{"metric": "tokens", "amount": 20000, "window": "day"}],
            },
            {
                "user": "alice",
                "model": "tight",
                "rules": [{"metric": "tokens", "amount": 500, "window": "day"}],
            },
        ]
    },
}


@pytest.fixture
def fake(server: FakeProvider) -> FakeProvider:
    """The shared fake provider (conftest.py), reporting a model that would write on and on."""
    server.reset()
    server.input_tokens, server.output_tokens = 21, 200_000  # the model would write on and on
    server.cached_tokens = server.reasoning_tokens = 0
    return server


def client(fake: FakeProvider, guard: ug.Guard, user: str = "alice") -> GuardedOpenAI:
    sdk = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk-test", max_retries=0)
    return GuardedOpenAI(sdk, guard, user=user)


# --- 1. capped tells the truth ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "sent"),
    [
        ("gpt-4o", 16384),  # no token rule: the model's own maximum written in
        ("gpt-4.1", 32768),  # a cost rule with plenty left: the model's maximum
        ("gpt-5", 8192),  # no maximum in the policy: the default written in
        ("some-unknown-model", 8192),  # not in the policy: the default written in
    ],
)
def test_a_maximum_no_limit_lowered_is_not_capped(
    fake: FakeProvider, make_guard: Callable[..., ug.Guard], model: str, sent: int
) -> None:
    # A model the policy does not declare is refused unless the policy allows it.
    undeclared = model not in POLICY["models"]
    guard = make_guard(
        {**POLICY, "settings": {"unknown_models": "allow"}} if undeclared else POLICY
    )
    reply = client(fake, guard).chat.completions.create(model=model, messages=MESSAGES)
    assert fake.bodies("/v1/chat/completions")[0]["max_completion_tokens"] == sent
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage_limits["capped"] is False


def test_a_maximum_a_limit_lowered_is_capped(
    fake: FakeProvider, make_guard: Callable[..., ug.Guard]
) -> None:
    guard = make_guard(POLICY)
    guarded = client(fake, guard)
    # Asked nothing: the 500 tokens left are below the model's 4,000.
    reply = guarded.chat.completions.create(model="tight", messages=MESSAGES)
    sent = fake.bodies("/v1/chat/completions")[0]["max_completion_tokens"]
    assert sent < 500 and reply.choices[0].finish_reason == "length"
    assert reply.usage_limits["capped"] is True
    # The caller's own small maximum is not a cap, even on a limited model.
    fake.reset()
    guard = make_guard(POLICY)
    reply = client(fake, guard).chat.completions.create(
        model="tight", messages=MESSAGES, max_tokens=7
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage_limits["capped"] is False


def test_the_example_does_not_blame_a_usage_limit(
    fake: FakeProvider, make_guard: Callable[..., ug.Guard]
) -> None:
    guard = make_guard(POLICY)
    reply = client(fake, guard).chat.completions.create(model="gpt-5", messages=MESSAGES)
    # examples/openai_engine.py says "answer cut short: usage limit" exactly when this is true.
    assert not reply.usage_limits["capped"]


def ceiling(tokens: Any, max_out: int = 8192, **kw: Any) -> dict[str, Any]:
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


def test_fit_output_capped_only_below_what_the_call_has_without_limits() -> None:
    unknown = {"model": "some-unknown-model", "messages": MESSAGES}
    assert not ug.fit(unknown, ceiling(None)).output_capped  # the default written in
    assert ug.fit(unknown, ceiling(None)).max_output_tokens == 8192
    assert ug.fit(unknown, ceiling(2000)).output_capped  # what is left set it
    assert ug.fit(unknown, ceiling(None, 4000)).output_capped  # the ceiling's maximum
    known = {"model": "gpt-4o", "messages": MESSAGES}  # registry maximum 16,384
    policy = ug.Policy.from_dict(POLICY)
    own = ug.fit(known, ceiling(None, 16384), policy=policy)
    assert own.max_output_tokens == 16384 and not own.output_capped
    assert ug.fit(known, ceiling(5000, 16384), policy=policy).output_capped
    # The context window is not a usage limit.
    big = {"model": "gpt-4", "messages": [{"role": "user", "content": "word " * 7000}]}
    fitted = ug.fit(big, ceiling(None))
    assert fitted.max_output_tokens < 8192 - 7000 and not fitted.output_capped
    assert not ug.usage_capped("length", fitted)
    # A policy's default maximum counts as the call's own.
    policy = ug.Policy.from_dict({"settings": {"default_max_output_tokens": 1000}})
    small = ug.fit(unknown, ceiling(None, 1000), policy=policy)
    assert small.max_output_tokens == 1000 and not small.output_capped


# --- 3. context first, for everyone ----------------------------------------------------------


@pytest.mark.parametrize("user", ["alice", "bob", None])
@pytest.mark.parametrize("prompt", [450_000, 400_000, 2**53 + 1, 2**64 - 1])
def test_a_prompt_over_the_window_is_a_400_whoever_calls(
    make_guard: Callable[..., ug.Guard], user: Any, prompt: int
) -> None:
    guard = make_guard(POLICY)
    with pytest.raises(ug.ContextWindowExceeded) as e:
        guard.admit(user, "gpt-5", prompt_tokens=prompt)
    assert e.value.reason == "CONTEXT_WINDOW_EXCEEDED"
    assert "GPT-5's context window of 400,000 tokens" in str(e.value)
    status, headers, body = e.value.to_http("openai")
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"
    assert "x-should-retry" not in headers
    assert guard.stats()["refused"] == 1


def test_a_request_over_the_window_is_a_400_for_a_limited_user(
    fake: FakeProvider, make_guard: Callable[..., ug.Guard]
) -> None:
    guard = make_guard(POLICY)
    text = "word " * 410_000
    with pytest.raises(ug.ContextWindowExceeded) as e:
        client(fake, guard).chat.completions.create(
            model="gpt-5", messages=[{"role": "user", "content": text}]
        )
    assert "GPT-5's context window of 400,000 tokens" in str(e.value)
    assert fake.requests == []


# --- 4. a sliding rule that does not fit -----------------------------------------------------

HOURLY = {
    "models": {"gpt-5": {"display_name": "GPT-5", "max_output_tokens": 1000}},
    "limits": {
        "direct": [
            {
                "user": "alice",
                "model": "gpt-5",
                "rules": [{"metric": "tokens", "amount": 2000, "window": "hour"}],
            }
        ]
    },
}


def test_a_sliding_rule_that_does_not_fit_says_when(
    make_guard: Callable[..., ug.Guard], clock: ug.ManualClock
) -> None:
    guard = make_guard(HOURLY)
    clock.set("2026-11-30T13:30:00Z")
    guard.admit("alice", "gpt-5", prompt_tokens=1000, max_tokens=200).bill(1000, 200)
    clock.set("2026-11-30T14:10:00Z")
    guard.admit("alice", "gpt-5", prompt_tokens=400, max_tokens=100).bill(400, 100)
    clock.set("2026-11-30T14:20:00Z")  # 500 + 800 carried: 700 left
    with pytest.raises(ug.UsageLimitDoesNotFit) as e:
        guard.admit("alice", "gpt-5", prompt_tokens=900, max_tokens=100)
    assert e.value.resets_at == "2026-11-30T14:35:00Z"
    assert e.value.retry_after == 900 and e.value.is_rate_limit
    for provider in ("openai", "anthropic", "ollama"):
        status, headers, _body = e.value.to_http(provider)  # type: ignore[arg-type]
        assert status == 429
        assert headers["retry-after"] == "900" and headers["x-should-retry"] == "false"
    assert e.value.to_http("openai")[2]["error"]["code"] == "rate_limit_exceeded"
    clock.set("2026-11-30T14:34:59Z")
    with pytest.raises(ug.UsageLimitDoesNotFit):
        guard.admit("alice", "gpt-5", prompt_tokens=900, max_tokens=100)
    clock.set("2026-11-30T14:35:00Z")
    guard.admit("alice", "gpt-5", prompt_tokens=900, max_tokens=100).release()
    # Over the whole amount: it never will.
    with pytest.raises(ug.UsageLimitDoesNotFit) as never:
        guard.admit("alice", "gpt-5", prompt_tokens=2500, max_tokens=100)
    assert never.value.resets_at is None and never.value.retry_after is None
    assert "It never will" in str(never.value)
    _status, headers, body = never.value.to_http("openai")
    assert headers.get("x-should-retry") == "false" and "retry-after" not in headers
    assert body["error"]["code"] == "usage_limit_reached"


# --- 7. numbers ------------------------------------------------------------------------------

COUNT = r"a whole number from 0 to 18446744073709551615 \(2\*\*64-1\)"
AMOUNT = r"a whole number from 0 to 9007199254740992 \(2\*\*53\)"


def _ticket() -> ug.Ticket:
    guard = ug.Guard(ug.Policy.from_dict(POLICY))
    return guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=10)


def _admit(**kw: Any) -> Any:
    return ug.Guard(ug.Policy.from_dict(POLICY)).admit("alice", "gpt-5", **kw)


def _admit_async(**kw: Any) -> Any:
    import asyncio

    async def run() -> Any:
        return await ug.Guard(ug.Policy.from_dict(POLICY)).admit_async("alice", "gpt-5", **kw)

    return asyncio.run(run())


def _bill(**kw: Any) -> Any:
    args = {"input_tokens": 1, "output_tokens": 1, **kw}
    return _ticket().bill(**args)


def _bill_async(**kw: Any) -> Any:
    import asyncio

    ticket = _ticket()
    args = {"input_tokens": 1, "output_tokens": 1, **kw}
    return asyncio.run(ticket.bill_async(**args))


def _batch(**kw: Any) -> Any:
    guard = ug.Guard(ug.Policy.from_dict(POLICY))
    return guard.admit_batch("alice", "gpt-5", [{"id": "a", "prompt_tokens": 1, **kw}])


def _fit(**kw: Any) -> Any:
    return ug.fit({"model": "gpt-4o", "messages": MESSAGES}, ceiling(**{"tokens": None, **kw}))


CALLS: dict[str, tuple[Callable[..., Any], str, str]] = {
    "admit prompt_tokens": (_admit, "prompt_tokens", COUNT),
    "admit max_tokens": (_admit, "max_tokens", COUNT),
    "admit_async prompt_tokens": (_admit_async, "prompt_tokens", COUNT),
    "bill input_tokens": (_bill, "input_tokens", AMOUNT),
    "bill output_tokens": (_bill, "output_tokens", AMOUNT),
    "bill cached_input_tokens": (_bill, "cached_input_tokens", AMOUNT),
    "bill cost_micros": (_bill, "cost_micros", AMOUNT),
    "bill compute_ms": (_bill, "compute_ms", AMOUNT),
    "bill reasoning_tokens": (_bill, "reasoning_tokens", AMOUNT),
    "bill_async output_tokens": (_bill_async, "output_tokens", AMOUNT),
    "batch max_tokens": (_batch, "max_tokens", COUNT),
    "fit ceiling tokens": (_fit, "tokens", COUNT),
    "fit ceiling max_out": (_fit, "max_out", COUNT),
}


@pytest.mark.parametrize("case", sorted(CALLS))
@pytest.mark.parametrize("value", [100.0, float("nan"), "100", True, 1.5])
def test_a_wrong_type_is_a_type_error(case: str, value: Any) -> None:
    call, name, accepted = CALLS[case]
    with pytest.raises(TypeError, match=rf"{accepted} \(an int\), not ") as e:
        call(**{name: value})
    assert type(e.value) is TypeError
    shown = name if name != "max_out" else "max_output_tokens"
    assert shown in str(e.value) and repr(value) in str(e.value)


@pytest.mark.parametrize("case", sorted(CALLS))
@pytest.mark.parametrize("value", [-5, 2**70])
def test_out_of_range_is_a_value_error_saying_the_range(case: str, value: int) -> None:
    call, name, accepted = CALLS[case]
    with pytest.raises(ValueError, match=rf"must be {accepted} \(got {value}\)") as e:
        call(**{name: value})
    assert type(e.value) is ValueError


def test_amounts_stop_at_two_to_the_53() -> None:
    assert _bill(input_tokens=2**53, output_tokens=0)["input_tokens"] == 2**53
    with pytest.raises(ValueError, match=rf"input_tokens must be {AMOUNT} \(got {2**53 + 1}\)"):
        _bill(input_tokens=2**53 + 1)


@pytest.mark.parametrize("missing", ["input_tokens", "output_tokens"])
def test_bill_requires_its_token_counts(missing: str) -> None:
    ticket = _ticket()
    with pytest.raises(TypeError, match=rf"{missing} is required: {AMOUNT} \(an int\), not None"):
        ticket.bill(**{"input_tokens": 1, "output_tokens": 1, missing: None})
    assert not ticket.settled
    with pytest.raises(TypeError):
        ticket.bill(input_tokens=None, output_tokens=None)  # type: ignore[arg-type]
    assert ticket.bill(input_tokens=3, output_tokens=4) is not None


def test_ceiling_numbers_follow_the_rule() -> None:
    with pytest.raises(TypeError, match=r"ceiling\.margin: must be a finite number"):
        _fit(margin=True)
    with pytest.raises(TypeError, match=r"ceiling\.margin: must be a finite number"):
        _fit(margin="0.1")
    with pytest.raises(ValueError, match=r"ceiling\.margin: must be a finite number"):
        _fit(margin=float("nan"))
    with pytest.raises(ValueError, match=r"ceiling\.rates\.input: must be a finite number"):
        _fit(cost_micros=10, rates={"input": 10**400, "output": 1.0})


@pytest.mark.parametrize("value", [True, "5", None, [1]])
@pytest.mark.parametrize("unit", ["seconds", "minutes", "hours", "days"])
def test_manual_clock_advance_takes_numbers(unit: str, value: Any) -> None:
    clock = ug.ManualClock("2026-11-30T08:00:00Z")
    if value is None:  # the default: no move
        clock.advance(**{unit: value})
        assert clock.now() == "2026-11-30T08:00:00Z"
        return
    with pytest.raises(TypeError, match=rf"^{unit}: must be a number"):
        clock.advance(**{unit: value})
    assert clock.now() == "2026-11-30T08:00:00Z"


@pytest.mark.parametrize("kw", [{"seconds": float("nan")}, {"days": 2**1100}, {"hours": 1e300}])
def test_manual_clock_advance_refuses_moves_out_of_range(kw: dict[str, Any]) -> None:
    clock = ug.ManualClock("2026-11-30T08:00:00Z")
    with pytest.raises(ValueError, match=r"^seconds: "):
        clock.advance(**kw)
    assert clock.now() == "2026-11-30T08:00:00Z"
    clock.advance(1.5, minutes=2)
    assert clock.now_ms() - ug.ManualClock("2026-11-30T08:00:00Z").now_ms() == 121_500


def test_a_roomy_cost_rule_never_lowers_the_output_by_a_rounding(
    make_guard: Callable[..., ug.Guard],
) -> None:
    # Prompt and output cost fractions of a micro-dollar a token: the cost held must pay for
    # the model's whole maximum whatever the prompt's fraction, or the fit lowers the output
    # by a token or two and reports a cap no limit made.
    guard = make_guard(POLICY)
    for words in range(12):
        request = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "word " * words}]}
        ticket = guard.admit("alice", "gpt-4.1", request, provider="openai")
        assert ticket.fitted == {"max_completion_tokens": 32768}, words
        assert not ticket.capped("length")
        ticket.release()
